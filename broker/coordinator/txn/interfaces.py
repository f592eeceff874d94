"""What the transaction coordinator needs of its broker, as Protocols (the coordinators never import
`broker.server`: tests/unit/test_layering.py). What handing out a producer id needs is beside the pool:
`producer_ids.ProducerIdSource`."""

from __future__ import annotations

from typing import Any, Protocol


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
