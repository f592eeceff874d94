"""Planning a load: its options, the output's layout, and the offset ranges and splits it copies.

The ranges start at the committed offsets (earliest for a partition never loaded) and end at the high
watermark or the offset at `--until`; empty ranges are dropped. The splits, the input partitions the Spark
job reads, are cut as the data source cuts them (`broker.spark.ranges.split_ranges`). A Plan's JSON is the
pending plan of `broker.spark.commit`.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.errors import KafkactlError, UsageError
from broker.spark.errors import DataLossError, SparkLoadError
from broker.spark.ranges import wait_offsets

if TYPE_CHECKING:
    from broker.spark.commit import OutputDir

FORMATS = ("parquet", "json", "csv", "orc")
VALUE_FORMATS = ("raw", "utf8", "json", "avro")
#: columns `--partition-by` takes: the source's own plus two derived from the timestamp (UTC)
PARTITION_COLUMNS = ("topic", "partition", "timestampType", "date", "hour")
STAGING = "staging"  # PATH/_kafkactl/staging/<load id>/: a load's Spark output (see broker.spark.commit)
VERSION = 1  # of the state files, committed.json and pending.json (a Plan's JSON)


@dataclass
class LoadOptions:
    topics: list[str]
    output: Path
    bootstrap: str
    format: str | None = None  # None: the format of earlier loads into output, else parquet
    value_format: str | None = None  # None: as earlier loads, else raw
    partition_by: list[str] | None = None  # None: as earlier loads, else none
    until: int | None = None  # epoch ms; None: up to the high watermark
    fail_on_data_loss: bool = True
    skip_offline: bool = False  # partitions without a leader: skipped with a warning (else the load fails)
    min_partitions: int | None = None
    max_records_per_file: int | None = None
    #: with --value-format avro: the registry holding the topics' `<topic>-value` schemas
    schema_registry: str | None = None
    #: publish per-window counts of the audited messages each committed load holds (broker.audit)
    audit: bool = False
    audit_window_ms: int = 60_000


@dataclass
class Layout:
    """How files in an output dir are written; every load into one dir must agree."""

    format: str = "parquet"
    value_format: str = "raw"
    partition_by: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"format": self.format, "value_format": self.value_format, "partition_by": list(self.partition_by)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Layout:
        return cls(d["format"], d["value_format"], list(d.get("partition_by") or []))


@dataclass
class RangeResult:
    """One planned range (end exclusive) and the rows the load wrote for it."""

    topic: str
    partition: int
    start: int
    end: int
    rows: int | None = None

    @property
    def last(self) -> int:
        return self.end - 1

    @property
    def expected(self) -> int:
        return self.end - self.start

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "start": self.start, "end": self.end,
                "last": self.last, "rows": self.rows, "expected": self.expected}  # fmt: skip


@dataclass
class Plan:
    load_id: str
    layout: Layout
    ranges: list[RangeResult]  # non-empty ranges, sorted by topic, partition
    splits: list[tuple[str, int, int, int]]  # the data source's input partitions, in order
    bootstrap: str
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_records_per_file: int | None = None
    until: int | None = None
    created: int = 0
    warnings: list[str] = field(default_factory=list)
    #: with --value-format avro: the registry, and the reader schema every value is decoded to
    schema_registry: str | None = None
    reader_schema: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION, "id": self.load_id, "created": self.created, "layout": self.layout.to_json(),
            "bootstrap": self.bootstrap, "fail_on_data_loss": self.fail_on_data_loss,
            "min_partitions": self.min_partitions, "max_records_per_file": self.max_records_per_file,
            "until": self.until, "ranges": [[r.topic, r.partition, r.start, r.end] for r in self.ranges],
            "splits": [list(s) for s in self.splits], "staging": f"{STAGING}/{self.load_id}",
            "schema_registry": self.schema_registry, "reader_schema": self.reader_schema,
        }  # fmt: skip

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Plan:
        return cls(
            d["id"], Layout.from_json(d["layout"]), [RangeResult(t, p, s, e) for t, p, s, e in d["ranges"]],
            [tuple(s) for s in d["splits"]], d.get("bootstrap", ""), d.get("fail_on_data_loss", True),
            d.get("min_partitions"), d.get("max_records_per_file"), d.get("until"), d.get("created", 0),
            schema_registry=d.get("schema_registry"), reader_schema=d.get("reader_schema"),
        )  # fmt: skip


def _new_load_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


def resolve_layout(opts: LoadOptions, earlier: Layout | None) -> Layout:
    fmt = opts.format or (earlier.format if earlier else "parquet")
    value_format = opts.value_format or (earlier.value_format if earlier else "raw")
    partition_by = opts.partition_by if opts.partition_by is not None else (earlier.partition_by if earlier else [])
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if value_format not in VALUE_FORMATS:
        raise UsageError(f"--value-format {value_format!r}: expected one of {', '.join(VALUE_FORMATS)}")
    for col in partition_by:
        if col not in PARTITION_COLUMNS:
            raise UsageError(f"--partition-by {col!r}: expected one of {', '.join(PARTITION_COLUMNS)}")
    if len(set(partition_by)) != len(partition_by):
        raise UsageError(f"--partition-by {','.join(partition_by)}: a column named twice")
    layout = Layout(fmt, value_format, list(partition_by))
    if earlier is not None and layout != earlier:
        raise UsageError(
            f"the output holds earlier loads written as --format {earlier.format} --value-format "
            f"{earlier.value_format} --partition-by {','.join(earlier.partition_by) or '(none)'}; "
            "load with the same settings or into another --output"
        )
    return layout


def plan_load(out: OutputDir, opts: LoadOptions, *, admin: Any = None) -> Plan:
    """The ranges of the next load: from the committed offsets (earliest when none) to the high
    watermark or the offset at `opts.until`; empty ranges are dropped."""
    from broker.client.admin import Admin
    from broker.protocol.messages.fetch import EARLIEST, LATEST

    if not opts.topics:
        raise UsageError("name at least one topic")
    layout = resolve_layout(opts, out.layout())
    own = admin is None
    admin = admin or Admin(opts.bootstrap)
    try:
        known = admin.list_topics()
        check_topics(opts.topics, known)
        tps = [(t, p) for t in sorted(set(opts.topics)) for p in range(known[t])]
        offline = admin.leaderless(tps)
        if offline:
            names = ", ".join(f"{t}-{p}" for t, p in offline)
            if not opts.skip_offline:
                raise SparkLoadError(f"no leader for {names} (the brokers holding it are down); nothing was loaded "
                                     "(--skip-offline loads the other partitions)")  # fmt: skip
            skipped = f"skipped {names}: no leader (brokers down); a later load takes them from their committed offsets"
            tps = [tp for tp in tps if tp not in offline]
        # (a leader that cannot be reached, killed and not yet replaced, is waited for within the admin's timeout)
        earliest = wait_offsets(admin, tps, EARLIEST, SparkLoadError)
        latest = wait_offsets(admin, tps, LATEST, SparkLoadError, isolation_level=1)  # committed data: up to the LSO
        at_time = wait_offsets(admin, tps, opts.until, SparkLoadError) if opts.until is not None else {}
    finally:
        if own:
            admin.close()
    committed = out.committed_offsets()
    warnings: list[str] = [skipped] if offline else []
    ranges: list[RangeResult] = []
    for tp in tps:
        low, high = earliest[tp], latest[tp]
        start = committed.get(tp, low)
        if start < low or start > high:
            what = (f"offsets {start}..{low - 1} of {tp[0]}-{tp[1]} were removed by retention before they were loaded"
                    if start < low else
                    f"{tp[0]}-{tp[1]} ends at {high}, before the committed offset {start} (topic deleted and "
                    "recreated?)")  # fmt: skip
            if opts.fail_on_data_loss:
                raise DataLossError(f"data loss: {what} (--no-fail-on-data-loss skips them)")
            warnings.append(f"data loss: {what}; skipped, loading from {low}")
            start = low
        end = high
        if tp in at_time and at_time[tp] >= 0:
            end = min(end, at_time[tp])
        if end > start:
            ranges.append(RangeResult(tp[0], tp[1], start, end))
    registry = reader = None
    if layout.value_format == "avro" and ranges:
        registry, reader = _reader_schema(opts, sorted({r.topic for r in ranges}))
    return Plan(
        _new_load_id(), layout, ranges, _splits(ranges, opts.min_partitions, opts.max_records_per_file),
        opts.bootstrap, opts.fail_on_data_loss, opts.min_partitions, opts.max_records_per_file, opts.until,
        int(time.time() * 1000), warnings, registry, reader,
    )  # fmt: skip


def _reader_schema(opts: LoadOptions, topics: list[str]) -> tuple[str, str]:
    """The registry and the latest schema of the topics' `<topic>-value` subjects, which must agree."""
    from broker.schema_registry.wire import RegistryClient

    if not opts.schema_registry:
        raise UsageError("--value-format avro needs a schema registry (--schema-registry)")
    client = RegistryClient(opts.schema_registry)
    found = {}
    for topic in topics:
        try:
            found[topic] = client.latest(f"{topic}-value")
        except KafkactlError as exc:
            raise SparkLoadError(f"--value-format avro: no schema for {topic} (subject {topic}-value): {exc}") from None
    if len({json.dumps(json.loads(t), sort_keys=True) for t in found.values()}) > 1:
        raise UsageError("--value-format avro: the topics' latest schemas differ; load them one at a time")
    return opts.schema_registry, next(iter(found.values()))


def check_topics(topics: list[str], known: dict[str, int]) -> None:
    """SparkLoadError naming the topics of `topics` that are not in `known` (the cluster's)."""
    missing = sorted({t for t in topics if t not in known})
    if len(missing) == 1:
        raise SparkLoadError(f"unknown topic {missing[0]!r}; nothing was loaded")
    if missing:
        raise SparkLoadError(f"unknown topics {', '.join(map(repr, missing))}; nothing was loaded")


def _splits(ranges: list[RangeResult], min_partitions: int | None, max_records: int | None
            ) -> list[tuple[str, int, int, int]]:  # fmt: skip
    from broker.spark.ranges import OffsetRange, split_ranges

    if not ranges:
        return []
    splits = split_ranges([OffsetRange(r.topic, r.partition, r.start, r.end) for r in ranges],
                          min_partitions, max_records)  # fmt: skip
    return [(s.topic, s.partition, s.start, s.end) for s in splits]
