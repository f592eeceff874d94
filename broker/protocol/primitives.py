"""Kafka's wire primitives, read from a memoryview and written into parts for one `sendmsg`.

All integers are big-endian. `STRING` is an int16 length then UTF-8 (-1: null, nullable only);
`BYTES` is an int32 length then the bytes (-1: null); `ARRAY` is an int32 count then the items
(-1: null). Only the non-flexible (pre-tagged-field) encodings are spoken here.

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


class DecodeError(ValueError):
    """A frame that does not parse: too short, a negative length where none may be, bad UTF-8."""


class Reader:
    """A cursor over one frame."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> None:
        self.buf = memoryview(buf)
        self.pos = pos
        self.end = len(self.buf)

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
        n = self.int32()
        if n < 0:
            if nullable:
                return -1
            raise DecodeError(f"null where an array must be, at {self.pos - 4}")
        if n > self.end - self.pos:  # every item takes at least one byte: refuse absurd counts early
            raise DecodeError(f"array of {n} items in {self.end - self.pos} bytes")
        return n

    def remaining(self) -> int:
        return self.end - self.pos


class Writer:
    """Builds a frame as a list of parts: bytes, and record sets kept by reference."""

    __slots__ = ("buf", "parts", "size")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.parts: list[Any] = []
        self.size = 0  # bytes in finished parts

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
        elif isinstance(v, bytes | bytearray | memoryview):
            self.buf += I32.pack(len(v))
            if len(v) > 4096:  # big payloads are not copied: they become a part of their own
                self._cut()
                self.parts.append(v)
                self.size += len(v)
            else:
                self.buf += v
        else:
            self.buf += I32.pack(v.length)
            self._cut()
            self.parts.append(v)
            self.size += v.length

    def array_length(self, n: int) -> None:
        self.buf += I32.pack(n)

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
