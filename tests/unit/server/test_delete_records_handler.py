"""The DeleteRecords handler over a real log and `ReplicaManager` (a stand-in for the rest of the broker): the
answers Kafka gives — the new low watermark, -1 for the high watermark, OFFSET_OUT_OF_RANGE, unknown and
internal topics, a compacted topic, a refused ACL — and the checkpoint written before the answer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from broker.log.checkpoint import LOG_START, OffsetCheckpointFile
from broker.log.manager import LogManager
from broker.protocol.errors import ErrorCode
from broker.records.batch import Record, build_batch
from broker.replication.manager import ReplicaManager
from broker.security.acl import Operation
from broker.server.cache import MetadataCache, PartitionInfo
from broker.server.config import BrokerConfig
from broker.server.handlers.records import handle_delete_records
from broker.server.purgatory import Purgatory


class DenyDelete:
    """An authorizer allowing everything but Delete."""

    def allows(self, operation: Operation, *args: Any, **kwargs: Any) -> bool:
        return operation != Operation.DELETE


class Broker:
    """What the handler uses of a broker: one broker (id 1) leading every partition of its topics alone."""

    def __init__(self, tmp_path: Path) -> None:
        self.id = 1
        self.authorizer = None
        self.log_dir = tmp_path / "logs"
        self.logs = LogManager([self.log_dir], broker_id=1)
        self.logs.startup()
        self.cache = MetadataCache(brokers={1: ("h", 1, None)})

        async def blocking(fn, *args):
            return fn(*args)

        self.replicas = ReplicaManager(1, BrokerConfig(), self.cache, self.logs, Purgatory(),
                                       lambda t, p: self.logs.get_or_create(t, p), blocking, lambda: None)  # fmt: skip

    def topic(self, name: str, partitions: int, records: int, config: dict[str, str] | None = None) -> None:
        self.cache.topics[name] = {p: PartitionInfo([1], 1, 0, [1]) for p in range(partitions)}
        self.cache.configs[name] = dict(config or {})
        for p in range(partitions):
            self.replicas.apply((name, p), self.cache.topics[name][p])
            plog = self.logs.get(name, p)
            for i in range(records):
                plog.append(build_batch([Record(0, 0, None, b"r%d" % i)]))

    async def leader_log(self, topic: str, partition: int):
        info = self.cache.partition(topic, partition)
        if info is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, None
        return ErrorCode.NONE, self.logs.get(topic, partition), info

    def high_watermark(self, plog) -> int:
        return self.replicas.high_watermark((plog.topic, plog.partition), plog)


def delete(b: Broker, *parts: tuple[str, int, int]) -> dict[tuple[str, int], tuple[int, int]]:
    topics: dict[str, list[dict[str, int]]] = {}
    for t, p, offset in parts:
        topics.setdefault(t, []).append({"partition_index": p, "offset": offset})
    req = {"topics": [{"name": t, "partitions": ps} for t, ps in topics.items()], "timeout_ms": 1000}
    answer = asyncio.run(handle_delete_records(b, None, req))
    return {(t["name"], p["partition_index"]): (p["error_code"], p["low_watermark"])
            for t in answer["topics"] for p in t["partitions"]}  # fmt: skip


def test_the_start_moves_and_is_checkpointed_before_the_answer(tmp_path):
    b = Broker(tmp_path)
    b.topic("t", 2, 10)
    assert delete(b, ("t", 0, 4), ("t", 1, -1)) == {("t", 0): (0, 4), ("t", 1): (0, 10)}
    assert OffsetCheckpointFile(b.log_dir / LOG_START).read() == {("t", 0): 4, ("t", 1): 10}
    assert delete(b, ("t", 0, 2)) == {("t", 0): (0, 4)}  # below the start: nothing moves, no error


def test_refusals(tmp_path):
    b = Broker(tmp_path)
    b.topic("t", 1, 10)
    b.topic("__consumer_offsets", 1, 3)
    b.topic("compacted", 1, 3, {"cleanup.policy": "compact"})
    b.topic("both", 1, 3, {"cleanup.policy": "compact,delete"})
    assert delete(
        b, ("t", 0, 11), ("t", 3, 1), ("nope", 0, 1), ("__consumer_offsets", 0, 1), ("compacted", 0, 1), ("both", 0, 1)
    ) == {  # fmt: skip
        ("t", 0): (ErrorCode.OFFSET_OUT_OF_RANGE, -1),
        ("t", 3): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
        ("nope", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
        ("__consumer_offsets", 0): (ErrorCode.INVALID_TOPIC_EXCEPTION, -1),
        ("compacted", 0): (ErrorCode.POLICY_VIOLATION, -1),
        ("both", 0): (ErrorCode.NONE, 1),
    }
    assert delete(b, ("t", 0, -2)) == {("t", 0): (ErrorCode.OFFSET_OUT_OF_RANGE, -1)}
    b.authorizer = DenyDelete()
    assert delete(b, ("t", 0, 5)) == {("t", 0): (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1)}
    assert b.logs.get("t", 0).log_start_offset == 0
