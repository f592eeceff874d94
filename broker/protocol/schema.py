"""A small schema language for Kafka messages: fields with version ranges, read into and written from dicts.

A `Struct` lists `Field`s the way Kafka's message JSON files do (name, type, the versions that carry
it, a default). `struct.read(reader, version)` returns a dict; `struct.write(writer, dict, version)`
writes one, filling absent fields with their defaults, so handlers name only what they know. The
per-version field lists are computed once and cached.

Flexible versions (KIP-482): a message struct built with `flexible_from=N` is written, from version N,
with compact strings, bytes and arrays and a tagged-field section closing every struct (the forms
are in `broker.protocol.primitives`). Tagged fields are declared with `F(..., tag=T)`: they are read
when present (others are skipped) and written only when their value differs from the default.
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
    def __init__(self, name: str, default: Any, compact: str | None = None) -> None:
        self.name, self.default = name, default
        self._read = getattr(Reader, name)
        self._write = getattr(Writer, name)
        #: the type flexible versions write instead (compact strings and bytes; integers are unchanged)
        self.flexible: _Prim = self if compact is None else _Prim(compact, default)

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
STRING = _Prim("string", "", "compact_string")
NULLABLE_STRING = _Prim("nullable_string", None, "compact_nullable_string")
BYTES = _Prim("nullable_bytes", b"", "compact_nullable_bytes")
NULLABLE_BYTES = _Prim("nullable_bytes", None, "compact_nullable_bytes")
RECORDS = _Prim("nullable_bytes", None, "compact_nullable_bytes")  # a record set: bytes in, bytes or a FetchSlice out
UUID = _Prim("uuid", b"\0" * 16)


class Field(NamedTuple):
    name: str
    type: Any  # a Type or a Struct
    lo: int = 0
    hi: int = ANY
    default: Any = None
    tag: int | None = None  # a tagged field's tag (flexible versions only)


def F(name: str, type_: Any, versions: str = "0+", default: Any = None, *, tag: int | None = None) -> Field:
    """A field carried by `versions` ("0+", "3+", "0-2", "4"); with `tag`, a tagged field of those versions."""
    if versions.endswith("+"):
        lo, hi = int(versions[:-1]), ANY
    elif "-" in versions:
        lo_s, hi_s = versions.split("-")
        lo, hi = int(lo_s), int(hi_s)
    else:
        lo = hi = int(versions)
    return Field(name, type_, lo, hi, default, tag)


def _is_default(t: Any, value: Any, default: Any, v: int) -> bool:
    """Whether a tagged field's value is its default, so it is left out as Kafka leaves it out: a struct
    all at its defaults, an empty array, or a value equal to the field's default."""
    if isinstance(t, Struct):
        return not value or value == t.defaults(v)
    if isinstance(t, Array):
        return not value
    return value == default


def _default(f: Field) -> Any:
    return f.default if f.default is not None else f.type.default


class Array(Type):
    """A count then items (int32, or a compact length in flexible versions); null allowed from `nullable_from`."""

    def __init__(self, item: Any, nullable_from: int = ANY) -> None:
        self.item = item
        self.nullable_from = nullable_from
        self.default: Any = ()

    def read(self, r: Reader, v: int) -> list | None:
        n = r.array_length(v >= self.nullable_from)
        if n < 0:
            return None
        read = (self.item.flexible if r.flex and isinstance(self.item, _Prim) else self.item).read
        return [read(r, v) for _ in range(n)]

    def write(self, w: Writer, value: Any, v: int) -> None:
        if value is None:
            w.array_length(-1)
            return
        w.array_length(len(value))
        write = (self.item.flexible if w.flex and isinstance(self.item, _Prim) else self.item).write
        for item in value:
            write(w, item, v)


class Struct(Type):
    """A sequence of fields; the message bodies and the items of arrays of structs.

    `flexible_from` (message bodies only) is the message's first flexible version; `header_flexible`
    False keeps the response header at v0 in those versions too (ApiVersions' rule, so a client
    can read the answer whatever version it asked in).
    """

    def __init__(self, *fields: Field, flexible_from: int = ANY, header_flexible: bool = True) -> None:
        self.fields = fields
        self.flexible_from = flexible_from
        self.header_flexible = header_flexible
        self._at: dict[int, tuple[tuple[str, Any, Any], ...]] = {}
        self._tagged: dict[int, dict[int, tuple[str, Any, Any]]] = {}
        self._tag_order: dict[int, tuple[tuple[int, str, Any, Any], ...]] = {}
        self._tag_names: dict[int, frozenset[str]] = {}
        self.default = {}

    def flexible(self, v: int) -> bool:
        """Whether version `v` of this message is written in the flexible forms."""
        return v >= self.flexible_from

    def at(self, v: int, flex: bool = False) -> tuple[tuple[str, Any, Any], ...]:
        """(name, type, default) of the untagged fields present at version `v`, in the forms `flex` says."""
        key = v + v + flex
        got = self._at.get(key)
        if got is None:
            got = tuple(
                (f.name, f.type.flexible if flex and isinstance(f.type, _Prim) else f.type, _default(f))
                for f in self.fields
                if f.lo <= v <= f.hi and f.tag is None
            )
            self._at[key] = got
        return got

    def tagged(self, v: int) -> dict[int, tuple[str, Any, Any]]:
        """tag → (name, type, default) of the tagged fields present at version `v`."""
        got = self._tagged.get(v)
        if got is None:
            got = {
                f.tag: (f.name, f.type.flexible if isinstance(f.type, _Prim) else f.type, _default(f))
                for f in self.fields
                if f.lo <= v <= f.hi and f.tag is not None
            }
            self._tagged[v] = got
        return got

    def read(self, r: Reader, v: int) -> dict[str, Any]:
        if not r.flex:
            return {name: t.read(r, v) for name, t, _ in self.at(v)}
        got = {name: t.read(r, v) for name, t, _ in self.at(v, True)}
        tagged = self.tagged(v)
        if tagged:
            for name, t, default in tagged.values():
                got[name] = t.defaults(v) if isinstance(t, Struct) else default  # (a dict of its own each time)
        for _ in range(r.uvarint()):
            tag = r.uvarint()
            data = r.skip(r.uvarint())
            field = tagged.get(tag)
            if field is not None:
                sub = Reader(data)
                sub.flex = True
                got[field[0]] = field[1].read(sub, v)
        return got

    def write(self, w: Writer, value: dict[str, Any], v: int) -> None:
        if not w.flex:
            for name, t, default in self.at(v):
                t.write(w, value[name] if name in value else default, v)
            return
        for name, t, default in self.at(v, True):
            t.write(w, value[name] if name in value else default, v)
        tagged = self._tag_order.get(v)
        if tagged is None:
            tagged = self._tag_order[v] = tuple((tag, *field) for tag, field in sorted(self.tagged(v).items()))
            self._tag_names[v] = frozenset(field[1] for field in tagged)
        if not tagged or self._tag_names[v].isdisjoint(value):
            w.buf.append(0)  # no tagged field: the common case, checked without a loop
            return
        present = [(tag, t, value[name]) for tag, name, t, default in tagged
                   if name in value and not _is_default(t, value[name], default, v)]  # fmt: skip
        w.uvarint(len(present))
        for tag, t, field_value in present:
            sub = Writer()
            sub.flex = True
            t.write(sub, field_value, v)
            data = b"".join(bytes(p) for p in sub.finish())
            w.uvarint(tag)
            w.uvarint(len(data))
            w.raw(data)

    def defaults(self, v: int) -> dict[str, Any]:
        """A new body of this struct at version `v` with every field at its default (nested structs too)."""
        return {
            name: t.defaults(v) if isinstance(t, Struct) else default
            for name, t, default in (*self.at(v), *self.tagged(v).values())
        }

    def encode(self, value: dict[str, Any], v: int) -> bytes:
        """The body as one bytes object (record sets included)."""
        w = Writer()
        w.flex = self.flexible(v)
        self.write(w, value, v)
        return b"".join(bytes(p) for p in w.finish())

    def decode(self, data: bytes | bytearray | memoryview, v: int) -> dict[str, Any]:
        """A whole body; bytes left over are a DecodeError."""
        r = Reader(data)
        r.flex = self.flexible(v)
        got = self.read(r, v)
        if r.remaining():
            raise DecodeError(f"{r.remaining()} bytes left after the body")
        return got

    def max_version_of(self, name: str) -> int:
        return max(f.hi for f in self.fields if f.name == name)
