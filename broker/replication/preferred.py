"""A preferred leader election as an operator asks for it (`kafkactl topic elect-leaders`): which partitions
moved from which leader to which, and why the others did not.

The election itself is the controller's (`registry.elect_preferred_leaders` writes the request and waits);
this reads the partitions' states before it, to tell a move from a partition that was led by its preferred
replica already, and after it the ISR of those left elsewhere, to say why. Reads are pipelined: one round
trip for every partition's state, not one each.
"""

from __future__ import annotations

from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from broker.zk import paths, registry
from broker.zk.registry import UnknownTopicError

MOVED = "moved"
ALREADY = "already on its preferred replica"


@dataclass(frozen=True)
class Outcome:
    """One partition's election: its leader before and after, its preferred replica, and what happened
    (MOVED, ALREADY, or why it stays off its preferred replica)."""

    topic: str
    partition: int
    before: int
    after: int
    preferred: int
    result: str

    @property
    def off_preferred(self) -> bool:
        return self.after != self.preferred


def _states(zk: KazooClient, tps: list[tuple[str, int]]) -> dict[tuple[str, int], dict]:
    """Each partition's state znode (leader, isr, ...), read in one pipelined batch; {} for a missing one."""
    pending = [(tp, zk.get_async(paths.partition_state(*tp))) for tp in tps]
    out: dict[tuple[str, int], dict] = {}
    for tp, result in pending:
        try:
            data, _ = result.get()
        except NoNodeError:
            out[tp] = {}
            continue
        out[tp] = paths.loads(data) or {}
    return out


def elect(zk: KazooClient, topics: list[str] | None, timeout_s: float = 15.0) -> list[Outcome]:
    """Ask the controller for preferred leaders of `topics` (None: every topic) and wait for it; each
    partition's outcome, sorted. KafkactlError as `registry.elect_preferred_leaders` raises it."""
    tps: list[tuple[str, int]] = []
    for topic in topics or registry.topic_names(zk):
        found = registry.assignment(zk, topic)
        if found is None:
            raise UnknownTopicError(f"unknown topic {topic!r}")
        tps += [(topic, p) for p in sorted(found)]
    before = _states(zk, tps)
    after = registry.elect_preferred_leaders(zk, topics, timeout_s)
    left = [tp for tp, (leader, first) in after.items() if leader != first]
    now = _states(zk, left) if left else {}
    live = set(registry.live_brokers(zk)) if left else set()
    out = []
    for tp, (leader, first) in sorted(after.items()):
        was = before.get(tp, {}).get("leader", -1)
        if leader == first:
            result = ALREADY if was == first else MOVED
        elif first not in live:
            result = f"preferred replica {first} is down"
        elif first not in now.get(tp, {}).get("isr", []):
            isr = ",".join(map(str, now.get(tp, {}).get("isr", []))) or "none"
            result = f"preferred replica {first} is not in sync (ISR {isr})"
        else:
            result = "the controller has not moved it yet"
        out.append(Outcome(tp[0], tp[1], was, leader, first, result))
    return out
