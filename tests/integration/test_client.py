"""kafkactl's asyncio producer and consumer (broker.client) against real broker processes."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time

import pytest

from broker.client.consumer import AsyncConsumer, ConsumeError, RawConsumer, decode_records
from broker.client.partitioner import murmur2, partition_for_key
from broker.client.producer import AsyncProducer, ProduceError
from broker.errors import KafkactlError
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.produce import RUN_CODEC
from broker.zk import paths as zk_paths
from tests.fixtures import zk_client
from tests.integration import wire
from tests.integration.clientkit import create_topic, disk_batches, read_all, read_all_async, unique

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


TS0 = 1_700_000_000_123


def now_ms() -> int:
    return int(time.time() * 1000)


def varied_messages(ts0: int) -> list[dict]:
    """Every shape a message can take; `partition` None means: let the partitioner choose."""
    msgs = [
        dict(key=b"plain-key", value=b"plain value", headers=[], partition=None),
        dict(key=None, value=b"null key", headers=[], partition=0),
        dict(key=b"null-value", value=None, headers=[], partition=1),
        dict(key=None, value=None, headers=[], partition=2),
        dict(key=b"empty-value", value=b"", headers=[], partition=None),
        dict(key=b"", value=b"empty key", headers=[], partition=1),
        dict(key=b"\x00\xff\xfe\x80binary", value=bytes(range(256)), headers=[], partition=None),
        dict(key="ключ".encode(), value="värde ✓".encode(), headers=[("ä", "ö".encode())], partition=0),
        dict(key=b"hdrs", value=b"repeated and null headers",
             headers=[("h", b"1"), ("h", b"2"), ("h", None), ("empty", b""), ("bin", b"\xff\x00"), ("h", b"3")],
             partition=None),
        dict(key=None, value=b"x" * 20_000, headers=[("big", b"y" * 3000)], partition=2),
    ]  # fmt: skip
    for i in range(40):
        msgs.append(dict(key=b"key-%d" % (i % 7), value=b"value %d" % i, headers=[("i", b"%d" % i)], partition=None))
    for i, m in enumerate(msgs):
        m["timestamp"] = ts0 + i * 10
    return msgs


async def send_all(bootstrap: str, topic: str, msgs: list[dict], **cfg):
    async with AsyncProducer(bootstrap, **cfg) as producer:
        deliveries = [
            await producer.send(
                topic,
                m["value"],
                m["key"],
                headers=m["headers"],
                partition=m["partition"],
                timestamp=m.get("timestamp"),
            )  # fmt: skip
            for m in msgs
        ]
        await producer.flush()
        return [await d for d in deliveries]


# --- round trips -----------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_codec(shared_broker, codec):
    topic = create_topic(shared_broker.bootstrap, unique(f"rt-{codec}"), 3)
    msgs = varied_messages(now_ms() - 60_000)
    metas = asyncio.run(send_all(shared_broker.bootstrap, topic, msgs, compression_type=codec, linger_ms=50))
    assert len(metas) == len(msgs)
    for m, md in zip(msgs, metas, strict=True):
        assert md.topic == topic
        assert md.timestamp == m["timestamp"]
        if m["partition"] is not None:
            assert md.partition == m["partition"]
        elif m["key"] is not None:
            assert md.partition == partition_for_key(m["key"], 3)
    assert len({(md.partition, md.offset) for md in metas}) == len(msgs)

    got = {(r.partition, r.offset): r for r in read_all(shared_broker.bootstrap, topic)}
    assert set(got) == {(md.partition, md.offset) for md in metas}  # nothing lost, nothing extra
    for m, md in zip(msgs, metas, strict=True):
        r = got[(md.partition, md.offset)]
        assert (r.topic, r.key, r.value, r.headers, r.timestamp, r.timestamp_type) == (
            topic, m["key"], m["value"], tuple(m["headers"]), m["timestamp"], 0)  # fmt: skip

    on_disk = [h for p in range(3) for h, _ in disk_batches(shared_broker.log_dir, topic, p)]
    assert on_disk and {h.codec for h in on_disk} == {CODEC_IDS[codec]}
    assert sum(h.record_count for h in on_disk) == len(msgs)


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(shared_broker, acks):
    topic = create_topic(shared_broker.bootstrap, unique(f"acks{acks}"), 1)
    msgs = [dict(key=None, value=b"m%03d" % i, headers=[], partition=0) for i in range(50)]
    metas = asyncio.run(send_all(shared_broker.bootstrap, topic, msgs, acks=acks, linger_ms=1, batch_size=300))
    if acks == "0":
        assert {md.offset for md in metas} == {-1}  # no answer, no offsets
    else:
        assert [md.offset for md in metas] == list(range(50))
    recs = read_all(shared_broker.bootstrap, topic)
    assert [r.value for r in recs] == [m["value"] for m in msgs]
    batches = [h for h, _ in disk_batches(shared_broker.log_dir, topic, 0)]
    assert len(batches) > 1
    ids = {h.producer_id for h in batches}
    if acks == "all":  # idempotent by default
        assert len(ids) == 1 and min(ids) >= 0
    else:
        assert ids == {-1}
        assert {h.base_sequence for h in batches} == {-1}


def test_idempotence_needs_acks_all():
    with pytest.raises(KafkactlError, match="acks=all"):
        AsyncProducer("127.0.0.1:1", acks=1, enable_idempotence=True)


@pytest.mark.parametrize(("setting", "value"), [("compression_type", "brotli"), ("acks", "2"), ("no_such", 1)])
def test_bad_producer_settings(setting, value):
    with pytest.raises(KafkactlError):
        AsyncProducer("127.0.0.1:1", **{setting: value})


# --- partitioning and batching ---------------------------------------------------------------------


def test_keyed_messages_land_on_the_murmur2_partition(shared_broker):
    kp = pytest.importorskip("kafka.partitioner.default")
    topic = create_topic(shared_broker.bootstrap, unique("keyed"), 5)
    keys = [b"user-%d" % i for i in range(200)] + [b"", b"\xff\xfe", "ключ".encode()]
    msgs = [dict(key=k, value=b"v", headers=[], partition=None) for k in keys]
    metas = asyncio.run(send_all(shared_broker.bootstrap, topic, msgs))
    for k, md in zip(keys, metas, strict=True):
        assert md.partition == (murmur2(k) & 0x7FFFFFFF) % 5 == (kp.murmur2(k) & 0x7FFFFFFF) % 5, k
    recs = read_all(shared_broker.bootstrap, topic)
    assert sorted((r.key, r.partition) for r in recs) == sorted((k, partition_for_key(k, 5)) for k in keys)
    assert len({r.partition for r in recs}) == 5


def test_unkeyed_messages_stick_to_one_partition_per_batch(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("sticky"), 4)
    msgs = [dict(key=None, value=b"%04d" % i + b"." * 60, headers=[], partition=None) for i in range(400)]
    # a long linger: only batch.size closes batches, so every batch boundary is a size boundary
    metas = asyncio.run(send_all(shared_broker.bootstrap, topic, msgs, batch_size=1024, linger_ms=5000))
    runs: list[tuple[int, list[bytes]]] = []
    for m, md in zip(msgs, metas, strict=True):
        if runs and runs[-1][0] == md.partition:
            runs[-1][1].append(m["value"])
        else:
            runs.append((md.partition, [m["value"]]))
    batches = {p: [[r.value for r in recs] for _, recs in disk_batches(shared_broker.log_dir, topic, p)]
               for p in range(4)}  # fmt: skip
    assert sum(len(b) for b in batches.values()) == len(runs)  # one batch per run of the same partition
    for p, values in runs:
        assert values in batches[p]
    assert all(len(values) > 5 for _, values in runs[:-1])  # batches of many records
    assert len({p for p, _ in runs}) > 1  # and the partition moves on after a batch


def test_linger_gathers_messages_into_one_batch(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("linger"), 1)

    async def run(linger_ms: float) -> list[int]:
        async with AsyncProducer(shared_broker.bootstrap, linger_ms=linger_ms) as producer:
            a = await producer.send(topic, b"a", partition=0)
            await asyncio.sleep(0.3)
            b = await producer.send(topic, b"b", partition=0)
            return [(await a).offset, (await b).offset]

    assert asyncio.run(run(1000)) == [0, 1]
    assert [h.record_count for h, _ in disk_batches(shared_broker.log_dir, topic, 0)] == [2]
    assert asyncio.run(run(0)) == [2, 3]
    assert [h.record_count for h, _ in disk_batches(shared_broker.log_dir, topic, 0)] == [2, 1, 1]


def test_batch_size_bounds_the_batches(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("bsize"), 1)
    msgs = [dict(key=b"k%03d" % i, value=b"v" * 100, headers=[], partition=0) for i in range(300)]
    asyncio.run(send_all(shared_broker.bootstrap, topic, msgs, batch_size=2000, linger_ms=1000))
    heads = [h for h, _ in disk_batches(shared_broker.log_dir, topic, 0)]
    assert sum(h.record_count for h in heads) == 300
    record = 120  # one record of this test, with its framing, is below this
    for h in heads[:-1]:
        assert 2000 <= h.size < 2000 + record, h
        assert h.record_count > 10
    assert heads[-1].size < 2000 + record


def test_send_many_sends_a_message_set_in_order_in_batches_of_batch_size(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("many"), 3)
    values = [b"m%04d" % i + b"." * 90 for i in range(250)]
    values[7] = None
    values[8] = b""
    hdrs = [("h", b"1"), ("n", None)]

    async def main():
        async with AsyncProducer(shared_broker.bootstrap, batch_size=2000, linger_ms=1000) as producer:
            await producer.partitions(topic)
            first = producer.send_many(topic, values[:200], b"key", headers=hdrs, partition=1, timestamp=TS0)
            second = producer.send_many(topic, values[200:], None, partition=1)
            empty = producer.send_many(topic, [], partition=1)
            assert (len(first), len(second), len(empty)) == (200, 50, 0)
            one = await first[-1]
            return one, await first, await second, await first[3:5][1]

    one, metas, more, fourth = asyncio.run(main())
    assert [m.offset for m in metas + more] == list(range(250))
    assert {m.partition for m in metas + more} == {1}
    assert one == metas[-1] and fourth == metas[4]
    assert all(m.timestamp == TS0 for m in metas)
    got = read_all(shared_broker.bootstrap, topic)
    assert [(r.partition, r.offset, r.value) for r in got] == [(1, i, v) for i, v in enumerate(values)]
    assert all(r.key == b"key" and r.headers == tuple(hdrs) and r.timestamp == TS0 for r in got[:200])
    assert all(r.key is None and r.headers == () for r in got[200:])
    heads = [h for h, _ in disk_batches(shared_broker.log_dir, topic, 1)]
    assert len(heads) > 10 and all(h.size < 2000 + 120 for h in heads)


def test_send_many_refuses_what_cannot_go(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("many-no"), 1)

    async def main():
        async with AsyncProducer(shared_broker.bootstrap, buffer_memory=10_000, max_request_size=5_000) as producer:
            assert producer.send_many(topic, [b"x"]) is None  # metadata not known yet: send() would wait
            await producer.partitions(topic)
            with pytest.raises(ProduceError, match="max.request.size"):
                producer.send_many(topic, [b"ok", b"y" * 6_000])
            with pytest.raises(ProduceError, match="no partition 4"):
                producer.send_many(topic, [b"x"], partition=4)
            with pytest.raises(TypeError, match="bytes or None"):
                producer.send_many(topic, [b"ok", "text"], partition=0)  # nothing of it is queued
            await asyncio.wait_for(producer.flush(), 5)  # and no empty batch is left to wait for
            assert producer.send_many(topic, [b"z" * 1000] * 11) is None  # over buffer.memory: nothing queued
            assert producer.buffered == 0
            sent = producer.send_many(topic, [b"z" * 1000] * 5)
            await producer.wait_for_room(6 * 1020)  # sends what blocks the room, then waits for it
            return await sent

    metas = asyncio.run(main())
    assert [m.offset for m in metas] == [0, 1, 2, 3, 4]
    assert [r.value for r in read_all(shared_broker.bootstrap, topic)] == [b"z" * 1000] * 5


def test_max_in_flight_1_keeps_the_order(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("order"), 1)
    msgs = [dict(key=None, value=b"%05d" % i, headers=[], partition=0) for i in range(500)]

    async def run():
        peak = 0
        async with AsyncProducer(shared_broker.bootstrap, max_in_flight=1, batch_size=100, acks=1) as producer:
            on_answer = producer._on_answer

            def answered(node, batches, answer, exc):  # requests unanswered when each answer comes
                nonlocal peak
                peak = max(peak, producer.in_flight[node])
                on_answer(node, batches, answer, exc)

            producer._on_answer = answered
            deliveries = []
            for m in msgs:
                deliveries.append(await producer.send(topic, m["value"], partition=0))
                if len(deliveries) % 10 == 0:
                    await asyncio.sleep(0)  # let the sender work while we keep sending
            await producer.flush()
            return peak, [await d for d in deliveries]

    peak, metas = asyncio.run(run())
    assert peak == 1  # requests were pipelined, but never more than one unanswered
    assert [md.offset for md in metas] == list(range(500))
    assert [r.value for r in read_all(shared_broker.bootstrap, topic)] == [m["value"] for m in msgs]
    assert len(disk_batches(shared_broker.log_dir, topic, 0)) > 50


def test_idempotent_batches_carry_one_producer_id_and_consecutive_sequences(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("idem"), 2)
    msgs = [dict(key=None, value=b"x" * (i % 50), headers=[], partition=i % 2) for i in range(600)]
    asyncio.run(send_all(shared_broker.bootstrap, topic, msgs, batch_size=512))
    asyncio.run(send_all(shared_broker.bootstrap, topic, msgs[:20]))  # a second producer: another id
    pids = []
    for p in range(2):
        heads = [h for h, _ in disk_batches(shared_broker.log_dir, topic, p)]
        assert sum(h.record_count for h in heads) == 310
        first = [h for h in heads if h.producer_id == heads[0].producer_id]
        second = heads[len(first) :]
        assert len(first) > 5 and second
        for group in (first, second):
            assert len({(h.producer_id, h.producer_epoch) for h in group}) == 1
            assert group[0].producer_id >= 0 and group[0].producer_epoch >= 0
            seq = 0
            for h in group:
                assert h.base_sequence == seq, [x.base_sequence for x in group]
                seq += h.record_count
        pids.append((first[0].producer_id, second[0].producer_id))
    assert pids[0] == pids[1]  # one producer id per producer, across its partitions
    assert pids[0][0] != pids[0][1]


@pytest.mark.parametrize("acks", [1, "all"])
def test_single_record_requests_pipelined_go_as_runs_and_land_whole(shared_broker, monkeypatch, acks):
    """One record per request, many in flight, one partition: the producer frames them a run at a time and
    the broker appends them a run at a time (with acks=all the producer is idempotent: the runs carry
    chained sequences). Every message is stored once, in order, at the offset it was told, one per batch."""
    from broker.client import producer as producer_module

    runs: list[int] = []
    real = producer_module.AsyncProducer._send_batch_run

    def counting(self, node, conn, tp, run):  # noqa: ANN001
        runs.append(len(run))
        return real(self, node, conn, tp, run)

    monkeypatch.setattr(producer_module.AsyncProducer, "_send_batch_run", counting)
    topic = create_topic(shared_broker.bootstrap, unique("runs"), 1)
    values = [b"r%05d" % i + b"." * (i % 37) for i in range(3000)]

    async def run() -> list[int]:
        async with AsyncProducer(shared_broker.bootstrap, acks=acks, linger_ms=0, max_batch_messages=1,
                                 max_in_flight=5 if acks == "all" else 50) as producer:  # fmt: skip
            await producer.partitions(topic)
            deliveries = []
            for i, v in enumerate(values):
                deliveries.append(producer.send_nowait(topic, v, key=b"k%d" % i, partition=0,
                                                       headers=[("i", b"%d" % i)]))  # fmt: skip
                if i % 200 == 199:
                    await asyncio.sleep(0)
            return [(await d).offset for d in deliveries]

    offsets = asyncio.run(run())
    assert offsets == list(range(3000))
    if RUN_CODEC is not None:
        assert sum(runs) > 1000 and max(runs) > 1  # most went in runs
    stored = read_all(shared_broker.bootstrap, topic)
    assert [(r.offset, r.key, r.value, r.headers) for r in stored] == [
        (i, b"k%d" % i, v, (("i", b"%d" % i),)) for i, v in enumerate(values)]  # fmt: skip
    heads = [h for h, _ in disk_batches(shared_broker.log_dir, topic, 0)]
    assert [h.record_count for h in heads] == [1] * 3000
    if acks == "all":
        assert len({h.producer_id for h in heads}) == 1 and heads[0].producer_id >= 0
        assert [h.base_sequence for h in heads] == list(range(3000))
    else:
        assert {(h.producer_id, h.base_sequence) for h in heads} == {(-1, -1)}


def test_buffer_memory_back_pressure_still_delivers_everything(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("bufmem"), 1)

    async def run():
        peak = 0
        async with AsyncProducer(shared_broker.bootstrap, buffer_memory=2000, batch_size=600,
                                 linger_ms=50) as producer:  # fmt: skip
            deliveries = []
            for i in range(1500):
                deliveries.append(await producer.send(topic, b"%04d" % i + b"-" * 96, partition=0))
                peak = max(peak, producer.buffered)
            metas = [await d for d in deliveries]
        return peak, metas

    peak, metas = asyncio.run(run())
    assert peak <= 2000
    assert [md.offset for md in metas] == list(range(1500))
    assert [r.value[:4] for r in read_all(shared_broker.bootstrap, topic)] == [b"%04d" % i for i in range(1500)]


def test_max_block_ms_with_the_broker_gone_is_a_produce_error(start_broker):
    b = start_broker(1)
    topic = create_topic(b.bootstrap, "gone", 1)

    async def run():
        producer = AsyncProducer(b.bootstrap, buffer_memory=1000, max_block_ms=300, delivery_timeout_ms=2000,
                                 request_timeout_ms=1000, linger_ms=0)  # fmt: skip
        await producer.start()
        try:
            assert (await (await producer.send(topic, b"first"))).offset == 0
            b.stop()
            queued = []
            t0 = time.monotonic()
            with pytest.raises(ProduceError, match="buffer.memory") as err:
                for _ in range(100):
                    queued.append(await producer.send(topic, b"z" * 180))
            blocked = time.monotonic() - t0
            assert 0.3 <= blocked < 5, blocked
            assert err.value.code == -1
            assert 1 <= len(queued) <= 6  # what fitted into buffer.memory
            for d in queued:
                with pytest.raises(ProduceError):
                    await asyncio.wait_for(d, 15)
        finally:
            await asyncio.wait_for(producer.close(), 15)

    asyncio.run(run())


def test_a_partition_that_does_not_exist(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("nopart"), 2)

    async def run():
        async with AsyncProducer(shared_broker.bootstrap) as producer:
            with pytest.raises(ProduceError, match="no partition 7") as err:
                await producer.send(topic, b"v", partition=7)
            assert err.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            with pytest.raises(ProduceError, match="max.request.size") as err:
                await producer.send(topic, b"v" * 2_000_000)
            assert err.value.code == ErrorCode.MESSAGE_TOO_LARGE
        async with AsyncConsumer(shared_broker.bootstrap) as consumer:
            with pytest.raises(ConsumeError, match="no partition 7"):
                await consumer.assign([(topic, 0), (topic, 7)])

    asyncio.run(run())
    assert read_all(shared_broker.bootstrap, topic) == []


def test_a_batch_over_message_max_bytes_fails_alone(start_broker):
    b = start_broker(1, overrides={"message.max.bytes": "2000"})
    topic = create_topic(b.bootstrap, "small", 1)

    async def run():
        async with AsyncProducer(b.bootstrap, linger_ms=0) as producer:
            ok1 = await (await producer.send(topic, b"before"))
            with pytest.raises(ProduceError, match="MESSAGE_TOO_LARGE") as err:
                await (await producer.send(topic, b"x" * 5000))
            assert err.value.code == ErrorCode.MESSAGE_TOO_LARGE
            ok2 = await (await producer.send(topic, b"after"))  # the producer carries on
            return ok1.offset, ok2.offset

    assert asyncio.run(run()) == (0, 1)
    assert [r.value for r in read_all(b.bootstrap, topic)] == [b"before", b"after"]


@pytest.mark.parametrize("acks", ["1", "all"])
def test_a_too_large_batch_is_halved_until_only_the_big_records_fail(start_broker, acks):
    b = start_broker(1, overrides={"message.max.bytes": "2000"})
    topic = create_topic(b.bootstrap, unique("halved"), 1)
    values = [b"v%02d" % i + b"." * 60 for i in range(40)]
    big = {13, 29}
    for i in big:
        values[i] = b"x" * 5000

    async def run():
        async with AsyncProducer(b.bootstrap, acks=acks, batch_size=1 << 20, linger_ms=5000) as producer:
            await producer.partitions(topic)
            sent = producer.send_many(topic, values, partition=0)
            await producer.flush()
            outcomes = []
            for d in sent:
                try:
                    outcomes.append((await d).offset)
                except ProduceError as exc:
                    outcomes.append(exc.code)
            return outcomes

    outcomes = asyncio.run(run())
    small = [i for i in range(40) if i not in big]
    assert [outcomes[i] for i in small] == list(range(38))  # in order, no gaps, none twice
    assert [outcomes[i] for i in sorted(big)] == [ErrorCode.MESSAGE_TOO_LARGE] * 2
    assert [r.value for r in read_all(b.bootstrap, topic)] == [values[i] for i in small]
    heads = [h for h, _ in disk_batches(b.log_dir, topic, 0)]
    assert len(heads) <= 12, [h.record_count for h in heads]  # halves of halves, not one batch per record


@pytest.mark.parametrize("settings", [
    {"linger_ms": 2, "batch_size": 2000},
    # one record per request, 100 pipelined: the broker writes a read's appends together before answering
    {"linger_ms": 0, "max_batch_messages": 1, "max_in_flight": 100, "enable_idempotence": False, "acks": 1},
], ids=["batches", "pipelined-single-records"])  # fmt: skip
def test_broker_killed_mid_stream_only_acknowledged_messages_count(start_broker, settings):
    b = start_broker(1)
    topic = create_topic(b.bootstrap, "killed", 1)
    acked: dict[int, bytes] = {}
    failed: list[bytes] = []

    async def run():
        producer = AsyncProducer(b.bootstrap, delivery_timeout_ms=3000, request_timeout_ms=1500, **settings)
        await producer.start()
        pending = []
        try:
            i = 0
            killed_at = None
            while killed_at is None or i < killed_at + 3000:
                value = b"m%07d" % i
                pending.append((value, await producer.send(topic, value)))
                i += 1
                if i % 50 == 0:
                    await asyncio.sleep(0.005)  # let the sender and the answers run
                    if killed_at is None and sum(d.done() for _, d in pending) >= 500:
                        b.kill()
                        killed_at = i
            await asyncio.wait_for(producer.flush(), 20)
        finally:
            await asyncio.wait_for(producer.close(), 20)
        for value, d in pending:
            assert d.done()
            exc = d.exception()
            if exc is None:
                md = d.result()
                assert md.offset not in acked
                acked[md.offset] = value
            else:
                assert isinstance(exc, ProduceError), exc
                failed.append(value)

    asyncio.run(run())
    assert len(acked) >= 500 and failed  # some made it before the kill, the rest were refused
    assert not b.alive
    recs = [r for _, batch in disk_batches(b.log_dir, topic, 0) for r in batch]  # what the killed broker wrote
    log = {r.offset: r.value for r in recs}
    assert [r.offset for r in recs] == list(range(len(recs)))
    for offset, value in acked.items():
        assert log.get(offset) == value  # every acknowledged message is in the log, where it was reported
    assert len(log) >= len(acked)
    values = [r.value for r in recs]
    assert len(set(values)) == len(values)  # no duplicates
    assert values == sorted(values)  # and in the order sent


def test_acks0_sender_survives_its_broker_dying_while_it_waits_for_socket_room(start_broker):
    """acks=0: the broker stops reading (SIGSTOP) until the producer's socket is full and its sender waits
    for room, then dies (SIGKILL) and comes back. The sender carries on: what is sent after the restart
    lands whole and in order (what was in the dead socket is gone, as acks=0 allows)."""
    b = start_broker(1, overrides={"zookeeper.session.timeout.ms": "2000"})  # a quick restart after the kill
    topic = create_topic(b.bootstrap, "acks0-dies", 1)
    after = [b"after-%04d" % i for i in range(300)]

    def restart() -> None:
        zk = zk_client(b.zk_connect)
        try:
            deadline = time.monotonic() + 30
            while zk.exists(zk_paths.broker(1)):  # the killed broker's registration expires first
                assert time.monotonic() < deadline, "the killed broker's registration never expired"
                time.sleep(0.1)
        finally:
            zk.stop()
            zk.close()
        b.start()

    async def run():
        async with AsyncProducer(b.bootstrap, acks=0, linger_ms=1, request_timeout_ms=1500,
                                 delivery_timeout_ms=60_000) as producer:  # fmt: skip
            await (await producer.send(topic, b"first"))
            while not await read_all_async(b.bootstrap, topic):  # in the log before the broker stops reading
                await asyncio.sleep(0.05)
            conn = producer.cluster.open_connection(1)
            assert conn is not None
            os.kill(b.proc.pid, signal.SIGSTOP)
            try:
                value = b"x" * 10_000
                for _ in range(20_000):  # up to 200 MB: far past what loopback socket buffers hold
                    await producer.send(topic, value)
                    if conn._wire.paused and conn._wire.waiters:  # the sender waits for room
                        break
                    await asyncio.sleep(0)
                assert conn._wire.waiters, "the socket never filled"
            finally:
                b.kill()  # SIGKILL ends a stopped process too
            await asyncio.to_thread(restart)
            deliveries = [await producer.send(topic, v) for v in after]
            await asyncio.wait_for(producer.flush(), 30)
            assert all(d.exception() is None for d in deliveries)

    asyncio.run(run())
    values = [r.value for r in read_all(b.bootstrap, topic)]
    assert values[0] == b"first"
    assert [v for v in values if v.startswith(b"after-")] == after
    assert set(values[1:]) <= {b"x" * 10_000, *after}


@pytest.mark.parametrize("stop", ["clean", "killed"])
def test_an_idempotent_retry_after_a_broker_restart_is_still_a_duplicate(start_broker, stop):
    """Idempotence survives the broker's restart: after a clean shutdown through the producer snapshot it
    wrote, after a SIGKILL through the log's last segment. A retry of the last batch is answered with its
    first offset and not stored again; the next sequence is appended; a gap is still out of order."""
    b = start_broker(1, overrides={"zookeeper.session.timeout.ms": "2000"})  # a quick restart after a kill
    topic = create_topic(b.bootstrap, f"idem-{stop}", 1)
    pid = 4242
    batches = [wire.make_batch([b"m%d-%d" % (seq, i) for i in range(3)], producer_id=pid, producer_epoch=0,
                               base_sequence=3 * seq) for seq in range(4)]  # fmt: skip
    with wire.open_conn(b) as c:
        assert [wire.produce_one(c, topic, 0, x)["base_offset"] for x in batches[:3]] == [0, 3, 6]
    if stop == "clean":
        assert b.stop(timeout=20) == 0
        assert any(p.suffix == ".snapshot" for p in (b.log_dir / f"{topic}-0").iterdir())
    else:
        b.kill()
        zk = zk_client(b.zk_connect)
        try:
            deadline = time.monotonic() + 30
            while zk.exists(zk_paths.broker(1)):  # the killed broker's registration expires first
                assert time.monotonic() < deadline
                time.sleep(0.1)
        finally:
            zk.stop()
            zk.close()
    b.start()
    with wire.open_conn(b) as c:
        again = wire.produce_one(c, topic, 0, batches[2])
        assert (again["error_code"], again["base_offset"]) == (0, 6)  # a duplicate: its first offset
        gap = wire.produce_one(c, topic, 0, wire.make_batch([b"gap"], producer_id=pid, producer_epoch=0,
                                                            base_sequence=20))  # fmt: skip
        assert gap["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert wire.produce_one(c, topic, 0, batches[3])["base_offset"] == 9
        assert wire.fetch_values(c, topic, 0) == [b"m%d-%d" % (seq, i) for seq in range(4) for i in range(3)]


# --- the consumer ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def timed_topic(shared_broker):
    """One partition, offsets 0..19 with timestamps ts0 + 1000 * offset, in batches of 1, 3 and 16 records."""
    topic = create_topic(shared_broker.bootstrap, unique("timed"), 1)
    ts0 = now_ms() - 600_000

    async def run():
        async with AsyncProducer(shared_broker.bootstrap, linger_ms=2000) as producer:
            for group in ([0], [1, 2, 3], list(range(4, 20))):
                ds = [await producer.send(topic, b"v%d" % i, b"k%d" % i, partition=0, timestamp=ts0 + 1000 * i)
                      for i in group]  # fmt: skip
                await producer.flush()
                assert [(await d).offset for d in ds] == group

    asyncio.run(run())
    assert [h.record_count for h, _ in disk_batches(shared_broker.log_dir, topic, 0)] == [1, 3, 16]
    return topic, ts0


async def _offsets(consumer: AsyncConsumer, want: int, timeout: float = 10.0) -> list[int]:
    out: list[int] = []
    deadline = time.monotonic() + timeout
    while len(out) < want:
        assert time.monotonic() < deadline, out
        for recs in (await consumer.getmany(timeout_ms=200)).values():
            out.extend(r.offset for r in recs)
    return out


def test_raw_consumer_hands_out_whole_record_sets_from_its_position_and_bounds_its_prefetch(shared_broker):
    """RawConsumer (what spark-load reads with): record sets as fetched, chained offset to next_offset from the
    seek position to the end, that decode to exactly the records from there; max_records counts record sets,
    and prefetching stops at fetch.max.bytes / max.partition.fetch.bytes record sets waiting."""
    topic = create_topic(shared_broker.bootstrap, unique("raw"), 2)
    sent: dict[int, list[bytes]] = {0: [], 1: []}

    async def produce():
        async with AsyncProducer(shared_broker.bootstrap, linger_ms=1000, batch_size=4096) as producer:
            for p in (0, 1):
                for n in (1, 5, 300, 2, 200):  # batches of these sizes (the larger ones split by batch_size)
                    values = [b"p%d-%05d" % (p, len(sent[p]) + i) for i in range(n)]
                    ds = [await producer.send(topic, v, key=b"k", partition=p) for v in values]
                    await producer.flush()
                    assert [(await d).offset for d in ds] == list(range(len(sent[p]), len(sent[p]) + n))
                    sent[p] += values

    async def consume():
        async with RawConsumer(shared_broker.bootstrap, max_partition_fetch_bytes=2048, fetch_max_bytes=6144,
                               fetch_max_wait_ms=50) as c:  # fmt: skip
            await c.assign([(topic, 0), (topic, 1)])
            c.seek((topic, 0), 3)  # inside the second batch
            c.seek((topic, 1), 0)
            sets: dict[int, list] = {0: [], 1: []}
            peak = 0
            deadline = time.monotonic() + 20
            while any(not s or s[-1].next_offset < len(sent[p]) for p, s in sets.items()):
                assert time.monotonic() < deadline, {p: [(x.offset, x.next_offset) for x in s] for p, s in sets.items()}
                await asyncio.sleep(0.02)  # the fetchers run ahead until the buffer is full
                peak = max(peak, c.buffered)
                got = await c.getmany(timeout_ms=200, max_records=2)
                assert sum(len(v) for v in got.values()) <= 2
                for (_, p), rsets in got.items():
                    sets[p] += rsets
            return sets, peak

    asyncio.run(produce())
    sets, peak = asyncio.run(consume())
    assert 1 <= peak <= 6144 // 2048
    for p, start in ((0, 3), (1, 0)):
        assert sets[p][0].offset == start and sets[p][-1].next_offset == len(sent[p])
        assert all(a.next_offset == b.offset for a, b in itertools.pairwise(sets[p]))  # no gap or overlap
        values = [r.value for s in sets[p] for r in decode_records(s.data, topic, p, s.offset)]
        assert values == sent[p][start:]


def test_seek_variants(shared_broker, timed_topic):
    topic, ts0 = timed_topic
    tp = (topic, 0)

    async def run():
        async with AsyncConsumer(shared_broker.bootstrap, fetch_max_wait_ms=100) as c:
            await c.assign([tp])
            assert await c.beginning_offsets([tp]) == {tp: 0}
            assert await c.end_offsets([tp]) == {tp: 20}
            c.seek(tp, 7)  # inside the 16-record batch
            assert await _offsets(c, 13) == list(range(7, 20))
            assert c.position(tp) == 20
            c.seek(tp, 2)  # inside the 3-record batch
            assert (await _offsets(c, 18))[:3] == [2, 3, 4]
            await c.seek_to_beginning()
            assert await _offsets(c, 20) == list(range(20))
            assert c.high_watermarks[tp] == 20
            for ts, first in [(ts0 + 2500, 3), (ts0 + 9000, 9), (0, 0), (ts0 + 19_000, 19)]:
                await c.seek_to_timestamp(ts)
                assert c.position(tp) == first
                assert (await _offsets(c, 20 - first)) == list(range(first, 20))
            await c.seek_to_timestamp(ts0 + 60_000)  # after every record: the end
            assert c.position(tp) == 20
            await c.seek_to_end()
            assert c.position(tp) == 20
            assert await c.getmany(timeout_ms=300) == {}

    asyncio.run(run())


def test_seek_needs_an_assigned_partition(shared_broker, timed_topic):
    topic, _ = timed_topic

    async def run():
        async with AsyncConsumer(shared_broker.bootstrap) as c:
            await c.assign([(topic, 0)])
            with pytest.raises(ConsumeError, match="not assigned"):
                c.seek((topic, 1), 0)

    asyncio.run(run())


def test_seek_to_end_then_only_new_messages(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("tail"), 1)
    asyncio.run(send_all(shared_broker.bootstrap, topic, [dict(key=None, value=b"old", headers=[], partition=0)]))

    async def run():
        async with AsyncConsumer(shared_broker.bootstrap, fetch_max_wait_ms=100) as c:
            await c.assign([(topic, 0)])
            await c.seek_to_end()
            assert await c.getmany(timeout_ms=300) == {}
            async with AsyncProducer(shared_broker.bootstrap) as p:
                await (await p.send(topic, b"new", partition=0))
            got = await c.getmany(timeout_ms=5000)
            assert [(r.offset, r.value) for r in got[(topic, 0)]] == [(1, b"new")]

    asyncio.run(run())


def test_max_poll_records_is_respected(shared_broker, timed_topic):
    topic, _ = timed_topic

    async def run():
        async with AsyncConsumer(shared_broker.bootstrap, max_poll_records=7, fetch_max_wait_ms=100) as c:
            await c.assign([(topic, 0)])
            await c.seek_to_beginning()
            sizes, offsets = [], []
            while len(offsets) < 20:
                got = await c.getmany(timeout_ms=500)
                n = sum(len(v) for v in got.values())
                sizes.append(n)
                offsets.extend(r.offset for v in got.values() for r in v)
            assert max(sizes) == 7
            assert offsets == list(range(20))
            c.seek((topic, 0), 0)
            got = await c.getmany(timeout_ms=2000, max_records=3)
            while not got:
                got = await c.getmany(timeout_ms=2000, max_records=3)
            assert [r.offset for r in got[(topic, 0)]] == [0, 1, 2]

    asyncio.run(run())


def test_position_is_the_next_record_handed_out(shared_broker, timed_topic):
    # As Kafka's consumer: position() is the offset of the next record poll returns, not how far the
    # prefetcher got; so seek(tp, position(tp)) loses nothing.
    topic, _ = timed_topic
    tp = (topic, 0)

    async def run():
        async with AsyncConsumer(shared_broker.bootstrap, fetch_max_wait_ms=100) as c:
            await c.assign([tp])
            c.seek(tp, 0)
            got = await c.getmany(timeout_ms=5000, max_records=3)
            while not got:
                got = await c.getmany(timeout_ms=5000, max_records=3)
            assert [r.offset for r in got[tp]] == [0, 1, 2]
            assert c.position(tp) == 3
            c.seek(tp, c.position(tp))
            assert (await _offsets(c, 17)) == list(range(3, 20))

    asyncio.run(run())


@pytest.mark.parametrize(("reset", "expected"), [("earliest", list(range(20))), ("latest", [])])
def test_auto_offset_reset(shared_broker, timed_topic, reset, expected):
    topic, _ = timed_topic

    async def run():
        async with AsyncConsumer(shared_broker.bootstrap, auto_offset_reset=reset, fetch_max_wait_ms=100) as c:
            await c.assign([(topic, 0)])
            out = []
            for _ in range(4):
                for recs in (await c.getmany(timeout_ms=250)).values():
                    out.extend(r.offset for r in recs)
            return out

    assert asyncio.run(run()) == expected


def test_auto_offset_reset_none_needs_a_seek(shared_broker, timed_topic):
    topic, _ = timed_topic

    async def run():
        async with AsyncConsumer(shared_broker.bootstrap, auto_offset_reset="none") as c:
            await c.assign([(topic, 0)])
            with pytest.raises(ConsumeError, match="seek"):
                await c.getmany(timeout_ms=100)

    asyncio.run(run())


def test_offset_out_of_range_without_reset_pauses_the_partition_until_a_seek(shared_broker, timed_topic):
    topic, _ = timed_topic

    async def run():
        async with AsyncConsumer(shared_broker.bootstrap, auto_offset_reset="none", fetch_max_wait_ms=50) as c:
            await c.assign([(topic, 0)])
            c.seek((topic, 0), 10_000)
            with pytest.raises(ConsumeError, match="OFFSET_OUT_OF_RANGE"):
                await c.getmany(timeout_ms=2000)
            await asyncio.sleep(0.3)
            assert c._errors == []  # the partition is not fetched again (no error storm) until a seek
            c.seek((topic, 0), 5)
            got = []
            while len(got) < 15:
                got += [r.offset for recs in (await c.getmany(timeout_ms=2000)).values() for r in recs]
            return got

    assert asyncio.run(run()) == list(range(5, 20))


def test_a_corrupt_batch_on_disk_fails_only_after_the_good_records_before_it(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("rot"), 1)
    for i in range(3):  # three batches of 4 records
        send = [dict(key=None, value=b"b%d-%d" % (i, j), headers=[], partition=0) for j in range(4)]
        asyncio.run(send_all(shared_broker.bootstrap, topic, send, linger_ms=100))
    heads = [h for h, _ in disk_batches(shared_broker.log_dir, topic, 0)]
    assert [h.base_offset for h in heads] == [0, 4, 8]
    segment = next((shared_broker.log_dir / f"{topic}-0").glob("*.log"))
    data = bytearray(segment.read_bytes())
    data[heads[0].size + heads[1].size - 2] ^= 0xFF  # a value byte of the second batch: its CRC fails
    segment.write_bytes(data)

    async def run():
        async with AsyncConsumer(shared_broker.bootstrap, fetch_max_wait_ms=100) as c:
            await c.assign([(topic, 0)])
            c.seek((topic, 0), 0)
            got = []
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    for recs in (await c.getmany(timeout_ms=500)).values():
                        got += [(r.offset, r.value) for r in recs]
                except ConsumeError as exc:
                    return got, exc, c.position((topic, 0))
            return got, None, None

    got, error, position = asyncio.run(run())
    assert got == [(j, b"b0-%d" % j) for j in range(4)]  # one fetch held all three batches: the good one came out
    assert error is not None and error.code == ErrorCode.CORRUPT_MESSAGE and "offset 4" in str(error)
    assert position == 4


def test_prefetching_is_bounded_by_bytes_not_by_a_record_count(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("prefetch"), 1)
    big = [dict(key=None, value=bytes([i]) * 100_000, headers=[], partition=0) for i in range(30)]
    asyncio.run(send_all(shared_broker.bootstrap, topic, big, batch_size=150_000))

    async def run():
        async with AsyncConsumer(shared_broker.bootstrap, fetch_max_wait_ms=50, fetch_max_bytes=300_000,
                                 max_partition_fetch_bytes=300_000) as c:  # fmt: skip
            await c.assign([(topic, 0)])
            c.seek((topic, 0), 0)
            first = await c.getmany(timeout_ms=5000, max_records=1)
            await asyncio.sleep(1.0)  # the fetcher prefetches while the application works
            waiting = c.buffered
            rest = []
            while len(rest) < 29:
                for recs in (await c.getmany(timeout_ms=2000)).values():
                    rest += recs
            return first[(topic, 0)], waiting, rest

    first, waiting, rest = asyncio.run(run())
    assert [r.value for r in first + rest] == [m["value"] for m in big]
    assert waiting <= 8, waiting  # ~3 MB of 100 kB records is not prefetched against fetch.max.bytes=300 kB


def test_records_carry_everything(shared_broker, timed_topic):
    topic, ts0 = timed_topic
    recs = asyncio.run(read_all_async(shared_broker.bootstrap, topic))
    assert [(r.topic, r.partition, r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs] == [
        (topic, 0, i, ts0 + 1000 * i, b"k%d" % i, b"v%d" % i, ()) for i in range(20)
    ]


def test_no_broker_at_all():
    from broker.daemon import free_port

    async def run():
        with pytest.raises(KafkactlError, match="no bootstrap server answered"):
            await AsyncConsumer(f"127.0.0.1:{free_port()}").start()
        with pytest.raises(KafkactlError, match="no bootstrap server answered"):
            await AsyncProducer(f"127.0.0.1:{free_port()}").start()

    asyncio.run(run())
