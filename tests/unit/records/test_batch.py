"""RecordBatch v2: a pinned golden vector, round trips over every codec, attribute bits, corruption."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.errors import CorruptRecordError
from broker.records import BATCH_HEADER_SIZE, Codec, Record, build_batch, crc32c, decode_header, iter_records
from broker.records.batch import HEADER, LOG_APPEND_TIME, crc_ok

# Base offset 0, two records, codec none, producer id 42 / epoch 3 / base sequence 7, partition leader
# epoch 0. Byte-identical to what kafka-python's DefaultRecordBatchBuilder writes for the same input.
GOLDEN_RECORDS = [
    Record(0, 1_700_000_000_000, b"k1", b"v1", (("h", b"x"),)),
    Record(1, 1_700_000_000_005, b"k2", None),
]
GOLDEN_CRC = 0x78C9A7FF
GOLDEN = bytes.fromhex(
    "0000000000000000"  # baseOffset 0
    "00000049"  # batchLength 73
    "00000000"  # partitionLeaderEpoch 0
    "02"  # magic
    "78c9a7ff"  # crc
    "0000"  # attributes
    "00000001"  # lastOffsetDelta 1
    "0000018bcfe56800"  # baseTimestamp 1700000000000
    "0000018bcfe56805"  # maxTimestamp 1700000000005
    "000000000000002a"  # producerId 42
    "0003"  # producerEpoch 3
    "00000007"  # baseSequence 7
    "00000002"  # recordCount 2
    # record 0: length 14, attrs 0, tsDelta 0, offDelta 0, key "k1", value "v1", 1 header h=x
    "1c 00 00 00 04 6b31 04 7631 02 02 68 02 78"
    # record 1: length 8, attrs 0, tsDelta 5, offDelta 1, key "k2", value null, 0 headers
    "10 00 0a 02 04 6b32 01 00"
)


def build_golden() -> bytes:
    return build_batch(GOLDEN_RECORDS, producer_id=42, producer_epoch=3, base_sequence=7, partition_leader_epoch=0)


def test_golden_vector_bytes() -> None:
    assert build_golden() == GOLDEN
    assert len(GOLDEN) == 85


def test_golden_vector_crc() -> None:
    assert struct.unpack_from(">I", GOLDEN, 17)[0] == GOLDEN_CRC
    assert crc32c(GOLDEN[21:]) == GOLDEN_CRC
    assert crc_ok(GOLDEN, 0, decode_header(GOLDEN))


def test_golden_decode_header() -> None:
    h = decode_header(GOLDEN)
    assert h.base_offset == 0
    assert h.length == 73
    assert h.size == 85
    assert h.partition_leader_epoch == 0
    assert h.magic == 2
    assert h.crc == GOLDEN_CRC
    assert h.attributes == 0
    assert h.codec == Codec.NONE
    assert h.timestamp_type == 0
    assert not h.is_transactional
    assert not h.is_control
    assert h.last_offset_delta == 1
    assert h.last_offset == 1
    assert h.next_offset == 2
    assert h.base_timestamp == 1_700_000_000_000
    assert h.max_timestamp == 1_700_000_000_005
    assert h.producer_id == 42
    assert h.producer_epoch == 3
    assert h.base_sequence == 7
    assert h.record_count == 2
    assert BATCH_HEADER_SIZE == 61


def test_golden_iter_records() -> None:
    assert list(iter_records(GOLDEN)) == GOLDEN_RECORDS
    first, second = iter_records(GOLDEN)
    assert (first.offset, first.timestamp, first.key, first.value, first.headers) == (
        0, 1_700_000_000_000, b"k1", b"v1", (("h", b"x"),),
    )  # fmt: skip
    assert (second.offset, second.timestamp, second.key, second.value, second.headers) == (
        1, 1_700_000_000_005, b"k2", None, (),
    )  # fmt: skip


def test_decode_at_a_position_in_a_larger_buffer() -> None:
    other = build_batch([Record(2, 5, None, b"z")])
    buf = bytearray(b"\x00" * 3 + GOLDEN + other)
    h = decode_header(buf, 3)
    assert h.base_offset == 0 and h.crc == GOLDEN_CRC
    assert list(iter_records(buf, 3)) == GOLDEN_RECORDS
    assert list(iter_records(buf, 3 + len(GOLDEN))) == [Record(2, 5, None, b"z")]
    assert list(iter_records(memoryview(buf), 3, h)) == GOLDEN_RECORDS


def test_base_offset_and_epoch_sit_outside_the_crc() -> None:
    moved = bytearray(GOLDEN)
    struct.pack_into(">qii", moved, 0, 1000, 73, 9)
    h = decode_header(moved)
    assert (h.base_offset, h.partition_leader_epoch, h.last_offset) == (1000, 9, 1001)
    assert crc_ok(moved, 0, h)
    assert [r.offset for r in iter_records(moved)] == [1000, 1001]


def test_empty_batch_is_rejected() -> None:
    with pytest.raises(ValueError):
        build_batch([])


# --- round trips ---------------------------------------------------------------------------------

TIMESTAMP = st.integers(min_value=-1, max_value=2**42)
OPT_BYTES = st.none() | st.binary(max_size=40)
HEADERS = st.lists(st.tuples(st.text(max_size=10), OPT_BYTES), max_size=3).map(tuple)


@st.composite
def record_lists(draw: st.DrawFn, max_size: int = 8) -> list[Record]:
    n = draw(st.integers(1, max_size))
    offset = draw(st.integers(0, 2**40))
    out = []
    for _ in range(n):
        out.append(
            Record(
                offset,
                draw(TIMESTAMP),
                draw(OPT_BYTES),
                draw(OPT_BYTES),
                draw(HEADERS),
                draw(st.integers(0, 255)),
            )
        )
        offset += draw(st.integers(1, 1000))  # offset gaps, as after compaction
    return out


@pytest.mark.parametrize("codec", list(Codec))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=record_lists())
def test_round_trip(codec: Codec, records: list[Record]) -> None:
    buf = build_batch(records, codec=codec, producer_id=5, producer_epoch=1, base_sequence=10)
    h = decode_header(buf)
    assert h.size == len(buf)
    assert h.magic == 2
    assert h.codec == codec
    assert h.base_offset == records[0].offset
    assert h.last_offset == records[-1].offset
    assert h.record_count == len(records)
    assert h.base_timestamp == records[0].timestamp
    assert h.max_timestamp == max(r.timestamp for r in records)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (5, 1, 10)
    assert crc_ok(buf, 0, h)
    assert list(iter_records(buf)) == records


@settings(max_examples=60, deadline=None)
@given(records=record_lists(), lower=st.integers(0, 100))
def test_explicit_base_offset(records: list[Record], lower: int) -> None:
    base = records[0].offset - lower
    buf = build_batch(records, base_offset=base)
    h = decode_header(buf)
    assert h.base_offset == base
    assert h.last_offset_delta == records[-1].offset - base
    assert list(iter_records(buf)) == records


def test_unicode_header_keys_and_null_header_values() -> None:
    headers = (("ключ", b"\x00"), ("键🔑", None), ("", b""), ("a", None))
    records = [Record(3, 10, b"", b"", headers), Record(4, 9, None, None, headers[::-1])]
    for codec in Codec:
        out = list(iter_records(build_batch(records, codec=codec)))
        assert out == records
        assert out[0].headers[1] == ("键🔑", None)


def test_large_batch_round_trip_every_codec() -> None:
    records = [Record(i, 1000 + i, b"key-%d" % (i % 7), b"value " * (i % 50), (("n", b"%d" % i),)) for i in range(500)]
    for codec in Codec:
        buf = build_batch(records, codec=codec)
        if codec != Codec.NONE:
            assert len(buf) < len(build_batch(records)) // 2
        assert list(iter_records(buf)) == records


# --- attribute bits ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", list(Codec))
@pytest.mark.parametrize("transactional", [False, True])
@pytest.mark.parametrize("control", [False, True])
@pytest.mark.parametrize("log_append", [False, True])
def test_attribute_bits(codec: Codec, transactional: bool, control: bool, log_append: bool) -> None:
    records = [Record(0, 100, b"a", b"1"), Record(1, 300, None, b"2"), Record(2, 200, b"c", None)]
    buf = build_batch(
        records,
        codec=codec,
        transactional=transactional,
        control=control,
        timestamp_type=LOG_APPEND_TIME if log_append else 0,
    )
    h = decode_header(buf)
    assert h.codec == codec
    assert h.is_transactional is transactional
    assert h.is_control is control
    assert h.timestamp_type == (1 if log_append else 0)
    assert h.attributes == int(codec) | (0x08 * log_append) | (0x10 * transactional) | (0x20 * control)
    assert h.max_timestamp == 300
    out = list(iter_records(buf))
    assert [(r.offset, r.key, r.value) for r in out] == [(r.offset, r.key, r.value) for r in records]
    if log_append:
        # LogAppendTime: every record carries the batch's max timestamp
        assert [r.timestamp for r in out] == [300, 300, 300]
    else:
        assert [r.timestamp for r in out] == [100, 300, 200]


# --- corruption ----------------------------------------------------------------------------------


def _drain(buf: bytes | bytearray) -> list[Record]:
    return list(iter_records(buf))


@pytest.mark.parametrize("codec", list(Codec))
def test_every_truncation_raises_corrupt(codec: Codec) -> None:
    buf = build_batch(GOLDEN_RECORDS, codec=codec)
    for cut in range(len(buf)):
        with pytest.raises(CorruptRecordError):
            _drain(buf[:cut])


def test_truncated_records_with_consistent_length_raise() -> None:
    # cut the records part and fix batchLength so the batch frames but the records do not parse
    for cut in range(BATCH_HEADER_SIZE, len(GOLDEN)):
        buf = bytearray(GOLDEN[:cut])
        struct.pack_into(">i", buf, 8, cut - 12)
        with pytest.raises(CorruptRecordError):
            _drain(buf)


def test_record_count_mismatch_raises() -> None:
    buf = bytearray(GOLDEN)
    struct.pack_into(">i", buf, 57, 3)
    with pytest.raises(CorruptRecordError):
        _drain(buf)
    struct.pack_into(">i", buf, 57, 1)
    with pytest.raises(CorruptRecordError):
        _drain(buf)


def test_trailing_garbage_raises() -> None:
    buf = bytearray(GOLDEN + b"\x00")
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    with pytest.raises(CorruptRecordError):
        _drain(buf)


def frame(records: bytes, count: int) -> bytes:
    """A codec-none batch around hand-written record bytes, with a correct CRC."""
    buf = bytearray(HEADER.pack(0, 49 + len(records), 0, 2, 0, 0, count - 1, 0, 0, -1, -1, -1, count) + records)
    struct.pack_into(">I", buf, 17, crc32c(buf[21:]))
    return bytes(buf)


def test_frame_helper_matches_build_batch() -> None:
    record = bytes.fromhex("10 00 00 00 02 61 02 62 00")  # key b"a", value b"b"
    assert frame(record, 1) == build_batch([Record(0, 0, b"a", b"b")], partition_leader_epoch=0)


def test_negative_header_count_raises() -> None:
    # attrs 0, tsDelta 0, offDelta 0, key null, value null, header count zigzag(-1)
    buf = frame(bytes.fromhex("0c 00 00 00 01 01 01"), 1)
    with pytest.raises(CorruptRecordError, match="header count"):
        _drain(buf)


def test_null_header_key_raises() -> None:
    # one header whose key length is -1 (null) and value null; the record otherwise adds up
    buf = frame(bytes.fromhex("10 00 00 00 01 01 02 01 01"), 1)
    with pytest.raises(CorruptRecordError, match="null key"):
        _drain(buf)


def test_record_length_past_the_batch_raises() -> None:
    buf = frame(bytes.fromhex("7e 00 00 00 01 01 00"), 1)
    with pytest.raises(CorruptRecordError):
        _drain(buf)


@pytest.mark.parametrize("codec", [c for c in Codec if c != Codec.NONE])
def test_compressed_block_that_does_not_decompress_raises(codec: Codec) -> None:
    buf = bytearray(build_batch(GOLDEN_RECORDS, codec=codec))
    buf[BATCH_HEADER_SIZE:] = b"\xff" * (len(buf) - BATCH_HEADER_SIZE)
    with pytest.raises(CorruptRecordError):
        _drain(buf)


def test_unknown_codec_bits_raise() -> None:
    for bits in (5, 6, 7):
        buf = bytearray(GOLDEN)
        buf[22] = bits
        with pytest.raises(CorruptRecordError):
            _drain(buf)


def test_crc_detects_a_flipped_bit() -> None:
    for i in range(21, len(GOLDEN)):
        buf = bytearray(GOLDEN)
        buf[i] ^= 0x10
        assert not crc_ok(buf, 0, decode_header(buf))


@settings(max_examples=200, deadline=None)
@given(records=record_lists(max_size=5), data=st.data())
def test_flipped_record_byte_parses_or_raises_corrupt(records: list[Record], data: st.DataObject) -> None:
    buf = bytearray(build_batch(records))
    i = data.draw(st.integers(BATCH_HEADER_SIZE, len(buf) - 1))
    buf[i] ^= data.draw(st.integers(1, 255))
    try:
        out = _drain(buf)
    except CorruptRecordError:
        return
    assert len(out) == len(records)


@settings(max_examples=200, deadline=None)
@given(records=record_lists(max_size=5), codec=st.sampled_from(list(Codec)), data=st.data())
def test_flipped_byte_anywhere_parses_or_raises_corrupt(
    records: list[Record], codec: Codec, data: st.DataObject
) -> None:
    buf = bytearray(build_batch(records, codec=codec))
    i = data.draw(st.integers(0, len(buf) - 1))
    buf[i] ^= data.draw(st.integers(1, 255))
    try:
        _drain(buf)
    except CorruptRecordError:
        pass
