"""Reading one offset range of a topic partition, as Arrow record batches in Spark's Kafka schema.

Each executor task reads its one range with kafkactl's consumer (a `RawConsumer` assigned to that
partition, seeked to `start`), decodes each fetched record set straight into Arrow buffers
(`broker.records.columnar`: no Python object per record), stops exactly at `end`, and yields one Arrow
record batch per fetch. It reads committed data only (isolation read_committed: aborted transactions'
records are dropped, transaction markers skipped), and ranges end at the last stable offset
(`ranges.py`, `plan.py`).
"""

from __future__ import annotations

import asyncio
import logging
import operator
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from broker.client.admin import Admin
from broker.client.consumer import ConsumeError, ConsumerRecord, RawConsumer, RecordSet
from broker.errors import CorruptRecordError
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.fetch import EARLIEST, LATEST
from broker.records.columnar import BinaryColumn, RecordColumns, decode_columns
from broker.spark.errors import DataLossError
from broker.spark.options import SourceError, TopicPartition
from broker.spark.ranges import OffsetRange, wait_offsets

log = logging.getLogger("broker.spark.source")  # the data source's warnings, under the name they always had

#: The Arrow types Spark expects for `broker.spark.source.SCHEMA` (`to_arrow_schema(SCHEMA, timezone="UTC")`): must
#: match exactly.
TIMESTAMP_ARROW = pa.timestamp("us", tz="UTC")
HEADERS_ARROW = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))
ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", TIMESTAMP_ARROW),
    ("timestampType", pa.int32()),
    ("headers", HEADERS_ARROW),
])  # fmt: skip
ARROW_SCHEMA_WITHOUT_HEADERS = pa.schema(list(ARROW_SCHEMA)[:-1])


class CorruptDataError(SourceError):
    """A fetched batch fails its CRC (or does not decode): the task fails, nothing is skipped."""

    __module__ = "broker.spark.source"  # the data source's public name, as users see and catch it


_OFFSET, _TIMESTAMP, _KEY, _VALUE, _HEADERS, _TIMESTAMP_TYPE = (
    operator.itemgetter(ConsumerRecord._fields.index(f))
    for f in ("offset", "timestamp", "key", "value", "headers", "timestamp_type")
)  # fmt: skip


def records_to_arrow(records: Sequence[ConsumerRecord], include_headers: bool = True) -> pa.RecordBatch:
    """One Arrow record batch of `records` (all of one topic partition, as the consumer hands them
    out) in ARROW_SCHEMA: what `columns_to_arrow` gives for the same records, from Python objects.
    """
    n = len(records)
    schema = ARROW_SCHEMA if include_headers else ARROW_SCHEMA_WITHOUT_HEADERS
    if n == 0:
        return pa.RecordBatch.from_pylist([], schema=schema)
    first = records[0]
    columns = [
        pa.array(list(map(_KEY, records)), pa.binary()),
        pa.array(list(map(_VALUE, records)), pa.binary()),
        pa.repeat(pa.scalar(first.topic, pa.string()), n),
        pa.repeat(pa.scalar(first.partition, pa.int32()), n),
        pa.array(list(map(_OFFSET, records)), pa.int64()),
        pc.multiply_checked(pa.array(list(map(_TIMESTAMP, records)), pa.int64()), 1000).view(TIMESTAMP_ARROW),
        pa.array(list(map(_TIMESTAMP_TYPE, records)), pa.int32()),
    ]
    if include_headers:
        headers = list(map(_HEADERS, records))
        if any(headers):  # Spark's Kafka source gives null, not [], for a record without headers
            columns.append(pa.array([h or None for h in headers], HEADERS_ARROW))
        else:
            columns.append(pa.nulls(n, HEADERS_ARROW))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def columns_to_arrow(cols: RecordColumns, topic: str, partition: int,
                     include_headers: bool = True) -> pa.RecordBatch:  # fmt: skip
    """One Arrow record batch in ARROW_SCHEMA over the buffers of `cols` (copied only to turn
    milliseconds into microseconds); topic and partition are constants."""
    n = cols.count
    schema = ARROW_SCHEMA if include_headers else ARROW_SCHEMA_WITHOUT_HEADERS
    millis = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(cols.timestamps)])
    columns = [
        _binary_array(pa.binary(), cols.keys, n),
        _binary_array(pa.binary(), cols.values, n),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(cols.offsets)]),
        pc.multiply_checked(millis, 1000).view(TIMESTAMP_ARROW),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(cols.timestamp_types)]),
    ]
    if include_headers:
        h = cols.headers
        if h is None:  # Spark's Kafka source gives null, not [], for a record without headers
            columns.append(pa.nulls(n, HEADERS_ARROW))
        else:
            entries = len(h.values.offsets) // 4 - 1
            struct = pa.StructArray.from_arrays(
                [_binary_array(pa.string(), h.keys, entries), _binary_array(pa.binary(), h.values, entries)],
                fields=list(HEADERS_ARROW.value_type),
            )
            columns.append(pa.Array.from_buffers(HEADERS_ARROW, n, [pa.py_buffer(h.validity), pa.py_buffer(h.offsets)],
                                                 null_count=h.nulls, children=[struct]))  # fmt: skip
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _binary_array(kind: pa.DataType, col: BinaryColumn, n: int) -> pa.Array:
    validity = pa.py_buffer(col.validity) if col.nulls else None
    return pa.Array.from_buffers(kind, n, [validity, pa.py_buffer(col.offsets), pa.py_buffer(col.data)],
                                 null_count=col.nulls)  # fmt: skip


def read_range(bootstrap: str, rng: OffsetRange, *, fail_on_data_loss: bool = True, include_headers: bool = True,
               poll_timeout_ms: int = 120_000, max_batch_records: int = 20_000,
               consumer: Mapping[str, Any] | None = None) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """Every record of `rng` in offset order as Arrow record batches (one per fetch, at most
    `max_batch_records` rows), stopping exactly at ``rng.end``.

    Offsets may skip (compaction, control batches); a record at or past the end is never yielded.
    Raises DataLossError when offsets the range needs are gone from the log (with
    `fail_on_data_loss=False`: a warning, and the read goes on from the log start), CorruptDataError
    when a batch of the range fails its CRC, SourceError when the partition stops short of the end for
    `poll_timeout_ms` or the broker refuses the fetch.
    """
    if rng.start >= rng.end:
        return
    tp = (rng.topic, rng.partition)
    where = f"reading {rng.topic}-{rng.partition} [{rng.start}, {rng.end})"
    settings = {"max_partition_fetch_bytes": 4 << 20, "fetch_max_bytes": 16 << 20, "isolation_level": 1,
                **(consumer or {}), "auto_offset_reset": "none"}  # fmt: skip
    position = rng.start
    c: _PartitionConsumer | None = _PartitionConsumer(bootstrap, tp, position, settings)
    try:
        progress = time.monotonic()
        while position < rng.end:
            try:
                record_sets = c.poll(min(1000, poll_timeout_ms))
            except ConsumeError as exc:
                if exc.code != ErrorCode.OFFSET_OUT_OF_RANGE:
                    raise SourceError(f"{where}: {exc}") from None
                position = _after_out_of_range(bootstrap, rng, position, fail_on_data_loss, where)
                c.close()  # a fresh consumer: the old one may hold more errors of its prefetching
                c = None
                if position >= rng.end:
                    return
                c = _PartitionConsumer(bootstrap, tp, position, settings)
                progress = time.monotonic()
                continue
            if not record_sets:
                if time.monotonic() - progress > poll_timeout_ms / 1000:
                    raise SourceError(f"{where}: no record at offset {position} in {poll_timeout_ms} ms "
                                      "(kafkaConsumer.pollTimeoutMs)")  # fmt: skip
                continue
            for rs in record_sets:
                try:
                    cols = decode_columns(rs.data, max(rs.offset, position), rng.end)
                except CorruptRecordError as exc:
                    raise CorruptDataError(f"{where}: at offset {rs.offset}: {exc}") from None
                if cols.count:
                    batch = columns_to_arrow(cols, rng.topic, rng.partition, include_headers)
                    for first in range(0, cols.count, max_batch_records):
                        yield batch.slice(first, max_batch_records)
                position = rs.next_offset
                if position >= rng.end:
                    return
            progress = time.monotonic()
    finally:
        if c is not None:
            c.close()


class _PartitionConsumer:
    """A RawConsumer of one partition, driven on a private event loop in the calling thread.

    The loop runs only inside `poll`, so the consumer's fetcher works one fetch ahead of the caller
    (a Fetch is in flight while the caller decodes) and never further: memory stays
    bounded by a fetch or two, whatever the record size — a background thread would prefetch
    without a byte bound.
    """

    def __init__(self, bootstrap: str, tp: TopicPartition, position: int, settings: dict[str, Any]) -> None:
        self.tp = tp
        self.loop = asyncio.new_event_loop()
        self.consumer: RawConsumer | None = None
        try:
            self.consumer = self.loop.run_until_complete(RawConsumer(bootstrap, **settings).start())
            self.loop.run_until_complete(self.consumer.assign([tp]))
            self.consumer.seek(tp, position)
        except BaseException:
            self.close()
            raise

    def poll(self, timeout_ms: int) -> list[RecordSet]:
        """The next fetched record sets of the partition (waiting up to `timeout_ms` for one); [] if none came."""
        assert self.consumer is not None
        got = self.loop.run_until_complete(self.consumer.getmany(timeout_ms))
        return got.get(self.tp, [])

    def close(self) -> None:
        try:
            if self.consumer is not None:
                self.loop.run_until_complete(self.consumer.close())
        finally:
            self.consumer = None
            self.loop.close()


def _after_out_of_range(bootstrap: str, rng: OffsetRange, position: int, fail: bool, where: str) -> int:
    """The broker said `position` is out of range: data loss below the log start (or, with `fail`
    False, the offset to go on from), an error past the log end."""
    tp = (rng.topic, rng.partition)
    with Admin(bootstrap) as admin:  # (a leader that cannot be reached is waited for, within the admin's timeout)
        first = wait_offsets(admin, [tp], EARLIEST, SourceError)[tp]
        last = wait_offsets(admin, [tp], LATEST, SourceError)[tp]
    if first <= position:
        raise SourceError(f"{where}: offset {position} is out of range (the log now holds [{first}, {last}): "
                          "truncated, or deleted and recreated, since planning?)")  # fmt: skip
    if fail:
        raise DataLossError(f"{where}: offsets [{position}, {first}) are gone (the log starts at {first}, "
                            "removed by retention?); set failOnDataLoss=false to skip them")  # fmt: skip
    log.warning("%s: offsets [%d, %d) are gone (the log starts at %d); skipping them (failOnDataLoss=false)",
                where, position, min(first, rng.end), first)  # fmt: skip
    return min(first, rng.end)
