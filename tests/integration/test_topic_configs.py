"""Kafka 2.8's topic-level configuration keys against one real broker and the real ZooKeeper: every key
accepted and checked by CreateTopics and AlterConfigs (confluent-kafka, kafka-python), DescribeConfigs
with sources, and the keys that change what the broker stores honoured:

- `compression.type`: a zstd topic receives uncompressed and lz4 batches (kafka-python, confluent-kafka,
  kcat) and its segment files hold zstd batches (read through broker/log's parser and `kafkactl inspect
  segments`), while consumers read back every key, value, header and offset; an idempotent producer's
  recompressed batches keep its id, epoch and sequences, and a retry is still answered as a duplicate; a
  change through IncrementalAlterConfigs applies to the next batch; followers copy the leader's batches.
- `message.timestamp.difference.max.ms`: a CreateTime record too far from the broker's clock refuses its
  partition's batch with INVALID_TIMESTAMP (32), nothing appended.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import Producer as CKProducer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic
from kafka import KafkaProducer

from broker.client.admin import Admin
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.records.batch import Record, build_batch
from broker.records.compression import Codec
from tests.integration.clientkit import create_topic, disk_batches, read_all, unique
from tests.integration.cluster import BrokerProcess, new_chroot
from tests.integration.helpers import cli, error_line, kcat_produce, ok
from tests.integration.wire import latest_offset, open_conn, produce
from tests.unit.server.test_config import KAFKA_2_8_TOPIC_KEYS


@pytest.fixture(scope="module")
def b(zk_server, tmp_path_factory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("topic-configs")
    with BrokerProcess(1, new_chroot(zk_server.connect_string), root,
                       overrides={"log.cleaner.delete.retention.ms": "3600000"}) as broker:  # fmt: skip
        yield broker


def _admin(b: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap})


def _described(b: BrokerProcess, topic: str) -> dict[str, tuple[str, ConfigSource]]:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = _admin(b)  # (kept until the answer: a dropped client cancels its requests)
    entries = admin.describe_configs([res])[res].result(timeout=20)
    return {k: (e.value, ConfigSource(e.source)) for k, e in entries.items()}


def _alter_configs(conn, topic: str, config: dict[str, str]) -> tuple[int, str | None]:
    body = {"resources": [{"resource_type": 2, "resource_name": topic,
                           "configs": [{"name": k, "value": v} for k, v in config.items()]}],
            "validate_only": False}  # fmt: skip
    [res] = conn.request(ApiKey.ALTER_CONFIGS, body)["responses"]
    return res["error_code"], res["error_message"]


# --- every key: accepted, checked, described ------------------------------------------------------


def test_confluent_create_topics_takes_every_2_8_key_and_describes_them_with_sources(b):
    admin = _admin(b)
    t = unique("every-key")
    config = {k: good for k, (good, _, _) in KAFKA_2_8_TOPIC_KEYS.items()}
    admin.create_topics([NewTopic(t, 1, 1, config=config)])[t].result(timeout=20)
    got = _described(b, t)
    assert set(got) == set(KAFKA_2_8_TOPIC_KEYS)
    for key, good in config.items():
        assert got[key] == (good, ConfigSource.DYNAMIC_TOPIC_CONFIG), key

    plain = create_topic(b.bootstrap, unique("plain"))
    got = _described(b, plain)
    assert got["compression.type"] == ("producer", ConfigSource.DEFAULT_CONFIG)
    assert got["message.format.version"] == ("2.8-IV1", ConfigSource.DEFAULT_CONFIG)
    assert got["min.cleanable.dirty.ratio"] == ("0.5", ConfigSource.DEFAULT_CONFIG)
    assert got["message.downconversion.enable"] == ("true", ConfigSource.DEFAULT_CONFIG)
    # a default the broker's config sets: STATIC_BROKER_CONFIG, as Kafka
    assert got["delete.retention.ms"] == ("3600000", ConfigSource.STATIC_BROKER_CONFIG)


@pytest.mark.parametrize("key", sorted(KAFKA_2_8_TOPIC_KEYS))
def test_a_bad_value_of_each_key_is_refused_with_one_clear_message(b, key):
    _, bad, why = KAFKA_2_8_TOPIC_KEYS[key]
    t = unique("bad")
    admin = _admin(b)
    fut = admin.create_topics([NewTopic(t, 1, 1, config={key: bad})])[t]
    with pytest.raises(KafkaException) as info:
        fut.result(timeout=20)
    err = info.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG, err
    assert key in err.str() and why in err.str() and "\n" not in err.str(), err.str()
    assert t not in admin.list_topics(timeout=10).topics

    # AlterConfigs (the whole set replaced): refused, the topic's overrides as they were; the good value taken
    good_topic = create_topic(b.bootstrap, unique("alter"), config={"retention.ms": "1000"})
    with open_conn(b) as conn:
        code, message = _alter_configs(conn, good_topic, {key: bad})
        assert code == ErrorCode.INVALID_CONFIG and key in message and why in message, (code, message)
        assert _described(b, good_topic)["retention.ms"] == ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        assert _alter_configs(conn, good_topic, {key: KAFKA_2_8_TOPIC_KEYS[key][0]}) == (0, None)
    got = _described(b, good_topic)
    assert got[key] == (KAFKA_2_8_TOPIC_KEYS[key][0], ConfigSource.DYNAMIC_TOPIC_CONFIG)
    if key != "retention.ms":
        assert got["retention.ms"][1] == ConfigSource.DEFAULT_CONFIG  # (AlterConfigs replaces the whole set)


def test_kafkactl_topic_create_with_compression_type(b):
    t = unique("cli-gzip")
    ok(cli("topic", "create", t, "--config", "compression.type=gzip", "--config", "message.format.version=2.8",
           "-b", b.bootstrap))  # fmt: skip
    got = _described(b, t)
    assert got["compression.type"] == ("gzip", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert got["message.format.version"] == ("2.8", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    error_line(cli("topic", "create", unique("cli-bad"), "--config", "compression.type=brotli", "-b", b.bootstrap),
               "compression.type", "String must be one of")  # fmt: skip


# --- compression.type: recompression at the leader ------------------------------------------------


def _headers(h) -> list[tuple[str, bytes]]:
    return [(k, bytes(v) if v is not None else None) for k, v in (h or [])]


def test_zstd_topic_stores_zstd_whatever_the_producers_send(b, tmp_path):
    t = create_topic(b.bootstrap, unique("zstd"), config={"compression.type": "zstd"})
    sent: list[tuple[bytes | None, bytes, list]] = []
    for codec in (None, "lz4", "gzip"):  # kafka-python: uncompressed, lz4, gzip batches
        p = KafkaProducer(bootstrap_servers=b.bootstrap, compression_type=codec, linger_ms=5)
        for i in range(50):
            key, value, headers = f"k{i}".encode() if i % 2 else None, f"{codec}-{i}".encode() * 3, [("n", b"%d" % i)]
            p.send(t, key=key, value=value, headers=headers)
            sent.append((key, value, headers))
        p.flush()
        p.close()
    ck = CKProducer({"bootstrap.servers": b.bootstrap, "compression.type": "lz4", "linger.ms": 5})  # librdkafka
    for i in range(50):
        ck.produce(t, key=b"ck%d" % i, value=b"confluent-%d" % i, headers=[("h", b"x"), ("empty", None)])
        sent.append((b"ck%d" % i, b"confluent-%d" % i, [("h", b"x"), ("empty", None)]))
    assert ck.flush(20) == 0
    kcat_produce(b.bootstrap, t, 0, [f"kcat-{i}" for i in range(20)])
    sent += [(None, f"kcat-{i}".encode(), []) for i in range(20)]

    batches = disk_batches(b.log_dir, t, 0)
    assert batches and {h.codec for h, _ in batches} == {int(Codec.ZSTD)}
    stored = [r for _, recs in batches for r in recs]
    assert [r.offset for r in stored] == list(range(len(sent)))

    got = read_all(b.bootstrap, t)  # kafkactl's consumer
    assert [(r.key, r.value, [(k, v) for k, v in r.headers]) for r in got] == [(k, v, h) for k, v, h in sent]
    assert [r.offset for r in got] == list(range(len(sent)))

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": unique("g"), "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})  # fmt: skip
    c.subscribe([t])
    seen = []
    deadline = time.monotonic() + 30
    while len(seen) < len(sent) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            seen.append((m.offset(), m.key(), m.value(), _headers(m.headers())))
    c.close()
    assert seen == [(i, k, v, h) for i, (k, v, h) in enumerate(sent)]

    out = ok(cli("inspect", "segments", "-o", "json", str(b.log_dir / f"{t}-0")))
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    codecs = {r["codec"] for r in rows if "codec" in r}
    assert codecs == {"zstd"}, out[:2000]


def test_uncompressed_topic_decompresses_and_producer_topic_keeps_the_codec(b):
    plain = create_topic(b.bootstrap, unique("uncompressed"), config={"compression.type": "uncompressed"})
    as_sent = create_topic(b.bootstrap, unique("producer"))
    for t in (plain, as_sent):
        p = KafkaProducer(bootstrap_servers=b.bootstrap, compression_type="gzip", linger_ms=5)
        for i in range(30):
            p.send(t, value=b"v%d" % i)
        p.flush()
        p.close()
    assert {h.codec for h, _ in disk_batches(b.log_dir, plain, 0)} == {int(Codec.NONE)}
    assert {h.codec for h, _ in disk_batches(b.log_dir, as_sent, 0)} == {int(Codec.GZIP)}
    assert [r.value for r in read_all(b.bootstrap, plain)] == [b"v%d" % i for i in range(30)]


def test_idempotent_batches_recompressed_keep_producer_id_and_sequences(b):
    t = create_topic(b.bootstrap, unique("idem-zstd"), config={"compression.type": "zstd"})
    with open_conn(b) as conn:
        init = conn.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 60000})
        pid, epoch = init["producer_id"], init["producer_epoch"]
        now = int(time.time() * 1000)
        first = build_batch([Record(i, now + i, b"k", b"a%d" % i, (("h", b"1"),)) for i in range(5)],
                            codec=Codec.GZIP, producer_id=pid, producer_epoch=epoch, base_sequence=0)  # fmt: skip
        second = build_batch([Record(i, now, None, b"b%d" % i) for i in range(3)], producer_id=pid,
                             producer_epoch=epoch, base_sequence=5)  # fmt: skip
        assert produce(conn, t, {0: first})[0]["base_offset"] == 0
        assert produce(conn, t, {0: second})[0]["base_offset"] == 5
        retry = produce(conn, t, {0: second})[0]  # a retry: its duplicate is known by its sequences
        assert (retry["error_code"], retry["base_offset"]) == (0, 5)
        assert latest_offset(conn, t, 0) == 8
    batches = disk_batches(b.log_dir, t, 0)
    assert [(h.codec, h.producer_id, h.producer_epoch, h.base_sequence, h.record_count) for h, _ in batches] == [
        (int(Codec.ZSTD), pid, epoch, 0, 5), (int(Codec.ZSTD), pid, epoch, 5, 3)]  # fmt: skip
    assert [(r.timestamp, r.key, r.value, r.headers) for r in batches[0][1]] == [
        (now + i, b"k", b"a%d" % i, (("h", b"1"),)) for i in range(5)]  # fmt: skip

    # a real idempotent producer (librdkafka) with its own codec: delivered once each, stored as zstd
    ck = CKProducer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "compression.type": "gzip"})
    for i in range(100):
        ck.produce(t, value=b"c%d" % i)
    assert ck.flush(20) == 0
    batches = disk_batches(b.log_dir, t, 0)[2:]
    assert {h.codec for h, _ in batches} == {int(Codec.ZSTD)} and all(h.producer_id >= 0 for h, _ in batches)
    assert sum(h.record_count for h, _ in batches) == 100


# --- message.timestamp.difference.max.ms ----------------------------------------------------------


def test_timestamps_too_far_from_the_clock_are_refused(b):
    t = create_topic(b.bootstrap, unique("ts-window"), config={"message.timestamp.difference.max.ms": "60000"})
    now = int(time.time() * 1000)
    with open_conn(b) as conn:
        old = build_batch([Record(0, now, None, b"ok"), Record(1, now - 3_600_000, None, b"old")])
        p = produce(conn, t, {0: old}, version=8)[0]
        assert p["error_code"] == ErrorCode.INVALID_TIMESTAMP == 32
        assert "is out of range" in p["error_message"]
        assert [e["batch_index"] for e in p["record_errors"]] == [1]
        future = build_batch([Record(0, now + 3_600_000, None, b"future")], codec=Codec.SNAPPY)
        assert produce(conn, t, {0: future}, version=3)[0]["error_code"] == ErrorCode.INVALID_TIMESTAMP
        assert latest_offset(conn, t, 0) == 0  # nothing appended
        fine = build_batch([Record(0, now, None, b"fine"), Record(1, -1, None, b"no timestamp")])
        assert produce(conn, t, {0: fine})[0]["error_code"] == 0
        assert latest_offset(conn, t, 0) == 2

    ck = CKProducer({"bootstrap.servers": b.bootstrap, "retries": 0})
    errors: list[KafkaError] = []
    ck.produce(t, value=b"stale", timestamp=now - 3_600_000, on_delivery=lambda err, msg: errors.append(err))
    assert ck.flush(20) == 0
    assert errors and errors[0].code() == KafkaError.INVALID_TIMESTAMP, errors

    # LogAppendTime topics stamp the broker's clock: the window does not apply (Kafka checks CreateTime only)
    lat = create_topic(b.bootstrap, unique("ts-lat"), config={"message.timestamp.difference.max.ms": "1000",
                                                              "message.timestamp.type": "LogAppendTime"})  # fmt: skip
    with open_conn(b) as conn:
        old = build_batch([Record(0, now - 3_600_000, None, b"old")])
        assert produce(conn, lat, {0: old})[0]["error_code"] == 0


# --- keys changed on a live topic, and the ones honoured already -----------------------------------


def test_compression_type_changed_live_applies_to_the_next_batches(b):
    t = create_topic(b.bootstrap, unique("live"))
    with open_conn(b) as conn:
        now = int(time.time() * 1000)
        assert produce(conn, t, {0: build_batch([Record(0, now, None, b"before")])})[0]["error_code"] == 0
        admin = _admin(b)
        res = ConfigResource(ConfigResource.Type.TOPIC, t, incremental_configs=[
            ConfigEntry("compression.type", "gzip", incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
        for f in admin.incremental_alter_configs([res]).values():
            f.result(timeout=20)
        assert produce(conn, t, {0: build_batch([Record(0, now, None, b"after")])})[0]["error_code"] == 0
    assert [h.codec for h, _ in disk_batches(b.log_dir, t, 0)] == [int(Codec.NONE), int(Codec.GZIP)]


def test_log_append_time_and_max_message_bytes_with_recompression(b):
    config = {"compression.type": "zstd", "message.timestamp.type": "LogAppendTime", "max.message.bytes": "2000"}
    t = create_topic(b.bootstrap, unique("lat-zstd"), config=config)
    with open_conn(b) as conn:
        before = int(time.time() * 1000)
        p = produce(conn, t, {0: build_batch([Record(i, 1000 + i, None, b"x" * 100) for i in range(5)])})[0]
        assert p["error_code"] == 0 and p["log_append_time_ms"] >= before
        # 3000 bytes of random data: over max.message.bytes compressed or not
        big = build_batch([Record(0, before, None, os.urandom(3000))], codec=Codec.LZ4)
        assert produce(conn, t, {0: big})[0]["error_code"] == ErrorCode.MESSAGE_TOO_LARGE
    [(h, recs)] = disk_batches(b.log_dir, t, 0)
    assert h.codec == int(Codec.ZSTD) and h.timestamp_type == 1 and h.max_timestamp == p["log_append_time_ms"]
    assert [r.value for r in recs] == [b"x" * 100] * 5


def test_followers_copy_the_recompressed_batches(cluster3):
    first = cluster3[0]
    t = unique("rf3-zstd")
    with Admin(first.bootstrap) as admin:
        admin.create_topic(t, 1, 3, {"compression.type": "zstd", "min.insync.replicas": "3"})
    p = KafkaProducer(bootstrap_servers=first.bootstrap, acks="all", compression_type="gzip", linger_ms=5)
    for i in range(200):
        p.send(t, key=b"%d" % (i % 7), value=b"value-%d" % i)
    p.flush(timeout=30)
    p.close()
    deadline = time.monotonic() + 20
    while True:  # acks=all answered: the ISR holds them; wait for the files (a follower may append a bit later)
        copies = [disk_batches(x.log_dir, t, 0) for x in cluster3]
        if all(sum(h.record_count for h, _ in c) == 200 for c in copies) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    leader_copy = copies[0]
    assert {h.codec for h, _ in leader_copy} == {int(Codec.ZSTD)}
    for c in copies:  # byte-identical batches: the same headers (CRC included) and records everywhere
        assert [(h, recs) for h, recs in c] == [(h, recs) for h, recs in leader_copy]
    assert [r.value for r in read_all(first.bootstrap, t)] == [b"value-%d" % i for i in range(200)]


def test_describe_configs_synonyms_and_types_as_kafka(b):
    t = create_topic(b.bootstrap, unique("synonyms"), config={"retention.ms": "1000"})
    body = {"resources": [{"resource_type": 2, "resource_name": t, "configuration_keys": None}],
            "include_synonyms": True, "include_documentation": False}  # fmt: skip
    with open_conn(b) as conn:
        [res] = conn.request(ApiKey.DESCRIBE_CONFIGS, body)["results"]
    entries = {c["name"]: c for c in res["configs"]}

    def synonyms(key: str) -> list[tuple[str, str, int]]:
        return [(s["name"], s["value"], s["source"]) for s in entries[key]["synonyms"]]

    assert synonyms("retention.ms") == [("retention.ms", "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
                                        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG.value)]  # fmt: skip
    assert synonyms("delete.retention.ms") == [
        ("log.cleaner.delete.retention.ms", "3600000", ConfigSource.STATIC_BROKER_CONFIG.value),
        ("log.cleaner.delete.retention.ms", "86400000", ConfigSource.DEFAULT_CONFIG.value)]  # fmt: skip
    assert synonyms("compression.type") == [("compression.type", "producer", ConfigSource.DEFAULT_CONFIG.value)]
    assert synonyms("leader.replication.throttled.replicas") == []
    # Kafka's ConfigEntry types: BOOLEAN 1, STRING 2, INT 3, LONG 5, DOUBLE 6, LIST 7
    types = {
        k: entries[k]["config_type"]
        for k in (
            "preallocate",
            "compression.type",
            "segment.bytes",
            "retention.ms",
            "min.cleanable.dirty.ratio",
            "cleanup.policy",
        )
    }
    assert types == {"preallocate": 1, "compression.type": 2, "segment.bytes": 3, "retention.ms": 5,
                     "min.cleanable.dirty.ratio": 6, "cleanup.policy": 7}  # fmt: skip

    # confluent-kafka shows them too (by name: one per broker key)
    resource = ConfigResource(ConfigResource.Type.TOPIC, t)
    admin = _admin(b)
    got = admin.describe_configs([resource])[resource].result(timeout=20)
    assert list(got["retention.ms"].synonyms) == ["retention.ms", "log.retention.hours"]
