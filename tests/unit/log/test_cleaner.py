"""The log cleaner (broker/log/cleaner*.py) on real partition logs in a temp dir: the offset map, the rewrite
(last value per key, offsets preserved with gaps, tombstones, transactional batches, compressed batches,
segments merged), the dirty ratio and compaction lags, and the crash-safe swap with its start-up recovery."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.log.cleaner import clean_group, clean_log
from broker.log.cleaner_progress import CHECKPOINT
from broker.log.cleaner_selection import cleanable
from broker.log.cleaner_swap import recover_swaps, swap_in
from broker.log.cleaner_threads import LogCleaner
from broker.log.manager import LogManager
from broker.log.offset_map import ENTRY_BYTES, OffsetMap
from broker.records.batch import Record, build_batch
from broker.records.compression import Codec

T0 = 1_700_000_000_000


def _fill(log, pairs, per_batch=10, codec=Codec.NONE, ts=T0, transactional=False):
    """Append (key, value) pairs in batches of `per_batch`; returns their offsets."""
    offsets = []
    for i in range(0, len(pairs), per_batch):
        chunk = pairs[i : i + per_batch]
        recs = [Record(j, ts, k, v) for j, (k, v) in enumerate(chunk)]
        pid = 7 if transactional else -1
        batch = build_batch(recs, codec=codec, transactional=transactional, producer_id=pid,
                            producer_epoch=0 if transactional else -1,
                            base_sequence=i if transactional else -1)  # fmt: skip
        res = log.append(batch, assign_offsets=False) if transactional else log.append(batch)
        offsets += list(range(res.first_offset, res.last_offset + 1))
    return offsets


def _append_raw(log, pairs, base, **kw):
    recs = [Record(base + j, T0, k, v) for j, (k, v) in enumerate(pairs)]
    return log.append(build_batch(recs, **kw), assign_offsets=False, leader_epoch=0)


def _latest(pairs_with_offsets):
    out = {}
    for off, (k, v) in pairs_with_offsets:
        out[k] = (off, v)
    return out


def _read(log):
    """Every record from the log start through `PartitionLog.read`, a batch at a time: a cleaned log has empty
    batches (a group's dropped last batch, a producer's last batch) and gaps, and every record comes out once."""
    from broker.log.scanner import read_batch
    from broker.records.batch import iter_records

    out, offset = [], log.log_start_offset
    while (sl := log.read(offset, 1)) is not None:
        data = sl.read()
        item = read_batch(data, 0, len(data))
        assert item.crc_ok
        out += [r for r in iter_records(data, 0, item.header) if r.offset >= offset]
        offset = item.last_offset + 1
    return out


def _clean(log, now_ms=T0 + 10, map_bytes=1 << 20):
    c = cleanable(log, None, now_ms)
    return clean_log(log, c, OffsetMap(map_bytes), now_ms=now_ms)


def test_offset_map_is_bounded_and_keeps_the_last_offset():
    m = OffsetMap(10 * ENTRY_BYTES, load_factor=1.0)
    assert m.slots == 10
    for i in range(10):
        assert m.put(b"k%d" % i, i)
    assert m.full and not m.put(b"new", 99)
    assert m.put(b"k3", 50)  # a key already in takes a later offset when full
    assert m.get(b"k3") == 50 and m.get(b"absent") == -1 and m.latest_offset == 50
    assert not m.room_for(1) and len(m) == 10


def test_clean_keeps_the_last_value_per_key_with_offsets_preserved(open_log, read_all):
    log = open_log(segment_bytes=500)
    pairs = [(b"k%d" % (i % 7), b"v%d" % i) for i in range(200)]
    offsets = _fill(log, pairs)
    assert len(log.bases) > 3
    want = _latest(zip(offsets, pairs, strict=True))
    active_base = log.bases[-1]
    stats = _clean(log)
    got = _read(log)
    assert [r.offset for r in got] == sorted(r.offset for r in got)
    cleaned = [r for r in got if r.offset < active_base]
    last = {}
    for r in got:
        last[r.key] = (r.offset, r.value)
    assert last == want  # every key's last value, at its own offset
    assert len({r.key for r in cleaned}) == len(cleaned)  # no key twice below the active segment
    assert stats.end_offset == active_base and stats.messages_written < stats.messages_read
    assert log.log_end_offset == 200  # offsets preserved: the log end does not move
    assert all(r.offset == offsets[int(r.value[1:])] for r in got)


def test_compressed_batches_are_recompressed_with_their_codec(open_log, read_all, layout, tmp_path):
    log = open_log(segment_bytes=1500)
    pairs = [(b"k%d" % (i % 5), b"x" * 50 + b"%d" % i) for i in range(100)]
    _fill(log, pairs, codec=Codec.GZIP)
    _clean(log)
    for _, items in layout(tmp_path / "orders-0"):
        for item in items:
            assert item.crc_ok and item.header.codec == Codec.GZIP
    got = _read(log)
    assert {r.key: r.value for r in got} == {k: v for k, v in pairs}


def test_small_cleaned_segments_are_merged_up_to_segment_bytes(open_log, read_all):
    log = open_log(segment_bytes=600)
    _fill(log, [(b"k%d" % (i % 3), b"v" * 20) for i in range(150)], per_batch=5)
    before = len(log.bases)
    stats = _clean(log)  # groups are made by the segments' sizes before cleaning (as Kafka's)
    _fill(log, [(b"k0", b"w")], per_batch=5)
    log.roll()
    clean_log(log, cleanable(log, stats.end_offset, T0 + 10), OffsetMap(1 << 20), now_ms=T0 + 10)
    assert len(log.bases) < before / 3  # the small cleaned segments went into one
    assert {r.key for r in _read(log)} == {b"k0", b"k1", b"k2"}


def test_tombstones_kept_until_delete_retention_then_dropped(open_log, read_all, clock):
    """The delete horizon is the last cleaned segment's mtime less delete.retention.ms (Kafka 2.8): a tombstone
    goes once its segment's mtime is before it."""
    log = open_log(segment_bytes=800, delete_retention_ms=1000)
    _fill(log, [(b"a", b"1"), (b"b", b"1"), (b"a", None)] * 10, per_batch=3, ts=clock.ms)
    log.roll()
    c = cleanable(log, None, clock.ms)
    stats = clean_log(log, c, OffsetMap(1 << 20), now_ms=clock.ms)
    got = {r.key: r.value for r in _read(log)}
    assert got == {b"a": None, b"b": b"1"}  # the tombstone is kept: nothing was cleaned before it
    _fill(log, [(b"c%d" % i, b"x" * 60) for i in range(20)], per_batch=1, ts=clock.ms)
    log.roll()
    c = cleanable(log, stats.end_offset, clock.ms)
    stats = clean_log(log, c, OffsetMap(1 << 20), now_ms=clock.ms)
    # the horizon is the cleaned section's newest segment (written just now) less delete.retention.ms: kept
    assert {r.key: r.value for r in _read(log)}[b"a"] is None
    _age_cleaned(log, stats.end_offset)  # the tombstone's segment is an hour older than the last cleaned one
    _fill(log, [(b"d", b"1")] * 3, ts=clock.ms)
    log.roll()
    clean_log(log, cleanable(log, stats.end_offset, clock.ms), OffsetMap(1 << 20), now_ms=clock.ms)
    got = {r.key: r.value for r in _read(log)}
    assert b"a" not in got and got[b"b"] == b"1" and got[b"d"] == b"1"
    import time

    # a cleaned segment keeps its group's last modification time
    assert all(log.segments[b].log_path.stat().st_mtime < time.time() - 1000 for b in log.bases[:1])


def test_transactional_batches_are_copied_whole_and_not_mapped(open_log, read_all):
    log = open_log(segment_bytes=400)
    _append_raw(log, [(b"k", b"committed")], 0)
    txn = [Record(1, T0, b"k", b"aborted")]
    log.append(build_batch(txn, producer_id=9, producer_epoch=0, base_sequence=0, transactional=True),
               assign_offsets=False, leader_epoch=0)  # fmt: skip
    ctl = [Record(2, T0, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")]
    log.append(build_batch(ctl, producer_id=9, producer_epoch=0, transactional=True, control=True),
               assign_offsets=False, leader_epoch=0)  # fmt: skip
    _append_raw(log, [(b"other", b"x")] * 4, 3)
    log.roll()
    _clean(log)
    got = [(r.offset, r.key, r.value) for r in _read(log)]
    assert (0, b"k", b"committed") in got  # the aborted record did not hide the committed value
    assert (1, b"k", b"aborted") in got and any(o == 2 for o, _, _ in got)
    assert [o for o, k, _ in got if k == b"other"] == [6]


def test_txnindex_is_carried_over(open_log, tmp_path):
    log = open_log(segment_bytes=300)
    _fill(log, [(b"k", b"v" * 10)] * 30, per_batch=3)
    base = log.bases[0]
    entry = bytes(range(34))
    (tmp_path / "orders-0" / f"{base:020d}.txnindex").write_bytes(entry)
    _clean(log)
    assert (tmp_path / "orders-0" / f"{log.bases[0]:020d}.txnindex").read_bytes() == entry


def test_a_full_map_cleans_up_to_where_it_reached(open_log, read_all):
    log = open_log(segment_bytes=1000)
    _fill(log, [(b"k%d" % i, b"v") for i in range(100)] + [(b"k%d" % i, b"w") for i in range(100)])
    stats = _clean(log, map_bytes=int(50 * ENTRY_BYTES / 0.9) + 1)
    assert 0 < stats.end_offset <= 50 and stats.map_keys <= 50
    assert len(_read(log)) == 200  # nothing dropped yet: each key's later value lies past the map
    c = cleanable(log, stats.end_offset, T0 + 10)
    while c.cleanable_bytes and c.first_dirty < c.uncleanable:
        stats = clean_log(log, c, OffsetMap(int(50 * ENTRY_BYTES / 0.9) + 1), now_ms=T0 + 10)
        c = cleanable(log, stats.end_offset, T0 + 10)
    got = _read(log)
    latest = {r.key: r.value for r in got}
    assert latest == {b"k%d" % i: b"w" for i in range(100)}


def test_dirty_ratio_and_compaction_lags(open_log, clock):
    log = open_log(segment_bytes=500, min_compaction_lag_ms=60_000)
    _fill(log, [(b"k", b"v" * 20)] * 40, ts=clock.ms)
    log.roll()
    c = cleanable(log, None, clock.ms)
    assert c.cleanable_bytes == 0 and c.uncleanable == 0  # too young to clean
    clock.advance(120_000)
    c = cleanable(log, None, clock.ms)
    assert c.ratio == 1.0 and c.uncleanable == log.bases[-1]
    log2 = open_log(tmp_path_dir(log) / ".." / "other-0", segment_bytes=500, max_compaction_lag_ms=1000)
    _fill(log2, [(b"k", b"v" * 20)] * 40, ts=clock.ms - 5000)
    assert cleanable(log2, None, clock.ms).must_clean


def tmp_path_dir(log) -> Path:
    return log.dir


def test_swap_is_finished_or_rolled_back_at_start_up(open_log, read_all, tmp_path):
    d = tmp_path / "orders-0"
    log = open_log(segment_bytes=600)
    pairs = [(b"k%d" % (i % 4), b"v%d" % i) for i in range(120)]
    _fill(log, pairs)
    want = {k: v for k, v in pairs}
    m = OffsetMap(1 << 20)
    from broker.log.cleaner import CleanStats, build_offset_map, group_segments

    end = build_offset_map(log, 0, log.bases[-1], m, CleanStats())
    groups = group_segments([log.segments[b] for b in log.bases[:-1] if b < end], 10_000)
    cleaned = clean_group(log, groups[0], m, 0, CleanStats())
    # a crash before the swap: only .cleaned files; start-up removes them and the old segments stay
    log.close()
    assert any(n.endswith(".cleaned") for n in os.listdir(d))
    recover_swaps(d)
    assert not any(n.endswith(".cleaned") for n in os.listdir(d))
    log = open_log(segment_bytes=600)
    assert {r.key: r.value for r in _read(log)} == want and len(_read(log)) == 120
    # a crash after the .log.swap: the swap is finished at start-up
    end = build_offset_map(log, 0, log.bases[-1], m, CleanStats())
    groups = group_segments([log.segments[b] for b in log.bases[:-1] if b < end], 10_000)
    cleaned = clean_group(log, groups[0], m, 0, CleanStats())
    for suffix, p in cleaned.paths.items():
        os.replace(p, d / (f"{cleaned.base:020d}{suffix}.swap"))
    for seg in groups[0][1:2]:  # it was half-way through setting the old segments aside
        os.replace(seg.log_path, str(seg.log_path) + ".deleted")
    log.close()
    done = recover_swaps(d)
    assert any("completed" in x for x in done)
    assert not any(n.endswith((".swap", ".deleted", ".cleaned")) for n in os.listdir(d))
    log = open_log(segment_bytes=600)
    got = _read(log)
    assert {r.key: r.value for r in got} == want
    assert len(got) < 120 and [r.offset for r in got] == sorted({r.offset for r in got})


def test_a_corrupt_swap_is_quarantined_and_rolled_back(open_log, read_all, tmp_path):
    d = tmp_path / "orders-0"
    log = open_log(segment_bytes=600)
    _fill(log, [(b"k%d" % (i % 4), b"v%d" % i) for i in range(120)])
    second = log.bases[1]
    log.close()
    swap = d / f"{0:020d}.log.swap"
    swap.write_bytes(b"\x00" * 100)
    os.replace(d / f"{second:020d}.log", d / f"{second:020d}.log.deleted")
    done = recover_swaps(d)
    assert any("quarantined" in x for x in done)
    assert (d / f"{second:020d}.log").exists()
    assert any(n.endswith(".quarantined") for n in os.listdir(d))
    log = open_log(segment_bytes=600)
    assert len(_read(log)) == 120


def test_swap_refuses_a_group_that_changed(open_log):
    log = open_log(segment_bytes=600)
    _fill(log, [(b"k%d" % (i % 4), b"v%d" % i) for i in range(120)])
    m = OffsetMap(1 << 20)
    from broker.log.cleaner import CleanStats, build_offset_map, group_segments
    from broker.log.cleaner_io import CleanAborted

    end = build_offset_map(log, 0, log.bases[-1], m, CleanStats())
    group = group_segments([log.segments[b] for b in log.bases[:-1] if b < end], 10_000)[0]
    cleaned = clean_group(log, group, m, 0, CleanStats())
    log.advance_log_start(log.bases[2])  # DeleteRecords removed segments meanwhile
    with pytest.raises(CleanAborted):
        swap_in(log, cleaned)
    assert not any(p.exists() for p in cleaned.paths.values())


def test_log_cleaner_checkpoints_and_resumes(tmp_path):
    from broker.log.config import LogConfig

    cfg = LogConfig(segment_bytes=800, cleanup_policy="compact", min_cleanable_dirty_ratio=0.1)
    mgr = LogManager([tmp_path / "d"], cfg)
    mgr.startup()
    log = mgr.get_or_create("t", 0, cfg)
    _fill(log, [(b"k%d" % (i % 5), b"v%d" % i) for i in range(100)])
    cleaner = LogCleaner(mgr, delete_delay_ms=0)
    assert cleaner.clean_once(OffsetMap(1 << 20))
    first = cleaner.progress[("t", 0)].checkpoint
    assert first == log.bases[-1]
    assert f"t 0 {first}" in (tmp_path / "d" / CHECKPOINT).read_text()
    assert not cleaner.clean_once(OffsetMap(1 << 20))  # nothing dirty left
    cleaner.stop()
    mgr.shutdown()
    again = LogCleaner(LogManager([tmp_path / "d"], cfg))
    assert again.progress[("t", 0)].checkpoint == first


def test_progress_events_report_the_checkpoint_and_dirty_ratio(tmp_path):
    from broker.log.cleaner_progress import progress_events
    from broker.log.config import LogConfig

    cfg = LogConfig(segment_bytes=800, cleanup_policy="compact", min_cleanable_dirty_ratio=0.1)
    mgr = LogManager([tmp_path / "d"], cfg)
    mgr.startup()
    log = mgr.get_or_create("t", 0, cfg)
    _fill(log, [(b"k%d" % (i % 5), b"v%d" % i) for i in range(100)])
    cleaner = LogCleaner(mgr, delete_delay_ms=0)
    cleaner.clean_once(OffsetMap(1 << 20))
    _fill(log, [(b"k1", b"again")] * 60)
    cleaner.stop()
    mgr.shutdown()
    (part, summary) = list(progress_events([tmp_path / "d"]))
    assert part["cleaner_checkpoint"] == cleaner.progress[("t", 0)].checkpoint and part["log_end"] == 160
    assert 0 < part["dirty_ratio"] < 1 and part["clean_bytes"] > 0 and part["leftovers"] == []
    assert summary == {"type": "summary", "partitions": 1, "with_checkpoint": 1, "leftovers": 0}
    assert list(progress_events([tmp_path / "nothing"]))[0]["type"] == "error"


def test_a_compacted_log_refuses_a_clients_record_without_key(open_log):
    from broker.errors import InvalidRecordError

    log = open_log(cleanup_policy="compact")
    assert log.config.checks_batches  # (so the produce paths take the one that validates)
    with pytest.raises(InvalidRecordError, match="Compacted topic cannot accept message without key"):
        log.append(build_batch([Record(0, T0, b"k", b"v"), Record(1, T0, None, b"v")]))
    assert log.log_end_offset == 0
    log.append(build_batch([Record(0, T0, b"k", None)]))  # a tombstone has a key: fine
    follower = open_log(Path(str(log.dir) + "-copy").with_name("orders-1"), cleanup_policy="compact")
    follower.append(build_batch([Record(0, T0, None, b"v")]), assign_offsets=False)  # a copy is not checked


def test_a_producers_batches_keep_their_last_offset_and_its_last_batch_stays_even_empty(open_log, layout, tmp_path):
    log = open_log(segment_bytes=300)
    for i in range(2):  # producer 5: keys a, b, c twice
        recs = [Record(j, T0, k, b"v%d" % i) for j, k in enumerate((b"a", b"b", b"c"))]
        log.append(build_batch(recs, producer_id=5, producer_epoch=0, base_sequence=i * 3))
    log.append(build_batch([Record(0, T0, b"c", b"plain")]))  # offset 6 overwrites c
    log.roll()
    _clean(log)
    assert all(i.crc_ok for _, items in layout(tmp_path / "orders-0") for i in items)
    heads = [i.header for _, items in layout(tmp_path / "orders-0") for i in items]
    # the first batch went; the second keeps a and b, and its last offset 5 (so its last sequence, 5)
    assert [(h.base_offset, h.last_offset, h.record_count, h.base_sequence) for h in heads if h.producer_id == 5] == [
        (3, 5, 2, 3)
    ]
    log2 = open_log(tmp_path / "other-0", segment_bytes=300)
    for i in range(4):
        recs = [Record(j, T0, b"k", b"v") for j in range(3)]
        log2.append(build_batch(recs, producer_id=6, producer_epoch=0, base_sequence=i * 3))
    log2.append(build_batch([Record(0, T0, b"k", b"new")]))  # a plain producer overwrites k
    log2.roll()
    _clean(log2)
    heads = [i.header for _, items in layout(tmp_path / "other-0") for i in items]
    (empty,) = [h for h in heads if h.producer_id == 6]  # its last batch, with no record left
    assert (empty.base_offset, empty.last_offset, empty.record_count, empty.base_sequence) == (9, 11, 0, 9)
    partial = [h for h in heads if h.producer_id == -1]
    assert [(h.base_offset, h.record_count) for h in partial] == [(12, 1)]


def test_an_empty_batch_stays_only_while_it_is_its_producers_last_in_the_whole_log(open_log, layout, tmp_path):
    """Kafka keeps one empty batch per producer, its last: a producer that wrote again after the cleaned section
    (or after an earlier clean emptied a batch of it) leaves no empty batch behind, clean after clean (a run of
    empties at a fetch's start made librdkafka double its fetch size each time)."""
    log = open_log(segment_bytes=300)
    for i in range(4):
        log.append(build_batch([Record(0, T0, b"k", b"v%d" % i)], producer_id=6, producer_epoch=0, base_sequence=i))
        log.append(build_batch([Record(0, T0, b"k", b"plain%d" % i)]))  # overwrites it at once
        log.roll()
        _clean(log)
    heads = [i.header for _, items in layout(tmp_path / "orders-0") for i in items]
    assert [(h.base_offset, h.record_count) for h in heads if h.producer_id == 6] == [(6, 0)]  # its last alone
    log.append(build_batch([Record(0, T0, b"z", b"later")], producer_id=6, producer_epoch=0, base_sequence=4))
    log.append(build_batch([Record(0, T0, b"k", b"plain4")]))
    log.roll()
    _clean(log)
    heads = [i.header for _, items in layout(tmp_path / "orders-0") for i in items]
    assert [(h.base_offset, h.record_count) for h in heads if h.producer_id == 6] == [(8, 1)]  # the empty one gone
    assert [r.value for r in log.read_records(0)] == [b"later", b"plain4"]


@pytest.mark.parametrize("read_bytes", [64, 200, 1000])
def test_segments_are_read_in_chunks_whatever_their_batch_sizes(open_log, read_all, monkeypatch, read_bytes):
    import broker.log.cleaner_io as cleaner_io

    monkeypatch.setattr(cleaner_io, "_READ_BYTES", read_bytes)  # batches straddle chunks, or outgrow them
    log = open_log(segment_bytes=3000)
    pairs = [(b"k%d" % (i % 6), b"v%03d" % i + b"x" * (i % 40)) for i in range(300)]
    offsets = _fill(log, pairs, per_batch=7)
    want = _latest(zip(offsets, pairs, strict=True))
    stats = _clean(log)
    assert stats.messages_read == sum(1 for o in offsets if o < stats.end_offset)
    assert {r.key: (r.offset, r.value) for r in _read(log)} == want


def test_a_segment_cut_under_the_cleaner_aborts_the_clean(open_log):
    from broker.log.cleaner_io import CleanAborted, segment_batches

    log = open_log(segment_bytes=600)
    _fill(log, [(b"k%d" % (i % 4), b"v%d" % i) for i in range(120)])
    seg = log.segments[log.bases[0]]
    os.truncate(seg.log_path, seg.size // 2)
    with pytest.raises(CleanAborted, match="cut under the cleaner"):
        list(segment_batches(seg.log_path, seg.size))


def test_damage_stops_the_clean_and_the_log_is_left_uncleanable(tmp_path):
    from broker.log.cleaner_io import CleanDamage
    from broker.log.config import LogConfig

    cfg = LogConfig(segment_bytes=800, cleanup_policy="compact", min_cleanable_dirty_ratio=0.1)
    mgr = LogManager([tmp_path / "d"], cfg)
    mgr.startup()
    log = mgr.get_or_create("t", 0, cfg)
    _fill(log, [(b"k%d" % (i % 5), b"v%d" % i) for i in range(100)])
    seg = log.segments[log.bases[1]]
    with open(seg.log_path, "r+b") as f:  # one byte of a record value flipped: the batch's CRC no longer holds
        f.seek(seg.size - 3)
        byte = f.read(1)
        f.seek(seg.size - 3)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CleanDamage, match="CRC mismatch"):
        _clean(log)
    assert not any(n.endswith(".cleaned") for n in os.listdir(log.dir))
    cleaner = LogCleaner(mgr, delete_delay_ms=0)
    assert not cleaner.clean_once(OffsetMap(1 << 20))
    assert ("t", 0) in cleaner.uncleanable and "CRC mismatch" in cleaner.progress[("t", 0)].last_error
    assert not cleaner.clean_once(OffsetMap(1 << 20))  # not tried again
    cleaner.stop()
    mgr.shutdown()


def test_nothing_at_or_above_the_high_watermark_is_cleaned_or_mapped(open_log, read_all):
    """A record a follower has not copied yet (above the high watermark) must not replace an older one: a new
    leader may truncate it away, and the older value would be gone with it."""
    log = open_log(segment_bytes=500)
    _fill(log, [(b"k%d" % (i % 5), b"v%d" % i) for i in range(200)])
    assert len(log.bases) > 4
    hw = log.bases[2] + 3  # inside the third segment
    c = cleanable(log, None, T0 + 10, stable_end=hw)
    assert c.uncleanable == log.bases[2]  # the segment holding the high watermark is left whole
    stats = clean_log(log, c, OffsetMap(1 << 20), now_ms=T0 + 10)
    assert stats.end_offset <= log.bases[2]
    kept = {r.offset for r in _read(log)}
    assert set(range(log.bases[2], 200)) <= kept  # nothing from the high watermark's segment on was dropped
    assert cleanable(log, None, T0 + 10).uncleanable == log.bases[-1]  # without one: up to the active segment


def test_a_tombstone_of_a_key_in_a_transactional_batch_is_never_dropped(open_log, clock):
    """Transactional batches are copied whole and never mapped: a tombstone that deleted a key written in one
    must stay, or the transactional value would come back once the tombstone passes delete.retention.ms."""
    log = open_log(segment_bytes=300, delete_retention_ms=1000)
    log.append(build_batch([Record(0, clock.ms, b"k", b"txn-value")], producer_id=9, producer_epoch=0,
                           base_sequence=0, transactional=True), assign_offsets=False, leader_epoch=0)  # fmt: skip
    commit = [Record(1, clock.ms, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")]
    log.append(build_batch(commit, producer_id=9, producer_epoch=0, transactional=True, control=True),
               assign_offsets=False, leader_epoch=0)  # fmt: skip
    _append_raw(log, [(b"k", None)], 2)
    _append_raw(log, [(b"gone", None)], 3)  # a tombstone of a key no unmapped batch holds: it may go
    ckpt = None
    for n in range(3):
        _fill(log, [(b"f%d-%d" % (n, i), b"x" * 20) for i in range(40)], per_batch=1, ts=clock.ms)
        log.roll()
        if ckpt is not None:
            _age_cleaned(log, ckpt)
        ckpt = clean_log(log, cleanable(log, ckpt, clock.ms), OffsetMap(1 << 20), now_ms=clock.ms).end_offset
    got = [(r.offset, r.value) for r in _read(log) if r.key == b"k"]
    assert got == [(0, b"txn-value"), (2, None)]  # the tombstone still hides the transactional value
    assert not [r for r in _read(log) if r.key == b"gone"]


def test_with_too_many_unmapped_keys_every_tombstone_stays(open_log, clock):
    from broker.log.offset_map import OffsetMap as Map

    m = Map(4 * ENTRY_BYTES, load_factor=1.0)
    m.note_unmapped([1, 2, 3, 4, 5])
    assert m.unmapped_overflow and len(m.unmapped) <= m.slots
    m.clear()
    assert not m.unmapped_overflow and not m.unmapped


def _cleaner_and_log(tmp_path, **cfg_kw):
    from broker.log.config import LogConfig

    cfg = LogConfig(segment_bytes=800, cleanup_policy="compact", min_cleanable_dirty_ratio=0.1, **cfg_kw)
    mgr = LogManager([tmp_path / "d"], cfg)
    mgr.startup()
    log = mgr.get_or_create("t", 0, cfg)
    _fill(log, [(b"k%d" % (i % 5), b"v%d" % i) for i in range(100)])
    cleaner = LogCleaner(mgr, delete_delay_ms=0)
    mgr.before_removal, mgr.on_truncate = cleaner.abort, cleaner.truncated
    return cfg, mgr, log, cleaner


def test_a_deleted_log_leaves_no_checkpoint_behind(tmp_path):
    """A re-created topic of the same name must not take [0, old checkpoint) as clean."""
    cfg, mgr, log, cleaner = _cleaner_and_log(tmp_path)
    assert cleaner.clean_once(OffsetMap(1 << 20))
    cleaner.uncleanable.add(("t", 0))
    mgr.delete("t", 0)
    assert "t 0" not in (tmp_path / "d" / CHECKPOINT).read_text()
    assert ("t", 0) not in cleaner.progress and ("t", 0) not in cleaner.uncleanable
    cleaner.stop()
    mgr.shutdown()
    assert ("t", 0) not in LogCleaner(LogManager([tmp_path / "d"], cfg)).progress


def test_a_truncation_below_the_checkpoint_lowers_it(tmp_path):
    cfg, mgr, log, cleaner = _cleaner_and_log(tmp_path)
    assert cleaner.clean_once(OffsetMap(1 << 20))
    first = cleaner.progress[("t", 0)].checkpoint
    cut = log.bases[1]
    assert cut < first
    log.truncate_to(cut)  # a follower's truncation
    assert cleaner.progress[("t", 0)].checkpoint == log.log_end_offset <= cut
    assert f"t 0 {log.log_end_offset}" in (tmp_path / "d" / CHECKPOINT).read_text()
    _fill(log, [(b"k%d" % (i % 5), b"w%d" % i) for i in range(100)])
    assert cleaner.clean_once(OffsetMap(1 << 20)) and cleaner.progress[("t", 0)].checkpoint > 3
    log.reset_to(3)  # a follower starting over at the leader's log start
    assert cleaner.progress[("t", 0)].checkpoint == 3
    cleaner.stop()
    mgr.shutdown()


def _age(log, seconds, below=None, from_=None):
    """Set the modification time of the log's segments in [from_, below) `seconds` back (the delete horizon is
    judged by segment mtimes, as Kafka 2.8 does)."""
    import time

    t = time.time() - seconds
    for b in log.bases:
        if (from_ is None or b >= from_) and (below is None or b < below):
            os.utime(log.segments[b].log_path, (t, t))


def _age_cleaned(log, ckpt, seconds=3600):
    """Age every segment below the last cleaned one (the last wholly below `ckpt`, which sets the horizon)."""
    last_clean = max(b for b in log.bases[:-1] if log.segments[b].next_offset <= ckpt)
    _age(log, seconds, below=last_clean)


def test_a_back_dated_tombstone_is_kept_delete_retention_ms(open_log, clock):
    """The horizon is the last cleaned segment's mtime less delete.retention.ms: a tombstone stamped in the
    past (or -1) is not dropped at its first clean, which would hide the delete from consumers."""
    log = open_log(segment_bytes=400, delete_retention_ms=60_000)
    _fill(log, [(b"x%d" % i, b"v" * 20) for i in range(20)], per_batch=1, ts=clock.ms)
    log.roll()
    ckpt = clean_log(log, cleanable(log, None, clock.ms), OffsetMap(1 << 20), now_ms=clock.ms).end_offset
    _fill(log, [(b"a", b"1")], ts=clock.ms)
    _fill(log, [(b"a", None)], ts=-1)
    _fill(log, [(b"b", None)], ts=T0 - 86_400_000)
    log.roll()
    clean_log(log, cleanable(log, ckpt, clock.ms), OffsetMap(1 << 20), now_ms=clock.ms)
    got = {r.key: r.value for r in _read(log)}
    assert b"a" in got and got[b"a"] is None and b"b" in got  # both tombstones still there


def test_a_tombstone_past_the_map_end_is_never_dropped(open_log, clock):
    """When the map fills mid-segment, the rest of that segment is rewritten unmapped: a tombstone there
    stays, or the value it deleted (which the map does not know of) would come back."""
    log = open_log(segment_bytes=100_000, delete_retention_ms=1000)
    _fill(log, [(b"a", b"1")] + [(b"f%d" % i, b"v") for i in range(5)], per_batch=1, ts=clock.ms)
    log.roll()
    ckpt = clean_log(log, cleanable(log, None, clock.ms), OffsetMap(1 << 20), now_ms=clock.ms).end_offset
    dirty = log.bases[-1]
    _fill(log, [(b"x%d" % i, b"v") for i in range(20)], per_batch=1, ts=clock.ms)
    _fill(log, [(b"a", None)], ts=T0 - 86_400_000)
    log.roll()
    _age(log, 3600, from_=dirty)  # the dirty segment is older than the horizon: its tombstones may go
    stats = clean_log(log, cleanable(log, ckpt, clock.ms), OffsetMap(int(10 * ENTRY_BYTES / 0.9) + 1),
                      now_ms=clock.ms)  # fmt: skip
    assert stats.end_offset < 26  # the map stopped before the tombstone
    got = [(r.key, r.value) for r in _read(log) if r.key == b"a"]
    assert got[-1] == (b"a", None)


def test_a_clean_that_cannot_progress_backs_off_and_says_so_once(tmp_path, caplog):
    """A batch with more keys than the map has slots: the map ends where it began, so nothing is cleaned (no
    rewrite), clean_once answers False (the thread backs off) and the broker log says so once."""
    from broker.log.config import LogConfig

    cfg = LogConfig(segment_bytes=800, cleanup_policy="compact", min_cleanable_dirty_ratio=0.1)
    mgr = LogManager([tmp_path / "d"], cfg)
    mgr.startup()
    log = mgr.get_or_create("t", 0, cfg)
    _fill(log, [(b"k%d" % i, b"v") for i in range(8)], per_batch=8)
    log.roll()
    _fill(log, [(b"x", b"v")])
    cleaner = LogCleaner(mgr, delete_delay_ms=0)
    files = sorted(os.listdir(log.dir))
    mtimes = [log.segments[b].log_path.stat().st_mtime_ns for b in log.bases]
    small = OffsetMap(4 * ENTRY_BYTES, load_factor=1.0)
    assert not cleaner.clean_once(small)
    assert not cleaner.clean_once(small)
    assert sorted(os.listdir(log.dir)) == files
    assert [log.segments[b].log_path.stat().st_mtime_ns for b in log.bases] == mtimes
    assert len([r for r in caplog.records if "no progress" in r.getMessage()]) == 1
    cleaner.stop()
    mgr.shutdown()


def test_a_throttled_clean_stops_within_a_slice():
    """The throttler sleeps in short slices that check `stop`: an abort never waits out a long throttle."""
    import time

    from broker.log.cleaner_io import CleanAborted, Throttler

    t = Throttler(1000.0)
    began = time.monotonic()
    with pytest.raises(CleanAborted):
        t.tick(1_000_000, stop=lambda: time.monotonic() - began > 0.1)  # (1000 s of sleep at that rate)
    assert time.monotonic() - began < 0.5


def test_abort_does_not_wait_on_a_throttled_clean_and_a_stale_swap_is_refused(tmp_path):
    import time

    from broker.log.cleaner_io import CleanAborted

    cfg, mgr, log, cleaner = _cleaner_and_log(tmp_path)
    _fill(log, [(b"k%d" % (i % 5), b"v" * 200) for i in range(400)])
    slow = LogCleaner(mgr, delete_delay_ms=0, io_max_bytes_per_second=2000.0)  # minutes for this log
    slow.start()
    deadline = time.monotonic() + 10
    while ("t", 0) not in slow._in_progress and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    assert ("t", 0) in slow._in_progress  # throttled: the first chunk alone is a minute at that rate
    began = time.monotonic()
    slow.abort(("t", 0))
    assert time.monotonic() - began < 1.0
    while ("t", 0) in slow._in_progress and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ("t", 0) not in slow._aborted and ("t", 0) not in slow.progress
    slow.stop()
    # a swap for a log that was replaced (a topic re-created under the same name) is refused
    mgr.logs[("t", 0)] = object()
    with pytest.raises(CleanAborted):
        cleaner._locked_for(("t", 0), log)(lambda: None)
    mgr.logs[("t", 0)] = log
    cleaner.stop()
    mgr.shutdown()


def test_the_cleaners_high_watermark_is_read_only(tmp_path):
    """The cleaner thread computes the high watermark without keeping it (ReplicaManager.stable_end): keeping it
    writes the leader's replication state, which only the event loop may do; the stored one alone may lag far
    behind (after a restart, until a request recomputes it), which stalled the cleaner."""
    from broker.replication.manager import ReplicaManager
    from broker.server.cache import MetadataCache, PartitionInfo
    from broker.server.config import BrokerConfig
    from broker.server.purgatory import Purgatory

    logs = LogManager([tmp_path / "logs"], broker_id=1)
    logs.startup()
    cache = MetadataCache(brokers={1: ("h", 1, None)})
    cache.topics["t"] = {0: PartitionInfo([1], 1, 0, [1])}

    async def blocking(fn, *args):
        return fn(*args)

    m = ReplicaManager(1, BrokerConfig(), cache, logs, Purgatory(), lambda t, p: logs.get_or_create(t, p),
                       blocking, lambda: None)  # fmt: skip
    m.apply(("t", 0), cache.topics["t"][0])
    plog = logs.get("t", 0)
    _fill(plog, [(b"k", b"v")] * 10)
    before = m.leaders[("t", 0)].hw
    assert before < 10
    assert m.stable_end(("t", 0), plog) == 10 and m.leaders[("t", 0)].hw == before  # computed, nothing written
    assert m.high_watermark(("t", 0), plog) == 10  # (the event loop's own: recomputed and kept)
    assert m.stable_end(("t", 0), plog) == 10
    m.leaders.pop(("t", 0))
    m.follower_hw[("t", 0)] = 4
    assert m.stable_end(("t", 0), plog) == 4
    logs.shutdown()


def test_checkpoint_writes_from_several_threads_do_not_race(tmp_path):
    """With log.cleaner.threads > 1 two cleans may write a dir's checkpoint at once (one .tmp name): a lock
    keeps them apart, and the file always ends with every log's latest checkpoint."""
    import threading

    cfg, mgr, log, cleaner = _cleaner_and_log(tmp_path)
    other = mgr.get_or_create("u", 0, log.config)
    _fill(other, [(b"k", b"v")] * 10)
    errors = []

    def writer(tp, n):
        try:
            for i in range(n):
                with cleaner._lock:
                    cleaner.progress[tp].checkpoint = i
                cleaner._write_checkpoint(tmp_path / "d")
        except Exception as exc:  # noqa: BLE001 (what the race raised: reported below)
            errors.append(exc)

    from broker.log.cleaner_progress import PartitionProgress

    cleaner.progress[("t", 0)], cleaner.progress[("u", 0)] = PartitionProgress(), PartitionProgress()
    threads = [threading.Thread(target=writer, args=(tp, 150)) for tp in (("t", 0), ("u", 0)) * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    text = (tmp_path / "d" / CHECKPOINT).read_text()
    assert "t 0 149" in text and "u 0 149" in text
    cleaner.stop()
    mgr.shutdown()


def test_the_offset_map_hashes_keys_to_128_bits():
    """As Kafka's MD5 map: a 64-bit hash makes two keys of a large log share a slot (and one lose its last
    value) about n²/2^65 of the time; 128 bits make that negligible."""
    import hashlib

    from broker.log.offset_map import key_hash, key_hashes

    assert key_hash(b"k") == hashlib.blake2b(b"k", digest_size=16).digest() and len(key_hash(b"k")) == 16
    assert list(key_hashes([b"a", b"b"])) == [key_hash(b"a"), key_hash(b"b")]
    m = OffsetMap(1 << 20)
    m.put(b"a", 3)
    m.put_hashes([key_hash(b"b")], [4])
    assert m.get(b"a") == 3 and m.raw_get(key_hash(b"b"), -1) == 4 and m.get(b"c") == -1


def test_a_quarantine_rollback_restores_only_the_segments_its_swap_covers(tmp_path, open_log):
    """An earlier group's swap completed (its old segments still `.deleted`, waiting their delay), then the
    next group's `.log.swap` is damaged: only that group's `.deleted` segments come back."""
    d = tmp_path / "orders-0"
    log = open_log(segment_bytes=300)
    _fill(log, [(b"k%d" % (i % 4), b"v%d" % i) for i in range(120)])
    b = log.bases
    assert len(b) > 6
    log.close()
    (d / f"{b[0]:020d}.log").write_bytes(b"")  # group 1 [b0, b1] done: b0 is its (here empty) cleaned segment
    os.replace(d / f"{b[1]:020d}.log", d / f"{b[1]:020d}.log.deleted")
    (d / f"{b[2]:020d}.log.swap").write_bytes(b"\x00" * 100)  # group 2 [b2, b3, b4]: its swap damaged
    for x in (b[3], b[4]):
        os.replace(d / f"{x:020d}.log", d / f"{x:020d}.log.deleted")
    recover_swaps(d)
    names = set(os.listdir(d))
    assert f"{b[3]:020d}.log" in names and f"{b[4]:020d}.log" in names
    assert f"{b[1]:020d}.log" not in names and not any(n.endswith(".deleted") for n in names)


def test_a_swap_makes_its_deleted_renames_durable_before_the_final_rename(open_log, monkeypatch):
    """The old segments' `.deleted` renames are fsynced before the `.swap` files take the first segment's
    names (else a crash could leave them live beside the cleaned segment that holds their offsets), and the
    `.txnindex.cleaned` is fsynced like the other cleaned files."""
    import broker.log.cleaner_swap as cleaner_swap

    log = open_log(segment_bytes=300)
    _fill(log, [(b"k%d" % (i % 4), b"v%d" % i) for i in range(60)])
    for base in log.bases[:-1]:
        (log.dir / f"{base:020d}.txnindex").write_bytes(bytes(34))
    events = []
    real_replace, real_fsync = os.replace, os.fsync

    def replace(a, b):
        events.append(("replace", str(a), str(b)))
        return real_replace(a, b)

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    import dataclasses

    log.config = dataclasses.replace(log.config, segment_bytes=100_000)  # (the clean merges the segments)
    monkeypatch.setattr(cleaner_swap.os, "replace", replace)
    monkeypatch.setattr(cleaner_swap.os, "fsync", fsync)
    monkeypatch.setattr(cleaner_swap, "fsync_dir", lambda d: events.append(("fsync_dir", str(d))))
    _clean(log, map_bytes=1 << 20)
    assert any(e[0] == "fsync" and e[1].endswith(".txnindex.cleaned") for e in events)
    last_deleted = max(i for i, e in enumerate(events) if e[0] == "replace" and e[2].endswith(".deleted"))
    first_final = min(i for i, e in enumerate(events) if e[0] == "replace" and e[1].endswith(".swap")
                      and i > last_deleted)  # fmt: skip
    assert any(e[0] == "fsync_dir" for e in events[last_deleted:first_final])


def test_only_active_producers_keep_an_empty_last_batch(open_log):
    """Kafka's lastRecordsOfActiveProducers: a producer's emptied last batch stays only while the partition's
    producer state still holds that producer (the broker must know its last sequence); others go."""
    from collections import deque

    from broker.log.cleaner import producers_last_batches

    log = open_log(segment_bytes=250)
    off = 0
    for pid in range(100, 106):  # six short-lived idempotent producers each write key a once
        log.append(build_batch([Record(off, T0, b"a", b"x" * 20)], producer_id=pid, producer_epoch=0,
                               base_sequence=0), assign_offsets=False, leader_epoch=0)  # fmt: skip
        off += 1
    for _ in range(12):
        _append_raw(log, [(b"a", b"y" * 20)], off)
        off += 1
    log.roll()

    class Entry:  # (the broker's producer state entry: its last batches, (first seq, last seq, base offset))
        def __init__(self, *batches):
            self.batches = deque(batches)

    class States:  # (the broker's ProducerStates, as the cleaner reads it)
        def __init__(self, entries, unknown=False):
            self.entries, self.unknown = entries, unknown

    last = producers_last_batches(States({102: Entry((0, 0, 2)), 107: Entry()}))  # (107: no batch left)
    assert last == {2}
    clean_log(log, cleanable(log, None, T0 + 10), OffsetMap(1 << 20), now_ms=T0 + 10, producers_last=last)
    from broker.log.scanner import scan

    pids = [it.header.producer_id for b in log.bases for it in scan(log.segments[b].log_path.read_bytes(), 0)
            if it.header.record_count == 0]  # fmt: skip
    assert pids == [102]
    assert producers_last_batches(States({7: Entry((0, 4, 40))}, unknown=True)) is None
    assert producers_last_batches(None) is None


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP], ids=["plain", "gzip"])
def test_a_tombstone_of_a_key_in_a_legacy_batch_is_never_dropped(open_log, codec, tmp_path):
    """Legacy (magic 0/1) batches, a compressed wrapper's inner messages too, are copied whole and never
    mapped: a later tombstone of one of their keys stays, dropped only for keys no unmapped batch holds."""
    from tests.unit.records.legacy_sets import stored_set

    d = tmp_path / "orders-0"
    d.mkdir()
    (d / f"{0:020d}.log").write_bytes(
        stored_set([(b"k", b"old", T0), (b"j", b"old", T0)], 0, magic=1, codec=codec)
    )  # (a log from before magic 2)
    log = open_log(segment_bytes=300, delete_retention_ms=1000)
    _append_raw(log, [(b"k", None)], 2)
    _append_raw(log, [(b"gone", None)], 3)
    ckpt = None
    for n in range(3):
        _fill(log, [(b"f%d-%d" % (n, i), b"x" * 20) for i in range(40)], per_batch=1)
        log.roll()
        if ckpt is not None:
            _age_cleaned(log, ckpt)
        ckpt = clean_log(log, cleanable(log, ckpt, T0), OffsetMap(1 << 20), now_ms=T0).end_offset
    from broker.log.scanner import scan
    from broker.records.legacy import inner_messages

    legacy = [m.key for b in log.bases for it in scan(log.segments[b].log_path.read_bytes(), 0)
              if it.legacy is not None for m in inner_messages(it.legacy)]  # fmt: skip
    assert sorted(legacy) == [b"j", b"k"]
    from broker.records.batch import iter_records

    v2 = [r for b in log.bases for data in [log.segments[b].log_path.read_bytes()] for it in scan(data, 0)
          if it.header is not None for r in iter_records(data, it.position, it.header)]  # fmt: skip
    assert [(r.offset, r.value) for r in v2 if r.key == b"k"] == [(2, None)]  # the tombstone still hides k
    assert not [r for r in v2 if r.key == b"gone"]


def test_the_log_manager_and_the_cleaner_import_each_other_in_one_direction_only():
    """The manager needs only the swap's start-up completion (`cleaner_swap`, which imports no other part of
    the cleaner but its aborts); the cleaner is given the manager, never imports it at function level (the
    inspection of its progress imports it at the top, which the manager never reaches)."""
    import ast

    root = Path(__file__).resolve().parents[3] / "broker" / "log"

    def imports(name: str, in_functions: bool = False) -> set[str]:
        tree = ast.parse((root / f"{name}.py").read_text())
        funcs = (ast.FunctionDef, ast.AsyncFunctionDef)
        scopes = [f for f in ast.walk(tree) if isinstance(f, funcs)] if in_functions else [tree]
        found = set()
        for node in (n for scope in scopes for n in ast.walk(scope)):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        return found

    assert {m for m in imports("manager") if m.startswith("broker.log.cleaner")} == {"broker.log.cleaner_swap"}
    assert {m for m in imports("cleaner_swap") if m.startswith("broker.log.cleaner")} == {"broker.log.cleaner_io"}
    for path in root.glob("cleaner*.py"):
        assert not imports(path.stem, in_functions=True), f"{path.name} imports inside a function"
