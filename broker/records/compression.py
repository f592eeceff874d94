"""The batch compression codecs: none, gzip, snappy, lz4 and zstd, in the framings Kafka uses.

gzip is a gzip member (stdlib zlib); snappy is written raw, as librdkafka does, and read raw or in
the xerial framing Java clients write (magic b"\\x82SNAPPY\\x00", two int32 versions, then
int32-length-prefixed raw blocks); lz4 is the LZ4 frame format; zstd a zstd frame. snappy, lz4 and
zstd come from cramjam (one well-kept Rust-backed package, also used by aiokafka).
"""

from __future__ import annotations

import enum
import struct
import zlib

import cramjam

from broker.errors import CorruptRecordError

Buffer = bytes | bytearray | memoryview

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_INT32 = struct.Struct(">i")


class Codec(enum.IntEnum):
    """The three low bits of a batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, name: str) -> Codec:
        """The codec named `name` (case-insensitive), as in `compression.type`."""
        try:
            return cls[name.upper()]
        except KeyError:
            raise ValueError(f"unknown compression type {name!r} (none, gzip, snappy, lz4, zstd)") from None


def compress(codec: Codec, data: Buffer) -> bytes:
    """Compress `data` as one block of the given codec."""
    if codec == Codec.NONE:
        return bytes(data)
    if codec == Codec.GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec == Codec.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == Codec.LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == Codec.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise CorruptRecordError(f"unknown compression codec {int(codec)}")


def decompress(codec: int, data: Buffer) -> bytes:
    """Decompress one block; raises CorruptRecordError when it does not decode."""
    try:
        if codec == Codec.NONE:
            return bytes(data)
        if codec == Codec.GZIP:
            return zlib.decompress(data, 47)
        if codec == Codec.SNAPPY:
            if bytes(data[:8]) == XERIAL_MAGIC:
                return _unxerial(memoryview(data))
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec == Codec.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == Codec.ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except CorruptRecordError:
        raise
    except Exception as exc:  # each codec library raises its own error type
        raise CorruptRecordError(f"{_name(codec)} block does not decompress: {exc}") from None
    raise CorruptRecordError(f"unknown compression codec {codec}")


def _unxerial(data: memoryview) -> bytes:
    pos = _XERIAL_HEADER.size
    out = bytearray()
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("truncated xerial snappy block length")
        (n,) = _INT32.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise CorruptRecordError("xerial snappy block past the end of the data")
        out += cramjam.snappy.decompress_raw(data[pos : pos + n])
        pos += n
    return bytes(out)


def _name(codec: int) -> str:
    try:
        return Codec(codec).name.lower()
    except ValueError:
        return f"codec {codec}"
