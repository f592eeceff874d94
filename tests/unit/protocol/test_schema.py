"""The schema language: version ranges, field selection per version, defaults, arrays and their nullability."""

from __future__ import annotations

import pytest

from broker.protocol.primitives import DecodeError, Reader, Writer
from broker.protocol.schema import (
    ANY,
    BOOLEAN,
    BYTES,
    INT8,
    INT16,
    INT32,
    INT64,
    NULLABLE_BYTES,
    NULLABLE_STRING,
    RECORDS,
    STRING,
    Array,
    F,
    Field,
    Struct,
)


def write(schema: Struct, body: dict, v: int) -> bytes:
    w = Writer()
    schema.write(w, body, v)
    return b"".join(bytes(p) for p in w.finish())


def read(schema: Struct, data: bytes, v: int) -> dict:
    r = Reader(data)
    got = schema.read(r, v)
    assert r.remaining() == 0, "the schema did not consume the whole body"
    return got


# --- F: version ranges ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("versions", "lo", "hi"),
    [("0+", 0, ANY), ("3+", 3, ANY), ("0-2", 0, 2), ("4-11", 4, 11), ("4", 4, 4), ("0", 0, 0)],
)
def test_version_ranges(versions: str, lo: int, hi: int) -> None:
    f = F("x", INT32, versions)
    assert (f.lo, f.hi) == (lo, hi)
    assert f.name == "x" and f.type is INT32 and f.default is None


def test_f_defaults() -> None:
    assert F("x", INT32) == Field("x", INT32, 0, ANY, None)
    assert F("x", INT32, "1+", default=-1) == Field("x", INT32, 1, ANY, -1)


# --- field selection per version --------------------------------------------------------------

SCHEMA = Struct(
    F("always", INT32),
    F("from2", INT16, "2+"),
    F("only1", INT8, "1"),
    F("upto1", STRING, "0-1"),
    F("mid", INT64, "1-3"),
)


@pytest.mark.parametrize(
    ("v", "names"),
    [
        (0, ["always", "upto1"]),
        (1, ["always", "only1", "upto1", "mid"]),
        (2, ["always", "from2", "mid"]),
        (3, ["always", "from2", "mid"]),
        (4, ["always", "from2"]),
        (99, ["always", "from2"]),
    ],
)
def test_fields_present_at_a_version_keep_declaration_order(v: int, names: list[str]) -> None:
    assert [n for n, _, _ in SCHEMA.at(v)] == names


def test_at_is_cached() -> None:
    s = Struct(F("a", INT32), F("b", INT32, "1+"))
    assert s.at(1) is s.at(1)
    assert s.at(0) is not s.at(1)


def test_write_skips_fields_absent_at_the_version() -> None:
    body = {"always": 1, "from2": 2, "only1": 3, "upto1": "u", "mid": 4}
    assert write(SCHEMA, body, 0) == b"\x00\x00\x00\x01" + b"\x00\x01u"
    assert write(SCHEMA, body, 1) == b"\x00\x00\x00\x01" + b"\x03" + b"\x00\x01u" + (4).to_bytes(8, "big")
    assert write(SCHEMA, body, 4) == b"\x00\x00\x00\x01" + b"\x00\x02"


@pytest.mark.parametrize("v", [0, 1, 2, 3, 4])
def test_read_returns_exactly_the_fields_of_the_version(v: int) -> None:
    body = {"always": -5, "from2": 300, "only1": -2, "upto1": "héllo", "mid": 2**40}
    got = read(SCHEMA, write(SCHEMA, body, v), v)
    assert got == {n: body[n] for n, _, _ in SCHEMA.at(v)}


def test_read_short_body_raises() -> None:
    data = write(SCHEMA, {"always": 1, "from2": 2, "mid": 3}, 2)
    for cut in range(len(data)):
        with pytest.raises(DecodeError):
            SCHEMA.read(Reader(data[:cut]), 2)


# --- defaults ---------------------------------------------------------------------------------


def test_type_defaults() -> None:
    assert INT8.default == 0 and INT16.default == 0 and INT32.default == 0 and INT64.default == 0
    assert BOOLEAN.default is False
    assert STRING.default == ""
    assert NULLABLE_STRING.default is None
    assert BYTES.default == b""
    assert NULLABLE_BYTES.default is None
    assert RECORDS.default is None
    assert Array(INT32).default == ()
    assert Struct().default == {}


ALL_TYPES = Struct(
    F("i8", INT8),
    F("i16", INT16),
    F("i32", INT32),
    F("i64", INT64),
    F("b", BOOLEAN),
    F("s", STRING),
    F("ns", NULLABLE_STRING),
    F("by", BYTES),
    F("nby", NULLABLE_BYTES),
    F("rec", RECORDS),
    F("arr", Array(INT32)),
    F("narr", Array(INT32, nullable_from=0)),
    F("sarr", Array(Struct(F("x", INT32)))),
)


def test_absent_fields_are_written_as_type_defaults() -> None:
    data = write(ALL_TYPES, {}, 0)
    assert data == (
        b"\x00"
        + b"\x00\x00"
        + b"\x00" * 4
        + b"\x00" * 8
        + b"\x00"  # ints, boolean
        + b"\x00\x00"
        + b"\xff\xff"  # "" and null string
        + b"\x00\x00\x00\x00"
        + b"\xff\xff\xff\xff"
        + b"\xff\xff\xff\xff"  # b"", null bytes, null records
        + b"\x00\x00\x00\x00" * 3  # arrays default to empty, not null, even when nullable
    )
    got = read(ALL_TYPES, data, 0)
    assert {k: (bytes(v) if isinstance(v, memoryview) else v) for k, v in got.items()} == {
        "i8": 0, "i16": 0, "i32": 0, "i64": 0, "b": False, "s": "", "ns": None,
        "by": b"", "nby": None, "rec": None, "arr": [], "narr": [], "sarr": [],
    }  # fmt: skip


def test_field_default_overrides_type_default() -> None:
    s = Struct(
        F("a", INT32, default=-1),
        F("b", BOOLEAN, default=True),
        F("c", INT64, "1+", default=0x7FFF),
        F("d", STRING, default="dflt"),
    )
    assert s.at(1) == (("a", INT32, -1), ("b", BOOLEAN, True), ("c", INT64, 0x7FFF), ("d", STRING, "dflt"))
    assert read(s, write(s, {}, 1), 1) == {"a": -1, "b": True, "c": 0x7FFF, "d": "dflt"}
    # given values win over defaults, including falsy ones
    assert read(s, write(s, {"a": 0, "b": False, "c": 0, "d": ""}, 1), 1) == {"a": 0, "b": False, "c": 0, "d": ""}


def test_explicit_none_is_written_not_defaulted() -> None:
    s = Struct(F("ns", NULLABLE_STRING, default="x"), F("arr", Array(INT8, nullable_from=0)))
    assert write(s, {"ns": None, "arr": None}, 0) == b"\xff\xff" + b"\xff\xff\xff\xff"


def test_nested_struct_items_get_their_own_defaults() -> None:
    item = Struct(F("id", INT32), F("epoch", INT32, "1+", default=-1), F("name", NULLABLE_STRING))
    s = Struct(F("items", Array(item)))
    assert read(s, write(s, {"items": [{"id": 1}, {"id": 2, "name": "n"}]}, 1), 1) == {
        "items": [{"id": 1, "epoch": -1, "name": None}, {"id": 2, "epoch": -1, "name": "n"}]
    }
    assert read(s, write(s, {"items": [{}]}, 0), 0) == {"items": [{"id": 0, "name": None}]}


# --- arrays -----------------------------------------------------------------------------------


def test_array_of_primitives_and_structs() -> None:
    s = Struct(F("ids", Array(INT32)), F("pairs", Array(Struct(F("k", STRING), F("v", INT16)))))
    body = {"ids": [1, -1, 7], "pairs": [{"k": "a", "v": 1}, {"k": "", "v": -2}]}
    data = write(s, body, 0)
    assert data[:16] == b"\x00\x00\x00\x03\x00\x00\x00\x01\xff\xff\xff\xff\x00\x00\x00\x07"
    assert read(s, data, 0) == body
    assert read(s, write(s, {"ids": (4, 5)}, 0), 0) == {"ids": [4, 5], "pairs": []}


def test_nullable_array_from_a_version() -> None:
    s = Struct(F("topics", Array(STRING, nullable_from=2)))
    null = write(s, {"topics": None}, 2)
    assert null == b"\xff\xff\xff\xff"
    assert read(s, null, 2) == {"topics": None}
    assert read(s, null, 5) == {"topics": None}
    # below `nullable_from` a null array does not parse
    with pytest.raises(DecodeError, match="null"):
        s.read(Reader(null), 1)
    assert read(s, write(s, {"topics": []}, 1), 1) == {"topics": []}


def test_array_never_nullable_by_default() -> None:
    s = Struct(F("a", Array(INT8)))
    with pytest.raises(DecodeError):
        s.read(Reader(b"\xff\xff\xff\xff"), 10**5)


def test_array_absurd_count_in_a_struct() -> None:
    s = Struct(F("a", Array(Struct(F("x", INT64)))))
    with pytest.raises(DecodeError):
        s.read(Reader(b"\x7f\xff\xff\xff" + b"\x00" * 16), 0)
    # a count that passes the cheap check but runs out of bytes item by item
    with pytest.raises(DecodeError):
        s.read(Reader(b"\x00\x00\x00\x03" + b"\x00" * 16), 0)


def test_nested_arrays_round_trip() -> None:
    inner = Struct(F("p", INT32), F("replicas", Array(INT32)))
    s = Struct(F("topics", Array(Struct(F("name", STRING), F("parts", Array(inner)))), "0+"))
    body = {"topics": [{"name": "t", "parts": [{"p": 0, "replicas": [1, 2]}, {"p": 1, "replicas": []}]},
                       {"name": "u", "parts": []}]}  # fmt: skip
    assert read(s, write(s, body, 0), 0) == body


def test_records_come_back_as_views() -> None:
    s = Struct(F("records", RECORDS))
    data = write(s, {"records": b"\x01\x02\x03"}, 0)
    got = s.read(Reader(data), 0)["records"]
    assert isinstance(got, memoryview) and bytes(got) == b"\x01\x02\x03"


def test_empty_struct() -> None:
    s = Struct()
    assert write(s, {"ignored": 1}, 0) == b""
    assert read(s, b"", 0) == {}


def test_max_version_of() -> None:
    s = Struct(F("a", INT8, "0-2"), F("a", INT16, "3-5"), F("b", INT8))
    assert s.max_version_of("a") == 5
    assert s.max_version_of("b") == ANY
    with pytest.raises(ValueError):
        s.max_version_of("missing")


def test_same_name_different_types_by_version() -> None:
    s = Struct(F("a", INT8, "0-2"), F("a", INT16, "3+"))
    assert write(s, {"a": 1}, 2) == b"\x01"
    assert write(s, {"a": 1}, 3) == b"\x00\x01"
    assert read(s, b"\x00\x01", 3) == {"a": 1}
