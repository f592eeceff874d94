"""A broker's replicas: which partitions it leads and which it follows, and what each side keeps.

The broker hands every partition state it learns (`apply`); the manager makes this broker the
partition's leader (a `LeaderPartition` for its followers), a follower (its fetcher from the leader
copies it, after the copy is cut back to where its latest leader epoch ends in the leader's log) or
neither. As leader it answers the followers' fetches (`replica_fetched`: their log end offsets move the
high watermark), shrinks and grows the ISR (written to the state znode conditional on its version, with
an `/isr_change_notification`), and holds `acks=all` produce answers until the ISR has their batches
(`wait_replicated`) and DeleteRecords answers until the followers' log starts reached the new start
(`wait_log_start`: a follower takes its leader's log start from each fetch answer and tells its own in the
next fetch, as Kafka's).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from broker.log import producer_snapshot
from broker.log.producer_state import ProducerStates
from broker.log.producer_state_io import forget_states, load_states, marker_in, note_completed
from broker.protocol.errors import ErrorCode
from broker.records.batch import HEADER, BatchHeader
from broker.replication.epochs import UNDEFINED, LeaderEpochCache
from broker.replication.fetcher import ReplicaFetcher
from broker.replication.isr import Follower, LeaderPartition, SessionClock
from broker.replication.reassignment import throttled
from broker.replication.throttle import Throttle
from broker.zk import registry

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from broker.log.log import PartitionLog
    from broker.log.manager import LogManager
    from broker.replication.interfaces import ClusterView, FetchWaiters, PartitionState, ReplicaConfig

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class _IsrChange(NamedTuple):
    """An ISR change a leader queued: written conditional on the state version it was decided on."""

    lp: LeaderPartition
    isr: list[int]
    leader_epoch: int
    zk_version: int
    before: list[int]  # the ISR it replaces (for the log)


class ReplicaManager:
    """The leader and follower sides of every partition this broker holds a replica of."""

    def __init__(self, broker_id: int, config: ReplicaConfig, cache: ClusterView, logs: LogManager,
                 purgatory: FetchWaiters,
                 log_for: Callable[[str, int], PartitionLog | None],
                 blocking: Callable[..., Awaitable[Any]], zk: Callable[[], KazooClient | None]) -> None:  # fmt: skip
        self.broker_id = broker_id
        self.config = config
        self.cache = cache
        self.logs = logs
        self.purgatory = purgatory
        self._log_for = log_for  # the partition's local log, created if it is new
        self._blocking = blocking
        self._zk = zk
        self.leaders: dict[TopicPartition, LeaderPartition] = {}
        self.following: dict[TopicPartition, tuple[int, int]] = {}  # tp → (leader, leader epoch)
        self.follower_hw: dict[TopicPartition, int] = {}
        self.epochs: dict[TopicPartition, LeaderEpochCache] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._waiters: dict[TopicPartition, list[tuple[int, asyncio.Future]]] = {}
        self._start_waiters: dict[TopicPartition, list[tuple[int, asyncio.Future]]] = {}  # DeleteRecords
        self._isr_writes: set[TopicPartition] = set()  # queued or being written
        self._isr_queue: dict[TopicPartition, _IsrChange] = {}
        self._isr_writer: asyncio.Task | None = None
        self._new_leads: list[str] = []  # (logged together: `_note_lead`)
        self._task: asyncio.Task | None = None
        self.closed = False
        self.fetching = True  # False once a controlled shutdown began: nothing is copied any more
        self.throttle = Throttle()  # follower.replication.throttled.rate, from this broker's dynamic config

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._check_isr_loop(), name="isr-check")

    async def stop_fetching(self) -> None:
        """Stop copying (a controlled shutdown, before it leaves the ISRs: a follower that went on fetching
        would be taken back into them)."""
        self.fetching = False
        for fetcher in list(self.fetchers.values()):
            await fetcher.close()
        self.fetchers.clear()

    async def close(self) -> None:
        self.closed = True
        if self._task is not None:
            self._task.cancel()
        await self.stop_fetching()
        for tp in {*self._waiters, *self._start_waiters}:
            self._fail_waiters(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)

    # -- leadership -------------------------------------------------------------------------------

    def apply(self, tp: TopicPartition, info: PartitionState) -> None:
        """Act on a partition's state: lead it, follow its leader, or hold no replica of it."""
        if self.closed:
            return
        if info.leader == self.broker_id:
            self._lead(tp, info)
        elif self.broker_id in info.replicas:
            self._follow(tp, info)
        else:
            self.forget(tp)

    def _lead(self, tp: TopicPartition, info: PartitionState) -> None:
        lp = self.leaders.get(tp)
        if lp is not None and lp.leader_epoch == info.leader_epoch:
            lp.isr, lp.zk_version, lp.replicas = list(info.isr), info.zk_version, list(info.replicas)
            gone = [r for r in lp.isr if r not in lp.replicas]
            if gone:  # reassigned away (an ISR write of ours may have raced the controller's): out of the ISR
                self._change_isr(tp, lp, [r for r in lp.isr if r not in gone])
            self._hw_moved(tp)
            return
        self._stop_following(tp)
        plog = self._log_for(*tp)
        if plog is None:
            return
        leo = plog.log_end_offset
        self.epoch_cache(tp, plog).assign(info.leader_epoch, leo)
        hw = min(self.follower_hw.pop(tp, self.logs.high_watermarks.get(tp, 0)), leo)
        self.leaders[tp] = LeaderPartition.start(self.broker_id, info.replicas, info.isr, info.leader_epoch,
                                                 info.zk_version, hw, leo, _now_ms())  # fmt: skip
        self._note_lead(f"{tp[0]}-{tp[1]} at epoch {info.leader_epoch} (log end {leo}, high watermark {hw}, ISR "
                        f"{info.isr})")  # fmt: skip
        self._hw_moved(tp)

    def _note_lead(self, what: str) -> None:
        """Log the partitions this broker began to lead, the ones of one batch of states in one line (a
        failover hands thousands at once)."""
        self._new_leads.append(what)
        if len(self._new_leads) > 1:
            return
        try:
            asyncio.get_running_loop().call_soon(self._log_leads)
        except RuntimeError:  # (not on a loop: now)
            self._log_leads()

    def _log_leads(self) -> None:
        leads, self._new_leads = self._new_leads, []
        if leads:
            log.info("leading %d partition(s): %s%s", len(leads), ", ".join(leads[:5]),
                     f" and {len(leads) - 5} more" if len(leads) > 5 else "")  # fmt: skip

    def _follow(self, tp: TopicPartition, info: PartitionState) -> None:
        lp = self.leaders.pop(tp, None)
        if lp is not None:  # leader no more: what waits for followers will not be answered by this broker
            self.follower_hw[tp] = lp.hw
            self._fail_waiters(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            self.purgatory.notify(tp)  # (fetch sessions that left it quiet read it again: no longer led here)
        if self.following.get(tp) == (info.leader, info.leader_epoch):
            return
        self._stop_following(tp)
        plog = self._log_for(*tp)
        if plog is None:
            return
        if info.leader < 0:
            self.following[tp] = (info.leader, info.leader_epoch)
            return
        self.following[tp] = (info.leader, info.leader_epoch)  # its fetcher first truncates (`truncation_point`)
        if not self.fetching:
            return
        fetcher = self.fetchers.get(info.leader)
        if fetcher is None:
            fetcher = self.fetchers[info.leader] = ReplicaFetcher(self, info.leader)
            fetcher.start()
        fetcher.add(tp, info.leader_epoch)

    def _stop_following(self, tp: TopicPartition) -> None:
        was = self.following.pop(tp, None)
        if was is not None and was[0] in self.fetchers:
            self.fetchers[was[0]].remove(tp)

    def forget(self, tp: TopicPartition) -> None:
        """This broker holds no replica of `tp` any more (or the topic is gone)."""
        self._stop_following(tp)
        self.epochs.pop(tp, None)
        if self.leaders.pop(tp, None) is not None:
            self._fail_waiters(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            self.purgatory.notify(tp)
        self.follower_hw.pop(tp, None)

    def is_leader(self, tp: TopicPartition) -> bool:
        return tp in self.leaders

    # -- the leader's side ------------------------------------------------------------------------

    def high_watermark(self, tp: TopicPartition, plog: PartitionLog) -> int:
        lp = self.leaders.get(tp)
        if lp is None:
            return min(self.follower_hw.get(tp, 0), plog.log_end_offset)
        return lp.high_watermark(plog.log_end_offset)

    def stable_end(self, tp: TopicPartition, plog: PartitionLog) -> int:
        """The high watermark computed without being kept (`high_watermark` stores it, which only the event loop
        may do): the log cleaner's bound, read from its own thread. (The stored one alone can lag far behind:
        after a restart it is the checkpointed one until a request recomputes it.)"""
        lp = self.leaders.get(tp)
        hw = lp.peek_high_watermark(plog.log_end_offset) if lp is not None else self.follower_hw.get(tp, 0)
        return min(hw, plog.log_end_offset)

    def offsets_known(self, tp: TopicPartition, plog: PartitionLog) -> bool:
        """Whether this leader's high watermark is established: it reached the log end the leader had when it
        took over (KIP-207; until then ListOffsets answers OFFSET_NOT_AVAILABLE, as the end it knows may be
        below what the last leader already showed consumers)."""
        lp = self.leaders.get(tp)
        return lp is None or lp.high_watermark(plog.log_end_offset) >= lp.epoch_start

    def replica_fetched(self, tp: TopicPartition, replica: int, offset: int, plog: PartitionLog,
                        log_start: int = -1) -> ErrorCode:  # fmt: skip
        """A follower's fetch from `offset`: note how far its copy got (and where it starts), and move the high
        watermark."""
        lp = self.leaders.get(tp)
        if lp is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if replica not in lp.replicas:
            return ErrorCode.REPLICA_NOT_AVAILABLE
        before = lp.hw
        lp.fetched(replica, offset, plog.log_end_offset, _now_ms(), log_start)
        if tp in self._start_waiters:
            self._start_moved(tp, plog)
        info = self.cache.partition(*tp)
        if (replica not in lp.isr and replica in self.cache.brokers and replica in lp.rejoining(plog.log_end_offset)
                and (info is None or replica not in info.removing)):  # fmt: skip
            self._change_isr(tp, lp, [*lp.isr, replica])
        if lp.high_watermark(plog.log_end_offset) > before:
            self._hw_moved(tp)
        return ErrorCode.NONE

    def quiet_fetch(self, tp: TopicPartition, replica: int, fetch_offset: int, leader_epoch: int,
                    sent: tuple[int, int, int], plog: PartitionLog, now_ms: int,
                    clock: SessionClock | None = None) -> Follower | None:  # fmt: skip
        """A follower's incremental fetch covering a partition it did not name this time: when its copy is
        whole, in the ISR and told the current high watermark, last stable offset and log start (`sent`), note
        it as caught up and return the follower's record (nothing to read or answer); None: read it the usual
        way. This keeps a fetch over thousands of idle session partitions from costing a full read of each; with
        the session's `clock`, its later fetches keep the partition caught up until anything about it changes
        (which wakes the session's watch: `_hw_moved`, a new leader, an ISR change) or the session stops
        counting it quiet (`Follower.leave_quiet`)."""
        lp = self.leaders.get(tp)
        if lp is None or replica not in lp.isr or leader_epoch not in (-1, lp.leader_epoch):
            return None
        leo = plog.log_end_offset
        f = lp.followers.get(replica)
        if f is None or f.leo != fetch_offset or fetch_offset != leo or lp.hw != leo:
            return None
        if sent != (leo, leo, plog.log_start_offset) or tp in self._start_waiters:
            return None
        lp.fetched(replica, fetch_offset, leo, now_ms)
        f.quiet = clock
        return f

    def _hw_moved(self, tp: TopicPartition) -> None:
        """Answer the produce requests the high watermark now covers, and wake the consumers' fetches."""
        lp = self.leaders.get(tp)
        waiting = self._waiters.get(tp)
        if lp is not None and waiting:
            plog = self.logs.get(*tp)
            hw = lp.high_watermark(plog.log_end_offset) if plog is not None else lp.hw  # (as it is now)
            keep = []
            for offset, fut in waiting:
                if offset < hw:
                    if not fut.done():
                        fut.set_result(ErrorCode.NONE)
                else:
                    keep.append((offset, fut))
            if keep:
                self._waiters[tp] = keep
            else:
                del self._waiters[tp]
        self.purgatory.notify(tp)

    def needs_wait(self, tp: TopicPartition, last_offset: int) -> bool:
        """Whether an `acks=all` append ending at `last_offset` must wait for followers."""
        lp = self.leaders.get(tp)
        return lp is not None and lp.hw <= last_offset and len(lp.isr) > 1

    async def wait_replicated(self, tp: TopicPartition, last_offset: int, timeout_s: float,
                              min_insync: int) -> ErrorCode:  # fmt: skip
        """Until the high watermark passes `last_offset`: NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR
        shrank below `min_insync` meanwhile, REQUEST_TIMED_OUT, or NOT_LEADER_OR_FOLLOWER (leader no more)."""
        lp = self.leaders.get(tp)
        if lp is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        fut = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(tp, []).append((last_offset, fut))
        self._hw_moved(tp)  # (it may have moved between the append and now)
        try:
            code = await asyncio.wait_for(fut, max(timeout_s, 0.001))
        except TimeoutError:
            waiting = self._waiters.get(tp)
            if waiting:
                self._waiters[tp] = [w for w in waiting if w[1] is not fut]
            return ErrorCode.REQUEST_TIMED_OUT
        lp = self.leaders.get(tp)
        if code == ErrorCode.NONE and lp is not None and len(lp.isr) < min_insync:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return code

    def _fail_waiters(self, tp: TopicPartition, code: ErrorCode) -> None:
        for _, fut in self._waiters.pop(tp, []) + self._start_waiters.pop(tp, []):
            if not fut.done():
                fut.set_result(code)

    def low_watermark(self, tp: TopicPartition, plog: PartitionLog) -> int:
        """The smallest log start offset over this leader's replicas on live brokers (its own alone when it does
        not lead `tp`)."""
        lp = self.leaders.get(tp)
        return plog.log_start_offset if lp is None else lp.low_watermark(plog.log_start_offset, self.cache.brokers)

    async def wait_log_start(self, tp: TopicPartition, offset: int, timeout_s: float) -> ErrorCode:
        """Until every replica on a live broker starts at `offset` or later (DeleteRecords' purgatory): NONE,
        REQUEST_TIMED_OUT, or NOT_LEADER_OR_FOLLOWER (leader no more)."""
        plog = self.logs.get(*tp)
        if tp not in self.leaders or plog is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.low_watermark(tp, plog) >= offset:
            return ErrorCode.NONE
        fut = asyncio.get_running_loop().create_future()
        self._start_waiters.setdefault(tp, []).append((offset, fut))
        self.purgatory.notify(tp)  # (followers that left it quiet read it again, and learn its new log start)
        try:
            return await asyncio.wait_for(fut, max(timeout_s, 0.001))
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT
        finally:
            waiting = [w for w in self._start_waiters.get(tp, []) if w[1] is not fut]
            if waiting:
                self._start_waiters[tp] = waiting
            else:
                self._start_waiters.pop(tp, None)

    def _start_moved(self, tp: TopicPartition, plog: PartitionLog) -> None:
        """Answer the DeleteRecords requests whose offset the replicas' log starts now reach."""
        low = self.low_watermark(tp, plog)
        for offset, fut in self._start_waiters.get(tp, []):
            if offset <= low and not fut.done():
                fut.set_result(ErrorCode.NONE)

    async def _check_isr_loop(self) -> None:
        lag = self.config.replica_lag_time_max_ms
        while True:
            await asyncio.sleep(max(lag / 2, 50) / 1000)
            try:
                self.check_isr()
            except Exception:
                log.exception("checking the ISRs failed")

    def check_isr(self) -> None:
        """Shrink the ISR of each led partition by its followers that fell behind for too long."""
        now = _now_ms()
        lag = self.config.replica_lag_time_max_ms
        for tp, lp in list(self.leaders.items()):
            out = lp.lagging(now, lag)
            if out:
                self._change_isr(tp, lp, [r for r in lp.isr if r not in out])

    def _change_isr(self, tp: TopicPartition, lp: LeaderPartition, isr: list[int]) -> None:
        """Write `isr` as the partition's new ISR, with the others changed by the same fetch or check: the
        changes queued now are written together once the loop is free again (one pipelined pass and one
        notification for all of them, not a round trip and a notification each)."""
        if tp in self._isr_writes or self._zk() is None:
            return
        self._isr_writes.add(tp)
        self._isr_queue[tp] = _IsrChange(lp, isr, lp.leader_epoch, lp.zk_version, list(lp.isr))  # (on this version)
        if self._isr_writer is None:
            self._isr_writer = asyncio.get_running_loop().create_task(self._write_isrs(), name="isr-writes")

    async def _write_isrs(self) -> None:
        try:
            while self._isr_queue:
                await asyncio.sleep(0)  # (the changes the same fetch or check makes next join this batch)
                queued, self._isr_queue = self._isr_queue, {}
                await self._write_isr_batch(queued)
        finally:
            self._isr_writer = None
            for tp in self._isr_queue:  # (cancelled: the next fetch or check decides them again)
                self._isr_writes.discard(tp)
            self._isr_queue.clear()

    async def _write_isr_batch(self, queued: dict[TopicPartition, _IsrChange]) -> None:
        """Write each ISR conditional on the version of the state it was decided on; one we lost a race for
        (the controller wrote first) is taken anew from the watch."""
        items = list(queued.items())
        try:
            zk = self._zk()
            if zk is None:
                return
            carry = {tp: self.cache.topic_ids.get(tp[0]) for tp, _ in items}  # (the cache decided them)
            versions = await self._blocking(functools.partial(registry.write_partition_states, carry=carry), zk, [
                (t, p, self.broker_id, c.leader_epoch, c.isr, c.zk_version) for (t, p), c in items
            ])  # fmt: skip
            written: list[TopicPartition] = []
            shrunk: list[str] = []
            grown: list[str] = []
            for (tp, (lp, isr, _, _, before)), version in zip(items, versions, strict=True):
                if version is None:
                    log.debug("ISR change of %s-%d to %s lost a race; taking the state anew", *tp, isr)
                    continue
                (shrunk if [r for r in before if r not in isr] else grown).append(f"{tp[0]}-{tp[1]} {before} -> {isr}")
                if self.leaders.get(tp) is lp and lp.zk_version < version:  # (the watch may have brought newer)
                    lp.isr, lp.zk_version = list(isr), version
                    info = self.cache.partition(*tp)
                    if info is not None and info.zk_version < version:
                        info.isr, info.zk_version = list(isr), version
                    self._hw_moved(tp)
                written.append(tp)
            for what, changes in (("shrank", shrunk), ("expanded", grown)):
                if changes:
                    log.info("%s the ISR of %d partition(s): %s%s", what, len(changes), ", ".join(changes[:5]),
                             f" and {len(changes) - 5} more" if len(changes) > 5 else "")  # fmt: skip
            if len(written) < len(items):
                log.info("%d ISR change(s) lost a race with the controller; taking those states anew",
                         len(items) - len(written))  # fmt: skip
            if written:
                with contextlib.suppress(Exception):
                    await self._blocking(registry.notify_isr_change, zk, written)
        except Exception as exc:
            log.warning("writing the ISRs of %d partition(s) failed: %s", len(items), str(exc) or type(exc).__name__)
        finally:
            for tp in queued:
                self._isr_writes.discard(tp)

    # -- the follower's side ----------------------------------------------------------------------

    def address_of(self, broker_id: int) -> tuple[str, int] | None:
        """Where to fetch from broker `broker_id`: its `inter.broker.listener.name` endpoint (its address when its
        endpoints are unknown)."""
        if broker_id in self.cache.endpoints:
            return self.cache.endpoint(broker_id, self.config.inter_broker_listener_name)
        found = self.cache.brokers.get(broker_id)
        return None if found is None else (found[0], found[1])

    def is_throttled(self, tp: TopicPartition) -> bool:
        """Whether copying `tp` counts against the replication throttle (a reassignment's new replica)."""
        if self.throttle.rate is None:
            return False
        info = self.cache.partition(*tp)
        if info is not None and self.broker_id in info.isr:
            return False  # in sync already (as Kafka: only a copy catching up is throttled)
        spec = self.cache.configs.get(tp[0], {}).get("follower.replication.throttled.replicas")
        return throttled(spec, tp[1], self.broker_id)

    def follower_log(self, topic: str, partition: int) -> PartitionLog | None:
        if (topic, partition) not in self.following or self.logs.is_offline((topic, partition)):
            return None
        return self.logs.get(topic, partition)

    def known_high_watermark(self, tp: TopicPartition) -> int:
        return self.follower_hw.get(tp, self.logs.high_watermarks.get(tp, 0))

    def epoch_cache(self, tp: TopicPartition, plog: PartitionLog) -> LeaderEpochCache:
        cache = self.epochs.get(tp)
        if cache is None or cache.path.parent != plog.dir:
            cache = self.epochs[tp] = LeaderEpochCache.load(plog.dir, lambda offset: (
                (h.base_offset, h.partition_leader_epoch)
                for h in plog.batch_headers_from(max(offset, plog.log_start_offset))
            ), plog.log_end_offset, self.logs.note_unsynced)  # fmt: skip
        return cache

    def end_offset_for(self, tp: TopicPartition, plog: PartitionLog, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch's answer: the largest epoch ≤ `epoch` this log knows and where it ends."""
        return self.epoch_cache(tp, plog).end_offset_for(epoch, plog.log_end_offset)

    def latest_epoch(self, tp: TopicPartition, plog: PartitionLog) -> int:
        return self.epoch_cache(tp, plog).latest_epoch

    def truncation_point(self, tp: TopicPartition, plog: PartitionLog, asked: int, leader_epoch: int,
                         leader_end: int) -> int:  # fmt: skip
        """Where a new follower's copy must end, given the leader's answer (`leader_epoch`, `leader_end`) for the
        copy's latest epoch `asked`: at the end of the latest epoch both logs share (KIP-279), never past the
        copy's end; with no shared epoch, at the copy's high watermark."""
        leo = plog.log_end_offset
        if leader_epoch == UNDEFINED or leader_end < 0:
            return min(self.known_high_watermark(tp), leo)
        if leader_epoch == asked:
            return min(leader_end, leo)
        _, own_end = self.epoch_cache(tp, plog).end_offset_for(leader_epoch, leo)
        return min(leader_end, own_end if own_end >= 0 else leo, leo)

    def append_copy(self, tp: TopicPartition, plog: PartitionLog, data: memoryview) -> None:
        """Append the leader's batches as they are; note new leader epochs and idempotent producers' sequences."""
        validated = plog.validate(data, client=False)
        plog.append(data, assign_offsets=False, validated=validated)
        headers = [BatchHeader(*HEADER.unpack_from(data, pos)) for pos, *_ in validated]
        cache = self.epoch_cache(tp, plog)
        for h in headers:
            if h.partition_leader_epoch > cache.latest_epoch:
                cache.assign(h.partition_leader_epoch, h.base_offset)
        if any(h.producer_id >= 0 for h in headers):  # (transactions too: a follower that leads next has them)
            positions = {h.base_offset: pos for h, (pos, *_) in zip(headers, validated, strict=True)}
            states = plog.producer_states
            done = states.record_batches(headers, lambda h: marker_in(data, positions[h.base_offset]))
            note_completed(plog, states, done)

    def follower_high_watermark(self, tp: TopicPartition, plog: PartitionLog, leader_hw: int) -> None:
        self.follower_hw[tp] = max(min(leader_hw, plog.log_end_offset), 0)

    def follower_log_start(self, tp: TopicPartition, plog: PartitionLog, leader_start: int) -> None:
        """Take the leader's log start offset (moved by DeleteRecords or its retention), up to the copy's end:
        whole segments below it go, and the next fetch tells the leader (Kafka's `LeaderOffsetIncremented`)."""
        if leader_start > plog.log_start_offset:
            deleted = plog.advance_log_start(leader_start)
            log.info("%s-%d: log start offset moved to %d as the leader's (%d segment(s) deleted)",
                     *tp, plog.log_start_offset, len(deleted))  # fmt: skip

    def truncate_copy(self, tp: TopicPartition, plog: PartitionLog, offset: int, why: str) -> None:
        """Cut the copy back to `offset` (what it holds past there may differ from the leader's log)."""
        end = plog.log_end_offset
        if offset >= end:
            return
        log.info("%s-%d %s: truncating its log from %d to %d", *tp, why, end, offset)
        plog.truncate_to(offset)
        self.epoch_cache(tp, plog).truncate_from_end(plog.log_end_offset)
        # as Kafka's truncateTo: the producers' state (open transactions, the markers that closed them) as
        # the log now leaves it, from the newest snapshot below the cut and the batches after it
        try:
            plog.producer_states = load_states(plog)
        except Exception as exc:  # (an unreadable segment): unknown, not the stale state of the cut log
            log.error("%s-%d: rebuilding its producers after the truncation failed (%s): their state is unknown "
                      "until a restart reads the whole log (its snapshots deleted)", *tp, exc)  # fmt: skip
            plog.producer_states = forget_states(plog)

    def reset_copy(self, tp: TopicPartition, plog: PartitionLog, offset: int) -> None:
        plog.reset_to(offset)
        self.epoch_cache(tp, plog).clear()
        plog.producer_states = ProducerStates()
        producer_snapshot.delete_from(plog.dir, 0)  # (they describe the log that is gone)
        self.follower_hw[tp] = offset
