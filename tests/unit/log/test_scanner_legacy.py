"""broker/log/scanner.py on magic 0/1 message sets as Apache Kafka stored them, alone and mixed with v2
batches: each checked by its own format, a compressed wrapper counted as its inner records (Kafka's
AbstractLegacyRecordBatch), and found again by the salvage search."""

from __future__ import annotations

import random
import time

import pytest

from broker.log.scanner import ScannedBatch, find_next_batch, read_batch, scan
from broker.records.compression import Codec, compress
from tests.unit.records.legacy_sets import message, stored_set

T = 1_500_000_000_000
RECORDS = [(b"k%d" % i, b"value-%d" % i * 5, T + (7 * i) % 5) for i in range(5)]  # largest ts not the last


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4], ids=lambda c: c.name.lower())
@pytest.mark.parametrize("magic", [0, 1])
def test_a_compressed_wrapper_is_its_inner_records(magic, codec):
    buf = stored_set(RECORDS, 40, magic=magic, codec=codec)
    (item,) = list(scan(buf))
    assert (item.magic, item.base_offset, item.last_offset, item.record_count) == (magic, 40, 44, 5)
    assert isinstance(item, ScannedBatch) and item.valid and item.problem is None
    assert item.max_timestamp == (T + 4 if magic == 1 else -1)  # the wrapper's: the largest inner timestamp
    assert (item.position, item.size, item.end) == (0, len(buf), len(buf))


def test_log_append_time_wrapper_max_timestamp_is_the_brokers():
    buf = stored_set(RECORDS, 0, magic=1, codec=Codec.GZIP, log_append_time=T + 99)
    assert read_batch(buf, 0, len(buf)).max_timestamp == T + 99


@pytest.mark.parametrize("magic", [0, 1])
def test_uncompressed_messages_are_one_record_each(magic):
    buf = stored_set(RECORDS, 10, magic=magic)
    items = list(scan(buf))
    assert [(i.base_offset, i.last_offset, i.record_count, i.valid) for i in items] == [
        (10 + i, 10 + i, 1, True) for i in range(5)
    ]


def test_mixed_log_of_an_upgraded_cluster_scans_whole(make_batch):
    """magic 0, then magic 1 (0.10), then v2 (0.11), and a magic 1 batch after v2 (a down-converted
    message format): every batch valid, offsets continuous."""
    parts = [
        stored_set(RECORDS[:2], 0, magic=0),
        stored_set(RECORDS, 2, magic=0, codec=Codec.SNAPPY),
        stored_set(RECORDS, 7, magic=1, codec=Codec.GZIP),
        make_batch([b"a", b"b", b"c"], offset=12),
        stored_set(RECORDS[:3], 15, magic=1, codec=Codec.LZ4),
        stored_set(RECORDS[:1], 18, magic=1),
    ]
    items = list(scan(b"".join(parts)))
    assert [(i.magic, i.base_offset, i.last_offset, i.record_count) for i in items] == [
        (0, 0, 0, 1), (0, 1, 1, 1), (0, 2, 6, 5), (1, 7, 11, 5), (2, 12, 14, 3), (1, 15, 17, 3), (1, 18, 18, 1),
    ]  # fmt: skip
    assert all(isinstance(i, ScannedBatch) and i.valid for i in items)


def test_wrapper_whose_records_do_not_decode_is_invalid_and_the_scan_goes_on():
    bad = message(5, None, b"not gzip at all", magic=1, attributes=Codec.GZIP)  # its CRC-32 holds
    good = stored_set(RECORDS, 6, magic=1, codec=Codec.GZIP)
    items = list(scan(bad + good))
    assert len(items) == 2
    assert items[0].crc_ok and not items[0].valid and "gzip" in items[0].invalid_reason
    assert items[1].valid and items[1].base_offset == 6


def test_crc32_mismatch_is_the_reason_of_a_damaged_legacy_batch():
    raw = bytearray(stored_set(RECORDS, 0, magic=1, codec=Codec.GZIP))
    raw[-3] ^= 0x10
    item = read_batch(raw, 0, len(raw))
    assert not item.valid and item.invalid_reason.startswith("CRC-32 mismatch")


def test_find_next_batch_finds_legacy_batches_after_garbage():
    garbage = bytes(range(256)) * 2 + b"\x00" * 300 + b"\x01" * 40
    first = stored_set(RECORDS[:2], 30, magic=0)
    second = stored_set(RECORDS, 32, magic=1, codec=Codec.GZIP)
    buf = garbage + first + second
    assert find_next_batch(buf, 0) == len(garbage)
    assert find_next_batch(buf, len(garbage)) == len(garbage) + len(first) // 2  # the second message of `first`
    assert find_next_batch(buf, 0, min_offset=32) == len(garbage) + len(first)  # the wrapper's base offset is 32
    assert find_next_batch(buf, 0, min_offset=33) is None
    damaged = bytearray(buf)
    damaged[len(garbage) + 20] ^= 0xFF  # the first message no longer checksums
    assert find_next_batch(damaged, 0) == len(garbage) + len(first) // 2


def test_find_next_batch_takes_the_first_batch_of_any_magic(make_batch):
    legacy = stored_set(RECORDS[:1], 0, magic=1)
    v2 = make_batch([b"x"], offset=1)
    assert find_next_batch(b"junk" + legacy + v2, 0) == 4
    assert find_next_batch(b"junk" + v2 + legacy, 0) == 4


def test_find_next_batch_over_zeros_and_random_bytes_is_quick():
    rng = random.Random(5)
    noise = b"\x00" * (1 << 20) + rng.randbytes(1 << 20)
    tail = message(1, None, b"v", magic=1)
    t = time.perf_counter()
    assert find_next_batch(noise + tail, 0) == len(noise)
    assert time.perf_counter() - t < 2.0


def test_a_wrapper_with_a_zstd_payload_is_invalid():
    raw = message(0, None, compress(Codec.ZSTD, message(0, None, b"v", magic=1)), magic=1, attributes=Codec.ZSTD)
    item = read_batch(raw, 0, len(raw))
    assert item.crc_ok and not item.valid and "zstd" in item.problem
