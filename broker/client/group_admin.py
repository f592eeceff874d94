"""Consumer groups of both kinds, seen the same way: list, describe with lag, plan and apply rewinds, delete
groups or their offsets of some partitions.

A group is ZooKeeper-coordinated (kafkactl's own group consumer, the paper's way) when it has a
`/consumers/<g>/ids` node, else broker-coordinated (standard clients). Members come from the
consumer and ownership registries or from DescribeGroups at the coordinator; committed offsets
come from the offset registry, which is also what a rewind writes.

With an authorizer on the brokers (`broker.client.group_mode` says why) the commands pass `zk` None and
everything goes through the brokers, so the authorizer decides as it does for Kafka's own tools: members
from DescribeGroups and committed offsets from OffsetFetch (Describe on the group; only the topics the
principal may describe), a rewind written with OffsetCommit outside any generation, as Kafka's AdminClient
alterConsumerGroupOffsets does (Read on the group and on each topic), ListGroups, DeleteGroups, OffsetDelete.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from kazoo.client import KazooClient

from broker.client.admin import Admin, AdminError
from broker.client.connection import Connection
from broker.client.group_mode import refusal
from broker.errors import KafkactlError, UsageError
from broker.protocol.api import ApiKey
from broker.protocol.errors import error_name
from broker.protocol.messages.fetch import EARLIEST, LATEST
from broker.protocol.messages.groups import CONSUMER_ASSIGNMENT
from broker.protocol.primitives import DecodeError, Reader
from broker.zk import consumers

TopicPartition = tuple[str, int]

ZOOKEEPER = "zookeeper"
BROKER = "broker"


@dataclass
class Member:
    member_id: str
    client_id: str
    host: str
    partitions: list[TopicPartition] = field(default_factory=list)


@dataclass
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    lag: int | None
    owner: str | None
    host: str | None
    leader_epoch: int | None = None  # the commit's leader epoch (-1: none given); in -o json only
    metadata: str | None = None  # the commit's metadata string; in -o json only


@dataclass
class GroupInfo:
    group: str
    kind: str
    state: str
    members: list[Member]
    partitions: list[PartitionLag]

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RewindRow:
    group: str
    topic: str
    partition: int
    current: int | None
    new: int


@dataclass(frozen=True)
class RewindTarget:
    """Where a rewind moves each partition: earliest, latest, offset N, datetime/duration (a timestamp), shift ±N."""

    kind: str  # earliest | latest | offset | timestamp | shift
    value: int = 0


def kind_of(zk: KazooClient | None, group: str) -> str:
    """ZOOKEEPER or BROKER; every group is the broker's when `zk` is None (an authorizer: brokers only)."""
    return ZOOKEEPER if zk is not None and consumers.is_zookeeper_group(zk, group) else BROKER


#: the states `group list --state` takes: Kafka's consumer group states, and "Rebalancing", the state of a
#: ZooKeeper-coordinated group between its members' ownership changes (either rebalance state of Kafka's)
GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")
REBALANCING = "Rebalancing"
_REBALANCE_STATES = {"PreparingRebalance", "CompletingRebalance", REBALANCING}


def parse_states(specs: list[str] | None) -> set[str]:
    """`--state` values (repeatable, or comma-separated as kafka-consumer-groups.sh takes them; any case) →
    the canonical state names; UsageError naming the valid ones for any other."""
    known = {s.lower(): s for s in (*GROUP_STATES, REBALANCING)}
    out: set[str] = set()
    for spec in specs or []:
        for word in spec.split(","):
            state = known.get(word.strip().lower())
            if state is None:
                raise UsageError(f"--state {word.strip()!r}: not a group state; valid: {', '.join(known.values())}")
            out.add(state)
    return out


def _state_matches(state: str, wanted: set[str]) -> bool:
    """Whether a group in `state` is listed under the `--state` filter `wanted` (empty: every state)."""
    if not wanted or state in wanted:
        return True
    if state == REBALANCING:  # a ZooKeeper-coordinated group: either rebalance state of Kafka's names it
        return bool(wanted & _REBALANCE_STATES)
    return state in _REBALANCE_STATES and REBALANCING in wanted


def list_groups(zk: KazooClient | None, admin: Admin, states: set[str] | None = None) -> list[dict[str, Any]]:
    """Every group known to ZooKeeper or to a coordinator, in one of `states` when given: name, kind, state and
    member count. A broker-coordinated group's state is its coordinator's ListGroups answer (v4+, the states
    filter asked of the brokers too, as kafka-consumer-groups.sh --list --state does)."""
    wanted = set(states or ())
    broker_filter = {s for s in wanted if s != REBALANCING} | (
        {"PreparingRebalance", "CompletingRebalance"} if REBALANCING in wanted else set()
    )
    listed = admin.list_group_states(broker_filter)
    rows = []
    for name in sorted(set(consumers.groups(zk) if zk is not None else ()) | set(listed)):
        zk_group = kind_of(zk, name) == ZOOKEEPER
        if wanted and not zk_group and name not in listed:
            continue  # a broker-coordinated group the filtered listing left out (or no coordinator knows)
        info = _membership(zk, admin, name)
        state = info.state if zk_group or not listed.get(name, ("", ""))[1] else listed[name][1]
        if not _state_matches(state, wanted):
            continue
        rows.append({"group": name, "kind": info.kind, "state": state, "members": len(info.members)})
    return rows


def _membership(zk: KazooClient | None, admin: Admin, group: str) -> GroupInfo:
    """Kind, state and members of a group, without offsets."""
    if zk is not None and kind_of(zk, group) == ZOOKEEPER:
        live = consumers.members(zk, group)
        owners = consumers.owners(zk, group)
        members = [Member(cid, cid, _zk_host(group, cid), sorted(tp for tp, o in owners.items() if o == cid))
                   for cid in live]  # fmt: skip
        if not live:
            state = "Empty"
        else:
            state = "Stable" if set(owners.values()) <= set(live) and owners else "Rebalancing"
        return GroupInfo(group, ZOOKEEPER, state, members, [])
    desc = _describe_group(admin, group) if zk is None else admin.describe_group(group)
    members = [Member(m["member_id"], m["client_id"], m["client_host"].lstrip("/"), _assigned(m["member_assignment"]))
               for m in desc["members"]]  # fmt: skip
    state = desc["group_state"]
    if state == "Dead":
        state = "Empty"  # no live membership: only committed offsets remain
    return GroupInfo(group, BROKER, state, members, [])


def _zk_host(group: str, consumer_id: str) -> str:
    """The host in kafkactl's consumer ids, `<group>_<host>-<epoch ms>-<uuid8>`; other ids name none."""
    m = re.fullmatch(re.escape(group) + r"_(.+)-\d+-[0-9a-f]{8}", consumer_id)
    return m.group(1) if m else ""


def _assigned(data: bytes | None) -> list[TopicPartition]:
    """The partitions in a consumer-protocol assignment; [] when it is not one."""
    if not data:
        return []
    try:
        r = Reader(memoryview(data))
        version = r.int16()
        body = CONSUMER_ASSIGNMENT.read(r, min(max(version, 0), 3))
    except (DecodeError, ValueError):
        return []
    return sorted((a["topic"], p) for a in body["assigned_partitions"] for p in a["partitions"])


def describe(zk: KazooClient | None, admin: Admin, group: str) -> GroupInfo:
    """A group's kind, state, members and, per partition, committed offset, log end, lag and owner."""
    info = _membership(zk, admin, group)
    committed = consumers.committed(zk, group) if zk is not None else _fetch_committed(admin, group)
    if not committed and not info.members and (zk is None or group not in consumers.groups(zk)):
        raise KafkactlError(f"no consumer group {group!r}")
    owner_of = {tp: m for m in info.members for tp in m.partitions}
    tps = sorted(set(committed) | set(owner_of))
    ends = _log_ends(admin, tps)
    for tp in tps:
        c = committed.get(tp)
        end = ends.get(tp)
        m = owner_of.get(tp)
        lag = None if c is None or end is None else max(0, end - c.offset)
        info.partitions.append(PartitionLag(tp[0], tp[1], None if c is None else c.offset, end, lag,
                                            m.member_id if m else None, m.host if m else None,
                                            None if c is None else c.leader_epoch,
                                            None if c is None else c.metadata))  # fmt: skip
    return info


def _log_ends(admin: Admin, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """Log end offsets of the partitions that still exist (a deleted topic's committed offsets stay shown)."""
    known = admin.list_topics()
    live = [tp for tp in tps if tp[1] < known.get(tp[0], 0)]
    if not live:
        return {}
    # a leader that cannot be reached (killed, not yet replaced) is waited for, within the admin's timeout;
    # a partition still without an answer then shows no end (its lag unknown) rather than failing the describe
    ends, _ = admin.cluster.list_offsets(live, LATEST)
    return ends


def live_members(zk: KazooClient | None, admin: Admin, group: str) -> int:
    return len(_membership(zk, admin, group).members)


def _refuse_if_live(zk: KazooClient | None, admin: Admin, group: str, doing: str) -> None:
    n = live_members(zk, admin, group)
    if n:
        raise KafkactlError(f"group {group!r} has {n} live member(s); stop them before {doing} it")


def plan_rewind(zk: KazooClient | None, admin: Admin, group: str, topics: dict[str, list[int] | None] | None,
                target: RewindTarget) -> list[RewindRow]:  # fmt: skip
    """The new committed offset of each chosen partition (`topics` None: every topic the group committed to),
    clamped to the partition's [log start, log end]."""
    committed = consumers.committed(zk, group) if zk is not None else _fetch_committed(admin, group)
    known = admin.list_topics()
    if topics is None:
        topics = {t: None for t, _ in committed}
        if not topics:
            raise KafkactlError(f"group {group!r} has no committed offsets; name the topics with --topic")
    tps: list[TopicPartition] = []
    for topic, parts in sorted(topics.items()):
        if topic not in known:
            raise KafkactlError(f"unknown topic {topic!r}")
        for p in parts if parts is not None else range(known[topic]):
            if not 0 <= p < known[topic]:
                raise UsageError(f"topic {topic!r} has no partition {p} (it has {known[topic]})")
            tps.append((topic, p))
    start = admin.list_offsets(tps, EARLIEST)
    end = admin.list_offsets(tps, LATEST)
    at_time = admin.list_offsets(tps, target.value) if target.kind == "timestamp" else {}
    rows = []
    for tp in tps:
        lo, hi = start[tp], end[tp]
        c = committed.get(tp)
        current = None if c is None else c.offset
        if target.kind == "earliest":
            new = lo
        elif target.kind == "latest":
            new = hi
        elif target.kind == "offset":
            new = target.value
        elif target.kind == "timestamp":
            new = at_time[tp] if at_time[tp] >= 0 else hi  # nothing that late: the end
        elif target.kind == "shift":
            if current is None:
                raise KafkactlError(f"group {group!r} has no committed offset for {tp[0]}-{tp[1]} to shift")
            new = current + target.value
        else:
            raise ValueError(target.kind)
        rows.append(RewindRow(group, tp[0], tp[1], current, min(max(new, lo), hi)))
    return rows


def apply_rewind(zk: KazooClient | None, admin: Admin, group: str, rows: list[RewindRow]) -> None:
    """Write the planned offsets; refused while the group has live members (they would overwrite them)."""
    _refuse_if_live(zk, admin, group, "rewinding")
    offsets = {(r.topic, r.partition): r.new for r in rows}
    if zk is None:
        _commit_offsets(admin, group, offsets)
    else:
        consumers.commit(zk, group, offsets)


def delete(zk: KazooClient | None, admin: Admin, group: str) -> None:
    """Remove a group's registries and committed offsets; refused while it has live members. A broker-coordinated
    group is deleted by its coordinator (DeleteGroups), which refuses it while it has members; a ZooKeeper-
    coordinated one here, in ZooKeeper."""
    _refuse_if_live(zk, admin, group, "deleting")
    if zk is not None and kind_of(zk, group) == ZOOKEEPER:
        if not consumers.delete_group(zk, group):
            raise KafkactlError(f"no consumer group {group!r} in ZooKeeper")
        return
    try:
        admin.delete_group(group)
    except AdminError as exc:
        raise _group_error(group, exc, "deleting") from None


def _group_error(group: str, exc: AdminError, doing: str) -> KafkactlError:
    """A coordinator's refusal in kafkactl's words where it has them."""
    if "GROUP_ID_NOT_FOUND" in str(exc):
        return KafkactlError(f"no consumer group {group!r}")
    if "NON_EMPTY_GROUP" in str(exc):
        return KafkactlError(f"group {group!r} has live members; stop them before {doing} it")
    return exc


def delete_offsets(zk: KazooClient | None, admin: Admin, group: str, topic: str,
                   partitions: list[int] | None) -> dict[TopicPartition, str | None]:  # fmt: skip
    """Forget a group's committed offsets of a topic's partitions (None: all of them): {partition: None when
    deleted, else why not}. A broker-coordinated group's coordinator does it (OffsetDelete), refusing the
    partitions of a topic a live member subscribes to (GROUP_SUBSCRIBED_TO_TOPIC); a ZooKeeper-coordinated
    group's offsets are deleted here, refused while it has live members."""
    known = admin.list_topics()
    if topic not in known:
        raise KafkactlError(f"unknown topic {topic!r}")
    chosen = sorted(set(partitions)) if partitions else list(range(known[topic]))
    for p in chosen:
        if not 0 <= p < known[topic]:
            raise UsageError(f"topic {topic!r} has no partition {p} (it has {known[topic]})")
    tps = [(topic, p) for p in chosen]
    if zk is not None and kind_of(zk, group) == ZOOKEEPER:
        _refuse_if_live(zk, admin, group, "deleting offsets of")
        consumers.delete_partition_offsets(zk, group, tps)
        return dict.fromkeys(tps)
    try:
        errors = admin.delete_offsets(group, tps)
    except AdminError as exc:
        raise _group_error(group, exc, "deleting offsets of") from None
    return {tp: error_name(errors[tp]) if errors.get(tp) else None for tp in tps}


# -- through the brokers only (an authorizer is on) ----------------------------------------------------------


def _refuse(code: int, group: str, doing: str, topic: str | None = None) -> None:
    refused = refusal(code, group, doing, topic)
    if refused is not None:
        raise refused


def _coordinator(admin: Admin, group: str, doing: str) -> Connection:
    """The connection to the group's coordinator (FindCoordinator: Describe on the group)."""
    answer = admin.cluster.any_connection().request(ApiKey.FIND_COORDINATOR, {"key": group, "key_type": 0})
    code = answer["error_code"]
    _refuse(code, group, doing)
    if code:
        raise KafkactlError(f"no coordinator for group {group!r} ({error_name(code)})")
    return admin.cluster.connection(answer["node_id"])


def _describe_group(admin: Admin, group: str) -> dict[str, Any]:
    """DescribeGroups of one group at its coordinator (Describe on the group)."""
    answer = _coordinator(admin, group, "describe").request(ApiKey.DESCRIBE_GROUPS, {"groups": [group]})
    g = answer["groups"][0]
    _refuse(g["error_code"], group, "describe")
    if g["error_code"]:
        raise KafkactlError(f"cannot describe group {group!r} ({error_name(g['error_code'])})")
    return g


def _fetch_committed(admin: Admin, group: str) -> dict[TopicPartition, consumers.Committed]:
    """The group's committed offsets by OffsetFetch of all its topics (Describe on the group; the coordinator
    answers only the topics the principal may describe)."""
    conn = _coordinator(admin, group, "describe")
    answer = conn.request(ApiKey.OFFSET_FETCH, {"group_id": group, "topics": None, "require_stable": False})
    codes = [answer.get("error_code", 0)] + [p["error_code"] for t in answer["topics"] for p in t["partitions"]]
    for code in codes:
        _refuse(code, group, "describe")
    bad = [c for c in codes if c]
    if bad:
        raise KafkactlError(f"cannot fetch the committed offsets of group {group!r} ({error_name(bad[0])})")
    return {(t["name"], p["partition_index"]): consumers.Committed(p["committed_offset"], 0,
                                                                   p.get("committed_leader_epoch", -1),
                                                                   p.get("metadata") or "")
            for t in answer["topics"] for p in t["partitions"] if p["committed_offset"] >= 0}  # fmt: skip


def _commit_offsets(admin: Admin, group: str, offsets: dict[TopicPartition, int]) -> None:
    """OffsetCommit outside any generation, as Kafka's AdminClient alterConsumerGroupOffsets (Read on the group
    and on each topic); the coordinator refuses it while the group has members."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (t, p), off in sorted(offsets.items()):
        by_topic.setdefault(t, []).append({"partition_index": p, "committed_offset": off,
                                           "committed_leader_epoch": -1, "committed_metadata": ""})  # fmt: skip
    topics = [{"name": t, "partitions": ps} for t, ps in by_topic.items()]
    body = {"group_id": group, "generation_id": -1, "member_id": "", "group_instance_id": None,
            "retention_time_ms": -1, "topics": topics}  # fmt: skip
    answer = _coordinator(admin, group, "read").request(ApiKey.OFFSET_COMMIT, body)
    codes = [(t["name"], p["error_code"]) for t in answer["topics"] for p in t["partitions"]]
    for topic, code in codes:
        _refuse(code, group, "read", topic)
    bad = [code for _, code in codes if code]
    if bad:
        raise KafkactlError(f"group {group!r}: offsets not committed ({error_name(bad[0])})")


def now_ms() -> int:
    return int(time.time() * 1000)
