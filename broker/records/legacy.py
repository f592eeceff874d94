"""Message sets of magic 0 and 1 (Kafka before 0.11), decoded read-only for the inspection tools.

Each entry: offset int64, messageSize int32, then the message: crc uint32 (CRC-32 of magic..end),
magic int8, attributes int8 (bits 0-2 codec, bit 3 timestamp type on magic 1), timestamp int64
(magic 1 only), key (int32 length, -1 = null), value (likewise). A compressed message is a wrapper
whose value is a compressed inner message set; on magic 1 the inner offsets are relative and the
wrapper carries the absolute offset of the last inner message, and when the wrapper's timestamp type is
LogAppendTime its timestamp is that of every inner message (as Kafka reads them).

The first 17 bytes frame like a v2 batch (offset, size, then magic at byte 16), so one scanner
serves both.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from broker.errors import CorruptRecordError
from broker.records.batch import TIMESTAMP_TYPE_BIT  # the same bit 3 on magic 1
from broker.records.compression import decompress
from broker.records.crc import crc32

Buffer = bytes | bytearray | memoryview

ENTRY = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
LOG_OVERHEAD = 12
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


def decode_message(buf: Buffer, pos: int = 0) -> LegacyMessage:
    """Decode the magic 0/1 entry at `pos` (raises CorruptRecordError if it does not frame)."""
    mv = memoryview(buf)
    if pos + ENTRY.size > len(mv):
        raise CorruptRecordError("truncated message header")
    offset, size, crc, magic, attributes = ENTRY.unpack_from(mv, pos)
    end = pos + LOG_OVERHEAD + size
    if magic not in (0, 1) or size < 14 or end > len(mv):
        raise CorruptRecordError(f"message of size {size} does not frame")
    p = pos + ENTRY.size
    timestamp = -1
    if magic == 1:
        (timestamp,) = _INT64.unpack_from(mv, p)
        p += 8
    key, p = _read_bytes(mv, p, end)
    value, p = _read_bytes(mv, p, end)
    computed = crc32(mv[pos + 16 : end])
    return LegacyMessage(offset, end - pos, crc, computed, magic, attributes, timestamp, key, value)


def inner_messages(wrapper: LegacyMessage) -> Iterator[LegacyMessage]:
    """The messages of a compressed wrapper, with absolute offsets; the wrapper itself otherwise."""
    if not wrapper.codec:
        yield wrapper
        return
    data = decompress(wrapper.codec, wrapper.value or b"")
    inner = []
    pos = 0
    while pos < len(data):
        msg = decode_message(data, pos)
        inner.append(msg)
        pos += msg.size
    if wrapper.magic == 1 and inner:
        first = wrapper.offset - inner[-1].offset
        inner = [m._replace(offset=first + m.offset) for m in inner]
        if wrapper.attributes & TIMESTAMP_TYPE_BIT:
            inner = [m._replace(timestamp=wrapper.timestamp) for m in inner]
    yield from inner


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
