"""Zigzag varints (protobuf style), the integer encoding inside Kafka records and headers.

A signed value n is zigzag-mapped to (n << 1) ^ (n >> 63), then written 7 bits a byte, low bits
first, the high bit of each byte set while more bytes follow. varint and varlong share the encoding;
only their ranges differ (at most 5 and 10 bytes).
"""

from __future__ import annotations

from broker.errors import CorruptRecordError

Buffer = bytes | bytearray | memoryview


def encode_varint(value: int) -> bytes:
    """Zigzag varint encoding of a signed 64-bit integer."""
    n = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def decode_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Decode the zigzag varint at `pos`; returns (value, position after it)."""
    try:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        n = b & 0x7F
        shift = 7
        pos += 1
        while True:
            b = buf[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift > 63:
                raise CorruptRecordError("varint longer than 10 bytes")
    except IndexError:
        raise CorruptRecordError("truncated varint") from None
    return (n >> 1) ^ -(n & 1), pos


def varint_size(value: int) -> int:
    """Number of bytes `encode_varint(value)` takes."""
    n = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size
