"""What kafkactl's two group consumers share: their settings, the application's side and the offset bookkeeping.

`broker.client.group.GroupConsumer` coordinates through ZooKeeper (the paper's way) and
`broker.client.kafka_group.KafkaGroupConsumer` is a member of the broker's group coordinator (with an
authorizer, `group_mode` says why). They differ in how a member joins, learns its partitions and stores
offsets; `GroupMember` holds the rest, once: the settings (`GroupConfig` and the wrapped AsyncConsumer's),
`getmany` and iteration, `commit`, positions, starting newly taken partitions (committed offset, else
`auto.offset.reset`), the failure hand-off from the background task, and the shape of `close`.

Bookkeeping: `_consumed` is the position after the last record handed out per owned partition, `_processed`
the position after the last record the application is done with (a `getmany` batch counts as processed once
the next one is asked for, or at `commit` / `close`), `_last_committed` what this member last committed (or
found committed). Only processed positions are committed by the background (auto-commit, before a
rebalance); `_settled` says the AsyncConsumer consumes exactly `_owned` from the right positions.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import dataclasses
import logging
import re
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Self

from broker.client.consumer import AsyncConsumer, ConsumeError, ConsumerConfig, ConsumerRecord, describe_partitions
from broker.client.properties import typed
from broker.errors import KafkactlError, UsageError
from broker.protocol.errors import KafkaError
from broker.protocol.messages.fetch import EARLIEST, LATEST

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class GroupError(KafkaError):
    """The group consumer cannot go on (a rebalance that does not converge, no offset to start from); `code`
    is the coordinator's error when it refused (-1 otherwise)."""


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
    """Typed keyword settings of a group consumer from Kafka-named properties (`auto.commit.interval.ms`
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


def describe_assignment(topics: Sequence[str], assignment: Sequence[TopicPartition]) -> str:
    """`t[0,1,2] u[]`: a member's partitions per subscribed topic, for one-line rebalance reports."""
    return " ".join(f"{t}[{','.join(str(p) for tt, p in sorted(assignment) if tt == t)}]" for t in sorted(set(topics)))


def why(exc: BaseException) -> str:
    """`Name: message`, or just the name when the message is empty (kazoo's usually are)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# -- the member -----------------------------------------------------------------------------------


class GroupMember(abc.ABC):
    """A group member over an AsyncConsumer, less the coordination: a subclass joins (`_connect`, `_rounds` in
    the background task), takes its partitions (`_start_partitions`), stores offsets (`_write_offsets`) and
    leaves (`_leave_group`, `_disconnect`).

    `async with Member(...) as group:` then `async for batch in group:` (lists of one partition's records, in
    offset order) or `getmany()`. Settings are GroupConfig's and ConsumerConfig's field names as keywords.
    """

    #: what the background task is called (`group <g> <role>`)
    _ROLE = "member"
    #: what becomes of a member that cannot leave cleanly (the warning's end)
    _UNCLEAN = "the coordinator expires the member"
    #: errors of leaving that are warned about (others propagate)
    _LEAVE_ERRORS: tuple[type[BaseException], ...] = (KafkactlError, TimeoutError)
    #: whether the AsyncConsumer's client id defaults to the consumer id (what the coordinator then shows)
    _CLIENT_ID_IS_MEMBER = False

    def __init__(self, bootstrap: str, group_id: str, topics: Sequence[str], *,
                 on_assign: Callable[[list[TopicPartition]], None] | None = None,
                 consumer_id: str | None = None, **settings: Any) -> None:  # fmt: skip
        check_group_id(group_id)
        if not topics:
            raise UsageError("a group consumer needs at least one topic")
        self.bootstrap = bootstrap
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
        self.consumer_id = consumer_id or new_consumer_id(group_id)
        if self._CLIENT_ID_IS_MEMBER:
            consumer_settings.setdefault("client_id", self.consumer_id)
        self.on_assign = on_assign
        self.consumer = AsyncConsumer(bootstrap, **consumer_settings)
        #: assignments taken so far (the first one makes it 1)
        self.generation = 0
        self._lock = asyncio.Lock()  # held while handing out records and for a whole rebalance
        self._task: asyncio.Task | None = None
        self._first: asyncio.Future | None = None
        self._failure: BaseException | None = None
        self._closing = False
        self._closed = False
        self._settled = False  # the AsyncConsumer consumes exactly `_owned`, from the right positions
        self._owned: list[TopicPartition] = []
        self._reported: list[TopicPartition] | None = None
        self._consumed: dict[TopicPartition, int] = {}  # after the last record handed out
        self._processed: dict[TopicPartition, int] = {}  # after the last record the application is done with
        self._last_committed: dict[TopicPartition, int] = {}

    # -- what a subclass does -------------------------------------------------------------------------

    async def _connect(self) -> None:  # noqa: B027 (a hook: nothing to connect by default)
        """After the AsyncConsumer started, before the background task: connect what coordinates."""

    @abc.abstractmethod
    async def _rounds(self) -> None:
        """The background task's work: join, rebalance, heartbeat and auto-commit until closing."""

    @abc.abstractmethod
    async def _write_offsets(self, offsets: dict[TopicPartition, int], metadata: str) -> bool:
        """Store committed offsets for the group; False: not connected, nothing written."""

    def _can_leave(self) -> bool:
        """Whether `close` has a group to commit to and leave."""
        return True

    @abc.abstractmethod
    async def _leave_group(self) -> None:
        """At close, after the last commit: give up the partitions and the membership."""

    @abc.abstractmethod
    async def _disconnect(self) -> None:
        """At close, whatever happened: close what `_connect` and the rounds opened."""

    def _member_name(self) -> str:
        """This member as the assignment's log line names it."""
        return self.consumer_id

    # -- life cycle ---------------------------------------------------------------------------------

    async def start(self) -> Self:
        """Connect, join the group and return once the first assignment is taken (or raise why not)."""
        loop = asyncio.get_running_loop()
        self._first = loop.create_future()
        try:
            await self.consumer.start()
            await self._connect()
            self._task = loop.create_task(self._run(), name=f"group {self.group} {self._ROLE}")
            await asyncio.shield(self._first)
        except BaseException:
            await self.close()
            raise
        return self

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Leave cleanly: commit what was handed out, leave the group (`_leave_group`), disconnect."""
        if self._closed:
            return
        self._closing = self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        try:
            if self._can_leave():
                locked = False
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(5):  # a getmany in another task finishes its round
                        locked = await self._lock.acquire()
                try:
                    async with asyncio.timeout(15):
                        if self._settled:
                            self._processed.update(self._consumed)
                            await self._commit(self._handed_out())
                        await self._leave_group()
                finally:
                    if locked:
                        self._lock.release()
        except self._LEAVE_ERRORS as exc:
            log.warning("group %s: leaving uncleanly (%s); %s", self.group, why(exc), self._UNCLEAN)
        finally:
            self._settled = False
            await self._disconnect()
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
            offsets = self._handed_out()
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

    # -- the background task ------------------------------------------------------------------------

    async def _run(self) -> None:
        """`_rounds`; whatever stops it unexpectedly reaches the application through `getmany` (or `start`)."""
        try:
            await self._rounds()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._settled = False
            self._failure = exc
            self._done_first()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            exc, self._failure = self._failure, None
            raise exc

    def _done_first(self) -> None:
        """The first join is over: `start` returns, or raises the failure."""
        if self._first is not None and not self._first.done():
            if self._failure is not None:
                exc, self._failure = self._failure, None
                self._first.set_exception(exc)
            else:
                self._first.set_result(None)

    # -- offsets --------------------------------------------------------------------------------------

    def _handed_out(self) -> dict[TopicPartition, int]:
        """The positions after the records handed out, of owned partitions."""
        return {tp: off for tp, off in self._consumed.items() if tp in self._owned}

    def _processed_positions(self) -> dict[TopicPartition, int]:
        """The positions after the records the application is done with, of owned partitions (what the
        background commits)."""
        return {tp: off for tp, off in self._processed.items() if tp in self._owned}

    async def _commit(self, offsets: dict[TopicPartition, int], *, force: bool = False, metadata: str = "") -> None:
        """Write offsets that differ from what this member last committed (all of them with `force`)."""
        todo = {tp: off for tp, off in offsets.items() if force or self._last_committed.get(tp) != off}
        if not todo or not await self._write_offsets(todo, metadata):
            return
        self._last_committed.update(todo)
        log.debug("group %s: committed %s", self.group, todo)

    async def _start_partitions(self, wanted: list[TopicPartition], committed: dict[TopicPartition, int],
                                keep: Sequence[TopicPartition] = ()) -> dict[TopicPartition, int]:  # fmt: skip
        """Consume exactly `wanted` (already this member's): `keep`'s position and buffers stay, the others start
        at their `committed` offset, else where auto.offset.reset says (a partition without a leader is reset by
        the AsyncConsumer once it has one again); the other partitions' buffers and bookkeeping are dropped.
        Returns the starts auto.offset.reset chose, to be committed at once (so a crash cannot move `latest`
        past messages produced meanwhile)."""
        await self.consumer.assign(wanted)  # drops the buffers of partitions no longer owned
        starts = {tp: committed[tp] for tp in wanted if tp in committed and tp not in keep}
        reset = [tp for tp in wanted if tp not in committed and tp not in keep]
        fresh: dict[TopicPartition, int] = {}
        if reset:
            policy = self.config.auto_offset_reset
            if policy == "none":
                raise GroupError(f"group {self.group} has no committed offset for {reset[0][0]}-{reset[0][1]} "
                                 "and auto.offset.reset is none")  # fmt: skip
            offline = self.consumer.cluster.leaderless(reset)
            reset = [tp for tp in reset if tp not in offline]
            if reset:
                fresh = await self.consumer.list_offsets(reset, EARLIEST if policy == "earliest" else LATEST)
        offline = self.consumer.cluster.leaderless(wanted)
        if offline:
            log.warning("group %s: %s without a leader (broker down): read when it is back", self.group,
                        describe_partitions(offline))  # fmt: skip
        for tp, off in {**starts, **fresh}.items():
            self.consumer.seek(tp, off)
            self._consumed[tp] = self._processed[tp] = off
            if tp in committed:
                self._last_committed[tp] = committed[tp]
        for d in (self._consumed, self._processed, self._last_committed):
            for tp in [tp for tp in d if tp not in wanted]:
                del d[tp]
        return fresh

    def _report(self) -> None:
        """Tell `on_assign` about an assignment it has not seen yet."""
        if self._reported == self._owned:
            return
        self._reported = list(self._owned)
        log.info("group %s: %s assigned %s", self.group, self._member_name(),
                 describe_assignment(self.topics, self._owned))  # fmt: skip
        if self.on_assign is not None:
            self.on_assign(list(self._owned))
