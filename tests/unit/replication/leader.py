"""A `ReplicaManager` leading one partition, for the unit tests of the leader's side (no network)."""

from __future__ import annotations

from pathlib import Path

from broker.log.manager import LogManager
from broker.replication.manager import ReplicaManager
from broker.server.cache import MetadataCache, PartitionInfo
from broker.server.config import BrokerConfig
from broker.server.purgatory import Purgatory

TP = ("t", 0)


def leader_manager(tmp_path: Path) -> tuple[ReplicaManager, object]:
    """Broker 1 leading t-0 (replicas and ISR 1, 2, 3) with an empty log; the manager and the log."""
    logs = LogManager([tmp_path / "logs"], broker_id=1)
    logs.startup()
    cache = MetadataCache(brokers={1: ("h", 1, None), 2: ("h", 2, None), 3: ("h", 3, None)})
    cache.topics["t"] = {0: PartitionInfo([1, 2, 3], 1, 0, [1, 2, 3])}

    async def blocking(fn, *args):
        return fn(*args)

    m = ReplicaManager(1, BrokerConfig(), cache, logs, Purgatory(), lambda t, p: logs.get_or_create(t, p),
                       blocking, lambda: None)  # fmt: skip
    m.apply(TP, cache.topics["t"][0])
    return m, logs.get(*TP)
