"""One consumer-group member for tests/compat/test_groups.py, run as a subprocess so it can be killed -9.

    python group_member.py CLIENT BOOTSTRAP GROUP TOPIC SESSION_TIMEOUT_MS [AUTO_COMMIT_INTERVAL_MS [INSTANCE_ID]]

CLIENT is confluent-kafka, kafka-python or aiokafka. The member subscribes to TOPIC in GROUP (auto commit
every 200 ms unless told, earliest offsets for a partition without a committed offset; a static member,
KIP-345, when given an INSTANCE_ID) and prints one JSON line per event, flushed at once:

    {"ev": "assigned", "partitions": [0, 2, 4]}      after every rebalance: its whole new assignment
    {"ev": "revoked", "partitions": [0, 2, 4]}
    {"ev": "msg", "p": 0, "o": 17, "k": "...", "v": "..."}
    {"ev": "closed"}                                  after a clean close (SIGTERM) that committed

With GROUP_MEMBER_LOG=PATH set, the client library's debug log goes to PATH.<pid> (python clients only).

A record is printed before its offset can be committed: confluent-kafka stores the offset only after the
line is written (enable.auto.offset.store=false), kafka-python and aiokafka commit positions of records
returned by an earlier poll. On SIGTERM the member leaves its poll loop and closes the consumer, which
commits the consumed offsets and leaves the group.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from typing import Any

AUTO_COMMIT_MS = 200  # the default; argv[6] sets another


def emit(**event: Any) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def text(b: bytes | None) -> str | None:
    return None if b is None else b.decode()


def heartbeat_ms(session_ms: int) -> int:
    return max(100, session_ms // 6)


def run_confluent(
    bootstrap: str, group: str, topic: str, session_ms: int, commit_ms: int, instance: str | None
) -> None:
    from confluent_kafka import Consumer

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "client.id": f"cf-{group}",
        "auto.offset.reset": "earliest", "enable.auto.commit": True, "auto.commit.interval.ms": commit_ms,
        "enable.auto.offset.store": False, "session.timeout.ms": session_ms,
        "heartbeat.interval.ms": heartbeat_ms(session_ms), "fetch.wait.max.ms": 100,
        "topic.metadata.refresh.interval.ms": 1000, **({"group.instance.id": instance} if instance else {}),
    })  # fmt: skip

    def on_assign(c: Any, partitions: list) -> None:
        emit(ev="assigned", partitions=sorted(tp.partition for tp in partitions))

    def on_revoke(c: Any, partitions: list) -> None:
        emit(ev="revoked", partitions=sorted(tp.partition for tp in partitions))

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    while not stop:
        m = consumer.poll(0.1)
        if m is None:
            continue
        if m.error():
            emit(ev="error", error=str(m.error()))
            continue
        emit(ev="msg", p=m.partition(), o=m.offset(), k=text(m.key()), v=text(m.value()))
        consumer.store_offsets(message=m)  # only now may the offset be committed
    consumer.close()  # commits the stored offsets and leaves the group
    emit(ev="closed")


def run_kafka_python(
    bootstrap: str, group: str, topic: str, session_ms: int, commit_ms: int, instance: str | None
) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            emit(ev="revoked", partitions=sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            emit(ev="assigned", partitions=sorted(tp.partition for tp in assigned))

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=f"kp-{group}",
                             auto_offset_reset="earliest", enable_auto_commit=True,
                             auto_commit_interval_ms=commit_ms, session_timeout_ms=session_ms,
                             heartbeat_interval_ms=heartbeat_ms(session_ms), fetch_max_wait_ms=100,
                             metadata_max_age_ms=1000, retry_backoff_ms=100, request_timeout_ms=10_000,
                             group_instance_id=instance)  # fmt: skip
    consumer.subscribe([topic], listener=Listener())
    # know the topic's partitions before the first poll joins: see tests/integration/clientkit.py kafka_python_knows
    consumer.partitions_for_topic(topic)
    while not stop:
        for tp, records in consumer.poll(timeout_ms=100).items():
            for r in records:
                emit(ev="msg", p=tp.partition, o=r.offset, k=text(r.key), v=text(r.value))
    consumer.close()  # autocommit=True: commits the consumed offsets, then leaves the group
    emit(ev="closed")


def run_aiokafka(bootstrap: str, group: str, topic: str, session_ms: int, commit_ms: int, instance: str | None) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            emit(ev="revoked", partitions=sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            emit(ev="assigned", partitions=sorted(tp.partition for tp in assigned))

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=f"aio-{group}",
                                    auto_offset_reset="earliest", enable_auto_commit=True,
                                    auto_commit_interval_ms=commit_ms, session_timeout_ms=session_ms,
                                    heartbeat_interval_ms=heartbeat_ms(session_ms), fetch_max_wait_ms=100,
                                    metadata_max_age_ms=1000, retry_backoff_ms=100,
                                    request_timeout_ms=10_000, group_instance_id=instance)  # fmt: skip
        consumer.subscribe([topic], listener=Listener())
        await consumer.start()
        try:
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=100)
                for tp, records in batches.items():  # no await between getmany and printing
                    for r in records:
                        emit(ev="msg", p=tp.partition, o=r.offset, k=text(r.key), v=text(r.value))
        finally:
            await consumer.stop()  # commits the consumed offsets, then leaves the group
        emit(ev="closed")

    asyncio.run(main())


CLIENTS = {"confluent-kafka": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka}

if __name__ == "__main__":
    if os.environ.get("GROUP_MEMBER_LOG"):  # the client library's debug log, for a failure to be read afterwards
        path = f"{os.environ['GROUP_MEMBER_LOG']}.{os.getpid()}"
        logging.basicConfig(level=logging.DEBUG, filename=path, format="%(asctime)s %(name)s %(message)s")
    client, bootstrap, group, topic, session = sys.argv[1:6]
    commit_interval = int(sys.argv[6]) if len(sys.argv) > 6 else AUTO_COMMIT_MS
    CLIENTS[client](bootstrap, group, topic, int(session), commit_interval, sys.argv[7] if len(sys.argv) > 7 else None)
