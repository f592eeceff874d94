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

A newly owned partition starts at the group's committed offset (`/consumers/<g>/offsets/<t>/<p>`), or
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
import dataclasses
import functools
import logging
import random
import re
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionLoss, KazooException, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from broker.client.aio import AsyncCluster
from broker.client.consumer import AsyncConsumer, ConsumeError, ConsumerConfig, ConsumerRecord, describe_partitions
from broker.client.group_mode import check_zookeeper
from broker.client.properties import typed
from broker.errors import KafkactlError, UsageError
from broker.protocol.errors import KafkaError
from broker.protocol.messages.fetch import EARLIEST, LATEST
from broker.zk import client as zk_client
from broker.zk import consumers, paths

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
T = TypeVar("T")


class GroupError(KafkaError):
    """The group consumer cannot go on (a rebalance that does not converge, no offset to start from); `code`
    is the coordinator's error when it refused (-1 otherwise)."""


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


def describe_assignment(topics: Sequence[str], assignment: Sequence[TopicPartition]) -> str:
    """`t[0,1,2] u[]`: a member's partitions per subscribed topic, for one-line rebalance reports."""
    return " ".join(f"{t}[{','.join(str(p) for tt, p in sorted(assignment) if tt == t)}]" for t in sorted(set(topics)))


# -- configuration --------------------------------------------------------------------------------


@dataclass
class GroupConfig:
    """Settings of the group itself (the fetch settings are the wrapped AsyncConsumer's)."""

    auto_offset_reset: str = "latest"  # earliest | latest | none (an error)
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5000
    zookeeper_session_timeout_ms: int = 6000  # the old ZooKeeper consumer's default
    zookeeper_connection_timeout_ms: int = 6000
    rebalance_max_retries: int = 20  # attempts of one rebalance before giving up
    rebalance_backoff_ms: int = 1000  # a conflict waits a random 20..100 % of this
    rebalance_debounce_ms: int = 100  # wait this long after a change for more changes
    # a member of the broker's coordinator (`broker.client.kafka_group`, with an authorizer) uses these instead
    # of the ZooKeeper ones above (Kafka's consumer settings; heartbeats more often than Kafka's 3 s default,
    # so a rebalance is noticed soon)
    session_timeout_ms: int = 10000
    heartbeat_interval_ms: int = 1000
    max_poll_interval_ms: int = 30000  # JoinGroup's rebalance timeout


_GROUP_FIELDS = {f.name for f in dataclasses.fields(GroupConfig)}
_CONSUMER_FIELDS = {f.name for f in dataclasses.fields(ConsumerConfig)}
_ISOLATION = {"read_uncommitted": 0, "read_committed": 1}


def settings_from_properties(props: dict[str, str]) -> dict[str, Any]:
    """Typed keyword settings of `GroupConsumer` from Kafka-named properties (`auto.commit.interval.ms`
    → `auto_commit_interval_ms=5000`); an unknown key or a bad value is a UsageError naming it."""
    defaults = {**dataclasses.asdict(ConsumerConfig()), **dataclasses.asdict(GroupConfig())}
    out: dict[str, Any] = {}
    for key, text in props.items():
        name = key.strip().replace(".", "_")
        if name in ("group_id", "bootstrap_servers", "zookeeper_connect", "security") or name not in defaults:
            raise UsageError(f"unknown consumer property {key!r}")
        value: Any
        if name == "isolation_level":
            if text not in _ISOLATION:
                raise UsageError(f"{key}: expected read_uncommitted or read_committed, not {text!r}")
            value = _ISOLATION[text]
        else:
            value = typed(key, text, defaults[name])
        out[name] = value
    return out


_GROUP_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def check_group_id(group: str) -> None:
    """A group id must be one znode name: letters, digits, '.', '_' and '-' (UsageError otherwise)."""
    if not group or not _GROUP_NAME.match(group) or group in (".", ".."):
        raise UsageError(f"group id {group!r}: use letters, digits, '.', '_' and '-'")


def new_consumer_id(group: str) -> str:
    """`<group>_<host>-<epoch ms>-<uuid8>`, the old ZooKeeper consumer's shape (sortable, unique)."""
    host = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname() or "host")
    return f"{group}_{host}-{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"


class _Registries(NamedTuple):
    members: dict[str, list[str]]
    partitions: dict[str, list[int]]
    mine: set[TopicPartition]  # owner znodes of the subscribed topics held by this consumer's session


# -- the consumer ---------------------------------------------------------------------------------


class GroupConsumer:
    """A member of a ZooKeeper-coordinated consumer group over an AsyncConsumer.

    Use it as `async with GroupConsumer(bootstrap, zookeeper, "g", ["t"]) as group:` and then either
    `async for batch in group:` (lists of one partition's records, in offset order) or `getmany()`.
    Settings are GroupConfig's and ConsumerConfig's field names as keywords.
    """

    def __init__(self, bootstrap: str, zookeeper: str, group_id: str, topics: Sequence[str], *,
                 on_assign: Callable[[list[TopicPartition]], None] | None = None,
                 consumer_id: str | None = None, require_topics: bool = False, **settings: Any) -> None:  # fmt: skip
        """`require_topics`: a subscribed topic missing from ZooKeeper is an error at start (else it is
        assigned once created)."""
        check_group_id(group_id)
        if not topics:
            raise UsageError("a group consumer needs at least one topic")
        self.bootstrap = bootstrap
        self.require_topics = require_topics
        self.config = GroupConfig()
        consumer_settings: dict[str, Any] = {}
        for key, value in settings.items():
            if key in _GROUP_FIELDS:
                setattr(self.config, key, value)
            elif key in _CONSUMER_FIELDS:
                consumer_settings[key] = value
            else:
                raise KafkactlError(f"unknown group consumer setting {key!r}")
        if self.config.auto_offset_reset not in ("earliest", "latest", "none"):
            raise UsageError(f"auto.offset.reset {self.config.auto_offset_reset!r}: expected earliest or latest")
        consumer_settings["auto_offset_reset"] = self.config.auto_offset_reset
        self.group = group_id
        self.topics = sorted(set(topics))
        self.zookeeper = zookeeper
        self.consumer_id = consumer_id or new_consumer_id(group_id)
        self.on_assign = on_assign
        self.consumer = AsyncConsumer(bootstrap, **consumer_settings)
        #: rebalances that completed (the first one makes it 1)
        self.generation = 0
        self._zk: KazooClient | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kafkactl-group-zk")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = asyncio.Lock()  # held while handing out records and for a whole rebalance
        self._dirty = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._first: asyncio.Future | None = None
        self._failure: BaseException | None = None
        self._closing = False
        self._closed = False
        self._registered = False
        self._owned: list[TopicPartition] = []  # what this member holds owner znodes of
        self._settled = False  # the AsyncConsumer consumes exactly `_owned`, from the right positions
        self._transient = 0  # rebalances in a row interrupted by ZooKeeper or broker trouble
        self._session = 0  # ZooKeeper sessions lost so far
        self._reported: list[TopicPartition] | None = None
        self._consumed: dict[TopicPartition, int] = {}  # after the last record handed out
        self._processed: dict[TopicPartition, int] = {}  # after the last record the application is done with
        self._last_committed: dict[TopicPartition, int] = {}
        self._next_commit = 0.0
        self._watches: list[ChildrenWatch | DataWatch] = []  # they end with the session (or return False)

    # -- life cycle ---------------------------------------------------------------------------------

    async def start(self) -> GroupConsumer:
        """Connect to the brokers and ZooKeeper, join the group and return after the first rebalance."""
        self._loop = asyncio.get_running_loop()
        self._first = self._loop.create_future()
        try:
            await self.consumer.start()
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
            self._task = self._loop.create_task(self._coordinate(), name=f"group {self.group} coordinator")
            await asyncio.shield(self._first)
        except BaseException:
            await self.close()
            raise
        return self

    async def __aenter__(self) -> GroupConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Leave cleanly: commit what was handed out, release the partitions, deregister, close ZooKeeper."""
        if self._closed:
            return
        self._closing = True
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        try:
            if self._zk is not None:
                locked = False
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(5):  # a getmany in another task finishes its round
                        locked = await self._lock.acquire()
                try:
                    async with asyncio.timeout(15):
                        owned = list(self._owned)
                        if self._settled:
                            self._processed.update(self._consumed)
                            await self._commit({tp: self._consumed[tp] for tp in owned if tp in self._consumed})
                        await self._zk_call(self._release, owned)
                        self._owned = []
                        if self._registered:
                            await self._zk_call(consumers.deregister, self._zk, self.group, self.consumer_id)
                            self._registered = False
                finally:
                    if locked:
                        self._lock.release()
        except (KazooException, KafkactlError, TimeoutError) as exc:
            log.warning("group %s: leaving uncleanly (%s); the session's end releases what is left", self.group,
                        _why(exc))  # fmt: skip
        finally:
            if self._zk is not None:
                zk, self._zk = self._zk, None
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(10):
                        await self._zk_call(zk_client.close, zk)
            self._executor.shutdown(wait=False)
            await self.consumer.close()

    # -- what the application calls -----------------------------------------------------------------

    def assignment(self) -> list[TopicPartition]:
        """The partitions this member owns now."""
        return list(self._owned)

    def position(self, tp: TopicPartition) -> int | None:
        """The offset after the last record handed out for `tp` (what a commit now would write)."""
        return self._consumed.get(tp)

    def leaderless(self) -> list[TopicPartition]:
        """The owned partitions without a leader now (their broker is down): read once it is back."""
        return self.consumer.cluster.leaderless(self.assignment())

    def committed(self) -> dict[TopicPartition, int]:
        """What this member last committed (or found committed) per owned partition."""
        return {tp: off for tp, off in self._last_committed.items() if tp in self._owned}

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return await self.consumer.end_offsets(tps)

    async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return await self.consumer.beginning_offsets(tps)

    async def commit(self, offsets: dict[TopicPartition, int] | None = None, *, metadata: str = "") -> None:
        """Commit the positions after every record handed out so far (or `offsets`), for owned partitions, each
        with `metadata` (Kafka's commit metadata: stored beside the offset, shown by `kafkactl group describe -o
        json`; the auto-commit's and a rebalance's commits carry none)."""
        self._raise_failure()
        if offsets is None:
            self._processed.update(self._consumed)
            offsets = {tp: off for tp, off in self._consumed.items() if tp in self._owned}
        else:
            for tp, off in offsets.items():
                if tp not in self._owned:
                    raise ConsumeError(f"{tp[0]}-{tp[1]} is not owned by this member of group {self.group}")
                self._processed[tp] = off
        await self._commit(dict(offsets), force=True, metadata=metadata)

    async def getmany(self, timeout_ms: float = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:  # fmt: skip
        """Records of owned partitions, at most `max_records`, waiting up to `timeout_ms` for some.

        Records returned by earlier calls count as processed from now on (the auto-commit may write them).
        No records are handed out while a rebalance runs.
        """
        if self._closed:
            raise ConsumeError("the group consumer is closed")
        self._raise_failure()
        self._processed.update(self._consumed)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_ms, 0) / 1000
        while True:
            remaining = deadline - loop.time()
            if self._lock.locked() and remaining <= 0:
                return {}
            try:
                async with asyncio.timeout(max(remaining, 0.001)):  # not wait_for: it can swallow a cancel
                    await self._lock.acquire()
            except TimeoutError:
                return {}
            got: dict[TopicPartition, list[ConsumerRecord]] = {}
            try:
                self._raise_failure()
                wait = min(max(deadline - loop.time(), 0), 0.1)  # short: a waiting rebalance gets the lock soon
                if self._settled:
                    got = await self.consumer.getmany(timeout_ms=wait * 1000, max_records=max_records)
                    owned = set(self._owned)
                    got = {tp: recs for tp, recs in got.items() if tp in owned}
                    for tp, recs in got.items():
                        self._consumed[tp] = recs[-1].offset + 1
            finally:
                self._lock.release()
            if got or loop.time() >= deadline:
                return got
            if not self._settled:
                await asyncio.sleep(wait)

    def __aiter__(self) -> AsyncIterator[list[ConsumerRecord]]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[list[ConsumerRecord]]:
        """Lists of one partition's records in offset order, until the consumer is closed."""
        while not self._closed:
            try:
                got = await self.getmany(timeout_ms=500)
            except ConsumeError:
                if self._closed:
                    return
                raise
            for recs in got.values():
                yield recs

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

    async def _commit(self, offsets: dict[TopicPartition, int], *, force: bool = False, metadata: str = "") -> None:
        """Write offsets that differ from what this member last committed (all of them with `force`)."""
        todo = {tp: off for tp, off in offsets.items() if force or self._last_committed.get(tp) != off}
        if not todo or self._zk is None:
            return
        await self._zk_call(consumers.commit, self._zk, self.group, todo, metadata)
        self._last_committed.update(todo)
        log.debug("group %s: committed %s", self.group, todo)

    def _raise_failure(self) -> None:
        if self._failure is not None:
            exc, self._failure = self._failure, None
            raise exc

    # -- the coordinator: rebalances and auto-commits -------------------------------------------------

    async def _coordinate(self) -> None:
        """Rebalance after registry changes; auto-commit processed positions every interval. Whatever
        stops it unexpectedly reaches the application through `getmany` (or `start`)."""
        try:
            await self._coordinate_rounds()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._settled = False
            self._failure = exc
            self._done_first()

    async def _coordinate_rounds(self) -> None:
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
                        self._failure = GroupError(f"group {self.group}: cannot rebalance: {_why(exc)}")
                        self._done_first()
                    else:
                        log.warning("group %s: rebalance interrupted (%s); retrying", self.group, _why(exc))
                        await asyncio.sleep(0.5)
                        self._dirty.set()
            if cfg.enable_auto_commit and loop.time() >= self._next_commit:
                self._next_commit = loop.time() + cfg.auto_commit_interval_ms / 1000
                if self._settled:  # not while rebalancing or after a lost session: maybe no longer ours
                    try:
                        owned = set(self._owned)
                        await self._commit({tp: off for tp, off in self._processed.items() if tp in owned})
                    except KazooException as exc:
                        log.info("group %s: auto-commit failed (%s); next time", self.group, _why(exc))

    def _done_first(self) -> None:
        if self._first is not None and not self._first.done():
            if self._failure is not None:
                exc, self._failure = self._failure, None
                self._first.set_exception(exc)
            else:
                self._first.set_result(None)

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
        committed = await self._zk_call(consumers.committed, self._zk, self.group, self.topics) if wanted else {}
        keep: list[TopicPartition] = []
        starts: dict[TopicPartition, int] = {}
        reset: list[TopicPartition] = []
        for tp in wanted:
            c = committed.get(tp)
            if (tp in previously and tp in self._consumed and tp in self.consumer.positions
                    and c is not None and c.offset == self._last_committed.get(tp)):  # fmt: skip
                keep.append(tp)  # nobody committed since this member did: its position and buffers stay valid
            elif c is not None:
                starts[tp] = c.offset
            else:
                reset.append(tp)
        await self._known_to_metadata(wanted)
        await self.consumer.assign(wanted)  # drops the buffers of partitions no longer owned
        if reset:
            policy = self.config.auto_offset_reset
            if policy == "none":
                tp = reset[0]
                raise GroupError(f"group {self.group} has no committed offset for {tp[0]}-{tp[1]} "
                                 "and auto.offset.reset is none")  # fmt: skip
            offline = self.consumer.cluster.leaderless(reset)  # reset by the consumer once their leader is back
            reset = [tp for tp in reset if tp not in offline]
            if reset:
                starts.update(await self.consumer.list_offsets(reset, EARLIEST if policy == "earliest" else LATEST))
        offline = self.consumer.cluster.leaderless(wanted)
        if offline:
            log.warning("group %s: %s without a leader (broker down): read when it is back", self.group,
                        describe_partitions(offline))  # fmt: skip
        for tp, off in starts.items():
            self.consumer.seek(tp, off)
            self._consumed[tp] = self._processed[tp] = off
            if tp in committed and tp not in reset:
                self._last_committed[tp] = committed[tp].offset
        for d in (self._consumed, self._processed, self._last_committed):
            for tp in [tp for tp in d if tp not in wanted]:
                del d[tp]
        self._owned = list(wanted)
        self._settled = True
        if reset:  # remember where a new group starts, so a crash cannot move `latest` forward
            await self._commit({tp: starts[tp] for tp in reset})
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

    def _report(self) -> None:
        """Tell `on_assign` about an assignment it has not seen yet."""
        if self._reported == self._owned:
            return
        self._reported = list(self._owned)
        log.info("group %s: %s assigned %s", self.group, self.consumer_id,
                 describe_assignment(self.topics, self._owned))  # fmt: skip
        if self.on_assign is not None:
            self.on_assign(list(self._owned))


def _offline(cluster: AsyncCluster, tp: TopicPartition) -> bool:
    """Known to the metadata, but without a leader because its brokers are down (nothing to wait for)."""
    meta = cluster.topics.get(tp[0])
    p = meta.partitions.get(tp[1]) if meta else None
    return p is not None and p.offline


def _why(exc: BaseException) -> str:
    """`Name: message`, or just the name when the message is empty (kazoo's usually are)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
