"""What the request handlers may use of their broker: one narrow interface, so that imports run one way.

`broker.server.broker.Broker` builds the handlers' dispatcher and hands itself over as `Services`; the
handlers see only what is listed here (its parts, and the few operations that span them), never the
broker's ZooKeeper watches, lifecycle or private state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from broker.coordinator.group.coordinator import GroupCoordinator
    from broker.coordinator.group.store import GroupStore
    from broker.coordinator.txn.coordinator import TxnCoordinator
    from broker.coordinator.txn.producer_ids import ProducerIdPool
    from broker.log.log import PartitionLog
    from broker.log.manager import LogManager
    from broker.protocol.errors import ErrorCode
    from broker.quota.manager import QuotaManager
    from broker.replication.manager import ReplicaManager
    from broker.security.acl_authorizer import Authorizer
    from broker.server.cache import MetadataCache, PartitionInfo
    from broker.server.config import BrokerConfig
    from broker.server.fetch_sessions import FetchSessions
    from broker.server.purgatory import Purgatory

TopicPartition = tuple[str, int]


class Services(Protocol):
    """A broker as its request handlers see it."""

    id: int
    config: BrokerConfig
    cache: MetadataCache
    logs: LogManager
    replicas: ReplicaManager
    purgatory: Purgatory
    fetch_sessions: FetchSessions  # incremental fetch sessions (KIP-227)
    deferred_logs: set[PartitionLog]  # appends the Produce handler deferred (written before answers leave)
    pid_pool: ProducerIdPool
    coordinator: GroupCoordinator
    group_store: GroupStore
    zk: KazooClient | None
    authorizer: Authorizer | None  # None: no `authorizer.class.name`, everything allowed
    quotas: QuotaManager  # client quotas (broker.quota.manager)
    txn_coordinator: TxnCoordinator  # the transaction coordinator (broker.coordinator.txn.coordinator)

    async def blocking(self, fn: Callable, *args: Any) -> Any:
        """Run a blocking call (ZooKeeper) off the event loop."""

    async def refresh_topic(self, topic: str) -> bool:
        """Fill a metadata cache miss from ZooKeeper; True if the topic exists."""

    async def take_new_topic(self, topic: str, assignment: dict[int, list[int]], config: dict[str, str],
                             topic_id: int | None) -> None:  # fmt: skip
        """A topic this broker just created: serve it at once (its first replica leads each partition)."""

    def forget_topic(self, topic: str) -> None:
        """A topic this broker just deleted: drop it and its local logs."""

    def apply_config(self, topic: str, config: dict[str, str]) -> None:
        """A topic's overrides this broker just wrote: its logs take them at once."""

    async def leader_log(self, topic: str, partition: int) -> tuple[ErrorCode, PartitionLog | None,
                                                                    PartitionInfo | None]:  # fmt: skip
        """The local log of a partition this broker leads, or the error to answer."""

    def leader_log_now(self, topic: str, partition: int) -> tuple[ErrorCode, PartitionLog | None,
                                                                  PartitionInfo | None]:  # fmt: skip
        """`leader_log` without looking in ZooKeeper."""

    def high_watermark(self, plog: PartitionLog) -> int:
        """The offset below which the partition's ISR holds every record."""

    def min_insync(self, topic: str) -> int:
        """The topic's `min.insync.replicas`."""

    def reload_producer_states(self, plog: PartitionLog, since: int | None = None) -> None:
        """After a failed write, make a partition's sequence state what its file holds."""

    def zookeeper_problem(self) -> str | None:
        """Why a change cannot be written to ZooKeeper now (its session is down), or None."""

    def coordinates(self, group_id: str) -> bool:
        """Whether this broker is the group's coordinator now."""

    async def load_group(self, group_id: str) -> None:
        """Take over a group's stored generation before its first request here."""
