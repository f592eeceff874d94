"""The group coordinator for standard Kafka clients: membership, generations and rebalances.

A group moves Empty → PreparingRebalance → CompletingRebalance → Stable, as in Kafka. JoinGroup
answers wait (on futures) until every known member has rejoined or the rebalance timeout passes;
the first member gets the others' metadata and computes the assignment, which its SyncGroup hands
to everyone. Members that stop heartbeating for their session timeout are removed and the group
rebalances; a group whose last member left is forgotten. A static member (KIP-345: a
`group.instance.id`) that comes back under a new member id takes its old place and assignment without
a rebalance while the group is stable, and its old incarnation is fenced (FENCED_INSTANCE_ID); like
Kafka, a static member that does not rejoin a rebalance keeps its place until its session runs out.
Committed offsets go to ZooKeeper's offset registry; each stable generation (members, assignments)
goes through the `store` hook to ZooKeeper too (`/consumers/<g>/generation`), and a coordinator that
takes a group over (its old one died or moved) `restore`s it, so members keep their generation.

Nothing here waits on ZooKeeper: the broker's `broker.coordinator.group.store` writes behind, holding commits
and generations in memory while ZooKeeper is unreachable and writing them when it returns, so joins,
syncs, heartbeats and commits are answered as usual through an outage. A broker killed during one loses
what it held: the group resumes from the last commits ZooKeeper has (at-least-once). `on_drop` tells the
store when a group leaves this coordinator (it emptied or moved).

The coordinator of a group is `sorted(live broker ids)[java_hash(group) % count]`, the same on every
broker that sees the same live set.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from broker.protocol.errors import ErrorCode
from broker.protocol.messages.groups import CONSUMER_SUBSCRIPTION
from broker.protocol.primitives import DecodeError, Reader

log = logging.getLogger(__name__)

#: how long the leader's SyncGroup waits for the other members' SyncGroups of its generation, so that they are
#: answered together (as Kafka's are, the followers' usually waiting when the leader's append completes): a
#: member still assigning when the leader revokes and rejoins would otherwise get REBALANCE_IN_PROGRESS
#: instead of the assignment of the generation it joined (librdkafka's cooperative rebalancing counts on it)
SYNC_WAIT_S = 0.5


def java_hash(text: str) -> int:
    """Kafka's `Utils.abs(groupId.hashCode())`: Java's String hash over UTF-16 code units, made non-negative."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return 0 if signed == -(1 << 31) else abs(signed)


def coordinator_for(group_id: str, live_ids: list[int] | set[int] | dict[int, Any]) -> int:
    """The broker that coordinates `group_id`, or -1 when no broker is live."""
    ids = sorted(live_ids)
    return ids[java_hash(group_id) % len(ids)] if ids else -1


class GroupState(StrEnum):
    EMPTY = "Empty"
    PREPARING = "PreparingRebalance"
    COMPLETING = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_seen: float = field(default_factory=time.monotonic)
    join: asyncio.Future | None = None
    sync: asyncio.Future | None = None

    def metadata(self, protocol: str) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str = ""
    protocol: str = ""
    leader: str = ""
    members: dict[str, Member] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # group.instance.id → its member id
    timer: asyncio.TimerHandle | None = None
    initial: bool = False  # this rebalance started from Empty: wait the initial delay for more members
    initial_deadline: float = 0.0  # (loop time) the initial delay is extended up to here
    joined: set[str] = field(default_factory=set)  # the members that joined the current generation
    assigned: bool = False  # the leader's assignment of the current generation is in

    def rebalance_timeout_s(self) -> float:
        """How long a rebalance waits for members to rejoin: the longest any member asked for."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0) / 1000


class GroupCoordinator:
    """Every group this broker coordinates, driven by the group API handlers on the event loop."""

    def __init__(self, *, initial_delay_ms: int = 3000, min_session_ms: int = 6000, max_session_ms: int = 1800000,
                 store: Callable[[str, int, dict[str, Any] | None], None] | None = None,
                 on_drop: Callable[[str], None] | None = None):  # fmt: skip
        self.groups: dict[str, Group] = {}
        #: called with a group id, its generation and its `snapshot` when a generation is stable, or None
        #: when the group empties; it must not block (the broker's queues the write)
        self.store = store
        #: called with a group id when the group is no longer this coordinator's (it emptied, or moved)
        self.on_drop = on_drop
        self._loading: dict[str, int] = {}  # group → loads of its stored generation in flight
        self._stale: set[str] = set()  # groups forgotten or handed over while a load was in flight
        self.initial_delay_ms = initial_delay_ms
        self.min_session_ms = min_session_ms
        self.max_session_ms = max_session_ms
        self._sweeper: asyncio.Task | None = None
        #: member ids handed out with MEMBER_ID_REQUIRED and not yet used: id → (group, expiry)
        self._pending: dict[str, tuple[str, float]] = {}

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        for gid in list(self.groups):
            self.unload(gid, ErrorCode.NOT_COORDINATOR)

    def unload(self, group_id: str, error: int = ErrorCode.NOT_COORDINATOR) -> None:
        """Forget a group (it moved to another broker): waiting members are told `error`."""
        group = self.groups.pop(group_id, None)
        if group is None:
            return
        self._mark_stale(group_id)
        if self.on_drop is not None:
            self.on_drop(group_id)
        if group.timer is not None:
            group.timer.cancel()
        for m in group.members.values():
            _resolve(m.join, _join_error(error, m.member_id))
            _resolve(m.sync, {"error_code": error})

    async def _sweep(self) -> None:
        """Remove members whose session ran out (no heartbeat, join or sync within it)."""
        while True:
            await asyncio.sleep(0.25)
            now = time.monotonic()
            for mid in [mid for mid, (_, until) in self._pending.items() if until < now]:
                del self._pending[mid]
            for group in list(self.groups.values()):
                expired = [m for m in group.members.values()  # waiting in JoinGroup or SyncGroup keeps it alive
                           if m.join is None and m.sync is None
                           and now - m.last_seen > m.session_timeout_ms / 1000]  # fmt: skip
                for m in expired:
                    log.info("group %s: member %s session expired", group.group_id, m.member_id)
                    self._remove(group, m, "session expired")

    # -- JoinGroup --------------------------------------------------------------------------------

    async def join(self, req: dict[str, Any], client_id: str, client_host: str, version: int = 0) -> dict[str, Any]:
        gid, member_id = req["group_id"], req["member_id"]
        session_ms = req["session_timeout_ms"]
        rebalance_ms = req["rebalance_timeout_ms"] if req["rebalance_timeout_ms"] > 0 else session_ms
        if not gid:
            return _join_error(ErrorCode.INVALID_GROUP_ID, member_id)
        if not self.min_session_ms <= session_ms <= self.max_session_ms:
            return _join_error(ErrorCode.INVALID_SESSION_TIMEOUT, member_id)
        protocols = [(p["name"], p["metadata"] or b"") for p in req["protocols"]]
        group = self.groups.get(gid)
        if group is None:
            if member_id and self._pending.get(member_id, ("",))[0] != gid:
                return _join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
            group = Group(gid)
        if (
            not protocols
            or not req["protocol_type"]
            or (
                group.members
                and (
                    req["protocol_type"] != group.protocol_type
                    or not self._common_protocols(group, protocols, member_id)
                )
            )
        ):
            return _join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)  # fmt: skip
        instance = req.get("group_instance_id")
        if instance is not None:
            known = group.static.get(instance)
            if member_id and member_id != known:  # an old incarnation (or an id this group never gave out)
                fenced = known is not None
                return _join_error(ErrorCode.FENCED_INSTANCE_ID if fenced else ErrorCode.UNKNOWN_MEMBER_ID, member_id)
            if not member_id and known is not None:
                return await self._rejoin_static(group, known, req, client_id, client_host, protocols)
        if not member_id and version >= 4 and instance is None:
            # KIP-394: hand out the id first; the member joins with it, so a lost answer leaves no ghost
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            self._pending[member_id] = (gid, time.monotonic() + session_ms / 1000)
            return _join_error(ErrorCode.MEMBER_ID_REQUIRED, member_id)
        pending = self._pending.pop(member_id, None) if member_id else None
        new = not member_id or (pending is not None and pending[0] == gid and member_id not in group.members)
        if member_id and not new and member_id not in group.members:
            return _join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id)

        loop = asyncio.get_running_loop()
        if new:
            member_id = member_id or f"{client_id or 'member'}-{uuid.uuid4()}"
            member = Member(member_id, req.get("group_instance_id"), client_id, client_host, session_ms, rebalance_ms,
                            req["protocol_type"], protocols)  # fmt: skip
            group.members[member_id] = member
            if instance is not None:
                group.static[instance] = member_id
            self.groups[gid] = group
            if not group.protocol_type:
                group.protocol_type = req["protocol_type"]
            member.join = loop.create_future()
            if group.initial:
                self._extend_initial_delay(group)
            self._prepare(group, f"member {member_id} joined")
        else:
            member = group.members[member_id]
            unchanged = member.protocols == protocols
            member.protocols = protocols
            member.session_timeout_ms, member.rebalance_timeout_ms = session_ms, rebalance_ms
            member.last_seen = time.monotonic()
            _resolve(member.join, _join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id))  # a duplicate join: drop it
            member.join = loop.create_future()
            if group.state == GroupState.PREPARING:
                self._maybe_complete(group)
            elif unchanged and (
                group.state == GroupState.COMPLETING or (group.state == GroupState.STABLE and member_id != group.leader)
            ):
                # it lost the answer to its last join: hand it the current generation again
                _resolve(member.join, self._join_answer(group, member))
            else:
                self._prepare(group, f"member {member_id} rejoined")
        return await self._await_join(member)

    async def _await_join(self, member: Member) -> dict[str, Any]:
        fut = member.join
        assert fut is not None
        try:
            return await fut
        finally:
            if member.join is fut:
                member.join = None
            member.last_seen = time.monotonic()

    async def _rejoin_static(self, group: Group, old_id: str, req: dict[str, Any], client_id: str, client_host: str,
                             protocols: list[tuple[str, bytes]]) -> dict[str, Any]:  # fmt: skip
        """A known static member joins without a member id (it restarted): it takes its old place under a new
        id, and the old id is fenced. A stable group whose protocol stays the same answers at once with the
        current generation and no rebalance (the old leader's id as leader, so the member assigns nothing)."""
        old = group.members.pop(old_id)
        new_id = f"{client_id or 'member'}-{uuid.uuid4()}"
        member = Member(new_id, old.group_instance_id, client_id, client_host, req["session_timeout_ms"],
                        req["rebalance_timeout_ms"] if req["rebalance_timeout_ms"] > 0 else req["session_timeout_ms"],
                        req["protocol_type"], protocols, assignment=old.assignment)  # fmt: skip
        group.members[new_id] = member
        assert old.group_instance_id is not None
        group.static[old.group_instance_id] = new_id
        previous_leader = group.leader
        if group.leader == old_id:
            group.leader = new_id
        _resolve(old.join, _join_error(ErrorCode.FENCED_INSTANCE_ID, old_id))
        _resolve(old.sync, {"error_code": ErrorCode.FENCED_INSTANCE_ID})
        log.info("group %s: static member %s rejoined as %s", group.group_id, old.group_instance_id, new_id)
        member.join = asyncio.get_running_loop().create_future()
        if group.state == GroupState.STABLE and self._choose_protocol(group) == group.protocol:
            answer = self._join_answer(group, member)
            answer.update(members=[], leader=previous_leader)
            _resolve(member.join, answer)
            self._store(group)
        elif group.state == GroupState.PREPARING:
            self._maybe_complete(group)
        else:  # CompletingRebalance (the leader may be assigning to the old id), or a protocol change
            self._prepare(group, f"static member {old.group_instance_id} rejoined")
        return await self._await_join(member)

    def _common_protocols(self, group: Group, protocols: list[tuple[str, bytes]], member_id: str) -> set[str]:
        names = {name for name, _ in protocols}
        for m in group.members.values():
            if m.member_id != member_id:
                names &= {name for name, _ in m.protocols}
        return names

    def _prepare(self, group: Group, reason: str) -> None:
        """Start (or keep going) a rebalance: answer pending syncs, wait for members to rejoin."""
        if group.state == GroupState.COMPLETING:
            for m in group.members.values():
                _resolve(m.sync, {"error_code": ErrorCode.REBALANCE_IN_PROGRESS})
        if group.state != GroupState.PREPARING:
            log.info("group %s: preparing a rebalance in state %s with old generation %d (%s)", group.group_id,
                     group.state, group.generation, reason)  # fmt: skip
            group.initial = group.state == GroupState.EMPTY and self.initial_delay_ms > 0
            group.state = GroupState.PREPARING
            if group.timer is not None:
                group.timer.cancel()
            loop = asyncio.get_running_loop()
            if group.initial:
                longest = group.rebalance_timeout_s()
                group.initial_deadline = loop.time() + max(longest, self.initial_delay_ms / 1000)
                group.timer = loop.call_later(self.initial_delay_ms / 1000, self._initial_delay_over, group)
            else:
                timeout = group.rebalance_timeout_s()
                group.timer = loop.call_later(timeout, self._complete, group)
                self._maybe_complete(group)

    def _extend_initial_delay(self, group: Group) -> None:
        """Another member arrived during the first join: wait one more delay, up to the rebalance timeout."""
        loop = asyncio.get_running_loop()
        if group.timer is not None:
            group.timer.cancel()
        when = min(loop.time() + self.initial_delay_ms / 1000, group.initial_deadline)
        group.timer = loop.call_at(when, self._initial_delay_over, group)

    def _initial_delay_over(self, group: Group) -> None:
        group.initial = False
        timeout = group.rebalance_timeout_s()
        group.timer = asyncio.get_running_loop().call_later(timeout, self._complete, group)
        self._maybe_complete(group)

    def _maybe_complete(self, group: Group) -> None:
        if group.state == GroupState.PREPARING and not group.initial:
            if all(m.join is not None and not m.join.done() for m in group.members.values()):
                self._complete(group)

    def _complete(self, group: Group) -> None:
        """End the join phase: drop members that did not rejoin, start the next generation."""
        if group.state != GroupState.PREPARING or self.groups.get(group.group_id) is not group:
            return
        if group.timer is not None:
            group.timer.cancel()
            group.timer = None
        absent = [m for m in group.members.values() if m.join is None or m.join.done()]
        joined = [m for m in group.members.values() if m not in absent]
        for m in absent:  # as Kafka: a static member keeps its place (its session may still end it)
            if m.group_instance_id is None or not joined:
                log.info("group %s: member %s did not rejoin in time", group.group_id, m.member_id)
                self._drop(group, m)
        group.generation += 1
        if not group.members:
            self._forget(group)
            return
        group.protocol = self._choose_protocol(group)
        if group.leader not in group.members or group.leader not in {m.member_id for m in joined}:
            group.leader = joined[0].member_id
        group.state = GroupState.COMPLETING
        group.joined, group.assigned = {m.member_id for m in joined}, False
        log.info("group %s: generation %d with %d member(s), leader %s", group.group_id, group.generation,
                 len(group.members), group.leader)  # fmt: skip
        for m in group.members.values():
            _resolve(m.join, self._join_answer(group, m))

    def _choose_protocol(self, group: Group) -> str:
        """The protocol every member supports that most members list first (ties: the leader's order)."""
        members = list(group.members.values())
        common = set.intersection(*({n for n, _ in m.protocols} for m in members))
        votes: dict[str, int] = {}
        for m in members:
            first = next(n for n, _ in m.protocols if n in common)
            votes[first] = votes.get(first, 0) + 1
        order = [n for n, _ in members[0].protocols if n in common]
        return max(order, key=lambda n: (votes.get(n, 0), -order.index(n)))

    def _join_answer(self, group: Group, member: Member) -> dict[str, Any]:
        leader = member.member_id == group.leader
        return {
            "error_code": ErrorCode.NONE,
            "generation_id": group.generation,
            "protocol_type": group.protocol_type,  # (JoinGroup v7+)
            "protocol_name": group.protocol,
            "leader": group.leader,
            "member_id": member.member_id,
            "members": [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                 "metadata": m.metadata(group.protocol)}
                for m in group.members.values()
            ] if leader else [],
        }  # fmt: skip

    # -- SyncGroup, Heartbeat, LeaveGroup ---------------------------------------------------------

    def _member(self, gid: str, member_id: str, generation: int,
                instance: str | None = None) -> tuple[Group | None, Member | None, int]:  # fmt: skip
        group = self.groups.get(gid)
        if group is not None and instance is not None and group.static.get(instance, member_id) != member_id:
            return group, None, ErrorCode.FENCED_INSTANCE_ID  # an old incarnation of a static member
        if group is None or member_id not in group.members:
            return group, None, ErrorCode.UNKNOWN_MEMBER_ID
        member = group.members[member_id]
        member.last_seen = time.monotonic()
        if generation != group.generation:
            return group, member, ErrorCode.ILLEGAL_GENERATION
        return group, member, ErrorCode.NONE

    async def sync(self, req: dict[str, Any]) -> dict[str, Any]:
        """SyncGroup. A protocol type or name given (v5+) must be the group's (INCONSISTENT_GROUP_PROTOCOL, as
        Kafka checks them after the generation); answers that succeed name both (v5+)."""
        group, member, error = self._member(req["group_id"], req["member_id"], req["generation_id"],
                                            req.get("group_instance_id"))  # fmt: skip
        if error:
            return {"error_code": error}
        assert group is not None and member is not None
        protocol_type, protocol_name = req.get("protocol_type"), req.get("protocol_name")
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol
        ):
            return {"error_code": ErrorCode.INCONSISTENT_GROUP_PROTOCOL}
        if group.state == GroupState.PREPARING:
            return {"error_code": ErrorCode.REBALANCE_IN_PROGRESS}
        if group.state == GroupState.STABLE:
            return _synced(group, member)
        # CompletingRebalance: wait for the leader's assignment
        _resolve(member.sync, {"error_code": ErrorCode.REBALANCE_IN_PROGRESS})
        fut = member.sync = asyncio.get_running_loop().create_future()
        if member.member_id == group.leader:
            given = {a["member_id"]: a["assignment"] or b"" for a in req["assignments"]}
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
            group.assigned = True
            log.info("group %s: the leader's assignment of generation %d is in", group.group_id, group.generation)
        self._maybe_stable(group)
        try:
            return await fut
        finally:
            if member.sync is fut:
                member.sync = None
            member.last_seen = time.monotonic()

    def _maybe_stable(self, group: Group) -> None:
        """Once the leader's assignment is in: the generation is stable when every member that joined it waits
        in SyncGroup, or `SYNC_WAIT_S` after the assignment came; a member that syncs later is answered from
        Stable."""
        if group.state != GroupState.COMPLETING or not group.assigned:
            return
        missing = [m for m in group.members.values() if m.member_id in group.joined and (m.sync is None
                                                                                         or m.sync.done())]  # fmt: skip
        if not missing:
            self._stable(group, group.generation)
        elif group.timer is None:
            group.timer = asyncio.get_running_loop().call_later(SYNC_WAIT_S, self._stable, group, group.generation)

    def _stable(self, group: Group, generation: int) -> None:
        """The generation is stable: every SyncGroup waiting gets its assignment."""
        if group.state != GroupState.COMPLETING or group.generation != generation:
            return
        if group.timer is not None:
            group.timer.cancel()
            group.timer = None
        waiting = [m.member_id for m in group.members.values() if m.sync is not None and not m.sync.done()]
        group.state = GroupState.STABLE
        late = sorted(set(group.joined) - set(waiting))
        log.info("group %s: generation %d is stable%s", group.group_id, generation,
                 f" ({', '.join(late)} not synced yet: answered when they ask)" if late else "")  # fmt: skip
        self._store(group)
        for m in group.members.values():
            _resolve(m.sync, _synced(group, m))

    def heartbeat(self, req: dict[str, Any]) -> dict[str, Any]:
        group, member, error = self._member(req["group_id"], req["member_id"], req["generation_id"],
                                            req.get("group_instance_id"))  # fmt: skip
        if error:
            return {"error_code": error}
        assert group is not None
        if group.state == GroupState.PREPARING:
            return {"error_code": ErrorCode.REBALANCE_IN_PROGRESS}
        return {"error_code": ErrorCode.NONE}

    def leave(self, req: dict[str, Any], version: int) -> dict[str, Any]:
        gid = req["group_id"]
        leaving = ([(req["member_id"], None)] if version < 3
                   else [(m["member_id"], m.get("group_instance_id")) for m in req["members"]])  # fmt: skip
        group = self.groups.get(gid)
        results = []
        for member_id, instance in leaving:
            known = group.static.get(instance) if group is not None and instance is not None else None
            if known is not None and member_id and member_id != known:
                results.append({"member_id": member_id, "group_instance_id": instance,
                                "error_code": ErrorCode.FENCED_INSTANCE_ID})  # fmt: skip
                continue
            member_id = member_id or known or ""  # a static member may leave by its instance id alone
            member = group.members.get(member_id) if group is not None else None
            if member is None:
                results.append({"member_id": member_id, "group_instance_id": instance,
                                "error_code": ErrorCode.UNKNOWN_MEMBER_ID})  # fmt: skip
                continue
            assert group is not None
            self._remove(group, member, "left the group")
            results.append({"member_id": member_id, "group_instance_id": member.group_instance_id,
                            "error_code": ErrorCode.NONE})  # fmt: skip
        if version < 3:
            return {"error_code": results[0]["error_code"]}
        return {"error_code": ErrorCode.NONE, "members": results}

    def _drop(self, group: Group, member: Member) -> None:
        """The member is no longer in the group (its static instance id neither)."""
        group.members.pop(member.member_id, None)
        if member.group_instance_id is not None and group.static.get(member.group_instance_id) == member.member_id:
            del group.static[member.group_instance_id]

    def _remove(self, group: Group, member: Member, reason: str) -> None:
        self._drop(group, member)
        _resolve(member.join, _join_error(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id))
        _resolve(member.sync, {"error_code": ErrorCode.UNKNOWN_MEMBER_ID})
        if group.state == GroupState.PREPARING:
            if group.members:
                self._maybe_complete(group)
            else:
                self._complete(group)
        elif group.state in (GroupState.STABLE, GroupState.COMPLETING):
            if group.members:
                self._prepare(group, f"member {member.member_id} {reason}")
            else:
                self._forget(group)

    def _forget(self, group: Group) -> None:
        """The last member left: only the committed offsets (in ZooKeeper) remain of the group."""
        if group.timer is not None:
            group.timer.cancel()
        group.state = GroupState.EMPTY
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
            self._mark_stale(group.group_id)
            if self.store is not None:
                self.store(group.group_id, group.generation, None)
            if self.on_drop is not None:
                self.on_drop(group.group_id)
        log.info("group %s is empty", group.group_id)

    # -- offsets ----------------------------------------------------------------------------------

    def commit_error(self, gid: str, member_id: str, generation: int, instance: str | None = None) -> int:
        """Whether a member may commit now: NONE, or the error Kafka answers."""
        group = self.groups.get(gid)
        if generation < 0 and not member_id and (group is None or not group.members):
            return ErrorCode.NONE  # a simple commit: the group does not use the coordinator for membership
        if group is None or not group.members:
            return ErrorCode.ILLEGAL_GENERATION  # a generation the (empty) group does not have
        group, member, error = self._member(gid, member_id, generation, instance)
        if error:
            return error
        assert group is not None
        if group.state == GroupState.COMPLETING:
            return ErrorCode.REBALANCE_IN_PROGRESS  # (in PreparingRebalance, members commit before revoking)
        return ErrorCode.NONE

    def has_members(self, gid: str) -> bool:
        """Whether the group has members here (it is not Empty, nor Dead: DeleteGroups refuses it)."""
        group = self.groups.get(gid)
        return group is not None and bool(group.members)

    def subscribed_topics(self, gid: str) -> set[str] | None:
        """The topics the group's members subscribe to, read from their consumer-protocol metadata (as Kafka's
        `GroupMetadata.subscribedTopics`); None when not known: a group of another protocol type, with no
        protocol chosen yet, or metadata that does not parse (OffsetDelete then takes every topic as
        subscribed). An empty set for a group without members."""
        group = self.groups.get(gid)
        if group is None or not group.members:
            return set()
        if group.protocol_type != "consumer" or not group.protocol:
            return None
        topics: set[str] = set()
        for m in group.members.values():
            try:
                r = Reader(memoryview(m.metadata(group.protocol)))
                r.int16()  # (its version: every version starts with the topics)
                topics.update(CONSUMER_SUBSCRIPTION.read(r, 0)["topics"])
            except (DecodeError, ValueError):
                return None
        return topics

    # -- persistence ------------------------------------------------------------------------------

    def _store(self, group: Group) -> None:
        if self.store is not None:
            self.store(group.group_id, group.generation, self.snapshot(group))

    def begin_load(self, gid: str) -> None:
        """A read of the group's stored generation starts (see `end_load`)."""
        self._loading[gid] = self._loading.get(gid, 0) + 1

    def end_load(self, gid: str, state: dict[str, Any] | None) -> None:
        """The read started by `begin_load` returned `state`: take the group over with it, unless the group
        is known here meanwhile, or was forgotten or handed over since (then `state` may predate that)."""
        left = self._loading[gid] - 1
        stale = gid in self._stale
        if left:
            self._loading[gid] = left
        else:
            del self._loading[gid]
            self._stale.discard(gid)
        if state is not None and not stale:
            self.restore(gid, state)

    def _mark_stale(self, gid: str) -> None:
        if gid in self._loading:
            self._stale.add(gid)

    def snapshot(self, group: Group) -> dict[str, Any]:
        """What a coordinator taking the group over needs of its stable generation."""
        return {
            "generation": group.generation, "protocol_type": group.protocol_type, "protocol": group.protocol,
            "leader": group.leader,
            "members": [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                 "client_host": m.client_host, "session_timeout_ms": m.session_timeout_ms,
                 "rebalance_timeout_ms": m.rebalance_timeout_ms,
                 "protocols": [{"name": n, "metadata": meta} for n, meta in m.protocols], "assignment": m.assignment}
                for m in group.members.values()
            ],
        }  # fmt: skip

    def restore(self, gid: str, state: dict[str, Any]) -> None:
        """Take over a group at the stable generation another coordinator stored (unless it is known here):
        its members' sessions start now."""
        if gid in self.groups or not state["members"]:
            return
        group = Group(gid, GroupState.STABLE, state["generation"], state["protocol_type"], state["protocol"],
                      state["leader"])  # fmt: skip
        for m in state["members"]:
            protocols = [(p["name"], p["metadata"]) for p in m["protocols"]]
            member = Member(m["member_id"], m["group_instance_id"], m["client_id"], m["client_host"],
                            m["session_timeout_ms"], m["rebalance_timeout_ms"], group.protocol_type, protocols,
                            assignment=m["assignment"])  # fmt: skip
            group.members[member.member_id] = member
            if member.group_instance_id is not None:
                group.static[member.group_instance_id] = member.member_id
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        self.groups[gid] = group
        log.info("group %s: took over generation %d with %d member(s)", gid, group.generation, len(group.members))

    # -- describe ---------------------------------------------------------------------------------

    def describe(self, gid: str) -> dict[str, Any]:
        group = self.groups.get(gid)
        if group is None:
            return {"error_code": ErrorCode.NONE, "group_id": gid, "group_state": GroupState.DEAD, "members": []}
        stable = group.state == GroupState.STABLE  # as Kafka: metadata and assignments only of a stable group
        members = [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
             "client_host": m.client_host, "member_metadata": m.metadata(group.protocol) if stable else b"",
             "member_assignment": m.assignment if stable else b""}
            for m in group.members.values()
        ]  # fmt: skip
        return {"error_code": ErrorCode.NONE, "group_id": gid, "group_state": str(group.state),
                "protocol_type": group.protocol_type, "protocol_data": group.protocol if stable else "",
                "members": members}  # fmt: skip


def _synced(group: Group, member: Member) -> dict[str, Any]:
    """A SyncGroup answer that succeeds: the member's assignment, and the group's protocol type and name."""
    return {"error_code": ErrorCode.NONE, "protocol_type": group.protocol_type, "protocol_name": group.protocol,
            "assignment": member.assignment}  # fmt: skip


def _join_error(error: int, member_id: str) -> dict[str, Any]:
    return {"error_code": error, "generation_id": -1, "member_id": member_id, "members": []}


def _resolve(fut: asyncio.Future | None, value: Any) -> None:
    if fut is not None and not fut.done():
        fut.set_result(value)
