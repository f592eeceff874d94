"""`kafkactl spark-load`: copy closed offset ranges of topics into files, exactly once.

A load checks that its topics exist, locks PATH and finishes or rolls back an interrupted load
(`broker.spark.commit`), plans the offset ranges from the committed offsets (`broker.spark.plan`), logs
the plan, has Spark read exactly the planned splits into a staging dir (`broker.spark.job`), then moves
the files to their final names and commits the offsets (`broker.spark.commit`, which documents the files
beside the output and each step). Every step is idempotent: a kill -9 anywhere leaves a state the next
run finishes.

With a cluster master (`spark://…`) PATH must be on a file system the driver and every executor see
at the same path (Spark's tasks write the staging dir, the driver moves the files).

The names of those modules that callers and tests reach as `load.<name>` are imported here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.errors import KafkactlError, UsageError
from broker.spark.commit import (
    OutputDir,
    Recovery,
    _failpoint,
    committed_ids,
    count_rows,
    file_name,
    interrupted_state,
    parse_file_name,
    read_state,
)
from broker.spark.errors import DataLossError, SparkLoadError
from broker.spark.job import Progress, build_frame, run_job, source_options, spark_error_line, spark_session
from broker.spark.plan import (
    FORMATS,
    PARTITION_COLUMNS,
    VALUE_FORMATS,
    Layout,
    LoadOptions,
    Plan,
    RangeResult,
    check_topics,
    plan_load,
    resolve_layout,
)

Notify = Callable[[str], None]


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


def _load(spark: Any, out: OutputDir, plan: Plan, progress: Progress | None) -> list[RangeResult]:
    """Steps 2–7 (of the protocol in `broker.spark.commit`) of one planned load."""
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
    "committed_ids", "interrupted_state", "resolve_layout", "spark_error_line",
]  # fmt: skip
