"""Transactions through a leader's kill -9 on a 3-broker cluster (issue 18): confluent-kafka commits one
transaction and aborts another while the leader of a partition they write dies in the middle of each.
librdkafka finds the new leaders; the coordinator (wherever it is, or its successor) writes the markers to
the new leaders; a read_committed consumer sees exactly the committed transactions' records, once each,
and none of the aborted one.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from tests.compat.test_exactly_once import read_all
from tests.integration.helpers import wait_until
from tests.integration.test_replication import create, start3, states

PARTITIONS = 3
PER_TXN = 300


def _produce_through_a_kill(p: Producer, topic: str, tag: str, victim) -> list[bytes]:
    """Write PER_TXN values over the partitions, killing `victim` a third of the way; the values sent."""
    sent = []
    for i in range(PER_TXN):
        v = f"{tag}-{i:04d}".encode()
        p.produce(topic, v, partition=i % PARTITIONS)
        sent.append(v)
        if i == PER_TXN // 3:
            p.flush(30)
            victim.kill()
        if i % 50 == 0:
            p.poll(0)
    return sent


@pytest.mark.chaos
def test_commit_and_abort_under_leader_kills(start_broker, zk_chroot) -> None:
    brokers = start3(start_broker)
    topic = "txn-failover"
    create(brokers, topic, PARTITIONS, 3, 2)
    wait_until(lambda: all(len(s["isr"]) == 3 for s in states(zk_chroot, topic).values()), 30, "a full ISR")
    bootstrap = ",".join(b.bootstrap for b in brokers)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"failover-{uuid.uuid4().hex[:6]}",
                  "linger.ms": 5, "message.timeout.ms": 60000, "transaction.timeout.ms": 60000})  # fmt: skip
    p.init_transactions(60)

    first_leader = states(zk_chroot, topic)[0]["leader"]
    victim = next(b for b in brokers if b.broker_id == first_leader)
    p.begin_transaction()
    committed = _produce_through_a_kill(p, topic, "commit", victim)
    p.commit_transaction(90)

    alive = [b for b in brokers if b is not victim]
    wait_until(lambda: all(s["leader"] in {b.broker_id for b in alive} for s in states(zk_chroot, topic).values()),
               30, "every partition led by a live broker")  # fmt: skip
    second_leader = states(zk_chroot, topic)[1]["leader"]
    victim.start()  # back, so that killing a second broker leaves min.insync.replicas (2) of 3
    wait_until(lambda: all(len(s["isr"]) == 3 for s in states(zk_chroot, topic).values()), 60, "a full ISR again")
    victim2 = next(b for b in brokers if b.broker_id == second_leader)
    p.begin_transaction()
    _produce_through_a_kill(p, topic, "abort", victim2)
    p.flush(60)  # the records reach the (new) leaders before the abort
    p.abort_transaction(90)

    live = ",".join(b.bootstrap for b in brokers if b is not victim2)
    got = [v for _, v, _ in read_all(live, topic, "read_committed", len(committed), PARTITIONS)]
    assert sorted(got) == sorted(committed)  # every committed record once, no aborted one
    everything = [v for _, v, _ in read_all(live, topic, "read_uncommitted", 2 * PER_TXN, PARTITIONS)]
    assert len([v for v in everything if v.startswith(b"abort-")]) >= PER_TXN  # the aborted ones are in the log
