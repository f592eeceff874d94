"""`kafkactl spark-load`: copy closed offset ranges of topics into files, exactly once.

Files beside the output (PATH)::

    PATH/<topic>+<partition>+<start>+<last>.<ext>          one file per split (an offset range)
    PATH/<col>=<v>/.../<topic>+<partition>+<start>+<last>.<ext>   the same with --partition-by
    PATH/_kafkactl/committed.json    {"offsets": {topic: {partition: next offset}}, "layout", "loads": history}
    PATH/_kafkactl/pending.json      the plan of the load in progress (id, ranges, splits, layout)
    PATH/_kafkactl/staging/<id>/     Spark's output of that load (+ _SUCCESS, + _kafkactl_manifest.json)
    PATH/_kafkactl/spark.log         the JVM's stderr (Spark's log)
    PATH/_kafkactl/lock              flock: one load per PATH at a time

`start` and `last` in a file name are the first and the last offset it holds (a closed range; the
data source's OffsetRange.end is exclusive: last = end - 1). A range split into several input
partitions (`max_records_per_file`, `min_partitions`) gives one file per split, each named by its
own sub-range. Spark reads `PATH` (directories starting with `_` are hidden from it) as one table.
Spark and Hadoop also hide every file whose name starts with `.` or `_`, and both are legal first
characters of a topic name: a topic's leading `.` is written `%2E` and a leading `_` `%5F` (percent
encoding; `%` never occurs in a topic name, so `parse_file_name` undoes it): topic `..x` is
`%2E.x+0+0+2.json`, `__x` is `%5F_x+0+0+2.json`.

The commit protocol (every step idempotent; a kill -9 anywhere leaves a state the next run finishes):

1. check that every topic exists (else fail, having created nothing in PATH); lock PATH; recover
   (below); plan: per topic-partition start = committed next offset (earliest for a partition never
   loaded), end = the high watermark or the offset at `--until`; empty ranges dropped.
2. write pending.json atomically (tmp, fsync, rename, fsync dir) — before Spark reads anything.
3. Spark reads exactly the planned splits and writes staging/<id>/ (Spark's _SUCCESS marks its commit).
   Input partition i of the read is split i; each row is checked against split i's range in the job.
4. write staging/<id>/_kafkactl_manifest.json: staged file -> final name (from the Spark task id).
5. move each staged file to its final name (hard link + unlink: never overwrites), fsync the dirs.
6. count the rows of the final files, write committed.json atomically (offsets + history entry).
7. delete pending.json, then staging/<id>/.

Recovery when pending.json exists: its id already in committed.json's history → only step 7; the
staging has _SUCCESS → steps 4–7 (roll forward); otherwise → delete staging/<id>/ and pending.json
(roll back: no file of that load reached PATH, as moves start only after _SUCCESS). Staging dirs no
pending.json names are leftovers and are removed.

Value formats: `raw` keeps key and value as binary; `utf8` casts key, value and header values to
strings; `json` does the same and parses the value too, with a schema Spark infers from a
sample (the first `JSON_SAMPLE` non-null values of the load) plus a `_corrupt_record` string field
that keeps the text of a value that does not fit the schema — no value is ever dropped. CSV holds no
binary or nested columns: binary key/value become base64 text, headers and parsed JSON values JSON
text. JSON and CSV timestamps are written in UTC.

With a cluster master (`spark://…`) PATH must be on a file system the driver and every executor see
at the same path (Spark's tasks write the staging dir, the driver moves the files).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.errors import KafkactlError, UsageError
from broker.home import home_dir
from broker.log.checkpoint import fsync_dir, write_atomically
from broker.spark import arrow_writer

FORMATS = ("parquet", "json", "csv", "orc")
VALUE_FORMATS = ("raw", "utf8", "json", "avro")
#: columns `--partition-by` takes: the source's own plus two derived from the timestamp (UTC)
PARTITION_COLUMNS = ("topic", "partition", "timestampType", "date", "hour")
STATE_DIR = "_kafkactl"
COMMITTED = "committed.json"
PENDING = "pending.json"
STAGING = "staging"
MANIFEST = "_kafkactl_manifest.json"
SUCCESS = "_SUCCESS"
SPARK_LOG = "spark.log"
JSON_SAMPLE = 1000
HISTORY = 1000  # load history entries kept in committed.json
VERSION = 1
FAILPOINT_ENV = "KAFKACTL_SPARK_LOAD_FAILPOINT"  # tests: the process kills itself (SIGKILL) at this step

_PART = re.compile(r"^part-(\d+)-.*?[.-]c(\d{3})(\..+)?$")

Notify = Callable[[str], None]
#: kafkactl.render.progress's shape: (description, total) -> a context manager yielding advance(n=1)
Progress = Callable[[str, int], contextlib.AbstractContextManager[Callable[[int], None]]]


class SparkLoadError(KafkactlError):
    """A load that cannot go on (the message is the one line the user sees)."""


class DataLossError(SparkLoadError):
    """Offsets to load are gone from the log (retention), with failOnDataLoss on."""


# --- options, plans and results -----------------------------------------------------------------


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


@dataclass
class Recovery:
    """What the start of a load did about an earlier, interrupted one."""

    action: str  # "rolled-forward" | "rolled-back" | "cleaned-up"
    load_id: str
    ranges: list[RangeResult] = field(default_factory=list)

    def describe(self) -> str:
        if self.action == "rolled-back":
            return f"rolled back the interrupted load {self.load_id} (its Spark job had not finished)"
        rows = sum(r.rows or 0 for r in self.ranges)
        if self.action == "rolled-forward":
            return (f"finished the interrupted load {self.load_id}: {len(self.ranges)} range(s), {rows} row(s) "
                    "committed")  # fmt: skip
        return f"cleaned up after the load {self.load_id} (it had committed)"


@dataclass
class LoadResult:
    load_id: str | None
    output: Path
    layout: Layout
    ranges: list[RangeResult]
    splits: int = 0
    files: int = 0
    seconds: float = 0.0
    recovery: Recovery | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def noop(self) -> bool:
        return self.load_id is None

    @property
    def rows(self) -> int:
        return sum(r.rows or 0 for r in self.ranges)

    @property
    def mismatches(self) -> list[RangeResult]:
        return [r for r in self.ranges if r.rows != r.expected]

    def to_json(self) -> dict[str, Any]:
        return {
            "load_id": self.load_id, "output": str(self.output), "format": self.layout.format,
            "noop": self.noop, "ranges": [r.to_json() for r in self.ranges], "rows": self.rows,
            "expected": sum(r.expected for r in self.ranges), "splits": self.splits, "files": self.files,
            "seconds": round(self.seconds, 3), "warnings": self.warnings,
            "recovery": None if self.recovery is None else {
                "action": self.recovery.action, "load_id": self.recovery.load_id,
                "ranges": [r.to_json() for r in self.recovery.ranges]},
        }  # fmt: skip


# --- the state beside the output ------------------------------------------------------------------


def _failpoint(name: str) -> None:
    if os.environ.get(FAILPOINT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError("not an object")
        return doc
    except ValueError as exc:
        raise SparkLoadError(f"{path}: not a kafkactl spark-load state file ({exc})") from None


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    write_atomically(path, (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        return
    fsync_dir(path.parent)


def _rmtree(path: Path, *, must: bool = True) -> None:
    """Remove a directory tree; a few tries, as the JVM of a killed load may still be writing into it."""
    for attempt in range(5):
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            return
        time.sleep(0.2 * (attempt + 1))
    if must:
        shutil.rmtree(path)  # the real error, once more


def _move(src: Path, dst: Path) -> None:
    """Move `src` to `dst` without ever replacing a file at `dst`; rerunnable after a crash at any point."""
    try:
        os.link(src, dst)
    except FileExistsError:
        if not src.exists():
            return  # moved already
        if not os.path.samefile(src, dst):
            raise SparkLoadError(
                f"{dst} exists already and holds other data; remove it or load into another PATH"
            ) from None
        # linked before a crash: only the unlink was left to do
    except FileNotFoundError:
        if dst.exists():
            return  # moved already
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
            raise
        if dst.exists():  # a file system without hard links: rename, still never over an existing file
            if src.exists():
                raise SparkLoadError(f"{dst} exists already; remove it or load into another PATH") from None
            return
        os.rename(src, dst)
        return
    os.unlink(src)


class OutputDir:
    """PATH and its `_kafkactl` state: committed offsets, the pending plan, staging, the lock."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path).absolute()
        self.state = self.path / STATE_DIR
        self._lock_fd: int | None = None

    @property
    def committed_path(self) -> Path:
        return self.state / COMMITTED

    @property
    def pending_path(self) -> Path:
        return self.state / PENDING

    @property
    def log_path(self) -> Path:
        return self.state / SPARK_LOG

    def staging(self, load_id: str) -> Path:
        return self.state / STAGING / load_id

    def prepare(self) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise UsageError(f"--output {self.path}: exists and is not a directory")
        try:
            (self.state / STAGING).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SparkLoadError(f"cannot create {self.state}: {exc.strerror}") from None

    @contextlib.contextmanager
    def locked(self) -> Iterator[OutputDir]:
        """Hold PATH/_kafkactl/lock (flock, released by the kernel if the process dies)."""
        self.prepare()
        fd = os.open(self.state / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise SparkLoadError(f"another spark-load is running on {self.path}") from None
            self._lock_fd = fd
            yield self
        finally:
            self._lock_fd = None
            os.close(fd)

    # committed.json -----------------------------------------------------------------------------

    def committed(self) -> dict[str, Any]:
        doc = _read_json(self.committed_path)
        if doc is None:
            return {"version": VERSION, "offsets": {}, "layout": None, "loads": []}
        if doc.get("version") != VERSION:
            raise SparkLoadError(f"{self.committed_path}: unknown version {doc.get('version')!r}")
        return doc

    def committed_offsets(self) -> dict[tuple[str, int], int]:
        return {(t, int(p)): o for t, ps in self.committed()["offsets"].items() for p, o in ps.items()}

    def layout(self) -> Layout | None:
        d = self.committed().get("layout")
        return Layout.from_json(d) if d else None

    def _commit(self, plan: Plan, ranges: list[RangeResult], files: int) -> None:
        doc = self.committed()
        offsets = doc["offsets"]
        for r in ranges:
            offsets.setdefault(r.topic, {})[str(r.partition)] = r.end
        doc["offsets"] = {t: dict(sorted(ps.items(), key=lambda kv: int(kv[0]))) for t, ps in sorted(offsets.items())}
        doc["layout"] = plan.layout.to_json()
        doc["loads"] = (doc.get("loads") or [])[-(HISTORY - 1):] + [{
            "id": plan.load_id, "planned": plan.created, "committed": int(time.time() * 1000), "files": files,
            "until": plan.until, "ranges": [[r.topic, r.partition, r.start, r.end, r.rows] for r in ranges],
        }]  # fmt: skip
        _write_json(self.committed_path, doc)

    def committed_load_ids(self) -> set[str]:
        return {load["id"] for load in self.committed().get("loads") or []}

    # pending.json and recovery ------------------------------------------------------------------

    def pending(self) -> Plan | None:
        doc = _read_json(self.pending_path)
        if doc is None:
            return None
        try:
            return Plan.from_json(doc)
        except (KeyError, TypeError, ValueError) as exc:
            raise SparkLoadError(f"{self.pending_path}: malformed plan ({exc})") from None

    def write_pending(self, plan: Plan) -> None:
        _write_json(self.pending_path, plan.to_json())

    def recover(self) -> Recovery | None:
        """Finish or undo an interrupted load; remove staging leftovers. Call with the lock held."""
        plan = self.pending()
        out = None
        if plan is not None:
            staging = self.staging(plan.load_id)
            if plan.load_id in self.committed_load_ids():
                out = Recovery("cleaned-up", plan.load_id)
            elif (staging / SUCCESS).exists():
                out = Recovery("rolled-forward", plan.load_id, self.finish(plan))
            else:
                _rmtree(staging)
                out = Recovery("rolled-back", plan.load_id)
            self._cleanup(plan.load_id)
        for leftover in sorted((self.state / STAGING).iterdir()):
            _rmtree(leftover, must=False)  # a rolled-back load's late writes, or a crash between steps 7a and 7b
        return out

    def _cleanup(self, load_id: str) -> None:
        _unlink(self.pending_path)
        _rmtree(self.staging(load_id))

    def abandon(self, plan: Plan) -> None:
        """Undo a load whose Spark job failed (the same as a roll back at the next start)."""
        if plan.load_id in self.committed_load_ids():
            return
        _rmtree(self.staging(plan.load_id))
        _unlink(self.pending_path)

    # finishing a load ---------------------------------------------------------------------------

    def manifest(self, plan: Plan) -> list[dict[str, Any]]:
        """Staged file -> final name, by the Spark task (= split) that wrote it; written once, then reused."""
        staging = self.staging(plan.load_id)
        doc = _read_json(staging / MANIFEST)
        if doc is not None:
            return doc["files"]
        files, seen = [], set()
        for dirpath, dirnames, filenames in os.walk(staging):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(("_", ".")))
            rel_dir = Path(dirpath).relative_to(staging)
            for name in sorted(filenames):
                if name.startswith(("_", ".")):
                    continue  # _SUCCESS, Hadoop's .crc files
                m = _PART.match(name)
                if not m:
                    raise SparkLoadError(f"unexpected file in the staging of load {plan.load_id}: {rel_dir / name}")
                split = int(m.group(1))
                if split >= len(plan.splits):
                    raise SparkLoadError(f"staged file {rel_dir / name} of load {plan.load_id} has no split {split}")
                t, p, s, e = plan.splits[split]
                final = rel_dir / file_name(t, p, s, e - 1, plan.layout.format)
                if final in seen:
                    raise SparkLoadError(f"load {plan.load_id}: two staged files for {final}")
                seen.add(final)
                files.append({"staged": str(rel_dir / name), "final": str(final), "split": split})
        _write_json(staging / MANIFEST, {"id": plan.load_id, "files": files})
        return files

    def finish(self, plan: Plan) -> list[RangeResult]:
        """Steps 4–7 after Spark's _SUCCESS: move the files into place, count rows, commit, clean up."""
        staging = self.staging(plan.load_id)
        files = self.manifest(plan)
        _failpoint("manifest-written")
        dirs = set()
        for i, f in enumerate(files):
            dst = self.path / f["final"]
            if dst.parent not in dirs:
                dst.parent.mkdir(parents=True, exist_ok=True)
                dirs.add(dst.parent)
            _move(staging / f["staged"], dst)
            if i == 0:
                _failpoint("moved-one")
        for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
            fsync_dir(d)
        for d in {d.parent for d in dirs if d != self.path}:
            fsync_dir(d)
        _failpoint("moved")
        rows_by_split = [0] * len(plan.splits)
        for f in files:
            rows_by_split[f["split"]] += count_rows(self.path / f["final"], plan.layout.format)
        ranges = [RangeResult(r.topic, r.partition, r.start, r.end, 0) for r in plan.ranges]
        index = {(r.topic, r.partition): r for r in ranges}
        for (t, p, _s, _e), rows in zip(plan.splits, rows_by_split, strict=True):
            index[(t, p)].rows += rows
        self._commit(plan, ranges, len(files))
        _failpoint("committed")
        self._cleanup(plan.load_id)
        return ranges


#: a file name's leading characters Spark and Hadoop treat as hidden, and how a topic name's are written
_HIDDEN_PREFIX = {".": "%2E", "_": "%5F"}


def file_name(topic: str, partition: int, first: int, last: int, ext: str) -> str:
    """`<topic>+<partition>+<first>+<last>.<ext>`, a topic's leading `.` or `_` percent-encoded (not hidden)."""
    escaped = _HIDDEN_PREFIX.get(topic[:1], topic[:1]) + topic[1:]
    return f"{escaped}+{partition}+{first}+{last}.{ext}"


def parse_file_name(name: str) -> tuple[str, int, int, int]:
    """(topic, partition, first, last) of a data file's name (`file_name`'s inverse, without the extension)."""
    stem = name.rsplit("/", 1)[-1]
    topic, partition, first, rest = stem.split("+", 3)
    last = rest.split(".", 1)[0]
    for char, code in _HIDDEN_PREFIX.items():
        if topic.startswith(code):
            topic = char + topic[len(code) :]
    return topic, int(partition), int(first), int(last)


def count_rows(path: Path, fmt: str) -> int:
    """Rows of one output file: from the footer for parquet and orc, by reading json lines and csv."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    if fmt == "orc":
        import pyarrow.orc as orc

        return orc.ORCFile(path).nrows
    if fmt == "json":
        with open(path, "rb") as f:
            return sum(1 for line in f if line.strip())
    if fmt == "csv":
        import csv

        with open(path, newline="", encoding="utf-8", errors="surrogateescape") as f:
            return max(0, sum(1 for _ in csv.reader(f)) - 1)  # minus the header line
    raise ValueError(fmt)


def read_state(output: Path | str) -> dict[str, Any]:
    """The committed state of an output dir (for status displays and tests)."""
    return OutputDir(output).committed()


# --- planning -------------------------------------------------------------------------------------


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
        earliest = admin.list_offsets(tps, EARLIEST)
        latest = admin.list_offsets(tps, LATEST)
        at_time = admin.list_offsets(tps, opts.until) if opts.until is not None else {}
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
    from broker.schema.wire import RegistryClient

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
    from broker.spark.source import OffsetRange, split_ranges

    if not ranges:
        return []
    splits = split_ranges([OffsetRange(r.topic, r.partition, r.start, r.end) for r in ranges],
                          min_partitions, max_records)  # fmt: skip
    return [(s.topic, s.partition, s.start, s.end) for s in splits]


# --- the Spark job --------------------------------------------------------------------------------


def _offsets_json(plan: Plan, which: str) -> str:
    out: dict[str, dict[str, int]] = {}
    for r in plan.ranges:
        out.setdefault(r.topic, {})[str(r.partition)] = r.start if which == "start" else r.end
    return json.dumps(out, separators=(",", ":"))


def _assign_json(plan: Plan) -> str:
    out: dict[str, list[int]] = {}
    for r in plan.ranges:
        out.setdefault(r.topic, []).append(r.partition)
    return json.dumps(out, separators=(",", ":"))


def source_options(plan: Plan) -> dict[str, str]:
    """The `kafkactl` data source's options that read exactly the plan's splits, in order."""
    opts = {
        "bootstrap.servers": plan.bootstrap,
        "assign": _assign_json(plan),
        "startingOffsets": _offsets_json(plan, "start"),
        "endingOffsets": _offsets_json(plan, "end"),
        "failOnDataLoss": "true" if plan.fail_on_data_loss else "false",
    }
    if plan.min_partitions:
        opts["minPartitions"] = str(plan.min_partitions)
    if plan.max_records_per_file:
        opts["maxRecordsPerPartition"] = str(plan.max_records_per_file)
    return opts


def build_frame(spark: Any, plan: Plan) -> Any:
    """The DataFrame a load writes: the plan's rows, converted to the layout, checked against their split."""
    from pyspark.sql import functions as F

    reader = spark.read.format("kafkactl")
    for k, v in source_options(plan).items():
        reader = reader.option(k, v)
    df = reader.load()
    # input partition i must hold split i's offsets only: the file names depend on it
    idx = F.spark_partition_id() + 1
    t_arr = F.array(*[F.lit(s[0]) for s in plan.splits])
    p_arr = F.array(*[F.lit(s[1]).cast("int") for s in plan.splits])
    s_arr = F.array(*[F.lit(s[2]).cast("long") for s in plan.splits])
    e_arr = F.array(*[F.lit(s[3]).cast("long") for s in plan.splits])
    inside = (
        (F.col("topic") == F.element_at(t_arr, idx))
        & (F.col("partition") == F.element_at(p_arr, idx))
        & (F.col("offset") >= F.element_at(s_arr, idx))
        & (F.col("offset") < F.element_at(e_arr, idx))
    )
    offset = F.when(inside, F.col("offset")).otherwise(F.raise_error(F.concat(
        F.lit("kafkactl spark-load: row "), F.col("topic"), F.lit("-"), F.col("partition").cast("string"),
        F.lit("@"), F.col("offset").cast("string"), F.lit(" read by input partition "),
        F.spark_partition_id().cast("string"), F.lit(", outside its planned range"))))  # fmt: skip

    layout = plan.layout
    key, value, headers = F.col("key"), F.col("value"), F.col("headers")
    if layout.value_format in ("utf8", "json", "avro"):
        key = key.cast("string")
        if layout.value_format != "avro":
            value = value.cast("string")
        headers = F.transform(
            "headers", lambda h: F.struct(h["key"].alias("key"), h["value"].cast("string").alias("value"))
        )
    if layout.value_format == "json":
        value = F.from_json(value, _json_schema(spark, df), {"mode": "PERMISSIVE"})
    if layout.value_format == "avro":
        from broker.spark import avro

        value = avro.value_column(value, plan.schema_registry, plan.reader_schema)
    if layout.format == "csv":  # flat columns only
        if layout.value_format == "raw":
            key, value = F.base64(key), F.base64(value)
        elif layout.value_format in ("json", "avro"):
            value = F.to_json(value)
        headers = F.to_json(headers)
    cols = [key.alias("key"), value.alias("value"), F.col("topic"), F.col("partition"), offset.alias("offset"),
            F.col("timestamp"), F.col("timestampType"), headers.alias("headers")]  # fmt: skip
    if "date" in layout.partition_by:
        cols.append(F.date_format(F.col("timestamp"), "yyyy-MM-dd").alias("date"))
    if "hour" in layout.partition_by:
        cols.append(F.date_format(F.col("timestamp"), "HH").alias("hour"))
    return df.select(*cols)


def _json_schema(spark: Any, df: Any) -> Any:
    """A struct schema for JSON values, inferred by Spark from a sample, plus `_corrupt_record`."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    sample = [r[0] for r in df.select(F.col("value").cast("string")).where(F.col("value").isNotNull())
              .limit(JSON_SAMPLE).collect()]  # fmt: skip
    fields = []
    if sample:
        inferred = spark.read.json(spark.sparkContext.parallelize(sample, 1)).schema
        fields = [f for f in inferred.fields if f.name != "_corrupt_record"]
        if not fields:
            raise SparkLoadError("--value-format json: the sampled values are not JSON objects "
                                 "(use --value-format utf8)")  # fmt: skip
    return StructType([*fields, StructField("_corrupt_record", StringType(), True)])


def write_frame(df: Any, plan: Plan, staging: Path) -> None:
    layout = plan.layout
    writer = df.write.format(layout.format).mode("errorifexists").option("maxRecordsPerFile", 0)
    if layout.format in ("json", "csv"):
        writer = writer.option("compression", "none").option("timeZone", "UTC")
        writer = writer.option("timestampFormat", "yyyy-MM-dd'T'HH:mm:ss.SSSXXX")
    if layout.format == "csv":
        writer = writer.option("header", "true").option("escape", '"')
    if layout.partition_by:
        writer = writer.partitionBy(*layout.partition_by)
    writer.save(staging.as_uri())


class _ProgressPoller:
    """Polls Spark's status tracker for the completed tasks of one job group; `advance(n)` with each increase."""

    def __init__(self, spark: Any, group: str, advance: Callable[[int], None], interval: float = 0.25) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.group, self.advance, self.interval = group, advance, interval
        self.reported = 0
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="spark-load-progress", daemon=True)

    def completed(self) -> int:
        done = 0
        for job_id in self.tracker.getJobIdsForGroup(self.group):
            job = self.tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job else ():
                stage = self.tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
        return done

    def _report(self, done: int) -> None:
        if done > self.reported:
            self.advance(done - self.reported)
            self.reported = done

    def _run(self) -> None:
        while not self.stop_event.wait(self.interval):
            try:
                self._report(self.completed())
            except Exception:  # the JVM going away mid-poll: progress is best effort
                return

    def __enter__(self) -> _ProgressPoller:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join(5)


def spark_error_line(exc: BaseException) -> str:
    """One line for a failed Spark job: the innermost Python error when there is one, without Spark's
    error class and SQLSTATE decorations."""
    text = str(exc).split("JVM stacktrace:")[0]
    found = None
    for line in text.splitlines():
        m = re.match(r"^\s*(?:[\w.]+\.)?(\w*(?:Error|Exception)): (.+)$", line)
        if m:
            found = (m.group(1), m.group(2).strip())
    if found:
        name, line = found
        if not name.endswith("Error") or name in ("KafkactlError", "SparkLoadError", "DataLossError", "SourceError",
                                                   "CorruptDataError", "AdminError", "ConsumeError"):  # fmt: skip
            name = ""
    else:
        name, line = "", next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    line = re.sub(r"^\[[A-Z_.]+\]\s*", "", line)
    line = re.sub(r"\s*SQLSTATE: \w+\.?$", "", line).strip()
    return f"{name}: {line}" if name else line


def run_job(spark: Any, out: OutputDir, plan: Plan, progress: Progress | None = None) -> None:
    """Step 3: read the plan's splits and write them to the staging dir (Spark writes _SUCCESS last)."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    staging = out.staging(plan.load_id)
    if (staging / SUCCESS).exists():
        return
    _rmtree(staging)  # a previous attempt of this very plan in this process
    sc = spark.sparkContext
    conf_key = "spark.sql.parquet.outputTimestampType"
    before = spark.conf.get(conf_key, None)
    spark.conf.set(conf_key, "TIMESTAMP_MICROS")
    fast = arrow_writer.applies(plan.layout)
    try:
        if not fast:
            sc.setJobGroup(f"{plan.load_id}-sample", f"kafkactl spark-load {plan.load_id}: JSON schema sample")
            df = build_frame(spark, plan)
        sc.setJobGroup(plan.load_id, f"kafkactl spark-load {plan.load_id}")
        bar = progress or (lambda description, total: contextlib.nullcontext(lambda n=1: None))
        rows = sum(r.expected for r in plan.ranges)
        with bar(f"loading {rows} offset(s) in {len(plan.splits)} split(s)", len(plan.splits)) as advance:
            with _ProgressPoller(spark, plan.load_id, advance) as poller:
                if fast:  # Parquet of raw values: each task reads and writes its split with Arrow alone
                    arrow_writer.write_splits(spark, plan, staging)
                else:
                    write_frame(df, plan, staging)
            poller._report(len(plan.splits))
    except (PySparkException, Py4JError) as exc:
        raise SparkLoadError(f"the Spark job failed: {spark_error_line(exc)}") from exc
    finally:
        with contextlib.suppress(Exception):
            sc.setLocalProperty("spark.jobGroup.id", None)
            if before is None:
                spark.conf.unset(conf_key)
            else:
                spark.conf.set(conf_key, before)
    if not (staging / SUCCESS).exists():
        raise SparkLoadError(f"the Spark job of load {plan.load_id} ended without writing {staging / SUCCESS}")


# --- a Spark session for the command line -------------------------------------------------------


@contextlib.contextmanager
def spark_session(master: str = "local[*]", log_path: Path | None = None,
                  conf: dict[str, str] | None = None) -> Iterator[Any]:  # fmt: skip
    """A SparkSession with the `kafkactl` source registered; the JVM's stderr goes to `log_path`; `conf`: Spark
    settings (spark-submit's --conf), over kafkactl's own."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkLoadError("spark-load needs pyspark and pyarrow: pip install 'kafkactl[spark]'") from None
    from broker.spark.source import register

    shadow = _local_spark_home(master)
    saved = None
    if log_path is not None:  # the JVM inherits fd 2 while it starts: its log goes to the file, for good
        log_path.parent.mkdir(parents=True, exist_ok=True)
        saved = os.dup(2)
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        sys.stderr.flush()
        os.dup2(fd, 2)
        os.close(fd)
    try:
        builder = (SparkSession.builder.master(master).appName("kafkactl spark-load")
                   .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.session.timeZone", "UTC"))  # fmt: skip
        for key, value in (conf or {}).items():
            builder = builder.config(key, value)
        if shadow is not None:  # read once, by the JVM as it starts
            os.environ["SPARK_HOME"] = str(shadow)
        try:
            spark = builder.getOrCreate()
        except Exception as exc:
            raise SparkLoadError(f"cannot start Spark (master {master}): {spark_error_line(exc)}"
                                 + (f"; see {log_path}" if log_path else "")) from None  # fmt: skip
    finally:
        if shadow is not None:
            os.environ.pop("SPARK_HOME", None)
        if saved is not None:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
    try:
        spark.sparkContext.setLogLevel("WARN")
        register(spark)
        yield spark
    finally:
        spark.stop()


def _local_spark_home(master: str) -> Path | None:
    """A SPARK_HOME of links to pip's pyspark minus its python/ directory, for a local master; else None.

    Spark puts $SPARK_HOME/python/lib/pyspark.zip first on every Python worker's path, and Python
    compiles what it imports from a zip anew in every process: some 3 s per worker start, and a Python
    data source read starts several kinds of worker (lookup, create, plan, read). Without the zip the
    workers, which run this same Python, import the installed, byte-compiled pyspark. Only for local
    masters: YARN ships pyspark.zip to its executors from SPARK_HOME. Made once per pyspark install,
    under $KAFKACTL_HOME/spark-home/, and kept.
    """
    same_python = os.environ.get("PYSPARK_PYTHON") == sys.executable
    if not master.startswith("local") or "SPARK_HOME" in os.environ or not same_python:
        return None
    import pyspark

    home = Path(pyspark.__file__).parent
    if not (home / "python" / "lib" / "pyspark.zip").is_file() or not (home / "bin" / "spark-submit").is_file():
        return None
    key = hashlib.sha256(f"{home}\0{pyspark.__version__}".encode()).hexdigest()[:16]
    shadow = home_dir() / "spark-home" / f"{pyspark.__version__}-{key}"
    if shadow.is_dir():
        return shadow
    try:
        shadow.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=".building-", dir=shadow.parent))
    except OSError:  # nowhere to keep it: Spark's own home, slower
        return None
    for entry in home.iterdir():
        if entry.name != "python":
            (building / entry.name).symlink_to(entry)
    try:
        building.rename(shadow)
    except OSError:  # another load made it first
        shutil.rmtree(building, ignore_errors=True)
    return shadow if shadow.is_dir() else None


# --- the whole load -------------------------------------------------------------------------------


def run(opts: LoadOptions, *, spark: Any = None, master: str = "local[*]", notify: Notify | None = None,
        progress: Progress | None = None, conf: dict[str, str] | None = None) -> LoadResult:  # fmt: skip
    """Recover, plan, read and write with Spark, commit. `spark`: a session to use (else one is started
    for the load, with `conf`, and stopped after it, only if there is anything to load)."""
    from broker.client.admin import Admin

    say = notify or (lambda message: None)
    began = time.monotonic()
    out = OutputDir(opts.output)
    if not opts.topics:
        raise UsageError("name at least one topic")
    with Admin(opts.bootstrap) as admin:  # before PATH/_kafkactl is made: a load that cannot be leaves no trace
        check_topics(opts.topics, admin.list_topics())
    with out.locked():
        recovery = out.recover()
        if recovery is not None:
            say(recovery.describe())
            if recovery.action == "rolled-forward":
                _audit(opts, recovery.ranges, say)
        plan = plan_load(out, opts)
        for w in plan.warnings:
            say(f"warning: {w}")
        if not plan.ranges:
            return LoadResult(None, out.path, plan.layout, [], recovery=recovery, warnings=plan.warnings,
                              seconds=time.monotonic() - began)  # fmt: skip
        if spark is not None:
            ranges = _load(spark, out, plan, progress)
        else:  # started before the plan is logged: a Spark that cannot start leaves nothing to roll back
            with spark_session(master, out.log_path, conf) as session:
                ranges = _load(session, out, plan, progress)
        _audit(opts, ranges, say)
        return LoadResult(plan.load_id, out.path, plan.layout, ranges, len(plan.splits), _files_of(out, plan.load_id),
                          time.monotonic() - began, recovery, plan.warnings)  # fmt: skip


def _audit(opts: LoadOptions, ranges: list[RangeResult], say: Notify) -> None:
    """With `opts.audit`: publish the loaded tier's counts of the committed ranges. Once committed, a load
    stays committed: a failure here is a warning (the audit then shows the window partly loaded)."""
    if not opts.audit or not ranges:
        return
    from broker.audit.scan import count_and_publish

    try:
        n = count_and_publish(opts.bootstrap, "loaded", [(r.topic, r.partition, r.start, r.end) for r in ranges],
                              opts.audit_window_ms, client="kafkactl-spark-load")  # fmt: skip
    except KafkactlError as exc:
        say(f"warning: the load committed, but its audit counts were not published: {exc}")
        return
    say(f"audit: published the loaded counts of {n} audited message(s)")


def committed_ids(path: Path | str) -> set[str]:
    """The ids of the loads committed in PATH (none when it holds no state yet)."""
    out = OutputDir(path)
    return out.committed_load_ids() if out.committed_path.exists() else set()


def interrupted_state(path: Path | str, committed_before: set[str]) -> str:
    """What an interrupted `run` left in PATH, in words: committed, to be finished or rolled back by the next
    run, or rolled back already (`committed_before`: the committed load ids when the run began)."""
    out = OutputDir(path)
    try:
        plan = out.pending()
    except SparkLoadError:
        plan = None
    if plan is not None:
        if plan.load_id in out.committed_load_ids():
            return f"load {plan.load_id} had committed; the next run only cleans up after it"
        if (out.staging(plan.load_id) / SUCCESS).exists():
            return f"load {plan.load_id} wrote its files but did not commit them: the next run finishes it"
        return f"load {plan.load_id} did not finish: the next run rolls it back (none of its files is in {out.path})"
    new = sorted(committed_ids(path) - committed_before)
    if new:
        return f"load {new[-1]} had committed before the interruption"
    return f"nothing was loaded: the interrupted load was rolled back (none of its files is in {out.path})"


def _load(spark: Any, out: OutputDir, plan: Plan, progress: Progress | None) -> list[RangeResult]:
    """Steps 2–7 of one planned load."""
    out.write_pending(plan)
    _failpoint("pending-written")
    _execute(spark, out, plan, progress)
    _failpoint("spark-done")
    return out.finish(plan)


def _files_of(out: OutputDir, load_id: str) -> int:
    for load in reversed(out.committed().get("loads") or []):
        if load["id"] == load_id:
            return load.get("files", 0)
    return 0


def _execute(spark: Any, out: OutputDir, plan: Plan, progress: Progress | None) -> None:
    try:
        run_job(spark, out, plan, progress)
    except BaseException:
        with contextlib.suppress(Exception):  # if this fails too, the next start rolls the load back
            out.abandon(plan)
        raise


__all__ = [
    "FORMATS", "VALUE_FORMATS", "PARTITION_COLUMNS", "LoadOptions", "Layout", "Plan", "RangeResult", "Recovery",
    "LoadResult", "OutputDir", "SparkLoadError", "DataLossError", "plan_load", "run_job", "run", "spark_session",
    "count_rows", "read_state", "source_options", "build_frame", "file_name", "parse_file_name", "check_topics",
    "committed_ids", "interrupted_state",
]  # fmt: skip
