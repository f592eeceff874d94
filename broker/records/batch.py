"""RecordBatch v2 (magic 2): the only record format kafkactl writes, on disk and on the wire.

Batch header, 61 bytes, big-endian::

    off  field                 type    in CRC
    0    baseOffset            int64   no
    8    batchLength           int32   no    bytes after this field
    12   partitionLeaderEpoch  int32   no
    16   magic (= 2)           int8    no
    17   crc                   uint32  -     CRC-32C of bytes 21..end
    21   attributes            int16   yes   bits 0-2 codec, 3 timestamp type (1 = LogAppendTime),
                                             4 transactional, 5 control
    23   lastOffsetDelta       int32   yes
    27   baseTimestamp         int64   yes
    35   maxTimestamp          int64   yes
    43   producerId            int64   yes
    51   producerEpoch         int16   yes
    53   baseSequence          int32   yes
    57   recordCount           int32   yes
    61   records                             one compressed block when the codec is not none

Record: length varint, attributes int8, timestampDelta varlong, offsetDelta varint, keyLength varint
(-1 = null), key, valueLength varint (-1 = null), value, headerCount varint, then per header:
keyLength varint, key (UTF-8), valueLength varint (-1 = null), value. Varints are zigzag
(`broker.records.varint`).

baseOffset and partitionLeaderEpoch sit outside the CRC, so a broker assigns offsets and stamps its
epoch by rewriting the first 16 bytes, without touching the rest.

Record set (a Produce or Fetch payload, a segment file): batches back to back, each framed by its
first 12 bytes (baseOffset, batchLength) with the magic at byte 16; legacy magic 0/1 messages
(`broker.records.legacy`) frame the same way. A Fetch answer cut by its size limit ends in a partial
batch, which readers skip (the next fetch starts at it): `broker.records.record_set` walks the whole
batches of a set and stops at such a tail, as Kafka's `MemoryRecords.batches()` does.
"""

from __future__ import annotations

import functools
import os
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from broker.errors import CorruptRecordError, InvalidRecordError
from broker.records.compression import Codec, compress, decompress
from broker.records.crc import crc32c
from broker.records.varint import decode_varint, encode_varint

try:  # the C record codec (setup.py builds it when a compiler is there); this module is the reference
    from broker.records import _codec
except ImportError:  # pragma: no cover - depends on the build
    _codec = None
if os.environ.get("KAFKACTL_PURE_PYTHON"):
    _codec = None

Buffer = bytes | bytearray | memoryview

HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = struct.calcsize(">qi")  # baseOffset + batchLength: 12
MAGIC_OFFSET = struct.calcsize(">qii")  # 16
CRC_OFFSET = MAGIC_OFFSET + 1  # 17
ATTRIBUTES_OFFSET = CRC_OFFSET + 4  # 21
PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
MAGIC_V2 = 2

CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_TIMESTAMP = -1


class BatchHeader(NamedTuple):
    """The 61-byte header of a RecordBatch v2, decoded."""

    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch takes, header included."""
        return self.length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        return (self.attributes & TIMESTAMP_TYPE_BIT) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)


class Record(NamedTuple):
    """One record with absolute offset and timestamp; headers are (str, bytes | None) pairs."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    attributes: int = 0


def decode_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Decode the batch header at `pos`; the caller has checked magic is 2.

    Raises CorruptRecordError when fewer than 61 bytes follow `pos`.
    """
    try:
        return BatchHeader._make(HEADER.unpack_from(buf, pos))
    except struct.error:
        raise CorruptRecordError("truncated record batch header") from None


def compute_crc(buf: Buffer, pos: int, size: int) -> int:
    """CRC-32C over the CRC-covered part of the batch of `size` bytes at `pos`."""
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size])


def crc_ok(buf: Buffer, pos: int, header: BatchHeader) -> bool:
    """Whether the batch at `pos` carries the CRC of its contents."""
    return compute_crc(buf, pos, header.size) == header.crc


def _encode_bytes(value: bytes | None) -> bytes:
    if value is None:
        return b"\x01"  # zigzag(-1)
    return encode_varint(len(value)) + value


def encode_record(record: Record, base_offset: int, base_timestamp: int) -> bytes:
    """One record's bytes, length prefix included."""
    parts = [
        bytes((record.attributes & 0xFF,)),
        encode_varint(record.timestamp - base_timestamp),
        encode_varint(record.offset - base_offset),
        _encode_bytes(record.key),
        _encode_bytes(record.value),
        encode_varint(len(record.headers)),
    ]
    for hkey, hvalue in record.headers:
        kb = hkey.encode()
        parts.append(encode_varint(len(kb)) + kb)
        parts.append(_encode_bytes(hvalue))
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int | None = None,
    codec: Codec | int = Codec.NONE,
    timestamp_type: int = CREATE_TIME,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Encode `records` (absolute offsets, ascending) as one RecordBatch v2.

    `base_offset` defaults to the first record's offset; records keep their offset deltas from it.
    """
    if not records:
        raise ValueError("a record batch holds at least one record")
    if base_offset is None:
        base_offset = records[0].offset
    base_ts = records[0].timestamp
    max_ts = max(r.timestamp for r in records)
    body = b"".join([encode_record(r, base_offset, base_ts) for r in records])
    if codec:
        body = compress(Codec(codec), body)
    attributes = int(codec) & CODEC_MASK
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    if transactional:
        attributes |= TRANSACTIONAL_BIT
    if control:
        attributes |= CONTROL_BIT
    size = BATCH_HEADER_SIZE + len(body)
    buf = bytearray(size)
    HEADER.pack_into(
        buf, 0,
        base_offset, size - LOG_OVERHEAD, partition_leader_epoch, MAGIC_V2, 0,
        attributes, records[-1].offset - base_offset, base_ts, max_ts,
        producer_id, producer_epoch, base_sequence, len(records),
    )  # fmt: skip
    buf[BATCH_HEADER_SIZE:] = body
    struct.pack_into(">I", buf, CRC_OFFSET, compute_crc(buf, 0, size))
    return bytes(buf)


def records_from_values(
    values: Iterable[bytes | None],
    *,
    keys: Iterable[bytes | None] | None = None,
    first_offset: int = 0,
    timestamp: int | None = None,
) -> list[Record]:
    """Records with consecutive offsets and one timestamp (now by default); a convenience for tools."""
    ts = int(time.time() * 1000) if timestamp is None else timestamp
    vals = list(values)
    ks = list(keys) if keys is not None else [None] * len(vals)
    return [Record(first_offset + i, ts, k, v) for i, (k, v) in enumerate(zip(ks, vals, strict=True))]


def iter_records(buf: Buffer, pos: int = 0, header: BatchHeader | None = None,
                 make: Callable[..., Any] = Record) -> Iterator[Any]:  # fmt: skip
    """Decode the records of the batch at `pos` (decompressing them first if needed).

    Each record is `make(offset, timestamp, key, value, headers, attributes)`: a `Record` unless a
    caller (the consumer) wants its own type built directly.

    Raises CorruptRecordError when the records do not parse or disagree with the header's count.
    """
    return iter(decode_records(buf, pos, header, make))


def decode_records(buf: Buffer, pos: int = 0, header: BatchHeader | None = None,
                   make: Callable[..., Any] = Record) -> list[Any]:  # fmt: skip
    """`iter_records` as a list: the one record decoder, with the one- and two-byte varints inlined
    (the consumer's hot path: lengths, deltas and counts are almost always that small)."""
    if header is None:
        header = decode_header(buf, pos)
    size = header.size
    if len(buf) - pos < size:
        raise CorruptRecordError("record batch is truncated")
    data: Any = memoryview(buf)[pos + BATCH_HEADER_SIZE : pos + size]  # the C decoder copies keys and values out
    if header.codec:
        data = bytes(decompress(header.codec, data))
    base_offset, base_ts = header.base_offset, header.base_timestamp
    log_append = header.timestamp_type == LOG_APPEND_TIME
    if _codec is not None:
        shape = _tuple_shape(make)
        if shape is not None:
            cls, prefix, suffix = shape
            append_ts = header.max_timestamp if log_append else -1
            return _codec.decode(data, base_offset, base_ts, append_ts, cls, prefix, suffix, header.record_count)
    if data.__class__ is not bytes:
        data = bytes(data)  # bytes: its slices are the keys and values
    out: list[Any] = []
    append = out.append
    p, end = 0, len(data)
    try:
        while p < end:
            # each varint: one byte (< 0x80), two bytes, or the general decoder; then zigzag
            b = data[p]
            if b < 0x80:
                length, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                length, p = decode_varint(data, p)
            rec_end = p + length
            if length < 0 or rec_end > end:
                raise CorruptRecordError(f"record length {length} runs past the batch")
            attributes = data[p]
            b = data[p + 1]
            if b < 0x80:
                ts_delta, p = (b >> 1) ^ -(b & 1), p + 2
            else:
                ts_delta, p = decode_varint(data, p + 1)
            b = data[p]
            if b < 0x80:
                off_delta, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                off_delta, p = decode_varint(data, p)
            b = data[p]
            if b == 1:  # null key
                key, p = None, p + 1
            else:
                key, p = _decode_bytes(data, p)
            b = data[p]
            if b == 1:  # null value
                value, p = None, p + 1
            else:
                b2 = data[p + 1] if b >= 0x80 else 0
                if b < 0x80:
                    n, p = (b >> 1) ^ -(b & 1), p + 1
                elif b2 < 0x80:
                    z = (b & 0x7F) | (b2 << 7)
                    n, p = (z >> 1) ^ -(z & 1), p + 2
                else:
                    n, p = decode_varint(data, p)
                if n < 0:
                    if n != -1:
                        raise CorruptRecordError(f"record value length {n}")
                    value = None
                else:
                    if p + n > end:
                        raise CorruptRecordError("record field runs past the batch")
                    value, p = data[p : p + n], p + n
            if data[p] == 0:
                headers: tuple = ()
                p += 1
            else:
                nheaders, p = decode_varint(data, p)
                if nheaders < 0:
                    raise CorruptRecordError(f"record with a negative header count {nheaders}")
                hs = []
                for _ in range(nheaders):
                    hk, p = _decode_bytes(data, p)
                    hv, p = _decode_bytes(data, p)
                    if hk is None:
                        raise CorruptRecordError("record header with a null key")
                    hs.append((hk.decode("utf-8", "replace"), hv))
                headers = tuple(hs)
            if p != rec_end:
                raise CorruptRecordError("record length disagrees with its fields")
            append(make(base_offset + off_delta, header.max_timestamp if log_append else base_ts + ts_delta,
                        key, value, headers, attributes))  # fmt: skip
    except IndexError:
        raise CorruptRecordError("record runs past the batch") from None
    if len(out) != header.record_count:
        raise CorruptRecordError(f"batch says {header.record_count} records but holds {len(out)}")
    return out


def first_record_headers(buf: Buffer, pos: int = 0,
                         header: BatchHeader | None = None) -> list[tuple[str, bytes | None]]:  # fmt: skip
    """The headers of the first record of the batch at `pos`, the rest left undecoded: where a producer that
    stamps a whole batch (the mirror, the audit) puts its stamp. CorruptRecordError when they do not parse."""
    if header is None:
        header = decode_header(buf, pos)
    data: Any = memoryview(buf)[pos + BATCH_HEADER_SIZE : pos + header.size]
    if header.codec:
        data = decompress(header.codec, data)
    length, p = decode_varint(data, 0)
    end = p + length
    p += 1  # attributes
    _, p = decode_varint(data, p)  # timestamp delta
    _, p = decode_varint(data, p)  # offset delta
    _, p = _decode_bytes(data, p)  # key
    _, p = _decode_bytes(data, p)  # value
    count, p = decode_varint(data, p)
    out = []
    for _ in range(count):
        key, p = _decode_bytes(data, p)
        value, p = _decode_bytes(data, p)
        if key is None or p > end:
            raise CorruptRecordError("a record header does not parse")
        out.append((key.decode("utf-8", "replace"), value))
    return out


def check_records(buf: Buffer, pos: int, header: BatchHeader) -> int:
    """Kafka's record-level checks of the batch at `pos` (LogValidator): its records, decompressed, are
    exactly `record_count` records with offset deltas 0, 1, 2, ... and fields within their records;
    returns the largest record timestamp, which the caller compares with the header's.

    A header that lies about its records would poison the partition for every reader, so the broker
    runs this on every produced batch (in C when the codec is built). Raises InvalidRecordError, or
    CorruptRecordError when a compressed block does not decompress.
    """
    count, base_ts = header.record_count, header.base_timestamp
    if _codec is not None and not header.codec:
        return _codec.check_records(buf, pos + BATCH_HEADER_SIZE, pos + header.size, count, base_ts)
    data: Any = memoryview(buf)[pos + BATCH_HEADER_SIZE : pos + header.size]
    if header.codec:
        data = decompress(header.codec, data)  # CorruptRecordError when it does not
    if _codec is not None:
        return _codec.check_records(data, 0, len(data), count, base_ts)
    try:
        records = decode_records(_records_only(data), 0, header._replace(base_offset=0, attributes=0,
                                 length=BATCH_HEADER_SIZE + len(data) - LOG_OVERHEAD))  # fmt: skip
    except CorruptRecordError as exc:
        raise InvalidRecordError(str(exc)) from None
    if any(r.offset != i for i, r in enumerate(records)):
        raise InvalidRecordError("record offset deltas are not 0, 1, 2, ... as the batch's count says")
    return max(r.timestamp for r in records)


def _records_only(data: Buffer) -> bytes:
    """`data` behind a blank batch header, so that `decode_records` reads it as a batch's records."""
    return bytes(BATCH_HEADER_SIZE) + bytes(data)


def _tuple_shape(make: Callable[..., Any]) -> tuple[type, tuple, tuple] | None:
    """(class, leading args, trailing defaults) when `make` builds a NamedTuple the C decoder can fill."""
    shape = _SHAPES.get(make)
    if shape is None:
        partial = isinstance(make, functools.partial) and not make.keywords
        func, prefix = (make.func, make.args) if partial else (make, ())
        fields = getattr(func, "_fields", None)
        if not isinstance(func, type) or not issubclass(func, tuple) or fields is None:
            return None
        defaults = getattr(func, "_field_defaults", {})
        rest = fields[len(prefix) + 6 :]
        if any(f not in defaults for f in rest):
            return None
        shape = (func, tuple(prefix), tuple(defaults[f] for f in rest))
        if not isinstance(make, functools.partial):
            _SHAPES[make] = shape
    return shape


_SHAPES: dict[Any, tuple[type, tuple, tuple]] = {}


def _decode_bytes(data: Buffer, p: int) -> tuple[bytes | None, int]:
    n, p = decode_varint(data, p)
    if n < 0:
        if n != -1:
            raise CorruptRecordError(f"record field length {n}")
        return None, p
    if p + n > len(data):
        raise CorruptRecordError("record field runs past the batch")
    return bytes(data[p : p + n]), p + n
