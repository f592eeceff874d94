"""Log compaction on a real broker (broker/log/cleaner.py): a compacted topic read back as exactly the last
value per key after cleaning — by kafkactl's consumer and by confluent-kafka — with the broker killed with
kill -9 mid-clean and restarted; tombstones kept `delete.retention.ms`, then gone; `compact,delete`
retention; offsets preserved with gaps.

Every record's value names its own offset (one producer, one partition, from offset 0), so a record read
back at another offset would show.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker.client.admin import Admin
from broker.log.checkpoint import OffsetCheckpointFile
from broker.log.cleaner_progress import CHECKPOINT
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.records.builder import BatchBuilder
from broker.spark.ranges import OffsetRange
from broker.spark.read import read_range
from tests.integration.clientkit import create_topic, disk_batches, read_all, unique
from tests.integration.helpers import cli, connect, leaders, metadata, ok, produce_body, wait_until

FAST = {"log.cleaner.backoff.ms": "100", "log.retention.check.interval.ms": "300"}


def send(bootstrap: str, topic: str, pairs: list[tuple[bytes, bytes | None]], per_batch: int = 10_000,
         acks: int = 1) -> None:  # fmt: skip
    """Produce (key, value) pairs to partition 0 in batches of `per_batch`, in order."""
    with connect(bootstrap) as conn:
        for i in range(0, len(pairs), per_batch):
            b = BatchBuilder()
            ts = int(time.time() * 1000)
            for k, v in pairs[i : i + per_batch]:
                b.append(ts, k, v)
            answer = conn.request(ApiKey.PRODUCE, produce_body(topic, 0, b.build(), acks))
            assert answer["topics"][0]["partitions"][0]["error_code"] == 0, answer


def cleaner_checkpoint(log_dir: Path, topic: str) -> int:
    try:
        return OffsetCheckpointFile(log_dir / CHECKPOINT).read().get((topic, 0), -1)
    except Exception:
        return -1


def segment_bases(log_dir: Path, topic: str) -> list[int]:
    return sorted(int(p.name[:20]) for p in (log_dir / f"{topic}-0").glob("*.log"))


def roll_with_sentinel(bootstrap: str, topic: str, segment_ms: int, key: bytes = b"~sentinel", acks: int = 1) -> None:
    """Wait out segment.ms, then append one record: the active segment rolls and everything before is cleanable."""
    time.sleep(segment_ms / 1000 + 0.1)
    send(bootstrap, topic, [(key, b"roll")], acks=acks)


def confluent_read(bootstrap: str, topic: str, end: int) -> list[tuple[int, bytes, bytes | None]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("compaction"), "enable.auto.commit": False})
    out: list[tuple[int, bytes, bytes | None]] = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 60
        while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                assert not m.error(), m.error()
                out.append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return out


@pytest.mark.slow
def test_a_million_updates_over_ten_thousand_keys_compact_to_the_last_values_across_a_kill(start_broker):
    keys, updates = 10_000, 1_000_000
    # (a short ZooKeeper session: the restarted broker waits for the killed one's to expire)
    b = start_broker(1, {**FAST, "log.cleaner.io.max.bytes.per.second": str(8 * 1024 * 1024),
                         "zookeeper.session.timeout.ms": "6000"})  # fmt: skip
    topic = create_topic(b.bootstrap, unique("compacted"), 1, {
        "cleanup.policy": "compact", "segment.bytes": str(1 << 20), "segment.ms": "1000",
        "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "600000",
    })  # fmt: skip
    pairs = [(b"key-%05d" % (i % keys), b"%07d" % i) for i in range(updates)]  # value: its own offset
    send(b.bootstrap, topic, pairs)
    roll_with_sentinel(b.bootstrap, topic, 1000)
    end = updates + 1
    d = b.log_dir / f"{topic}-0"
    # the cleaner is throttled: kill -9 while it writes a cleaned segment of the clean that reaches the end
    wait_until(lambda: cleaner_checkpoint(b.log_dir, topic) < updates
               and any(n.endswith(".cleaned") for n in os.listdir(d)), 60, "a clean under way")  # fmt: skip
    b.kill()
    b.overrides.pop("log.cleaner.io.max.bytes.per.second")
    b.start()
    wait_until(lambda: "(a clean that did not finish)" in b.log_text()
               or "completed the swap of cleaned segment" in b.log_text(), 60,
               "start-up to remove the cut-short clean's files (or finish its swap)")  # fmt: skip
    active = segment_bases(b.log_dir, topic)[-1]
    wait_until(lambda: cleaner_checkpoint(b.log_dir, topic) == active, 60, "the cleaner to resume and finish")
    assert "cleaned log" in b.log_text()
    want = {}
    for i, (k, _) in enumerate(pairs):
        want[k] = i
    want[b"~sentinel"] = updates
    for name, got in (("kafkactl", [(r.offset, r.key, r.value) for r in read_all(b.bootstrap, topic, 60)]),
                      ("confluent-kafka", confluent_read(b.bootstrap, topic, end))):  # fmt: skip
        assert len(got) == keys + 1, (name, len(got))  # no duplicate key left, none lost
        assert {k: o for o, k, _ in got} == want, name  # each key's last value...
        assert all(o == int(v) for o, k, v in got if k != b"~sentinel"), name  # ...at its own offset
    on_disk = [r for _, recs in disk_batches(b.log_dir, topic, 0) for r in recs]
    assert len(on_disk) == keys + 1


def test_offsets_preserved_with_gaps_and_read_across_them(start_broker):
    b = start_broker(1, FAST)
    topic = create_topic(b.bootstrap, unique("gaps"), 1, {
        "cleanup.policy": "compact", "segment.bytes": "4096", "segment.ms": "500", "min.cleanable.dirty.ratio": "0.01",
    })  # fmt: skip
    pairs = [(b"k%d" % (i % 10), b"%d" % i) for i in range(2000)]
    send(b.bootstrap, topic, pairs, per_batch=50)
    roll_with_sentinel(b.bootstrap, topic, 500)
    active = wait_until(lambda: segment_bases(b.log_dir, topic)[-1], 5, "segments")
    wait_until(lambda: cleaner_checkpoint(b.log_dir, topic) == active, 30, "a clean")
    got = read_all(b.bootstrap, topic)
    assert [r.offset for r in got] == [1990 + i for i in range(10)] + [2000]
    assert [int(r.value) for r in got[:-1]] == [r.offset for r in got[:-1]]
    assert confluent_read(b.bootstrap, topic, 2001)[0][0] == 1990  # a librdkafka consumer jumps the gap too
    for start, end, want in (
        (0, 2001, [*range(1990, 2000), 2000]),
        (0, 1995, [*range(1990, 1995)]),
        (100, 200, []),
    ):  # spark-load's reader across the gaps, a range inside one too
        rows = [o for rb in read_range(b.bootstrap, OffsetRange(topic, 0, start, end))
                for o in rb.column("offset").to_pylist()]  # fmt: skip
        assert rows == want, (start, end)
    with connect(b.bootstrap) as conn:  # records without a key: refused, each named, as Kafka refuses them
        bb = BatchBuilder()
        for i in range(5):
            bb.append(int(time.time() * 1000), None if i in (1, 3) else b"k", b"v")
        (p,) = conn.request(ApiKey.PRODUCE, produce_body(topic, 0, bb.build()))["topics"][0]["partitions"]
    assert p["error_code"] == ErrorCode.INVALID_RECORD and "without key" in p["error_message"]
    assert [e["batch_index"] for e in p["record_errors"]] == [1, 3]
    assert all("without key" in e["message"] for e in p["record_errors"])
    line = ok(cli("inspect", "cleaner", b.log_dir))  # the cleaner's progress, read from the files
    assert f"{topic}-0: cleaner checkpoint {active} " in line and "dirty ratio 0.0000" in line


def test_librdkafka_fails_exactly_the_keyless_records_of_a_batch_to_a_compacted_topic(start_broker):
    """100 records in one batch, 10 of them without a key: the broker names each of the 10 (record_errors), so
    librdkafka fails those with INVALID_RECORD and the other 90 with _INVALID_DIFFERENT_RECORD (not theirs: the
    application may send them again), instead of failing all 100 for the first; nothing of the batch is stored."""
    from confluent_kafka import KafkaError, Producer

    b = start_broker(1)
    topic = create_topic(b.bootstrap, unique("keyless"), 1, {"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 200, "batch.num.messages": 1000,
                         "enable.idempotence": False, "retries": 0})  # fmt: skip
    reports: dict[int, int] = {}

    def report(i: int) -> Callable[[Any, Any], None]:
        return lambda err, _msg: reports.__setitem__(i, err.code() if err else 0)

    for i in range(100):
        key = None if i % 10 == 3 else b"k%d" % i
        producer.produce(topic, b"v%d" % i, key, partition=0, on_delivery=report(i))
    producer.flush(30)
    assert len(reports) == 100
    assert {i for i, code in reports.items() if code == KafkaError.INVALID_RECORD} == set(range(3, 100, 10))
    assert {i for i, code in reports.items() if code == KafkaError._INVALID_DIFFERENT_RECORD} == (
        set(range(100)) - set(range(3, 100, 10)))  # fmt: skip
    assert read_all(b.bootstrap, topic) == []


def test_tombstones_are_kept_delete_retention_ms_then_removed(start_broker):
    b = start_broker(1, FAST)
    topic = create_topic(b.bootstrap, unique("tombstones"), 1, {
        "cleanup.policy": "compact", "segment.ms": "400", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "1500", "segment.bytes": "100",
    })  # fmt: skip
    # (a batch a segment: no two cleaned segments merge. The horizon is the last cleaned segment's mtime, as
    # Kafka 2.8's, so a tombstone merged into it would stay until a later cleaned segment is 1.5 s newer)
    send(b.bootstrap, topic, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")])
    send(b.bootstrap, topic, [(b"a", None), (b"b", None)])  # tombstones for a and b
    checkpoints = []
    for round_ in range(1, 5):
        roll_with_sentinel(b.bootstrap, topic, 400, key=b"round-%d" % round_)
        active = segment_bases(b.log_dir, topic)[-1]
        wait_until(lambda a=active: cleaner_checkpoint(b.log_dir, topic) == a, 20, f"clean {round_}")
        live = {r.key: r.value for r in read_all(b.bootstrap, topic)}
        checkpoints.append(live)
        if round_ == 1:  # just cleaned: the tombstones stay (a consumer still sees the deletes)
            assert live[b"a"] is None and live[b"b"] is None and live[b"c"] == b"1"
        time.sleep(0.6)
    last = checkpoints[-1]
    assert b"a" not in last and b"b" not in last and last[b"c"] == b"1"  # past delete.retention.ms: gone


def test_compact_delete_applies_retention_and_compact_alone_does_not(start_broker):
    b = start_broker(1, FAST)
    both = create_topic(b.bootstrap, unique("compact-delete"), 1, {
        "cleanup.policy": "compact,delete", "segment.bytes": "1024", "retention.ms": "1000",
    })  # fmt: skip
    only = create_topic(b.bootstrap, unique("compact-only"), 1, {
        "cleanup.policy": "compact", "segment.bytes": "1024", "retention.ms": "1000",
        "min.cleanable.dirty.ratio": "0.99",
    })  # fmt: skip
    for t in (both, only):
        send(b.bootstrap, t, [(b"k%d" % i, b"v" * 50) for i in range(100)], per_batch=5)
    wait_until(lambda: segment_bases(b.log_dir, both)[0] > 0, 20, "retention of the compact,delete topic")
    time.sleep(1.0)
    assert segment_bases(b.log_dir, only)[0] == 0  # compact alone: retention.ms deletes nothing
    assert len(read_all(b.bootstrap, only)) == 100


@pytest.mark.slow
def test_each_replica_cleans_its_own_copy_and_a_new_leader_serves_the_compacted_log(cluster3):
    """Leader and followers each clean their own copy; once the leader stops, a follower leads with its own."""
    topic = unique("compacted-rf3")
    with Admin(cluster3[0].bootstrap) as admin:
        admin.create_topic(topic, 1, 3, {"cleanup.policy": "compact", "segment.bytes": "4096", "segment.ms": "500",
                                         "min.cleanable.dirty.ratio": "0.01"})  # fmt: skip
    leader_id = wait_until(lambda: leaders(metadata(cluster3[0].bootstrap, [topic]), topic).get(0, -1) + 1, 15,
                           "a leader") - 1  # fmt: skip
    leader = next(b for b in cluster3 if b.broker_id == leader_id)
    pairs = [(b"k%02d" % (i % 20), b"%d" % i) for i in range(3000)]
    send(leader.bootstrap, topic, pairs, per_batch=50, acks=-1)
    roll_with_sentinel(leader.bootstrap, topic, 500, acks=-1)
    for b in cluster3:  # each broker cleans its own copy, leader and followers alike
        wait_until(lambda b=b: cleaner_checkpoint(b.log_dir, topic) == segment_bases(b.log_dir, topic)[-1]
                   and segment_bases(b.log_dir, topic)[-1] > 0, 30, f"broker {b.broker_id}'s clean")  # fmt: skip
        on_disk = [r for _, recs in disk_batches(b.log_dir, topic, 0) for r in recs]
        assert sorted(r.key for r in on_disk) == sorted({r.key for r in on_disk}), b.broker_id
        assert {r.key: int(r.value) for r in on_disk if r.key != b"~sentinel"} == {
            b"k%02d" % k: 2980 + k for k in range(20)}, b.broker_id  # fmt: skip
    leader.stop()  # (a controlled shutdown: leadership moves at once)
    survivor = next(b for b in cluster3 if b is not leader)
    wait_until(lambda: leaders(metadata(survivor.bootstrap, [topic]), topic).get(0, -1) not in (-1, leader_id), 30,
               "a new leader")  # fmt: skip
    got = read_all(survivor.bootstrap, topic, 30)
    assert [(r.offset, r.key) for r in got[:-1]] == [(2980 + k, b"k%02d" % k) for k in range(20)]
    assert got[-1].key == b"~sentinel"


def test_an_idempotent_producers_emptied_last_batch_is_read_past(start_broker):
    from confluent_kafka import Producer

    b = start_broker(1, FAST)
    topic = create_topic(b.bootstrap, unique("idempotent"), 1, {
        "cleanup.policy": "compact", "segment.bytes": "2048", "segment.ms": "500", "min.cleanable.dirty.ratio": "0.01",
    })  # fmt: skip
    p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(200):
        p.produce(topic, key=b"k%d" % (i % 5), value=b"idem-%d" % i, partition=0)
    assert p.flush(15) == 0
    send(b.bootstrap, topic, [(b"k%d" % i, b"plain") for i in range(5)])  # every key overwritten
    roll_with_sentinel(b.bootstrap, topic, 500)
    active = segment_bases(b.log_dir, topic)[-1]
    wait_until(lambda: cleaner_checkpoint(b.log_dir, topic) == active, 30, "a clean")
    heads = [h for h, _ in disk_batches(b.log_dir, topic, 0)]
    assert any(h.producer_id >= 0 and h.record_count == 0 for h in heads)  # the producer's last batch, emptied
    ours = [(r.key, r.value) for r in read_all(b.bootstrap, topic)]
    theirs = [(k, v) for _, k, v in confluent_read(b.bootstrap, topic, 206)]
    for name, got in (("kafkactl", ours), ("confluent-kafka", theirs)):
        assert got == [(b"k%d" % i, b"plain") for i in range(5)] + [(b"~sentinel", b"roll")], name
    p.produce(topic, key=b"k0", value=b"after", partition=0)  # its sequence goes on from the emptied batch
    assert p.flush(15) == 0


def test_a_producer_writing_on_leaves_one_empty_batch_and_librdkafka_never_grows_its_fetch_size(start_broker):
    """An idempotent producer writes again after every clean: Kafka keeps one empty batch of it, its last, and so
    does kafkactl now (it left one at each clean, and a fetch answer of empties alone makes librdkafka double
    its fetch size for good: `Increasing max fetch bytes`, up to 1 GiB and then an error)."""
    import logging

    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    b = start_broker(1, FAST)
    topic = create_topic(b.bootstrap, unique("rounds"), 1, {
        "cleanup.policy": "compact", "segment.ms": "500", "min.cleanable.dirty.ratio": "0.01",
    })  # fmt: skip
    p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for r in range(6):
        for i in range(5):
            p.produce(topic, key=b"k%d" % i, value=b"idem-%d" % r, partition=0)
        assert p.flush(15) == 0
        send(b.bootstrap, topic, [(b"k%d" % i, b"plain") for i in range(5)])  # every key overwritten
        roll_with_sentinel(b.bootstrap, topic, 500)
        active = segment_bases(b.log_dir, topic)[-1]
        wait_until(lambda a=active: cleaner_checkpoint(b.log_dir, topic) == a, 30, f"clean {r}")
    empties = [h.base_offset for h, _ in disk_batches(b.log_dir, topic, 0) if h.producer_id >= 0]
    assert len(empties) == 1, empties  # the producer's last batch alone, emptied

    lines: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger(unique("rdkafka"))
    logger.addHandler(Capture())
    logger.setLevel(logging.DEBUG)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": unique("g"), "enable.auto.commit": False,
                  "debug": "fetch", "fetch.message.max.bytes": 256, "logger": logger})  # fmt: skip
    got = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while (not got or got[-1] != (b"~sentinel", b"roll")) and time.monotonic() < deadline:  # (the log's last)
            for m in c.consume(100, 0.5):
                assert not m.error(), m.error()
                got.append((m.key(), m.value()))
    finally:
        c.close()
    assert got[-6:] == [(b"k%d" % i, b"plain") for i in range(5)] + [(b"~sentinel", b"roll")]
    assert not [x for x in lines if "Increasing max fetch bytes" in x], [x for x in lines if "Increasing" in x][:3]
    p.produce(topic, key=b"k0", value=b"after", partition=0)  # its sequence goes on from the emptied batch
    assert p.flush(15) == 0


def test_deleting_a_topic_mid_clean_drops_the_clean(start_broker):
    b = start_broker(1, {**FAST, "log.cleaner.io.max.bytes.per.second": str(1 << 20)})
    topic = create_topic(b.bootstrap, unique("doomed"), 1, {
        "cleanup.policy": "compact", "segment.bytes": str(256 << 10), "segment.ms": "500",
        "min.cleanable.dirty.ratio": "0.01",
    })  # fmt: skip
    send(b.bootstrap, topic, [(b"k%03d" % (i % 500), b"v" * 100) for i in range(30_000)], per_batch=1000)
    roll_with_sentinel(b.bootstrap, topic, 500)
    d = b.log_dir / f"{topic}-0"
    wait_until(lambda: any(n.endswith(".cleaned") for n in os.listdir(d)), 30, "a clean under way")
    t0 = time.monotonic()
    ok(cli("topic", "delete", topic, "--execute", "-b", b.bootstrap))
    wait_until(lambda: not d.exists(), 20, "the partition dir to go")
    assert time.monotonic() - t0 < 10
    assert not [p for p in b.log_dir.iterdir() if p.name.startswith(topic)]  # nothing of it left behind
    other = create_topic(b.bootstrap, unique("after"), 1)  # the broker goes on serving
    send(b.bootstrap, other, [(b"k", b"v")])
    assert b.alive and "Traceback" not in b.log_text()
