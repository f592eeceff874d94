"""The consumer's decoding of fetched record sets (broker.client.consumer.decode_records)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.client.consumer import ConsumerRecord, _decode_until_corrupt, decode_records, next_offset_after
from broker.errors import CorruptRecordError
from broker.records.batch import LOG_APPEND_TIME, MAGIC_OFFSET, Record, build_batch
from broker.records.compression import Codec

TS = 1_700_000_000_000


def batch(base: int, n: int, *, codec=Codec.NONE, **kw) -> bytes:
    recs = [Record(base + i, TS + base + i, b"k%d" % (base + i), b"v%d" % (base + i), (("h", b"%d" % i),))
            for i in range(n)]  # fmt: skip
    return build_batch(recs, codec=codec, **kw)


def expected(offsets, topic="t", partition=3):
    return [ConsumerRecord(topic, partition, o, TS + o, b"k%d" % o, b"v%d" % o, (("h", b"%d" % (o - base),),))
            for base, o in offsets]  # fmt: skip


# three batches: offsets 0-4, 5-9 (gzip), 10-14 (zstd)
DATA = batch(0, 5) + batch(5, 5, codec=Codec.GZIP) + batch(10, 5, codec=Codec.ZSTD)
ALL = [(0 if o < 5 else 5 if o < 10 else 10, o) for o in range(15)]


def test_everything_from_the_start():
    assert decode_records(DATA, "t", 3, 0) == expected(ALL)


@pytest.mark.parametrize("position", range(16))
def test_from_any_offset_even_inside_a_batch(position):
    got = decode_records(DATA, "t", 3, position)
    assert got == expected([x for x in ALL if x[1] >= position])
    assert all(r.offset >= position for r in got)


def test_accepts_memoryview_and_bytearray():
    assert decode_records(memoryview(DATA), "t", 3, 7) == decode_records(bytearray(DATA), "t", 3, 7)
    assert [r.offset for r in decode_records(memoryview(DATA), "t", 3, 7)] == list(range(7, 15))


def test_empty():
    assert decode_records(b"", "t", 0, 0) == []


@given(st.integers(min_value=1, max_value=len(DATA) - 1))
def test_a_trailing_partial_batch_is_skipped(cut):
    got = decode_records(DATA[:cut], "t", 3, 0)
    whole = 0 if cut < len(batch(0, 5)) else 5 if cut < len(batch(0, 5) + batch(5, 5, codec=Codec.GZIP)) else 10
    assert [r.offset for r in got] == list(range(whole))


@pytest.mark.parametrize("where", [21, 23, 30, 45, 57, 61, 70, -1])
def test_a_flipped_byte_under_the_crc_is_a_corrupt_record(where):
    first = bytearray(batch(0, 5))
    first[where] ^= 0x40
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_records(bytes(first) + batch(5, 5), "t", 0, 0)


def test_a_corrupt_later_batch_is_reported_too():
    second = bytearray(batch(5, 5))
    second[-3] ^= 0x01
    with pytest.raises(CorruptRecordError, match="offset 5"):
        decode_records(batch(0, 5) + bytes(second), "t", 0, 0)


def test_without_crc_checks_the_damaged_bytes_come_through():
    damaged = bytearray(batch(0, 1))
    assert damaged[-1:] == b"0"  # the header value of the only record ends the batch
    damaged[-1] = ord("9")
    (r,) = decode_records(bytes(damaged), "t", 0, 0, check_crcs=False)
    assert r.headers == (("h", b"9"),)
    with pytest.raises(CorruptRecordError):
        decode_records(bytes(damaged), "t", 0, 0, check_crcs=True)


def test_a_batch_that_is_not_magic_2_is_refused():
    b = bytearray(batch(0, 2))
    b[MAGIC_OFFSET] = 1
    with pytest.raises(CorruptRecordError, match="magic 1"):
        decode_records(bytes(b), "t", 0, 0)


def test_control_batches_are_skipped():
    control = build_batch([Record(5, TS, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], control=True,
                          transactional=True, producer_id=7, producer_epoch=0)  # fmt: skip
    data = batch(0, 5) + control + batch(6, 2)
    assert [r.offset for r in decode_records(data, "t", 0, 0)] == [0, 1, 2, 3, 4, 6, 7]
    assert decode_records(control, "t", 0, 5) == []
    assert next_offset_after(control, 5) == 6  # the consumer steps over it


def test_next_offset_after_ignores_a_partial_tail():
    data = batch(0, 5) + batch(5, 5)
    assert next_offset_after(data, 0) == 10
    assert next_offset_after(data[:-1], 0) == 5
    assert next_offset_after(b"", 42) == 42


def test_log_append_time_batches_carry_the_brokers_time():
    b = build_batch([Record(0, TS, None, b"a"), Record(1, TS + 5, None, b"b")], timestamp_type=LOG_APPEND_TIME)
    got = decode_records(b, "t", 0, 0)
    assert [(r.timestamp, r.timestamp_type) for r in got] == [(TS + 5, 1), (TS + 5, 1)]
    assert [r.timestamp_type for r in decode_records(batch(0, 2), "t", 0, 0)] == [0, 0]
    assert [r.offset for r in decode_records(b, "t", 0, 1)] == [1]


def test_null_keys_values_and_header_values_survive():
    b = build_batch([Record(0, TS, None, None, (("a", None), ("a", b""), ("b", b"\xff")))])
    (r,) = decode_records(b, "t", 1, 0)
    assert (r.key, r.value, r.headers) == (None, None, (("a", None), ("a", b""), ("b", b"\xff")))
    assert (r.topic, r.partition, r.offset, r.timestamp) == ("t", 1, 0, TS)


def test_the_consumer_keeps_the_good_batches_before_a_corrupt_one():
    second = bytearray(batch(5, 5))
    second[-3] ^= 0x01
    records, error = _decode_until_corrupt(batch(0, 5) + bytes(second) + batch(10, 5), "t", 0, 2)
    assert [r.offset for r in records] == [2, 3, 4]
    assert isinstance(error, CorruptRecordError) and "offset 5" in str(error)
