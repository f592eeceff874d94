"""`kafkactl bench produce | consume | e2e`: the paper's experiment with kafkactl's own clients.

produce: `--messages` 200-byte messages into one partition, `--batch` messages per Produce request
(1 or 50 as in the paper), sent without waiting for each answer (up to 300 requests in flight);
reports msg/s, MB/s and the bytes each message takes on disk beyond its value.
consume: reads them all back from offset 0. e2e: a producer at a fixed rate (10,000 msg/s) and a
consumer in another process; each value carries its send time, the consumer reports latency
percentiles. The broker is a scratch one (real ZooKeeper + broker process) unless `-b` names one.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.bench.broker import scratch_broker
from broker.client.admin import Admin
from broker.client.consumer import AsyncConsumer
from broker.client.producer import AsyncProducer
from broker.errors import KafkactlError
from broker.records.crc import BACKEND

#: the CPU time (user + system) the bench process, the producer alone, spent in the last `produce_messages`
_PRODUCER_CPU = [0.0]


def _topic(kind: str) -> str:
    return f"bench-{kind}-{os.getpid()}-{int(time.time() * 1000) % 10**8}"


async def produce_messages(bootstrap: str, topic: str, messages: int, size: int, batch: int, acks: int,
                           compression: str, advance: Callable[[int], None], audit: bool = False) -> float:  # fmt: skip
    value = os.urandom(size // 2 + 1).hex().encode()[:size]
    producer = AsyncProducer(bootstrap, acks=acks, compression_type=compression, linger_ms=1000,
                             batch_size=1 << 30, max_batch_messages=batch, max_in_flight=300,
                             buffer_memory=64 << 20, enable_idempotence=False, audit_enabled=audit)  # fmt: skip
    await producer.start()
    try:
        await producer.partitions(topic)
        values = [value] * batch
        step = max(batch, messages // 100)
        t0, cpu0 = time.perf_counter(), time.process_time()
        send_one, send_many = producer.send_nowait, producer.send_many
        for start in range(0, messages, batch):  # one message set per call, one produce request each
            if batch == 1:
                while send_one(topic, value, partition=0) is None:  # buffer.memory full: wait for room
                    await producer.wait_for_room(20 + size)
            else:
                chunk = values if start + batch <= messages else values[: messages - start]
                while send_many(topic, chunk, partition=0) is None:
                    await producer.wait_for_room(len(chunk) * (20 + size))
            if start % 1024 < batch:  # let the sender and the answers in, as a steady application does
                await asyncio.sleep(0)
            if start % step < batch:
                advance(step)
        await producer.flush()
        _PRODUCER_CPU[0] = time.process_time() - cpu0
        return time.perf_counter() - t0
    finally:
        await producer.close()


async def consume_messages(bootstrap: str, topic: str, messages: int, advance: Callable[[int], None]) -> float:
    consumer = AsyncConsumer(bootstrap, fetch_max_wait_ms=100, max_partition_fetch_bytes=8 << 20,
                             fetch_max_bytes=64 << 20)  # fmt: skip
    await consumer.start()
    try:
        await consumer.assign([(topic, 0)])
        consumer.seek((topic, 0), 0)
        n = 0
        t0 = time.perf_counter()
        while n < messages:
            got = await consumer.getmany(timeout_ms=1000, max_records=100_000)
            for recs in got.values():
                n += len(recs)
                advance(len(recs))
        return time.perf_counter() - t0
    finally:
        await consumer.close()


def run(kind: str, messages: int = 10_000_000, size: int = 200, batch: int = 50, acks: int = 1,
        compression: str = "none", rate: int = 10_000, bootstrap: str | None = None, workdir: Path | None = None,
        advance: Callable[[int], None] = lambda n: None, replication_factor: int = 1,
        audit: bool = False) -> dict:  # fmt: skip
    """Run one bench ("produce", "consume" or "e2e") on a topic of one partition with `replication_factor`
    replicas (more than one needs a cluster: `bootstrap`); returns its figures. `audit`: the producer stamps
    and counts every message (audit.enabled)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"kafkactl-bench-{kind}-", dir=workdir))
    args = (messages, size, batch, acks, compression, rate, advance, replication_factor, audit)
    try:
        if bootstrap:
            return _run(kind, bootstrap, *args)
        if replication_factor > 1:
            raise KafkactlError(
                "--replication-factor above 1 needs a cluster: start one with `kafkactl cluster up "
                '-n 3` and give its bootstrap servers with -b (or `eval "$(kafkactl cluster env)"`)'
            )
        with scratch_broker(tmp) as servers:
            return _run(kind, servers, *args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(kind: str, bootstrap: str, messages: int, size: int, batch: int, acks: int, compression: str, rate: int,
         advance: Callable[[int], None], replication_factor: int, audit: bool) -> dict:  # fmt: skip
    topic = _topic(kind)
    with Admin(bootstrap) as admin:
        admin.create_topic(topic, 1, replication_factor)
        try:
            out: dict = {"bench": kind, "crc_backend": BACKEND, "messages": messages, "message_bytes": size,
                         "replication_factor": replication_factor, "audit": audit}  # fmt: skip
            if kind == "e2e":
                out["acks"] = acks
                out.update(_e2e(bootstrap, topic, messages, size, rate, acks, advance))
                return out
            leader = _leader(admin, topic)
            started = time.perf_counter()
            seconds = asyncio.run(produce_messages(bootstrap, topic, messages, size, batch, acks, compression,
                                                   advance if kind == "produce" else (lambda n: None),
                                                   audit))  # fmt: skip
            part = _replicated(admin, topic, messages)
            if part.log_end_offset != messages:
                if part.leader == leader or part.log_end_offset is None:  # no failover: a loss or a double is a bug
                    raise RuntimeError(f"produced {messages} but the log ends at {part.log_end_offset}")
                # the leader changed during the run (a broker died): the producer went on to the new leader, and
                # the difference is Kafka's with these settings (acks=1 loses what the old leader had not yet
                # replicated; retries without idempotence may double a batch): reported, the run's figures kept
                out["leader_changes"] = f"{leader} -> {part.leader}"
                out["log_end_offset"] = part.log_end_offset
            if replication_factor > 1:
                out["replicated_seconds"] = round(time.perf_counter() - started - seconds, 3)
            disk = part.size or 0
            stored = part.log_end_offset or messages  # (fewer or more after a failover)
            out.update({"batch": batch, "acks": acks, "compression": compression,
                        "produce_seconds": round(seconds, 3), "produce_msgs_per_s": round(messages / seconds),
                        "produce_mb_per_s": round(messages * size / seconds / 1e6, 1),
                        "producer_cpu_us_per_message": round(_PRODUCER_CPU[0] / messages * 1e6, 3),
                        "disk_bytes": disk,
                        "disk_overhead_bytes_per_message": round((disk - stored * size) / stored, 2)})  # fmt: skip
            if kind == "consume":
                seconds = asyncio.run(consume_messages(bootstrap, topic, messages, advance))
                out.update({"consume_seconds": round(seconds, 3), "consume_msgs_per_s": round(messages / seconds),
                            "consume_mb_per_s": round(messages * size / seconds / 1e6, 1)})  # fmt: skip
            return out
        finally:
            admin.delete_topic(topic)


def _leader(admin: Admin, topic: str) -> int:
    """Partition 0's leader, once the new topic has one (-1 if none within 10 s)."""
    deadline = time.monotonic() + 10
    while (leader := admin.describe_topic(topic)[0].leader) < 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    return leader


def _replicated(admin: Admin, topic: str, messages: int) -> Any:
    """Partition 0 once its end (with replicas, the high watermark a client sees) reaches `messages`, or has not
    moved for 10 s (what a failed broker took with it does not come)."""
    part = admin.describe_topic(topic)[0]
    last, moved = part.log_end_offset, time.monotonic()
    while (part.log_end_offset or 0) < messages and time.monotonic() - moved < 10:
        time.sleep(0.05)
        try:
            part = admin.describe_topic(topic)[0]  # (no end while it has no leader)
        except KafkactlError:
            continue
        if part.log_end_offset != last:
            last, moved = part.log_end_offset, time.monotonic()
    return part


def _e2e_consumer(bootstrap: str, topic: str, messages: int, queue) -> None:
    async def main() -> list[float]:
        consumer = AsyncConsumer(bootstrap, fetch_max_wait_ms=100)
        await consumer.start()
        latencies = []
        try:
            await consumer.assign([(topic, 0)])
            consumer.seek((topic, 0), 0)
            queue.put("ready")
            while len(latencies) < messages:
                got = await consumer.getmany(timeout_ms=1000)
                now = time.time_ns()
                for recs in got.values():
                    latencies.extend((now - int(r.value[:19])) / 1e6 for r in recs)
        finally:
            await consumer.close()
        return latencies

    queue.put(asyncio.run(main()))


def _e2e(bootstrap: str, topic: str, messages: int, size: int, rate: int, acks: int,
         advance: Callable[[int], None]) -> dict:  # fmt: skip
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_e2e_consumer, args=(bootstrap, topic, messages, queue), daemon=True)
    proc.start()
    if queue.get(timeout=60) != "ready":
        raise RuntimeError("the e2e consumer did not start")
    pad = b"x" * max(0, size - 19)

    async def produce() -> float:
        producer = AsyncProducer(bootstrap, acks=acks, linger_ms=0, enable_idempotence=False)
        await producer.start()
        try:
            await producer.partitions(topic)
            t0 = time.perf_counter()
            tick = 0.001
            per_tick = max(1, round(rate * tick))
            sent = 0
            while sent < messages:
                due = t0 + sent / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                for _ in range(min(per_tick, messages - sent)):
                    await producer.send(topic, b"%019d" % time.time_ns() + pad, partition=0)
                    sent += 1
                advance(per_tick)
            await producer.flush()
            return time.perf_counter() - t0
        finally:
            await producer.close()

    seconds = asyncio.run(produce())
    latencies = sorted(queue.get(timeout=120))
    proc.join(10)

    def pct(q: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 2)

    return {"rate_target": rate, "rate_achieved": round(messages / seconds), "latency_ms_p50": pct(0.50),
            "latency_ms_p95": pct(0.95), "latency_ms_p99": pct(0.99), "latency_ms_max": round(latencies[-1], 2),
            "latency_ms_mean": round(statistics.fmean(latencies), 2)}  # fmt: skip
