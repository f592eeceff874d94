"""Transactions (KIP-98) through each client's producer, as its users call it: init_transactions, a
committed and an aborted transaction, send_offsets_to_transaction in a consume-transform-produce step (the
group's committed offset moves only on commit), a second producer with the same transactional.id fencing
the first, and the transaction timeout aborting an abandoned transaction. What went in is read back with
read_committed consumers (every committed record, none of an aborted one) and read_uncommitted ones (the
aborted records really were in the log)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.structs import OffsetAndMetadata

from broker.protocol.api import ApiKey
from tests.integration.cluster import BrokerProcess, new_chroot
from tests.integration.helpers import connect


@pytest.fixture(scope="module")
def txn_broker(zk_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module, its timeout sweep every 300 ms (Kafka's default: 10 s)."""
    overrides = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "300"}
    with BrokerProcess(1, new_chroot(zk_server.connect_string), tmp_path_factory.mktemp("txn-broker"),
                       overrides=overrides) as b:  # fmt: skip
        yield b


#: what the clients' errors for a fenced producer say (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH)
FENCED = r"(?i)fenced|epoch"


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _read(bootstrap: str, topic: str, isolation: str, partitions: int = 1) -> list[bytes]:
    """Everything a fresh consumer of `isolation` reads from the topic's partitions up to their high watermarks
    (past the markers and aborted records it skips), in order per partition."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "isolation.level": isolation})  # fmt: skip
    tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
    c.assign(tps)
    ends = {tp.partition: c.get_watermark_offsets(tp, timeout=10, cached=False)[1] for tp in tps}
    out: list[bytes] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        out.extend(m.value() for m in c.consume(100, 0.2) if m.error() is None)
        if all(p.offset >= ends[p.partition] for p in c.position(tps)):
            break
    c.close()
    return out


def _committed(bootstrap: str, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=10)
        return tp.offset
    finally:
        c.close()


def _describe(bootstrap: str, txn_id: str) -> dict:
    """DescribeTransactions of `txn_id`, asked of its coordinator."""
    with connect(bootstrap) as conn:
        found = conn.request(ApiKey.FIND_COORDINATOR, {"key": txn_id, "key_type": 1})
        assert found["error_code"] == 0, found
    with connect(f"{found['host']}:{found['port']}") as conn:
        (state,) = conn.request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [txn_id]})["transaction_states"]
    return state


def _seed(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for v in values:
        p.produce(topic, v, partition=0)
    assert p.flush(30) == 0


# --- commit and abort -------------------------------------------------------------------------------


def test_kafka_python_commit_and_abort(txn_broker) -> None:
    bs, topic = txn_broker.bootstrap, _topic("kp-tx")
    p = KafkaProducer(bootstrap_servers=bs, transactional_id=f"kp-{topic}")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(5):
            p.send(topic, value=b"c%d" % i)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(3):
            p.send(topic, value=b"a%d" % i)
        p.flush()  # (in the log before the abort: unsent batches an abort would just drop)
        p.abort_transaction()
        p.begin_transaction()
        p.send(topic, value=b"c5")
        p.commit_transaction()
    finally:
        p.close(timeout=5)
    assert _read(bs, topic, "read_committed") == [b"c0", b"c1", b"c2", b"c3", b"c4", b"c5"]
    assert _read(bs, topic, "read_uncommitted") == [b"c0", b"c1", b"c2", b"c3", b"c4", b"a0", b"a1", b"a2", b"c5"]
    state = _describe(bs, f"kp-{topic}")
    assert state["transaction_state"] == "CompleteCommit" and state["producer_epoch"] == 0


def test_confluent_commit_and_abort(txn_broker) -> None:
    bs, topic = txn_broker.bootstrap, _topic("ck-tx")
    p = Producer({"bootstrap.servers": bs, "transactional.id": f"ck-{topic}", "linger.ms": 5})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(100):
        p.produce(topic, b"c%03d" % i, partition=0)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(50):
        p.produce(topic, b"a%03d" % i, partition=0)
    assert p.flush(30) == 0
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"c100", partition=0)
    p.commit_transaction(30)
    committed = [b"c%03d" % i for i in range(101)]
    assert _read(bs, topic, "read_committed") == committed
    assert _read(bs, topic, "read_uncommitted") == committed[:100] + [b"a%03d" % i for i in range(50)] + [b"c100"]


def test_aiokafka_commit_and_abort(txn_broker) -> None:
    bs, topic = txn_broker.bootstrap, _topic("aio-tx")

    async def go() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=f"aio-{topic}")
        await p.start()
        try:
            async with p.transaction():
                for i in range(10):
                    await p.send(topic, b"c%d" % i, partition=0)
            await p.begin_transaction()
            for i in range(4):
                await (await p.send(topic, b"a%d" % i, partition=0))  # (in the log before the abort)
            await p.abort_transaction()
            async with p.transaction():
                await p.send(topic, b"c10", partition=0)
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(go(), 60))
    committed = [b"c%d" % i for i in range(11)]
    assert _read(bs, topic, "read_committed") == committed
    assert _read(bs, topic, "read_uncommitted") == committed[:10] + [b"a%d" % i for i in range(4)] + [b"c10"]


# --- consume-transform-produce: offsets in the transaction ---------------------------------------------


def test_confluent_send_offsets_moves_the_group_only_on_commit(txn_broker) -> None:
    bs, src, out = txn_broker.bootstrap, _topic("ck-src"), _topic("ck-out")
    group = f"g-{src}"
    _seed(bs, src, [b"in%02d" % i for i in range(20)])
    consumer = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})  # fmt: skip
    consumer.subscribe([src])
    p = Producer({"bootstrap.servers": bs, "transactional.id": f"ctp-{src}"})
    p.init_transactions(30)

    def step(n: int, commit: bool) -> None:
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            got += [m for m in consumer.consume(n - len(got), 0.5) if m.error() is None]
        assert len(got) == n
        p.begin_transaction()
        for m in got:
            p.produce(out, m.value().upper(), partition=0)
        positions = consumer.position(consumer.assignment())
        p.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        if commit:
            p.commit_transaction(30)
        else:
            assert p.flush(30) == 0
            p.abort_transaction(30)
            consumer.seek(TopicPartition(src, 0, got[0].offset()))  # (as a consumer-transform-producer rewinds)

    try:
        step(10, commit=True)
        assert _committed(bs, group, src) == 10
        step(5, commit=False)
        assert _committed(bs, group, src) == 10  # the abort dropped the offsets
        step(10, commit=True)
        assert _committed(bs, group, src) == 20
    finally:
        consumer.close()
    assert _read(bs, out, "read_committed") == [b"IN%02d" % i for i in range(20)]


def test_kafka_python_send_offsets_to_transaction(txn_broker) -> None:
    bs, src, out = txn_broker.bootstrap, _topic("kp-src"), _topic("kp-out")
    group = f"g-{src}"
    _seed(bs, src, [b"x"] * 8)
    p = KafkaProducer(bootstrap_servers=bs, transactional_id=f"kp-ctp-{src}")
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(out, value=b"y", partition=0)
        p.send_offsets_to_transaction({KpTopicPartition(src, 0): OffsetAndMetadata(5, "meta", -1)}, group)
        p.commit_transaction()
        assert _committed(bs, group, src) == 5
        p.begin_transaction()
        p.send(out, value=b"z", partition=0)
        p.send_offsets_to_transaction({KpTopicPartition(src, 0): OffsetAndMetadata(8, "", -1)}, group)
        p.abort_transaction()
        assert _committed(bs, group, src) == 5
    finally:
        p.close(timeout=5)
    c = KafkaConsumer(bootstrap_servers=bs, group_id=group, enable_auto_commit=False)
    try:
        assert c.committed(KpTopicPartition(src, 0), metadata=True).metadata == "meta"
    finally:
        c.close()


# --- fencing and the timeout ------------------------------------------------------------------------


def test_a_second_producer_fences_the_first(txn_broker) -> None:
    bs, topic = txn_broker.bootstrap, _topic("fence")
    txn_id = f"fence-{topic}"
    first = Producer({"bootstrap.servers": bs, "transactional.id": txn_id})
    first.init_transactions(30)
    first.begin_transaction()
    for i in range(5):
        first.produce(topic, b"old%d" % i, partition=0)
    assert first.flush(30) == 0
    second = Producer({"bootstrap.servers": bs, "transactional.id": txn_id})
    second.init_transactions(30)  # aborts the first one's open transaction, and fences it
    second.begin_transaction()
    second.produce(topic, b"new", partition=0)
    second.commit_transaction(30)
    with pytest.raises(KafkaException) as info:
        first.commit_transaction(30)
    assert info.value.args[0].fatal() or "fenced" in str(info.value).lower()
    assert _read(bs, topic, "read_committed") == [b"new"]
    assert _read(bs, topic, "read_uncommitted") == [b"old%d" % i for i in range(5)] + [b"new"]
    state = _describe(bs, txn_id)
    assert state["transaction_state"] == "CompleteCommit" and state["producer_epoch"] == 2  # (abort, then init)


def test_kafka_python_fenced_producer_fails(txn_broker) -> None:
    bs, topic = txn_broker.bootstrap, _topic("kp-fence")
    txn_id = f"kpf-{topic}"
    first = KafkaProducer(bootstrap_servers=bs, transactional_id=txn_id)
    second = KafkaProducer(bootstrap_servers=bs, transactional_id=txn_id)
    try:
        first.init_transactions()
        first.begin_transaction()
        first.send(topic, value=b"old", partition=0)
        first.flush()
        second.init_transactions()
        with pytest.raises(Exception) as info:
            first.commit_transaction()
        assert "Fenced" in repr(info.value) or "InvalidProducerEpoch" in repr(info.value)
    finally:
        first.close(timeout=2)
        second.close(timeout=2)
    assert _read(bs, topic, "read_committed") == []


def _wait_aborted(bs: str, txn_id: str) -> dict:
    deadline = time.monotonic() + 20
    while (state := _describe(bs, txn_id))["transaction_state"] != "CompleteAbort":
        assert time.monotonic() < deadline, state
        time.sleep(0.2)
    return state


def _commit_one(bs: str, topic: str, value: bytes) -> None:
    later = Producer({"bootstrap.servers": bs, "transactional.id": f"later-{topic}"})
    later.init_transactions(30)
    later.begin_transaction()
    later.produce(topic, value, partition=0)
    later.commit_transaction(30)


def test_confluent_transaction_timeout_aborts_an_abandoned_transaction(txn_broker) -> None:
    bs, topic = txn_broker.bootstrap, _topic("timeout")
    txn_id = f"abandoned-{topic}"
    p = Producer({"bootstrap.servers": bs, "transactional.id": txn_id, "transaction.timeout.ms": 1500})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, b"lost%d" % i, partition=0)
    assert p.flush(30) == 0
    assert _wait_aborted(bs, txn_id)["producer_epoch"] == 1  # (raised: the abandoning producer is fenced)
    _commit_one(bs, topic, b"after")
    assert _read(bs, topic, "read_committed") == [b"after"]  # (the abort released the last stable offset)
    with pytest.raises(KafkaException):
        p.commit_transaction(10)


def test_kafka_python_transaction_timeout(txn_broker) -> None:
    bs, topic = txn_broker.bootstrap, _topic("kp-timeout")
    txn_id = f"kp-abandoned-{topic}"
    p = KafkaProducer(bootstrap_servers=bs, transactional_id=txn_id, transaction_timeout_ms=1500)
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, value=b"lost", partition=0)
        p.flush()
        _wait_aborted(bs, txn_id)
        with pytest.raises(Exception, match=FENCED):
            p.commit_transaction()
    finally:
        p.close(timeout=2)
    _commit_one(bs, topic, b"after")
    assert _read(bs, topic, "read_committed") == [b"after"]
    assert _read(bs, topic, "read_uncommitted") == [b"lost", b"after"]


def test_aiokafka_transaction_timeout(txn_broker) -> None:
    bs, topic = txn_broker.bootstrap, _topic("aio-timeout")
    txn_id = f"aio-abandoned-{topic}"

    async def go() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=txn_id, transaction_timeout_ms=1500)
        await p.start()
        try:
            await p.begin_transaction()
            await (await p.send(topic, b"lost", partition=0))
            await asyncio.to_thread(_wait_aborted, bs, txn_id)
            with pytest.raises(Exception, match=FENCED):
                await p.commit_transaction()
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(go(), 60))
    _commit_one(bs, topic, b"after")
    assert _read(bs, topic, "read_committed") == [b"after"]


def test_aiokafka_send_offsets_and_fencing(txn_broker) -> None:
    bs, src, out = txn_broker.bootstrap, _topic("aio-src"), _topic("aio-out")
    group, txn_id = f"g-{src}", f"aio-ctp-{src}"
    _seed(bs, src, [b"x"] * 6)

    async def go() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=txn_id)
        await p.start()
        try:
            async with p.transaction():
                await p.send(out, b"y", partition=0)
                await p.send_offsets_to_transaction({AioTopicPartition(src, 0): 4}, group)
            assert await asyncio.to_thread(_committed, bs, group, src) == 4
            await p.begin_transaction()
            await (await p.send(out, b"z", partition=0))
            await p.send_offsets_to_transaction({AioTopicPartition(src, 0): 6}, group)
            second = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=txn_id)
            await second.start()  # (init: aborts the first one's transaction and fences it)
            try:
                with pytest.raises(Exception, match=FENCED):
                    await p.commit_transaction()
                async with second.transaction():
                    await second.send(out, b"w", partition=0)
            finally:
                await second.stop()
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(go(), 90))
    assert _committed(bs, group, src) == 4  # (the fenced transaction's offsets were dropped)
    assert _read(bs, out, "read_committed") == [b"y", b"w"]
