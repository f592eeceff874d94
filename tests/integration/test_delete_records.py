"""DeleteRecords (21) and `kafkactl topic delete-records` against real brokers: the log start offset (low
watermark) moves up on the leader, whole segments below it go, consumers from the earliest offset start
there, the new start holds across a restart (clean or kill -9), and on a replicated topic the followers'
starts follow before the answer (so a follower that becomes leader keeps it). Through kafkactl,
confluent-kafka's, kafka-python's and aiokafka's admin clients.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from broker.client.admin import Admin
from broker.protocol.api import ApiKey
from broker.protocol.messages.fetch import EARLIEST
from tests.integration.helpers import cli, connect, error_line, json_lines, ok, produce, tsv, wait_until

SEGMENT = 1024  # small segments: a few dozen records each, so deleting records deletes whole segments


def create(bootstrap: str, topic: str, partitions: int = 1, rf: int = 1) -> None:
    ok(cli("topic", "create", topic, "-p", partitions, "-r", rf, "--config", f"segment.bytes={SEGMENT}",
           "-b", bootstrap))  # fmt: skip


def fill(bootstrap: str, topic: str, partition: int, n: int) -> list[bytes]:
    """`n` records of about 60 bytes, 10 a batch."""
    values = [b"%s-%d-%05d-" % (topic.encode(), partition, i) + b"x" * 40 for i in range(n)]
    with connect(bootstrap) as conn:
        for i in range(0, n, 10):
            assert produce(conn, topic, partition, values[i : i + 10])["error_code"] == 0
    return values


def earliest(bootstrap: str, topic: str, partitions: int = 1) -> dict[int, int]:
    with Admin(bootstrap) as admin:
        found = admin.list_offsets([(topic, p) for p in range(partitions)], EARLIEST)
    return {p: found[(topic, p)] for p in range(partitions)}


def segment_bases(log_dir: Path, topic: str, partition: int) -> list[int]:
    return sorted(int(f.stem) for f in (log_dir / f"{topic}-{partition}").glob("*.log"))


def consume_from_earliest(bootstrap: str, topic: str, partition: int, until: int) -> list[tuple[int, bytes]]:
    """(offset, value) of every record a confluent-kafka consumer reads from the earliest offset to `until`."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"dr-{time.monotonic_ns()}",
                  "enable.auto.commit": False})  # fmt: skip
    try:
        c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 30
        while (not out or out[-1][0] < until - 1) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                out.append((m.offset(), m.value()))
        return out
    finally:
        c.close()


def test_cli_moves_the_low_watermark_deletes_whole_segments_and_consumers_start_there(broker):
    b = broker.bootstrap
    create(b, "dr", partitions=2)
    values = fill(b, "dr", 0, 300)
    fill(b, "dr", 1, 50)
    bases = segment_bases(broker.log_dir, "dr", 0)
    assert len(bases) > 5

    before = bases[3] + 5  # inside the fourth segment
    out = ok(cli("topic", "delete-records", "dr", "--before", before, "--partition", 0, "-b", b))
    assert tsv(out) == [["PARTITION", "LOW WATERMARK", "RESULT"], ["0", str(before), "deleted"]]
    assert segment_bases(broker.log_dir, "dr", 0) == bases[3:]  # the one holding it is kept
    assert earliest(b, "dr", 2) == {0: before, 1: 0}
    (p0, p1) = json_lines(ok(cli("topic", "describe", "dr", "-o", "json", "-b", b)))[0]["partitions"]
    assert (p0["log_start_offset"], p1["log_start_offset"]) == (before, 0)

    read = consume_from_earliest(b, "dr", 0, 300)
    assert [o for o, _ in read] == list(range(before, 300))
    assert [v for _, v in read] == values[before:]

    # -1: up to the high watermark, every partition; JSON
    rows = json_lines(ok(cli("topic", "delete-records", "dr", "--before", -1, "-o", "json", "-b", b)))
    assert rows == [{"topic": "dr", "partition": 0, "low_watermark": 300, "error": None},
                    {"topic": "dr", "partition": 1, "low_watermark": 50, "error": None}]  # fmt: skip
    assert earliest(b, "dr", 2) == {0: 300, 1: 50}
    # an offset below the start changes nothing, and is no error (as Kafka)
    assert tsv(ok(cli("topic", "delete-records", "dr", "--before", 10, "-P", 1, "-b", b)))[1] == ["1", "50", "deleted"]
    fill(b, "dr", 1, 10)
    assert [o for o, _ in consume_from_earliest(b, "dr", 1, 60)] == list(range(50, 60))


def test_bad_input_is_one_error_line(broker):
    b = broker.bootstrap
    create(b, "dr-bad")
    fill(b, "dr-bad", 0, 20)
    line = error_line(cli("topic", "delete-records", "dr-bad", "--before", 21, "-b", b), "OFFSET_OUT_OF_RANGE")
    assert "1 of 1 partitions of topic 'dr-bad' failed" in line
    assert "(partition 0: OFFSET_OUT_OF_RANGE (its high watermark is 20))" in line
    error_line(cli("topic", "delete-records", "dr-bad", "--before", 5, "-P", 3, "-b", b), "no partition 3")
    error_line(cli("topic", "delete-records", "nope", "--before", 5, "-b", b), "UNKNOWN_TOPIC_OR_PARTITION")
    error_line(cli("topic", "delete-records", "dr-bad", "--before", -2, "-b", b), "--before")
    error_line(cli("topic", "delete-records", "dr-bad", "-b", b), "--before")
    assert earliest(b, "dr-bad") == {0: 0}


def test_the_low_watermark_holds_across_a_clean_restart_and_a_kill(broker):
    b = broker.bootstrap
    create(b, "dr-restart")
    fill(b, "dr-restart", 0, 200)
    ok(cli("topic", "delete-records", "dr-restart", "--before", 77, "-b", b))
    broker.stop()
    broker.start()
    assert earliest(b, "dr-restart") == {0: 77}
    ok(cli("topic", "delete-records", "dr-restart", "--before", 123, "-b", b))
    broker.kill()  # kill -9 right after the answer: the checkpoint was written before it
    broker.start()
    assert earliest(b, "dr-restart") == {0: 123}
    assert [o for o, _ in consume_from_earliest(b, "dr-restart", 0, 200)] == list(range(123, 200))


def test_confluent_kafka_admin_client(broker):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    b = broker.bootstrap
    create(b, "dr-cf", partitions=2)
    fill(b, "dr-cf", 0, 100)
    fill(b, "dr-cf", 1, 100)
    admin = AdminClient({"bootstrap.servers": b})
    futures = admin.delete_records([TopicPartition("dr-cf", 0, 40), TopicPartition("dr-cf", 1, -1)],
                                   operation_timeout=10, request_timeout=30)  # fmt: skip
    lows = {tp.partition: f.result(30).low_watermark for tp, f in futures.items()}
    assert lows == {0: 40, 1: 100}
    assert earliest(b, "dr-cf", 2) == {0: 40, 1: 100}
    (f,) = admin.delete_records([TopicPartition("dr-cf", 0, 500)], request_timeout=30).values()
    with pytest.raises(Exception, match="OFFSET_OUT_OF_RANGE|out of range"):
        f.result(30)


def test_kafka_python_admin_client(broker):
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    b = broker.bootstrap
    create(b, "dr-kp", partitions=2)
    fill(b, "dr-kp", 0, 100)
    fill(b, "dr-kp", 1, 100)
    admin = KafkaAdminClient(bootstrap_servers=b)
    try:
        result = admin.delete_records({TopicPartition("dr-kp", 0): 33, TopicPartition("dr-kp", 1): 99})
        lows = {tp.partition: r["low_watermark"] if isinstance(r, dict) else r.low_watermark
                for tp, r in result.items()}  # fmt: skip
        assert lows == {0: 33, 1: 99}
    finally:
        admin.close()
    assert earliest(b, "dr-kp", 2) == {0: 33, 1: 99}


def test_aiokafka_admin_client(broker):
    from aiokafka import TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

    b = broker.bootstrap
    create(b, "dr-aio")
    fill(b, "dr-aio", 0, 100)

    async def run() -> dict:
        admin = AIOKafkaAdminClient(bootstrap_servers=b)
        await admin.start()
        try:
            return await admin.delete_records({TopicPartition("dr-aio", 0): RecordsToDelete(before_offset=61)})
        finally:
            await admin.close()

    assert {tp.partition: low for tp, low in asyncio.run(run()).items()} == {0: 61}
    assert earliest(b, "dr-aio") == {0: 61}


OVERRIDES = {"zookeeper.session.timeout.ms": "6000", "replica.lag.time.max.ms": "2000"}


def test_followers_log_starts_follow_and_a_new_leader_keeps_it(start_broker):
    brokers = [start_broker(i, overrides=OVERRIDES) for i in (1, 2, 3)]
    b = brokers[0].bootstrap
    create(b, "dr-rf3", rf=3)
    with Admin(b) as admin:
        leader = admin.describe_topic("dr-rf3")[0].leader
    by_id = {x.broker_id: x for x in brokers}
    values = fill(by_id[leader].bootstrap, "dr-rf3", 0, 300)
    wait_until(lambda: all(len(segment_bases(x.log_dir, "dr-rf3", 0)) > 5 and
                           sum(f.stat().st_size for f in (x.log_dir / "dr-rf3-0").glob("*.log")) ==
                           sum(f.stat().st_size for f in (by_id[leader].log_dir / "dr-rf3-0").glob("*.log"))
                           for x in brokers), 20, "every replica holding every record")  # fmt: skip
    bases = segment_bases(by_id[leader].log_dir, "dr-rf3", 0)
    before = bases[4] + 1

    # the answer waits for the followers: the low watermark it reports is over every live replica
    out = ok(cli("topic", "delete-records", "dr-rf3", "--before", before, "-b", b))
    assert tsv(out)[1] == ["0", str(before), "deleted"]
    for x in brokers:  # each replica deleted the same whole segments
        assert segment_bases(x.log_dir, "dr-rf3", 0) == bases[4:], x.broker_id

    by_id[leader].kill()
    with Admin(b if leader != 1 else brokers[1].bootstrap) as admin:
        new = wait_until(lambda: (lambda p: p.leader if p.leader not in (-1, leader) else None)(
            admin.describe_topic("dr-rf3")[0]), 30, "a new leader")  # fmt: skip
    survivor = by_id[new].bootstrap
    assert earliest(survivor, "dr-rf3") == {0: before}
    read = consume_from_earliest(survivor, "dr-rf3", 0, 300)
    assert [v for _, v in read] == values[before:]

    # the old leader comes back as a follower and keeps the start it had
    by_id[leader].start()
    with connect(survivor) as conn:
        body = {"topics": [{"name": "dr-rf3", "partitions": [{"partition_index": 0, "offset": -1}]}],
                "timeout_ms": 20000}  # fmt: skip
        answer = wait_until(lambda: (lambda a: a if a["topics"][0]["partitions"][0]["error_code"] == 0 else None)(
            conn.request(ApiKey.DELETE_RECORDS, body)), 30, "DeleteRecords answered by every replica")  # fmt: skip
    assert answer["topics"][0]["partitions"][0]["low_watermark"] == 300


def test_delete_records_needs_delete_on_the_topic(zk_chroot, tmp_path):
    from confluent_kafka import KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient

    from broker.security import credentials
    from broker.security.acl import Operation, ResourceType
    from broker.security.scram import make_credential
    from tests.integration.helpers import zk_session
    from tests.integration.test_acls import USERS, _acl, _grant, _sasl, _start

    with zk_session(zk_chroot) as zk:
        credentials.write_user(zk, "alice", {"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", USERS["alice"])})
    b, sasl_port = _start(1, zk_chroot, tmp_path)
    try:
        create(b.bootstrap, "dr-acl")  # (the PLAINTEXT listener's anonymous principal is a super user)
        fill(b.bootstrap, "dr-acl", 0, 20)
        _grant(b, _acl(ResourceType.TOPIC, "dr-acl", "User:alice", Operation.DESCRIBE))
        alice = AdminClient(_sasl(sasl_port, "alice"))

        def delete(offset: int):
            (f,) = alice.delete_records([TopicPartition("dr-acl", 0, offset)], request_timeout=30).values()
            return f.result(30)

        with pytest.raises(Exception) as refused:
            delete(5)
        assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert earliest(b.bootstrap, "dr-acl") == {0: 0}
        _grant(b, _acl(ResourceType.TOPIC, "dr-acl", "User:alice", Operation.DELETE))
        assert wait_until(lambda: _try(delete, 5), 20, "the grant to reach the authorizer") == 5
        assert earliest(b.bootstrap, "dr-acl") == {0: 5}
    finally:
        b.stop(timeout=20)


def _try(delete, offset: int) -> int | None:
    try:
        return delete(offset).low_watermark
    except Exception:
        return None
