"""kafkactl's Kafka-protocol group member (`broker.client.kafka_group`) against a real broker without ACLs, and
kafkactl refusing another cluster's ZooKeeper where it uses ZooKeeper with `-b`.

- Two KafkaGroupConsumers of one group split a topic's partitions by the range assignor (the second join
  rebalances the first), read every message once between them, and the offsets they commit are what
  confluent-kafka's `committed()` sees for the group.
- `consume --group` and `group describe` / `group rewind` with `-z` naming another cluster's ZooKeeper are
  refused with one line and a non-zero exit; a topic the brokers have and that ZooKeeper lacks is an error.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from broker.client.admin import Admin
from broker.client.kafka_group import KafkaGroupConsumer
from tests.integration.helpers import cli, error_line, ok

PARTITIONS = 4
MESSAGES = 40


def _topic_with_messages(bootstrap: str) -> str:
    from confluent_kafka import Producer

    name = f"t-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap) as admin:
        admin.create_topic(name, PARTITIONS, 1)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(MESSAGES):
        p.produce(name, value=f"v{i}".encode(), partition=i % PARTITIONS)
    assert p.flush(15) == 0
    return name


def _confluent_committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=15)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got}


def test_two_kafka_protocol_members_split_partitions_and_commit(broker) -> None:
    topic = _topic_with_messages(broker.bootstrap)
    group = f"kg-{uuid.uuid4().hex[:6]}"

    async def run() -> tuple[list[list[tuple[str, int]]], list[str]]:
        settings = {"auto_offset_reset": "earliest", "enable_auto_commit": False}
        a = await KafkaGroupConsumer(broker.bootstrap, group, [topic], **settings).start()
        b = None
        try:
            assert sorted(a.assignment()) == [(topic, p) for p in range(PARTITIONS)]
            b = await KafkaGroupConsumer(broker.bootstrap, group, [topic], **settings).start()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            values: list[str] = []
            while loop.time() < deadline:  # `a` learns of the rebalance by its heartbeat and rejoins
                for member in (a, b):
                    for recs in (await member.getmany(timeout_ms=200)).values():
                        values += [r.value.decode() for r in recs]
                if len(a.assignment()) == len(b.assignment()) == PARTITIONS // 2 and len(set(values)) == MESSAGES:
                    break
            owned = [sorted(a.assignment()), sorted(b.assignment())]
            await a.commit()
            await b.commit()
            return owned, values
        finally:
            await a.close()
            if b is not None:
                await b.close()

    owned, values = asyncio.run(run())
    assert sorted(set(values)) == sorted(f"v{i}" for i in range(MESSAGES))
    assert sorted(owned[0] + owned[1]) == [(topic, p) for p in range(PARTITIONS)]  # disjoint, all covered
    assert all(len(o) == PARTITIONS // 2 for o in owned), owned
    # contiguous ranges, as Kafka's range assignor
    assert sorted(owned) == [[(topic, 0), (topic, 1)], [(topic, 2), (topic, 3)]]
    assert _confluent_committed(broker.bootstrap, group, topic) == {
        p: MESSAGES // PARTITIONS for p in range(PARTITIONS)
    }


@pytest.fixture
def other_cluster(start_broker, zk_server):
    """A second cluster (broker 2 under a chroot of its own): its ZooKeeper connect string."""
    from tests.integration.cluster import new_chroot

    chroot = new_chroot(zk_server.connect_string)
    start_broker(2, zk=chroot)
    return chroot


def test_another_clusters_zookeeper_is_refused(broker, other_cluster, zk_chroot) -> None:
    topic = _topic_with_messages(broker.bootstrap)
    b, z = broker.bootstrap, other_cluster
    r = cli("consume", topic, "--group", "billing", "--reset", "earliest", "--exit", "-b", b, "-z", z)
    line = error_line(r, f"ZooKeeper {z} belongs to cluster ", f"not to the cluster of -b {b} (",
                      "check -z / KAFKACTL_ZOOKEEPER")  # fmt: skip
    assert r.returncode != 0 and r.stdout == "" and "assigned" not in r.stderr, (line, r.stderr)
    for args in (["group", "describe", "billing"], ["group", "list"],
                 ["group", "rewind", "billing", "--topic", topic, "--to-earliest"]):  # fmt: skip
        r = cli(*args, "-b", b, "-z", z)
        error_line(r, f"ZooKeeper {z} belongs to cluster ", "check -z / KAFKACTL_ZOOKEEPER")
        assert r.returncode != 0
    # the right ZooKeeper, and a topic it lacks (made behind its back: only this cluster's ZooKeeper is checked)
    ok(cli("consume", topic, "--group", "billing", "--reset", "earliest", "--exit", "-b", b, "-z", zk_chroot))
    from tests.integration.helpers import zk_session

    with zk_session(z) as zk:  # the other cluster's ZooKeeper with this cluster's id: its topic registry lacks it
        with zk_session(zk_chroot) as mine:
            zk.set("/cluster/id", mine.get("/cluster/id")[0])
    r = cli("consume", topic, "--group", "billing", "--reset", "earliest", "--exit", "-b", b, "-z", z)
    error_line(r, f"topic {topic!r} is not in ZooKeeper {z}", "check -z / KAFKACTL_ZOOKEEPER")
    assert r.returncode != 0 and "assigned" not in r.stderr


def test_a_kafka_protocol_member_shares_a_group_with_confluent_kafka(broker) -> None:
    """kafkactl's member leads (it joined first) and assigns a confluent-kafka member by its consumer-protocol
    subscription; the two read every message once between them."""
    from confluent_kafka import Consumer

    topic = _topic_with_messages(broker.bootstrap)
    group = f"kg-{uuid.uuid4().hex[:6]}"

    def confluent_reads(stop: list[bool]) -> tuple[list[str], list[int]]:
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                      "partition.assignment.strategy": "range"})  # fmt: skip
        c.subscribe([topic])
        values: list[str] = []
        owned: list[int] = []
        try:
            while not stop:
                m = c.poll(0.2)
                owned = sorted(tp.partition for tp in c.assignment())
                if m is not None and not m.error():
                    values.append(m.value().decode())
        finally:
            c.close()
        return values, owned

    async def run() -> tuple[list[str], list[tuple[str, int]], list[str], list[int]]:
        a = await KafkaGroupConsumer(broker.bootstrap, group, [topic], auto_offset_reset="earliest").start()
        stop: list[bool] = []
        other = asyncio.create_task(asyncio.to_thread(confluent_reads, stop))
        values: list[str] = []
        owned: list[tuple[str, int]] = []
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 40
            while loop.time() < deadline:
                for recs in (await a.getmany(timeout_ms=200)).values():
                    values += [r.value.decode() for r in recs]
                owned = sorted(a.assignment())
                if len(owned) == PARTITIONS // 2 and a.generation > 1 and len(values) >= MESSAGES // 2:
                    await asyncio.sleep(3)  # the other member reads its half meanwhile
                    break
        finally:
            stop.append(True)
            theirs, their_parts = await other
            await a.close()
        return values, owned, theirs, their_parts

    values, owned, theirs, their_parts = asyncio.run(run())
    assert owned == [(topic, 0), (topic, 1)] and their_parts == [2, 3], (owned, their_parts)
    assert sorted(set(values) | set(theirs)) == sorted(f"v{i}" for i in range(MESSAGES))
