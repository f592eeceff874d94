"""Wire primitives: exact big-endian encodings, null cases, and DecodeError on every kind of bad input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.protocol.primitives import DecodeError, Reader, Writer, part_length


def encode(*ops: tuple[str, object]) -> bytes:
    w = Writer()
    for name, value in ops:
        getattr(w, name)(value)
    return b"".join(bytes(p) for p in w.finish())


# --- integers ---------------------------------------------------------------------------------

INTS = [
    ("int8", 1, [-128, -1, 0, 1, 127]),
    ("int16", 2, [-32768, -1, 0, 1, 0x1234, 32767]),
    ("int32", 4, [-(2**31), -1, 0, 1, 0x12345678, 2**31 - 1]),
    ("int64", 8, [-(2**63), -1, 0, 1, 0x0102030405060708, 2**63 - 1]),
]


@pytest.mark.parametrize(("name", "size", "values"), INTS)
def test_integers_are_big_endian_twos_complement(name: str, size: int, values: list[int]) -> None:
    for value in values:
        data = encode((name, value))
        assert data == value.to_bytes(size, "big", signed=True)
        r = Reader(data)
        assert getattr(r, name)() == value
        assert r.remaining() == 0 and r.pos == size


def test_known_integer_bytes() -> None:
    assert encode(("int16", 0x1234)) == b"\x12\x34"
    assert encode(("int32", -2)) == b"\xff\xff\xff\xfe"
    assert encode(("int64", 1)) == b"\x00" * 7 + b"\x01"


@pytest.mark.parametrize(
    ("name", "bad"),
    [("int8", 128), ("int8", -129), ("int16", 2**15), ("int32", 2**31), ("int64", 2**63), ("int64", -(2**63) - 1)],
)
def test_integer_out_of_range_is_refused_on_write(name: str, bad: int) -> None:
    with pytest.raises(struct.error):
        getattr(Writer(), name)(bad)


@pytest.mark.parametrize(("name", "size"), [("int8", 1), ("int16", 2), ("int32", 4), ("int64", 8)])
def test_integer_short_input(name: str, size: int) -> None:
    for have in range(size):
        r = Reader(b"\x01" * have)
        with pytest.raises(DecodeError):
            getattr(r, name)()
        assert r.pos == 0  # a failed read does not move the cursor


# --- booleans ---------------------------------------------------------------------------------


def test_boolean() -> None:
    assert encode(("boolean", True)) == b"\x01"
    assert encode(("boolean", False)) == b"\x00"
    assert Reader(b"\x01").boolean() is True
    assert Reader(b"\x00").boolean() is False
    assert Reader(b"\x02").boolean() is True  # any non-zero byte is true, as in Kafka
    assert Reader(b"\xff").boolean() is True
    with pytest.raises(DecodeError):
        Reader(b"").boolean()


# --- strings ----------------------------------------------------------------------------------


def test_string_encoding() -> None:
    assert encode(("string", "abc")) == b"\x00\x03abc"
    assert encode(("string", "")) == b"\x00\x00"
    # the length counts UTF-8 bytes, not characters
    assert encode(("string", "é€")) == b"\x00\x05" + "é€".encode()
    assert encode(("nullable_string", None)) == b"\xff\xff"
    assert encode(("nullable_string", "x")) == b"\x00\x01x"


def test_string_decoding() -> None:
    assert Reader(b"\x00\x03abc").string() == "abc"
    assert Reader(b"\x00\x00").string() == ""
    assert Reader(b"\x00\x05" + "é€".encode()).nullable_string() == "é€"
    assert Reader(b"\xff\xff").nullable_string() is None
    r = Reader(b"\x00\x02hixyz")
    assert r.string() == "hi" and r.remaining() == 3


def test_nullable_string_any_negative_length_is_null() -> None:
    # Kafka's generated readers treat every negative length of a nullable field as null
    assert Reader(b"\xff\xfe").nullable_string() is None
    assert Reader(b"\x80\x00").nullable_string() is None


def test_non_nullable_string_refuses_null() -> None:
    with pytest.raises(DecodeError, match="null"):
        Reader(b"\xff\xff").string()
    with pytest.raises(DecodeError):
        Reader(b"\xff\xfe").string()


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x03ab", b"\x00\x01", b"\x7f\xffabc"])
def test_string_short_input(data: bytes) -> None:
    with pytest.raises(DecodeError):
        Reader(data).string()
    with pytest.raises(DecodeError):
        Reader(data).nullable_string()


@pytest.mark.parametrize("payload", [b"\xff", b"\xc3", b"\xed\xa0\x80", b"ab\x80", b"\xc0\xaf"])
def test_string_invalid_utf8(payload: bytes) -> None:
    data = len(payload).to_bytes(2, "big") + payload
    with pytest.raises(DecodeError, match="UTF-8"):
        Reader(data).string()
    with pytest.raises(DecodeError, match="UTF-8"):
        Reader(data).nullable_string()


def test_decode_error_is_a_value_error() -> None:
    assert issubclass(DecodeError, ValueError)


# --- bytes ------------------------------------------------------------------------------------


def test_bytes_encoding() -> None:
    assert encode(("nullable_bytes", b"ab")) == b"\x00\x00\x00\x02ab"
    assert encode(("nullable_bytes", b"")) == b"\x00\x00\x00\x00"
    assert encode(("nullable_bytes", None)) == b"\xff\xff\xff\xff"
    assert encode(("nullable_bytes", bytearray(b"xy"))) == b"\x00\x00\x00\x02xy"
    assert encode(("nullable_bytes", memoryview(b"xyz")[1:])) == b"\x00\x00\x00\x02yz"


def test_bytes_decoding_is_a_zero_copy_slice() -> None:
    frame = b"\x00\x00\x00\x03abcZ"
    r = Reader(frame)
    got = r.nullable_bytes()
    assert isinstance(got, memoryview)
    assert got.obj is frame  # a view of the frame, not a copy
    assert bytes(got) == b"abc" and r.remaining() == 1
    assert Reader(b"\xff\xff\xff\xff").nullable_bytes() is None
    assert Reader(b"\xff\xff\xff\xf0").nullable_bytes() is None
    empty = Reader(b"\x00\x00\x00\x00").nullable_bytes()
    assert empty is not None and bytes(empty) == b""


@pytest.mark.parametrize("data", [b"", b"\x00\x00\x00", b"\x00\x00\x00\x05abcd", b"\x7f\xff\xff\xff"])
def test_bytes_short_input(data: bytes) -> None:
    with pytest.raises(DecodeError):
        Reader(data).nullable_bytes()


# --- arrays -----------------------------------------------------------------------------------


def test_array_length() -> None:
    assert encode(("array_length", 3)) == b"\x00\x00\x00\x03"
    assert encode(("array_length", -1)) == b"\xff\xff\xff\xff"
    assert Reader(b"\x00\x00\x00\x00").array_length(False) == 0
    assert Reader(b"\x00\x00\x00\x02xy").array_length(False) == 2  # count == bytes left is allowed
    assert Reader(b"\xff\xff\xff\xff").array_length(True) == -1
    assert Reader(b"\xff\xff\xff\xfe").array_length(True) == -1


def test_array_null_where_not_nullable() -> None:
    with pytest.raises(DecodeError, match="null"):
        Reader(b"\xff\xff\xff\xff").array_length(False)
    with pytest.raises(DecodeError):
        Reader(b"\x80\x00\x00\x00").array_length(False)


@pytest.mark.parametrize("count", [3, 1000, 2**31 - 1])
def test_array_absurd_count_is_refused_before_allocating(count: int) -> None:
    data = count.to_bytes(4, "big") + b"xy"  # only two bytes follow: at most two items can fit
    for nullable in (False, True):
        with pytest.raises(DecodeError, match="items"):
            Reader(data).array_length(nullable)


def test_array_length_short_input() -> None:
    with pytest.raises(DecodeError):
        Reader(b"\x00\x00\x00").array_length(True)


# --- Reader cursor ----------------------------------------------------------------------------


def test_reader_cursor_and_inputs() -> None:
    data = b"\x00\x07\x00\x00\x00\x09"
    for buf in (data, bytearray(data), memoryview(data)):
        r = Reader(buf)
        assert r.remaining() == 6
        assert r.int16() == 7 and r.remaining() == 4
        assert r.int32() == 9 and r.remaining() == 0
        with pytest.raises(DecodeError):
            r.int8()
    r = Reader(data, 2)
    assert r.pos == 2 and r.remaining() == 4 and r.int32() == 9


def test_reader_take_refuses_negative_sizes() -> None:
    r = Reader(b"abcd")
    with pytest.raises(DecodeError):
        r._take(-1)
    assert r.pos == 0


# --- Writer parts -----------------------------------------------------------------------------


class FakeSlice:
    """What a FetchSlice looks like to the Writer: something with a `length`, sent by reference."""

    def __init__(self, length: int) -> None:
        self.length = length


def test_writer_small_fields_make_one_part() -> None:
    w = Writer()
    w.int32(1)
    w.nullable_bytes(b"x" * 4096)  # the largest payload still copied in
    w.int16(2)
    assert len(w) == 4 + 4 + 4096 + 2
    parts = w.finish()
    assert len(parts) == 1 and isinstance(parts[0], bytes)
    assert parts[0] == b"\x00\x00\x00\x01" + b"\x00\x00\x10\x00" + b"x" * 4096 + b"\x00\x02"


def test_writer_big_payload_is_kept_by_reference() -> None:
    payload = b"y" * 4097
    w = Writer()
    w.int32(7)
    w.nullable_bytes(payload)
    w.int16(3)
    assert len(w) == 4 + 4 + 4097 + 2
    parts = w.finish()
    assert len(parts) == 3
    assert parts[0] == b"\x00\x00\x00\x07\x00\x00\x10\x01"
    assert parts[1] is payload
    assert parts[2] == b"\x00\x03"
    assert sum(part_length(p) for p in parts) == 4 + 4 + 4097 + 2


def test_writer_big_payload_at_the_end() -> None:
    payload = memoryview(b"z" * 5000)
    w = Writer()
    w.nullable_bytes(payload)
    parts = w.finish()
    assert parts == [b"\x00\x00\x13\x88", payload]
    assert parts[1] is payload


def test_writer_slice_parts() -> None:
    s = FakeSlice(123)
    w = Writer()
    w.int8(1)
    w.nullable_bytes(s)
    w.nullable_bytes(FakeSlice(0))
    w.int8(2)
    assert len(w) == 1 + 4 + 123 + 4 + 0 + 1
    parts = w.finish()
    assert parts[0] == b"\x01\x00\x00\x00\x7b"
    assert parts[1] is s
    assert parts[2] == b"\x00\x00\x00\x00"
    assert isinstance(parts[3], FakeSlice) and parts[3].length == 0
    assert parts[4] == b"\x02"
    assert [part_length(p) for p in parts] == [5, 123, 4, 0, 1]


def test_writer_empty_and_len() -> None:
    w = Writer()
    assert len(w) == 0
    assert w.finish() == []
    w.int64(5)
    assert len(w) == 8
    assert w.finish() == [b"\x00" * 7 + b"\x05"]
    assert len(w) == 8  # finishing does not lose the count


def test_string_alias() -> None:
    assert Writer.string is Writer.nullable_string


# --- property: any sequence of primitives reads back ------------------------------------------

PRIMITIVES = st.one_of(
    st.tuples(st.just("int8"), st.integers(-(2**7), 2**7 - 1)),
    st.tuples(st.just("int16"), st.integers(-(2**15), 2**15 - 1)),
    st.tuples(st.just("int32"), st.integers(-(2**31), 2**31 - 1)),
    st.tuples(st.just("int64"), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just("boolean"), st.booleans()),
    st.tuples(st.just("string"), st.text(max_size=20)),
    st.tuples(st.just("nullable_string"), st.none() | st.text(max_size=20)),
    st.tuples(st.just("nullable_bytes"), st.none() | st.binary(max_size=40) | st.binary(min_size=4097, max_size=4200)),
)


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(PRIMITIVES, max_size=12))
def test_any_sequence_round_trips(ops: list[tuple[str, object]]) -> None:
    w = Writer()
    for name, value in ops:
        getattr(w, name)(value)
    expected_len = len(w)
    data = b"".join(bytes(p) for p in w.finish())
    assert len(data) == expected_len
    r = Reader(data)
    for name, value in ops:
        got = getattr(r, name)()
        if isinstance(got, memoryview):
            got = bytes(got)
        assert got == value
    assert r.remaining() == 0


@settings(max_examples=100, deadline=None)
@given(value=st.text(max_size=30), cut=st.integers(min_value=0))
def test_truncated_string_always_raises(value: str, cut: int) -> None:
    data = encode(("string", value))
    cut = cut % len(data)  # strictly shorter than the encoding
    with pytest.raises(DecodeError):
        Reader(data[:cut]).string()
