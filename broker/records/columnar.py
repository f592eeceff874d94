"""Fetched record sets decoded into columns: Arrow's memory layout, with no Python object per record.

`decode_columns(data, position, stop)` reads the whole RecordBatch v2s of a record set (as a Fetch
returns it) and keeps the records with ``position <= offset < stop``. Each column is one or a few
native-endian (little-endian on every platform kafkactl runs on) buffers that Arrow wraps as they are:

    offsets          int64 per record
    timestamps       int64 per record, epoch ms: the batch's maxTimestamp for a LogAppendTime batch,
                     baseTimestamp + timestampDelta otherwise
    timestamp_types  int32 per record: 0 CreateTime, 1 LogAppendTime
    keys, values     BinaryColumn: a validity bitmap (bit i, least significant bit first, set when
                     value i is not null), int32 offsets (count + 1) into `data`, the bytes, null count
    headers          None when no record kept has a header; else HeaderColumn: one list per record,
                     null for a record without headers (Spark's Kafka source gives null, not []): a
                     validity bitmap, int32 offsets (count + 1) into the header entries, and the
                     entries' names (UTF-8, invalid sequences replaced by U+FFFD) and values as
                     BinaryColumns

What is checked is what the consumer checks (`broker.client.consumer.decode_records`): magic 2 and the
CRC of every batch looked at, the records against their batch; any failure raises CorruptRecordError.
Control batches are skipped, a trailing partial batch is left for the next fetch, and batches from
the first one starting at or after `stop` on are not looked at (a read that ends there does not fail
on what lies beyond). The C version (`_codec.decode_columns`) is used when built; the version here,
built on `broker.records.batch.decode_records`, is the reference the tests compare it with.
"""

from __future__ import annotations

import array
from typing import NamedTuple

from broker.errors import CorruptRecordError
from broker.records import batch
from broker.records.batch import (
    BATCH_HEADER_SIZE,
    LOG_APPEND_TIME,
    MAGIC_OFFSET,
    Buffer,
    crc_ok,
    decode_records,
)
from broker.records.compression import decompress
from broker.records.crc import crc32c
from broker.records.record_set import batches


class BinaryColumn(NamedTuple):
    """A nullable binary (or UTF-8) column in Arrow's layout."""

    validity: bytearray
    offsets: bytearray
    data: bytearray
    nulls: int


class HeaderColumn(NamedTuple):
    """A column of nullable lists of (name, value) header entries in Arrow's layout."""

    validity: bytearray
    nulls: int
    offsets: bytearray
    keys: BinaryColumn
    values: BinaryColumn


class RecordColumns(NamedTuple):
    """The records of a record set, column by column (the layout is in the module docstring)."""

    count: int
    offsets: bytearray
    timestamps: bytearray
    timestamp_types: bytearray
    keys: BinaryColumn
    values: BinaryColumn
    headers: HeaderColumn | None


def decode_columns(data: Buffer, position: int, stop: int) -> RecordColumns:
    """The records with ``position <= offset < stop`` of a fetched record set, as columns.

    Raises CorruptRecordError when a batch looked at fails its CRC or does not decode.
    """
    if batch._codec is not None:
        count, offsets, timestamps, types, keys, values, headers = batch._codec.decode_columns(
            data, position, stop, crc32c, decompress
        )
        if headers is not None:
            hv, hnulls, ho, hk, hvals = headers
            headers = HeaderColumn(hv, hnulls, ho, BinaryColumn(*hk), BinaryColumn(*hvals))
        return RecordColumns(count, offsets, timestamps, types, BinaryColumn(*keys), BinaryColumn(*values), headers)
    return _decode_columns(data, position, stop)


class _BinaryBuilder:
    """Builds a BinaryColumn one value at a time (the pure-Python path)."""

    def __init__(self) -> None:
        self.valid: list[bool] = []
        self.offsets = array.array("i", [0])
        self.data = bytearray()

    def append(self, value: bytes | None) -> None:
        self.valid.append(value is not None)
        if value:
            self.data += value
        self.offsets.append(len(self.data))

    def build(self) -> BinaryColumn:
        return BinaryColumn(_bitmap(self.valid), bytearray(self.offsets.tobytes()), self.data,
                            self.valid.count(False))  # fmt: skip


def _bitmap(valid: list[bool]) -> bytearray:
    out = bytearray((len(valid) + 7) // 8)
    for i, v in enumerate(valid):
        if v:
            out[i >> 3] |= 1 << (i & 7)
    return out


def _decode_columns(data: Buffer, position: int, stop: int) -> RecordColumns:
    buf = memoryview(data)
    offsets, timestamps, types = array.array("q"), array.array("q"), array.array("i")
    keys, values, header_keys, header_values = _BinaryBuilder(), _BinaryBuilder(), _BinaryBuilder(), _BinaryBuilder()
    has_headers: list[bool] = []
    header_offsets = array.array("i", [0])
    for pos, h in batches(buf):
        if h.base_offset >= stop:
            break
        if buf[pos + MAGIC_OFFSET] != 2:
            raise CorruptRecordError(f"batch at offset {h.base_offset} has magic {buf[pos + MAGIC_OFFSET]}")
        if h.size < BATCH_HEADER_SIZE:
            raise CorruptRecordError(f"batch at offset {h.base_offset} has length {h.length}")
        if not crc_ok(buf, pos, h):
            raise CorruptRecordError(f"batch at offset {h.base_offset} fails its CRC")
        if not h.is_control and h.last_offset >= position:
            log_append = h.timestamp_type == LOG_APPEND_TIME
            for r in decode_records(buf, pos, h):
                if not position <= r.offset < stop:
                    continue
                offsets.append(r.offset)
                timestamps.append(r.timestamp)
                types.append(int(log_append))
                keys.append(r.key)
                values.append(r.value)
                has_headers.append(bool(r.headers))
                for name, value in r.headers:
                    header_keys.append(name.encode())
                    header_values.append(value)
                header_offsets.append(len(header_values.valid))
    headers = None
    if len(header_values.valid):
        headers = HeaderColumn(_bitmap(has_headers), has_headers.count(False), bytearray(header_offsets.tobytes()),
                               header_keys.build(), header_values.build())  # fmt: skip
    return RecordColumns(len(offsets), bytearray(offsets.tobytes()), bytearray(timestamps.tobytes()),
                         bytearray(types.tobytes()), keys.build(), values.build(), headers)  # fmt: skip
