"""One exactly-once consume-transform-produce worker for tests/compat/test_exactly_once.py, run as a
subprocess so it can be killed -9 in the middle of a transaction.

    python eos_worker.py CLIENT BOOTSTRAP TXN_ID GROUP IN_TOPIC OUT_TOPIC PER_TXN STALL_AT END

CLIENT is confluent-kafka, kafka-python or aiokafka. The worker reads IN_TOPIC in GROUP (read_committed, no
auto commit) and, per transaction of up to PER_TXN records, writes each record to OUT_TOPIC (same key and
partition, value prefixed with "T:") and sends the consumed offsets to the transaction, then commits. At
its STALL_AT-th transaction (counting from 0; -1: never) it writes the records, makes sure they reached the
broker, prints `stalled` and sleeps without committing: the test kills it there. It exits once its committed
positions reach END (JSON: partition → offset). One JSON line per event, flushed at once:

    {"ev": "ready"}                           init_transactions done (an older producer of TXN_ID is fenced)
    {"ev": "committed", "n": 10}              a transaction of n records committed
    {"ev": "stalled", "n": 10}                records of an open transaction are in the log; never committed
    {"ev": "done"}
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

SESSION_MS = 6000


def emit(**event: Any) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def reached(positions: dict[int, int], end: dict[int, int]) -> bool:
    return all(positions.get(p, -1) >= o for p, o in end.items())


def run_confluent(bootstrap: str, txn_id: str, group: str, src: str, dst: str, per_txn: int, stall_at: int,
                  end: dict[int, int]) -> None:  # fmt: skip
    from confluent_kafka import Consumer, Producer, TopicPartition

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5})
    p.init_transactions(60)
    emit(ev="ready")
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                  "session.timeout.ms": SESSION_MS})  # fmt: skip
    c.subscribe([src])
    positions: dict[int, int] = {}
    txn = 0
    while not reached(positions, end):
        msgs = [m for m in c.consume(per_txn, 1.0) if m.error() is None]
        if not msgs:
            continue
        p.begin_transaction()
        for m in msgs:
            p.produce(dst, b"T:" + m.value(), key=m.key(), partition=m.partition())
            positions[m.partition()] = m.offset() + 1
        if txn == stall_at:
            p.flush(30)
            emit(ev="stalled", n=len(msgs))
            time.sleep(3600)
        offsets = [TopicPartition(src, part, off) for part, off in positions.items()]
        p.send_offsets_to_transaction(offsets, c.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        emit(ev="committed", n=len(msgs))
        txn += 1
    c.close()


def run_kafka_python(bootstrap: str, txn_id: str, group: str, src: str, dst: str, per_txn: int, stall_at: int,
                     end: dict[int, int]) -> None:  # fmt: skip
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import OffsetAndMetadata, TopicPartition

    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id, linger_ms=5)
    p.init_transactions()
    emit(ev="ready")
    c = KafkaConsumer(src, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="earliest", isolation_level="read_committed",
                      session_timeout_ms=SESSION_MS, heartbeat_interval_ms=1000)  # fmt: skip
    positions: dict[int, int] = {}
    txn = 0
    while not reached(positions, end):
        polled = c.poll(timeout_ms=1000, max_records=per_txn)
        msgs = [m for records in polled.values() for m in records]
        if not msgs:
            continue
        p.begin_transaction()
        for m in msgs:
            p.send(dst, b"T:" + m.value, key=m.key, partition=m.partition)
            positions[m.partition] = m.offset + 1
        if txn == stall_at:
            p.flush(30)
            emit(ev="stalled", n=len(msgs))
            time.sleep(3600)
        offsets = {TopicPartition(src, part): OffsetAndMetadata(off, "", -1) for part, off in positions.items()}
        p.send_offsets_to_transaction(offsets, c.group_metadata())
        p.commit_transaction()
        emit(ev="committed", n=len(msgs))
        txn += 1
    c.close()


async def run_aiokafka(bootstrap: str, txn_id: str, group: str, src: str, dst: str, per_txn: int, stall_at: int,
                       end: dict[int, int]) -> None:  # fmt: skip
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id, linger_ms=5)
    await p.start()
    emit(ev="ready")
    c = AIOKafkaConsumer(src, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                         auto_offset_reset="earliest", isolation_level="read_committed",
                         session_timeout_ms=SESSION_MS, heartbeat_interval_ms=1000)  # fmt: skip
    await c.start()
    positions: dict[int, int] = {}
    txn = 0
    while not reached(positions, end):
        polled = await c.getmany(timeout_ms=1000, max_records=per_txn)
        msgs = [m for records in polled.values() for m in records]
        if not msgs:
            continue
        await p.begin_transaction()
        for m in msgs:
            await p.send(dst, b"T:" + m.value, key=m.key, partition=m.partition)
            positions[m.partition] = m.offset + 1
        if txn == stall_at:
            await p.flush()
            emit(ev="stalled", n=len(msgs))
            await asyncio.sleep(3600)
        offsets = {TopicPartition(src, part): off for part, off in positions.items()}
        await p.send_offsets_to_transaction(offsets, group)
        await p.commit_transaction()
        emit(ev="committed", n=len(msgs))
        txn += 1
    await c.stop()
    await p.stop()


def main() -> None:
    client, bootstrap, txn_id, group, src, dst, per_txn, stall_at, end_json = sys.argv[1:10]
    end = {int(k): v for k, v in json.loads(end_json).items()}
    args = (bootstrap, txn_id, group, src, dst, int(per_txn), int(stall_at), end)
    if client == "confluent-kafka":
        run_confluent(*args)
    elif client == "kafka-python":
        run_kafka_python(*args)
    elif client == "aiokafka":
        asyncio.run(run_aiokafka(*args))
    else:
        raise SystemExit(f"unknown client {client!r}")
    emit(ev="done")


if __name__ == "__main__":
    main()
