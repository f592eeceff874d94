"""kafkactl's group consumer as a member of the broker's group coordinator, over the Kafka protocol.

Used instead of the ZooKeeper-coordinated `broker.client.group.GroupConsumer` when the brokers have an
authorizer (`broker.client.group_mode` says why): the coordinator then checks Read on the group for every
join, sync, heartbeat and commit, and Describe for the offsets fetched, exactly as for any Kafka client.

The classic (eager) consumer protocol, as Kafka's clients speak it: FindCoordinator; JoinGroup with protocol
type "consumer" and the `range` assignor (the subscription in the consumer protocol's format, so other
clients' members can share a group with it), a MEMBER_ID_REQUIRED answer (KIP-394) rejoined with the id
given; the leader computes the assignment (`group.range_assignment`, Kafka's range assignor) from the
members' subscriptions and the topics' partition counts; SyncGroup hands each member its partitions.
Heartbeats every `heartbeat_interval_ms` from a background task; one answered REBALANCE_IN_PROGRESS makes
the member commit what the application has processed and rejoin; UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION
mean its membership is gone: it stops handing out and committing, and rejoins.

Each assigned partition starts at the group's committed offset (OffsetFetch), else where
`auto.offset.reset` says, that start committed at once (as the ZooKeeper consumer does). Commits
(OffsetCommit with the member's generation) write positions after records handed out: `getmany`'s batch
counts as processed once the next one is asked for; `commit()`, the auto-commit and `close()` (which then
sends LeaveGroup) write them. Delivery is at least once.

The same public surface as `GroupConsumer`, so `kafkactl consume --group` drives either. Authorization
failures raise `group_mode.GroupAuthorizationError`: nothing was handed out or committed then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Callable, Sequence
from typing import Any

from broker.client.aio import AsyncConnection
from broker.client.consumer import ConsumeError
from broker.client.group import range_assignment
from broker.client.group_member import GroupError, GroupMember, TopicPartition
from broker.client.group_mode import refusal
from broker.errors import KafkactlError, UsageError
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError, error_name
from broker.protocol.messages.groups import CONSUMER_ASSIGNMENT, CONSUMER_SUBSCRIPTION
from broker.protocol.primitives import DecodeError, Reader

log = logging.getLogger(__name__)

PROTOCOL_TYPE = "consumer"
ASSIGNOR = "range"

#: errors after which the coordinator is looked up again
_MOVED = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
#: errors that end this member's generation: rejoin
_REJOIN = {ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID}


class _Transient(KafkaError):
    """The coordinator moved or is loading: look it up again and retry."""


class _Rejoin(KafkaError):
    """The group rebalances (or this member's generation is over): rejoin."""

    def __init__(self, code: int) -> None:
        super().__init__(error_name(code), code)


# -- the consumer protocol's bytes ----------------------------------------------------------------------


def encode_subscription(topics: Sequence[str]) -> bytes:
    """JoinGroup metadata: consumer protocol v0 (int16 version, topics, null user data)."""
    return struct.pack(">h", 0) + CONSUMER_SUBSCRIPTION.encode({"topics": sorted(topics), "user_data": None}, 0)


def decode_subscription(data: bytes) -> list[str]:
    """The topics of a member's subscription (any consumer protocol version); [] when it does not parse."""
    try:
        r = Reader(memoryview(data))
        version = r.int16()
        return list(CONSUMER_SUBSCRIPTION.read(r, min(max(version, 0), 1))["topics"])
    except (DecodeError, ValueError, IndexError):
        return []


def encode_assignment(tps: Sequence[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        by_topic.setdefault(t, []).append(p)
    body = {"assigned_partitions": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()], "user_data": None}
    return struct.pack(">h", 0) + CONSUMER_ASSIGNMENT.encode(body, 0)


def decode_assignment(data: bytes | None) -> list[TopicPartition]:
    if not data:
        return []
    r = Reader(memoryview(data))
    version = r.int16()
    body = CONSUMER_ASSIGNMENT.read(r, min(max(version, 0), 3))
    return sorted((a["topic"], p) for a in body["assigned_partitions"] for p in a["partitions"])


# -- the member ------------------------------------------------------------------------------------------


class KafkaGroupConsumer(GroupMember):
    """A member of a broker-coordinated consumer group over an AsyncConsumer (see the module docstring).

    `async with KafkaGroupConsumer(bootstrap, "g", ["t"]) as group:` then `getmany()` or `async for batch in
    group:`; settings are GroupConfig's and ConsumerConfig's field names (the ZooKeeper ones are ignored).
    """

    _CLIENT_ID_IS_MEMBER = True  # the client id the coordinator shows

    def __init__(self, bootstrap: str, group_id: str, topics: Sequence[str], *,
                 on_assign: Callable[[list[TopicPartition]], None] | None = None,
                 consumer_id: str | None = None, **settings: Any) -> None:  # fmt: skip
        super().__init__(bootstrap, group_id, topics, on_assign=on_assign, consumer_id=consumer_id, **settings)
        # heartbeats, commits, offset fetches and leaving wait request.timeout.ms, not a JoinGroup's hold
        self._request_s = self.consumer.config.request_timeout_ms / 1000
        #: the coordinator's member id and generation of this member ("" / -1: not a member)
        self.member_id = ""
        self.generation_id = -1
        self._coordinator: AsyncConnection | None = None
        self._wake = asyncio.Event()
        self._need_join = True

    # -- life cycle: GroupMember's hooks ----------------------------------------------------------------

    async def _disconnect(self) -> None:
        await self._forget_coordinator()

    def _member_name(self) -> str:
        return f"member {self.member_id}"

    async def commit(self, offsets: dict[TopicPartition, int] | None = None, *, metadata: str = "") -> None:
        """GroupMember's `commit`; refused while the group rebalances (a ConsumeError: it then rejoins)."""
        try:
            await super().commit(offsets, metadata=metadata)
        except _Rejoin as exc:
            self._rejoin_soon()
            raise ConsumeError(f"group {self.group} is rebalancing; commit not accepted ({exc})", exc.code) from None

    # -- the background task: joins, heartbeats, auto-commits -----------------------------------------

    def _rejoin_soon(self) -> None:
        self._need_join = True
        self._wake.set()

    async def _rounds(self) -> None:
        """Join when needed; heartbeat and auto-commit processed positions every interval."""
        loop = asyncio.get_running_loop()
        cfg = self.config
        transient = 0
        next_beat = next_commit = loop.time()
        while not self._closing:
            try:
                if self._need_join:
                    async with self._lock:
                        await self._join()
                    self._done_first()
                    next_beat = loop.time() + cfg.heartbeat_interval_ms / 1000
                    next_commit = loop.time() + cfg.auto_commit_interval_ms / 1000
                else:
                    due = min(next_beat, next_commit) if cfg.enable_auto_commit else next_beat
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(max(due - loop.time(), 0)):
                            await self._wake.wait()
                    self._wake.clear()
                    if self._need_join or self._closing:
                        continue
                    if cfg.enable_auto_commit and loop.time() >= next_commit:
                        next_commit = loop.time() + cfg.auto_commit_interval_ms / 1000
                        if self._settled:
                            await self._commit(self._processed_positions())
                    if loop.time() >= next_beat:
                        next_beat = loop.time() + cfg.heartbeat_interval_ms / 1000
                        await self._heartbeat()
                transient = 0
            except _Rejoin as exc:
                if exc.code != ErrorCode.REBALANCE_IN_PROGRESS:  # the generation is over: nothing is ours now
                    self._settled = False
                    if exc.code == ErrorCode.UNKNOWN_MEMBER_ID:
                        self.member_id = ""
                log.info("group %s: %s; rejoining", self.group, exc)
                self._need_join = True
            except (KafkactlError, OSError) as exc:  # the coordinator moved, a broker is away: retry
                if refusal_code(exc) is not None or isinstance(exc, GroupError | UsageError):
                    raise
                await self._forget_coordinator()
                transient += 1
                if transient > 40:
                    raise GroupError(f"group {self.group}: cannot reach its coordinator: {exc}") from None
                log.warning("group %s: %s; retrying", self.group, exc)
                await asyncio.sleep(0.5)

    async def _forget_coordinator(self) -> None:
        conn, self._coordinator = self._coordinator, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def _coordinator_conn(self) -> AsyncConnection:
        """The connection to the group's coordinator, found with FindCoordinator (its own connection: a JoinGroup
        held by the coordinator must not hold up fetches)."""
        if self._coordinator is not None and not self._coordinator.closed:
            return self._coordinator
        cluster = self.consumer.cluster
        if not cluster.brokers:
            await cluster.refresh([])
        conn = await cluster.any_connection()  # (not a fixed broker: it may be the one that died)
        answer = await conn.request(ApiKey.FIND_COORDINATOR, {"key": self.group, "key_type": 0})
        code = answer["error_code"]
        self._check(code, "read")
        if code:
            raise _Transient(f"no coordinator for group {self.group!r} ({error_name(code)})", code)
        cfg = self.config
        # (a JoinGroup is held up to the rebalance timeout)
        timeout = max(self.consumer.config.request_timeout_ms, cfg.max_poll_interval_ms) / 1000 + 10
        self._coordinator = await AsyncConnection.open(answer["host"], answer["port"], client_id=self.consumer_id,
                                                       timeout=timeout, security=cluster.security)  # fmt: skip
        return self._coordinator

    def _check(self, code: int, doing: str, topic: str | None = None) -> None:
        """Raise the authorization refusal a code is (other codes are the caller's)."""
        refused = refusal(code, self.group, doing, topic)
        if refused is not None:
            raise refused

    async def _join(self) -> None:
        """Join (JoinGroup, SyncGroup) and take the assignment; commits what was processed first."""
        if self._settled and self.generation_id >= 0:
            with contextlib.suppress(_Rejoin):  # (too late: the partitions' next owners start from older ones)
                await self._commit(self._processed_positions())
        self._settled = False
        cfg = self.config
        while not self._closing:
            conn = await self._coordinator_conn()
            body = {"group_id": self.group, "session_timeout_ms": cfg.session_timeout_ms,
                    "rebalance_timeout_ms": cfg.max_poll_interval_ms, "member_id": self.member_id,
                    "group_instance_id": None, "protocol_type": PROTOCOL_TYPE,
                    "protocols": [{"name": ASSIGNOR, "metadata": encode_subscription(self.topics)}]}  # fmt: skip
            answer = await conn.request(ApiKey.JOIN_GROUP, body)
            code = answer["error_code"]
            self._check(code, "read")
            if code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = answer["member_id"]
                continue
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                await asyncio.sleep(0.1)
                continue
            if code in _MOVED:
                raise _Transient(f"JoinGroup: {error_name(code)}", code)
            if code:
                raise GroupError(f"group {self.group}: cannot join ({error_name(code)})", code)
            self.member_id, self.generation_id = answer["member_id"], answer["generation_id"]
            assignments: list[dict[str, Any]] = []
            if answer["leader"] == self.member_id:
                assignments = await self._assign(answer["members"])
            sync = await conn.request(ApiKey.SYNC_GROUP, {
                "group_id": self.group, "generation_id": self.generation_id, "member_id": self.member_id,
                "group_instance_id": None, "protocol_type": PROTOCOL_TYPE, "protocol_name": ASSIGNOR,
                "assignments": assignments})  # fmt: skip
            code = sync["error_code"]
            self._check(code, "read")
            if code in _REJOIN:
                if code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                continue
            if code in _MOVED:
                raise _Transient(f"SyncGroup: {error_name(code)}", code)
            if code:
                raise GroupError(f"group {self.group}: cannot sync ({error_name(code)})", code)
            wanted = [tp for tp in decode_assignment(sync["assignment"]) if tp[0] in self.topics]
            await self._take(wanted)
            self._need_join = False
            return

    async def _assign(self, members: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The leader's part: Kafka's range assignment of every member's subscription."""
        subscriptions = {m["member_id"]: decode_subscription(m["metadata"]) for m in members}
        partitions: dict[str, list[int]] = {}
        for topic in sorted({t for ts in subscriptions.values() for t in ts}):
            try:
                partitions[topic] = sorted((await self.consumer.cluster.topic(topic)).partitions)
            except KafkactlError as exc:  # a topic another member names that this one cannot see: not assigned
                log.warning("group %s: topic %r not assigned: %s", self.group, topic, exc)
        assignment = range_assignment(partitions, subscriptions)
        return [{"member_id": m, "assignment": encode_assignment(tps)} for m, tps in assignment.items()]

    async def _heartbeat(self) -> None:
        conn = await self._coordinator_conn()
        answer = await conn.request(
            ApiKey.HEARTBEAT,
            {
                "group_id": self.group,
                "generation_id": self.generation_id,
                "member_id": self.member_id,
                "group_instance_id": None,
            },
            timeout=self._request_s,
        )
        code = answer["error_code"]
        self._check(code, "read")
        if code in _REJOIN:
            raise _Rejoin(code)
        if code in _MOVED:
            raise _Transient(f"Heartbeat: {error_name(code)}", code)
        if code:
            raise GroupError(f"group {self.group}: heartbeat refused ({error_name(code)})", code)

    async def _leave_group(self) -> None:
        """LeaveGroup, when a member of the group."""
        conn = self._coordinator
        if not self.member_id or conn is None:
            return
        member = self.member_id
        self.member_id, self.generation_id = "", -1
        answer = await conn.request(
            ApiKey.LEAVE_GROUP,
            {
                "group_id": self.group,
                "member_id": member,
                "members": [{"member_id": member, "group_instance_id": None}],
            },
            timeout=self._request_s,
        )
        if answer["error_code"]:
            log.info("group %s: LeaveGroup answered %s", self.group, error_name(answer["error_code"]))

    # -- offsets ----------------------------------------------------------------------------------------

    async def _fetch_committed(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets of `tps` (OffsetFetch at the coordinator); absent: none committed."""
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        body = {"group_id": self.group, "require_stable": False,
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]}  # fmt: skip
        for _ in range(100):
            conn = await self._coordinator_conn()
            answer = await conn.request(ApiKey.OFFSET_FETCH, body, timeout=self._request_s)
            codes = [answer.get("error_code", 0)]
            out: dict[TopicPartition, int] = {}
            for t in answer["topics"]:
                for p in t["partitions"]:
                    self._check(p["error_code"], "read", t["name"])
                    codes.append(p["error_code"])
                    if p["committed_offset"] >= 0:
                        out[(t["name"], p["partition_index"])] = p["committed_offset"]
            for code in codes:
                self._check(code, "read")
            if any(code in _MOVED for code in codes):
                raise _Transient(f"OffsetFetch: {error_name(next(c for c in codes if c in _MOVED))}")
            if ErrorCode.UNSTABLE_OFFSET_COMMIT in codes:
                await asyncio.sleep(0.2)
                continue
            bad = [c for c in codes if c]
            if bad:
                raise GroupError(f"group {self.group}: cannot fetch committed offsets ({error_name(bad[0])})", bad[0])
            return out
        raise GroupError(f"group {self.group}: committed offsets held by a transaction that does not end")

    async def _write_offsets(self, offsets: dict[TopicPartition, int], metadata: str) -> bool:
        """OffsetCommit with this member's generation."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (t, p), off in sorted(offsets.items()):
            by_topic.setdefault(t, []).append(
                {
                    "partition_index": p,
                    "committed_offset": off,
                    "committed_leader_epoch": -1,
                    "committed_metadata": metadata,
                }
            )
        conn = await self._coordinator_conn()
        answer = await conn.request(ApiKey.OFFSET_COMMIT, {
            "group_id": self.group, "generation_id": self.generation_id, "member_id": self.member_id,
            "group_instance_id": None, "retention_time_ms": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]},
            timeout=self._request_s)  # fmt: skip
        codes = [(t["name"], p["error_code"]) for t in answer["topics"] for p in t["partitions"]]
        for topic, code in codes:
            self._check(code, "read", topic)
        for _, code in codes:
            if code in _REJOIN:
                raise _Rejoin(code)
            if code in _MOVED:
                raise _Transient(f"OffsetCommit: {error_name(code)}", code)
        bad = [code for _, code in codes if code]
        if bad:
            raise GroupError(f"group {self.group}: commit refused ({error_name(bad[0])})", bad[0])
        return True

    async def _take(self, wanted: list[TopicPartition]) -> None:
        """Consume exactly `wanted`: each partition from the group's committed offset, else by auto.offset.reset
        (that start committed at once, so a crash cannot move `latest` past messages produced meanwhile)."""
        committed = await self._fetch_committed(wanted) if wanted else {}
        self._consumed, self._processed, self._last_committed = {}, {}, {}
        fresh = await self._start_partitions(wanted, committed)
        self._owned = list(wanted)
        if fresh:
            await self._commit(fresh)
        self._settled = True
        self.generation += 1
        self._report()


def refusal_code(exc: BaseException) -> int | None:
    """The authorization error code an exception carries (None for others)."""
    code = getattr(exc, "code", None)
    if code in (ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.TOPIC_AUTHORIZATION_FAILED):
        return code
    return None
