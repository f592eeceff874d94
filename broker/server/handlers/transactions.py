"""The transaction coordinator's APIs: InitProducerId with a transactional id (called from `produce.py`),
FindCoordinator key type 1 (called from `groups.py`), AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
DescribeTransactions and ListTransactions; and TxnOffsetCommit, which the group's coordinator answers.

The rules are `broker.coordinator.txn.coordinator`'s. Here: the ACL checks, as Kafka's KafkaApis makes them (Write
on the TransactionalId for InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit;
Describe for FindCoordinator and DescribeTransactions; Write on each topic for AddPartitionsToTxn, Read on
the group for AddOffsetsToTxn and TxnOffsetCommit, and Read on each topic for TxnOffsetCommit), and the
version rules: PRODUCER_FENCED is INVALID_PRODUCER_EPOCH for InitProducerId before v4 and for
AddPartitionsToTxn, AddOffsetsToTxn and EndTxn before v2 (KIP-588).

AddPartitionsToTxn answers per partition: UNKNOWN_TOPIC_OR_PARTITION (or TOPIC_AUTHORIZATION_FAILED) for
the partitions that cannot be added and OPERATION_NOT_ATTEMPTED for the others, or the coordinator's error
for every partition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kazoo.exceptions import KazooException

from broker.coordinator.group.coordinator import coordinator_for
from broker.coordinator.txn import store as txn_store
from broker.coordinator.txn.state import TxnState, fenced_error
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import RequestHeader
from broker.security.acl import Operation, ResourceType
from broker.security.acl_authorizer import allowed
from broker.security.session import current
from broker.zk.paths import StoredOffset, offset_entry_fits

if TYPE_CHECKING:
    from broker.server.services import Services

#: Kafka's OPERATION_NOT_ATTEMPTED (not in ErrorCode's usual set)
OPERATION_NOT_ATTEMPTED = 55


def _txn_allowed(b: Services, operation: Operation, txn_id: str, request: str) -> bool:
    return allowed(b.authorizer, operation, ResourceType.TRANSACTIONAL_ID, txn_id, request)


def find_txn_coordinator(b: Services, txn_id: str) -> dict[str, Any]:
    """FindCoordinator key type 1: the broker coordinating `txn_id`."""
    if not _txn_allowed(b, Operation.DESCRIBE, txn_id, "FindCoordinator"):
        return {"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "node_id": -1, "host": "", "port": -1}
    node = coordinator_for(txn_id, b.cache.brokers)
    if node < 0 or node not in b.cache.brokers:
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "error_message": "no live broker"}
    host, port, _ = b.cache.brokers[node]
    host, port = b.cache.endpoint(node, current().listener) or (host, port)
    return {"error_code": ErrorCode.NONE, "node_id": node, "host": host, "port": port}


async def init_transactional_producer(b: Services, version: int, req: dict[str, Any]) -> dict[str, Any]:
    """InitProducerId with a transactional id."""
    txn_id = req["transactional_id"]
    if not _txn_allowed(b, Operation.WRITE, txn_id, "InitProducerId"):
        return {"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    if not txn_id:
        return {"error_code": ErrorCode.INVALID_REQUEST}
    try:
        error, pid, epoch = await b.txn_coordinator.init_producer_id(
            txn_id, req["transaction_timeout_ms"], req.get("producer_id", -1), req.get("producer_epoch", -1)
        )
    except RuntimeError:
        error, pid, epoch = ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1
    if error == ErrorCode.PRODUCER_FENCED:
        error = fenced_error(version, 4)
    return {"error_code": error, "producer_id": pid, "producer_epoch": epoch}


async def handle_add_partitions_to_txn(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    txn_id = req["transactional_id"]
    asked = [(t["name"], p) for t in req["topics"] for p in t["partitions"]]
    errors: dict[tuple[str, int], int] = {}
    if not _txn_allowed(b, Operation.WRITE, txn_id, "AddPartitionsToTxn"):
        errors = dict.fromkeys(asked, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    else:
        for t, p in asked:
            if not allowed(b.authorizer, Operation.WRITE, ResourceType.TOPIC, t, "AddPartitionsToTxn"):
                errors[(t, p)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif b.cache.partition(t, p) is None and not (await b.refresh_topic(t) and b.cache.partition(t, p)):
                errors[(t, p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if errors:
            errors.update({tp: OPERATION_NOT_ATTEMPTED for tp in asked if tp not in errors})
        else:
            error = await b.txn_coordinator.add_to_txn(txn_id, req["producer_id"], req["producer_epoch"],
                                                       set(asked), set())  # fmt: skip
            if error == ErrorCode.PRODUCER_FENCED:
                error = fenced_error(header.api_version, 2)
            errors = dict.fromkeys(asked, error)
    by_topic: dict[str, list[dict[str, int]]] = {}
    for (t, p), code in errors.items():
        by_topic.setdefault(t, []).append({"partition_index": p, "error_code": code})
    return {"results": [{"name": t, "results": ps} for t, ps in by_topic.items()]}


async def handle_add_offsets_to_txn(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    txn_id, group = req["transactional_id"], req["group_id"]
    if not _txn_allowed(b, Operation.WRITE, txn_id, "AddOffsetsToTxn"):
        return {"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    if not allowed(b.authorizer, Operation.READ, ResourceType.GROUP, group, "AddOffsetsToTxn"):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    error = await b.txn_coordinator.add_to_txn(txn_id, req["producer_id"], req["producer_epoch"], set(), {group})
    if error == ErrorCode.PRODUCER_FENCED:
        error = fenced_error(header.api_version, 2)
    return {"error_code": error}


async def handle_end_txn(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    txn_id = req["transactional_id"]
    if not _txn_allowed(b, Operation.WRITE, txn_id, "EndTxn"):
        return {"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    error = await b.txn_coordinator.end_txn(txn_id, req["producer_id"], req["producer_epoch"], req["committed"])
    if error == ErrorCode.PRODUCER_FENCED:
        error = fenced_error(header.api_version, 2)
    return {"error_code": error}


async def handle_txn_offset_commit(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    """TxnOffsetCommit, on the group's coordinator: the offsets are held (durably, `txn_store.add_offsets`,
    written only while the transaction is still Ongoing) until the transaction ends; its coordinator commits
    them to the group, or drops them."""
    txn_id, group = req["transactional_id"], req["group_id"]
    asked = [(t["name"], p) for t in req["topics"] for p in t["partitions"]]
    if not _txn_allowed(b, Operation.WRITE, txn_id, "TxnOffsetCommit"):
        error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not allowed(b.authorizer, Operation.READ, ResourceType.GROUP, group, "TxnOffsetCommit"):
        error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif not group:
        error = ErrorCode.INVALID_GROUP_ID
    elif not b.coordinates(group):
        error = ErrorCode.NOT_COORDINATOR
    else:
        error = await b.txn_coordinator.txn_offsets_allowed(txn_id, group, req["producer_id"], req["producer_epoch"])
        if not error and req.get("member_id"):  # (v3+: a member's commit is checked as OffsetCommit's)
            await b.load_group(group)
            error = b.coordinator.commit_error(group, req["member_id"], req.get("generation_id", -1),
                                               req.get("group_instance_id"))  # fmt: skip
            if error == ErrorCode.UNKNOWN_MEMBER_ID and group not in b.coordinator.groups:
                error = ErrorCode.NONE  # (a group with no members here: the producer commits for it)
    errors: dict[tuple[str, int], int] = {}
    held: dict[tuple[str, int], txn_store.PendingOffset] = {}
    for t, part in asked:
        code = error
        if not code:
            if not allowed(b.authorizer, Operation.READ, ResourceType.TOPIC, t, "TxnOffsetCommit"):
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif b.cache.partition(t, part["partition_index"]) is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif len((part.get("committed_metadata") or "").encode()) > b.config.offset_metadata_max_bytes or (
                not offset_entry_fits(StoredOffset(0, 0, part.get("committed_metadata") or ""))
            ):
                code = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                held[(t, part["partition_index"])] = txn_store.PendingOffset(
                    part["committed_offset"],
                    part.get("committed_leader_epoch", -1),
                    part.get("committed_metadata") or "",
                )
        errors[(t, part["partition_index"])] = code
    if held:
        try:
            if b.zk is None:
                raise KazooException("no ZooKeeper session")
            # memory stops answering them: their transaction's coordinator commits them without telling us
            b.group_store.note_txn_offsets(group, list(held))
            # (checked again in the write itself: the transaction may have ended since the check above)
            late = await b.blocking(txn_store.add_offsets, b.zk, group, txn_id, req["producer_id"],
                                    req["producer_epoch"], held)  # fmt: skip
        except KazooException:  # (not held, or held with its answer lost: the client retries)
            late = ErrorCode.COORDINATOR_NOT_AVAILABLE
        finally:  # again once written (or maybe written): a read that saw no held copy may have ended meanwhile
            b.group_store.note_txn_offsets(group, list(held))
        if late:
            errors = {tp: code or late for tp, code in errors.items()}
    by_topic: dict[str, list[dict[str, int]]] = {}
    for (t, p), code in errors.items():
        by_topic.setdefault(t, []).append({"partition_index": p, "error_code": code})
    return {"topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}


async def handle_describe_transactions(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    out = []
    for txn_id in req["transactional_ids"]:
        if not _txn_allowed(b, Operation.DESCRIBE, txn_id, "DescribeTransactions"):
            out.append({"transactional_id": txn_id, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                        "transaction_state": "", "topics": []})  # fmt: skip
            continue
        out.append(await b.txn_coordinator.describe(txn_id))
    return {"transaction_states": out}


async def handle_list_transactions(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    """The ids this broker coordinates that the principal may describe, filtered by state and producer id."""
    known = {str(s) for s in TxnState}
    states = set(req["state_filters"] or ())
    pids = set(req["producer_id_filters"] or ())
    rows = []
    try:
        listing = await b.txn_coordinator.listing()
    except KazooException:
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "transaction_states": []}
    for txn_id, meta in listing:
        if states and str(meta.state) not in states or pids and meta.producer_id not in pids:
            continue
        if not allowed(b.authorizer, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id, log_denial=False):
            continue
        rows.append({"transactional_id": txn_id, "producer_id": meta.producer_id,
                     "transaction_state": str(meta.state)})  # fmt: skip
    return {"error_code": ErrorCode.NONE, "unknown_state_filters": sorted(states - known), "transaction_states": rows}
