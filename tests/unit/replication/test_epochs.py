"""Leader epochs: the checkpoint file, where an epoch ends, and truncation (KIP-101, KIP-279)."""

from pathlib import Path

from broker.replication.epochs import FILE, LeaderEpochCache, parse, render


def test_the_checkpoint_is_kafkas_text_format_and_reads_back(tmp_path: Path):
    cache = LeaderEpochCache(tmp_path)
    assert cache.assign(0, 0) and cache.assign(3, 1458)
    assert not cache.assign(2, 2000)  # an older epoch never goes after a newer one
    assert (tmp_path / FILE).read_text() == "0\n2\n0 0\n3 1458\n"
    assert LeaderEpochCache.load(tmp_path, lambda offset: [], 2000).entries == [(0, 0), (3, 1458)]
    assert parse(render([(5, 7)])) == [(5, 7)]


def test_where_an_epoch_ends_as_offsets_for_leader_epoch_answers():
    cache = LeaderEpochCache(Path("/nonexistent"), [(0, 0), (3, 100), (5, 250)])
    assert cache.end_offset_for(5, 300) == (5, 300)  # the latest epoch ends at the log end
    assert cache.end_offset_for(3, 300) == (3, 250)
    assert cache.end_offset_for(4, 300) == (3, 250)  # unknown here: the largest epoch below it, and its end
    assert cache.end_offset_for(0, 300) == (0, 100)
    assert cache.end_offset_for(9, 300) == (-1, -1)  # past every known epoch
    assert LeaderEpochCache(Path("/nonexistent")).end_offset_for(1, 10) == (-1, -1)


def _from(batches: list[tuple[int, int]]):
    """`batch_epochs` over (base offset, epoch) batches of 10 offsets each: from the batch holding the offset."""
    return lambda offset: [b for b in batches if b[0] + 10 > offset]


def test_a_missing_or_damaged_file_is_rebuilt_from_the_batches(tmp_path: Path):
    batches = [(0, 0), (10, 0), (20, 2), (30, 2), (40, 4)]
    assert LeaderEpochCache.load(tmp_path, _from(batches), 50).entries == [(0, 0), (2, 20), (4, 40)]
    (tmp_path / FILE).write_text("garbage")
    assert LeaderEpochCache.load(tmp_path, _from(batches[:3]), 30).entries == [(0, 0), (2, 20)]
    assert (tmp_path / FILE).read_text() == "0\n2\n0 0\n2 20\n"


def test_an_empty_log_gets_no_file(tmp_path: Path):
    """No write (let alone an fsync) for each new replica: its first leader's `assign` writes the file."""
    cache = LeaderEpochCache.load(tmp_path, _from([]), 0)
    assert cache.entries == [] and not (tmp_path / FILE).exists()


def test_writes_are_unsynced_and_told(tmp_path: Path):
    written: list[Path] = []
    cache = LeaderEpochCache.load(tmp_path, _from([]), 0, written.append)
    cache.assign(1, 0)
    assert written == [tmp_path / FILE] and parse((tmp_path / FILE).read_text()) == [(1, 0)]


def test_a_stale_file_is_reconciled_with_the_log_on_load(tmp_path: Path):
    """A power loss kept an older (intact) file: the epochs the log's batches carry past its last entry are
    added, and entries past the log end dropped; otherwise OffsetsForLeaderEpoch would answer from the old list."""
    batches = [(0, 0), (10, 0), (20, 2), (30, 2), (40, 4), (50, 5)]
    (tmp_path / FILE).write_text(render([(0, 0), (2, 20)]))
    cache = LeaderEpochCache.load(tmp_path, _from(batches), 60)
    assert cache.entries == [(0, 0), (2, 20), (4, 40), (5, 50)]
    assert parse((tmp_path / FILE).read_text()) == cache.entries  # written back
    assert cache.end_offset_for(2, 60) == (2, 40)
    # an entry the log was cut back below (the truncation's write was lost): dropped
    (tmp_path / FILE).write_text(render([(0, 0), (2, 20), (7, 90)]))
    assert LeaderEpochCache.load(tmp_path, _from(batches[:3]), 30).entries == [(0, 0), (2, 20)]
    # a leader's epoch starting at the log end, nothing written at it yet: kept
    (tmp_path / FILE).write_text(render([(0, 0), (2, 20), (3, 30)]))
    assert LeaderEpochCache.load(tmp_path, _from(batches[:3]), 30).entries == [(0, 0), (2, 20), (3, 30)]


def test_a_file_the_log_contradicts_is_rebuilt(tmp_path: Path):
    """The latest entry's start holds a batch of another epoch (the file is from before a truncation and a
    new leader's writes there): rebuilt whole from the batches, not patched."""
    batches = [(0, 0), (10, 0), (20, 3), (30, 3)]
    (tmp_path / FILE).write_text(render([(0, 0), (2, 10)]))
    assert LeaderEpochCache.load(tmp_path, _from(batches), 40).entries == [(0, 0), (3, 20)]
    (tmp_path / FILE).write_text(render([(0, 0), (5, 20)]))  # newer than any batch after its start
    assert LeaderEpochCache.load(tmp_path, _from(batches), 40).entries == [(0, 0), (3, 20)]


def test_truncation_forgets_the_epochs_that_began_past_the_new_end(tmp_path: Path):
    cache = LeaderEpochCache(tmp_path, [(0, 0), (3, 100), (5, 250)])
    cache.truncate_from_end(250)
    assert cache.entries == [(0, 0), (3, 100)]
    cache.truncate_from_end(100)
    assert cache.entries == [(0, 0)]


def test_the_file_is_rewritten_in_place_and_a_stale_tail_is_ignored(tmp_path):
    """`write` overwrites the file in place; a kill -9 between its write and its truncation leaves the old
    text's end behind the new one, which a load ignores (it reads the entries the count line announces)."""
    cache = LeaderEpochCache(tmp_path, [(0, 0), (1, 57), (2, 90)])
    cache.write()
    inode = (tmp_path / FILE).stat().st_ino
    cache.truncate_from_end(60)  # (drops epoch 2)
    assert parse((tmp_path / FILE).read_text()) == [(0, 0), (1, 57)]
    assert (tmp_path / FILE).stat().st_ino == inode  # (in place: no new file renamed over it)
    long, short = render([(0, 0), (1, 57), (2, 90)]).encode(), render([(0, 0)]).encode()
    (tmp_path / FILE).write_bytes(short + long[len(short) :])  # the write done, the truncation not
    loaded = LeaderEpochCache.load(tmp_path, lambda offset: [(0, 0)], 10)
    assert loaded.entries == [(0, 0)]
