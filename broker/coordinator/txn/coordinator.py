"""The transaction coordinator (KIP-98): InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, the timeout sweep and the completion of ended transactions.

A transactional id is coordinated by `coordinator_for(id, live brokers)`, the hash groups use. Its state
(`broker.coordinator.txn.state.TxnMeta`) lives in ZooKeeper (`broker.coordinator.txn.store`), cached here with the
znode version it was read or written at; every change is a write conditional on that version, so a broker
that lost the id to another (the live brokers changed) fails its write and answers NOT_COORDINATOR. Changes
of one id are serialised by a lock of its own.

Ending a transaction (EndTxn, a timeout, an InitProducerId that finds it open) writes PrepareCommit or
PrepareAbort, then the markers (`broker.coordinator.txn.markers_sender`: WriteTxnMarkers to every partition's
leader, with the state's `coordinator_epoch`, see `broker.coordinator.txn.state`), then, in one ZooKeeper multi-op
(`txn_store.finish`), on commit the offsets TxnOffsetCommit held become the groups' committed offsets, the
held copies go, and CompleteCommit or CompleteAbort is written. Until that multi-op succeeds (a slow or
failing ZooKeeper: the sweep retries) the id stays in its Prepare state: requests of the id meanwhile get
CONCURRENT_TRANSACTIONS, OffsetFetch require_stable UNSTABLE_OFFSET_COMMIT. EndTxn is answered once its
transaction is complete (or after `END_WAIT_S`, while completion goes on).

A broker that becomes an id's coordinator (start-up, a change of the live brokers) reads its state and
finishes a Prepare it finds, sending the markers again (a repeated marker is harmless) after a conditional
write of its own (the Prepare state written again, its coordinator epoch raised by one): above the one the
previous coordinator used, so the partitions fence that one's markers still in flight (a zombie
coordinator's late COMMIT would otherwise close the producer's next transaction). A completion is cancelled
when its id moves to another broker; the states cached here are forgotten (read again) when the ZooKeeper
session changes (it expired: others may have taken the ids over), and between retry rounds a completion
checks that the session is the one it began in and that the id's znode is still at its own version. The sweep, every
`transaction.abort.timed.out.transaction.cleanup.interval.ms`, aborts Ongoing transactions older than their
timeout with the producer epoch raised (Kafka 2.8: the producer is fenced), and removes ids unused for
`transactional.id.expiration.ms`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import KazooException

from broker.coordinator.group.coordinator import coordinator_for
from broker.coordinator.txn import state as st
from broker.coordinator.txn import store as txn_store
from broker.coordinator.txn.markers_sender import MarkerSender, Superseded
from broker.coordinator.txn.state import TopicPartition, TxnMeta, TxnState
from broker.protocol.errors import ErrorCode
from broker.zk.paths import StoredOffset

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from broker.coordinator.txn.interfaces import ClusterMetadata, CoordinatorConfig

log = logging.getLogger(__name__)

#: how long EndTxn waits for its markers before answering (completion goes on after)
END_WAIT_S = 10.0


class NotCoordinator(Exception):
    """This broker does not (or no longer) coordinate the id."""


def _session_of(zk: KazooClient | None) -> int | None:
    """The ZooKeeper session's id: kept through a connection loss, a new one after an expiry; None: none. (kazoo's
    `client_id` is None while merely disconnected, which is no reason to drop what is cached.)"""
    return getattr(zk, "_session_id", None) if zk is not None else None


def _now_ms() -> int:
    return int(time.time() * 1000)


class TxnCoordinator:
    """One broker's transaction coordinator."""

    def __init__(self, broker_id: int, config: CoordinatorConfig, cache: ClusterMetadata, *,
                 zk: Callable[[], KazooClient | None], blocking: Callable[..., Awaitable[Any]],
                 new_producer_id: Callable[[], Awaitable[int]],
                 committed: Callable[[str, dict[TopicPartition, StoredOffset]], None] = lambda g, o: None,
                 endpoint: Callable[[int], tuple[str, int] | None]) -> None:  # fmt: skip
        self.id = broker_id
        self.cache = cache
        self._zk = zk
        self._blocking = blocking
        self._new_pid = new_producer_id
        self._committed = committed  # told a group's offsets a commit wrote (the group store's memory of them)
        props = config.props
        self.max_timeout_ms = int(props.get("transaction.max.timeout.ms", 900000))
        self.expiration_ms = int(props.get("transactional.id.expiration.ms", 604800000))
        self.sweep_interval_ms = int(props.get("transaction.abort.timed.out.transaction.cleanup.interval.ms", 10000))
        self.markers = MarkerSender(broker_id, config, cache, endpoint)
        self._txns: dict[str, tuple[TxnMeta, int]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._completing: dict[str, asyncio.Task] = {}
        self._sweeper: asyncio.Task | None = None
        self._session: int | None = None  # the ZooKeeper session the cached states were read in
        self.serving = False  # from `start`: the broker's metadata is loaded (a marker needs every topic known)
        self.closing = False

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Serve, once the broker's metadata cache holds every topic: before that, a Prepare state read from
        ZooKeeper would be completed against a cache that does not know its partitions (their markers given
        up as if the topics were deleted, leaving the transaction open in their logs)."""
        self.serving = True
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_loop())

    async def close(self) -> None:
        self.closing = True
        tasks = [t for t in (self._sweeper, *self._completing.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        await self.markers.close()

    def coordinates(self, txn_id: str) -> bool:
        """Whether this broker coordinates the id now (NOT_COORDINATOR otherwise: the client looks again)."""
        return self.serving and not self.closing and coordinator_for(txn_id, self.cache.brokers) == self.id

    def brokers_changed(self) -> None:
        """The live brokers changed: forget the ids now coordinated elsewhere; take over (at the next sweep,
        run now) those that moved here."""
        for txn_id in [t for t in self._txns if not self.coordinates(t)]:
            log.info("transactional id %s moved to broker %d", txn_id, coordinator_for(txn_id, self.cache.brokers))
            self._txns.pop(txn_id, None)
        for txn_id, task in list(self._completing.items()):  # (its new coordinator completes it)
            if not self.coordinates(txn_id):
                task.cancel()
        if self._sweeper is not None and not self.closing:
            asyncio.get_running_loop().create_task(self._take_over())

    # -- state -------------------------------------------------------------------------------------

    def _lock(self, txn_id: str) -> asyncio.Lock:
        lock = self._locks.get(txn_id)
        if lock is None:
            lock = self._locks[txn_id] = asyncio.Lock()
        return lock

    def _check_session(self) -> None:
        """A new ZooKeeper session (the last one expired: other brokers may have taken ids over and changed
        them): forget every cached state and stop the completions under way; states are read again."""
        session = _session_of(self._zk())
        if session == self._session:
            return
        if self._txns or self._completing:
            log.info("transaction coordinator: ZooKeeper session changed; %d cached states dropped, %d completions "
                     "stopped (read again from ZooKeeper)", len(self._txns), len(self._completing))  # fmt: skip
        self._txns.clear()
        for task in self._completing.values():
            task.cancel()
        self._session = session

    async def _get(self, txn_id: str) -> tuple[TxnMeta, int] | None:
        """The id's state (read from ZooKeeper when not cached; a Prepare found there is completed)."""
        if not self.coordinates(txn_id):
            raise NotCoordinator(txn_id)
        self._check_session()
        got = self._txns.get(txn_id)
        if got is None:
            zk = self._zk()
            if zk is None:
                raise NotCoordinator(txn_id)
            got = await self._blocking(txn_store.load, zk, txn_id)
            if got is None:
                return None
            if not self.coordinates(txn_id):
                raise NotCoordinator(txn_id)
            self._txns[txn_id] = got
            if got[0].state.preparing:
                log.info("transactional id %s: taken over in %s; completing it", txn_id, got[0].state)
                self._complete_later(txn_id, fresh=False)
        return got

    async def _put(self, txn_id: str, meta: TxnMeta, version: int | None) -> int:
        """Write the id's next state (version None: create it); NotCoordinator when another broker won."""
        zk = self._zk()
        if zk is None:
            raise NotCoordinator(txn_id)
        if meta.state.preparing and meta.coordinator_epoch < 0 and version is not None:
            meta = replace(meta, coordinator_epoch=version + 1)  # (first recorded: this write's own version)
        try:
            if version is None:
                new_version = await self._blocking(txn_store.create, zk, txn_id, meta)
            else:
                new_version = await self._blocking(txn_store.update, zk, txn_id, meta, version)
        except txn_store.Fenced:
            self._txns.pop(txn_id, None)
            log.info("transactional id %s: changed by another coordinator; not coordinating it here", txn_id)
            raise NotCoordinator(txn_id) from None
        self._txns[txn_id] = (meta, new_version)
        return new_version

    def _zk_failed(self, txn_id: str | None, exc: Exception) -> ErrorCode:
        """A ZooKeeper failure mid-request: COORDINATOR_NOT_AVAILABLE (retriable); the id's cached state is
        dropped (a write whose answer was lost may have landed) and read again at its next request."""
        if txn_id is not None:
            self._txns.pop(txn_id, None)
        log.warning("transaction coordinator: ZooKeeper failed (%s); answering COORDINATOR_NOT_AVAILABLE",
                    type(exc).__name__)  # fmt: skip
        return ErrorCode.COORDINATOR_NOT_AVAILABLE

    # -- requests ----------------------------------------------------------------------------------

    async def init_producer_id(self, txn_id: str, timeout_ms: int, producer_id: int = -1,
                               producer_epoch: int = -1) -> tuple[ErrorCode, int, int]:  # fmt: skip
        """(error, producer id, epoch) for InitProducerId with a transactional id."""
        if timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1
        try:
            async with self._lock(txn_id):
                got = await self._get(txn_id)
                now = _now_ms()
                if got is None:
                    meta = st.next_producer(None, await self._new_pid(), timeout_ms, now)
                    await self._put(txn_id, meta, None)
                    log.info("transactional id %s: producer id %d epoch 0", txn_id, meta.producer_id)
                    return ErrorCode.NONE, meta.producer_id, 0
                meta, version = got
                if (
                    producer_id >= 0
                    and (producer_id, producer_epoch) != (meta.producer_id, meta.producer_epoch)
                    and (producer_id, producer_epoch) != (meta.producer_id, meta.last_producer_epoch)
                ):
                    return ErrorCode.PRODUCER_FENCED, -1, -1  # (KIP-360: not the id's producer any more)
                if meta.state.preparing:
                    return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
                if producer_id >= 0 and producer_epoch == meta.last_producer_epoch and meta.state.open:
                    return ErrorCode.NONE, meta.producer_id, meta.producer_epoch  # (a retry of the bump it got)
                if meta.state == TxnState.ONGOING:  # abort it first, fencing its producer
                    aborting = st.abort_with_bump(meta, now)
                    await self._put(txn_id, aborting, version)
                    log.info("transactional id %s: open transaction aborted for a new producer", txn_id)
                    self._complete_later(txn_id, fresh=True)
                    return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
                new_pid = -1
                if meta.producer_epoch + 1 >= st.MAX_EPOCH:
                    new_pid = await self._new_pid()
                nxt = st.next_producer(meta, new_pid, timeout_ms, now)
                await self._put(txn_id, nxt, version)
                return ErrorCode.NONE, nxt.producer_id, nxt.producer_epoch
        except NotCoordinator:
            return ErrorCode.NOT_COORDINATOR, -1, -1
        except KazooException as exc:
            return self._zk_failed(txn_id, exc), -1, -1

    async def add_to_txn(self, txn_id: str, producer_id: int, producer_epoch: int,
                         partitions: set[TopicPartition], groups: set[str]) -> ErrorCode:  # fmt: skip
        """AddPartitionsToTxn (partitions) or AddOffsetsToTxn (a group): PRODUCER_FENCED is the caller's to map."""
        try:
            async with self._lock(txn_id):
                got = await self._get(txn_id)
                meta, version = got if got is not None else (None, -1)
                error = st.check_producer(meta, producer_id, producer_epoch)
                if error or meta is None:
                    return error or ErrorCode.INVALID_PRODUCER_ID_MAPPING
                error, nxt = st.add_to_txn(meta, partitions, groups, _now_ms())
                if nxt is not None and not txn_store.fits(nxt):
                    log.warning("transactional id %s: %d partitions and %d groups would not fit its ZooKeeper "
                                "znode (%d KiB at most); not added (UNKNOWN_SERVER_ERROR)", txn_id,
                                len(nxt.partitions), len(nxt.groups), txn_store.STATE_MAX_BYTES // 1024)  # fmt: skip
                    return ErrorCode.UNKNOWN_SERVER_ERROR
                if nxt is not None:
                    await self._put(txn_id, nxt, version)
                return error
        except NotCoordinator:
            return ErrorCode.NOT_COORDINATOR
        except KazooException as exc:
            return self._zk_failed(txn_id, exc)

    async def end_txn(self, txn_id: str, producer_id: int, producer_epoch: int, commit: bool) -> ErrorCode:
        try:
            async with self._lock(txn_id):
                got = await self._get(txn_id)
                meta, version = got if got is not None else (None, -1)
                error = st.check_producer(meta, producer_id, producer_epoch)
                if error or meta is None:
                    return error or ErrorCode.INVALID_PRODUCER_ID_MAPPING
                error, nxt = st.end_txn(meta, commit, _now_ms())
                if nxt is None:
                    return error
                await self._put(txn_id, nxt, version)
                task = self._complete_later(txn_id, fresh=True)
        except NotCoordinator:
            return ErrorCode.NOT_COORDINATOR
        except KazooException as exc:
            return self._zk_failed(txn_id, exc)
        with contextlib.suppress(TimeoutError, asyncio.CancelledError, Exception):
            await asyncio.wait_for(asyncio.shield(task), END_WAIT_S)
        return ErrorCode.NONE  # (the Prepare state is durable: the outcome is decided)

    async def txn_offsets_allowed(self, txn_id: str, group: str, producer_id: int, producer_epoch: int) -> ErrorCode:
        """Whether a TxnOffsetCommit of (producer id, epoch) may hold offsets for `group` in `txn_id`'s
        transaction: the group coordinator asks ZooKeeper (it may not coordinate the transaction)."""
        zk = self._zk()
        if zk is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        try:
            got = await self._blocking(txn_store.load, zk, txn_id)
        except KazooException as exc:
            return self._zk_failed(None, exc)
        return st.txn_offsets_error(got[0] if got is not None else None, group, producer_id, producer_epoch)

    # -- completion --------------------------------------------------------------------------------

    def _complete_later(self, txn_id: str, *, fresh: bool) -> asyncio.Task:
        """Complete the id's Prepare state in a task (the one under way, if any). `fresh`: this broker has just
        written that state (its version is this coordinator's epoch); otherwise (taken over, or a completion
        that failed) it is written again first."""
        task = self._completing.get(txn_id)
        if task is None or task.done():
            task = self._completing[txn_id] = asyncio.get_running_loop().create_task(self._complete(txn_id, fresh))
        return task

    async def _complete(self, txn_id: str, fresh: bool) -> None:
        """A write of its own unless `fresh`, the markers, then the held offsets, their drop and the Complete
        state in one multi-op."""
        try:
            zk = self._zk()
            if zk is None:
                raise NotCoordinator(txn_id)
            session = _session_of(zk)
            async with self._lock(txn_id):
                got = self._txns.get(txn_id)
                if got is None or not got[0].state.preparing:
                    return
                meta, version = got
                if not fresh:  # (its coordinator epoch one above any earlier coordinator's markers)
                    meta = replace(meta, update_ms=_now_ms(), coordinator_epoch=st.marker_epoch(meta, version) + 1)
                    version = await self._put(txn_id, meta, version)
                epoch = st.marker_epoch(meta, version)
            commit = meta.state == TxnState.PREPARE_COMMIT
            checks = 0

            async def still_mine() -> bool:
                nonlocal checks
                checks += 1
                cached = self._txns.get(txn_id)
                if not self.coordinates(txn_id) or cached is None or cached[1] != version:
                    return False
                if not zk.connected or _session_of(zk) != session:
                    return False  # (a session that expired meanwhile: others may own the id now)
                if checks == 1:
                    return True  # (its own write, just made)
                now = await self._blocking(txn_store.load, zk, txn_id)
                return now is not None and now[1] == version

            await self.markers.write(txn_id, meta.producer_id, meta.producer_epoch, commit, epoch,
                                     set(meta.partitions), still_mine)  # fmt: skip
            async with self._lock(txn_id):
                now_got = self._txns.get(txn_id)
                if now_got is None or now_got[1] != version:
                    return
                done = st.completed(meta, _now_ms())
                try:
                    new_version, offsets = await self._blocking(txn_store.finish, zk, txn_id, meta, version, done)
                except txn_store.Fenced:
                    raise NotCoordinator(txn_id) from None
                self._txns[txn_id] = (done, new_version)
            for group, committed in offsets.items():
                self._committed(group, {tp: StoredOffset(o.offset, o.leader_epoch, o.metadata)
                                        for tp, o in committed.items()})  # fmt: skip
            log.debug("transactional id %s: transaction %s (producer %d epoch %d, %d partitions)", txn_id,
                      "committed" if commit else "aborted", meta.producer_id, meta.producer_epoch,
                      len(meta.partitions))  # fmt: skip
        except (Superseded, NotCoordinator):
            self._txns.pop(txn_id, None)
            log.info("transactional id %s: completion left to its new coordinator", txn_id)
        except asyncio.CancelledError:
            self._txns.pop(txn_id, None)  # (moved away, or the session changed: read again if it comes back)
            raise
        except KazooException as exc:
            log.warning("transactional id %s: completing the transaction failed on ZooKeeper (%s); retried by the "
                        "sweep", txn_id, type(exc).__name__)  # fmt: skip
            self._txns.pop(txn_id, None)
        except Exception:
            log.exception("transactional id %s: completing the transaction failed (retried by the sweep)", txn_id)
            self._txns.pop(txn_id, None)  # (read again, and completed, at the next sweep)
        finally:
            if self._completing.get(txn_id) is asyncio.current_task():
                self._completing.pop(txn_id, None)

    # -- the sweep ---------------------------------------------------------------------------------

    async def _sweep_loop(self) -> None:
        await self._take_over()
        while True:
            await asyncio.sleep(self.sweep_interval_ms / 1000)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction sweep failed")

    async def _take_over(self) -> None:
        """Read every id this broker coordinates and does not hold yet (completing its Prepare states)."""
        zk = self._zk()
        if zk is None:
            return
        try:
            for txn_id in await self._blocking(txn_store.ids, zk):
                if self.coordinates(txn_id) and txn_id not in self._txns:
                    with contextlib.suppress(NotCoordinator):
                        await self._get(txn_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("transaction coordinator: reading the transactional ids failed: %s", exc)

    async def sweep(self) -> None:
        """Abort timed-out transactions (epoch raised), remove expired ids, retry stuck completions."""
        self._check_session()
        await self._take_over()
        now = _now_ms()
        for txn_id, (meta, version) in list(self._txns.items()):
            if not self.coordinates(txn_id):
                self._txns.pop(txn_id, None)
                continue
            if meta.state.preparing:
                self._complete_later(txn_id, fresh=False)  # (a completion that failed: again, with a write of its own)
            elif st.timed_out(meta, now):
                with contextlib.suppress(NotCoordinator):
                    async with self._lock(txn_id):
                        cur = self._txns.get(txn_id)
                        if cur is None or cur[1] != version:
                            continue
                        log.info("transactional id %s: transaction open %d ms, over its timeout %d ms: aborting",
                                 txn_id, now - meta.start_ms, meta.timeout_ms)  # fmt: skip
                        await self._put(txn_id, st.abort_with_bump(meta, now), version)
                        self._complete_later(txn_id, fresh=True)
            elif st.expired(meta, now, self.expiration_ms):
                zk = self._zk()
                with contextlib.suppress(txn_store.Fenced):
                    if zk is not None:
                        await self._blocking(txn_store.delete, zk, txn_id, version)
                        log.info("transactional id %s expired (unused %d ms)", txn_id, now - meta.update_ms)
                self._txns.pop(txn_id, None)

    # -- description -------------------------------------------------------------------------------

    async def describe(self, txn_id: str) -> dict[str, Any]:
        """DescribeTransactions' entry for one id."""
        out: dict[str, Any] = {"transactional_id": txn_id, "error_code": ErrorCode.NONE, "transaction_state": "",
                               "transaction_timeout_ms": 0, "topics": []}  # fmt: skip
        try:
            got = await self._get(txn_id)
        except NotCoordinator:
            out["error_code"] = ErrorCode.NOT_COORDINATOR
            return out
        except KazooException as exc:
            out["error_code"] = self._zk_failed(txn_id, exc)
            return out
        if got is None:
            out["error_code"] = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
            return out
        meta = got[0]
        topics: dict[str, list[int]] = {}
        for t, p in sorted(meta.partitions):
            topics.setdefault(t, []).append(p)
        out.update(transaction_state=str(meta.state), transaction_timeout_ms=meta.timeout_ms,
                   transaction_start_time_ms=meta.start_ms if meta.state == TxnState.ONGOING else -1,
                   producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
                   topics=[{"topic": t, "partitions": ps} for t, ps in topics.items()])  # fmt: skip
        return out

    async def listing(self) -> list[tuple[str, TxnMeta]]:
        """The ids this broker coordinates, with their states (read from ZooKeeper)."""
        zk = self._zk()
        if zk is None:
            return []
        out = []
        for txn_id in await self._blocking(txn_store.ids, zk):
            if not self.coordinates(txn_id):
                continue
            with contextlib.suppress(NotCoordinator):
                got = await self._get(txn_id)
                if got is not None:
                    out.append((txn_id, got[0]))
        return out
