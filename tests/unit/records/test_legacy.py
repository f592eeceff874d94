"""Message sets of magic 0 and 1, built by hand with struct, decoded by broker.records.legacy."""

from __future__ import annotations

import struct
import zlib

import pytest

from broker.errors import CorruptRecordError
from broker.records.compression import Codec, compress
from broker.records.legacy import decode_message, inner_messages


def _bytes(b: bytes | None) -> bytes:
    return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b


def message(
    offset: int,
    key: bytes | None,
    value: bytes | None,
    *,
    magic: int = 1,
    attributes: int = 0,
    timestamp: int = 0,
    crc: int | None = None,
) -> bytes:
    """One message-set entry: offset, size, crc (CRC-32 of magic..end), magic, attributes, [ts], key, value."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    body += _bytes(key) + _bytes(value)
    if crc is None:
        crc = zlib.crc32(body) & 0xFFFFFFFF
    return struct.pack(">qiI", offset, len(body) + 4, crc) + body


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
    value = compress(Codec.GZIP, b"".join(inner))
    return message(offset, None, value, magic=magic, attributes=Codec.GZIP | attributes, timestamp=timestamp)


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
