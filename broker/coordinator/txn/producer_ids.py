"""The producer-id pool InitProducerId draws from: ids claimed from ZooKeeper in cluster-wide blocks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from broker.zk import registry

if TYPE_CHECKING:
    from kazoo.client import KazooClient


class ProducerIdPool:
    """Producer ids from cluster-wide blocks; `refill` claims the next block (a blocking ZooKeeper call)."""

    def __init__(self) -> None:
        self.next = 0
        self.end = -1

    def take(self) -> int | None:
        if self.next > self.end:
            return None
        pid = self.next
        self.next += 1
        return pid

    def add_block(self, first: int, last: int) -> None:
        self.next, self.end = first, last


class ProducerIdSource(Protocol):
    """What handing out a producer id takes of the broker: its pool, and ZooKeeper to claim a new block."""

    id: int
    pid_pool: ProducerIdPool
    zk: KazooClient | None

    def blocking(self, fn: Callable, *args: Any) -> Awaitable[Any]: ...

    def zookeeper_problem(self) -> str | None: ...


async def take_producer_id(b: ProducerIdSource) -> int:
    """A producer id from the broker's block (a new block from ZooKeeper when it is used up); RuntimeError
    while ZooKeeper cannot be asked."""
    pid = b.pid_pool.take()
    if pid is None:
        if b.zookeeper_problem() or b.zk is None:
            raise RuntimeError("ZooKeeper unavailable")
        first, last = await b.blocking(registry.allocate_producer_ids, b.zk, b.id)
        b.pid_pool.add_block(first, last)
        pid = b.pid_pool.take()
    assert pid is not None
    return pid
