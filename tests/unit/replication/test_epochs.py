"""Leader epochs: the checkpoint file, where an epoch ends, and truncation (KIP-101, KIP-279)."""

from pathlib import Path

from broker.replication.epochs import FILE, LeaderEpochCache, parse, render


def test_the_checkpoint_is_kafkas_text_format_and_reads_back(tmp_path: Path):
    cache = LeaderEpochCache(tmp_path)
    assert cache.assign(0, 0) and cache.assign(3, 1458)
    assert not cache.assign(2, 2000)  # an older epoch never goes after a newer one
    assert (tmp_path / FILE).read_text() == "0\n2\n0 0\n3 1458\n"
    assert LeaderEpochCache.load(tmp_path, lambda: []).entries == [(0, 0), (3, 1458)]
    assert parse(render([(5, 7)])) == [(5, 7)]


def test_where_an_epoch_ends_as_offsets_for_leader_epoch_answers():
    cache = LeaderEpochCache(Path("/nonexistent"), [(0, 0), (3, 100), (5, 250)])
    assert cache.end_offset_for(5, 300) == (5, 300)  # the latest epoch ends at the log end
    assert cache.end_offset_for(3, 300) == (3, 250)
    assert cache.end_offset_for(4, 300) == (3, 250)  # unknown here: the largest epoch below it, and its end
    assert cache.end_offset_for(0, 300) == (0, 100)
    assert cache.end_offset_for(9, 300) == (-1, -1)  # past every known epoch
    assert LeaderEpochCache(Path("/nonexistent")).end_offset_for(1, 10) == (-1, -1)


def test_a_missing_or_damaged_file_is_rebuilt_from_the_batches(tmp_path: Path):
    batches = [(0, 0), (10, 0), (20, 2), (30, 2), (40, 4)]
    assert LeaderEpochCache.load(tmp_path, lambda: batches).entries == [(0, 0), (2, 20), (4, 40)]
    (tmp_path / FILE).write_text("garbage")
    assert LeaderEpochCache.load(tmp_path, lambda: batches[:3]).entries == [(0, 0), (2, 20)]
    assert (tmp_path / FILE).read_text() == "0\n2\n0 0\n2 20\n"


def test_truncation_forgets_the_epochs_that_began_past_the_new_end(tmp_path: Path):
    cache = LeaderEpochCache(tmp_path, [(0, 0), (3, 100), (5, 250)])
    cache.truncate_from_end(250)
    assert cache.entries == [(0, 0), (3, 100)]
    cache.truncate_from_end(100)
    assert cache.entries == [(0, 0)]
