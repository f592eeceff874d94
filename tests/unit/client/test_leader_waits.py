"""AsyncCluster's view of unreachable leaders and LeaderWaits' notes (no network: metadata set by hand)."""

from __future__ import annotations

import asyncio

from broker.client.aio import AsyncCluster, LeaderWaits, PartitionMeta, TopicMeta, describe_tps


def cluster_with(leaders: dict[int, int]) -> AsyncCluster:
    c = AsyncCluster("127.0.0.1:1")
    c.brokers = {1: ("127.0.0.1", 1), 2: ("127.0.0.1", 2), 3: ("127.0.0.1", 3)}
    c.topics["orders"] = TopicMeta(0, {p: PartitionMeta(n, 0, [1, 2, 3], [1, 2, 3]) for p, n in leaders.items()})
    return c


def test_describe_tps_groups_by_topic():
    assert describe_tps([("orders", 5), ("a", 1), ("orders", 2)]) == "a[1], orders[2,5]"


def test_an_unreachable_leader_makes_its_partitions_leaderless_and_is_told_once():
    lines: list[str] = []
    c = cluster_with({0: 1, 1: 2, 2: 2})
    c.waits.report = lines.append
    tps = [("orders", p) for p in range(3)]
    assert c.leaderless(tps) == []
    c.mark_unreachable(2, "cannot connect to broker 127.0.0.1:2: Connect call failed", [("orders", 1), ("orders", 2)])
    c.mark_unreachable(2, "again", [("orders", 2)])  # already waiting: not told again
    assert c.leaderless(tps) == [("orders", 1), ("orders", 2)]
    assert c.leader("orders", 1) == 2 and c.reachable_leader("orders", 1) == -1  # the metadata stays as it is
    assert lines == ["waiting for a leader of orders[1,2] (broker 2 unreachable: Connect call failed) …"]
    assert c.why_leaderless([("orders", 1)]) == "broker 2 unreachable: Connect call failed"

    # the controller moved leadership: both have a reachable leader again, told once
    c.topics["orders"].partitions[1].leader = 3
    c.topics["orders"].partitions[2].leader = 1
    c.waits.settle(c)
    assert c.leaderless(tps) == []
    assert len(lines) == 2 and lines[1].startswith("orders[1,2]: a leader again (brokers 1, 3) after ")
    c.waits.settle(c)
    assert len(lines) == 2


def test_offline_partitions_are_told_apart():
    c = cluster_with({0: -1})
    c.topics["orders"].partitions[0].offline_replicas = [1, 2, 3]
    assert c.offline(("orders", 0)) and c.why_leaderless([("orders", 0)]) == "every replica's broker is down"


def test_a_probe_that_connects_clears_the_mark():
    async def main() -> None:
        c = cluster_with({0: 1})
        c.mark_unreachable(1, "refused")
        c.unreachable[1].next_try = 0
        c._probe_due()  # (port 1 refuses: the probe fails and backs off)
        await asyncio.gather(*c._probes.values())
        assert 1 in c.unreachable and c.unreachable[1].delay == 0.5
        await c.close()

    asyncio.run(main())


def test_waits_without_a_reporter_say_nothing():
    w = LeaderWaits()
    w.start([("t", 0)], "why")
    assert w.waiting == [("t", 0)] and w.waited_s([("t", 0)]) >= 0
