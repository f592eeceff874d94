"""The `kafkactl` PySpark data source: batch reads of topic partitions as Spark's Kafka source shapes them.

    spark.dataSource.register(KafkactlDataSource)           # or broker.spark.register(spark)
    df = (spark.read.format("kafkactl")
          .option("bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "orders,payments")
          .option("startingOffsets", "earliest").option("endingOffsets", "latest")
          .load())

Planning happens once, on the driver (`KafkactlDataSource.reader`): `plan_ranges` asks the cluster for
the subscribed partitions and resolves the options into one closed-open range ``[start, end)`` of
offsets per topic partition; `split_ranges` cuts those into the input partitions, so input partition i
reads the i-th range of ``split_ranges(plan_ranges(...))``. Each executor task reads its one range with
kafkactl's consumer (a `RawConsumer` assigned to that partition, seeked to `start`), decodes each
fetched record set straight into Arrow buffers (`broker.records.columnar`: no Python object per
record), stops exactly at `end`, and yields one Arrow record batch per fetch.

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
  Other ``kafka.*`` keys and Spark's streaming-only options are accepted and ignored.

Rows have Spark's Kafka schema: ``key binary, value binary, topic string, partition int, offset long,
timestamp timestamp, timestampType int, headers array<struct<key: string, value: binary>>`` —
``headers`` is null for a record without headers, as Spark's source gives it.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import logging
import math
import operator
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
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

from broker.client.admin import Admin
from broker.client.consumer import ConsumeError, ConsumerRecord, RawConsumer, RecordSet
from broker.errors import CorruptRecordError, KafkactlError
from broker.protocol.errors import ErrorCode, error_name
from broker.protocol.messages.fetch import EARLIEST, LATEST
from broker.records.columnar import BinaryColumn, RecordColumns, decode_columns

log = logging.getLogger(__name__)

FORMAT = "kafkactl"

TopicPartition = tuple[str, int]

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

#: The Arrow types Spark expects for SCHEMA (`to_arrow_schema(SCHEMA, timezone="UTC")`): must match exactly.
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


# --- errors and plain values -----------------------------------------------------------------------


class SourceError(KafkactlError):
    """Options that cannot be read, or a range that cannot be planned or read."""


class DataLossError(SourceError):
    """Offsets a read needs are gone from the log (retention removed them); `failOnDataLoss=false` skips them."""


class CorruptDataError(SourceError):
    """A fetched batch fails its CRC (or does not decode): the task fails, nothing is skipped."""


class OffsetRange(NamedTuple):
    """Offsets ``[start, end)`` of one topic partition: what one input partition reads."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


class OffsetBound(NamedTuple):
    """Where a read starts or ends, as an option gave it.

    kind: ``earliest`` | ``latest`` | ``offsets`` ({tp: offset, -2 earliest, -1 latest}) |
    ``timestamp`` (epoch ms for all partitions) | ``timestamps`` ({tp: epoch ms}).
    """

    kind: str
    value: Any = None


#: Consumer settings a `kafka.*` option may set (Kafka's name → ConsumerConfig field, type).
CONSUMER_OPTIONS: dict[str, tuple[str, type]] = {
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", int),
    "fetch.max.bytes": ("fetch_max_bytes", int),
    "fetch.min.bytes": ("fetch_min_bytes", int),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", int),
    "request.timeout.ms": ("request_timeout_ms", int),
    "client.id": ("client_id", str),
}

#: Options of Spark's Kafka source that mean nothing to a batch read here: accepted, ignored.
IGNORED_OPTIONS = frozenset(k.lower() for k in (
    "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "groupIdPrefix", "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs", "kafka.group.id", "path",
))  # fmt: skip

KNOWN_OPTIONS = (
    "bootstrap.servers", "kafka.bootstrap.servers", "subscribe", "subscribePattern", "assign", "startingOffsets",
    "endingOffsets", "startingTimestamp", "endingTimestamp", "startingOffsetsByTimestamp", "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy", "failOnDataLoss", "minPartitions", "maxRecordsPerPartition",
    "includeHeaders", "kafkaConsumer.pollTimeoutMs",
)  # fmt: skip
_KNOWN = frozenset(k.lower() for k in KNOWN_OPTIONS)


@dataclass(frozen=True)
class SourceOptions:
    """The source's options, parsed and checked (`parse_options`); what planning and reading act on."""

    bootstrap: str | None = None
    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    assign: tuple[TopicPartition, ...] | None = None
    starting: OffsetBound = OffsetBound("earliest")
    ending: OffsetBound = OffsetBound("latest")
    starting_by_timestamp_strategy: str = "error"
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    include_headers: bool = True
    poll_timeout_ms: int = 120_000
    consumer: dict[str, Any] = field(default_factory=dict)


# --- options ---------------------------------------------------------------------------------------

_OFFSETS_HELP = 'JSON like {"topic":{"0":23,"1":-2}} (-2 earliest, -1 latest)'


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Read the source's options (keys case-insensitive); SourceError names the first bad one."""
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    unknown = sorted(k for k in opts if k not in _KNOWN and k not in IGNORED_OPTIONS and not k.startswith("kafka."))
    if unknown:
        raise SourceError(f"unknown option {unknown[0]!r} (known: {', '.join(KNOWN_OPTIONS)})")

    bootstrap = opts.get("bootstrap.servers") or opts.get("kafka.bootstrap.servers")
    if bootstrap is not None and not bootstrap.strip():
        raise SourceError("bootstrap.servers is empty")

    given = [name for name in ("subscribe", "subscribePattern", "assign") if name.lower() in opts]
    if len(given) != 1:
        which = ", ".join(given) if given else "none"
        raise SourceError(f"give exactly one of the options subscribe, subscribePattern, assign (got: {which})")
    subscribe = pattern = assign = None
    if "subscribe" in opts:
        subscribe = tuple(dict.fromkeys(t.strip() for t in opts["subscribe"].split(",") if t.strip()))
        if not subscribe:
            raise SourceError("subscribe: no topic named (expected comma-separated topic names)")
    elif "subscribepattern" in opts:
        pattern = opts["subscribepattern"].strip()
        if not pattern:
            raise SourceError("subscribePattern is empty")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SourceError(f"subscribePattern {pattern!r} is not a valid regular expression: {exc}") from None
    else:
        assign = _parse_assign(opts["assign"])

    starting = _parse_bound(opts, "starting")
    ending = _parse_bound(opts, "ending")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise SourceError(f"startingOffsetsByTimestampStrategy: expected error or latest, got {strategy!r}")

    consumer: dict[str, Any] = {}
    for key, value in opts.items():
        if key.startswith("kafka.") and key[6:] in CONSUMER_OPTIONS:
            name, kind = CONSUMER_OPTIONS[key[6:]]
            consumer[name] = _positive_int(value, key) if kind is int else value
    return SourceOptions(
        bootstrap=bootstrap.strip() if bootstrap else None,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        starting_by_timestamp_strategy=strategy,
        fail_on_data_loss=_bool(opts.get("failondataloss", "true"), "failOnDataLoss"),
        min_partitions=_positive_int(opts["minpartitions"], "minPartitions") if "minpartitions" in opts else None,
        max_records_per_partition=(
            _positive_int(opts["maxrecordsperpartition"], "maxRecordsPerPartition")
            if "maxrecordsperpartition" in opts
            else None
        ),  # fmt: skip
        include_headers=_bool(opts.get("includeheaders", "true"), "includeHeaders"),
        poll_timeout_ms=_positive_int(opts.get("kafkaconsumer.polltimeoutms", "120000"), "kafkaConsumer.pollTimeoutMs"),
        consumer=consumer,
    )


def _bool(text: str, name: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise SourceError(f"{name}: expected true or false, got {text!r}")
    return value == "true"


def _positive_int(text: str, name: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise SourceError(f"{name}: expected a positive whole number, got {text!r}") from None
    if value <= 0:
        raise SourceError(f"{name}: expected a positive whole number, got {text!r}")
    return value


def _timestamp(text: Any, name: str) -> int:
    if isinstance(text, bool) or not isinstance(text, int | str):
        raise SourceError(f"{name}: expected a timestamp in epoch milliseconds, got {text!r}")
    try:
        value = int(text.strip()) if isinstance(text, str) else text
    except ValueError:
        raise SourceError(f"{name}: expected a timestamp in epoch milliseconds, got {text!r}") from None
    if value < 0:
        raise SourceError(f"{name}: expected a timestamp in epoch milliseconds (>= 0), got {text!r}")
    return value


def _json_object(text: str, name: str, example: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict):
        raise SourceError(f"{name}: expected {example}, got {text!r}")
    return doc


def _parse_assign(text: str) -> tuple[TopicPartition, ...]:
    example = 'JSON like {"topic":[0,1]}'
    doc = _json_object(text, "assign", example)
    out: list[TopicPartition] = []
    for topic, parts in doc.items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0
                                                  for p in parts):  # fmt: skip
            raise SourceError(f"assign: expected {example}, got {text!r}")
        out.extend((topic, p) for p in parts)
    if not out:
        raise SourceError("assign: no partition named")
    return tuple(sorted(set(out)))


def _partition_map(text: str, name: str, example: str) -> dict[TopicPartition, Any]:
    """{"t": {"0": v}} → {("t", 0): v}, values unchecked."""
    doc = _json_object(text, name, example)
    out: dict[TopicPartition, Any] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise SourceError(f"{name}: expected {example}, got {text!r}")
        for p, value in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise SourceError(f"{name}: partition {p!r} of topic {topic!r} is not a number") from None
            if partition < 0:
                raise SourceError(f"{name}: partition {p!r} of topic {topic!r} is negative")
            out[(topic, partition)] = value
    if not out:
        raise SourceError(f"{name}: no partition named")
    return out


def _parse_bound(opts: dict[str, str], which: str) -> OffsetBound:
    """startingX / endingX: timestamp beats byTimestamp beats offsets (Spark's precedence)."""
    name = f"{which}Timestamp"
    if name.lower() in opts:
        return OffsetBound("timestamp", _timestamp(opts[name.lower()], name))
    name = f"{which}OffsetsByTimestamp"
    if name.lower() in opts:
        found = _partition_map(opts[name.lower()], name, 'JSON like {"topic":{"0":1700000000000}}')
        stamps = {tp: _timestamp(ts, f"{name} for {tp[0]}-{tp[1]}") for tp, ts in found.items()}
        return OffsetBound("timestamps", stamps)
    name = f"{which}Offsets"
    default = "earliest" if which == "starting" else "latest"
    text = opts.get(name.lower(), default).strip()
    if text.lower() == "earliest":
        if which == "ending":
            raise SourceError("endingOffsets cannot be earliest for a batch read")
        return OffsetBound("earliest")
    if text.lower() == "latest":
        if which == "starting":
            raise SourceError("startingOffsets cannot be latest for a batch read")
        return OffsetBound("latest")
    example = f"earliest, latest or {_OFFSETS_HELP}"
    if not text.startswith("{"):
        raise SourceError(f"{name}: expected {example}, got {text!r}")
    offsets = _partition_map(text, name, example)
    for (t, p), off in offsets.items():
        if isinstance(off, bool) or not isinstance(off, int) or off < EARLIEST:
            raise SourceError(f"{name} for {t}-{p}: expected an offset, -2 (earliest) or -1 (latest), got {off!r}")
        if which == "starting" and off == LATEST:
            raise SourceError(f"{name} for {t}-{p} cannot be -1 (latest) for a batch read")
        if which == "ending" and off == EARLIEST:
            raise SourceError(f"{name} for {t}-{p} cannot be -2 (earliest) for a batch read")
    return OffsetBound("offsets", offsets)


# --- planning --------------------------------------------------------------------------------------


def plan_ranges(bootstrap: str | None, options: Mapping[str, str] | SourceOptions) -> list[OffsetRange]:
    """Resolve the options into one ``[start, end)`` per assigned topic partition, sorted by (topic, partition).

    Asks the cluster (metadata, ListOffsets) once; `bootstrap` may be None when the options carry
    ``bootstrap.servers``. Empty ranges are kept. A start below the partition's log start is a
    DataLossError, or with ``failOnDataLoss=false`` a warning and the log start (at most the end).
    Raises SourceError for options that do not fit the cluster (unknown topic, JSON that does not
    name exactly the assigned partitions, a start after the end, an end past the log end).
    """
    opts = options if isinstance(options, SourceOptions) else parse_options(options)
    bootstrap = bootstrap or opts.bootstrap
    if not bootstrap:
        raise SourceError("option bootstrap.servers is required")
    with Admin(bootstrap) as admin:
        tps = _assigned_partitions(admin, opts)
        if not tps:
            return []
        earliest = admin.list_offsets(tps, EARLIEST)
        latest = admin.list_offsets(tps, LATEST)
        starts = _resolve(admin, opts.starting, tps, earliest, latest, "starting", opts.starting_by_timestamp_strategy)
        ends = _resolve(admin, opts.ending, tps, earliest, latest, "ending", "latest")
    out = []
    for tp in tps:
        start, end, first, last = starts[tp], ends[tp], earliest[tp], latest[tp]
        name = f"{tp[0]}-{tp[1]}"
        if end > last:
            raise SourceError(f"{name}: the planned end {end} is past the partition's end {last}")
        if start < first:
            if opts.fail_on_data_loss:
                raise DataLossError(
                    f"{name}: offsets [{start}, {first}) are gone (the log starts at {first}, removed by retention?);"
                    f" set failOnDataLoss=false to start at the log start"
                )
            log.warning("%s: offsets [%d, %d) are gone (the log starts at %d); starting at %d (failOnDataLoss=false)",
                        name, start, first, first, min(first, end))  # fmt: skip
            start = min(first, end)
        if start > end:
            raise SourceError(f"{name}: the planned start {start} is after the planned end {end}")
        out.append(OffsetRange(tp[0], tp[1], start, end))
    return out


def _assigned_partitions(admin: Admin, opts: SourceOptions) -> list[TopicPartition]:
    """The topic partitions the options subscribe to, sorted; SourceError for a topic that does not exist."""
    if opts.subscribe_pattern is not None:
        md = admin.cluster.metadata(None)
        regex = re.compile(opts.subscribe_pattern)
        topics = [t for t in md["topics"]
                  if not t.get("is_internal") and not t["error_code"] and regex.fullmatch(t["name"])]  # fmt: skip
    else:
        names = list(opts.subscribe) if opts.subscribe is not None else sorted({t for t, _ in opts.assign or ()})
        md = admin.cluster.metadata(names)
        topics = md["topics"]
        by_name = {t["name"]: t for t in topics}
        for name in names:
            t = by_name.get(name)
            if t is None or t["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise SourceError(f"topic {name!r} does not exist")
            if t["error_code"]:
                raise SourceError(f"topic {name!r}: {error_name(t['error_code'])}")
    tps = sorted((t["name"], p["partition_index"]) for t in topics for p in t["partitions"])
    if opts.assign is not None:
        missing = sorted(set(opts.assign) - set(tps))
        if missing:
            raise SourceError(f"assign: topic {missing[0][0]!r} has no partition {missing[0][1]}")
        return list(opts.assign)
    return tps


def _check_named(given: dict[TopicPartition, Any], tps: list[TopicPartition], option: str) -> None:
    """Spark's rule: JSON offsets name every assigned partition and nothing else."""
    missing = sorted(set(tps) - set(given))
    extra = sorted(set(given) - set(tps))
    if missing or extra:
        parts = []
        if missing:
            parts.append("missing " + ", ".join(f"{t}-{p}" for t, p in missing))
        if extra:
            parts.append("not assigned " + ", ".join(f"{t}-{p}" for t, p in extra))
        raise SourceError(f"{option} must name every assigned partition and no other ({'; '.join(parts)});"
                          " use -2 for earliest, -1 for latest")  # fmt: skip


def _resolve(admin: Admin, spec: OffsetBound, tps: list[TopicPartition], earliest: dict[TopicPartition, int],
             latest: dict[TopicPartition, int], which: str, no_match: str) -> dict[TopicPartition, int]:  # fmt: skip
    """Offsets for a bound; `no_match` says what a timestamp after the last record means (error | latest)."""
    if spec.kind == "earliest":
        return dict(earliest)
    if spec.kind == "latest":
        return dict(latest)
    if spec.kind == "offsets":
        _check_named(spec.value, tps, f"{which}Offsets")
        return {tp: earliest[tp] if off == EARLIEST else latest[tp] if off == LATEST else off
                for tp, off in ((tp, spec.value[tp]) for tp in tps)}  # fmt: skip
    if spec.kind == "timestamp":
        stamps = dict.fromkeys(tps, spec.value)
        option = f"{which}Timestamp"
    else:
        _check_named(spec.value, tps, f"{which}OffsetsByTimestamp")
        stamps = {tp: spec.value[tp] for tp in tps}
        option = f"{which}OffsetsByTimestamp"
    by_stamp: dict[int, list[TopicPartition]] = {}
    for tp, ts in stamps.items():
        by_stamp.setdefault(ts, []).append(tp)
    out: dict[TopicPartition, int] = {}
    for ts, group in by_stamp.items():
        for tp, off in admin.list_offsets(group, ts).items():
            if off < 0:
                if no_match == "error":
                    raise SourceError(f"{option}: {tp[0]}-{tp[1]} has no record stamped at or after {ts} "
                                      "(startingOffsetsByTimestampStrategy=latest starts at the end)")  # fmt: skip
                off = latest[tp]
            out[tp] = off
    return out


# --- splitting -------------------------------------------------------------------------------------


def split_ranges(ranges: Sequence[OffsetRange], min_partitions: int | None = None,
                 max_records: int | None = None) -> list[OffsetRange]:  # fmt: skip
    """The input partitions for `ranges`: Spark's KafkaOffsetRangeCalculator, made to keep its promise.

    Empty ranges are dropped. With `max_records`, a range of n offsets becomes ceil(n / max_records)
    pieces. With `min_partitions` and fewer pieces than that, Spark's proportional split follows:
    pieces smaller than 1.5 ideal shares stay whole, each other piece gets
    max(1, round(size / big_total * (min_partitions - whole pieces))) parts. Where rounding leaves
    fewer than `min_partitions`, the piece with the largest parts is split once more, repeatedly
    (while any piece spans two offsets or more). A piece of n offsets in k parts is cut Spark's way:
    part i takes remaining // (k - i) offsets. Deterministic; sorted by (topic, partition, start);
    the union of the output is exactly the union of the non-empty input ranges.
    """
    if min_partitions is not None and min_partitions <= 0:
        raise ValueError("min_partitions must be positive")
    if max_records is not None and max_records <= 0:
        raise ValueError("max_records must be positive")
    pieces = sorted(r for r in ranges if r.size > 0)
    if max_records is not None:
        pieces = [p for r in pieces for p in _divide(r, math.ceil(r.size / max_records))]
    if min_partitions is not None and len(pieces) < min_partitions:
        total = sum(r.size for r in pieces)
        whole = [r.size / total * min_partitions < 1.5 for r in pieces]
        big_total = total - sum(r.size for r, w in zip(pieces, whole, strict=True) if w)
        big_min = max(min_partitions - sum(whole), 1)
        parts = [1 if w else max(_round_half_up(r.size / big_total * big_min), 1)
                 for r, w in zip(pieces, whole, strict=True)]  # fmt: skip
        parts = [min(k, r.size) for r, k in zip(pieces, parts, strict=True)]
        _top_up(pieces, parts, min_partitions)
        pieces = [p for r, k in zip(pieces, parts, strict=True) for p in _divide(r, k)]
    return sorted(pieces)


def _round_half_up(x: float) -> int:
    """Scala's math.round (half up), not Python's round (half to even)."""
    return math.floor(x + 0.5)


def _top_up(pieces: list[OffsetRange], parts: list[int], want: int) -> None:
    """Add parts, one at a time to the piece whose parts are largest, until `want` (or nothing splits)."""
    have = sum(parts)
    heap = [(-(r.size / k), i) for i, (r, k) in enumerate(zip(pieces, parts, strict=True)) if k < r.size]
    heapq.heapify(heap)
    while have < want and heap:
        _, i = heapq.heappop(heap)
        parts[i] += 1
        have += 1
        if parts[i] < pieces[i].size:
            heapq.heappush(heap, (-(pieces[i].size / parts[i]), i))


def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """`r` in `parts` consecutive pieces (Spark's getDividedPartition: the later pieces take the remainder)."""
    out = []
    remaining, start = r.size, r.start
    for i in range(parts):
        n = remaining // (parts - i)
        remaining -= n
        end = min(start + n, r.end)
        if end > start:
            out.append(OffsetRange(r.topic, r.partition, start, end))
        start = end
    return out


# --- reading ---------------------------------------------------------------------------------------

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
    settings = {"max_partition_fetch_bytes": 4 << 20, "fetch_max_bytes": 16 << 20, **(consumer or {}),
                "auto_offset_reset": "none"}  # fmt: skip
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
    with Admin(bootstrap) as admin:
        first = admin.list_offsets([tp], EARLIEST)[tp]
        last = admin.list_offsets([tp], LATEST)[tp]
    if first <= position:
        raise SourceError(f"{where}: offset {position} is out of range (the log now holds [{first}, {last}): "
                          "truncated, or deleted and recreated, since planning?)")  # fmt: skip
    if fail:
        raise DataLossError(f"{where}: offsets [{position}, {first}) are gone (the log starts at {first}, "
                            "removed by retention?); set failOnDataLoss=false to skip them")  # fmt: skip
    log.warning("%s: offsets [%d, %d) are gone (the log starts at %d); skipping them (failOnDataLoss=false)",
                where, position, min(first, rng.end), first)  # fmt: skip
    return min(first, rng.end)


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
        planned = plan_ranges(options.bootstrap, options)
        self.ranges = split_ranges(planned, options.min_partitions, options.max_records_per_partition)

    def partitions(self) -> list[InputPartition]:
        return [OffsetRangePartition(r) for r in self.ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        rng = partition.value
        if rng is None:  # Spark runs one empty partition when there is nothing to read
            return
        o = self.options
        yield from read_range(o.bootstrap, OffsetRange(*rng), fail_on_data_loss=o.fail_on_data_loss,
                              include_headers=o.include_headers, poll_timeout_ms=o.poll_timeout_ms,
                              consumer=o.consumer)  # fmt: skip


def register(spark: Any) -> None:
    """Make ``spark.read.format("kafkactl")`` available in this Spark session."""
    spark.dataSource.register(KafkactlDataSource)
