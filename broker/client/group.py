"""kafkactl's group consumer coordinated through ZooKeeper, the paper's way (Algorithm 1).

Each member registers an ephemeral `/consumers/<g>/ids/<id>` with its subscription and watches the
broker registry, the group's member registry and its topics' partition lists. Any change triggers a
rebalance (debounced): for every subscribed topic sort the partitions and the consumers subscribed to
it, take this consumer's contiguous range (Kafka's range assignor: N/C each, the first N%C one more),
commit and release everything owned, then claim each chosen partition with an ephemeral
`/consumers/<g>/owners/<t>/<p>`. A claim still held by another member means notifications reached
the members at different times: release what this round claimed, back off a random while and retry
(the paper: it settles within a few retries). A rebalance that leaves the range unchanged and still
owned is a no-op.

A newly owned partition starts at the group's committed offset (`/consumers/<g>/offsets/<t>/`), or
where `auto.offset.reset` says (earliest / latest), committed at once so a crash before the first
auto-commit cannot move a `latest` start past messages produced meanwhile.

Delivery is at least once. Offsets committed are positions after records already handed to the
application: `getmany` records the position after the last record it returned per partition; a batch
counts as processed once the application asks for the next one (or calls `commit` / `close`), and
the background auto-commit (every `auto.commit.interval.ms`) and the commit before a rebalance's
release write only processed positions. Prefetched but unreturned records are never committed and
are dropped with their partition when a rebalance takes it away.

A member whose ZooKeeper session expires has lost its registration and ownerships: it stops handing
out and committing, rejoins with a new session and rebalances; partitions nobody committed to
meanwhile continue from its own position, the others from the group's committed offsets.

At start the ZooKeeper is checked to be the brokers' (`group_mode.check_zookeeper`: its /cluster/id is the
cluster id of the brokers' Metadata). The ZooKeeper path knows no ACLs: with an authorizer on the brokers
kafkactl uses `broker.client.kafka_group` instead (`group_mode` says why).

Threads: kazoo runs watch callbacks on its own thread; they only hop to the event loop
(`call_soon_threadsafe`). Every blocking kazoo call runs on one private worker thread (so commits,
releases and claims reach ZooKeeper in the order they were issued), never on the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import random
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionLoss, KazooException, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from broker.client.aio import AsyncCluster
from broker.client.consumer import ConsumeError
from broker.client.group_member import GroupError, GroupMember, TopicPartition, describe_assignment, why
from broker.client.group_mode import check_zookeeper
from broker.errors import KafkactlError
from broker.zk import client as zk_client
from broker.zk import consumers, paths

log = logging.getLogger(__name__)

T = TypeVar("T")


# -- the pure part: range assignment --------------------------------------------------------------


def assign_range(partitions: Sequence[int], consumers_: Sequence[str], me: str) -> list[int]:
    """`me`'s partitions of one topic by Algorithm 1: sort both lists, cut the partitions into
    contiguous ranges, N // C each, the first N % C consumers one more (Kafka's range assignor).

    A consumer not among `consumers_` gets nothing; duplicates are ignored.
    """
    parts = sorted(set(partitions))
    members = sorted(set(consumers_))
    if me not in members or not parts:
        return []
    j = members.index(me)
    per, extra = divmod(len(parts), len(members))
    start = j * per + min(j, extra)
    return parts[start : start + per + (1 if j < extra else 0)]


def range_assignment(partitions: dict[str, Sequence[int]],
                     subscriptions: dict[str, Sequence[str]]) -> dict[str, list[TopicPartition]]:  # fmt: skip
    """Every member's partitions: {consumer id: [(topic, partition), ...]} for `partitions` by topic and
    `subscriptions` {consumer id: topics}, each topic split by `assign_range` among its subscribers."""
    out: dict[str, list[TopicPartition]] = {c: [] for c in sorted(subscriptions)}
    for topic in sorted(partitions):
        subscribers = [c for c, ts in subscriptions.items() if topic in ts]
        for c in subscribers:
            out[c].extend((topic, p) for p in assign_range(partitions[topic], subscribers, c))
    return out


class _Registries(NamedTuple):
    members: dict[str, list[str]]
    partitions: dict[str, list[int]]
    mine: set[TopicPartition]  # owner znodes of the subscribed topics held by this consumer's session


# -- the consumer ---------------------------------------------------------------------------------


class GroupConsumer(GroupMember):
    """A member of a ZooKeeper-coordinated consumer group over an AsyncConsumer.

    Use it as `async with GroupConsumer(bootstrap, zookeeper, "g", ["t"]) as group:` and then either
    `async for batch in group:` (lists of one partition's records, in offset order) or `getmany()`.
    Settings are GroupConfig's and ConsumerConfig's field names as keywords.
    """

    _ROLE = "coordinator"
    _UNCLEAN = "the session's end releases what is left"
    _LEAVE_ERRORS = (KazooException, KafkactlError, TimeoutError)

    def __init__(self, bootstrap: str, zookeeper: str, group_id: str, topics: Sequence[str], *,
                 on_assign: Callable[[list[TopicPartition]], None] | None = None,
                 consumer_id: str | None = None, require_topics: bool = False, **settings: Any) -> None:  # fmt: skip
        """`require_topics`: a subscribed topic missing from ZooKeeper is an error at start (else it is
        assigned once created)."""
        super().__init__(bootstrap, group_id, topics, on_assign=on_assign, consumer_id=consumer_id, **settings)
        self.require_topics = require_topics
        self.zookeeper = zookeeper
        self._zk: KazooClient | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kafkactl-group-zk")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dirty = asyncio.Event()
        self._registered = False
        self._transient = 0  # rebalances in a row interrupted by ZooKeeper or broker trouble
        self._session = 0  # ZooKeeper sessions lost so far
        self._next_commit = 0.0
        self._watches: list[ChildrenWatch | DataWatch] = []  # they end with the session (or return False)

    # -- life cycle: GroupMember's hooks ------------------------------------------------------------

    async def _connect(self) -> None:
        """Connect to ZooKeeper (the brokers' own), register and watch; the first rebalance is due at once."""
        self._loop = asyncio.get_running_loop()
        cfg = self.config
        self._zk = await self._zk_call(functools.partial(
            zk_client.connect, self.zookeeper, session_timeout_s=cfg.zookeeper_session_timeout_ms / 1000,
            connect_timeout_s=max(cfg.zookeeper_connection_timeout_ms, 1000) / 1000))  # fmt: skip
        await self._zk_call(self._check_cluster)
        self._zk.add_listener(self._on_state)
        await self._zk_call(self._register)
        await self._zk_call(self._watch)
        self._next_commit = self._loop.time() + cfg.auto_commit_interval_ms / 1000
        self._dirty.set()

    def _can_leave(self) -> bool:
        return self._zk is not None

    async def _leave_group(self) -> None:
        """Release the partitions and deregister."""
        await self._zk_call(self._release, list(self._owned))
        self._owned = []
        if self._registered:
            await self._zk_call(consumers.deregister, self._zk, self.group, self.consumer_id)
            self._registered = False

    async def _disconnect(self) -> None:
        if self._zk is not None:
            zk, self._zk = self._zk, None
            with contextlib.suppress(Exception):
                async with asyncio.timeout(10):
                    await self._zk_call(zk_client.close, zk)
        self._executor.shutdown(wait=False)

    # -- ZooKeeper plumbing ---------------------------------------------------------------------------

    async def _zk_call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking kazoo call on the private worker thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _poke(self) -> None:
        """From any thread: a registry changed, rebalance soon."""
        loop = self._loop
        if loop is None or self._closing:
            return
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(self._dirty.set)

    def _on_state(self, state: str) -> None:
        """kazoo's session listener (kazoo's thread): after a lost session, re-register and rebalance."""
        loop = self._loop
        if self._closing or loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            if state == KazooState.LOST:
                loop.call_soon_threadsafe(self._session_lost)
            elif state == KazooState.CONNECTED:
                loop.call_soon_threadsafe(self._dirty.set)

    def _session_lost(self) -> None:
        """The session expired: its ephemerals (registration, ownerships) are gone and other members may
        already consume our partitions. Stop handing out and committing until a rebalance in a new session."""
        if self._closing:
            return
        self._session += 1
        self._registered = False
        self._settled = False
        self._reported = None
        log.warning("group %s: ZooKeeper session expired; rejoining the group", self.group)

    def _session_id(self, zk: KazooClient) -> int:
        """This client's session id; ConnectionLoss while it has none (disconnected)."""
        cid = zk.client_id
        if cid is None:
            raise ConnectionLoss("not connected to ZooKeeper")
        return cid[0]

    def _check_cluster(self) -> None:
        """Refuse another cluster's ZooKeeper (its /cluster/id is not the brokers' cluster id): its registries
        would coordinate a group the brokers know nothing of."""
        assert self._zk is not None
        check_zookeeper(self._zk, self.zookeeper, self.bootstrap, self.consumer.cluster.cluster_id,
                        self.topics if self.require_topics else ())  # fmt: skip

    def _register(self) -> None:
        zk = self._zk
        assert zk is not None
        try:
            consumers.register(zk, self.group, self.consumer_id, self.topics)
        except NodeExistsError:  # this session's own node (a retried create)
            _, stat = zk.get(paths.group_member(self.group, self.consumer_id))
            if stat.ephemeralOwner != self._session_id(zk):
                raise GroupError(f"consumer id {self.consumer_id} is taken in group {self.group}") from None
        self._registered = True

    def _watch(self) -> None:
        """Watch the broker registry, the group's members and each topic's partitions."""
        zk = self._zk
        assert zk is not None

        def changed(*_: Any) -> bool | None:
            if self._closing:
                return False  # stops the watch
            self._poke()
            return None

        with contextlib.suppress(NoNodeError):
            self._watches.append(ChildrenWatch(zk, paths.BROKER_IDS, changed))
        self._watches.append(ChildrenWatch(zk, paths.group_ids(self.group), changed))
        for topic in self.topics:
            self._watches.append(DataWatch(zk, paths.topic(topic), changed))

    def _read_registries(self) -> _Registries:
        zk = self._zk
        assert zk is not None
        members = consumers.members(zk, self.group)
        partitions: dict[str, list[int]] = {}
        for topic in self.topics:
            try:
                data, _ = zk.get(paths.topic(topic))
                partitions[topic] = sorted(paths.parse_assignment(data))
            except NoNodeError:
                partitions[topic] = []
        mine: set[TopicPartition] = set()
        session = self._session_id(zk)
        # every owner znode of this session, also one a failed round left behind
        candidates = set(self._owned) | {(t, p) for t, ps in partitions.items() for p in ps}
        for tp in sorted(candidates):
            try:
                data, stat = zk.get(paths.group_owner(self.group, *tp))
            except NoNodeError:
                continue
            if data.decode() == self.consumer_id and stat.ephemeralOwner == session:
                mine.add(tp)
        return _Registries(members, partitions, mine)

    def _release(self, tps: list[TopicPartition]) -> None:
        zk = self._zk
        if zk is None:
            return
        for topic, p in tps:
            consumers.release(zk, self.group, topic, p, self.consumer_id)

    def _claim(self, tps: list[TopicPartition]) -> dict[TopicPartition, str]:
        """Claim every partition; on any conflict release what this call claimed. Returns {tp: holder} of
        the conflicts (empty: all claimed)."""
        zk = self._zk
        assert zk is not None
        claimed: list[TopicPartition] = []
        conflicts: dict[TopicPartition, str] = {}
        for tp in tps:
            try:
                self._session_id(zk)
                ok = consumers.claim(zk, self.group, tp[0], tp[1], self.consumer_id)
            except (TypeError, KazooException) as exc:  # claim reads zk.client_id[0]: None when disconnected
                with contextlib.suppress(KazooException):
                    self._release(claimed)  # else the next round finds and releases them (`mine`)
                if isinstance(exc, TypeError):
                    raise ConnectionLoss("not connected to ZooKeeper") from None
                raise
            if ok:
                claimed.append(tp)
                continue
            try:
                holder = zk.get(paths.group_owner(self.group, *tp))[0].decode()
            except NoNodeError:
                holder = "(released meanwhile)"
            conflicts[tp] = holder
            break
        if conflicts:
            self._release(claimed)
        return conflicts

    # -- committing -----------------------------------------------------------------------------------

    async def _write_offsets(self, offsets: dict[TopicPartition, int], metadata: str) -> bool:
        if self._zk is None:
            return False
        await self._zk_call(consumers.commit, self._zk, self.group, offsets, metadata)
        return True

    # -- the coordinator: rebalances and auto-commits -------------------------------------------------

    async def _rounds(self) -> None:
        """Rebalance after registry changes; auto-commit processed positions every interval."""
        loop = asyncio.get_running_loop()
        cfg = self.config
        while not self._closing:
            timeout = max(self._next_commit - loop.time(), 0) if cfg.enable_auto_commit else None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._dirty.wait()
            if self._closing:
                return
            if self._dirty.is_set():
                await asyncio.sleep(cfg.rebalance_debounce_ms / 1000)
                self._dirty.clear()
                try:
                    async with self._lock:
                        await self._rebalance()
                    self._transient = 0
                    self._done_first()
                except GroupError as exc:
                    self._settled = False
                    self._failure = exc
                    self._done_first()
                except (KazooException, KafkactlError) as exc:  # ZooKeeper or a broker away for now: retry
                    self._transient += 1  # (`_settled` fell already if partitions were released)
                    if self._transient > 40:
                        self._failure = GroupError(f"group {self.group}: cannot rebalance: {why(exc)}")
                        self._done_first()
                    else:
                        log.warning("group %s: rebalance interrupted (%s); retrying", self.group, why(exc))
                        await asyncio.sleep(0.5)
                        self._dirty.set()
            if cfg.enable_auto_commit and loop.time() >= self._next_commit:
                self._next_commit = loop.time() + cfg.auto_commit_interval_ms / 1000
                if self._settled:  # not while rebalancing or after a lost session: maybe no longer ours
                    try:
                        await self._commit(self._processed_positions())
                    except KazooException as exc:
                        log.info("group %s: auto-commit failed (%s); next time", self.group, why(exc))

    async def _rebalance(self) -> None:
        """Algorithm 1 with retries: compute this member's ranges, release, claim; retry on a conflict."""
        cfg = self.config
        conflicts: dict[TopicPartition, str] = {}
        for attempt in range(1, max(cfg.rebalance_max_retries, 1) + 1):
            if self._closing:
                return
            session = self._session
            if not self._registered:
                await self._zk_call(self._register)
            reg = await self._zk_call(self._read_registries)
            if self.consumer_id not in reg.members:  # the session was lost and re-established
                await self._zk_call(self._register)
                reg.members[self.consumer_id] = list(self.topics)
            subscriptions = {c: ts for c, ts in reg.members.items()}
            wanted = range_assignment(reg.partitions, subscriptions)[self.consumer_id]
            if self._settled and wanted == self._owned and reg.mine == set(self._owned):
                self._report()
                return  # nothing moves for this member
            # release everything owned (after committing what the application has processed) ...
            owned = sorted(set(self._owned) | reg.mine)
            settled = self._settled
            if settled:  # only what this session still owns: a lost partition's new owner may be further on
                await self._commit(
                    {tp: self._processed[tp] for tp in owned if tp in self._processed and tp in reg.mine}
                )
            self._settled = False
            await self._zk_call(self._release, owned)
            self._owned = []
            # ... then claim the new range
            conflicts = await self._zk_call(self._claim, wanted)
            if not conflicts:
                self._owned = list(wanted)
                await self._take(wanted, previously=owned)
                if self._session != session:  # the session expired meanwhile: those claims are void
                    self._settled = False
                    self._dirty.set()
                return
            wait = random.uniform(0.2, 1.0) * cfg.rebalance_backoff_ms / 1000
            log.info("group %s: %s still owned by %s (attempt %d); retrying in %.2fs", self.group,
                     describe_assignment([t for t, _ in conflicts], list(conflicts)),
                     ", ".join(sorted(set(conflicts.values()))), attempt, wait)  # fmt: skip
            await asyncio.sleep(wait)
        await self._take([], previously=[], report=False)
        held = ", ".join(f"{t}-{p} by {c}" for (t, p), c in sorted(conflicts.items()))
        raise GroupError(f"group {self.group}: rebalance did not converge after {cfg.rebalance_max_retries} "
                         f"attempts (still held: {held or 'nothing'})")  # fmt: skip

    async def _take(self, wanted: list[TopicPartition], *, previously: list[TopicPartition],
                    report: bool = True) -> None:  # fmt: skip
        """Consume exactly `wanted` (already claimed): keep the state of partitions nobody else moved,
        start the others at the committed offset or by auto.offset.reset, drop the rest's buffers."""
        found = await self._zk_call(consumers.committed, self._zk, self.group, self.topics) if wanted else {}
        committed = {tp: c.offset for tp, c in found.items()}
        # nobody committed since this member did: its position and buffers stay valid
        keep = [tp for tp in wanted if tp in previously and tp in self._consumed and tp in self.consumer.positions
                and tp in committed and committed[tp] == self._last_committed.get(tp)]  # fmt: skip
        await self._known_to_metadata(wanted)
        fresh = await self._start_partitions(wanted, committed, keep)
        self._owned = list(wanted)
        self._settled = True
        if fresh:  # remember where a new group starts, so a crash cannot move `latest` forward
            await self._commit(fresh)
        self.generation += 1
        self._reported = None  # a rebalance that moved partitions is reported even if it ends where it began
        if report:
            self._report()

    async def _known_to_metadata(self, wanted: list[TopicPartition], wait_s: float = 15.0) -> None:
        """Wait until the brokers' metadata has every partition ZooKeeper lists (a topic just grown)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        topics = sorted({t for t, _ in wanted})
        while True:
            cluster = self.consumer.cluster
            missing = [tp for tp in wanted if cluster.leader(*tp) < 0 and not _offline(cluster, tp)]
            if not missing:
                return
            if loop.time() > deadline:
                raise ConsumeError(f"{missing[0][0]}-{missing[0][1]} has no leader in the brokers' metadata")
            with contextlib.suppress(KafkactlError):
                await cluster.refresh(topics)
            if any(cluster.leader(*tp) < 0 for tp in wanted):
                await asyncio.sleep(0.1)


def _offline(cluster: AsyncCluster, tp: TopicPartition) -> bool:
    """Known to the metadata, but without a leader because its brokers are down (nothing to wait for)."""
    meta = cluster.topics.get(tp[0])
    p = meta.partitions.get(tp[1]) if meta else None
    return p is not None and p.offline
