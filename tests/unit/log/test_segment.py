"""broker/log/segment.py: one `.log` with its indexes — append, find, reload, truncate, rebuild."""

from __future__ import annotations

import errno
import os

import pytest

from broker.log.scanner import Damage, open_segment, scan
from broker.log.segment import LogSegment, parse_segment_name, segment_name


def test_segment_names_are_twenty_digit_base_offsets():
    assert segment_name(0) == "00000000000000000000.log"
    assert segment_name(1234, ".index") == "00000000000000001234.index"
    assert parse_segment_name("00000000000000001234.log") == 1234
    assert parse_segment_name("00000000000000001234.index") is None
    assert parse_segment_name("00000000000000001234.log.0-10.quarantined") is None
    assert parse_segment_name("1234.log") is None


def fill(seg: LogSegment, make_batch, n: int = 30, base: int = 0, ts0: int = 50_000) -> list[tuple[int, int, int]]:
    """Append n batches of 1-3 records; returns (position, base offset, last offset) of each."""
    out, offset, pos = [], base, seg.size
    for i in range(n):
        count = 1 + i % 3
        ts = ts0 + (i * 13) % 40
        batch = make_batch([b"r%d" % (offset + j) for j in range(count)], offset=offset, timestamp=ts)
        seg.append([batch], [(len(batch), offset + count - 1, ts)])
        out.append((pos, offset, offset + count - 1))
        pos += len(batch)
        offset += count
    return out


@pytest.fixture
def seg(tmp_path):
    s = LogSegment(tmp_path, 100, index_interval_bytes=150)
    yield s
    s.close()


def test_new_segment_creates_empty_files(seg):
    assert [p.name for p in seg.files()] == [
        "00000000000000000100.log", "00000000000000000100.index", "00000000000000000100.timeindex",
    ]  # fmt: skip
    assert all(p.exists() and p.stat().st_size == 0 for p in seg.files())
    assert (seg.size, seg.next_offset, seg.max_timestamp) == (0, 100, -1)
    assert seg.find(100) is None and seg.read_head(0) is None


def test_find_every_offset(seg, make_batch):
    placed = fill(seg, make_batch, base=100)
    assert seg.index.entries(), "the interval is small enough to index"
    for pos, first, last in placed:
        for off in range(first, last + 1):
            head = seg.find(off)
            assert (head.position, head.base_offset, head.last_offset) == (pos, first, last)
    assert seg.find(placed[-1][2] + 1) is None
    assert seg.next_offset == placed[-1][2] + 1
    assert [h.position for h in seg.heads()] == [p for p, _, _ in placed]


def test_find_timestamp_gives_the_first_batch_reaching_it(seg, make_batch):
    fill(seg, make_batch, base=100)
    heads = list(seg.heads())
    for target in range(49_990, 50_045):
        expected = next((h for h in heads if h.max_timestamp >= target), None)
        assert seg.find_timestamp(target) == expected, target


def test_reload_gives_the_same_state(tmp_path, seg, make_batch):
    fill(seg, make_batch, base=100)
    seg.flush()
    state = (seg.size, seg.next_offset, seg.max_timestamp, seg.first_timestamp, seg.index.entries())
    times = seg.time_index.entries()
    seg.close()
    again = LogSegment(tmp_path, 100, index_interval_bytes=150)
    again.load_indexes()
    assert (again.size, again.next_offset, again.max_timestamp, again.first_timestamp) == state[:4]
    assert again.index.entries() == state[4] and again.time_index.entries() == times
    again.close()


def test_reload_without_flushed_index_entries_reads_the_tail(tmp_path, seg, make_batch):
    placed = fill(seg, make_batch, base=100)
    seg.close()  # entries never flushed: the files are empty, the tail scan covers the whole log
    again = LogSegment(tmp_path, 100)
    again.load_indexes()
    assert again.index.entries() == []
    assert again.next_offset == placed[-1][2] + 1
    assert again.max_timestamp == 50_039
    assert again.find(placed[7][1]).position == placed[7][0]
    again.close()


def test_rebuild_from_a_scan_equals_the_live_indexes(tmp_path, seg, make_batch):
    fill(seg, make_batch, base=100)
    seg.time_index.maybe_append(seg.max_timestamp, seg.next_offset - 1)  # what a roll adds
    live = (seg.index.entries(), seg.time_index.entries(), seg.next_offset, seg.max_timestamp, seg.first_timestamp)
    seg.flush()
    index_bytes = seg.index.path.read_bytes(), seg.time_index.path.read_bytes()
    seg.index.path.write_bytes(b"junk")
    seg.time_index.path.unlink()
    with open_segment(seg.log_path) as buf:
        seg.rebuild_indexes([i for i in scan(buf) if not isinstance(i, Damage)])
    assert (seg.index.entries(), seg.time_index.entries(), seg.next_offset, seg.max_timestamp,
            seg.first_timestamp) == live  # fmt: skip
    assert (seg.index.path.read_bytes(), seg.time_index.path.read_bytes()) == index_bytes


def test_truncate_to_position_forgets_what_was_cut(seg, make_batch):
    placed = fill(seg, make_batch, base=100)
    late = make_batch([b"late"], offset=placed[-1][2] + 1, timestamp=90_000)
    seg.append([late], [(len(late), placed[-1][2] + 1, 90_000)])
    assert seg.max_timestamp == 90_000
    pos, first, _ = placed[12]
    seg.truncate_to_position(pos)
    assert seg.size == pos and seg.log_path.stat().st_size == pos
    assert seg.next_offset == first
    assert all(p < pos for p in seg.index.values)
    assert all(o < first for o in seg.time_index.values)
    kept = [h.max_timestamp for h in seg.heads()]
    assert seg.max_timestamp == max(kept)  # the cut batch's 90_000 is gone
    assert seg.find(first) is None and seg.find(first - 1).position == placed[11][0]
    seg.truncate_to_position(0)
    assert (seg.size, seg.next_offset, seg.max_timestamp) == (0, 100, -1)
    assert seg.index.entries() == [] and seg.time_index.entries() == []


def test_multi_batch_append_and_read(seg, make_batch):
    a = make_batch([b"a", b"b"], offset=100)
    b = make_batch([b"c"], offset=102, timestamp=7)
    seg.append([a, memoryview(b)], [(len(a), 101, 50_000), (len(b), 102, 7)])
    assert seg.read(0, len(a) + len(b)) == a + b
    assert seg.read_head(len(a)).base_offset == 102
    assert seg.first_timestamp == 50_000 and seg.max_timestamp == 50_000


def test_delete_removes_all_three_files(seg, make_batch):
    fill(seg, make_batch, n=3, base=100)
    seg.flush()
    files = seg.files()
    seg.delete()
    assert not any(p.exists() for p in files)
    assert seg.fd == -1


def test_a_deferred_append_moves_the_state_at_once_and_the_file_at_write_deferred(seg, make_batch):
    a, b = make_batch([b"a"], offset=100), make_batch([b"b", b"c"], offset=101, timestamp=60_000)
    seg.append([a], [(len(a), 100, 50_000)], defer=True)
    seg.append([b], [(len(b), 102, 60_000)], defer=True)
    assert (seg.size, seg.next_offset, seg.max_timestamp) == (len(a) + len(b), 103, 60_000)
    assert seg.deferred_bytes == len(a) + len(b) and seg.log_path.stat().st_size == 0
    seg.write_deferred()
    assert seg.deferred_bytes == 0 and seg.log_path.read_bytes() == a + b


@pytest.mark.parametrize("touch", ["read_head", "find", "read", "flush", "close", "plain-append"])
def test_whatever_touches_the_file_writes_the_deferred_appends_first(seg, make_batch, touch):
    a, b = make_batch([b"a"], offset=100), make_batch([b"b"], offset=101)
    seg.append([a], [(len(a), 100, 50_000)], defer=True)
    if touch == "read_head":
        assert seg.read_head(0).base_offset == 100
    elif touch == "find":
        assert seg.find(100).size == len(a)
    elif touch == "read":
        assert seg.read(0, len(a)) == a
    elif touch == "flush":
        seg.flush()
    elif touch == "close":
        seg.close()
    else:  # an append that is not deferred lands after the deferred ones, in order
        seg.append([b], [(len(b), 101, 50_000)])
    assert seg.log_path.read_bytes() == (a + b if touch == "plain-append" else a)


def test_deferred_appends_of_more_buffers_than_one_writev_takes(seg, make_batch):
    batches = [make_batch([b"v%d" % i], offset=100 + i) for i in range(700)]
    for i, batch in enumerate(batches):  # two buffers each, as PartitionLog.append gives them
        seg.append([batch[:12], memoryview(batch)[12:]], [(len(batch), 100 + i, 50_000)], defer=True)
    seg.write_deferred()
    assert seg.log_path.read_bytes() == b"".join(batches)
    assert [h.base_offset for h in seg.heads()] == list(range(100, 800))


def test_a_failed_deferred_write_cuts_the_segment_back_to_its_file(seg, make_batch, monkeypatch):
    placed = fill(seg, make_batch, base=100)
    before = (seg.size, seg.next_offset, seg.max_timestamp, seg.index.entries(), seg.time_index.entries())
    late = [make_batch([b"x" * 100], offset=placed[-1][2] + 1 + i, timestamp=90_000) for i in range(4)]
    for i, batch in enumerate(late):
        seg.append([batch], [(len(batch), placed[-1][2] + 1 + i, 90_000)], defer=True)
    assert seg.next_offset == placed[-1][2] + 5

    def half_then_fail(fd, buffers):  # a short write, then the disk fills up
        os.write(fd, bytes(buffers[0])[:50])
        return 50

    def no_space(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "writev", half_then_fail)
    monkeypatch.setattr(os, "write", no_space)
    with pytest.raises(OSError):
        seg.write_deferred()
    monkeypatch.undo()
    assert (seg.size, seg.next_offset, seg.max_timestamp, seg.index.entries(), seg.time_index.entries()) == before
    assert seg.log_path.stat().st_size == before[0] and seg.deferred_bytes == 0
