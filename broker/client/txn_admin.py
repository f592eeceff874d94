"""Transactions as an administrator sees them (`kafkactl txn`): ListTransactions asked of every live broker
(each answers the transactional ids it coordinates) and DescribeTransactions asked of an id's coordinator
(found with FindCoordinator key type 1), as Kafka's `kafka-transactions.sh list|describe` does."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from broker.client.admin import Admin, AdminError, check_code
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode


@dataclass(frozen=True)
class TxnListing:
    transactional_id: str
    coordinator: int
    producer_id: int
    state: str


@dataclass(frozen=True)
class TxnDescription:
    transactional_id: str
    coordinator: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int  # -1: no transaction under way
    partitions: list[tuple[str, int]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["partitions"] = [{"topic": t, "partition": p} for t, p in self.partitions]
        return d


def list_transactions(admin: Admin, states: list[str] = (), producer_ids: list[int] = ()) -> list[TxnListing]:
    """Every transactional id the live brokers coordinate (filtered by state names and producer ids)."""
    cluster = admin.cluster
    cluster.metadata([])
    out: list[TxnListing] = []
    for node in sorted(cluster.brokers):
        conn = cluster.connection(node)
        if ApiKey.LIST_TRANSACTIONS not in conn.versions:
            raise AdminError(f"broker {node} does not answer ListTransactions (Kafka before 3.0)")
        answer = conn.request(ApiKey.LIST_TRANSACTIONS, {"state_filters": list(states),
                                                         "producer_id_filters": list(producer_ids)})  # fmt: skip
        check_code(answer["error_code"], None, f"cannot list the transactions of broker {node}")
        unknown = answer.get("unknown_state_filters") or []
        if unknown:
            raise AdminError(f"unknown transaction state {unknown[0]!r} (valid: Empty, Ongoing, PrepareCommit, "
                             "PrepareAbort, CompleteCommit, CompleteAbort, Dead)")  # fmt: skip
        out += [TxnListing(t["transactional_id"], node, t["producer_id"], t["transaction_state"])
                for t in answer["transaction_states"]]  # fmt: skip
    return sorted(out, key=lambda t: t.transactional_id)


def describe_transaction(admin: Admin, txn_id: str) -> TxnDescription:
    """DescribeTransactions of one id, asked of its coordinator; AdminError when unknown or refused."""
    found = admin.cluster.any_connection().request(ApiKey.FIND_COORDINATOR, {"key": txn_id, "key_type": 1})
    check_code(found["error_code"], found.get("error_message"), f"no coordinator for transactional id {txn_id!r}")
    node = found["node_id"]
    admin.cluster.metadata([])
    answer = admin.cluster.connection(node).request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [txn_id]})
    (t,) = answer["transaction_states"]
    if t["error_code"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
        raise AdminError(f"transactional id {txn_id!r} not found")
    check_code(t["error_code"], None, f"cannot describe transactional id {txn_id!r}")
    parts = [(x["topic"], p) for x in t["topics"] for p in x["partitions"]]
    return TxnDescription(txn_id, node, t["transaction_state"], t["producer_id"], t["producer_epoch"],
                          t["transaction_timeout_ms"], t["transaction_start_time_ms"], sorted(parts))  # fmt: skip
