"""What the transaction coordinator needs of its broker, as Protocols (the coordinators never import
`broker.server`: tests/unit/test_layering.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from broker.coordinator.txn.producer_ids import ProducerIdPool


class Leader(Protocol):
    """A partition's state as the metadata cache holds it: only its leader is read."""

    leader: int


class ClusterMetadata(Protocol):
    """The broker's metadata cache (`broker.server.cache.MetadataCache`), read only."""

    brokers: dict[int, Any]  # the live brokers, by id
    topics: dict[str, Any]

    def partition(self, topic: str, partition: int) -> Leader | None: ...


class CoordinatorConfig(Protocol):
    """The broker configuration (`broker.server.config.BrokerConfig`): its raw properties (the transaction keys),
    and the inter-broker client's settings (`broker.client.security.inter_broker_security` reads them)."""

    props: dict[str, str]


class ProducerIdSource(Protocol):
    """What handing out a producer id takes of the broker: its pool, and ZooKeeper to claim a new block."""

    id: int
    pid_pool: ProducerIdPool
    zk: KazooClient | None

    def blocking(self, fn: Callable, *args: Any) -> Awaitable[Any]: ...

    def zookeeper_problem(self) -> str | None: ...
