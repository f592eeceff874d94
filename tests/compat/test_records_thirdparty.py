"""Record formats against kafka-python and aiokafka, in both directions, for every codec.

Third-party builders -> broker.records (iter_records, legacy.decode_message / inner_messages), and
build_batch -> third-party readers (validate_crc() and every record field).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Any

import aiokafka.record.default_records as aio_default
import aiokafka.record.legacy_records as aio_legacy
import pytest
from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords as KafkaMemoryRecords
from kafka.record.default_records import DefaultRecordBatch as KafkaBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder as KafkaLegacyBuilder

from broker.records import Codec, Record, build_batch, decode_header, iter_records
from broker.records.batch import LOG_APPEND_TIME, crc_ok
from broker.records.legacy import decode_message, inner_messages

Row = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]

BUILDERS: dict[str, Callable[..., Any]] = {
    "kafka-python": KafkaBuilder,
    "aiokafka": aio_default.DefaultRecordBatchBuilder,
    "aiokafka-py": aio_default._DefaultRecordBatchBuilderPy,
}

READERS: dict[str, Callable[[bytes], Any]] = {
    "kafka-python": KafkaBatch,
    "kafka-python-memoryrecords": lambda b: KafkaMemoryRecords(b).next_batch(),
    "aiokafka": aio_default.DefaultRecordBatch,
    "aiokafka-py": aio_default._DefaultRecordBatchPy,
    "aiokafka-memoryrecords": lambda b: AioMemoryRecords(b).next_batch(),
}

BASE_TS = 1_700_000_000_000
# offsets with gaps, null and empty keys and values, headers with null values and unicode keys;
# values repeat so that every codec shrinks the batch (third-party builders fall back to none otherwise)
RECORDS = [
    Record(0, BASE_TS, b"key-0", b"value " * 40, (("trace", b"abc"), ("ключ", None))),
    Record(1, BASE_TS + 7, None, b"value " * 40),
    Record(2, BASE_TS - 3, b"", None, (("键", b""),)),
    Record(5, BASE_TS + 1000, b"key-5", b"", ()),
    Record(9, BASE_TS + 2, b"key-9", b"value " * 40, (("a", b"1"), ("a", b"2"))),
]


def rows(records: Any) -> list[Row]:
    """(offset, timestamp, key, value, headers) of our or their records."""
    return [(r.offset, r.timestamp, r.key, r.value, tuple((k, v) for k, v in r.headers)) for r in records]


def their_build(name: str, codec: Codec, records: list[Record], *, transactional: bool = False) -> bytes:
    builder = BUILDERS[name](2, int(codec), transactional, 42, 3, 7, 1 << 20)
    for r in records:
        assert builder.append(r.offset, r.timestamp, r.key, r.value, list(r.headers)) is not None
    return bytes(builder.build())


def assign_base_offset(buf: bytes, base_offset: int) -> bytes:
    """What a broker does on append: rewrite baseOffset (outside the CRC)."""
    return struct.pack(">q", base_offset) + buf[8:]


# --- their builders -> our reader ----------------------------------------------------------------


@pytest.mark.parametrize("codec", list(Codec))
@pytest.mark.parametrize("builder", list(BUILDERS))
def test_their_batch_parses_with_ours(builder: str, codec: Codec) -> None:
    buf = their_build(builder, codec, RECORDS)
    h = decode_header(buf)
    assert h.codec == codec
    assert h.magic == 2
    assert crc_ok(buf, 0, h)
    assert (h.base_offset, h.last_offset_delta, h.record_count) == (0, 9, 5)
    assert (h.base_timestamp, h.max_timestamp) == (BASE_TS, BASE_TS + 1000)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (42, 3, 7)
    assert not h.is_transactional and not h.is_control and h.timestamp_type == 0
    assert rows(iter_records(buf)) == rows(RECORDS)

    moved = assign_base_offset(buf, 1000)
    assert crc_ok(moved, 0, decode_header(moved))
    assert rows(iter_records(moved)) == [(1000 + o, *rest) for o, *rest in rows(RECORDS)]


@pytest.mark.parametrize("builder", list(BUILDERS))
def test_their_transactional_batch(builder: str) -> None:
    buf = their_build(builder, Codec.NONE, RECORDS, transactional=True)
    h = decode_header(buf)
    assert h.is_transactional
    assert rows(iter_records(buf)) == rows(RECORDS)


@pytest.mark.parametrize("builder", list(BUILDERS))
def test_their_multi_block_xerial_snappy(builder: str) -> None:
    # more than the 32 KiB xerial block size, so the snappy stream has several blocks
    records = [Record(i, BASE_TS + i, b"k%d" % i, (b"%06d" % i) * 200) for i in range(100)]
    buf = their_build(builder, Codec.SNAPPY, records)
    assert buf[61:69] == b"\x82SNAPPY\x00"
    assert decode_header(buf).codec == Codec.SNAPPY
    assert rows(iter_records(buf)) == rows(records)


def test_identical_bytes_uncompressed() -> None:
    # kafka-python writes partitionLeaderEpoch 0, aiokafka -1 (as the Java producer); the rest is equal
    ours = build_batch(RECORDS, producer_id=42, producer_epoch=3, base_sequence=7, partition_leader_epoch=0)
    assert ours == their_build("kafka-python", Codec.NONE, RECORDS)
    ours = build_batch(RECORDS, producer_id=42, producer_epoch=3, base_sequence=7, partition_leader_epoch=-1)
    assert ours == their_build("aiokafka", Codec.NONE, RECORDS)
    assert ours == their_build("aiokafka-py", Codec.NONE, RECORDS)


# --- our builder -> their readers ----------------------------------------------------------------


def check_their_batch(batch: Any, buf: bytes, records: list[Record], codec: Codec) -> None:
    h = decode_header(buf)
    assert batch.validate_crc() is True
    assert batch.magic == 2
    assert batch.base_offset == h.base_offset
    assert batch.compression_type == codec
    assert batch.crc == h.crc
    assert batch.last_offset_delta == h.last_offset_delta
    assert batch.first_timestamp == h.base_timestamp
    assert batch.max_timestamp == h.max_timestamp
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
        h.producer_id, h.producer_epoch, h.base_sequence,
    )  # fmt: skip
    assert batch.next_offset == h.next_offset
    assert rows(batch) == rows(records)


@pytest.mark.parametrize("codec", list(Codec))
@pytest.mark.parametrize("reader", list(READERS))
def test_our_batch_parses_with_theirs(reader: str, codec: Codec) -> None:
    records = [r._replace(offset=r.offset + 500) for r in RECORDS]
    buf = build_batch(records, codec=codec, producer_id=42, producer_epoch=3, base_sequence=7)
    batch = READERS[reader](buf)
    check_their_batch(batch, buf, records, codec)
    assert batch.is_transactional is False
    assert batch.is_control_batch is False
    assert batch.timestamp_type == 0


@pytest.mark.parametrize("reader", list(READERS))
def test_their_reader_rejects_our_batch_with_a_flipped_byte(reader: str) -> None:
    buf = bytearray(build_batch(RECORDS))
    buf[-1] ^= 0x01
    assert READERS[reader](bytes(buf)).validate_crc() is False


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.ZSTD])
@pytest.mark.parametrize("reader", list(READERS))
def test_our_transactional_log_append_time_batch(reader: str, codec: Codec) -> None:
    buf = build_batch(
        RECORDS, codec=codec, producer_id=9, producer_epoch=0, base_sequence=0,
        transactional=True, timestamp_type=LOG_APPEND_TIME,
    )  # fmt: skip
    batch = READERS[reader](buf)
    assert batch.validate_crc() is True
    assert batch.is_transactional is True
    assert batch.timestamp_type == 1
    theirs = rows(batch)
    assert theirs == rows(iter_records(buf))
    assert [t[1] for t in theirs] == [BASE_TS + 1000] * len(RECORDS)


@pytest.mark.parametrize("memory_records", [KafkaMemoryRecords, AioMemoryRecords])
def test_their_memory_records_walk_our_batches(memory_records: Callable[[bytes], Any]) -> None:
    batches = [
        build_batch(RECORDS[:2], codec=Codec.GZIP),
        build_batch([r._replace(offset=r.offset + 10) for r in RECORDS[2:]], codec=Codec.LZ4),
    ]
    mr = memory_records(b"".join(batches))
    seen = []
    while mr.has_next():
        batch = mr.next_batch()
        assert batch.validate_crc() is True
        seen.extend(rows(batch))
    assert seen == rows(RECORDS[:2]) + rows(r._replace(offset=r.offset + 10) for r in RECORDS[2:])


OPT_BYTES = st.none() | st.binary(max_size=30)


@st.composite
def record_lists(draw: st.DrawFn) -> list[Record]:
    out, offset = [], 0
    for _ in range(draw(st.integers(1, 6))):
        headers = tuple(draw(st.lists(st.tuples(st.text(max_size=8), OPT_BYTES), max_size=2)))
        out.append(Record(offset, draw(st.integers(0, 2**41)), draw(OPT_BYTES), draw(OPT_BYTES), headers))
        offset += draw(st.integers(1, 50))
    return out


@settings(max_examples=100, deadline=None)
@given(records=record_lists(), codec=st.sampled_from(list(Codec)))
def test_random_records_both_directions(records: list[Record], codec: Codec) -> None:
    ours = build_batch(records, codec=codec)
    for reader in (KafkaBatch, aio_default.DefaultRecordBatch):
        batch = reader(ours)
        assert batch.validate_crc() is True
        assert rows(batch) == rows(records)
    theirs = their_build("kafka-python", codec, records)
    assert rows(iter_records(theirs)) == rows(records)


# --- legacy message sets (magic 0 and 1) ---------------------------------------------------------

LEGACY_BUILDERS: dict[str, Callable[..., Any]] = {
    "kafka-python": KafkaLegacyBuilder,
    "aiokafka": aio_legacy.LegacyRecordBatchBuilder,
}
LEGACY_CASES = [(0, Codec.NONE), (0, Codec.GZIP), (0, Codec.SNAPPY)] + [
    (1, c) for c in (Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4)
]  # magic 0 + lz4 is Kafka's broken pre-0.10 framing, which neither side writes without xxhash
LEGACY_VALUES = [(b"k0", b"v0" * 30), (None, b"v1" * 30), (b"k2", None), (b"", b"")]


def our_legacy_rows(buf: bytes) -> list[tuple[int, int, bytes | None, bytes | None]]:
    out, pos = [], 0
    while pos < len(buf):
        msg = decode_message(buf, pos)
        assert msg.valid
        for inner in inner_messages(msg):
            assert inner.valid
            out.append((inner.offset, inner.timestamp, inner.key, inner.value))
        pos += msg.size
    return out


def kafka_python_legacy_rows(buf: bytes) -> list[tuple[int, int, bytes | None, bytes | None]]:
    out = []
    for batch in KafkaMemoryRecords(buf):
        assert batch.validate_crc()
        out.extend((r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value) for r in batch)
    return out


@pytest.mark.parametrize(("magic", "codec"), LEGACY_CASES)
@pytest.mark.parametrize("builder", list(LEGACY_BUILDERS))
def test_their_legacy_messages_decode(builder: str, magic: int, codec: Codec) -> None:
    b = LEGACY_BUILDERS[builder](magic, int(codec), 1 << 20)
    for i, (key, value) in enumerate(LEGACY_VALUES):
        assert b.append(i, BASE_TS + i, key, value) is not None
    buf = bytes(b.build())
    n = len(LEGACY_VALUES)
    if codec != Codec.NONE:
        wrapper = decode_message(buf)
        assert (wrapper.magic, wrapper.codec, wrapper.size) == (magic, codec, len(buf))
        assert wrapper.valid
        if magic == 1:
            buf = struct.pack(">q", 100 + n - 1) + buf[8:]  # the broker's offset for the wrapper (last inner)
    first = 100 if codec != Codec.NONE and magic == 1 else 0
    expected = [
        (first + i, BASE_TS + i if magic == 1 else -1, key, value) for i, (key, value) in enumerate(LEGACY_VALUES)
    ]
    assert our_legacy_rows(buf) == expected
    assert kafka_python_legacy_rows(buf) == expected


@pytest.mark.parametrize("builder", list(LEGACY_BUILDERS))
def test_their_legacy_log_append_time_wrapper(builder: str) -> None:
    b = LEGACY_BUILDERS[builder](1, int(Codec.GZIP), 1 << 20)
    for i, (key, value) in enumerate(LEGACY_VALUES):
        b.append(i, BASE_TS + i, key, value)
    buf = bytearray(b.build())
    # as a LogAppendTime broker stores it: wrapper offset, attribute bit 3, wrapper timestamp, new CRC
    struct.pack_into(">q", buf, 0, 203)
    buf[17] |= 0x08
    struct.pack_into(">q", buf, 18, 1_234_567)
    struct.pack_into(">I", buf, 12, zlib.crc32(buf[16:]))
    expected = [(200 + i, 1_234_567, key, value) for i, (key, value) in enumerate(LEGACY_VALUES)]
    assert kafka_python_legacy_rows(bytes(buf)) == expected
    assert our_legacy_rows(bytes(buf)) == expected
