"""Kafka's default partitioner: murmur2 of the key for keyed messages, sticky batches for the rest.

murmur2 is the 32-bit MurmurHash2 variant of Kafka's Java client (seed 0x9747b28c); the partition is
`(hash & 0x7fffffff) % partitions`, so keys land where Java clients put them.
"""

from __future__ import annotations

import random

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of `data`, as a signed 32-bit int (the Java value)."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    n4 = length & ~3
    for i in range(0, n4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[n4 + 2] << 16
    if rest >= 2:
        h ^= data[n4 + 1] << 8
    if rest >= 1:
        h ^= data[n4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class StickyPartitioner:
    """Unkeyed messages go to one partition until its batch is sent, then to another chosen at random."""

    def __init__(self) -> None:
        self.current: dict[str, int] = {}

    def partition(self, topic: str, partitions: int) -> int:
        p = self.current.get(topic)
        if p is None or p >= partitions:
            p = self.current[topic] = random.randrange(partitions)
        return p

    def move(self, topic: str, available: list[int], partition: int) -> int:
        """The sticky partition has no leader: stick to one of `available` (those with one) instead, at
        random, as Kafka's producer does; `partition` stays when none has a leader."""
        if available:
            partition = self.current[topic] = random.choice(available)
        return partition

    def batch_done(self, topic: str, partition: int, partitions: int) -> None:
        """The sticky partition's batch is full or sent: move on (to another one when there are several)."""
        if self.current.get(topic) == partition and partitions > 1:
            choices = [p for p in range(partitions) if p != partition]
            self.current[topic] = random.choice(choices)
