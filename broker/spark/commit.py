"""The state beside a load's output and the commit protocol that makes a load exactly once.

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
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.errors import UsageError
from broker.log.checkpoint import fsync_dir, write_atomically
from broker.spark.errors import SparkLoadError
from broker.spark.plan import STAGING, VERSION, Layout, Plan, RangeResult

STATE_DIR = "_kafkactl"
COMMITTED = "committed.json"
PENDING = "pending.json"
MANIFEST = "_kafkactl_manifest.json"
SUCCESS = "_SUCCESS"
SPARK_LOG = "spark.log"
HISTORY = 1000  # load history entries kept in committed.json
FAILPOINT_ENV = "KAFKACTL_SPARK_LOAD_FAILPOINT"  # tests: the process kills itself (SIGKILL) at this step

_PART = re.compile(r"^part-(\d+)-.*?[.-]c(\d{3})(\..+)?$")


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


def remove_tree(path: Path, *, must: bool = True) -> None:
    """Remove a directory tree; a few tries, as the JVM of a killed load may still be writing into it."""
    for attempt in range(5):
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            return
        time.sleep(0.2 * (attempt + 1))
    if must:
        shutil.rmtree(path)  # the real error, once more


def move_file(src: Path, dst: Path) -> None:
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
                remove_tree(staging)
                out = Recovery("rolled-back", plan.load_id)
            self._cleanup(plan.load_id)
        for leftover in sorted((self.state / STAGING).iterdir()):
            remove_tree(leftover, must=False)  # a rolled-back load's late writes, or a crash between steps 7a and 7b
        return out

    def _cleanup(self, load_id: str) -> None:
        _unlink(self.pending_path)
        remove_tree(self.staging(load_id))

    def abandon(self, plan: Plan) -> None:
        """Undo a load whose Spark job failed (the same as a roll back at the next start)."""
        if plan.load_id in self.committed_load_ids():
            return
        remove_tree(self.staging(plan.load_id))
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
            move_file(staging / f["staged"], dst)
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
