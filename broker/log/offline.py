"""Offline recovery of a partition dir or a whole log dir (`kafkactl recover`).

It refuses a log dir a running broker holds (`manager.is_locked`), plans every partition with
`broker.log.recovery`, and on execution also rewrites the log dir's checkpoints so that they agree
with what is left: the recovery point moves to the new log end offset and no high watermark or log
start offset lies beyond it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from broker.errors import KafkactlError, LogDirLockedError, UsageError
from broker.log import producer_snapshot, recovery
from broker.log.checkpoint import LOG_START, RECOVERY_POINT, REPLICATION, OffsetCheckpointFile
from broker.log.log import parse_partition_dir
from broker.log.manager import is_locked, is_log_dir


@dataclass
class RecoveryRun:
    """Plans (and, once executed, quarantine files) of every partition under a path."""

    log_dir: Path | None
    plans: list[recovery.PartitionPlan] = field(default_factory=list)
    quarantined: list[Path] = field(default_factory=list)
    executed: bool = False

    @property
    def needs_cut(self) -> bool:
        return any(p.needs_cut for p in self.plans)


def partition_dirs(path: Path) -> tuple[Path | None, list[Path]]:
    """(log dir, partition dirs) for a partition dir or a log dir; UsageError for anything else."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such file or directory")
    if not path.is_dir():
        raise UsageError(f"{path}: not a directory (give a partition dir or a log dir)")
    if recovery.segment_files(path) or (parse_partition_dir(path.name) and not _has_partitions(path)):
        parent = path.parent
        return (parent if is_log_dir(parent) or _has_partitions(parent) else None), [path]
    parts = sorted(p for p in path.iterdir() if p.is_dir() and parse_partition_dir(p.name))
    if not parts:
        raise UsageError(f"{path}: neither a partition dir nor a log dir")
    return path, parts


def _has_partitions(path: Path) -> bool:
    return any(p.is_dir() and parse_partition_dir(p.name) for p in path.iterdir())


def plan(path: Path, *, salvage: bool = False, advance: Callable[[int], None] = lambda n: None) -> RecoveryRun:
    """Plan the recovery of every partition under `path`; refuses a dir a running broker holds."""
    log_dir, parts = partition_dirs(path)
    for d in {log_dir, *(p.parent for p in parts)} - {None}:
        if is_locked(d):
            raise LogDirLockedError(f"{d} is held by a running broker; stop it before recovering")
    run = RecoveryRun(log_dir)
    for part in parts:
        run.plans.append(recovery.plan_partition(part, salvage=salvage))
        advance(1)
    return run


def execute(
    run: RecoveryRun, *, quarantine_dir: Path | None = None, advance: Callable[[int], None] = lambda n: None
) -> None:
    """Apply every plan (quarantining all it cuts) and bring the checkpoints in line. A refused plan (it
    would write outside the dir given) is left out: its partition, snapshot and checkpoints stay as they are."""
    for p in run.plans:
        if p.refused:
            advance(1)
            continue
        if p.needs_cut or p.needs_index_rebuild:
            run.quarantined += recovery.execute(p, quarantine_dir=quarantine_dir)
        if p.needs_cut:  # its producer snapshot may name batches cut away: start-up reads the log instead
            for _, snapshot in producer_snapshot.snapshots(p.dir):
                snapshot.unlink(missing_ok=True)
        advance(1)
    run.executed = True
    if run.log_dir is not None:
        try:
            _fix_checkpoints(run)
        except KafkactlError as exc:
            raise KafkactlError(f"recovered, but the checkpoints could not be updated: {exc}") from None


def _fix_checkpoints(run: RecoveryRun) -> None:
    ends = {}
    for p in run.plans:
        tp = parse_partition_dir(p.dir.name)
        if tp and p.needs_cut and not p.refused:
            ends[tp] = p.next_offset
    if not ends:
        return
    for name, rule in ((RECOVERY_POINT, "set"), (REPLICATION, "clamp"), (LOG_START, "clamp")):
        f = OffsetCheckpointFile(run.log_dir / name)
        if not f.path.exists() and name != RECOVERY_POINT:
            continue
        offsets = f.read()
        for tp, end in ends.items():
            if rule == "set":
                offsets[tp] = end
            elif tp in offsets:
                offsets[tp] = min(offsets[tp], end)
        f.write(offsets)
