"""The log cleaner's threads (`LogCleaner`, Kafka's LogCleaner and LogCleanerManager): which logs are being
cleaned, aborts, the swap run on the broker's event loop, the replaced segments' delayed close.

Each of `log.cleaner.threads` threads cleans the dirtiest log (`broker.log.cleaner_selection`) with its own
offset map, one log at a time, and backs off `log.cleaner.backoff.ms` when none needs it. The cleaner thread
reads a log's high watermark as stored (it never recomputes replication state off the event loop), and an
abort (a removal, a truncation) reaches a clean within a read chunk or a 50 ms throttle slice
(`broker.log.cleaner_io`). The old segments' descriptors stay open `log.segment.delete.delay.ms` after a swap
(a fetch may still be sending from them), then close. Appends never wait for the cleaner: it reads only
non-active segments through its own descriptors. Leader and followers each clean their own copy.

A clean's progress is checkpointed as `broker.log.cleaner_progress` says: a removed log's line goes from the
checkpoint file, and a truncation below a log's checkpoint lowers it to the new log end. The log manager is
given to `LogCleaner`, never imported: the broker wires the manager's `before_removal` and `on_truncate` to
`abort` and `truncated`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from broker.errors import CorruptRecordError
from broker.log.checkpoint import TopicPartition
from broker.log.cleaner import clean_log
from broker.log.cleaner_io import CleanAborted, CleanDamage, Throttler
from broker.log.cleaner_progress import PartitionProgress, read_checkpoints, write_checkpoints
from broker.log.cleaner_selection import Cleanable, dirtiest
from broker.log.cleaner_swap import remove_deleted
from broker.log.log import PartitionLog
from broker.log.offset_map import OffsetMap
from broker.log.segment import LogSegment

log = logging.getLogger("broker.log.cleaner")  # (the name the broker's log has always shown for a clean)


class LogCleaner:
    """The cleaner threads of a broker (`log.cleaner.threads`), over the logs of its LogManager."""

    def __init__(self, manager, *, threads: int = 1, dedupe_buffer_bytes: int = 134217728,
                 load_factor: float = 0.9, backoff_ms: int = 15000, io_max_bytes_per_second: float = 1.7e308,
                 delete_delay_ms: int = 60000, loop: asyncio.AbstractEventLoop | None = None,
                 clock: Callable[[], float] = time.time,
                 stable_end: Callable[[PartitionLog], int] | None = None,
                 producers_last: Callable[[PartitionLog], set[int] | None] | None = None) -> None:  # fmt: skip
        self.manager = manager
        #: a log's high watermark as last stored, read only (called from the cleaner threads: recomputing it
        #: would write replication state off the event loop); None: the whole log is stable (a broker-less test)
        self.stable_end = stable_end
        #: the base offsets of the active producers' last batches of a log (`producers_last_batches`); None: keep
        #: each producer's last batch of the section cleaned
        self.producers_last = producers_last
        if log.getEffectiveLevel() > logging.INFO:  # each clean is reported, as Kafka's log-cleaner.log is
            log.setLevel(logging.INFO)
        self.threads = max(1, threads)
        self.map_bytes = dedupe_buffer_bytes // self.threads  # shared by the threads, as Kafka's
        self.load_factor = load_factor
        self.backoff_s = backoff_ms / 1000
        self.io_rate = io_max_bytes_per_second
        self.delete_delay_s = delete_delay_ms / 1000
        self.loop = loop  # where the logs are changed (the broker's event loop); None: the calling thread
        self.clock = clock
        self.progress: dict[TopicPartition, PartitionProgress] = {}
        self._lock = threading.Lock()
        self._checkpoint_lock = threading.Lock()  # one checkpoint file write at a time (see _write_checkpoint)
        self._in_progress: set[TopicPartition] = set()
        #: logs a clean found damaged: not cleaned again until the broker restarts (Kafka's uncleanable partitions)
        self.uncleanable: set[TopicPartition] = set()
        self._aborted: set[TopicPartition] = set()
        self._stuck: set[TopicPartition] = set()  # logs a clean made no progress on (said once in the log)
        self._retired: list[tuple[float, list[LogSegment]]] = []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._workers: list[threading.Thread] = []
        self._throttler = Throttler(io_max_bytes_per_second)
        for d in manager.log_dirs:
            for tp, offset in self._read_checkpoint(Path(d)).items():
                self.progress.setdefault(tp, PartitionProgress()).checkpoint = offset

    # -- checkpoints ---------------------------------------------------------------------------

    def _read_checkpoint(self, d: Path) -> dict[TopicPartition, int]:
        return read_checkpoints(d, self.clock)

    def _write_checkpoint(self, d: Path) -> None:
        """Rewrite `d`'s checkpoint file with its logs' checkpoints. Under `_checkpoint_lock`, from the snapshot
        to the rename: cleaner threads (and a removal or truncation on the event loop) write the same `.tmp`
        name, and a later snapshot must not be overwritten by an earlier one."""
        with self._checkpoint_lock:
            with self._lock:
                offsets = {tp: p.checkpoint for tp, p in self.progress.items()
                           if p.checkpoint is not None and self.manager.dir_of(tp) == d}  # fmt: skip
            write_checkpoints(d, offsets)

    # -- threads -------------------------------------------------------------------------------

    def start(self) -> None:
        for i in range(self.threads):
            t = threading.Thread(target=self._run, args=(i,), name=f"kafka-log-cleaner-thread-{i}", daemon=True)
            t.start()
            self._workers.append(t)

    def stop(self) -> None:
        """Stop the threads (a clean in progress is dropped, its `.cleaned` files removed) and close the
        replaced segments' descriptors."""
        self._stop.set()
        self._wake.set()
        for t in self._workers:
            t.join(timeout=30)
        self._workers.clear()
        self._close_retired(force=True)

    def wake(self) -> None:
        """Look for work now (tests; a config change)."""
        self._wake.set()

    def abort(self, tp: TopicPartition, timeout: float = 0.5) -> None:
        """Drop the clean of `tp` in progress, if any, then forget the log: its checkpoint goes from its dir's
        file (Kafka's updateCheckpoints(dir, partitionToRemove): a topic re-created under the same name must
        not take the old first dirty offset) and from `uncleanable`. Called on the broker's event loop before
        the log is removed, so it waits at most `timeout` for the clean to stop (it looks at its stop flag at
        least every chunk and throttle slice); `tp` stays aborted until that clean has exited, so it neither
        swaps into nor checkpoints a log of the same name."""
        with self._lock:
            running = tp in self._in_progress
            if running:
                self._aborted.add(tp)  # (removed by the clean as it exits)
        if running:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                with self._lock:
                    if tp not in self._in_progress:
                        break
                time.sleep(0.005)
        with self._lock:
            had = self.progress.pop(tp, None)
            self.uncleanable.discard(tp)
            self._stuck.discard(tp)
        d = self.manager.dir_of(tp)
        if had is not None and had.checkpoint is not None and d is not None:
            self._write_checkpoint(d)

    def truncated(self, tp: TopicPartition, end: int) -> None:
        """`tp`'s log was cut back to `end` (a follower's truncation or reset): a checkpoint past it comes down
        to it (Kafka's maybeTruncateCheckpoint; what is appended there again is dirty) and a clean in progress
        is dropped (its swap refuses, its checkpoint is not taken)."""
        with self._lock:
            if tp in self._in_progress:
                self._aborted.add(tp)  # (removed when that clean exits)
            prog = self.progress.get(tp)
            lower = prog is not None and prog.checkpoint is not None and prog.checkpoint > end
            if lower:
                prog.checkpoint = end
        d = self.manager.dir_of(tp)
        if lower and d is not None:
            self._write_checkpoint(d)

    def _run(self, thread: int) -> None:
        omap = OffsetMap(self.map_bytes, self.load_factor)
        while not self._stop.is_set():
            self._close_retired()
            try:
                cleaned = self.clean_once(omap, thread)
            except Exception:  # a bug: logged, and the thread goes on after its back-off
                log.exception("log cleaner thread %d failed", thread)
                cleaned = False
            if not cleaned:
                self._wake.wait(self.backoff_s)
                self._wake.clear()

    def _close_retired(self, force: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            due = [segs for t, segs in self._retired if force or t <= now]
            self._retired = [(t, segs) for t, segs in self._retired if not (force or t <= now)]
        for segs in due:
            for seg in segs:
                seg.close()
                remove_deleted(seg)

    def _retire(self, segs: list[LogSegment]) -> None:
        with self._lock:
            self._retired.append((time.monotonic() + self.delete_delay_s, segs))

    # -- one clean -----------------------------------------------------------------------------

    def dirtiest(self, now_ms: int) -> tuple[TopicPartition, PartitionLog, Cleanable] | None:
        """The compacted log to clean next (Kafka's grabFilthiestCompactedLog), or None: of those neither being
        cleaned, nor uncleanable, nor offline."""
        logs = ((tp, plog) for tp, plog in list(self.manager.logs.items())
                if plog.config.compact and tp not in self._in_progress and tp not in self.uncleanable
                and not self.manager.is_offline(tp))  # fmt: skip

        def checkpoint_of(tp: TopicPartition) -> int | None:
            prog = self.progress.get(tp)
            return prog.checkpoint if prog else None

        return dirtiest(logs, checkpoint_of, now_ms, self.stable_end)

    def clean_once(self, omap: OffsetMap, thread: int = 0) -> bool:
        """Clean the dirtiest log, if one is over its ratio; returns whether one was cleaned."""
        now_ms = int(self.clock() * 1000)
        with self._lock:
            pick = self.dirtiest(now_ms)
            if pick is None:
                return False
            tp, plog, c = pick
            self._in_progress.add(tp)
        try:
            return self._clean(tp, plog, c, omap, now_ms, thread)
        finally:
            with self._lock:  # (only now: a removal or truncation meanwhile finds the clean still running)
                self._in_progress.discard(tp)
                self._aborted.discard(tp)

    def _clean(self, tp: TopicPartition, plog: PartitionLog, c: Cleanable, omap: OffsetMap, now_ms: int,
               thread: int) -> bool:  # fmt: skip
        last = self.producers_last(plog) if self.producers_last is not None else None
        try:
            stats = clean_log(plog, c, omap, now_ms=now_ms, run_locked=self._locked_for(tp, plog),
                              stop=lambda: self._stop.is_set() or tp in self._aborted,
                              throttler=self._throttler, retire=self._retire,
                              producers_last=last)  # fmt: skip
        except (CleanDamage, CorruptRecordError) as exc:
            log.error("log cleaner thread %d: %s-%d is damaged and is not cleaned until the broker restarts "
                      "(kafkactl recover mends it): %s", thread, tp[0], tp[1], exc)  # fmt: skip
            with self._lock:
                self.uncleanable.add(tp)
                self.progress.setdefault(tp, PartitionProgress()).last_error = str(exc)
            return False
        except (CleanAborted, OSError) as exc:
            asked = self._stop.is_set() or tp in self._aborted  # (a stop, a log removed: as asked, no warning)
            log.log(logging.INFO if asked else logging.WARNING, "log cleaner thread %d: the clean of %s-%d was "
                    "dropped: %s", thread, tp[0], tp[1], exc)  # fmt: skip
            with self._lock:
                if not self._gone(tp, plog):
                    self.progress.setdefault(tp, PartitionProgress()).last_error = str(exc)
            return False
        with self._lock:  # (a truncation or removal meanwhile: its checkpoint is not taken)
            dropped = self._gone(tp, plog)
            if not dropped and stats.end_offset > c.first_dirty:
                self._stuck.discard(tp)
                prog = self.progress.setdefault(tp, PartitionProgress())
                prog.checkpoint, prog.last_clean, prog.last_clean_ms, prog.last_error = (
                    stats.end_offset, stats, int(self.clock() * 1000), None)  # fmt: skip
        if dropped:
            log.info("log cleaner thread %d: the clean of %s-%d was dropped: the log was cut or removed", thread,
                     tp[0], tp[1])  # fmt: skip
            return False
        if stats.end_offset <= c.first_dirty:  # no progress: back off (no rewrite, no busy loop), said once
            with self._lock:
                said = tp in self._stuck
                self._stuck.add(tp)
                self.progress.setdefault(tp, PartitionProgress()).last_error = "no progress: the offset map is full"
            if not said:
                log.warning("log cleaner thread %d: no progress on %s-%d: the batch at offset %d holds more keys "
                            "than the offset map has slots (%d; log.cleaner.dedupe.buffer.size)", thread, tp[0],
                            tp[1], c.first_dirty, omap.slots)  # fmt: skip
            return False
        d = self.manager.dir_of(tp)
        if d is not None:
            self._write_checkpoint(d)
        log.info("%s", stats.summary(thread))
        return True

    def _gone(self, tp: TopicPartition, plog: PartitionLog) -> bool:
        """Whether the clean of `plog` was aborted (a removal, a truncation) or its log is no longer `tp`'s."""
        return tp in self._aborted or self.manager.get(*tp) is not plog

    def _locked_for(self, tp: TopicPartition, plog: PartitionLog) -> Callable[[Callable[[], object]], object]:
        """`run_locked` of a clean of `tp`: runs the swap on the event loop and waits for it, giving up when
        the cleaner stops or the clean is aborted (the loop may be waiting for exactly that)."""

        def stopped() -> bool:
            return self._stop.is_set() or tp in self._aborted or self.manager.get(*tp) is not plog

        def locked(fn: Callable[[], object]) -> object:
            def guarded() -> object:
                if stopped():
                    raise CleanAborted("the cleaner stopped, or the log was removed")
                return fn()

            if self.loop is None:
                return guarded()
            fut: concurrent.futures.Future = concurrent.futures.Future()

            def run() -> None:
                if fut.set_running_or_notify_cancel():
                    try:
                        fut.set_result(guarded())
                    except BaseException as exc:  # handed to the waiting cleaner thread
                        fut.set_exception(exc)

            try:
                self.loop.call_soon_threadsafe(run)
            except RuntimeError:  # the loop is closed
                raise CleanAborted("the broker stopped") from None
            while True:
                try:
                    return fut.result(timeout=0.05)
                except concurrent.futures.TimeoutError:
                    if stopped() and fut.cancel():
                        raise CleanAborted("the cleaner stopped, or the log was removed") from None

        return locked

    @classmethod
    def from_props(cls, manager, props: dict[str, str], loop: asyncio.AbstractEventLoop | None = None,
                   stable_end: Callable[[PartitionLog], int] | None = None,
                   producers_last: Callable[[PartitionLog], set[int] | None] | None = None,
                   ) -> LogCleaner:  # fmt: skip
        """The cleaner of a broker's config (Kafka's `log.cleaner.*` keys)."""
        return cls(
            manager, threads=int(props.get("log.cleaner.threads", "1")),
            dedupe_buffer_bytes=int(props.get("log.cleaner.dedupe.buffer.size", "134217728")),
            load_factor=float(props.get("log.cleaner.io.buffer.load.factor", "0.9")),
            backoff_ms=int(props.get("log.cleaner.backoff.ms", "15000")),
            io_max_bytes_per_second=float(props.get("log.cleaner.io.max.bytes.per.second", "1.7e308")),
            delete_delay_ms=int(props.get("log.segment.delete.delay.ms", "60000")), loop=loop, stable_end=stable_end,
            producers_last=producers_last,
        )  # fmt: skip
