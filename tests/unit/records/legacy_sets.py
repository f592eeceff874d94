"""Magic 0/1 message sets built by hand from Kafka's format spec, as Apache Kafka brokers stored them.

Shared by the record, scanner, recovery and command-line tests (import `tests.unit.records.legacy_sets`).

- `message`: one entry: offset int64, size int32, crc uint32 (CRC-32 of magic..end), magic int8,
  attributes int8, [timestamp int64 on magic 1], key and value (int32 length, -1 = null).
- `wrapper`: a compressed message whose value is an inner message set, in the framing Kafka's Java
  clients wrote: gzip a gzip member, snappy the xerial framing, lz4 an LZ4 frame (on magic 0 with
  the header checksum computed over the magic number too, Kafka's pre-0.10 bug).
- `stored_set`: records as a broker stores them: one message each, or one wrapper per batch whose
  offset is the last inner message's (magic 1 inner offsets relative 0..n-1, magic 0 absolute) and
  whose timestamp is the largest inner one (or the broker's, with LogAppendTime).
- `write_partition`: a partition dir of segments of such batches and v2 batches, in any order (as an
  upgraded cluster's log holds them), with the indexes Kafka keeps; record `o` is stamped `T + o`.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

import cramjam

from broker.log import recovery
from broker.log.segment import segment_name
from broker.records.batch import Record, build_batch
from broker.records.compression import Codec, compress

LOG_APPEND_TIME = 0x08  # attribute bit 3 on magic 1
T = 1_500_000_000_000  # write_partition stamps record o with T + o
# the LZ4 frame header cramjam writes (magic number, FLG, BD), its checksum byte (xxh32 of FLG BD,
# second byte) and the one pre-0.10 Kafka wrote (xxh32 of all six bytes, second byte)
LZ4_HEADER, LZ4_HC, KAFKA_LZ4_HC = bytes.fromhex("04224d185440"), 0xAE, 0x1F


def _bytes(b: bytes | None) -> bytes:
    return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b


def message(
    offset: int,
    key: bytes | None,
    value: bytes | None,
    *,
    magic: int = 1,
    attributes: int = 0,
    timestamp: int = 0,
    crc: int | None = None,
) -> bytes:
    """One message-set entry: offset, size, crc (CRC-32 of magic..end), magic, attributes, [ts], key, value."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    body += _bytes(key) + _bytes(value)
    if crc is None:
        crc = zlib.crc32(body) & 0xFFFFFFFF
    return struct.pack(">qiI", offset, len(body) + 4, crc) + body


def compress_legacy(codec: Codec, data: bytes, *, magic: int) -> bytes:
    """`data` compressed as Kafka's Java producer compressed a magic 0/1 wrapper's value."""
    if codec == Codec.SNAPPY:  # xerial framing: magic, version 1, compatible version 1, length-prefixed blocks
        block = bytes(cramjam.snappy.compress_raw(data))
        return b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, len(block)) + block
    if codec == Codec.LZ4 and magic == 0:
        frame = bytearray(compress(Codec.LZ4, data))
        assert frame[:7] == LZ4_HEADER + bytes([LZ4_HC]), frame[:7].hex()
        frame[6] = KAFKA_LZ4_HC  # Kafka's bug: the magic number hashed too
        return bytes(frame)
    return compress(codec, data)


def wrapper(
    inner: Sequence[bytes],
    offset: int,
    *,
    magic: int,
    codec: Codec = Codec.GZIP,
    timestamp: int = 0,
    attributes: int = 0,
    crc: int | None = None,
) -> bytes:
    """A compressed message holding the entries `inner` (built with `message`)."""
    value = compress_legacy(codec, b"".join(inner), magic=magic)
    return message(offset, None, value, magic=magic, attributes=int(codec) | attributes, timestamp=timestamp, crc=crc)


def stored_set(
    records: Sequence[tuple[bytes | None, bytes | None, int]],
    first_offset: int,
    *,
    magic: int,
    codec: Codec = Codec.NONE,
    log_append_time: int | None = None,
) -> bytes:
    """(key, value, timestamp) records from `first_offset` on, as a broker stored one produced batch of them."""
    if codec == Codec.NONE:
        return b"".join(
            message(first_offset + i, k, v, magic=magic, timestamp=ts) for i, (k, v, ts) in enumerate(records)
        )
    inner = [
        message(i if magic == 1 else first_offset + i, k, v, magic=magic, timestamp=ts)
        for i, (k, v, ts) in enumerate(records)
    ]
    last = first_offset + len(records) - 1
    if log_append_time is not None:
        return wrapper(inner, last, magic=magic, codec=codec, timestamp=log_append_time, attributes=LOG_APPEND_TIME)
    return wrapper(inner, last, magic=magic, codec=codec, timestamp=max(ts for _, _, ts in records))


Spec = tuple[int, Codec, int]  # magic, codec, records in the batch
# a log as an upgraded cluster leaves it: 0.9 (magic 0), 0.10 (magic 1), 0.11+ (v2), segments rolled
# at each step and within, every codec a legacy wrapper can have; 27 records
UPGRADED_CLUSTER: list[list[Spec]] = [
    [(0, Codec.NONE, 1), (0, Codec.GZIP, 3), (0, Codec.SNAPPY, 2), (0, Codec.LZ4, 2), (1, Codec.NONE, 1)],
    [(1, Codec.GZIP, 4), (1, Codec.SNAPPY, 2), (1, Codec.LZ4, 3), (2, Codec.NONE, 2), (2, Codec.GZIP, 3)],
    [(2, Codec.LZ4, 1), (2, Codec.NONE, 3)],
]


def batch_bytes(magic: int, codec: Codec, first: int, n: int) -> tuple[bytes, list[tuple[int, bytes]]]:
    """One batch (a wrapper, or n uncompressed messages) of records first..first+n-1, and its (offset, value)s."""
    values = [b"value-%d-" % (first + i) + b"x" * ((first + i) % 13) for i in range(n)]
    offsets = range(first, first + n)
    if magic == 2:
        raw = build_batch([Record(o, T + o, None, v) for o, v in zip(offsets, values, strict=True)], codec=codec)
    else:
        records = [(b"k", v, T + o) for o, v in zip(offsets, values, strict=True)]
        raw = stored_set(records, first, magic=magic, codec=codec)
    return raw, list(zip(offsets, values, strict=True))


def write_partition(d: Path, segments: list[list[Spec]], first: int = 0) -> list[tuple[int, bytes]]:
    """A partition dir of `segments` (each with the indexes Kafka keeps); returns every (offset, value)."""
    d.mkdir(parents=True)
    offset, records = first, []
    for specs in segments:
        base, data = offset, b""
        for magic, codec, n in specs:
            raw, recs = batch_bytes(magic, codec, offset, n)
            data += raw
            records += recs
            offset += n
        (d / segment_name(base)).write_bytes(data)
        recovery.rebuild_indexes(d, base, index_interval_bytes=64)
    return records
