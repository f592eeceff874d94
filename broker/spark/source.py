"""The `kafkactl` PySpark data source: batch reads of topic partitions as Spark's Kafka source shapes them.

    spark.dataSource.register(KafkactlDataSource)           # or broker.spark.register(spark)
    df = (spark.read.format("kafkactl")
          .option("bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "orders,payments")
          .option("startingOffsets", "earliest").option("endingOffsets", "latest")
          .load())

Planning happens once, on the driver (`KafkactlDataSource.reader`): `plan_ranges` (`broker.spark.ranges`)
asks the cluster for the subscribed partitions and resolves the options (`broker.spark.options`) into one
closed-open range ``[start, end)`` of offsets per topic partition; `split_ranges` cuts those into the input
partitions, so input partition i reads the i-th range of ``split_ranges(plan_ranges(...))``. Each executor
task reads its one range with `read_range` (`broker.spark.read`): decoded straight into Arrow buffers, one
record batch per fetch, stopping exactly at `end`. Their names that callers import from here are re-exported.

Options (names case-insensitive, as in Spark's Kafka source; an unknown name is an error):

- ``bootstrap.servers`` (or ``kafka.bootstrap.servers``): ``host:port,...``; required.
- Exactly one of ``subscribe`` (comma-separated topics), ``subscribePattern`` (a regex matching a
  whole topic name; internal topics excluded) and ``assign`` (JSON ``{"t":[0,1]}``).
- ``startingOffsets``: ``earliest`` (default) or JSON ``{"t":{"0":23,"1":-2}}`` (-2 earliest); latest
  / -1 cannot start a batch read. ``endingOffsets``: ``latest`` (default) or JSON (-1 latest);
  earliest / -2 is invalid. JSON names every assigned partition and no other (Spark's rule).
- ``startingTimestamp`` / ``endingTimestamp``: epoch ms for every partition, meaning the first offset
  stamped at or after it; ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``: the same per
  partition, as JSON ``{"t":{"0":1700000000000}}``. Precedence: timestamp, then by-timestamp, then
  offsets. With no record that late, a start is an error (``startingOffsetsByTimestampStrategy=error``,
  the default) or the latest offset (``=latest``); an end is the latest offset.
- ``failOnDataLoss``: ``true`` (default): a start below the log start (removed by retention) is an
  error naming the partition and the offsets; ``false``: a warning, and the read starts at the log
  start. Checked when planning and again by each task.
- ``minPartitions``: at least this many input partitions — Spark's proportional split, then the
  largest pieces split further where its rounding falls short. ``maxRecordsPerPartition``: no input
  partition spans more offsets than this.
- ``includeHeaders``: ``true`` (the default here; Spark's is false) keeps the ``headers`` column.
- ``kafkaConsumer.pollTimeoutMs``: a task fails after this long without progress (120000).
- ``kafka.max.partition.fetch.bytes``, ``kafka.fetch.max.bytes``, ``kafka.fetch.min.bytes``,
  ``kafka.fetch.max.wait.ms``, ``kafka.request.timeout.ms``, ``kafka.client.id``: consumer settings.
- ``kafka.security.protocol``, ``kafka.ssl.ca.location``, ``kafka.sasl.mechanism``, ``kafka.sasl.username``,
  ``kafka.sasl.password`` (and the other keys of ``broker.client.security``): TLS and SASL for the planning
  and every task (the files named must exist where the tasks run). `kafkactl spark-load` passes its own.
  Other ``kafka.*`` keys and Spark's streaming-only options are accepted and ignored.

Rows have Spark's Kafka schema: ``key binary, value binary, topic string, partition int, offset long,
timestamp timestamp, timestampType int, headers array<struct<key: string, value: binary>>`` —
``headers`` is null for a record without headers, as Spark's source gives it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from broker.client import security as client_security
from broker.spark.errors import DataLossError
from broker.spark.options import OffsetBound, SourceError, SourceOptions, parse_options
from broker.spark.ranges import OffsetRange, plan_ranges, split_ranges
from broker.spark.read import (
    ARROW_SCHEMA,
    ARROW_SCHEMA_WITHOUT_HEADERS,
    CorruptDataError,
    columns_to_arrow,
    read_range,
    records_to_arrow,
)

FORMAT = "kafkactl"

# --- schema ----------------------------------------------------------------------------------------

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
    StructField("headers", HEADERS_TYPE),
])  # fmt: skip
SCHEMA_WITHOUT_HEADERS = StructType(SCHEMA.fields[:-1])


# --- the data source -------------------------------------------------------------------------------


class OffsetRangePartition(InputPartition):
    """An input partition: one OffsetRange (also its `value`)."""

    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(rng)
        self.range = rng


class KafkactlDataSource(DataSource):
    """``spark.read.format("kafkactl")``: batch reads of topic partitions (options: see the module docstring)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(options)
        self.parsed = parse_options(options)
        if not self.parsed.bootstrap:
            raise SourceError("option bootstrap.servers is required")

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return SCHEMA if self.parsed.include_headers else SCHEMA_WITHOUT_HEADERS

    def reader(self, schema: StructType) -> KafkactlReader:
        if schema != self.schema():
            raise SourceError("the kafkactl source has a fixed schema (Spark's Kafka schema): do not set one")
        return KafkactlReader(self.parsed)


class KafkactlReader(DataSourceReader):
    """Plans on construction (driver); `read` runs on executors, one OffsetRange per task."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        _use_security(options)
        planned = plan_ranges(options.bootstrap, options)
        self.ranges = split_ranges(planned, options.min_partitions, options.max_records_per_partition)

    def partitions(self) -> list[InputPartition]:
        return [OffsetRangePartition(r) for r in self.ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        rng = partition.value
        if rng is None:  # Spark runs one empty partition when there is nothing to read
            return
        o = self.options
        _use_security(o)
        yield from read_range(o.bootstrap, OffsetRange(*rng), fail_on_data_loss=o.fail_on_data_loss,
                              include_headers=o.include_headers, poll_timeout_ms=o.poll_timeout_ms,
                              consumer=o.consumer)  # fmt: skip


def _use_security(options: SourceOptions) -> None:
    """The options' TLS/SASL settings (`kafka.security.protocol`, ...) for every connection of this Python
    worker: the consumers and the admin lookups alike."""
    sec = options.consumer.get("security")
    if sec is not None:
        client_security.set_default(sec)


def register(spark: Any) -> None:
    """Make ``spark.read.format("kafkactl")`` available in this Spark session."""
    spark.dataSource.register(KafkactlDataSource)


__all__ = [
    "FORMAT", "SCHEMA", "SCHEMA_WITHOUT_HEADERS", "ARROW_SCHEMA", "ARROW_SCHEMA_WITHOUT_HEADERS", "SourceError",
    "DataLossError", "CorruptDataError", "OffsetRange", "OffsetBound", "SourceOptions", "parse_options", "plan_ranges",
    "split_ranges", "read_range", "records_to_arrow", "columns_to_arrow", "OffsetRangePartition", "KafkactlDataSource",
    "KafkactlReader", "register",
]  # fmt: skip
