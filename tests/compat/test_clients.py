"""Unmodified third-party clients against a live kafkactl broker (a real process with a real ZooKeeper).

kcat (librdkafka 2.0), confluent-kafka (librdkafka), kafka-python and aiokafka each produce keyed messages with
headers to explicit partitions (acks 0, 1 and all; every compression codec; idempotent or not) and read them
back by explicit assignment and offset — no consumer groups. Every key, value, header, timestamp, partition and
offset is compared with what was sent: offsets must be 0..N-1 per partition, in order, each exactly once, and
the high watermark must be N. Where a client's choice should be visible in the log (codec, producer id and
sequences), the batch headers in the broker's segment files are checked too.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import struct
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiokafka.codec
import kafka.codec
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewTopic as AioNewTopic
from confluent_kafka import Consumer as CfConsumer
from confluent_kafka import Producer as CfProducer
from confluent_kafka import TopicPartition as CfTopicPartition
from confluent_kafka.admin import AdminClient as CfAdminClient
from confluent_kafka.admin import NewTopic as CfNewTopic
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import NewTopic as KpNewTopic

KCAT = "/usr/bin/kcat"
CODECS = ["gzip", "snappy", "lz4", "zstd"]
CODEC_ID = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
PY_CLIENTS = ["confluent-kafka", "kafka-python", "aiokafka"]
ALL_CLIENTS = ["kcat", *PY_CLIENTS]
DEADLINE = 30.0  # seconds for any one produce flush or consume loop
SETTLE = 0.3  # seconds of extra polling after the expected messages, to catch anything extra
LINGER_MS = 50  # producers batch what they are given at once: compression then shrinks every batch

pytestmark = pytest.mark.skipif(not os.path.exists(KCAT), reason="kcat is not installed")


# --- messages --------------------------------------------------------------------------------------

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class Msg:
    partition: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp: int | None = None  # None: the producer stamps it (checked against the produce window)


@dataclass(frozen=True)
class Got:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int


@dataclass
class Consumed:
    records: dict[int, list[Got]]
    high_watermarks: dict[int, int] | None  # None where the client cannot tell (kcat)
    errors: list[str] = field(default_factory=list)


def unique_topic(prefix: str) -> str:
    return f"compat-{prefix}-{uuid.uuid4().hex[:10]}"


def make_messages(partitions: int, per_partition: int, *, text: bool = False, compressible: bool = False,
                  timestamps: bool = True, null_header_values: bool = True, tag: str = "") -> list[Msg]:  # fmt: skip
    """Messages interleaved over the partitions. Keys: some null, some empty; values: some empty, some null
    (tombstones) and binary unless `text`; headers vary per message (repeated names, unicode names, empty and null
    values) unless `text` — kcat sets one header list per invocation, so in text mode headers depend on the
    partition only and have no null values. Timestamps are explicit (an hour ago + n ms) when `timestamps`."""
    base_ts = int(time.time() * 1000) - 3_600_000
    out = []
    for i, p in itertools.product(range(per_partition), range(partitions)):
        if i % 5 == 1:
            key: bytes | None = None
        elif i % 7 == 3:
            key = b""
        else:
            key = f"key-{tag}-{p}-{i}".encode()
        filler = "abcdefgh" * (40 + i) if compressible else "x" * i
        value: bytes | None = f"value-{tag}-{p}-{i}-{filler}".encode()
        if i % 4 == 2 and not (text and key is None):  # kcat -P skips an empty line (null key, empty value)
            value = b""
        elif not text and i % 9 == 4 and key is not None:
            value = None
        elif not text and i % 6 == 5:
            value = b"\x00\xff\x01binary\n\t|" + bytes(range(256)) + (value or b"")
        if text:
            headers: Headers = TEXT_HEADERS[p % len(TEXT_HEADERS)]
        else:
            headers = BINARY_HEADERS[i % len(BINARY_HEADERS)]
            if not null_header_values:  # kafka-python's send() takes (str, bytes) headers only
                headers = tuple((k, b"" if v is None else v) for k, v in headers)
        ts = base_ts + p * 1000 + i if timestamps else None
        out.append(Msg(p, key, value, headers, ts))
    return out


TEXT_HEADERS: list[Headers] = [
    (),
    (("trace", b"t-1"),),
    (("a", b"1"), ("ключ", "значение".encode()), ("a", b""), ("b", b"x=y")),
]
BINARY_HEADERS: list[Headers] = [
    (),
    (("trace", b"\x00\x01\xfe\xff"),),
    (("a", b"1"), ("ключ", "значение".encode()), ("a", b""), ("nothing", None), ("a", b"3")),
]


def by_partition(msgs: list[Msg]) -> dict[int, list[Msg]]:
    out: dict[int, list[Msg]] = {}
    for m in msgs:
        out.setdefault(m.partition, []).append(m)
    return out


def check_consumed(msgs: list[Msg], partitions: int, consumed: Consumed, *, starts: dict[int, int] | None = None,
                   window: tuple[int, int] | None = None) -> None:  # fmt: skip
    """Every partition holds exactly its messages at offsets 0..N-1; the consumer saw exactly those from its
    start offset on, in order, once each, with every key, value, header and timestamp intact."""
    per = by_partition(msgs)
    starts = starts or {}
    assert sorted(consumed.records) == list(range(partitions))
    for p in range(partitions):
        sent = per.get(p, [])
        start = starts.get(p, 0)
        want = [(p, off, m.key, m.value, m.headers) for off, m in enumerate(sent) if off >= start]
        got = [(g.partition, g.offset, g.key, g.value, g.headers) for g in consumed.records[p]]
        assert got == want, f"partition {p} from offset {start}"
        for off, (m, g) in enumerate(zip(sent[start:], consumed.records[p], strict=True), start):
            if m.timestamp is not None:
                assert g.timestamp == m.timestamp, f"timestamp of {p}@{off}"
            else:
                assert window is not None
                assert window[0] - 1000 <= g.timestamp <= window[1] + 1000, f"timestamp of {p}@{off}"
        if consumed.high_watermarks is not None:
            assert consumed.high_watermarks[p] == len(sent), f"high watermark of partition {p}"
    assert not consumed.errors


def check_delivered(msgs: list[Msg], delivered: list[tuple[int, int]]) -> None:
    """The producer's delivery reports: the partition asked for, and offsets 0..N-1 per partition in send order."""
    counters: dict[int, itertools.count] = {}
    want = [(m.partition, next(counters.setdefault(m.partition, itertools.count()))) for m in msgs]
    assert delivered == want


# --- the broker's segment files ---------------------------------------------------------------------

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")


@dataclass(frozen=True)
class BatchHeader:
    base_offset: int
    attributes: int
    last_offset_delta: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def codec(self) -> int:
        return self.attributes & 0x7


def stored_batches(log_dir: Path, topic: str, partition: int) -> list[BatchHeader]:
    """The batch headers of one partition's segment files, in offset order."""
    out = []
    for seg in sorted((log_dir / f"{topic}-{partition}").glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + BATCH_HEADER.size <= len(data):
            h = BATCH_HEADER.unpack_from(data, pos)
            assert h[3] == 2, f"magic {h[3]} in {seg} at {pos}"
            out.append(BatchHeader(h[0], h[5], h[6], h[9], h[10], h[11], h[12]))
            pos += 12 + h[1]
        assert pos == len(data), f"{seg}: {len(data) - pos} trailing bytes"
    return out


def check_stored(log_dir: Path, topic: str, msgs: list[Msg], *, codec: str | None = None,
                 idempotent: bool | None = None) -> None:  # fmt: skip
    """The segment files hold exactly the messages' offsets; every batch uses `codec`; an idempotent producer
    stamped one producer id and gap-free sequences from 0 per partition, a plain one none."""
    pids = set()
    for p, sent in by_partition(msgs).items():
        batches = stored_batches(log_dir, topic, p)
        assert batches, f"no batch stored for partition {p}"
        codecs_seen: set[int] = set()
        expected_base = 0
        for b in batches:
            assert b.base_offset == expected_base, f"partition {p}: batch offsets not contiguous"
            assert b.record_count == b.last_offset_delta + 1
            expected_base += b.record_count
            if codec is not None:  # producers send a batch uncompressed when compressing does not shrink it
                allowed = {CODEC_ID[codec]} if b.record_count > 1 else {CODEC_ID[codec], 0}
                assert b.codec in allowed, f"partition {p} batch @{b.base_offset} ({b.record_count}): codec {b.codec}"
                codecs_seen.add(b.codec)
        assert expected_base == len(sent), f"partition {p}: {expected_base} records stored, {len(sent)} sent"
        if codec is not None:
            assert CODEC_ID[codec] in codecs_seen, f"partition {p}: no batch with codec {codec}"
        if idempotent is True:
            seq = 0
            for b in batches:
                assert b.producer_id >= 0 and b.producer_epoch >= 0, f"partition {p}: batch without producer id"
                assert b.base_sequence == seq, f"partition {p} batch @{b.base_offset}: sequence {b.base_sequence}"
                seq += b.record_count
                pids.add(b.producer_id)
        elif idempotent is False:
            for b in batches:
                assert (b.producer_id, b.base_sequence) == (-1, -1), f"partition {p}: idempotent batch"
    if idempotent:
        assert len(pids) == 1, f"producer ids {pids}"


# --- topic creation -----------------------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str, partitions: int, via: str = "confluent-kafka") -> None:
    """Create through a client's admin API (CreateTopics) or `kafkactl topic create`."""
    if via == "confluent-kafka":
        admin = CfAdminClient({"bootstrap.servers": bootstrap})
        futures = admin.create_topics([CfNewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                      operation_timeout=20, request_timeout=20)  # fmt: skip
        futures[topic].result(timeout=DEADLINE)
    elif via == "kafka-python":
        kp_admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
        try:
            kp_admin.create_topics([KpNewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                   timeout_ms=20_000)  # fmt: skip
        finally:
            kp_admin.close()
    elif via == "aiokafka":

        async def create() -> None:
            aio_admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
            await aio_admin.start()
            try:
                await aio_admin.create_topics([AioNewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                              timeout_ms=20_000)  # fmt: skip
            finally:
                await aio_admin.close()

        asyncio.run(asyncio.wait_for(create(), DEADLINE))
    elif via == "kafkactl":
        run = subprocess.run([sys.executable, "-m", "kafkactl", "topic", "create", topic, "-p", str(partitions),
                              "-b", bootstrap], capture_output=True, text=True, timeout=DEADLINE)  # fmt: skip
        assert run.returncode == 0, run.stderr
    else:
        raise AssertionError(via)


def admin_for(client: str) -> str:
    return "confluent-kafka" if client == "kcat" else client


def cf_partition_leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """{partition: leader} as one broker's Metadata answer tells it (all topics: nothing is auto-created)."""
    admin = CfAdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return {}
    return {p: pm.leader for p, pm in t.partitions.items() if pm.error is None}


# --- producers ------------------------------------------------------------------------------------------


def produce_confluent(bootstrap: str, topic: str, msgs: list[Msg], acks: str = "all", compression: str = "none",
                      extra: dict[str, Any] | None = None) -> list[tuple[int, int]]:  # fmt: skip
    producer = CfProducer({"bootstrap.servers": bootstrap, "acks": acks, "compression.type": compression,
                           "linger.ms": LINGER_MS, "message.timeout.ms": int(DEADLINE * 1000),
                           **(extra or {})})  # fmt: skip
    reports: list[Any] = [None] * len(msgs)

    def report(i: int):
        def cb(err, msg) -> None:
            reports[i] = (err, msg.partition(), msg.offset())

        return cb

    for i, m in enumerate(msgs):
        kwargs: dict[str, Any] = {"partition": m.partition, "on_delivery": report(i)}
        if m.headers:
            kwargs["headers"] = list(m.headers)
        if m.timestamp is not None:
            kwargs["timestamp"] = m.timestamp
        producer.produce(topic, value=m.value, key=m.key, **kwargs)
        producer.poll(0)
    assert producer.flush(DEADLINE) == 0, "messages left unsent"
    assert all(r is not None for r in reports)
    errors = [r[0] for r in reports if r[0] is not None]
    assert not errors, errors[:3]
    return [(r[1], r[2]) for r in reports]


def produce_kafka_python(bootstrap: str, topic: str, msgs: list[Msg], acks: str = "all", compression: str = "none",
                         extra: dict[str, Any] | None = None) -> list[tuple[int, int]]:  # fmt: skip
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=_py_acks(acks),
                             compression_type=None if compression == "none" else compression, linger_ms=LINGER_MS,
                             request_timeout_ms=int(DEADLINE * 1000), **(extra or {}))  # fmt: skip
    try:
        futures = [producer.send(topic, value=m.value, key=m.key, partition=m.partition, headers=list(m.headers),
                                 timestamp_ms=m.timestamp) for m in msgs]  # fmt: skip
        producer.flush(DEADLINE)
        metas = [f.get(timeout=DEADLINE) for f in futures]
    finally:
        producer.close(10)
    return [(md.partition, md.offset) for md in metas]


def produce_aiokafka(bootstrap: str, topic: str, msgs: list[Msg], acks: str = "all", compression: str = "none",
                     extra: dict[str, Any] | None = None) -> list[tuple[int, int]]:  # fmt: skip
    async def run() -> list[tuple[int, int]]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=_py_acks(acks),
                                    compression_type=None if compression == "none" else compression,
                                    linger_ms=LINGER_MS, request_timeout_ms=int(DEADLINE * 1000),
                                    **(extra or {}))  # fmt: skip
        await producer.start()
        try:
            futures = []
            for m in msgs:
                futures.append(await producer.send(topic, value=m.value, key=m.key, partition=m.partition,
                                                   headers=list(m.headers), timestamp_ms=m.timestamp))  # fmt: skip
            await producer.flush()
            metas = [await f for f in futures]
        finally:
            await producer.stop()
        # acks=0: aiokafka resolves each send with None (there is no answer to take an offset from)
        return [(-1, -1) if md is None else (md.partition, md.offset) for md in metas]

    return asyncio.run(asyncio.wait_for(run(), DEADLINE))


def produce_kcat(bootstrap: str, topic: str, msgs: list[Msg], acks: str = "all", compression: str = "none",
                 extra: dict[str, Any] | None = None, acks_property: str = "acks") -> None:  # fmt: skip
    """One `kcat -P` per run of messages with the same partition and headers (kcat takes -p and -H per run):
    `key<TAB>value` lines (`-K`), a line without the delimiter is a message with a null key."""
    in_partition_order = sorted(msgs, key=lambda m: m.partition)  # stable: each partition's order stays
    for (partition, headers), run in itertools.groupby(in_partition_order, key=lambda m: (m.partition, m.headers)):
        lines = []
        for m in run:
            assert m.value is not None and m.timestamp is None
            assert b"\n" not in m.value and (m.key is None or b"\t" not in m.key + m.value)
            lines.append(m.value if m.key is None else m.key + b"\t" + m.value)
        argv = [KCAT, "-b", bootstrap, "-P", "-t", topic, "-p", str(partition), "-K", "\t", "-z", compression,
                "-X", f"{acks_property}={acks}", "-X", f"linger.ms={LINGER_MS}"]  # fmt: skip
        for name, value in headers:
            assert value is not None
            argv += ["-H", f"{name}={value.decode()}"]
        for k, v in (extra or {}).items():
            argv += ["-X", f"{k}={v}"]
        run_kcat(argv, b"\n".join(lines) + b"\n")


KCAT_FAST_EOF = ["-X", "fetch.wait.max.ms=100"]  # -e exits on an empty fetch at the end: do not wait 500 ms for it


def run_kcat(argv: list[str], stdin: bytes | None = None) -> bytes:
    proc = subprocess.run(argv, input=stdin, capture_output=True, timeout=DEADLINE)
    assert proc.returncode == 0, f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')}"
    return proc.stdout


def _py_acks(acks: str) -> int | str:
    return {"0": 0, "1": 1, "all": "all", "-1": "all"}[acks]


PRODUCERS = {
    "kcat": produce_kcat,
    "confluent-kafka": produce_confluent,
    "kafka-python": produce_kafka_python,
    "aiokafka": produce_aiokafka,
}


# --- consumers ------------------------------------------------------------------------------------------


def _done(records: dict[int, list[Got]], want: dict[int, int]) -> bool:
    return all(len(records[p]) >= n for p, n in want.items())


def _headers(h: Any) -> Headers:
    return tuple((k, v) for k, v in (h or ()))


def consume_confluent(bootstrap: str, topic: str, starts: dict[int, int], ends: dict[int, int]) -> Consumed:
    """assign() with explicit offsets; librdkafka insists on a group.id, but nothing is committed or stored."""
    consumer = CfConsumer({"bootstrap.servers": bootstrap, "group.id": f"compat-unused-{uuid.uuid4().hex[:8]}",
                           "enable.auto.commit": False, "enable.auto.offset.store": False,
                           "auto.offset.reset": "error", "fetch.wait.max.ms": 100})  # fmt: skip
    records: dict[int, list[Got]] = {p: [] for p in starts}
    want = {p: ends[p] - starts[p] for p in starts}
    errors: list[str] = []
    try:
        consumer.assign([CfTopicPartition(topic, p, off) for p, off in starts.items()])
        deadline = time.monotonic() + DEADLINE
        settle_until = None
        while time.monotonic() < (settle_until or deadline):
            m = consumer.poll(0.1)
            if m is not None:
                if m.error():
                    errors.append(str(m.error()))
                else:
                    ts_type, ts = m.timestamp()
                    assert ts_type == 1, f"timestamp type {ts_type}"  # TIMESTAMP_CREATE_TIME
                    records[m.partition()].append(Got(m.partition(), m.offset(), m.key(), m.value(),
                                                      _headers(m.headers()), ts))  # fmt: skip
            if settle_until is None and _done(records, want):
                settle_until = time.monotonic() + SETTLE
        hw = {p: consumer.get_watermark_offsets(CfTopicPartition(topic, p), timeout=10)[1] for p in starts}
    finally:
        consumer.close()
    return Consumed(records, hw, errors)


def consume_kafka_python(bootstrap: str, topic: str, starts: dict[int, int], ends: dict[int, int]) -> Consumed:
    """assign() + seek(), no group id, no auto commit."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="none", fetch_max_wait_ms=100, request_timeout_ms=20_000)  # fmt: skip
    records: dict[int, list[Got]] = {p: [] for p in starts}
    want = {p: ends[p] - starts[p] for p in starts}
    try:
        tps = [KpTopicPartition(topic, p) for p in starts]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, starts[tp.partition])
        deadline = time.monotonic() + DEADLINE
        settle_until = None
        while time.monotonic() < (settle_until or deadline):
            for tp, batch in consumer.poll(timeout_ms=100).items():
                for r in batch:
                    assert r.timestamp_type == 0, f"timestamp type {r.timestamp_type}"  # CreateTime
                    records[tp.partition].append(Got(tp.partition, r.offset, r.key, r.value, _headers(r.headers),
                                                     r.timestamp))  # fmt: skip
            if settle_until is None and _done(records, want):
                settle_until = time.monotonic() + SETTLE
        hw = {tp.partition: off for tp, off in consumer.end_offsets(tps).items()}
    finally:
        consumer.close(autocommit=False)
    return Consumed(records, hw)


def consume_aiokafka(bootstrap: str, topic: str, starts: dict[int, int], ends: dict[int, int]) -> Consumed:
    """assign() + seek(), no group id, no auto commit."""

    async def run() -> Consumed:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                    auto_offset_reset="none", fetch_max_wait_ms=100,
                                    request_timeout_ms=20_000)  # fmt: skip
        records: dict[int, list[Got]] = {p: [] for p in starts}
        want = {p: ends[p] - starts[p] for p in starts}
        await consumer.start()
        try:
            tps = [AioTopicPartition(topic, p) for p in starts]
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, starts[tp.partition])
            deadline = time.monotonic() + DEADLINE - 2
            settle_until = None
            while time.monotonic() < (settle_until or deadline):
                for tp, batch in (await consumer.getmany(timeout_ms=100)).items():
                    for r in batch:
                        assert r.timestamp_type == 0, f"timestamp type {r.timestamp_type}"  # CreateTime
                        records[tp.partition].append(Got(tp.partition, r.offset, r.key, r.value,
                                                         _headers(r.headers), r.timestamp))  # fmt: skip
                if settle_until is None and _done(records, want):
                    settle_until = time.monotonic() + SETTLE
            hw = {tp.partition: off for tp, off in (await consumer.end_offsets(tps)).items()}
        finally:
            await consumer.stop()
        return Consumed(records, hw)

    return asyncio.run(asyncio.wait_for(run(), DEADLINE))


def consume_kcat(bootstrap: str, topic: str, starts: dict[int, int], ends: dict[int, int]) -> Consumed:
    """`kcat -C -e -J`: all partitions from the beginning in one run, else one `-p N -o OFFSET` run per partition."""
    runs: list[list[str]]
    if all(off == 0 for off in starts.values()):
        runs = [["-o", "beginning"]]
    else:
        runs = [["-p", str(p), "-o", str(off)] for p, off in starts.items()]
    records: dict[int, list[Got]] = {p: [] for p in starts}
    for extra in runs:
        out = run_kcat([KCAT, "-b", bootstrap, "-C", "-t", topic, "-e", "-q", "-J", *KCAT_FAST_EOF, *extra])
        for line in out.decode().splitlines():
            j = json.loads(line)
            assert j["topic"] == topic and j["tstype"] == "create", line
            h = j.get("headers") or []
            headers = tuple((h[i], None if h[i + 1] is None else h[i + 1].encode()) for i in range(0, len(h), 2))
            records[j["partition"]].append(Got(j["partition"], j["offset"], _enc(j["key"]), _enc(j["payload"]),
                                               headers, j["ts"]))  # fmt: skip
    return Consumed(records, None)


def _enc(s: str | None) -> bytes | None:
    return None if s is None else s.encode()


CONSUMERS = {
    "kcat": consume_kcat,
    "confluent-kafka": consume_confluent,
    "kafka-python": consume_kafka_python,
    "aiokafka": consume_aiokafka,
}


def consume_all(client: str, bootstrap: str, topic: str, msgs: list[Msg], partitions: int,
                starts: dict[int, int] | None = None) -> Consumed:  # fmt: skip
    per = by_partition(msgs)
    starts = {p: (starts or {}).get(p, 0) for p in range(partitions)}
    ends = {p: len(per.get(p, [])) for p in range(partitions)}
    return CONSUMERS[client](bootstrap, topic, starts, ends)


def roundtrip(broker, producer: str, consumer: str, *, partitions: int = 3, per_partition: int = 12,
              acks: str = "all", compression: str = "none", extra: dict[str, Any] | None = None,
              compressible: bool = False, tag: str = "") -> tuple[str, list[Msg]]:  # fmt: skip
    """Create a topic, produce with one client, consume everything with another, check it all."""
    topic = unique_topic(tag or f"{producer}-{consumer}")
    create_topic(broker.bootstrap, topic, partitions, via=admin_for(producer))
    text = "kcat" in (producer, consumer)
    msgs = make_messages(partitions, per_partition, text=text, compressible=compressible,
                         timestamps=producer != "kcat", null_header_values=producer != "kafka-python",
                         tag=tag)  # fmt: skip
    t0 = int(time.time() * 1000)
    delivered = PRODUCERS[producer](broker.bootstrap, topic, msgs, acks=acks, compression=compression, extra=extra)
    t1 = int(time.time() * 1000)
    if delivered is not None and acks != "0":
        check_delivered(msgs, delivered)
    consumed = consume_all(consumer, broker.bootstrap, topic, msgs, partitions)
    check_consumed(msgs, partitions, consumed, window=(t0, t1))
    return topic, msgs


# --- kcat -------------------------------------------------------------------------------------------------


def test_kcat_metadata_lists_broker_topics_and_partitions(shared_broker) -> None:
    t3, t1 = unique_topic("md3"), unique_topic("md1")
    create_topic(shared_broker.bootstrap, t3, 3, via="kafkactl")
    create_topic(shared_broker.bootstrap, t1, 1, via="kafkactl")
    out = run_kcat([KCAT, "-b", shared_broker.bootstrap, "-L"]).decode()
    lines = [line.strip() for line in out.splitlines()]
    assert "1 brokers:" in lines
    assert f"broker 1 at 127.0.0.1:{shared_broker.port} (controller)" in lines
    i = lines.index(f'topic "{t3}" with 3 partitions:')
    assert lines[i + 1 : i + 4] == [f"partition {p}, leader 1, replicas: 1, isrs: 1" for p in range(3)]
    j = lines.index(f'topic "{t1}" with 1 partitions:')
    assert lines[j + 1] == "partition 0, leader 1, replicas: 1, isrs: 1"
    assert not any("err" in line.lower() for line in lines), out

    # -J: the same as JSON, for all topics and for one
    md = json.loads(run_kcat([KCAT, "-b", shared_broker.bootstrap, "-L", "-J"]))
    assert md["controllerid"] == 1
    assert md["originating_broker"]["id"] == 1
    assert md["brokers"] == [{"id": 1, "name": shared_broker.bootstrap}]
    topics = {t["topic"]: t for t in md["topics"]}
    assert topics[t3]["partitions"] == [
        {"partition": p, "leader": 1, "replicas": [{"id": 1}], "isrs": [{"id": 1}]} for p in range(3)
    ]
    assert topics[t1]["partitions"] == [{"partition": 0, "leader": 1, "replicas": [{"id": 1}], "isrs": [{"id": 1}]}]
    assert not any("error" in t for t in (topics[t3], topics[t1]))
    one = json.loads(run_kcat([KCAT, "-b", shared_broker.bootstrap, "-L", "-J", "-t", t3]))
    assert one["query"]["topic"] == t3
    assert [t["topic"] for t in one["topics"]] == [t3]
    assert len(one["topics"][0]["partitions"]) == 3


@pytest.mark.parametrize("codec", ["none", *CODECS])
def test_kcat_produce_codec_roundtrip(shared_broker, codec: str) -> None:
    """kcat -P -z CODEC with keys (-K), headers (-H) and explicit partitions (-p); kcat -C -J reads it back."""
    topic, msgs = roundtrip(shared_broker, "kcat", "kcat", compression=codec, compressible=True, tag=f"kcat-{codec}")
    check_stored(shared_broker.log_dir, topic, msgs, codec=codec, idempotent=False)


@pytest.mark.parametrize(
    "prop,acks",
    [("acks", "0"), ("acks", "1"), ("acks", "all"), ("request.required.acks", "0"),
     ("request.required.acks", "1"), ("request.required.acks", "-1")],
)  # fmt: skip
def test_kcat_acks_format_string(shared_broker, prop: str, acks: str) -> None:
    """kcat -P -X acks=...; read back with a -f format string (lengths tell null from empty)."""
    topic = unique_topic(f"kcat-acks{acks}")
    create_topic(shared_broker.bootstrap, topic, 2)
    msgs = make_messages(2, 10, text=True, timestamps=False, tag=f"acks{acks}")
    produce_kcat(shared_broker.bootstrap, topic, msgs, acks=acks, acks_property=prop)
    out = run_kcat([KCAT, "-b", shared_broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
                    *KCAT_FAST_EOF, "-f", "%p|%o|%K|%S|%k|%s|%h\n"])  # fmt: skip
    got: dict[int, list[tuple]] = {0: [], 1: []}
    for line in out.decode().splitlines():
        p, o, klen, vlen, rest = line.split("|", 4)
        klen_i, vlen_i = int(klen), int(vlen)
        key = rest[: max(klen_i, 0)]
        assert rest[max(klen_i, 0)] == "|"
        rest = rest[max(klen_i, 0) + 1 :]
        value, headers = rest[: max(vlen_i, 0)], rest[max(vlen_i, 0) + 1 :]
        got[int(p)].append((int(o), None if klen_i < 0 else key.encode(), None if vlen_i < 0 else value.encode(),
                            headers))  # fmt: skip
    for p, sent in by_partition(msgs).items():
        want = [(o, m.key, m.value, ",".join(f"{k}={v.decode()}" for k, v in m.headers)) for o, m in enumerate(sent)]
        assert got[p] == want, f"partition {p}"


def test_kcat_consume_from_middle_offset(shared_broker) -> None:
    topic = unique_topic("kcat-mid")
    create_topic(shared_broker.bootstrap, topic, 3)
    msgs = make_messages(3, 10, text=True, timestamps=False, tag="mid")
    t0 = int(time.time() * 1000)
    produce_kcat(shared_broker.bootstrap, topic, msgs)
    t1 = int(time.time() * 1000)
    starts = {0: 5, 1: 9, 2: 10}
    consumed = consume_all("kcat", shared_broker.bootstrap, topic, msgs, 3, starts=starts)
    assert [[g.offset for g in consumed.records[p]] for p in range(3)] == [[5, 6, 7, 8, 9], [9], []]
    check_consumed(msgs, 3, consumed, starts=starts, window=(t0, t1))


def test_kcat_produce_auto_creates_topic(shared_broker) -> None:
    """A produce to an unknown topic creates it through Metadata (auto.create.topics.enable, 1 partition)."""
    topic = unique_topic("kcat-auto")
    msgs = make_messages(1, 6, text=True, timestamps=False, tag="auto")
    t0 = int(time.time() * 1000)
    produce_kcat(shared_broker.bootstrap, topic, msgs)
    t1 = int(time.time() * 1000)
    md = json.loads(run_kcat([KCAT, "-b", shared_broker.bootstrap, "-L", "-J", "-t", topic]))
    assert [len(t["partitions"]) for t in md["topics"]] == [1]
    check_consumed(msgs, 1, consume_all("kcat", shared_broker.bootstrap, topic, msgs, 1), window=(t0, t1))


# --- the Python clients, each with itself ------------------------------------------------------------------


@pytest.mark.parametrize("acks", ["0", "1", "all"])
@pytest.mark.parametrize("client", PY_CLIENTS)
def test_python_client_roundtrip_acks(shared_broker, client: str, acks: str) -> None:
    """Keys (null, empty), values (empty, null, binary), headers (repeated, unicode, null), explicit partitions
    and timestamps; consumed by assign + seek to 0."""
    roundtrip(shared_broker, client, client, acks=acks, tag=f"{client}-acks{acks}")


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", PY_CLIENTS)
def test_python_client_compression(shared_broker, client: str, codec: str) -> None:
    """Each codec (librdkafka has all four built in; the pure-Python clients need the codec's library)."""
    library = {"kafka-python": kafka.codec, "aiokafka": aiokafka.codec}.get(client)
    if library is not None and not getattr(library, f"has_{codec}")():
        pytest.skip(f"{client}: no {codec} library installed")
    topic, msgs = roundtrip(shared_broker, client, client, acks="1", compression=codec, compressible=True,
                            tag=f"{client}-{codec}")  # fmt: skip
    check_stored(shared_broker.log_dir, topic, msgs, codec=codec)


@pytest.mark.parametrize("client", PY_CLIENTS)
def test_python_client_consumes_from_middle_offset(shared_broker, client: str) -> None:
    """seek to 5 of 10 gets exactly offsets 5..9; seek to 9 gets the last one; seek to the end gets nothing."""
    topic = unique_topic(f"{client}-mid")
    create_topic(shared_broker.bootstrap, topic, 3, via=client)
    msgs = make_messages(3, 10, null_header_values=client != "kafka-python", tag="mid")
    PRODUCERS[client](shared_broker.bootstrap, topic, msgs, acks="1")
    starts = {0: 5, 1: 9, 2: 10}
    consumed = consume_all(client, shared_broker.bootstrap, topic, msgs, 3, starts=starts)
    assert [[g.offset for g in consumed.records[p]] for p in range(3)] == [[5, 6, 7, 8, 9], [9], []]
    check_consumed(msgs, 3, consumed, starts=starts)


IDEMPOTENT_CASES = [
    ("kafka-python", {"enable_idempotence": True}, True),
    ("kafka-python", {}, True),  # kafka-python's default producer is idempotent
    ("kafka-python", {"enable_idempotence": False}, False),
    ("aiokafka", {"enable_idempotence": True}, True),
    ("confluent-kafka", {"enable.idempotence": True}, True),
]


@pytest.mark.parametrize("client,extra,idempotent", IDEMPOTENT_CASES,
                         ids=["kafka-python-true", "kafka-python-default", "kafka-python-false", "aiokafka-true",
                              "confluent-kafka-true"])  # fmt: skip
def test_idempotent_producer(shared_broker, client: str, extra: dict[str, Any], idempotent: bool) -> None:
    """InitProducerId hands out a producer id; the stored batches carry it with gap-free sequences from 0."""
    if client == "kafka-python" and "enable_idempotence" not in KafkaProducer.DEFAULT_CONFIG:
        pytest.skip("this kafka-python has no idempotent producer")
    topic, msgs = roundtrip(shared_broker, client, client, acks="all", extra=extra, per_partition=20,
                            tag=f"{client}-idem")  # fmt: skip
    check_stored(shared_broker.log_dir, topic, msgs, idempotent=idempotent)


# --- across clients ------------------------------------------------------------------------------------------


CROSS_CODEC = {"kcat": "snappy", "confluent-kafka": "zstd", "kafka-python": "gzip", "aiokafka": "lz4"}


@pytest.mark.parametrize(
    "producer,consumer", [(p, c) for p in ALL_CLIENTS for c in ALL_CLIENTS if p != c], ids=lambda s: s
)
def test_cross_client(shared_broker, producer: str, consumer: str) -> None:
    """What one client produced (acks=all, each producer with another codec) another reads identically."""
    codec = CROSS_CODEC[producer]
    roundtrip(shared_broker, producer, consumer, compression=codec, per_partition=8, tag=f"x-{producer}-{consumer}")


# --- three brokers ----------------------------------------------------------------------------------------------


def test_cluster3_confluent_produces_via_broker2_kafka_python_reads_via_broker3(cluster3) -> None:
    b1, b2, b3 = cluster3
    topic = unique_topic("cluster3")
    create_topic(b2.bootstrap, topic, 6)
    deadline = time.monotonic() + DEADLINE
    leaders: dict[int, dict[int, int]] = {}
    while time.monotonic() < deadline:  # every broker knows the topic and each partition's leader
        leaders = {b.broker_id: cf_partition_leaders(b.bootstrap, topic) for b in cluster3}
        if all(len(v) == 6 for v in leaders.values()) and leaders[1] == leaders[2] == leaders[3]:
            break
        time.sleep(0.2)
    assert all(len(v) == 6 for v in leaders.values()), leaders
    lead = leaders[1]
    assert leaders[2] == lead and leaders[3] == lead
    assert sorted(lead.values()) == [1, 1, 2, 2, 3, 3], lead  # spread over the three brokers

    md = json.loads(run_kcat([KCAT, "-b", b3.bootstrap, "-L", "-J", "-t", topic]))
    assert sorted((b["id"], b["name"]) for b in md["brokers"]) == [(b.broker_id, b.bootstrap) for b in cluster3]

    msgs = make_messages(6, 15, tag="c3")
    delivered = produce_confluent(b2.bootstrap, topic, msgs, acks="all")
    check_delivered(msgs, delivered)
    consumed = consume_all("kafka-python", b3.bootstrap, topic, msgs, 6)
    assert {p: len(consumed.records[p]) for p in range(6)} == {p: 15 for p in range(6)}
    check_consumed(msgs, 6, consumed)
    for p, leader in lead.items():  # the data lives with each partition's leader only (replication factor 1)
        check_stored(cluster3[leader - 1].log_dir, topic, [m for m in msgs if m.partition == p])
        for b in cluster3:
            if b.broker_id != leader:
                assert not (b.log_dir / f"{topic}-{p}").exists(), f"partition {p} on broker {b.broker_id}"
