"""Batch compression codecs: round trips, snappy's xerial framing, corrupt input, Codec.parse."""

from __future__ import annotations

import gzip
import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.errors import CorruptRecordError
from broker.records.compression import XERIAL_MAGIC, Codec, compress, decompress

SAMPLES = [b"", b"x", b"hello kafka " * 500, bytes(range(256)) * 40]


@pytest.mark.parametrize("codec", list(Codec))
@pytest.mark.parametrize("data", SAMPLES, ids=["empty", "one", "text", "bytes"])
def test_round_trip(codec: Codec, data: bytes) -> None:
    packed = compress(codec, data)
    assert isinstance(packed, bytes)
    assert decompress(codec, packed) == data
    assert decompress(int(codec), bytearray(packed)) == data
    assert decompress(codec, memoryview(b"??" + packed)[2:]) == data


@pytest.mark.parametrize("codec", [c for c in Codec if c != Codec.NONE])
def test_compresses_repetitive_data(codec: Codec) -> None:
    data = b"abcdefgh" * 1000
    assert len(compress(codec, data)) < len(data) // 4


def test_none_is_identity() -> None:
    assert compress(Codec.NONE, b"abc") == b"abc"
    assert decompress(Codec.NONE, memoryview(b"abc")) == b"abc"


@settings(max_examples=100, deadline=None)
@given(codec=st.sampled_from(list(Codec)), data=st.binary(max_size=2048))
def test_round_trip_random(codec: Codec, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


def test_framings_are_the_standard_ones() -> None:
    data = b"kafka" * 100
    assert gzip.decompress(compress(Codec.GZIP, data)) == data
    assert compress(Codec.GZIP, data)[:2] == b"\x1f\x8b"
    assert bytes(cramjam.snappy.decompress_raw(compress(Codec.SNAPPY, data))) == data
    assert compress(Codec.LZ4, data)[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    assert compress(Codec.ZSTD, data)[:4] == b"\x28\xb5\x2f\xfd"  # zstd frame magic


def xerial(data: bytes, chunk: int) -> bytes:
    out = bytearray(XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    for i in range(0, len(data), chunk):
        block = bytes(cramjam.snappy.compress_raw(data[i : i + chunk]))
        out += struct.pack(">i", len(block)) + block
    return bytes(out)


def test_xerial_magic_constant() -> None:
    assert XERIAL_MAGIC == b"\x82SNAPPY\x00"


@pytest.mark.parametrize("chunk", [1, 7, 100, 32 * 1024])
def test_snappy_reads_xerial_framing(chunk: int) -> None:
    data = b"".join(b"record %d;" % i for i in range(500))
    framed = xerial(data, chunk)
    assert framed.startswith(XERIAL_MAGIC)
    assert decompress(Codec.SNAPPY, framed) == data
    assert decompress(Codec.SNAPPY, memoryview(framed)) == data


def test_snappy_xerial_with_no_blocks_is_empty() -> None:
    assert decompress(Codec.SNAPPY, xerial(b"", 10)) == b""


@pytest.mark.parametrize(
    "framed",
    [
        XERIAL_MAGIC + struct.pack(">ii", 1, 1) + b"\x00\x00",  # truncated block length
        XERIAL_MAGIC + struct.pack(">iii", 1, 1, 50) + b"abc",  # block past the end
        XERIAL_MAGIC + struct.pack(">iii", 1, 1, -1),  # negative block length
        XERIAL_MAGIC + struct.pack(">iii", 1, 1, 4) + b"\xff\xff\xff\xff",  # not snappy
    ],
)
def test_bad_xerial_raises(framed: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(Codec.SNAPPY, framed)


GARBAGE = [b"\xff" * 64, b"this is not compressed at all", bytes(range(200))]


@pytest.mark.parametrize("codec", [c for c in Codec if c != Codec.NONE])
@pytest.mark.parametrize("garbage", GARBAGE, ids=["ff", "text", "range"])
def test_garbage_raises_corrupt(codec: Codec, garbage: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(codec, garbage)


@pytest.mark.parametrize("codec", [c for c in Codec if c != Codec.NONE])
def test_truncated_raises_corrupt(codec: Codec) -> None:
    packed = compress(codec, bytes(range(256)) * 20)
    with pytest.raises(CorruptRecordError):
        decompress(codec, packed[: len(packed) // 2])


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_raises_corrupt(codec: int) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"abc")


@pytest.mark.parametrize(
    ("name", "codec"),
    [("none", Codec.NONE), ("gzip", Codec.GZIP), ("SNAPPY", Codec.SNAPPY), ("Lz4", Codec.LZ4), ("zstd", Codec.ZSTD)],
)
def test_parse(name: str, codec: Codec) -> None:
    assert Codec.parse(name) is codec


@pytest.mark.parametrize("name", ["", "brotli", "gzip "])
def test_parse_unknown(name: str) -> None:
    with pytest.raises(ValueError, match="unknown compression type"):
        Codec.parse(name)


def test_codec_values_are_kafkas() -> None:
    assert [int(c) for c in Codec] == [0, 1, 2, 3, 4]
