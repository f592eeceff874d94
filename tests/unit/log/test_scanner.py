"""broker/log/scanner.py: framing of segment bytes, damage reports and the salvage search."""

from __future__ import annotations

import struct

import pytest

from broker.log.scanner import Damage, ScannedBatch, find_next_batch, open_segment, read_batch, scan
from broker.records.batch import BATCH_HEADER_SIZE, CRC_OFFSET
from tests.unit.records.legacy_sets import message


@pytest.fixture
def batches(make_batch) -> list[bytes]:
    """Five batches with consecutive offsets 0..11 and growing timestamps."""
    out, offset = [], 0
    for i, n in enumerate([1, 3, 2, 5, 1]):
        out.append(make_batch([b"v%d-%d" % (i, j) for j in range(n)], offset=offset, timestamp=1000 + i))
        offset += n
    return out


def test_scan_yields_every_batch_with_its_position_and_offsets(batches):
    buf = b"".join(batches)
    items = list(scan(buf))
    assert all(isinstance(i, ScannedBatch) for i in items)
    positions = [sum(len(b) for b in batches[:i]) for i in range(len(batches))]
    assert [i.position for i in items] == positions
    assert [i.size for i in items] == [len(b) for b in batches]
    assert [(i.base_offset, i.last_offset, i.record_count) for i in items] == [
        (0, 0, 1), (1, 3, 3), (4, 5, 2), (6, 10, 5), (11, 11, 1),
    ]  # fmt: skip
    assert [i.max_timestamp for i in items] == [1000, 1001, 1002, 1003, 1004]
    assert all(i.crc_ok and i.magic == 2 and i.computed_crc == i.stored_crc for i in items)
    assert items[-1].end == len(buf)


def test_scan_between_positions(batches):
    buf = b"".join(batches)
    start = len(batches[0])
    end = start + len(batches[1]) + len(batches[2])
    assert [i.base_offset for i in scan(buf, start, end)] == [1, 4]


def test_bad_crc_keeps_framing_and_the_scan_goes_on(batches):
    buf = bytearray(b"".join(batches))
    pos = len(batches[0]) + len(batches[1])
    buf[pos + BATCH_HEADER_SIZE + 2] ^= 0x40  # a byte of the third batch's records
    items = list(scan(buf))
    assert len(items) == 5 and all(isinstance(i, ScannedBatch) for i in items)
    assert [i.crc_ok for i in items] == [True, True, False, True, True]
    assert items[2].stored_crc != items[2].computed_crc


def test_verify_crc_false_skips_the_check(batches):
    buf = bytearray(batches[0])
    buf[-1] ^= 1
    item = read_batch(buf, 0, len(buf), verify_crc=False)
    assert item.computed_crc is None and item.crc_ok
    assert not read_batch(buf, 0, len(buf)).crc_ok


@pytest.mark.parametrize("cut", [1, 5, 17, 30, BATCH_HEADER_SIZE, -1])
def test_truncated_last_batch_is_damage_at_its_start(batches, cut):
    last = batches[-1]
    keep = cut if cut > 0 else len(last) + cut
    buf = b"".join(batches[:-1]) + last[:keep]
    items = list(scan(buf))
    assert [i.base_offset for i in items[:-1]] == [0, 1, 4, 6]
    damage = items[-1]
    assert isinstance(damage, Damage)
    assert damage.position == len(buf) - keep
    assert "truncated" in damage.reason


def test_negative_length_short_length_and_unknown_magic(batches):
    good = batches[0]
    neg = bytearray(good)
    struct.pack_into(">i", neg, 8, -5)
    assert "negative" in read_batch(neg, 0, len(neg)).reason
    short = bytearray(good)
    struct.pack_into(">i", short, 8, 20)
    assert "shorter than a batch header" in read_batch(short, 0, len(short)).reason
    magic = bytearray(good)
    magic[16] = 7
    assert read_batch(magic, 0, len(magic)) == Damage(0, "unknown magic 7")
    # the scan stops at the first damage: nothing after it is located
    items = list(scan(bytes(magic) + batches[1]))
    assert items == [Damage(0, "unknown magic 7")]


def test_negative_offset_delta_is_damage(batches):
    buf = bytearray(batches[1])
    struct.pack_into(">i", buf, 23, -2)  # lastOffsetDelta
    assert isinstance(read_batch(buf, 0, len(buf)), Damage)


def test_legacy_message_frames_and_checksums():
    msg = message(7, None, b"old", magic=1, timestamp=5)
    item = read_batch(msg, 0, len(msg))
    assert isinstance(item, ScannedBatch)
    assert (item.magic, item.base_offset, item.last_offset, item.record_count) == (1, 7, 7, 1)
    assert item.crc_ok and item.legacy.value == b"old" and item.max_timestamp == 5
    bad = bytearray(msg)
    bad[-1] ^= 0xFF
    assert not read_batch(bad, 0, len(bad)).crc_ok


def test_find_next_batch_skips_garbage_to_the_next_checksummed_batch(batches):
    garbage = b"\x02" * 40 + bytes(range(200))  # magic-looking bytes that do not frame
    buf = batches[0] + garbage + b"".join(batches[1:])
    after = len(batches[0]) + len(garbage)
    assert find_next_batch(buf, 0) == after
    assert find_next_batch(buf, len(batches[0])) == after
    # a batch exactly at `start` is not "next"; one at start + 1 is
    assert find_next_batch(buf, after) == after + len(batches[1])
    assert find_next_batch(b"\x00" + buf, 0) == 1
    # min_offset skips batches with lower offsets
    second_last = len(buf) - len(batches[-1]) - len(batches[-2])
    assert find_next_batch(buf, 0, min_offset=6) == second_last
    assert find_next_batch(buf, 0, min_offset=12) is None
    assert find_next_batch(buf, 0, end=after + BATCH_HEADER_SIZE) is None  # the batch runs past `end`


def test_find_next_batch_ignores_a_batch_with_a_bad_crc(batches):
    bad = bytearray(batches[1])
    bad[CRC_OFFSET] ^= 1
    buf = batches[0] + bytes(bad) + batches[2]
    assert find_next_batch(buf, 0) == len(batches[0]) + len(bad)


def test_open_segment_maps_files(tmp_path, batches):
    empty = tmp_path / "empty.log"
    empty.touch()
    with open_segment(empty) as buf:
        assert len(buf) == 0 and list(scan(buf)) == []
    full = tmp_path / "full.log"
    full.write_bytes(b"".join(batches))
    with open_segment(full) as buf:
        assert [i.base_offset for i in scan(buf)] == [0, 1, 4, 6, 11]
        assert find_next_batch(buf, 0) == len(batches[0])
