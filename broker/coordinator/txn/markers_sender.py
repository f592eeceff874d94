"""The transaction coordinator's WriteTxnMarkers (27) to partition leaders.

A transaction that ends (EndTxn, a timeout, a fencing InitProducerId) gets its commit or abort marker written
to every partition it touched: one WriteTxnMarkers request per leader, over the inter-broker listener with
the inter-broker security settings (as the replica fetchers connect). A partition whose leader is unknown,
not live, answers NOT_LEADER_OR_FOLLOWER (or any retriable error), or whose connection is lost, is asked
again with the leader the metadata cache names then, after a short backoff, until every partition answered
NONE. A partition that no longer exists (UNKNOWN_TOPIC_OR_PARTITION from a live leader, or gone from the
cache) is given up: it has no log to mark. TRANSACTION_COORDINATOR_FENCED means a newer coordinator owns the
id: `Superseded` is raised and the caller drops its state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from broker.client.aio import AsyncConnection
from broker.client.security import inter_broker_security
from broker.errors import KafkactlError
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, error_name

if TYPE_CHECKING:
    from broker.coordinator.txn.interfaces import ClusterMetadata, CoordinatorConfig

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

#: between rounds of a marker some partitions did not take yet
RETRY_BACKOFF_S = 0.2


class Superseded(Exception):
    """A leader answered TRANSACTION_COORDINATOR_FENCED: a newer coordinator completes this transaction."""


class MarkerSender:
    """Sends markers for one broker's coordinator; keeps one connection per leader broker."""

    def __init__(self, broker_id: int, config: CoordinatorConfig, cache: ClusterMetadata,
                 endpoint: Callable[[int], tuple[str, int] | None]) -> None:  # fmt: skip
        self.broker_id = broker_id
        self.config = config
        self.cache = cache
        self.endpoint = endpoint  # broker id → its inter-broker (host, port), None when not live
        self._conns: dict[int, AsyncConnection] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def close(self) -> None:
        conns, self._conns = self._conns, {}
        for conn in conns.values():
            with contextlib.suppress(Exception):
                await conn.close(0.5)

    async def _connection(self, node: int) -> AsyncConnection:
        lock = self._locks.setdefault(node, asyncio.Lock())
        async with lock:
            conn = self._conns.get(node)
            if conn is None or conn.closed:
                address = self.endpoint(node)
                if address is None:
                    raise KafkactlError(f"broker {node} is not live")
                conn = await AsyncConnection.open(
                    *address, client_id=f"broker-{self.broker_id}-txn-markers", timeout=30.0,
                    security=inter_broker_security(self.config),
                )  # fmt: skip
                self._conns[node] = conn
            return conn

    async def _drop(self, node: int) -> None:
        conn = self._conns.pop(node, None)
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close(0.1)

    async def write(self, txn_id: str, producer_id: int, producer_epoch: int, commit: bool,
                    coordinator_epoch: int, partitions: set[TopicPartition],
                    still_mine: Callable[[], Awaitable[bool]] | None = None) -> None:  # fmt: skip
        """Write the marker to every partition; returns once each took it (or is gone). `still_mine` is
        asked before each round: False (the id moved to another coordinator, or this one's ZooKeeper session
        expired) raises `Superseded`."""
        left = set(partitions)
        rounds = 0
        while left:
            if still_mine is not None and not await still_mine():
                raise Superseded(txn_id)
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(left):
                info = self.cache.partition(*tp)
                if info is None:
                    if tp[0] not in self.cache.topics:  # the topic is gone: nothing to mark
                        log.info("transaction %s: %s-%d no longer exists; no marker written", txn_id, *tp)
                        left.discard(tp)
                    continue
                if info.leader >= 0:
                    by_leader.setdefault(info.leader, []).append(tp)
            results = await asyncio.gather(*(
                self._send(node, tps, producer_id, producer_epoch, commit, coordinator_epoch)
                for node, tps in by_leader.items()
            ))  # fmt: skip
            for done in results:
                left -= done
            if left:
                rounds += 1
                if rounds % 25 == 0:
                    log.warning("transaction %s: markers still not written to %s after %d rounds", txn_id,
                                ", ".join(f"{t}-{p}" for t, p in sorted(left)), rounds)  # fmt: skip
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def _send(self, node: int, tps: list[TopicPartition], producer_id: int, producer_epoch: int,
                    commit: bool, coordinator_epoch: int) -> set[TopicPartition]:  # fmt: skip
        """One WriteTxnMarkers to `node`: the partitions done (written, or gone)."""
        topics: dict[str, list[int]] = {}
        for t, p in tps:
            topics.setdefault(t, []).append(p)
        body = {"markers": [{
            "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": commit,
            "coordinator_epoch": coordinator_epoch,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
        }]}  # fmt: skip
        try:
            conn = await self._connection(node)
            answer = await conn.request(ApiKey.WRITE_TXN_MARKERS, body)
        except (TimeoutError, KafkactlError, OSError) as exc:
            log.debug("markers to broker %d: %s (retried)", node, exc)
            await self._drop(node)
            return set()
        done: set[TopicPartition] = set()
        for marker in answer["markers"]:
            for t in marker["topics"]:
                for p in t["partitions"]:
                    code = p["error_code"]
                    if code in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                        done.add((t["name"], p["partition_index"]))
                    elif code == ErrorCode.TRANSACTION_COORDINATOR_FENCED:
                        raise Superseded(f"{t['name']}-{p['partition_index']}")
                    elif code not in _RETRIED:
                        log.warning("marker to %s-%d on broker %d: %s (retried)", t["name"], p["partition_index"],
                                    node, error_name(code))  # fmt: skip
        return done


_RETRIED = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.UNKNOWN_SERVER_ERROR,
}  # fmt: skip
