"""The group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, DescribeGroups, ListGroups, DeleteGroups and OffsetDelete.

Membership is `broker.coordinator.group.coordinator`'s; committed offsets live in ZooKeeper's offset registry
(in blocks of partitions, `/consumers/<g>/offsets/<t>/block-<n>`), through the broker's
`broker.coordinator.group.store`, so no group request waits on ZooKeeper for long: OffsetCommit is answered once
the write is done, or held in memory (error 0) when ZooKeeper is slow or unreachable; OffsetFetch answers what
ZooKeeper and memory say, and a partition that neither can tell during an outage COORDINATOR_LOAD_IN_PROGRESS
(retriable: librdkafka retries it in place). A request for a group this broker does not coordinate gets
NOT_COORDINATOR, and the client asks FindCoordinator again.

With an authorizer (as Kafka): JoinGroup, SyncGroup, Heartbeat, LeaveGroup and OffsetCommit need Read on the
group, FindCoordinator, DescribeGroups and OffsetFetch Describe (GROUP_AUTHORIZATION_FAILED); OffsetCommit
needs Read on each topic and OffsetFetch Describe (TOPIC_AUTHORIZATION_FAILED); ListGroups lists the groups
the principal may describe, all of them with Describe on the cluster; DeleteGroups needs Delete on each group,
OffsetDelete Delete on the group and Read on each topic.

DeleteGroups deletes an Empty group (committed offsets but no members here: its offsets and stored generation
go), NON_EMPTY_GROUP while it has members, GROUP_ID_NOT_FOUND when nothing of it is stored. OffsetDelete
deletes committed offsets of an Empty group, and of a consumer group with members those of the topics no
member subscribes to (GROUP_SUBSCRIBED_TO_TOPIC for the others; a group of another protocol type with members:
NON_EMPTY_GROUP). Both wait for ZooKeeper (`GroupStore.delete`): unreachable, the answer is
COORDINATOR_NOT_AVAILABLE and the client retries.

Versions are Kafka 2.8's (flexible ones included): JoinGroup v7 and SyncGroup v5 answer the group's protocol
type (and name), SyncGroup v5 requires both and checks them against the group's (INCONSISTENT_GROUP_PROTOCOL),
ListGroups v4 answers each group's state and filters by state, and OffsetFetch v7's require_stable answers
UNSTABLE_OFFSET_COMMIT for a partition with offsets a transaction's TxnOffsetCommit holds until it ends
(`broker.coordinator.txn.store`; TxnOffsetCommit itself is in `handlers/transactions.py`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import KazooException

from broker.coordinator.group.coordinator import GroupState, coordinator_for
from broker.coordinator.group.store import NO_OFFSET
from broker.coordinator.txn.store import pending_partitions
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import RequestHeader
from broker.security.acl import Operation, ResourceType
from broker.security.acl_authorizer import allowed, authorized_operations, cluster_allowed
from broker.security.session import current
from broker.server.handlers.transactions import find_txn_coordinator
from broker.server.network import current_peer
from broker.zk.paths import StoredOffset, offset_entry_fits

if TYPE_CHECKING:
    from broker.server.services import Services

log = logging.getLogger(__name__)


async def handle_find_coordinator(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    if req.get("key_type", 0) == 1:  # a transactional id's coordinator
        return find_txn_coordinator(b, req["key"])
    if req.get("key_type", 0) != 0:
        return {"error_code": ErrorCode.INVALID_REQUEST, "error_message": f"unknown key type {req['key_type']}"}
    if not _group_allowed(b, Operation.DESCRIBE, req["key"], "FindCoordinator"):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "node_id": -1, "host": "", "port": -1}
    node = coordinator_for(req["key"], b.cache.brokers)
    if node < 0 or node not in b.cache.brokers:
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "error_message": "no live broker"}
    host, port, _ = b.cache.brokers[node]
    host, port = b.cache.endpoint(node, current().listener) or (host, port)  # (the listener asked on)
    return {"error_code": ErrorCode.NONE, "node_id": node, "host": host, "port": port}


def _group_allowed(b: Services, operation: Operation, group_id: str, request: str, log_denial: bool = True) -> bool:
    return allowed(b.authorizer, operation, ResourceType.GROUP, group_id, request, log_denial=log_denial)


def _topic_allowed(b: Services, operation: Operation, topic: str, request: str) -> bool:
    return allowed(b.authorizer, operation, ResourceType.TOPIC, topic, request)


def _not_coordinator(b: Services, group_id: str) -> bool:
    return not b.coordinates(group_id)


async def _not_coordinating(b: Services, group_id: str) -> bool:
    """`_not_coordinator`, asked again after taking over the group's stored generation (if new here): the
    live brokers, and with them the coordinator, may change while it is read."""
    if _not_coordinator(b, group_id):
        return True
    await b.load_group(group_id)
    return _not_coordinator(b, group_id)


async def handle_join_group(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    if not _group_allowed(b, Operation.READ, req["group_id"], "JoinGroup"):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "generation_id": -1, "member_id": req["member_id"]}
    if await _not_coordinating(b, req["group_id"]):
        return {"error_code": ErrorCode.NOT_COORDINATOR, "generation_id": -1, "member_id": req["member_id"]}
    host = current_peer.get().rpartition(":")[0]
    return await b.coordinator.join(req, header.client_id or "", f"/{host}", header.api_version)


async def handle_sync_group(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    if header.api_version >= 5 and (req["protocol_type"] is None or req["protocol_name"] is None):
        return {"error_code": ErrorCode.INCONSISTENT_GROUP_PROTOCOL}  # (v5+ must name both: Kafka asks first)
    if not _group_allowed(b, Operation.READ, req["group_id"], "SyncGroup"):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    if await _not_coordinating(b, req["group_id"]):
        return {"error_code": ErrorCode.NOT_COORDINATOR}
    return await b.coordinator.sync(req)


async def handle_heartbeat(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    if not _group_allowed(b, Operation.READ, req["group_id"], "Heartbeat"):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    if await _not_coordinating(b, req["group_id"]):
        return {"error_code": ErrorCode.NOT_COORDINATOR}
    return b.coordinator.heartbeat(req)


async def handle_leave_group(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    if not _group_allowed(b, Operation.READ, req["group_id"], "LeaveGroup"):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    if await _not_coordinating(b, req["group_id"]):
        return {"error_code": ErrorCode.NOT_COORDINATOR}
    return b.coordinator.leave(req, header.api_version)


async def handle_offset_commit(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    gid = req["group_id"]
    if not _group_allowed(b, Operation.READ, gid, "OffsetCommit"):
        error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif not gid:
        error = ErrorCode.INVALID_GROUP_ID
    elif await _not_coordinating(b, gid) if req.get("member_id") else _not_coordinator(b, gid):
        error = ErrorCode.NOT_COORDINATOR  # (a member's commit: its group may have been taken over just now)
    else:
        error = b.coordinator.commit_error(gid, req.get("member_id", ""), req.get("generation_id", -1),
                                           req.get("group_instance_id"))  # fmt: skip
    answer: list[dict[str, Any]] = []
    offsets: dict[tuple[str, int], StoredOffset] = {}
    max_metadata = b.config.offset_metadata_max_bytes
    for t in req["topics"]:
        parts = []
        topic_denied = not error and not _topic_allowed(b, Operation.READ, t["name"], "OffsetCommit")
        for p in t["partitions"]:
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED if topic_denied else error
            if not code:
                if b.cache.partition(t["name"], p["partition_index"]) is None:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif (stored := _stored(header.api_version, p, max_metadata)) is None:
                    code = ErrorCode.OFFSET_METADATA_TOO_LARGE
                else:
                    offsets[(t["name"], p["partition_index"])] = stored
            parts.append({"partition_index": p["partition_index"], "error_code": code})
        answer.append({"name": t["name"], "partitions": parts})
    if offsets:  # written, or held in memory until ZooKeeper takes it: accepted either way
        await b.group_store.commit(gid, offsets)
    return {"topics": answer}


def _stored(version: int, p: dict[str, Any], max_metadata: int) -> StoredOffset | None:
    """What an OffsetCommit partition stores, as Kafka: null metadata is "", epoch -1 is none (v6+ carry one);
    v0 keeps no metadata (Kafka writes v0 commits to ZooKeeper's offset registry, offset only). None: the
    metadata is longer than `offset.metadata.max.bytes` (Java's length, UTF-16 code units) or would not fit its
    offset block (`paths.OFFSET_ENTRY_MAX_BYTES`)."""
    metadata = p.get("committed_metadata")
    if metadata is None:  # (never too large, whatever the limit)
        metadata = ""
    elif len(metadata) * 2 > max_metadata and len(metadata.encode("utf-16-le")) // 2 > max_metadata:
        return None
    stored = StoredOffset(p["committed_offset"], p.get("committed_leader_epoch", -1), metadata if version else "")
    return stored if offset_entry_fits(stored) else None


async def handle_offset_fetch(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    gid = req["group_id"]
    if not _group_allowed(b, Operation.DESCRIBE, gid, "OffsetFetch"):
        error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    else:
        error = ErrorCode.NOT_COORDINATOR if _not_coordinator(b, gid) else ErrorCode.NONE
    wanted = req["topics"]
    committed: dict[tuple[str, int], StoredOffset] = {}
    pending: set[tuple[str, int]] = set()
    if not error:
        asked: dict[str, list[int]] | None = None
        if wanted is not None:
            asked = {}
            for t in wanted:
                asked.setdefault(t["name"], []).extend(t["partition_indexes"])
        found = await b.group_store.fetch(gid, asked)
        if req.get("require_stable") and found is not None:  # (v7) offsets a transaction holds are not answered
            try:
                if b.zk is None:
                    raise KazooException("no ZooKeeper session")
                pending = await b.blocking(pending_partitions, b.zk, gid)
            except KazooException:  # (cannot tell which are stable: the client retries)
                found = None
        if found is None:  # ZooKeeper unreachable and not all in memory: the client retries (see fetch)
            error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        else:
            committed = dict(sorted((tp, o) for tp, o in found.items() if o.offset >= 0))
    if wanted is None:  # every committed topic the principal may describe
        by_topic: dict[str, list[int]] = {}
        for t, p in committed:
            by_topic.setdefault(t, []).append(p)
        wanted = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()
                  if allowed(b.authorizer, Operation.DESCRIBE, ResourceType.TOPIC, t, log_denial=False)]  # fmt: skip
    topics_out = []
    part_error = error if header.api_version < 2 else ErrorCode.NONE  # v2+ carries it once, at the top
    for t in wanted:
        parts = []
        denied = not error and not _topic_allowed(b, Operation.DESCRIBE, t["name"], "OffsetFetch")
        for p in t["partition_indexes"]:
            stored = NO_OFFSET if denied else committed.get((t["name"], p), NO_OFFSET)
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED if denied else part_error
            if not code and (t["name"], p) in pending:
                code, stored = ErrorCode.UNSTABLE_OFFSET_COMMIT, NO_OFFSET
            parts.append({"partition_index": p, "committed_offset": stored.offset, "error_code": code,
                          "committed_leader_epoch": stored.leader_epoch, "metadata": stored.metadata})  # fmt: skip
        topics_out.append({"name": t["name"], "partitions": parts})
    return {"topics": topics_out, "error_code": error}


async def handle_describe_groups(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    out = []
    for gid in req["groups"]:
        if not _group_allowed(b, Operation.DESCRIBE, gid, "DescribeGroups"):
            out.append({"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "group_id": gid})
            continue
        if await _not_coordinating(b, gid):
            out.append({"error_code": ErrorCode.NOT_COORDINATOR, "group_id": gid})
            continue
        desc = b.coordinator.describe(gid)
        if desc["group_state"] == GroupState.DEAD and gid in await _stored_groups(b):
            desc.update(group_state=GroupState.EMPTY, protocol_type="consumer")  # no members, committed offsets
        if req.get("include_authorized_operations"):  # (KIP-430, v3+)
            desc["authorized_operations"] = authorized_operations(b.authorizer, ResourceType.GROUP, gid)
        out.append(desc)
    return {"groups": out}


async def handle_list_groups(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    """The live groups this broker coordinates and the empty ones whose offsets it would serve, with their
    states (v4+); v4's states filter keeps the groups in one of the states named (empty or null: all), the
    names compared as Kafka 2.8 does, exactly ("Stable", "Empty", "PreparingRebalance", ...)."""
    groups = {g.group_id: (g.protocol_type or "consumer", str(g.state)) for g in b.coordinator.groups.values()}
    for gid in await _stored_groups(b):
        if gid not in groups and not _not_coordinator(b, gid):
            groups[gid] = ("consumer", str(GroupState.EMPTY))  # committed offsets, no members
    states = set(req.get("states_filter") or ())
    if states:
        groups = {g: ts for g, ts in groups.items() if ts[1] in states}
    if not cluster_allowed(b.authorizer, Operation.DESCRIBE, log_denial=False):  # then those it may describe
        groups = {g: ts for g, ts in groups.items() if _group_allowed(b, Operation.DESCRIBE, g, "", log_denial=False)}
    return {"error_code": ErrorCode.NONE,
            "groups": [{"group_id": g, "protocol_type": t, "group_state": state}
                       for g, (t, state) in sorted(groups.items())]}  # fmt: skip


async def _stored_groups(b: Services) -> set[str]:
    """Broker-coordinated groups with committed offsets in ZooKeeper (not kafkactl's own ZooKeeper groups), or
    held to be written there; within a short bound."""
    return await b.group_store.stored_groups()


async def handle_delete_groups(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    results = []
    for gid in dict.fromkeys(req["groups_names"]):  # (each once, as Kafka)
        if not _group_allowed(b, Operation.DELETE, gid, "DeleteGroups"):
            error = ErrorCode.GROUP_AUTHORIZATION_FAILED
        elif not gid:
            error = ErrorCode.GROUP_ID_NOT_FOUND  # (no group has the empty id here)
        elif await _not_coordinating(b, gid):
            error = ErrorCode.NOT_COORDINATOR
        elif b.coordinator.has_members(gid):
            error = ErrorCode.NON_EMPTY_GROUP
        else:
            error = await _delete_stored(b, gid, None)
        results.append({"group_id": gid, "error_code": error})
    return {"results": results}


async def _delete_stored(b: Services, gid: str, partitions: list[tuple[str, int]] | None) -> ErrorCode:
    """Delete what is stored of a group without members here: GROUP_ID_NOT_FOUND when nothing is,
    COORDINATOR_NOT_AVAILABLE when ZooKeeper cannot say or did not delete."""
    exists = await b.group_store.has_group(gid)
    if exists is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if not exists:
        return ErrorCode.GROUP_ID_NOT_FOUND
    if partitions is not None and not partitions:
        return ErrorCode.NONE
    if not await b.group_store.delete(gid, partitions):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if partitions is None:
        log.info("group %s deleted (its committed offsets and stored generation)", gid)
    return ErrorCode.NONE


async def handle_offset_delete(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    gid = req["group_id"]
    if not _group_allowed(b, Operation.DELETE, gid, "OffsetDelete"):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "topics": []}
    errors: dict[tuple[str, int], int] = {}
    for t in req["topics"]:
        denied = not _topic_allowed(b, Operation.READ, t["name"], "OffsetDelete")
        for p in t["partitions"]:
            tp = (t["name"], p["partition_index"])
            if denied:
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif b.cache.partition(*tp) is None:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                errors[tp] = ErrorCode.NONE  # (eligible, so far)
    eligible = [tp for tp, e in errors.items() if e == ErrorCode.NONE]
    if not gid:
        group_error = ErrorCode.INVALID_GROUP_ID
    elif await _not_coordinating(b, gid):
        group_error = ErrorCode.NOT_COORDINATOR
    elif b.coordinator.has_members(gid):
        group = b.coordinator.groups[gid]
        if group.protocol_type != "consumer":
            group_error = ErrorCode.NON_EMPTY_GROUP
        else:
            subscribed = b.coordinator.subscribed_topics(gid)
            for tp in eligible:
                if subscribed is None or tp[0] in subscribed:
                    errors[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            eligible = [tp for tp in eligible if errors[tp] == ErrorCode.NONE]
            group_error = ErrorCode.NONE
            if eligible and not await b.group_store.delete(gid, eligible):
                group_error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    else:
        group_error = await _delete_stored(b, gid, eligible)
    if group_error:  # (as Kafka: then the answer names no partitions)
        return {"error_code": group_error, "topics": []}
    by_topic: dict[str, list[dict[str, int]]] = {}
    for (topic, p), error in errors.items():
        by_topic.setdefault(topic, []).append({"partition_index": p, "error_code": error})
    return {"error_code": ErrorCode.NONE, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
