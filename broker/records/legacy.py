"""Message sets of magic 0 and 1 (Kafka before 0.11), read as Kafka's `AbstractLegacyRecordBatch`
reads them: for the inspection tools, recovery and the broker's start-up.

Each entry: offset int64, messageSize int32, then the message: crc uint32 (CRC-32 of magic..end),
magic int8, attributes int8 (bits 0-2 codec, bit 3 timestamp type on magic 1), timestamp int64
(magic 1 only), key (int32 length, -1 = null), value (likewise).

An uncompressed message is a batch of one record at its offset. A compressed message is a wrapper
whose value is a compressed inner message set; the wrapper's offset is that of the LAST inner
message. On magic 1 the inner offsets are relative (0..n-1: absolute = wrapper offset - last inner
offset + inner offset; a wrapper offset of 0 means a base of 0, as Kafka allows for librdkafka's
produce data), on magic 0 they are absolute. The batch's base offset is its first inner message's
(absolute) offset, its last offset the wrapper's, its max timestamp the wrapper's; when the wrapper's
timestamp type is LogAppendTime its timestamp is that of every magic 1 inner message. A wrapper is
damaged when its CRC-32 fails or its records do not decode: a codec a legacy wrapper cannot have
(zstd, 5-7), a null value, a payload that does not decompress, an inner set that does not frame, is
empty or holds a compressed message, or offsets that run past the wrapper's.

LZ4 on magic 0 is Kafka's pre-0.10 framing, whose frame-descriptor checksum was computed over the
wrong bytes: as Kafka does for magic 0, that one byte is not checked (it is recomputed before decoding).

The first 17 bytes frame like a v2 batch (offset, size, then magic at byte 16), so one scanner
serves both.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from broker.errors import CorruptRecordError
from broker.records.batch import TIMESTAMP_TYPE_BIT  # the same bit 3 on magic 1
from broker.records.compression import Codec, decompress
from broker.records.crc import crc32

Buffer = bytes | bytearray | memoryview

ENTRY = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
LOG_OVERHEAD = 12
MIN_MESSAGE_SIZE = 14  # crc + magic + attributes + key length + value length (Kafka's RECORD_OVERHEAD_V0)
LEGACY_CODECS = (Codec.GZIP, Codec.SNAPPY, Codec.LZ4)  # what a magic 0/1 wrapper may be compressed with
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class LegacyMessage(NamedTuple):
    """One magic 0/1 message as stored, with the CRC computed over its bytes."""

    offset: int
    size: int  # bytes of the entry, offset and size fields included
    crc: int
    computed_crc: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None

    @property
    def codec(self) -> int:
        return self.attributes & 0x07

    @property
    def valid(self) -> bool:
        return self.crc == self.computed_crc


class LegacySpan(NamedTuple):
    """What a magic 0/1 entry counts for as a batch: Kafka's baseOffset, lastOffset and record count,
    or why its records do not decode (`problem`; the offsets are then the wrapper's own)."""

    base_offset: int
    last_offset: int
    record_count: int
    problem: str | None


def decode_message(buf: Buffer, pos: int = 0) -> LegacyMessage:
    """Decode the magic 0/1 entry at `pos` (raises CorruptRecordError if it does not frame)."""
    mv = memoryview(buf)
    if pos + ENTRY.size > len(mv):
        raise CorruptRecordError("truncated message header")
    offset, size, crc, magic, attributes = ENTRY.unpack_from(mv, pos)
    end = pos + LOG_OVERHEAD + size
    if magic not in (0, 1) or size < MIN_MESSAGE_SIZE or end > len(mv):
        raise CorruptRecordError(f"message of size {size} does not frame")
    p = pos + ENTRY.size
    timestamp = -1
    if magic == 1:
        if p + 8 > end:
            raise CorruptRecordError("truncated message timestamp")
        (timestamp,) = _INT64.unpack_from(mv, p)
        p += 8
    key, p = _read_bytes(mv, p, end)
    value, p = _read_bytes(mv, p, end)
    computed = crc32(mv[pos + 16 : end])
    return LegacyMessage(offset, end - pos, crc, computed, magic, attributes, timestamp, key, value)


def inner_messages(wrapper: LegacyMessage) -> Iterator[LegacyMessage]:
    """The records of an entry with absolute offsets: a compressed wrapper's inner messages, else the
    message itself. Raises CorruptRecordError when a wrapper's records do not decode."""
    if not wrapper.codec:
        yield wrapper
        return
    yield from _decode_inner(wrapper)


def span(wrapper: LegacyMessage) -> LegacySpan:
    """Base offset, last offset and record count of an entry as Kafka counts them (see the module doc)."""
    if not wrapper.codec:
        return LegacySpan(wrapper.offset, wrapper.offset, 1, None)
    try:
        inner = _decode_inner(wrapper)
    except CorruptRecordError as exc:
        return LegacySpan(wrapper.offset, wrapper.offset, 0, f"compressed message: {exc}")
    return LegacySpan(inner[0].offset, wrapper.offset, len(inner), None)


def _decode_inner(wrapper: LegacyMessage) -> list[LegacyMessage]:
    """Kafka's DeepRecordsIterator, eagerly: every inner message, offsets absolute, checked."""
    codec, magic = wrapper.codec, wrapper.magic
    if codec not in LEGACY_CODECS:
        raise CorruptRecordError(f"codec {_codec_name(codec)} is not one a magic {magic} message can have")
    if wrapper.value is None:
        raise CorruptRecordError("null value")
    payload: Buffer = wrapper.value
    if codec == Codec.LZ4 and magic == 0:
        payload = _fix_lz4_header_checksum(payload)
    data = decompress(codec, payload)
    inner: list[LegacyMessage] = []
    pos = 0
    while pos < len(data):
        msg = decode_message(data, pos)
        if msg.codec:
            raise CorruptRecordError(f"inner message at offset {msg.offset} is itself compressed")
        inner.append(msg)
        pos += msg.size
    if not inner:
        raise CorruptRecordError("no inner messages")
    if magic == 1:
        last_relative = inner[-1].offset
        if wrapper.offset != 0 and wrapper.offset < last_relative:
            raise CorruptRecordError(
                f"wrapper offset {wrapper.offset} is below its last inner message's relative offset {last_relative}"
            )
        base = wrapper.offset - last_relative if wrapper.offset else 0
        stamp = wrapper.timestamp if wrapper.attributes & TIMESTAMP_TYPE_BIT else None
        inner = [
            m._replace(offset=base + m.offset, timestamp=stamp if stamp is not None and m.magic == 1 else m.timestamp)
            for m in inner
        ]
    if inner[0].offset > wrapper.offset:
        raise CorruptRecordError(f"inner offsets start at {inner[0].offset}, past the wrapper's {wrapper.offset}")
    return inner


def _read_bytes(mv: memoryview, p: int, end: int) -> tuple[bytes | None, int]:
    if p + 4 > end:
        raise CorruptRecordError("truncated message field")
    (n,) = _INT32.unpack_from(mv, p)
    p += 4
    if n < 0:
        return None, p
    if p + n > end:
        raise CorruptRecordError("message field runs past the message")
    return bytes(mv[p : p + n]), p + n


def _codec_name(codec: int) -> str:
    try:
        return Codec(codec).name.lower()
    except ValueError:
        return str(codec)


# -- LZ4 as Kafka wrote it on magic 0 ----------------------------------------------------------------

_LZ4_MAGIC = b"\x04\x22\x4d\x18"


def _fix_lz4_header_checksum(frame: Buffer) -> Buffer:
    """The frame with its header checksum byte recomputed: before 0.10 Kafka computed it over the magic
    number too, and reads magic 0 without checking it (KafkaLZ4BlockInputStream)."""
    data = bytes(frame)
    if len(data) < 7 or data[:4] != _LZ4_MAGIC:
        return frame  # not an LZ4 frame: let the decoder say so
    flg = data[4]
    end = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)  # FLG, BD, [content size], [dict id]
    if len(data) <= end:
        return frame
    hc = (xxh32(data[4:end]) >> 8) & 0xFF
    return data[:end] + bytes([hc]) + data[end + 1 :]


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 (the LZ4 frame format's checksum), for the few bytes of a frame descriptor."""
    n, p = len(data), 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while p + 16 <= n:
            for i in range(4):
                lane = int.from_bytes(data[p : p + 4], "little")
                v[i] = (_rotl((v[i] + lane * _P2) & _M32, 13) * _P1) & _M32
                p += 4
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while p + 4 <= n:
        h = (_rotl((h + int.from_bytes(data[p : p + 4], "little") * _P3) & _M32, 17) * _P4) & _M32
        p += 4
    while p < n:
        h = (_rotl((h + data[p] * _P5) & _M32, 11) * _P1) & _M32
        p += 1
    h = ((h ^ (h >> 15)) * _P2) & _M32
    h = ((h ^ (h >> 13)) * _P3) & _M32
    return h ^ (h >> 16)
