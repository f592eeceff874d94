"""Transactions through a leader's kill -9 on a 3-broker cluster (issue 18): a transactional producer of each
client (confluent-kafka, kafka-python, aiokafka) commits one transaction and aborts another while the leader
of a partition they write dies in the middle of each. The client finds the new leaders; the coordinator
(wherever it is, or its successor) writes the markers to the new leaders; a read_committed consumer sees
exactly the committed transaction's records, once each, and none of the aborted one's.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from broker.client.admin import Admin
from broker.client.txn_admin import describe_transaction
from tests.compat.test_exactly_once import read_all
from tests.integration.helpers import wait_until
from tests.integration.test_replication import create, start3, states

PARTITIONS = 3
PER_TXN = 300


class TxnProducer:
    """One transactional producer of `client`, driven through the calls its users make."""

    def __init__(self, client: str, bootstrap: str, txn_id: str) -> None:
        self.client = client
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pending: list[Any] = []
        if client == "confluent-kafka":
            from confluent_kafka import Producer

            self.p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5,
                               "message.timeout.ms": 60000, "transaction.timeout.ms": 60000})  # fmt: skip
            self.p.init_transactions(60)
        elif client == "kafka-python":
            from kafka import KafkaProducer

            self.p = KafkaProducer(bootstrap_servers=bootstrap.split(","), transactional_id=txn_id, linger_ms=5,
                                   transaction_timeout_ms=60000, request_timeout_ms=30000)  # fmt: skip
            self.p.init_transactions()
        else:
            from aiokafka import AIOKafkaProducer

            async def start() -> AIOKafkaProducer:  # (aiokafka makes its producer inside its loop)
                p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id, linger_ms=5,
                                     transaction_timeout_ms=60000, request_timeout_ms=30000)  # fmt: skip
                await p.start()
                return p

            self.loop = asyncio.new_event_loop()
            self.p = self._run(start())

    def _run(self, coro: Any) -> Any:
        assert self.loop is not None
        return self.loop.run_until_complete(coro)

    def begin(self) -> None:
        if self.loop is not None:
            self._run(self.p.begin_transaction())
        else:
            self.p.begin_transaction()

    def send(self, topic: str, value: bytes, partition: int) -> None:
        if self.client == "confluent-kafka":
            self.p.produce(topic, value, partition=partition)
            self.p.poll(0)
        elif self.client == "kafka-python":
            self.pending.append(self.p.send(topic, value, partition=partition))
        else:
            self.pending.append(self._run(self.p.send(topic, value, partition=partition)))

    def flush(self) -> None:
        """Every record sent so far is in its leader's log."""
        if self.client == "confluent-kafka":
            assert self.p.flush(60) == 0
        elif self.client == "kafka-python":
            self.p.flush(60)
            for f in self.pending:
                f.get(60)
        else:
            for f in self.pending:
                self._run(asyncio.wait_for(asyncio.shield(f), 60))
        self.pending = []

    def commit(self) -> None:
        if self.client == "confluent-kafka":
            self.p.commit_transaction(90)
        elif self.client == "kafka-python":
            self.p.commit_transaction()
        else:
            self._run(self.p.commit_transaction())
        self.pending = []

    def abort(self) -> None:
        if self.client == "confluent-kafka":
            self.p.abort_transaction(90)
        elif self.client == "kafka-python":
            self.p.abort_transaction()
        else:
            self._run(self.p.abort_transaction())
        self.pending = []

    def close(self) -> None:
        if self.client == "kafka-python":
            self.p.close(timeout=5)
        elif self.loop is not None:
            self._run(self.p.stop())
            self.loop.close()


def _produce_through_a_kill(p: TxnProducer, topic: str, tag: str, victim) -> list[bytes]:
    """Write PER_TXN values over the partitions, killing `victim` a third of the way; the values sent."""
    sent = []
    for i in range(PER_TXN):
        v = f"{tag}-{i:04d}".encode()
        p.send(topic, v, i % PARTITIONS)
        sent.append(v)
        if i == PER_TXN // 3:
            p.flush()
            victim.kill()
    return sent


@pytest.mark.chaos
@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python", "aiokafka"])
def test_commit_and_abort_under_leader_kills(client: str, start_broker, zk_chroot) -> None:
    brokers = start3(start_broker)
    topic = "txn-failover"
    create(brokers, topic, PARTITIONS, 3, 2)
    wait_until(lambda: all(len(s["isr"]) == 3 for s in states(zk_chroot, topic).values()), 30, "a full ISR")
    bootstrap = ",".join(b.bootstrap for b in brokers)
    txn_id = f"failover-{uuid.uuid4().hex[:6]}"
    p = TxnProducer(client, bootstrap, txn_id)
    # kafka-python (3.0.12) never looks its transaction coordinator up again once it lost it: it retries the dead
    # broker for ever. Its leader kills spare the coordinator; the others' may take it down too.
    spare = None
    if client == "kafka-python":
        with Admin(bootstrap) as admin:
            spare = describe_transaction(admin, txn_id).coordinator
    try:
        committed = _commit_then_abort(p, brokers, zk_chroot, topic, spare)
    finally:
        p.close()
    live = ",".join(b.bootstrap for b in brokers if b.alive)
    got = [v for _, v, _ in read_all(live, topic, "read_committed", len(committed), PARTITIONS)]
    assert sorted(got) == sorted(committed)  # every committed record once, no aborted one
    everything = [v for _, v, _ in read_all(live, topic, "read_uncommitted", 2 * PER_TXN, PARTITIONS)]
    assert len([v for v in everything if v.startswith(b"abort-")]) >= PER_TXN  # the aborted ones are in the log


def _leader_to_kill(zk_chroot: str, topic: str, spare: int | None, after: int = 0) -> int:
    """The leader of the first partition from `after` on that `spare` does not lead."""
    leaders = [s["leader"] for _, s in sorted(states(zk_chroot, topic).items())]
    return next(leader for leader in leaders[after:] + leaders[:after] if leader != spare)


def _commit_then_abort(p: TxnProducer, brokers: list, zk_chroot: str, topic: str, spare: int | None) -> list[bytes]:
    """A transaction committed through the kill of partition 0's leader, then (that broker back) one aborted
    through the kill of partition 1's; the committed values."""
    first_leader = _leader_to_kill(zk_chroot, topic, spare)
    victim = next(b for b in brokers if b.broker_id == first_leader)
    p.begin()
    committed = _produce_through_a_kill(p, topic, "commit", victim)
    p.commit()

    alive = [b for b in brokers if b is not victim]
    wait_until(lambda: all(s["leader"] in {b.broker_id for b in alive} for s in states(zk_chroot, topic).values()),
               30, "every partition led by a live broker")  # fmt: skip
    second_leader = _leader_to_kill(zk_chroot, topic, spare, after=1)
    victim.start()  # back, so that killing a second broker leaves min.insync.replicas (2) of 3
    wait_until(lambda: all(len(s["isr"]) == 3 for s in states(zk_chroot, topic).values()), 60, "a full ISR again")
    victim2 = next(b for b in brokers if b.broker_id == second_leader)
    p.begin()
    _produce_through_a_kill(p, topic, "abort", victim2)
    p.flush()  # the records reach the (new) leaders before the abort
    p.abort()
    return committed
