"""broker/log/index.py: the sparse `.index` and `.timeindex` in Kafka's byte formats."""

from __future__ import annotations

import struct

import pytest

from broker.log.index import IndexCorruptError, OffsetIndex, TimeIndex
from broker.log.segment import LogSegment

BASE = 1000


@pytest.fixture
def oindex(tmp_path) -> OffsetIndex:
    return OffsetIndex(tmp_path / "00000000000000001000.index", BASE)


@pytest.fixture
def tindex(tmp_path) -> TimeIndex:
    return TimeIndex(tmp_path / "00000000000000001000.timeindex", BASE)


# -- offset index ------------------------------------------------------------------------------


def test_offset_index_file_is_relative_offset_and_position(oindex):
    oindex.append(1004, 300)
    oindex.append(1010, 700)
    assert not oindex.path.exists() or oindex.path.read_bytes() == b""  # entries reach the file on flush
    oindex.flush()
    assert oindex.path.read_bytes() == struct.pack(">iiii", 4, 300, 10, 700)
    oindex.append(1020, 950)
    oindex.flush()
    assert oindex.path.read_bytes() == struct.pack(">iiiiii", 4, 300, 10, 700, 20, 950)
    again = OffsetIndex(oindex.path, BASE)
    again.load(log_size=1000)
    assert again.entries() == [(1004, 300), (1010, 700), (1020, 950)]


def test_offset_index_lookup_gives_a_position_at_or_before_the_batch(oindex):
    # batches: [1000..1004]@0 [1005..1010]@300 [1011..1020]@700 [1021..1030]@950; entries say "ends at"
    oindex.append(1004, 0)
    oindex.append(1010, 300)
    oindex.append(1020, 700)
    starts = {range(1000, 1005): 0, range(1005, 1011): 300, range(1011, 1021): 700, range(1021, 1031): 950}
    for offsets, start in starts.items():
        for off in offsets:
            pos = oindex.lookup(off)
            # at or before the batch holding `off`, and never before the last entry that ends earlier
            floor = max([p for k, p in oindex.entries() if k < off], default=0)
            assert floor <= pos <= start, off
    assert oindex.lookup(1000) == 0
    assert oindex.lookup(1011) == 300
    assert oindex.lookup(1021) == 700
    assert oindex.lookup(5000) == 700


def test_empty_offset_index_looks_up_position_zero(oindex):
    assert oindex.lookup(BASE) == 0 and oindex.lookup(BASE + 99) == 0


def test_offset_index_truncate_to_position_rewrites_the_file(oindex):
    for off, pos in [(1004, 100), (1010, 300), (1020, 700)]:
        oindex.append(off, pos)
    oindex.flush()
    oindex.truncate_to_position(300)
    assert oindex.entries() == [(1004, 100)]
    assert oindex.path.read_bytes() == struct.pack(">ii", 4, 100)
    oindex.append(1008, 250)
    oindex.flush()
    assert oindex.path.read_bytes() == struct.pack(">iiii", 4, 100, 8, 250)
    oindex.reset()
    assert oindex.entries() == [] and oindex.path.read_bytes() == b""


def test_offset_index_truncation_cuts_the_file_in_place_and_needs_no_room(oindex, monkeypatch):
    """Undoing a failed append on a full disk truncates the index: it must not write a file to do so (a rewrite
    through a temporary file failed with ENOSPC there and left the log end past the log's bytes)."""
    for off, pos in [(1004, 100), (1010, 300)]:
        oindex.append(off, pos)
    oindex.flush()
    oindex.append(1020, 700)  # not yet in the file
    oindex.append(1030, 900)

    def no_room(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("pathlib.Path.write_bytes", no_room)
    monkeypatch.setattr("builtins.open", no_room)
    oindex.truncate_to_position(800)  # only an unflushed entry goes: the file is untouched
    assert oindex.entries() == [(1004, 100), (1010, 300), (1020, 700)]
    assert oindex.path.read_bytes() == struct.pack(">iiii", 4, 100, 10, 300)
    oindex.truncate_to_position(200)  # a flushed one goes: the file is cut in place
    assert oindex.entries() == [(1004, 100)] and oindex.path.read_bytes() == struct.pack(">ii", 4, 100)
    monkeypatch.undo()
    oindex.append(1008, 250)
    oindex.flush()
    assert oindex.path.read_bytes() == struct.pack(">iiii", 4, 100, 8, 250)


@pytest.mark.parametrize(
    "data, log_size",
    [
        (b"\x00" * 7, 1000),  # not a multiple of 8
        (struct.pack(">ii", -1, 10), 1000),  # negative relative offset
        (struct.pack(">iiii", 5, 10, 4, 20), 1000),  # offsets go backwards
        (struct.pack(">iiii", 5, 10, 6, 10), 1000),  # positions do not move forward
        (struct.pack(">ii", 5, 1000), 1000),  # position past the log
        (bytes(range(40)), 1000),  # garbage
    ],
)
def test_offset_index_load_rejects_what_cannot_describe_the_log(oindex, data, log_size):
    oindex.path.write_bytes(data)
    with pytest.raises(IndexCorruptError):
        oindex.load(log_size)


# -- time index --------------------------------------------------------------------------------


def test_time_index_file_is_timestamp_and_relative_offset(tindex):
    tindex.maybe_append(5000, 1003)
    tindex.maybe_append(5000, 1007)  # not larger: skipped
    tindex.maybe_append(4000, 1009)  # smaller: skipped
    tindex.maybe_append(6000, 1012)
    tindex.flush()
    assert tindex.path.read_bytes() == struct.pack(">qiqi", 5000, 3, 6000, 12)
    assert tindex.last_timestamp == 6000
    again = TimeIndex(tindex.path, BASE)
    again.load(next_offset=1013)
    assert again.entries() == [(5000, 1003), (6000, 1012)]


def test_time_index_lookup(tindex):
    assert tindex.lookup(123) == BASE and tindex.last_timestamp == -1
    tindex.maybe_append(5000, 1003)
    tindex.maybe_append(6000, 1012)
    assert tindex.lookup(4000) == BASE
    assert tindex.lookup(5000) == BASE  # offsets up to 1003 may hold 5000 itself
    assert tindex.lookup(5001) == 1003  # everything up to 1003 is older than 5001
    assert tindex.lookup(6000) == 1003
    assert tindex.lookup(7000) == 1012


def test_time_index_truncate_to_offset(tindex):
    for ts, off in [(10, 1001), (20, 1005), (30, 1009)]:
        tindex.maybe_append(ts, off)
    tindex.flush()
    tindex.truncate_to_offset(1006)
    assert tindex.entries() == [(10, 1001), (20, 1005)]
    assert tindex.path.read_bytes() == struct.pack(">qiqi", 10, 1, 20, 5)
    tindex.truncate_to_offset(1005)
    assert tindex.entries() == [(10, 1001)]


@pytest.mark.parametrize(
    "data, next_offset",
    [
        (b"\x00" * 13, 2000),
        (struct.pack(">qiqi", 20, 1, 10, 2), 2000),  # timestamps go backwards
        (struct.pack(">qiqi", 10, 5, 20, 2), 2000),  # offsets go backwards
        (struct.pack(">qi", 10, -3), 2000),  # negative relative offset
        (struct.pack(">qi", 10, 50), 1040),  # offset past the segment's end
    ],
)
def test_time_index_load_rejects_invalid_entries(tindex, data, next_offset):
    tindex.path.write_bytes(data)
    with pytest.raises(IndexCorruptError):
        tindex.load(next_offset)


# -- Kafka's sparse rule, through the segment that feeds the indexes ---------------------------


@pytest.mark.parametrize("interval", [0, 100, 250, 1000])
def test_entries_follow_kafkas_index_interval_rule(tmp_path, make_batch, interval):
    """An entry for a batch when the bytes appended since the last entry exceed index.interval.bytes."""
    seg = LogSegment(tmp_path, 0, index_interval_bytes=interval)
    expected_index, expected_time = [], []
    since, pos, offset, max_ts = 0, 0, 0, -1
    for i in range(40):
        n = 1 + i % 4
        ts = 10_000 + (i * 37) % 500  # not monotonic: the time index keeps the running maximum
        batch = make_batch([b"x" * (10 + 7 * i)] * n, offset=offset, timestamp=ts)
        max_ts = max(max_ts, ts)
        if since > interval:
            expected_index.append((offset + n - 1, pos))
            if not expected_time or max_ts > expected_time[-1][0]:
                expected_time.append((max_ts, offset + n - 1))
            since = 0
        since += len(batch)
        seg.append([batch], [(len(batch), offset + n - 1, ts)])
        pos += len(batch)
        offset += n
    assert expected_index, "the test must create entries"
    assert seg.index.entries() == expected_index
    assert seg.time_index.entries() == expected_time
    seg.flush()
    raw = seg.index.path.read_bytes()
    assert [(o, p) for o, p in struct.iter_unpack(">ii", raw)] == [(o, p) for o, p in expected_index]
    raw_t = seg.time_index.path.read_bytes()
    assert list(struct.iter_unpack(">qi", raw_t)) == expected_time
    # every offset is found through the index
    for off in range(offset):
        head = seg.find(off)
        assert head.base_offset <= off <= head.last_offset
    seg.close()
