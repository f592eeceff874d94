"""Third parties' producers at acks=all through a leader's kill -9 (issue 14): confluent-kafka (idempotent)
and kcat write to a topic of 3 replicas (min.insync.replicas 2) while the leader of its partition dies;
librdkafka finds the new leader, and every message it reported delivered is in the log, once.
"""

from __future__ import annotations

import asyncio
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


def test_elect_leaders_from_confluent_kafka_and_kafka_python(start_broker, zk_chroot):
    """ElectLeaders (43): a preferred election from confluent-kafka's AdminClient moves leadership back; kafka-python
    asks again (nothing to do: ELECTION_NOT_NEEDED, which it ignores) and then elects an offline partition's
    out-of-sync replica with an unclean election."""
    from confluent_kafka import ElectionType, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka.admin import KafkaAdminClient

    from tests.integration.test_replication import full_isr, produce_acked, replicas_of

    brokers = start3(start_broker)
    by_id = {b.broker_id: b for b in brokers}
    create(brokers, "elect", 3, 3, 1)
    preferred = {p: r[0] for p, r in replicas_of(zk_chroot, "elect").items()}
    victim = brokers[0]
    assert victim.stop() == 0  # its partitions move to other replicas
    victim.start()
    wait_until(lambda: full_isr(zk_chroot, "elect"), 20, "the restarted broker back in every ISR")
    moved = [p for p, st in states(zk_chroot, "elect").items() if st["leader"] != preferred[p]]
    assert moved  # broker 1 is the preferred leader of one partition, led elsewhere now
    bootstrap = ",".join(b.bootstrap for b in brokers)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("elect", p) for p in moved]).result(30)
    assert {tp.partition: err for tp, err in result.items()} == {p: None for p in moved}
    assert {p: st["leader"] for p, st in states(zk_chroot, "elect").items()} == preferred

    kp = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        kp.elect_leaders(0, {"elect": [0, 1, 2]})  # already on their preferred replicas: not an error
    finally:
        kp.close()

    create(brokers, "lost", 1, 2, 1)  # the last in-sync replica dies: offline, then an unclean election
    leader, follower = replicas_of(zk_chroot, "lost")[0]
    assert by_id[follower].stop() == 0  # out of the ISR
    acked, _ = asyncio.run(produce_acked(by_id[leader].bootstrap, "lost", [b"only-on-the-leader"]))
    assert acked
    by_id[leader].kill()
    wait_until(lambda: states(zk_chroot, "lost")[0]["leader"] == -1, 30, "the partition offline")
    by_id[follower].start()
    time.sleep(1)
    assert states(zk_chroot, "lost")[0]["leader"] == -1  # unclean election is off: it stays offline
    live = ",".join(b.bootstrap for b in brokers if b.broker_id != leader)
    kp = KafkaAdminClient(bootstrap_servers=live, request_timeout_ms=30000)  # (it finds the controller now)
    try:
        kp.elect_leaders(1, {"lost": [0]})
    finally:
        kp.close()
    st = states(zk_chroot, "lost")[0]
    assert st["leader"] == follower and st["isr"] == [follower]
