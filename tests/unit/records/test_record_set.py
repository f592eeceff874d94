"""The record-set walk: whole batches in order, a partial tail skipped wherever the cut falls."""

from __future__ import annotations

import struct

from broker.records import Codec, Record, build_batch
from broker.records.batch import BATCH_HEADER_SIZE, HEADER
from broker.records.record_set import batches, frames, whole_length
from tests.unit.records.legacy_sets import message


def _set() -> tuple[bytes, list[int]]:
    """Three v2 batches of different sizes (one compressed) back to back, and where each starts."""
    parts = [
        build_batch([Record(0, 1000, b"k", b"v")]),
        build_batch([Record(o, 1000 + o, None, b"x" * o) for o in range(1, 6)], codec=Codec.GZIP),
        build_batch([Record(6, 2000, b"key", None), Record(7, 2001, None, b"value")]),
    ]
    starts, pos = [], 0
    for p in parts:
        starts.append(pos)
        pos += len(p)
    return b"".join(parts), starts


def test_whole_batches_in_order() -> None:
    data, starts = _set()
    got = list(batches(data))
    assert [pos for pos, _ in got] == starts
    assert [(h.base_offset, h.last_offset, h.record_count) for _, h in got] == [(0, 0, 1), (1, 5, 5), (6, 7, 2)]
    assert sum(h.size for _, h in got) == len(data)
    assert [(pos, h.size) for pos, h in got] == list(frames(data))
    assert whole_length(data) == len(data)


def test_a_partial_tail_at_every_cut_point_is_skipped() -> None:
    data, starts = _set()
    ends = [*starts[1:], len(data)]
    for cut in range(len(data) + 1):
        whole = [s for s, e in zip(starts, ends, strict=True) if e <= cut]
        for buf in (data[:cut], memoryview(data)[:cut], bytearray(data[:cut])):
            assert [pos for pos, _ in batches(buf)] == whole, cut
            assert [pos for pos, _ in frames(buf)] == whole, cut
        assert whole_length(data[:cut]) == (ends[len(whole) - 1] if whole else 0), cut
        assert [pos for pos, _ in batches(data, 0, cut)] == whole, cut  # an `end` cuts as the buffer's end does


def test_start_and_end_bound_the_walk() -> None:
    data, starts = _set()
    assert [pos for pos, _ in batches(data, starts[1])] == starts[1:]
    assert [pos for pos, _ in batches(data, starts[1], starts[2])] == [starts[1]]
    assert [pos for pos, _ in frames(data, starts[2])] == [starts[2]]


def test_empty_buffer() -> None:
    assert list(batches(b"")) == []
    assert list(frames(b"")) == []
    assert whole_length(b"") == 0
    assert list(batches(memoryview(b""))) == []


def test_legacy_messages_frame_the_same_way() -> None:
    """A magic 0/1 set walks by its 12-byte framing; `batches` decodes a v2-shaped header (the caller checks the
    magic) wherever 61 bytes are left, so a legacy message shorter than that ends `batches`' walk as a tail."""
    v0 = message(0, b"k", b"a" * 60, magic=0)
    v1 = message(1, None, b"b" * 70, magic=1, timestamp=5)
    small = message(2, None, b"c", magic=1)  # under 61 bytes
    data = v0 + v1 + small
    assert list(frames(data)) == [(0, len(v0)), (len(v0), len(v1)), (len(v0) + len(v1), len(small))]
    assert whole_length(data) == len(data)
    assert whole_length(data[:-1]) == len(v0) + len(v1)
    got = list(batches(data))
    assert [(pos, h.magic, h.base_offset, h.size) for pos, h in got] == [(0, 0, 0, len(v0)), (len(v0), 1, 1, len(v1))]
    mixed = v0 + build_batch([Record(1, 0, None, b"v2")])
    assert [h.magic for _, h in batches(mixed)] == [0, 2]


def test_a_negative_length_ends_the_walk() -> None:
    """No batch has a negative length and nothing after one can be located: `batches` yields its header (the
    caller's checks refuse it) and stops; `frames` stops before it."""
    data, starts = _set()
    forged = bytearray(data)
    struct.pack_into(">i", forged, starts[1] + 8, -100)
    got = list(batches(forged))
    assert [pos for pos, _ in got] == starts[:2] and got[1][1].length == -100
    assert list(frames(forged)) == [(0, starts[1])]
    assert whole_length(forged) == starts[1]
    struct.pack_into(">i", forged, starts[1] + 8, -12)  # a size of 0 would walk in place forever
    assert len(list(batches(forged))) == 2


def test_a_length_shorter_than_a_header_is_yielded_for_the_caller_to_refuse() -> None:
    one = bytearray(build_batch([Record(0, 0, None, b"v" * 100)]))
    struct.pack_into(">i", one, 8, BATCH_HEADER_SIZE - 12 - 1)
    (pos, h), *rest = batches(one)
    assert pos == 0 and h.size == BATCH_HEADER_SIZE - 1 and h == HEADER.unpack_from(one, 0)
