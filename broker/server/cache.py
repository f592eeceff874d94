"""What a broker knows of the cluster: live brokers, topic assignments, partition states, topic configs.

Filled from ZooKeeper watches (kazoo's thread hands each update to the event loop) and read by the
request handlers on the loop; a miss can be filled on demand with `refresh_topic`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class PartitionInfo:
    replicas: list[int]
    leader: int
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)
    zk_version: int = -1  # of the state znode this came from: ISR changes are written conditional on it
    removing: list[int] = field(default_factory=list)  # replicas a reassignment is taking away: never back in the ISR


@dataclass
class MetadataCache:
    brokers: dict[int, tuple[str, int, str | None]] = field(default_factory=dict)
    topics: dict[str, dict[int, PartitionInfo]] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    topic_ids: dict[str, int] = field(default_factory=dict)  # creation zxid: tells a re-created topic apart
    controller_id: int = -1
    cluster_id: str | None = None
    #: {broker id: {listener name: (host, port)}}: where each live broker serves each of its listeners
    endpoints: dict[int, dict[str, tuple[str, int]]] = field(default_factory=dict)
    #: how many times the live brokers were set: each time, groups' coordinators may have moved
    brokers_set: int = 0

    def set_brokers(self, registered: dict[int, Any]) -> None:
        """The live brokers, from `broker.zk.registry.registered_brokers`."""
        self.brokers_set += 1
        self.endpoints = {i: {name: (e.host, e.port) for name, e in r.endpoints.items()} for i, r in registered.items()}
        self.brokers = {i: (r.host, r.port, r.rack) for i, r in registered.items()}

    def endpoint(self, broker_id: int, listener: str) -> tuple[str, int] | None:
        """(host, port) of a live broker's listener, or None (not live, or no such listener)."""
        return self.endpoints.get(broker_id, {}).get(listener)

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        parts = self.topics.get(topic)
        return None if parts is None else parts.get(partition)

    def set_topic(self, topic: str, assignment: dict[int, list[int]], states: dict[int, dict | None],
                  removing: dict[int, list[int]] | None = None) -> None:  # fmt: skip
        parts = {}
        for p, replicas in assignment.items():
            st = states.get(p) or {}
            leader = st.get("leader", replicas[0] if replicas else -1)
            parts[p] = PartitionInfo(
                list(replicas),
                leader,
                st.get("leader_epoch", 0),
                list(st.get("isr", [leader])),
                st.get("zk_version", -1),
                list((removing or {}).get(p, [])),
            )
        self.topics[topic] = parts

    def set_state(self, topic: str, partition: int, state: dict) -> PartitionInfo | None:
        """Take a partition's new state znode (a leader elected, its ISR changed); None if the topic is gone
        or the state is older than the one known (watches may deliver late)."""
        info = self.partition(topic, partition)
        if info is None or state.get("zk_version", -1) < info.zk_version:
            return None
        info.leader, info.leader_epoch = state.get("leader", -1), state.get("leader_epoch", 0)
        info.isr, info.zk_version = list(state.get("isr", [])), state.get("zk_version", -1)
        return info

    def states(self, replica: int | None = None) -> dict[tuple[str, int], dict]:
        """A copy of every partition state read from ZooKeeper (as `registry.partition_state` gives them, with
        `zk_version`, and the `topic_id` they belong to), only those with `replica` among the replicas if given:
        what a controlled shutdown or the controller's pass decides from first (a write from a state that is
        behind fails and is read again)."""
        return {(t, p): {"leader": i.leader, "leader_epoch": i.leader_epoch, "isr": list(i.isr),
                         "zk_version": i.zk_version, "topic_id": self.topic_ids.get(t)}
                for t, parts in self.topics.items() for p, i in parts.items()
                if i.zk_version >= 0 and (replica is None or replica in i.replicas)}  # fmt: skip

    def drop_topic(self, topic: str) -> None:
        self.topics.pop(topic, None)
        self.configs.pop(topic, None)
        self.topic_ids.pop(topic, None)
