"""What the replica manager needs of the broker that holds it, as Protocols: the metadata cache, the broker
configuration and the delayed-fetch purgatory are the server's (`broker.server`), which replication never
imports (tests/unit/test_layering.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from broker.log.log import PartitionLog
    from broker.replication.throttle import Throttle

TopicPartition = tuple[str, int]


class PartitionState(Protocol):
    """A partition's state as the metadata cache holds it (`broker.server.cache.PartitionInfo`)."""

    replicas: list[int]
    leader: int
    leader_epoch: int
    isr: list[int]
    zk_version: int
    removing: list[int]


class ClusterView(Protocol):
    """The broker's metadata cache (`broker.server.cache.MetadataCache`), read-only but for a partition's ISR."""

    brokers: dict[int, tuple[str, int, str | None]]
    configs: dict[str, dict[str, str]]
    endpoints: dict[int, dict[str, tuple[str, int]]]

    def endpoint(self, broker_id: int, listener: str) -> tuple[str, int] | None: ...

    def partition(self, topic: str, partition: int) -> PartitionState | None: ...


class ReplicaConfig(Protocol):
    """The broker configuration keys replication reads (`broker.server.config.BrokerConfig`; the inter-broker
    client's security settings are read from it too: `broker.client.security.inter_broker_security`)."""

    replica_lag_time_max_ms: int
    replica_fetch_wait_max_ms: int
    replica_fetch_max_bytes: int
    inter_broker_listener_name: str


class FetchWaiters(Protocol):
    """The delayed fetches (`broker.server.purgatory.Purgatory`): woken when a partition's high watermark moves."""

    def notify(self, tp: TopicPartition) -> None: ...


class FollowerSide(Protocol):
    """What a follower's fetcher (`broker.replication.fetcher.ReplicaFetcher`) asks of the replica manager
    (`broker.replication.manager.ReplicaManager`) that starts it: where the leader is, the copy's log, and
    what to do with each answer. The two modules then import only this, not each other."""

    broker_id: int
    config: ReplicaConfig
    throttle: Throttle

    def address_of(self, broker_id: int) -> tuple[str, int] | None: ...

    def is_throttled(self, tp: TopicPartition) -> bool: ...

    def follower_log(self, topic: str, partition: int) -> PartitionLog | None: ...

    def latest_epoch(self, tp: TopicPartition, plog: PartitionLog) -> int: ...

    def truncation_point(self, tp: TopicPartition, plog: PartitionLog, asked: int, leader_epoch: int,
                         leader_end: int) -> int: ...  # fmt: skip

    def truncate_copy(self, tp: TopicPartition, plog: PartitionLog, offset: int, why: str) -> None: ...

    def append_copy(self, tp: TopicPartition, plog: PartitionLog, data: memoryview) -> None: ...

    def follower_high_watermark(self, tp: TopicPartition, plog: PartitionLog, leader_hw: int) -> None: ...

    def follower_log_start(self, tp: TopicPartition, plog: PartitionLog, leader_start: int) -> None: ...

    def reset_copy(self, tp: TopicPartition, plog: PartitionLog, offset: int) -> None: ...

    def known_high_watermark(self, tp: TopicPartition) -> int: ...
