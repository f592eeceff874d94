"""broker/log/log.py: one partition's log — append, read, time lookup, roll, flush, retention, truncation."""

from __future__ import annotations

import struct

import pytest

from broker.errors import CorruptRecordError, OffsetOutOfRangeError, RecordTooLargeError
from broker.log.config import LogConfig
from broker.log.log import FetchSlice, parse_partition_dir, validate_batches
from broker.log.scanner import read_batch
from broker.log.segment import segment_name
from broker.records.batch import TIMESTAMP_TYPE_BIT, Record, build_batch, compute_crc, iter_records
from broker.records.compression import Codec

DAY = 24 * 3600 * 1000


def stored_batches(log) -> list[tuple[int, bytes]]:
    """(segment base, raw bytes) of every batch on disk, in order."""
    out = []
    for base in log.bases:
        seg = log.segments[base]
        data = seg.log_path.read_bytes()
        pos = 0
        while pos < len(data):
            item = read_batch(data, pos, len(data))
            out.append((base, data[pos : item.end]))
            pos = item.end
    return out


def test_parse_partition_dir():
    assert parse_partition_dir("orders-3") == ("orders", 3)
    assert parse_partition_dir("my-topic-12") == ("my-topic", 12)
    assert parse_partition_dir("orders") is None


# -- append ------------------------------------------------------------------------------------


def test_append_assigns_consecutive_offsets_by_rewriting_the_base_offset_only(open_log, make_batch):
    log = open_log()
    inputs = [
        make_batch([b"a", b"b"], offset=999),
        make_batch([b"c"], offset=0),
        make_batch([b"d", b"e", b"f"], offset=12345, codec=Codec.GZIP),
        make_batch([b"g"] * 4, offset=7),
    ]
    results = [log.append(b, leader_epoch=3) for b in inputs]
    assert [(r.first_offset, r.last_offset, r.record_count, r.batch_count) for r in results] == [
        (0, 1, 2, 1), (2, 2, 1, 1), (3, 5, 3, 1), (6, 9, 4, 1),
    ]  # fmt: skip
    assert all(r.log_append_time == -1 for r in results)
    assert log.log_end_offset == 10
    stored = [raw for _, raw in stored_batches(log)]
    for first, raw, given in zip([0, 2, 3, 6], stored, inputs, strict=True):
        assert struct.unpack_from(">q", raw)[0] == first
        assert raw[8:12] == given[8:12]  # batch length
        assert struct.unpack_from(">i", raw, 12)[0] == 3  # partitionLeaderEpoch
        assert raw[16:] == given[16:]  # magic, CRC and every CRC-covered byte exactly as received
    values = [r.value for r in log.read_records(0)]
    assert values == [b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"g", b"g", b"g"]
    assert [r.offset for r in log.read_records(0)] == list(range(10))


def test_multi_batch_append(open_log, make_batch):
    log = open_log()
    log.append(make_batch([b"first"]))
    parts = [make_batch([b"p%d-%d" % (i, j) for j in range(i + 1)], offset=100 * i) for i in range(3)]
    res = log.append(b"".join(parts))
    assert (res.first_offset, res.last_offset, res.record_count, res.batch_count) == (1, 6, 6, 3)
    stored = stored_batches(log)
    assert [struct.unpack_from(">q", raw)[0] for _, raw in stored] == [0, 1, 2, 4]
    assert [raw[16:] for _, raw in stored[1:]] == [p[16:] for p in parts]
    assert [r.value for r in log.read_records(0)] == [b"first", b"p0-0", b"p1-0", b"p1-1", b"p2-0", b"p2-1", b"p2-2"]


def test_bad_crc_appends_nothing(open_log, make_batch):
    log = open_log()
    log.append(make_batch([b"kept"]))
    size, leo = log.active.log_path.stat().st_size, log.log_end_offset
    good = make_batch([b"good"])
    bad = bytearray(make_batch([b"bad", b"worse"]))
    bad[-2] ^= 0x01
    for data in (bytes(bad), good + bytes(bad), bytes(bad) + good):
        with pytest.raises(CorruptRecordError, match="CRC"):
            log.append(data)
        assert log.log_end_offset == leo
        assert log.active.log_path.stat().st_size == size == log.active.size
    assert [r.value for r in log.read_records(0)] == [b"kept"]
    assert log.append(good).first_offset == 1  # the log still takes valid batches


@pytest.mark.parametrize(
    "mangle",
    [
        lambda b: b"",  # empty
        lambda b: b[:-1],  # truncated
        lambda b: b + b"\x00" * 5,  # trailing bytes
        lambda b: b[:16] + b"\x01" + b[17:],  # magic 1
        lambda b: b[:8] + struct.pack(">i", -1) + b[12:],  # negative length
    ],
)
def test_malformed_input_is_corrupt_and_appends_nothing(open_log, make_batch, mangle):
    log = open_log()
    with pytest.raises(CorruptRecordError):
        log.append(mangle(make_batch([b"v"])))
    assert log.log_end_offset == 0 and log.size_bytes == 0


def test_batch_over_max_message_bytes_is_too_large(open_log, make_batch):
    batch = make_batch([b"z" * 300])
    log = open_log(max_message_bytes=len(batch) - 1)
    with pytest.raises(RecordTooLargeError):
        log.append(batch)
    with pytest.raises(RecordTooLargeError):
        log.append(make_batch([b"ok"]) + batch)
    assert log.log_end_offset == 0 and log.size_bytes == 0
    exact = open_log(directory=log.dir.with_name("orders-1"), max_message_bytes=len(batch))
    assert exact.append(batch).last_offset == 0


def test_log_append_time_stamps_max_timestamp_and_the_attribute(open_log, make_batch, clock):
    log = open_log(message_timestamp_type="LogAppendTime")
    clock.advance(4242)
    given = make_batch([b"a", b"b", b"c"], timestamps=[5, 9, 7], offset=50)
    res = log.append(given)
    now = clock.ms
    assert res.log_append_time == now and res.max_timestamp == now
    ((_, raw),) = stored_batches(log)
    item = read_batch(raw, 0, len(raw))
    assert item.crc_ok and item.stored_crc == compute_crc(raw, 0, len(raw))
    assert item.header.attributes & TIMESTAMP_TYPE_BIT
    assert item.header.max_timestamp == now
    assert item.header.base_timestamp == 5
    # outside the attributes, maxTimestamp and CRC (and the rewritten offset), nothing changed
    assert raw[8:17] == given[8:17] and raw[23:35] == given[23:35] and raw[43:] == given[43:]
    assert [(r.offset, r.timestamp, r.value) for r in iter_records(raw)] == [
        (0, now, b"a"),
        (1, now, b"b"),
        (2, now, b"c"),
    ]
    assert log.offset_for_timestamp(now) == (0, now)
    assert log.offset_for_timestamp(now + 1) is None


def test_follower_append_keeps_offsets_that_move_forward(open_log, make_batch):
    log = open_log()
    res = log.append(make_batch([b"a", b"b"], offset=0) + make_batch([b"c"], offset=2), assign_offsets=False)
    assert (res.first_offset, res.last_offset) == (0, 2)
    with pytest.raises(CorruptRecordError):
        log.append(make_batch([b"again"], offset=2), assign_offsets=False)
    with pytest.raises(CorruptRecordError):
        log.append(make_batch([b"d"], offset=3) + make_batch([b"back"], offset=1), assign_offsets=False)
    assert log.log_end_offset == 3
    assert [r.value for r in log.read_records(0)] == [b"a", b"b", b"c"]


def test_validate_batches_reports_each_batch(make_batch):
    a, b = make_batch([b"1", b"2"], timestamp=10), make_batch([b"3"], timestamp=20)
    assert validate_batches(a + b, 10_000) == [(0, len(a), 2, 1, 10), (len(a), len(b), 1, 0, 20)]


# -- read --------------------------------------------------------------------------------------


@pytest.fixture
def rolled(open_log, make_batch):
    """A log over several segments: 40 batches of 1-4 records, each batch's (base, last) recorded."""
    log = open_log(segment_bytes=700, index_interval_bytes=100)
    spans, values = [], []
    for i in range(40):
        n = 1 + (i * 7) % 4
        vals = [b"v%03d-%d" % (i, j) for j in range(n)]
        res = log.append(make_batch(vals))
        spans.append((res.first_offset, res.last_offset))
        values += vals
    assert len(log.bases) >= 4, "the log must roll"
    return log, spans, values


def test_read_starts_at_the_batch_holding_every_offset(rolled):
    log, spans, values = rolled
    for first, last in spans:
        for off in range(first, last + 1):
            sl = log.read(off, 1)
            assert isinstance(sl, FetchSlice) and sl.first_offset == first
            data = sl.read()
            item = read_batch(data, 0, len(data))
            assert item.crc_ok and item.size == len(data)  # one whole batch when max_bytes is smaller
            assert (item.base_offset, item.last_offset) == (first, last)
            assert [r.value for r in iter_records(data)] == values[first : last + 1]


def test_read_with_a_large_max_bytes_stays_in_one_segment(rolled):
    log, spans, values = rolled
    for first, _ in spans:
        sl = log.read(first, 1 << 20)
        seg = log.segments[max(b for b in log.bases if b <= first)]
        assert sl.fd == seg.fd and sl.position + sl.length == seg.size
        got = [(r.offset, r.value) for r in _records(sl.read())]
        assert got == [(o, values[o]) for o in range(first, seg.next_offset)]


def test_read_max_bytes_bounds_the_slice(rolled):
    log, spans, _ = rolled
    sl = log.read(0, 1 << 20)
    sizes = []
    data = sl.read()
    pos = 0
    while pos < len(data):
        item = read_batch(data, pos, len(data))
        sizes.append(item.size)
        pos = item.end
    budget = sizes[0] + sizes[1] + 5
    part = log.read(0, budget)
    assert part.length == budget  # a slice may end inside a batch, as Kafka's do: clients drop the partial one
    assert [r.offset for r in _records(part.read()[: sizes[0] + sizes[1]])] == list(range(spans[1][1] + 1))


def test_read_stops_before_the_high_watermark(rolled):
    log, spans, values = rolled
    for hw_batch in (1, 5, 17, 39):
        hw = spans[hw_batch][0]
        got, offset = [], 0
        while (sl := log.read(offset, 1 << 20, max_offset=hw)) is not None:
            recs = _records(sl.read())
            assert recs and all(r.offset < hw for r in recs)
            got += recs
            offset = recs[-1].offset + 1
        assert [r.value for r in got] == values[:hw]
        assert log.read(hw, 1 << 20, max_offset=hw) is None
    first, last = spans[3]
    if last > first:  # a high watermark inside a batch serves none of that batch
        assert log.read(first, 1 << 20, max_offset=last) is None


def test_read_out_of_range_and_at_the_end(rolled):
    log, _, values = rolled
    leo = log.log_end_offset
    assert leo == len(values)
    assert log.read(leo, 100) is None
    for bad in (-1, leo + 1, leo + 100):
        with pytest.raises(OffsetOutOfRangeError):
            log.read(bad, 100)


def test_read_all_returns_every_value(rolled, read_all):
    log, _, values = rolled
    assert [(r.offset, r.value) for r in read_all(log)] == list(enumerate(values))
    assert [r.value for r in log.read_records(5)][:3] == values[5:8]


def _records(data: bytes):
    out, pos = [], 0
    while pos < len(data):
        item = read_batch(data, pos, len(data))
        assert item.crc_ok
        out += list(iter_records(data, pos, item.header))
        pos = item.end
    return out


# -- time lookup -------------------------------------------------------------------------------


def test_offset_for_timestamp_finds_the_first_record_at_or_after(open_log, make_batch, clock):
    log = open_log(segment_bytes=500, index_interval_bytes=60)
    stamps = []
    for i in range(30):
        n = 1 + i % 3
        ts = [clock.ms + 10 * i + (7 * j) % 11 for j in range(n)]  # not monotonic inside a batch
        log.append(make_batch([b"t%d" % i] * n, timestamps=ts))
        stamps += ts
    assert len(log.bases) > 2
    lo, hi = min(stamps), max(stamps)
    for target in range(lo - 3, hi + 3):
        expected = next(((o, t) for o, t in enumerate(stamps) if t >= target), None)
        assert log.offset_for_timestamp(target) == expected, target
    assert log.offset_for_timestamp(0) == (0, stamps[0])
    assert log.offset_for_timestamp(hi + 1) is None


# -- roll --------------------------------------------------------------------------------------


def test_roll_by_segment_bytes(open_log, make_batch, layout):
    log = open_log(segment_bytes=1000)
    values = []
    for i in range(60):
        vals = [b"s%d" % i + b"." * (i * 17 % 90)]
        log.append(make_batch(vals))
        values += vals
    segs = layout(log.dir)
    assert len(segs) > 3 and [b for b, _ in segs] == log.bases
    for (base, batches), (_, following) in zip(segs, segs[1:], strict=False):
        assert batches[0].base_offset == base
        size = batches[-1].end
        assert size <= 1000
        assert size + following[0].size > 1000  # rolled only because the next batch did not fit
        assert following[0].base_offset == batches[-1].last_offset + 1
    assert [r.value for r in log.read_records(0, 1 << 20)][:3] == values[:3]


def test_a_batch_bigger_than_a_segment_gets_its_own(open_log, make_batch):
    log = open_log(segment_bytes=200)
    log.append(make_batch([b"small"]))
    log.append(make_batch([b"B" * 400]))
    log.append(make_batch([b"small"]))
    assert log.bases == [0, 1, 2]


def test_roll_by_segment_ms(open_log, make_batch, clock):
    log = open_log(segment_ms=1000)
    clock.advance(5000)  # an empty segment does not roll, however old
    log.append(make_batch([b"a"], timestamp=clock.ms))
    clock.advance(1000)
    log.append(make_batch([b"b"], timestamp=clock.ms))
    assert log.bases == [0]  # exactly segment.ms: not yet
    clock.advance(1)
    log.append(make_batch([b"c"], timestamp=clock.ms))
    assert log.bases == [0, 2]
    # the age counts from the first batch's timestamp, not from the latest one
    clock.advance(600)
    log.append(make_batch([b"d"], timestamp=clock.ms))
    clock.advance(600)
    log.append(make_batch([b"e"], timestamp=clock.ms))
    assert log.bases == [0, 2, 4]


def test_roll_by_segment_ms_without_timestamps_counts_from_creation(open_log, make_batch, clock):
    log = open_log(segment_ms=1000)
    log.append(make_batch([b"a"], timestamp=-1))
    clock.advance(1000)
    log.append(make_batch([b"b"], timestamp=-1))
    assert log.bases == [0]
    clock.advance(1)
    log.append(make_batch([b"c"], timestamp=-1))
    assert log.bases == [0, 2]


@pytest.mark.parametrize("rising", [True, False], ids=["rising-timestamps", "one-timestamp"])
def test_full_index_rolls(open_log, make_batch, rising):
    """segment.index.bytes = 48: room for 6 offset entries, or 3 time entries plus the one a roll adds."""
    log = open_log(index_max_bytes=48, index_interval_bytes=0)
    for i in range(40):
        log.append(make_batch([b"i%d" % i], timestamp=log.clock.ms + (i if rising else 0)))
    assert len(log.bases) > 3
    log.flush()
    for base in log.bases:
        seg = log.segments[base]
        assert seg.index.path.stat().st_size == 8 * len(seg.index.keys) <= 48
        assert seg.time_index.path.stat().st_size == 12 * len(seg.time_index.keys) <= 48
    for base in log.bases[:-1]:  # each roll came when an index had no room for the next entry
        seg = log.segments[base]
        if rising:
            assert len(seg.time_index.keys) == 3 and len(seg.index.keys) == 3
        else:
            assert len(seg.index.keys) == 6 and len(seg.time_index.keys) == 1
    assert [r.value for r in log.read_records(0, 1 << 20)] == [b"i%d" % i for i in range(log.bases[1])]
    assert [(r.offset, r.value) for r in _all(log)] == [(i, b"i%d" % i) for i in range(40)]


def _all(log):
    out, offset = [], 0
    while (sl := log.read(offset, 1 << 20)) is not None:
        out += _records(sl.read())
        offset = out[-1].offset + 1
    return out


def test_roll_rewrites_nothing_and_an_empty_active_segment_does_not_roll(open_log, make_batch):
    log = open_log()
    assert log.roll() is log.active and log.bases == [0]
    log.append(make_batch([b"x", b"y"]))
    new = log.roll()
    assert log.bases == [0, 2] and new.base_offset == 2 and new.log_path.name == segment_name(2)
    assert log.roll() is new


# -- flush -------------------------------------------------------------------------------------


def test_flush_by_message_count_moves_the_recovery_point(open_log, make_batch):
    log = open_log(flush_messages=5)
    log.append(make_batch([b"1", b"2"]))
    log.append(make_batch([b"3", b"4"]))
    assert log.recovery_point == 0
    log.append(make_batch([b"5", b"6"]))
    assert log.recovery_point == 6 == log.log_end_offset
    log.append(make_batch([b"7"] * 4))
    assert log.recovery_point == 6
    log.append(make_batch([b"8"]))
    assert log.recovery_point == 11


def test_flush_by_time(open_log, make_batch, clock):
    log = open_log(flush_ms=1000)
    assert not log.maybe_flush()  # nothing to flush
    log.append(make_batch([b"a", b"b"]))
    clock.advance(999)
    assert not log.maybe_flush() and log.recovery_point == 0
    clock.advance(1)
    assert log.maybe_flush() and log.recovery_point == 2
    clock.advance(5000)
    assert not log.maybe_flush()  # clean
    # Kafka's rule counts from the last flush: a log clean for longer than flush.ms flushes at once
    log.append(make_batch([b"c"]))
    assert log.maybe_flush() and log.recovery_point == 3
    log.append(make_batch([b"d"]))
    assert not log.maybe_flush(clock.ms + 999) and log.recovery_point == 3
    assert log.maybe_flush(clock.ms + 1000) and log.recovery_point == 4


def test_flush_writes_the_index_entries(open_log, make_batch):
    log = open_log(index_interval_bytes=50)
    for i in range(10):
        log.append(make_batch([b"f%d" % i]))
    seg = log.active
    assert seg.index.keys and seg.index.path.stat().st_size == 0
    log.flush()
    assert seg.index.path.stat().st_size == 8 * len(seg.index.keys)


# -- retention ---------------------------------------------------------------------------------


def segments_with_timestamps(log, make_batch, stamps):
    """One segment per timestamp (rolled by hand), two records each; returns the values."""
    values = []
    for i, ts in enumerate(stamps):
        if i:
            log.roll()
        vals = [b"seg%d-a" % i, b"seg%d-b" % i]
        log.append(make_batch(vals, timestamp=ts))
        values += vals
    return values


def test_retention_by_time_deletes_only_expired_segments_from_the_oldest(open_log, make_batch, clock, read_all):
    log = open_log(retention_ms=7 * DAY)
    now = clock.ms
    values = segments_with_timestamps(log, make_batch, [now - 10 * DAY, now - DAY, now - 9 * DAY, now])
    assert log.bases == [0, 2, 4, 6]
    first_files = log.segments[0].files()
    assert log.delete_retained() == [0]  # segment 2 is newer: it and everything after it stay
    assert log.bases == [2, 4, 6] and log.log_start_offset == 2
    assert not any(p.exists() for p in first_files)
    for off in (0, 1):
        with pytest.raises(OffsetOutOfRangeError):
            log.read(off, 100)
    assert [r.value for r in read_all(log)] == values[2:]
    assert log.delete_retained() == []
    assert log.delete_retained(now + 6 * DAY + 1) == [2, 4]  # now the newer one expired too
    assert log.log_start_offset == 6 and [r.value for r in read_all(log)] == values[6:]


def test_retention_keeps_a_segment_whose_newest_batch_is_young(open_log, make_batch, clock):
    log = open_log(retention_ms=7 * DAY, segment_ms=100 * DAY)
    log.append(make_batch([b"old"], timestamp=clock.ms - 30 * DAY))
    log.append(make_batch([b"young"], timestamp=clock.ms - DAY))
    log.roll()
    log.append(make_batch([b"now"], timestamp=clock.ms))
    assert log.delete_retained() == []
    assert log.log_start_offset == 0


def test_retention_of_every_segment_keeps_the_log_end(open_log, make_batch, clock, read_all):
    log = open_log(retention_ms=DAY)
    segments_with_timestamps(log, make_batch, [clock.ms - 5 * DAY, clock.ms - 3 * DAY])
    leo = log.log_end_offset
    assert log.delete_retained() == [0, 2]
    assert log.bases == [leo] and log.log_end_offset == leo == log.log_start_offset
    assert log.read(leo, 100) is None
    with pytest.raises(OffsetOutOfRangeError):
        log.read(leo - 1, 100)
    assert log.append(make_batch([b"next"], timestamp=clock.ms)).first_offset == leo
    assert [(r.offset, r.value) for r in read_all(log)] == [(leo, b"next")]


def test_retention_by_size_deletes_oldest_whole_segments_while_the_rest_exceeds(open_log, make_batch, read_all):
    log = open_log(retention_ms=-1, segment_bytes=400)
    values = []
    for i in range(30):
        vals = [b"b%02d" % i + b"-" * (i * 11 % 60)]
        log.append(make_batch(vals))
        values += vals
    sizes = {b: log.segments[b].size for b in log.bases}
    assert len(sizes) > 4
    limit = sum(sizes.values()) // 2 + 7
    expected, total = [], sum(sizes.values())
    for base in log.bases[:-1]:
        if total - sizes[base] < limit:
            break
        expected.append(base)
        total -= sizes[base]
    log.config = LogConfig(retention_ms=-1, retention_bytes=limit, segment_bytes=400)
    deleted = log.delete_retained()
    assert deleted == expected and deleted
    remaining = log.size_bytes
    assert remaining >= limit and remaining - log.segments[log.bases[0]].size < limit
    assert log.log_start_offset == log.bases[0]
    assert [r.value for r in read_all(log)] == values[log.bases[0] :]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(log.bases[0] - 1, 10)
    assert log.delete_retained() == []


def test_an_empty_segment_does_not_stop_time_retention(tmp_path, open_log, make_batch, clock, read_all):
    log = open_log(retention_ms=7 * DAY)
    segments_with_timestamps(log, make_batch, [clock.ms - 20 * DAY, clock.ms - 15 * DAY, clock.ms - 10 * DAY, clock.ms])
    log.close()
    middle = log.segments[2]
    for p in middle.files():  # what salvage leaves when every batch of a segment was damaged
        p.write_bytes(b"")
    log = open_log(retention_ms=7 * DAY)
    assert log.bases == [0, 2, 4, 6] and log.segments[2].size == 0
    assert log.delete_retained() == [0, 2, 4]
    assert log.log_start_offset == 6 and [r.value for r in read_all(log)] == [b"seg3-a", b"seg3-b"]


def test_no_retention(open_log, make_batch, clock):
    log = open_log(retention_ms=-1, retention_bytes=-1)
    segments_with_timestamps(log, make_batch, [0, 1, 2])
    assert log.delete_retained(clock.ms + 100 * DAY) == [] and log.bases == [0, 2, 4]


# -- truncation --------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["start", "inside-first", "segment-base", "inside-later", "last-batch"])
def test_truncate_to_across_segments(tmp_path, open_log, make_batch, read_all, target):
    log = open_log(directory=tmp_path / "orders-0", segment_bytes=300)
    spans, values = [], []
    for i in range(25):
        n = 1 + i % 3
        vals = [b"t%02d-%d" % (i, j) for j in range(n)]
        res = log.append(make_batch(vals))
        spans.append((res.first_offset, res.last_offset))
        values += vals
    bases = list(log.bases)
    assert len(bases) > 3
    offset = {
        "start": 0,
        "inside-first": spans[1][0],
        "segment-base": bases[2],
        "inside-later": spans[-6][0],
        "last-batch": spans[-1][0],
    }[target]
    removed = [log.segments[b].files() for b in bases if b >= offset and b != bases[0]]
    log.truncate_to(offset)
    assert log.log_end_offset == offset
    assert log.bases == [b for b in bases if b < offset or b == bases[0]]
    assert not any(p.exists() for files in removed for p in files)
    assert [r.value for r in read_all(log)] == values[:offset]
    assert log.recovery_point <= offset
    res = log.append(make_batch([b"after"]))
    assert res.first_offset == offset
    assert [r.value for r in read_all(log)] == values[:offset] + [b"after"]
    log.close()
    again = open_log(directory=tmp_path / "orders-0", segment_bytes=300)
    assert again.log_end_offset == offset + 1
    assert [r.value for r in read_all(again)] == values[:offset] + [b"after"]


def test_truncate_inside_a_batch_removes_the_whole_batch(open_log, make_batch, read_all):
    log = open_log()
    log.append(make_batch([b"a", b"b"]))
    log.append(make_batch([b"c", b"d", b"e"]))
    log.truncate_to(3)
    assert log.log_end_offset == 2 and [r.value for r in read_all(log)] == [b"a", b"b"]
    log.truncate_to(10)  # past the end: nothing to do
    assert log.log_end_offset == 2


def test_truncation_forgets_the_timestamps_it_cut(open_log, make_batch, clock):
    log = open_log(retention_ms=7 * DAY, segment_ms=100 * DAY)
    log.append(make_batch([b"old"], timestamp=clock.ms - 10 * DAY))
    log.append(make_batch([b"new"], timestamp=clock.ms))
    assert log.bases == [0]
    log.truncate_to(1)
    assert log.offset_for_timestamp(clock.ms - DAY) is None
    assert log.delete_retained() == [0]  # what is left is expired
    assert log.log_start_offset == 1 == log.log_end_offset


# -- reopening ---------------------------------------------------------------------------------


def test_reopen_after_close_keeps_everything(tmp_path, open_log, make_batch, read_all):
    log = open_log(segment_bytes=500, index_interval_bytes=80)
    values = []
    for i in range(30):
        vals = [b"r%02d" % i] * (1 + i % 2)
        log.append(make_batch(vals))
        values += vals
    log.flush()
    state = (list(log.bases), log.log_end_offset, [log.segments[b].index.entries() for b in log.bases])
    log.close()
    again = open_log(segment_bytes=500, index_interval_bytes=80, recovery_point=state[1])
    assert (again.bases, again.log_end_offset, [again.segments[b].index.entries() for b in again.bases]) == state
    assert again.recovery_point == state[1]
    assert [r.value for r in read_all(again)] == values
    assert again.append(make_batch([b"more"])).first_offset == len(values)


def test_log_start_offset_from_a_checkpoint(open_log, make_batch, read_all):
    log = open_log()
    log.append(make_batch([b"a", b"b"]))
    log.append(make_batch([b"c"]))
    log.close()
    again = open_log(log_start_offset=2)
    assert again.log_start_offset == 2
    with pytest.raises(OffsetOutOfRangeError):
        again.read(1, 10)
    assert [r.value for r in read_all(again)] == [b"c"]
    assert again.offset_for_timestamp(0)[0] == 2


def test_deferred_appends_read_flush_and_roll_like_written_ones(tmp_path, open_log, make_batch, read_all, layout):
    plain, deferred = open_log(segment_bytes=1000), open_log(tmp_path / "deferred-0", segment_bytes=1000)
    values = [b"d%d" % i + b"." * (i * 17 % 90) for i in range(40)]
    for i, v in enumerate(values):
        first = plain.append(make_batch([v])).first_offset
        assert deferred.append(make_batch([v]), defer=True).first_offset == first == i
        if i % 7 == 6:  # the broker writes a read's appends before answering them
            deferred.write_deferred()
    assert [r.value for r in read_all(deferred)] == values  # reading writes what is still deferred
    deferred.write_deferred()
    deferred.flush()
    assert [(base, [b.size for b in batches]) for base, batches in layout(deferred.dir)] == [
        (base, [b.size for b in batches]) for base, batches in layout(plain.dir)
    ]  # the same segments (rolled at the same batches) and the same batches
    assert deferred.recovery_point == deferred.log_end_offset == 40


def test_batch_headers_from_an_offset_to_the_end_as_the_files_hold_them(open_log):
    """40 idempotent one-record batches over several segments, the last append deferred: the headers from
    any offset are those of every batch from the one holding it to the end, the deferred one included."""
    log = open_log(segment_bytes=700)
    for i in range(40):
        data = build_batch([Record(j, 1_700_000_000_000, None, b"v%03d" % i) for j in range(1 + i % 3)],
                           producer_id=7, producer_epoch=3, base_sequence=i)  # fmt: skip
        log.append(data, defer=i == 39)
    assert len(log.bases) >= 4, "the log must roll"
    firsts = [h.base_offset for h in log.batch_headers_from(0)]
    assert len(firsts) == 40 and firsts[0] == 0 and {h.producer_id for h in log.batch_headers_from(0)} == {7}
    for offset in range(log.log_end_offset + 2):
        holding = max((f for f in firsts if f <= offset), default=0)
        expected = [f for f in firsts if f >= holding] if offset < log.log_end_offset else []
        assert [h.base_offset for h in log.batch_headers_from(offset)] == expected, offset
    assert [h.base_sequence for h in log.batch_headers_from(0)] == list(range(40))


def test_batch_headers_from_reads_no_more_than_the_tail_asked_for(open_log, make_batch):
    log = open_log(index_interval_bytes=100)
    for i in range(200):
        log.append(make_batch([b"v%03d" % i]))
    everything = [h.base_offset for h in log.batch_headers_from(0)]
    size = log.active.size
    tail = [h.base_offset for h in log.batch_headers_from(0, 1000)]
    assert everything == list(range(200)) and tail == everything[-len(tail) :]  # the end, whole batches
    assert 1000 - 200 <= size * len(tail) / 200 <= 1000  # about as many bytes as asked (index every 100)
    assert [h.base_offset for h in log.batch_headers_from(195, 1000)] == list(range(195, 200))


def test_roll_by_segment_ms_less_a_jitter_drawn_per_segment(open_log, make_batch, clock, monkeypatch):
    drawn: list[int] = []
    monkeypatch.setattr("broker.log.log.random.randrange", lambda n: drawn.append(n) or 400)
    log = open_log(segment_ms=1000, segment_jitter_ms=5000)
    assert drawn == [1000]  # at most segment.ms, as Kafka's min(jitter, segment.ms)
    log.append(make_batch([b"a"], timestamp=clock.ms))
    clock.advance(600)
    log.append(make_batch([b"b"], timestamp=clock.ms))
    assert log.bases == [0]  # 600 ms is not past 1000 - 400
    clock.advance(1)
    log.append(make_batch([b"c"], timestamp=clock.ms))
    assert log.bases == [0, 2] and len(drawn) == 2  # the new segment drew its own
