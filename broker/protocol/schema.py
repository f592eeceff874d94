"""A small schema language for Kafka messages: fields with version ranges, read into and written from dicts.

A `Struct` lists `Field`s the way Kafka's message JSON files do (name, type, the versions that carry
it, a default). `struct.read(reader, version)` returns a dict; `struct.write(writer, dict, version)`
writes one, filling absent fields with their defaults, so handlers name only what they know. The
per-version field lists are computed once and cached.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from broker.protocol.primitives import DecodeError, Reader, Writer

ANY = 10**6


class Type:
    """A wire type: how to read and write one value, and its default."""

    default: Any = None

    def read(self, r: Reader, v: int) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def write(self, w: Writer, value: Any, v: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class _Prim(Type):
    def __init__(self, name: str, default: Any) -> None:
        self.name, self.default = name, default
        self._read = getattr(Reader, name)
        self._write = getattr(Writer, name)

    def read(self, r: Reader, v: int) -> Any:
        return self._read(r)

    def write(self, w: Writer, value: Any, v: int) -> None:
        self._write(w, value)

    def __repr__(self) -> str:
        return self.name.upper()


INT8 = _Prim("int8", 0)
INT16 = _Prim("int16", 0)
INT32 = _Prim("int32", 0)
INT64 = _Prim("int64", 0)
BOOLEAN = _Prim("boolean", False)
STRING = _Prim("string", "")
NULLABLE_STRING = _Prim("nullable_string", None)
BYTES = _Prim("nullable_bytes", b"")
NULLABLE_BYTES = _Prim("nullable_bytes", None)
RECORDS = _Prim("nullable_bytes", None)  # a record set: bytes in, bytes or a FetchSlice out


class Field(NamedTuple):
    name: str
    type: Any  # a Type or a Struct
    lo: int = 0
    hi: int = ANY
    default: Any = None


def F(name: str, type_: Any, versions: str = "0+", default: Any = None) -> Field:
    """A field carried by `versions` ("0+", "3+", "0-2", "4")."""
    if versions.endswith("+"):
        lo, hi = int(versions[:-1]), ANY
    elif "-" in versions:
        lo_s, hi_s = versions.split("-")
        lo, hi = int(lo_s), int(hi_s)
    else:
        lo = hi = int(versions)
    return Field(name, type_, lo, hi, default)


class Array(Type):
    """An int32 count then items; null allowed from version `nullable_from`."""

    def __init__(self, item: Any, nullable_from: int = ANY) -> None:
        self.item = item
        self.nullable_from = nullable_from
        self.default: Any = ()

    def read(self, r: Reader, v: int) -> list | None:
        n = r.array_length(v >= self.nullable_from)
        if n < 0:
            return None
        read = self.item.read
        return [read(r, v) for _ in range(n)]

    def write(self, w: Writer, value: Any, v: int) -> None:
        if value is None:
            w.array_length(-1)
            return
        w.array_length(len(value))
        write = self.item.write
        for item in value:
            write(w, item, v)


class Struct(Type):
    """A sequence of fields; the message bodies and the items of arrays of structs."""

    def __init__(self, *fields: Field) -> None:
        self.fields = fields
        self._at: dict[int, tuple[tuple[str, Any, Any], ...]] = {}
        self.default = {}

    def at(self, v: int) -> tuple[tuple[str, Any, Any], ...]:
        """(name, type, default) of the fields present at version `v`."""
        got = self._at.get(v)
        if got is None:
            got = tuple(
                (f.name, f.type, f.default if f.default is not None else f.type.default)
                for f in self.fields
                if f.lo <= v <= f.hi
            )
            self._at[v] = got
        return got

    def read(self, r: Reader, v: int) -> dict[str, Any]:
        return {name: t.read(r, v) for name, t, _ in self.at(v)}

    def write(self, w: Writer, value: dict[str, Any], v: int) -> None:
        for name, t, default in self.at(v):
            t.write(w, value[name] if name in value else default, v)

    def encode(self, value: dict[str, Any], v: int) -> bytes:
        """The body as one bytes object (record sets included)."""
        w = Writer()
        self.write(w, value, v)
        return b"".join(bytes(p) for p in w.finish())

    def decode(self, data: bytes | bytearray | memoryview, v: int) -> dict[str, Any]:
        """A whole body; bytes left over are a DecodeError."""
        r = Reader(data)
        got = self.read(r, v)
        if r.remaining():
            raise DecodeError(f"{r.remaining()} bytes left after the body")
        return got

    def max_version_of(self, name: str) -> int:
        return max(f.hi for f in self.fields if f.name == name)
