"""Message sets of magic 0 and 1, built by hand with struct, decoded by broker.records.legacy."""

from __future__ import annotations

import struct
import zlib

import pytest

from broker.errors import CorruptRecordError
from broker.records.compression import Codec, compress
from broker.records.legacy import decode_message, inner_messages, span, xxh32
from tests.unit.records.legacy_sets import (
    KAFKA_LZ4_HC,
    LOG_APPEND_TIME,
    LZ4_HC,
    LZ4_HEADER,
    message,
    stored_set,
    wrapper,
)


@pytest.mark.parametrize("magic", [0, 1])
def test_uncompressed_message(magic: int) -> None:
    raw = message(42, b"key", b"value", magic=magic, timestamp=1_600_000_000_123)
    msg = decode_message(raw)
    assert msg.offset == 42
    assert msg.size == len(raw)
    assert msg.magic == magic
    assert msg.attributes == 0
    assert msg.codec == 0
    assert msg.timestamp == (1_600_000_000_123 if magic == 1 else -1)
    assert msg.key == b"key"
    assert msg.value == b"value"
    assert msg.crc == msg.computed_crc == zlib.crc32(raw[16:])
    assert msg.valid
    assert list(inner_messages(msg)) == [msg]


@pytest.mark.parametrize("magic", [0, 1])
def test_null_and_empty_fields(magic: int) -> None:
    msg = decode_message(message(0, None, b"", magic=magic))
    assert msg.key is None
    assert msg.value == b""
    msg = decode_message(message(0, b"", None, magic=magic))
    assert msg.key == b""
    assert msg.value is None
    assert msg.valid


def test_message_set_with_several_entries_at_a_position() -> None:
    entries = [message(i, b"k%d" % i, b"v%d" % i, magic=i % 2, timestamp=i) for i in range(5)]
    buf = b"junk" + b"".join(entries)
    pos, seen = 4, []
    while pos < len(buf):
        m = decode_message(memoryview(buf), pos)
        seen.append((m.offset, m.magic, m.key, m.value, m.valid))
        pos += m.size
    assert seen == [(i, i % 2, b"k%d" % i, b"v%d" % i, True) for i in range(5)]


@pytest.mark.parametrize("magic", [0, 1])
def test_wrong_crc_is_reported_not_raised(magic: int) -> None:
    raw = message(7, b"k", b"v", magic=magic, crc=0x12345678)
    msg = decode_message(raw)
    assert msg.crc == 0x12345678
    assert msg.computed_crc == zlib.crc32(raw[16:])
    assert not msg.valid
    assert (msg.key, msg.value) == (b"k", b"v")


@pytest.mark.parametrize("magic", [0, 1])
def test_flipped_value_byte_fails_crc(magic: int) -> None:
    raw = bytearray(message(7, b"k", b"value", magic=magic))
    raw[-1] ^= 0x01
    msg = decode_message(raw)
    assert msg.value == b"valud"
    assert not msg.valid


@pytest.mark.parametrize("magic", [0, 1])
def test_truncated_raises(magic: int) -> None:
    raw = message(1, b"key", b"value", magic=magic)
    for cut in range(len(raw)):
        with pytest.raises(CorruptRecordError):
            decode_message(raw[:cut])


def test_bad_magic_and_sizes_raise() -> None:
    raw = bytearray(message(1, b"k", b"v", magic=1))
    raw[16] = 2
    with pytest.raises(CorruptRecordError):
        decode_message(raw)
    with pytest.raises(CorruptRecordError):
        decode_message(struct.pack(">qiIbb", 0, 6, 0, 0, 0) + b"\x00" * 8)  # size below the minimum
    # a key length running past the message
    body = struct.pack(">bbi", 0, 0, 100) + b"\x00" * 8
    with pytest.raises(CorruptRecordError):
        decode_message(struct.pack(">qiI", 0, len(body) + 4, zlib.crc32(body)) + body)


def gzip_wrapper(inner: list[bytes], offset: int, *, magic: int, timestamp: int = 0, attributes: int = 0) -> bytes:
    return wrapper(inner, offset, magic=magic, codec=Codec.GZIP, timestamp=timestamp, attributes=attributes)


def test_gzip_wrapper_magic1_relative_offsets() -> None:
    inner = [message(i, b"k%d" % i, b"v%d" % i, magic=1, timestamp=1000 + i) for i in range(3)]
    wrapper = decode_message(gzip_wrapper(inner, 102, magic=1, timestamp=1002))
    assert wrapper.codec == Codec.GZIP
    assert wrapper.valid
    assert wrapper.offset == 102
    msgs = list(inner_messages(wrapper))
    assert [(m.offset, m.timestamp, m.key, m.value) for m in msgs] == [
        (100, 1000, b"k0", b"v0"),
        (101, 1001, b"k1", b"v1"),
        (102, 1002, b"k2", b"v2"),
    ]
    assert all(m.valid and m.magic == 1 and m.codec == 0 for m in msgs)


def test_gzip_wrapper_magic1_log_append_time_stamps_inner_messages() -> None:
    inner = [message(i, None, b"v%d" % i, magic=1, timestamp=5) for i in range(2)]
    wrapper = decode_message(gzip_wrapper(inner, 11, magic=1, timestamp=9999, attributes=0x08))
    msgs = list(inner_messages(wrapper))
    assert [(m.offset, m.timestamp, m.value) for m in msgs] == [(10, 9999, b"v0"), (11, 9999, b"v1")]


def test_gzip_wrapper_magic0_absolute_offsets() -> None:
    inner = [message(50 + i, None, b"v%d" % i, magic=0) for i in range(3)]
    wrapper = decode_message(gzip_wrapper(inner, 52, magic=0))
    msgs = list(inner_messages(wrapper))
    assert [(m.offset, m.timestamp, m.key, m.value, m.magic) for m in msgs] == [
        (50, -1, None, b"v0", 0),
        (51, -1, None, b"v1", 0),
        (52, -1, None, b"v2", 0),
    ]


def test_inner_message_with_bad_crc_is_flagged() -> None:
    inner = [message(0, None, b"good", magic=1), message(1, None, b"bad", magic=1, crc=1)]
    msgs = list(inner_messages(decode_message(gzip_wrapper(inner, 1, magic=1))))
    assert [m.valid for m in msgs] == [True, False]


def test_wrapper_with_bad_crc_is_flagged() -> None:
    raw = bytearray(gzip_wrapper([message(0, None, b"v", magic=1)], 0, magic=1))
    raw[12:16] = b"\x00\x00\x00\x00"
    wrapper = decode_message(raw)
    assert not wrapper.valid
    assert [m.value for m in inner_messages(wrapper)] == [b"v"]


def test_wrapper_that_does_not_decompress_raises() -> None:
    wrapper = decode_message(message(0, None, b"not gzip at all", magic=1, attributes=Codec.GZIP))
    with pytest.raises(CorruptRecordError):
        list(inner_messages(wrapper))


def test_wrapper_with_truncated_inner_set_raises() -> None:
    inner = message(0, b"k", b"value", magic=1)
    wrapper = decode_message(message(0, None, compress(Codec.GZIP, inner[:-2]), magic=1, attributes=Codec.GZIP))
    with pytest.raises(CorruptRecordError):
        list(inner_messages(wrapper))


# -- batches as Kafka counts them (AbstractLegacyRecordBatch), every codec a legacy wrapper can have ----

RECORDS = [(b"k0", b"v0" * 30, 1000), (None, b"v1" * 30, 1003), (b"k2", None, 1001), (b"", b"", 1002)]
CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4]


def entries(buf: bytes) -> list:
    out, pos = [], 0
    while pos < len(buf):
        msg = decode_message(buf, pos)
        out.append(msg)
        pos += msg.size
    return out


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
@pytest.mark.parametrize("magic", [0, 1])
def test_stored_sets_decode_and_count_as_kafka_counts_them(magic: int, codec: Codec) -> None:
    buf = stored_set(RECORDS, 100, magic=magic, codec=codec)
    msgs = entries(buf)
    assert all(m.valid for m in msgs)
    rows = [(r.offset, r.timestamp, r.key, r.value) for m in msgs for r in inner_messages(m)]
    assert rows == [(100 + i, ts if magic == 1 else -1, k, v) for i, (k, v, ts) in enumerate(RECORDS)]
    if codec == Codec.NONE:
        assert [span(m) for m in msgs] == [(100 + i, 100 + i, 1, None) for i in range(4)]
    else:  # one wrapper: base offset its first inner offset, last offset its own, 4 records
        assert [span(m) for m in msgs] == [(100, 103, 4, None)]


def test_xxh32_reference_values() -> None:
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F
    assert xxh32(bytes(range(40)), seed=1) != xxh32(bytes(range(40)))
    assert (xxh32(LZ4_HEADER[4:]) >> 8) & 0xFF == LZ4_HC  # the frame header checksum, as lz4 computes it
    assert (xxh32(LZ4_HEADER) >> 8) & 0xFF == KAFKA_LZ4_HC  # and as Kafka before 0.10 did


def test_magic0_lz4_with_kafkas_header_checksum_decodes() -> None:
    """Before 0.10 Kafka hashed the LZ4 magic number into the frame header checksum; it reads magic 0
    without checking that byte, and so do we (magic 1 frames are standard and checked)."""
    inner = [message(7 + i, None, b"lz4-%d" % i, magic=0) for i in range(3)]
    raw = wrapper(inner, 9, magic=0, codec=Codec.LZ4)
    assert [m.value for m in inner_messages(decode_message(raw))] == [b"lz4-0", b"lz4-1", b"lz4-2"]
    assert span(decode_message(raw)) == (7, 9, 3, None)
    as_magic1 = message(9, None, decode_message(raw).value, magic=1, attributes=Codec.LZ4)
    with pytest.raises(CorruptRecordError):
        list(inner_messages(decode_message(as_magic1)))


def test_magic1_wrapper_at_offset_0_has_base_0() -> None:
    """Kafka's rule for librdkafka's produce data: a wrapper offset of 0 means inner offsets from 0."""
    inner = [message(i, None, b"v%d" % i, magic=1) for i in range(3)]
    msgs = list(inner_messages(decode_message(gzip_wrapper(inner, 0, magic=1))))
    assert [m.offset for m in msgs] == [0, 1, 2]


def test_log_append_time_stamps_only_magic1_inner_messages() -> None:
    inner = [message(0, None, b"old", magic=0), message(1, None, b"new", magic=1, timestamp=5)]
    raw = gzip_wrapper(inner, 11, magic=1, timestamp=9999, attributes=LOG_APPEND_TIME)
    assert [(m.offset, m.timestamp) for m in inner_messages(decode_message(raw))] == [(10, -1), (11, 9999)]


def _bad_wrappers() -> dict[str, bytes]:
    one = [message(0, None, b"v", magic=1)]
    return {
        "zstd": message(0, None, compress(Codec.ZSTD, one[0]), magic=1, attributes=Codec.ZSTD),
        "codec-6": message(0, None, one[0], magic=1, attributes=6),
        "null-value": message(0, None, None, magic=1, attributes=Codec.GZIP),
        "no-inner-messages": message(5, None, compress(Codec.GZIP, b""), magic=1, attributes=Codec.GZIP),
        "compressed-inner": gzip_wrapper([gzip_wrapper(one, 0, magic=1)], 3, magic=1),
        "offset-below-last-relative": gzip_wrapper([message(i, None, b"v", magic=1) for i in range(4)], 2, magic=1),
        "magic0-inner-past-wrapper": gzip_wrapper([message(8, None, b"v", magic=0)], 5, magic=0),
        "not-gzip": message(4, None, b"not gzip at all", magic=1, attributes=Codec.GZIP),
    }


@pytest.mark.parametrize("name", list(_bad_wrappers()))
def test_wrappers_whose_records_do_not_decode_are_damage(name: str) -> None:
    msg = decode_message(_bad_wrappers()[name])
    assert msg.valid  # the CRC-32 holds: the damage is in what it wraps
    with pytest.raises(CorruptRecordError):
        list(inner_messages(msg))
    sp = span(msg)
    assert sp.problem and (sp.base_offset, sp.last_offset, sp.record_count) == (msg.offset, msg.offset, 0)
