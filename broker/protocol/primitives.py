"""Kafka's wire primitives, read from a memoryview and written into parts for one `sendmsg`.

All integers are big-endian. `STRING` is an int16 length then UTF-8 (-1: null, nullable only);
`BYTES` is an int32 length then the bytes (-1: null); `ARRAY` is an int32 count then the items
(-1: null). The flexible versions of KIP-482 use compact forms instead: COMPACT_STRING, COMPACT_BYTES
and COMPACT_ARRAY carry an unsigned varint of the length plus one (0: null), and every struct ends
with a tagged-field section: an unsigned varint count, then per field its tag, its size (both
unsigned varints) and its bytes. A Reader or Writer's `flex` says which forms the message in hand
uses; `broker.protocol.schema` sets it from the message's first flexible version.

Decoding never copies payloads: byte fields come back as memoryview slices of the request frame.
Encoding collects small fields in a bytearray and keeps record sets (bytes or a `FetchSlice` of a
segment file) as separate parts, so a fetch answer can be sent with `sendfile`.
"""

from __future__ import annotations

import struct
from typing import Any

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
U32 = struct.Struct(">I")


_BYTES_LIKE = (bytes, bytearray, memoryview)


class DecodeError(ValueError):
    """A frame that does not parse: too short, a negative length where none may be, bad UTF-8."""


class Reader:
    """A cursor over one frame."""

    __slots__ = ("buf", "pos", "end", "flex")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> None:
        self.buf = memoryview(buf)
        self.pos = pos
        self.end = len(self.buf)
        self.flex = False

    def _take(self, n: int) -> int:
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise DecodeError(f"frame too short: need {n} bytes at {pos}, have {self.end - pos}")
        self.pos = pos + n
        return pos

    def int8(self) -> int:
        return I8.unpack_from(self.buf, self._take(1))[0]

    def int16(self) -> int:
        return I16.unpack_from(self.buf, self._take(2))[0]

    def int32(self) -> int:
        return I32.unpack_from(self.buf, self._take(4))[0]

    def int64(self) -> int:
        return I64.unpack_from(self.buf, self._take(8))[0]

    def boolean(self) -> bool:
        return self.int8() != 0

    def uuid(self) -> bytes:
        """A UUID as its 16 bytes (all zero: none)."""
        pos = self._take(16)
        return bytes(self.buf[pos : pos + 16])

    def nullable_string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        pos = self._take(n)
        try:
            return str(self.buf[pos : pos + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"string at {pos} is not UTF-8") from exc

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise DecodeError(f"null where a string must be, at {self.pos - 2}")
        return s

    def nullable_bytes(self) -> memoryview | None:
        n = self.int32()
        if n < 0:
            return None
        pos = self._take(n)
        return self.buf[pos : pos + n]

    def array_length(self, nullable: bool) -> int:
        if self.flex:
            n = self.uvarint() - 1
        else:
            n = self.int32()
        if n < 0:
            if nullable:
                return -1
            raise DecodeError(f"null where an array must be, at {self.pos - 4}")
        if n > self.end - self.pos:  # every item takes at least one byte: refuse absurd counts early
            raise DecodeError(f"array of {n} items in {self.end - self.pos} bytes")
        return n

    def uvarint(self) -> int:
        """An unsigned varint of at most 32 bits (Kafka's lengths, counts and tags)."""
        buf, pos, end = self.buf, self.pos, self.end
        if pos < end and buf[pos] < 0x80:  # one byte: nearly every length, count and tag
            self.pos = pos + 1
            return buf[pos]
        value = shift = 0
        while True:
            if pos >= end:
                raise DecodeError(f"frame too short: varint at {self.pos} runs past the end")
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 28:
                raise DecodeError(f"varint at {self.pos} is longer than 5 bytes")
        self.pos = pos
        return value

    def compact_nullable_string(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        pos = self._take(n)
        try:
            return str(self.buf[pos : pos + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"string at {pos} is not UTF-8") from exc

    def compact_string(self) -> str:
        s = self.compact_nullable_string()
        if s is None:
            raise DecodeError(f"null where a string must be, at {self.pos - 1}")
        return s

    def compact_nullable_bytes(self) -> memoryview | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        pos = self._take(n)
        return self.buf[pos : pos + n]

    def compact_bytes(self) -> memoryview:
        b = self.compact_nullable_bytes()
        if b is None:
            raise DecodeError(f"null where bytes must be, at {self.pos - 1}")
        return b

    def skip(self, n: int) -> memoryview:
        """The next `n` bytes (an unknown tagged field's), passed over."""
        pos = self._take(n)
        return self.buf[pos : pos + n]

    def remaining(self) -> int:
        return self.end - self.pos


class Writer:
    """Builds a frame as a list of parts: bytes, and record sets kept by reference."""

    __slots__ = ("buf", "parts", "size", "flex")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.parts: list[Any] = []
        self.size = 0  # bytes in finished parts
        self.flex = False

    def int8(self, v: int) -> None:
        self.buf += I8.pack(v)

    def int16(self, v: int) -> None:
        self.buf += I16.pack(v)

    def int32(self, v: int) -> None:
        self.buf += I32.pack(v)

    def int64(self, v: int) -> None:
        self.buf += I64.pack(v)

    def boolean(self, v: bool) -> None:
        self.buf.append(1 if v else 0)

    def uuid(self, v: bytes) -> None:
        if len(v) != 16:
            raise ValueError(f"a UUID is 16 bytes, not {len(v)}")
        self.buf += v

    def nullable_string(self, v: str | None) -> None:
        if v is None:
            self.buf += I16.pack(-1)
            return
        data = v.encode()
        self.buf += I16.pack(len(data))
        self.buf += data

    string = nullable_string

    def nullable_bytes(self, v: Any) -> None:
        """Bytes-like values are copied in; anything else with a `length` (a FetchSlice) stays a part."""
        if v is None:
            self.buf += I32.pack(-1)
            return
        self.buf += I32.pack(v.length if not isinstance(v, _BYTES_LIKE) else len(v))
        self._payload(v)

    def _payload(self, v: Any) -> None:
        if isinstance(v, _BYTES_LIKE):
            if len(v) > 4096:  # big payloads are not copied: they become a part of their own
                self._cut()
                self.parts.append(v)
                self.size += len(v)
            else:
                self.buf += v
        else:
            self._cut()
            self.parts.append(v)
            self.size += v.length

    def array_length(self, n: int) -> None:
        if self.flex:
            self.uvarint(n + 1)
        else:
            self.buf += I32.pack(n)

    def uvarint(self, v: int) -> None:
        if v < 0x80:
            self.buf.append(v)
            return
        while v > 0x7F:
            self.buf.append((v & 0x7F) | 0x80)
            v >>= 7
        self.buf.append(v)

    def compact_nullable_string(self, v: str | None) -> None:
        if v is None:
            self.buf.append(0)
            return
        data = v.encode()
        self.uvarint(len(data) + 1)
        self.buf += data

    compact_string = compact_nullable_string

    def compact_nullable_bytes(self, v: Any) -> None:
        if v is None:
            self.buf.append(0)
            return
        self.uvarint((v.length if not isinstance(v, _BYTES_LIKE) else len(v)) + 1)
        self._payload(v)

    compact_bytes = compact_nullable_bytes

    def raw(self, data: bytes | bytearray | memoryview) -> None:
        """Bytes written as they are (an encoded tagged field)."""
        self.buf += data

    def _cut(self) -> None:
        if self.buf:
            self.parts.append(bytes(self.buf))
            self.size += len(self.buf)
            self.buf = bytearray()

    def finish(self) -> list[Any]:
        """The parts, in order (the caller prefixes the frame size, `len_of(parts)`)."""
        self._cut()
        return self.parts

    def __len__(self) -> int:
        return self.size + len(self.buf)


def part_length(part: Any) -> int:
    return part.length if hasattr(part, "length") else len(part)
