"""Third parties' producers at acks=all through a leader's kill -9 (issue 14): confluent-kafka (idempotent)
and kcat write to a topic of 3 replicas (min.insync.replicas 2) while the leader of its partition dies;
librdkafka finds the new leader, and every message it reported delivered is in the log, once.
"""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
from confluent_kafka import Producer

from tests.compat.test_clients import KCAT
from tests.integration.helpers import wait_until
from tests.integration.test_replication import SESSION_MS, create, read_values, start3, states

N = 3000


@pytest.mark.chaos
def test_confluent_kafka_idempotent_acks_all_through_a_leader_kill(start_broker, zk_chroot):
    brokers = start3(start_broker)
    create(brokers, "cf-failover", 1, 3, 2)
    leader = states(zk_chroot, "cf-failover")[0]["leader"]
    victim = next(b for b in brokers if b.broker_id == leader)
    bootstrap = ",".join(b.bootstrap for b in brokers if b is not victim)
    acked: list[bytes] = []
    failed: list[str] = []

    def report(err, msg) -> None:
        (failed.append(str(err)) if err else acked.append(msg.value()))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 60000})  # fmt: skip
    for i in range(N):
        producer.produce("cf-failover", value=b"c%05d" % i, on_delivery=report)
        if i == N // 3:
            victim.kill()
        if i % 100 == 0:
            producer.poll(0)
            time.sleep(0.02)
    assert producer.flush(90) == 0
    assert not failed, failed[:3]
    assert len(acked) == N
    values = read_values(bootstrap, "cf-failover", N)
    assert sorted(values) == sorted(acked)  # each once: the idempotent retries to the new leader were not stored twice
    assert states(zk_chroot, "cf-failover")[0]["leader"] != leader


@pytest.mark.chaos
def test_kcat_acks_all_through_a_leader_kill(start_broker, zk_chroot, tmp_path):
    brokers = start3(start_broker)
    create(brokers, "kcat-failover", 1, 3, 2)
    leader = states(zk_chroot, "kcat-failover")[0]["leader"]
    victim = next(b for b in brokers if b.broker_id == leader)
    bootstrap = ",".join(b.bootstrap for b in brokers if b is not victim)
    proc = subprocess.Popen([KCAT, "-P", "-b", bootstrap, "-t", "kcat-failover", "-p", "0", "-X", "acks=all",
                             "-X", "enable.idempotence=true", "-X", "message.timeout.ms=60000"],
                            stdin=subprocess.PIPE, stderr=(tmp_path / "kcat.err").open("wb"))  # fmt: skip

    def feed() -> None:
        assert proc.stdin is not None
        for i in range(N):
            proc.stdin.write(b"k%05d\n" % i)
            if i % 100 == 0:
                proc.stdin.flush()
                time.sleep(0.02)
        proc.stdin.close()

    feeder = threading.Thread(target=feed)
    feeder.start()
    wait_until(lambda: proc.poll() is None, 5, "kcat running")
    time.sleep(0.2)
    victim.kill()
    feeder.join(60)
    proc.wait(SESSION_MS / 1000 + 90)
    err = (tmp_path / "kcat.err").read_text(errors="replace")
    assert proc.returncode == 0 and "Delivery failed" not in err, err[-2000:]
    values = read_values(bootstrap, "kcat-failover", N)
    assert sorted(values) == [b"k%05d" % i for i in range(N)]  # every line once
