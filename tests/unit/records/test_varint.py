"""Zigzag varints: known encodings, round trips over the signed 64-bit range, truncation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.errors import CorruptRecordError
from broker.records.varint import decode_varint, encode_varint, varint_size

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)

KNOWN = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (-2, "03"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (300, "d804"),
    (2**31 - 1, "feffffff0f"),
    (-(2**31), "ffffffff0f"),
    (2**63 - 1, "feffffffffffffffff01"),
    (-(2**63), "ffffffffffffffffff01"),
]


@pytest.mark.parametrize(("value", "hexed"), KNOWN)
def test_known_encodings(value: int, hexed: str) -> None:
    encoded = bytes.fromhex(hexed)
    assert encode_varint(value) == encoded
    assert decode_varint(encoded, 0) == (value, len(encoded))
    assert varint_size(value) == len(encoded)


@settings(max_examples=200)
@given(value=INT64, prefix=st.binary(max_size=4), suffix=st.binary(max_size=4))
def test_round_trip(value: int, prefix: bytes, suffix: bytes) -> None:
    encoded = encode_varint(value)
    assert 1 <= len(encoded) <= 10
    assert varint_size(value) == len(encoded)
    buf = prefix + encoded + suffix
    assert decode_varint(buf, len(prefix)) == (value, len(prefix) + len(encoded))
    assert decode_varint(bytearray(buf), len(prefix)) == (value, len(prefix) + len(encoded))
    assert decode_varint(memoryview(buf), len(prefix)) == (value, len(prefix) + len(encoded))


@settings(max_examples=100)
@given(values=st.lists(INT64, max_size=20))
def test_sequence_decodes_in_order(values: list[int]) -> None:
    buf = b"".join(encode_varint(v) for v in values)
    pos, out = 0, []
    while pos < len(buf):
        v, pos = decode_varint(buf, pos)
        out.append(v)
    assert out == values


@settings(max_examples=200)
@given(value=INT64.filter(lambda v: varint_size(v) > 1), data=st.data())
def test_truncated_raises(value: int, data: st.DataObject) -> None:
    encoded = encode_varint(value)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(CorruptRecordError):
        decode_varint(encoded[:cut], 0)


def test_empty_and_past_end_raise() -> None:
    with pytest.raises(CorruptRecordError):
        decode_varint(b"", 0)
    with pytest.raises(CorruptRecordError):
        decode_varint(b"\x02", 1)
    with pytest.raises(CorruptRecordError):
        decode_varint(b"\x80", 0)


def test_overlong_varint_raises() -> None:
    # eleven bytes, every one with the continuation bit set but the last
    with pytest.raises(CorruptRecordError):
        decode_varint(b"\xff" * 10 + b"\x01", 0)
