"""CRC-32C backends (crcmod and the hardware `crc32c` package) and the legacy CRC-32."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.records import crc

BACKEND_NAMES = sorted(crc.BACKENDS)


def test_both_backends_are_available() -> None:
    # The test extra installs the crc32c package, so the cross-check below is not vacuous.
    assert set(crc.BACKENDS) == {"crcmod", "crc32c"}
    assert crc.BACKEND in crc.BACKENDS


@pytest.mark.parametrize("name", BACKEND_NAMES)
@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_golden_vector(name: str, wrap: type) -> None:
    assert crc.BACKENDS[name](wrap(b"123456789")) == 0xE3069283


@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_empty_input(name: str) -> None:
    assert crc.BACKENDS[name](b"") == 0


def test_selected_function_matches_vector() -> None:
    assert crc.crc32c(b"123456789") == 0xE3069283


@pytest.mark.parametrize("name", ["crcmod", "crc32c", "auto"])
def test_select_by_name(name: str) -> None:
    chosen, fn = crc._select(name)
    assert chosen == ("crcmod" if name == "crcmod" else "crc32c")
    assert fn(b"123456789") == 0xE3069283


@settings(max_examples=200)
@given(data=st.binary(max_size=4096), start=st.integers(0, 16))
def test_backends_agree(data: bytes, start: int) -> None:
    start = min(start, len(data))
    expected = crc.BACKENDS["crcmod"](data)
    for fn in crc.BACKENDS.values():
        assert fn(data) == expected
        assert fn(bytearray(data)) == expected
        assert fn(memoryview(data)) == expected
        # a memoryview slice that does not start at the beginning of its buffer
        assert fn(memoryview(b"\xff" * start + data)[start:]) == expected


def test_crc32_legacy_vector() -> None:
    assert crc.crc32(b"123456789") == 0xCBF43926
    assert crc.crc32(memoryview(bytearray(b"123456789"))) == 0xCBF43926
    assert crc.crc32(b"") == 0


def test_crc32_is_unsigned() -> None:
    # zlib.crc32 of b"\xff" * 4 has the high bit set; the function must not return a negative number
    assert crc.crc32(b"\xff" * 4) == 0xFFFFFFFF
