"""The log manager: every partition log of a broker, over one or more log dirs.

A log dir holds `<topic>-<partition>/` dirs, `meta.properties`, the three offset checkpoints
(`broker.log.checkpoint`), the clean-shutdown marker and a `.lock` file the running broker holds
with flock, which is how offline tools (`kafkactl recover`) know to keep off. At start-up a dir
without the marker had an unclean stop: its logs are recovered from their recovery points.
`meta.properties` records the broker id and, as Kafka's does, the cluster id: a dir of another
cluster (its ZooKeeper data was wiped, or it is another cluster's) is refused, not mixed in.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from broker.errors import InconsistentClusterIdError, LogDirLockedError
from broker.log.checkpoint import (
    CLEAN_SHUTDOWN,
    LOG_START,
    RECOVERY_POINT,
    REPLICATION,
    OffsetCheckpointFile,
    TopicPartition,
    overwrite,
    read_or_set_aside,
    write_atomically,
)
from broker.log.cleaner_swap import recover_swaps
from broker.log.config import LogConfig
from broker.log.durability import fsync_path, make_durable, syncfs
from broker.log.log import PartitionLog, parse_partition_dir

log = logging.getLogger(__name__)
LOCK_FILE = ".lock"
META = "meta.properties"
TOPIC_ID = "topic.id"  # in a partition dir: the id of the topic the log belongs to (see `get_or_create`)


def is_locked(log_dir: Path) -> bool:
    """Whether a running broker holds `log_dir`."""
    path = Path(log_dir) / LOCK_FILE
    if not path.exists():
        return False
    with open(path, "a") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    return False


def read_topic_id(partition_dir: Path) -> int | None:
    """The topic id stamped in a partition dir, or None (none yet, or written before ids were kept)."""
    try:
        return int((partition_dir / TOPIC_ID).read_text())
    except (OSError, ValueError):
        return None


def is_log_dir(path: Path) -> bool:
    """A dir that looks like a Kafka log dir (meta.properties or a checkpoint file)."""
    return any((path / n).exists() for n in (META, RECOVERY_POINT, REPLICATION, LOG_START, CLEAN_SHUTDOWN))


class LogManager:
    """Loads, creates, flushes, retains and checkpoints the partition logs of a set of log dirs."""

    def __init__(
        self,
        log_dirs: list[Path],
        config: LogConfig | None = None,
        *,
        broker_id: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.log_dirs = [Path(d) for d in log_dirs]
        self.config = config or LogConfig()
        self.broker_id = broker_id
        self.clock = clock
        self.logs: dict[TopicPartition, PartitionLog] = {}
        #: told before a partition's log is closed and set aside: the log cleaner drops its clean of it
        self.before_removal: Callable[[TopicPartition], None] | None = None
        #: told when a partition's log rolled a new segment (the broker snapshots its producers there)
        self.on_roll: Callable[[PartitionLog], None] | None = None
        #: told after a partition's log was truncated (the log cleaner lowers its checkpoint to the new end)
        self.on_truncate: Callable[[TopicPartition, int], None] | None = None
        self._dir_of: dict[TopicPartition, Path] = {}
        #: the topic id each log's dir holds, once read or written (a leadership change asks for the log again
        #: with its topic id: not a file read each time, thousands of them at a failover)
        self._stamped: dict[TopicPartition, int] = {}
        self._locks: list[int] = []
        self.unclean_dirs: list[Path] = []
        self.high_watermarks: dict[TopicPartition, int] = {}
        #: log dirs a write failed in (a full or failing disk), with why: as Kafka's LogDirFailureChannel,
        #: no more writes go there until the broker restarts
        self.offline_dirs: dict[Path, str] = {}
        #: partitions whose damage start-up recovery refused to cut (it would have written outside their log
        #: dir, through a symlink): served up to the damage, but nothing is appended after it
        self.offline_partitions: dict[TopicPartition, str] = {}
        #: per log dir, what was written there without fsync (a new log's dir and files, its topic id, epoch
        #: checkpoints): made durable in one batch (`take_unsynced`, `make_durable`), never file by file
        self.unsynced: dict[Path, set[Path]] = {}

    def note_unsynced(self, path: Path, *more: Path) -> None:
        """`path` (a partition dir, or a file in one) and `more` (in the same log dir) were written without
        fsync: the next durability point of their log dir covers them."""
        part = path if path.parent in self.log_dirs else path.parent
        self.unsynced.setdefault(part.parent, set()).update((path, *more))

    def take_unsynced(self) -> dict[Path, set[Path]]:
        """What was written without fsync, per online log dir, forgotten here (the caller makes it durable)."""
        out, self.unsynced = self.unsynced, {}
        return {d: paths for d, paths in out.items() if d not in self.offline_dirs}

    def make_durable(self, unsynced: dict[Path, set[Path]]) -> list[str]:
        """One durability point per log dir for what `take_unsynced` gave (a blocking call, off the event
        loop): `syncfs`, else an fsync per file. Returns what failed (the caller notes those paths again)."""
        failed = []
        for d, paths in unsynced.items():
            try:
                make_durable(d, paths)
            except OSError as exc:
                failed.append(f"making the new files of {d} durable failed: {exc}")
        return failed

    def _rolled(self, plog: PartitionLog) -> None:
        if self.on_roll is not None:
            self.on_roll(plog)

    def _truncated(self, plog: PartitionLog) -> None:
        if self.on_truncate is not None:
            self.on_truncate((plog.topic, plog.partition), plog.log_end_offset)

    def startup(self, topic_configs: dict[str, LogConfig] | None = None, cluster_id: str | None = None) -> None:
        """Lock every log dir and load its logs, recovering those of a dir that was not shut down cleanly.
        With `cluster_id` (ZooKeeper's), a dir another cluster wrote is refused."""
        topic_configs = topic_configs or {}
        try:  # every dir or none: a refused start leaves no dir locked behind it
            for d in self.log_dirs:
                d.mkdir(parents=True, exist_ok=True)
                self._lock(d)
            for d in self.log_dirs:
                self._check_cluster(d, cluster_id)
        except (LogDirLockedError, InconsistentClusterIdError):
            self._unlock()
            raise
        for d in self.log_dirs:
            self._write_meta(d, cluster_id)
            marker = d / CLEAN_SHUTDOWN
            clean = marker.exists()
            if not clean and any(parse_partition_dir(e.name) for e in os.scandir(d) if e.is_dir()):
                self.unclean_dirs.append(d)
                log.warning("log dir %s was not shut down cleanly: recovering its logs", d)
            recovery = _read_checkpoint(d / RECOVERY_POINT, self.clock)
            starts = _read_checkpoint(d / LOG_START, self.clock)
            self.high_watermarks.update(_read_checkpoint(d / REPLICATION, self.clock))
            for entry in sorted(os.scandir(d), key=lambda e: e.name):
                tp = parse_partition_dir(entry.name) if entry.is_dir() else None
                if tp is None:
                    continue
                cfg = topic_configs.get(tp[0], self.config)
                for done in recover_swaps(Path(entry.path), self.clock):  # a cleaner's swap cut short by a stop
                    log.warning("%s: %s", entry.name, done)
                self.logs[tp] = PartitionLog(
                    Path(entry.path), cfg, recovery_point=recovery.get(tp, 0),
                    log_start_offset=starts.get(tp, 0), clean=clean, clock=self.clock,
                )  # fmt: skip
                self.logs[tp].on_roll, self.logs[tp].on_truncate = self._rolled, self._truncated
                self._dir_of[tp] = d
                plan = self.logs[tp].recovery_plan
                if plan is not None and plan.refused and plan.needs_cut:
                    self.offline_partitions[tp] = f"its damage was left uncut: {plan.refused}"
                hw = self.high_watermarks.get(tp)
                if hw is not None and hw > self.logs[tp].log_end_offset:  # recovery cut what the HW covered
                    self.high_watermarks[tp] = self.logs[tp].log_end_offset
            marker.unlink(missing_ok=True)

    def _lock(self, d: Path) -> None:
        fd = os.open(d / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogDirLockedError(f"log dir {d} is in use by another broker") from None
        self._locks.append(fd)

    def _check_cluster(self, d: Path, cluster_id: str | None) -> None:
        recorded = _read_meta(d).get("cluster.id")
        if cluster_id is not None and recorded is not None and recorded != cluster_id:
            raise InconsistentClusterIdError(
                f"log dir {d} belongs to cluster {recorded}, not to this ZooKeeper's cluster {cluster_id}: "
                f"use another log dir, or delete {d / META} to take this one over"
            )

    def _write_meta(self, d: Path, cluster_id: str | None = None) -> None:
        meta = d / META
        props = _read_meta(d)
        if not meta.exists() or (cluster_id is not None and "cluster.id" not in props):
            text = f"version=0\nbroker.id={props.get('broker.id', self.broker_id)}\n"
            write_atomically(meta, (text + (f"cluster.id={cluster_id}\n" if cluster_id else "")).encode())

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int, config: LogConfig | Callable[[], LogConfig] | None = None,
                      *, topic_id: int | None = None) -> PartitionLog:  # fmt: skip
        """The partition's log, created in the log dir holding the fewest partitions if it is new.

        With `topic_id`, a log of an older topic of the same name (deleted while this broker was down or
        before it heard of it) is set aside as `<dir>.<ms>-stray`, never reused; a new log is stamped. `config`
        may be a function, called only for a new log (a leadership change asks for thousands of existing ones).
        """
        tp = (topic, partition)
        old = self.logs.get(tp)
        if old is not None and topic_id is not None and self._stamp_of(tp, old) not in (None, topic_id):
            log.warning("log of %s-%d belongs to an earlier topic of that name: set aside as stray", topic, partition)
            self._move_away(tp, "stray")
        if tp not in self.logs:
            online = [d for d in self.log_dirs if d not in self.offline_dirs]
            if not online:
                raise OSError(f"every log dir is offline ({'; '.join(self.offline_dirs.values())})")
            d = online[0]
            if len(online) > 1:
                counts = {d: 0 for d in online}
                for owner in self._dir_of.values():
                    if owner in counts:
                        counts[owner] += 1
                d = min(online, key=lambda x: counts[x])
            if callable(config):
                config = config()
            self.logs[tp] = PartitionLog(d / f"{topic}-{partition}", config or self.config, clock=self.clock)
            self.logs[tp].on_roll, self.logs[tp].on_truncate = self._rolled, self._truncated
            self._dir_of[tp] = d
            # (no fsync per new log: a power loss may lose it, empty)
            self.note_unsynced(self.logs[tp].dir, *self.logs[tp].active.files())
        plog = self.logs[tp]
        if topic_id is not None and ((plog.created and tp not in self._stamped) or self._stamp_of(tp, plog) is None):
            # (a new log has none; a lost one is written again here)
            overwrite(plog.dir / TOPIC_ID, f"{topic_id}\n".encode())  # (one small write: whole or empty)
            self.note_unsynced(plog.dir / TOPIC_ID)
            self._stamped[tp] = topic_id
        return plog

    def _stamp_of(self, tp: TopicPartition, plog: PartitionLog) -> int | None:
        """The topic id in the log's dir (read once; None: none there)."""
        stamp = self._stamped.get(tp)
        if stamp is None:
            stamp = read_topic_id(plog.dir)
            if stamp is not None:
                self._stamped[tp] = stamp
        return stamp

    def partitions_in(self, log_dir: Path) -> list[TopicPartition]:
        """The partitions whose logs live in `log_dir`, sorted."""
        return sorted(tp for tp, d in self._dir_of.items() if d == log_dir)

    def delete(self, topic: str, partition: int) -> None:
        """Remove a partition's log (topic deletion): close it and rename its dir away, then remove it."""
        doomed = self._move_away((topic, partition), "delete")
        if doomed is None:
            return
        for f in os.scandir(doomed):
            os.unlink(f.path)
        os.rmdir(doomed)

    def _move_away(self, tp: TopicPartition, suffix: str) -> Path | None:
        """Close a partition's log, forget it and rename its dir to `<dir>.<ms>-<suffix>` (returned)."""
        if self.before_removal is not None and tp in self.logs:
            self.before_removal(tp)
        plog = self.logs.pop(tp, None)
        if plog is None:
            return None
        plog.close()
        self._dir_of.pop(tp, None)
        self._stamped.pop(tp, None)
        self.high_watermarks.pop(tp, None)
        moved = plog.dir.with_name(f"{plog.dir.name}.{int(self.clock() * 1000)}-{suffix}")
        os.replace(plog.dir, moved)
        return moved

    def flush_dirty(self, now_ms: int | None = None) -> int:
        """Flush every log dirty for longer than its `flush.ms`; returns how many were flushed."""
        return sum(plog.maybe_flush(now_ms) for plog in self.logs.values())

    def run_retention(self, now_ms: int | None = None) -> dict[TopicPartition, list[int]]:
        """Apply retention to every log; returns the deleted segment bases per partition."""
        out = {}
        for tp, plog in self.logs.items():
            deleted = plog.delete_retained(now_ms)
            if deleted:
                out[tp] = deleted
        return out

    def dir_of(self, tp: TopicPartition) -> Path | None:
        """The log dir holding the partition's log."""
        return self._dir_of.get(tp)

    def is_offline(self, tp: TopicPartition) -> bool:
        """Whether the partition takes no writes: its log dir failed a write, or its damage was left uncut."""
        return self.why_offline(tp) is not None

    def why_offline(self, tp: TopicPartition) -> str | None:
        d = self._dir_of.get(tp)
        if d is not None and d in self.offline_dirs:
            return f"log dir offline after a failed write ({self.offline_dirs[d]})"
        return self.offline_partitions.get(tp)

    def mark_offline(self, tp: TopicPartition, exc: BaseException) -> None:
        """Take the log dir of `tp` offline after a failed write or fsync in it (logged once per dir)."""
        d = self._dir_of.get(tp)
        if d is None or d in self.offline_dirs:
            return
        self.offline_dirs[d] = f"{d}: {exc}"
        n = sum(1 for owner in self._dir_of.values() if owner == d)
        log.error("log dir %s is offline after a failed write (%s): produce to its %d partition(s) is answered "
                  "KAFKA_STORAGE_ERROR until the broker restarts (make room, then restart it); reads go on",
                  d, exc, n)  # fmt: skip

    def checkpoint(self) -> list[str]:
        """Write the recovery-point, log-start and high-watermark checkpoints of every online log dir; returns
        what failed (each failure takes its dir offline)."""
        failed = []
        for d in self.log_dirs:
            if d in self.offline_dirs:
                continue
            tps = [tp for tp, owner in self._dir_of.items() if owner == d]
            try:
                OffsetCheckpointFile(d / RECOVERY_POINT).write({tp: self.logs[tp].recovery_point for tp in tps})
                OffsetCheckpointFile(d / LOG_START).write({tp: self.logs[tp].log_start_offset for tp in tps})
                hws = {tp: self.high_watermarks[tp] for tp in tps if tp in self.high_watermarks}
                OffsetCheckpointFile(d / REPLICATION).write(hws)
            except Exception as exc:  # (OSError mostly: a full disk)
                failed.append(f"writing the checkpoints of {d} failed: {exc}")
                self.offline_dirs[d] = f"{d}: {exc}"
        return failed

    def shutdown(self) -> list[str]:
        """Flush every log, write the checkpoints and, in each dir where all of that worked, the clean-shutdown
        marker; release the locks. Returns what failed: a dir without its marker is recovered at the next start.

        The flush is one durability point per log dir: every log's data is written out without fsync, then
        one `syncfs` of the dir covers them all (and what else was written unsynced: producer snapshots,
        epoch checkpoints). Only where it fails does each log fsync its files itself. The marker is written
        only after that succeeded."""
        problems: list[str] = []
        for tp, plog in self.logs.items():
            try:
                plog.flush(sync=False)
            except Exception as exc:  # a disk error, or a bug: either way this dir's stop is not clean
                self._flush_failed(tp, exc, problems)
        unsynced = self.take_unsynced()
        for d in self.log_dirs:
            if d in self.offline_dirs:
                continue
            tps = [tp for tp, owner in self._dir_of.items() if owner == d and tp in self.logs]
            try:
                synced = syncfs(d)
            except OSError as exc:  # (data may be lost: no marker, the next start recovers the dir)
                problems.append(f"flushing log dir {d} failed: {exc}")
                self.offline_dirs.setdefault(d, f"{d}: {exc}")
                continue
            if synced:
                for tp in tps:
                    self.logs[tp].flushed()
                continue
            for tp in tps:  # (no syncfs: every file on its own, as before)
                try:
                    segs = self.logs[tp].unflushed_segments()
                    self.logs[tp].flush()  # (the segments' own descriptors: they report earlier write errors)
                    for seg in segs:
                        for f in seg.files()[1:]:  # (the indexes, written above without fsync)
                            fsync_path(f)
                except Exception as exc:
                    self._flush_failed(tp, exc, problems)
            problems += self.make_durable({d: unsynced.get(d, set())})
        problems += self.checkpoint()
        for plog in self.logs.values():
            plog.close()
        for d in self.log_dirs:
            if d in self.offline_dirs:
                problems.append(f"log dir {self.offline_dirs[d]}: left without its clean-shutdown marker")
                continue
            try:
                write_atomically(d / CLEAN_SHUTDOWN, b"")
            except OSError as exc:
                problems.append(f"writing the clean-shutdown marker of {d} failed: {exc}")
        self._unlock()
        return list(dict.fromkeys(problems))

    def _flush_failed(self, tp: TopicPartition, exc: Exception, problems: list[str]) -> None:
        if not self.is_offline(tp):
            problems.append(f"flushing {tp[0]}-{tp[1]} failed: {exc}")
        self.offline_dirs.setdefault(self._dir_of[tp], f"{self._dir_of[tp]}: {exc}")

    @property
    def holds_dirs(self) -> bool:
        """Whether this manager holds its log dirs' locks (between a startup and its shutdown)."""
        return bool(self._locks)

    def _unlock(self) -> None:
        for fd in self._locks:
            os.close(fd)  # closing the descriptor releases its flock
        self._locks.clear()


def _read_checkpoint(path: Path, clock: Callable[[], float]) -> dict[TopicPartition, int]:
    """A checkpoint's offsets, or none when it does not parse: the recovery points then start from the logs'
    beginnings and the log dir is recovered from there, which costs time but no data."""
    return read_or_set_aside(path, clock, "the offsets it held are rebuilt from the logs")


def _read_meta(d: Path) -> dict[str, str]:
    """The `key=value` lines of a log dir's meta.properties (none if it has none)."""
    try:
        lines = (d / META).read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return {}
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.lstrip().startswith("#"))
