"""The producer-id pool InitProducerId draws from: ids claimed from ZooKeeper in cluster-wide blocks."""

from __future__ import annotations


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
