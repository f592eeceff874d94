"""DeleteGroups (42) and OffsetDelete (47) against one real broker and the real ZooKeeper: through
confluent-kafka's AdminClient (delete_consumer_groups), kafka-python's KafkaAdminClient (delete_groups,
delete_group_offsets), raw requests, and `kafkactl group delete | delete-offsets`.

An Empty group (committed offsets, no members) is deleted: its offsets are gone from OffsetFetch and its
`/consumers/<g>` node from ZooKeeper; a group with a live member is refused NON_EMPTY_GROUP and keeps its
offsets; an unknown group is GROUP_ID_NOT_FOUND. OffsetDelete refuses the topics a live member subscribes to
(GROUP_SUBSCRIBED_TO_TOPIC) and deletes the others. Members are kafka-python KafkaConsumers; offsets of topics
nobody subscribes to are committed the simple way (OffsetCommit without membership).
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from broker.client.sync import Producer
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.zk import consumers
from tests.integration.clientkit import create_topic, kafka_python_knows, unique
from tests.integration.cluster import BrokerProcess, new_chroot
from tests.integration.helpers import cli, error_line, json_lines, ok, tsv, zk_session
from tests.integration.wire import open_conn

OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}


@pytest.fixture(scope="module")
def b(zk_server, tmp_path_factory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("group-deletion-broker")
    with BrokerProcess(1, new_chroot(zk_server.connect_string), root, overrides=OVERRIDES) as broker:
        yield broker


# --- helpers ---------------------------------------------------------------------------------------


def produce(b: BrokerProcess, topic: str, partitions: int, n: int) -> None:
    with Producer(b.bootstrap, linger_ms=2) as producer:
        futures = [producer.send(topic, f"{topic}/{i}".encode(), partition=i % partitions) for i in range(n)]
        for f in futures:
            f.result(timeout=30)


@contextlib.contextmanager
def member(b: BrokerProcess, topic: str, g: str) -> Iterator[KafkaConsumer]:
    """A kafka-python member of `g` subscribed to `topic`, its assignment received; it leaves at the end."""
    c = KafkaConsumer(topic, bootstrap_servers=b.bootstrap, group_id=g, enable_auto_commit=False,
                      auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500)  # fmt: skip
    try:
        kafka_python_knows(c, topic)
        deadline = time.monotonic() + 30
        while not c.assignment():
            assert time.monotonic() < deadline, "no assignment"
            c.poll(timeout_ms=200)
        yield c
    finally:
        c.close(autocommit=False)


def commit_as(b: BrokerProcess, g: str, offsets: dict[tuple[str, int], int]) -> None:
    """A simple commit (no membership), as a group that ran and stopped leaves them: the group is Empty."""
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=g, enable_auto_commit=False)
    try:
        c.commit({TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()})
    finally:
        c.close(autocommit=False)


def zk_offsets(b: BrokerProcess, g: str) -> dict[tuple[str, int], int]:
    with zk_session(b.zk_connect) as zk:
        return {tp: c.offset for tp, c in consumers.committed(zk, g).items()}


def group_node(b: BrokerProcess, g: str) -> bool:
    with zk_session(b.zk_connect) as zk:
        return zk.exists(f"/consumers/{g}") is not None


def offset_fetch(b: BrokerProcess, g: str) -> dict[tuple[str, int], int]:
    """Every committed offset OffsetFetch answers for the group (all topics)."""
    with open_conn(b) as conn:
        answer = conn.request(ApiKey.OFFSET_FETCH, {"group_id": g, "topics": None})
    assert answer["error_code"] == 0, answer
    return {(t["name"], p["partition_index"]): p["committed_offset"]
            for t in answer["topics"] for p in t["partitions"] if p["committed_offset"] >= 0}  # fmt: skip


def offset_delete(b: BrokerProcess, g: str, tps: list[tuple[str, int]]) -> dict:
    topics: dict[str, list[dict[str, int]]] = {}
    for t, p in tps:
        topics.setdefault(t, []).append({"partition_index": p})
    body = {"group_id": g, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
    with open_conn(b) as conn:
        return conn.request(ApiKey.OFFSET_DELETE, body)


def group(b: BrokerProcess, *args: object) -> subprocess.CompletedProcess:
    return cli("group", *args, "-b", b.bootstrap, "-z", b.zk_connect)


def empty_and_live_groups(b: BrokerProcess, tag: str) -> tuple[str, str, str]:
    """A topic of 2 partitions with messages, an Empty group with commits, a group with a live member (yielded
    by the caller's `member`)."""
    t = create_topic(b.bootstrap, unique(f"{tag}t"), 2)
    produce(b, t, 2, 10)
    empty = unique(f"{tag}-empty")
    commit_as(b, empty, {(t, 0): 3, (t, 1): 4})
    assert zk_offsets(b, empty) == {(t, 0): 3, (t, 1): 4}
    return t, empty, unique(f"{tag}-live")


# --- DeleteGroups ----------------------------------------------------------------------------------


def test_confluent_kafka_delete_consumer_groups(b):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    t, empty, live = empty_and_live_groups(b, "cf")
    unknown = unique("cf-unknown")
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    with member(b, t, live) as c:
        c.commit({TopicPartition(t, 0): OffsetAndMetadata(2, "", -1)})
        futures = admin.delete_consumer_groups([empty, live, unknown], request_timeout=30)
        assert futures[empty].result(30) is None
        codes = {}
        for g in (live, unknown):
            with pytest.raises(KafkaException) as info:
                futures[g].result(30)
            codes[g] = info.value.args[0].code()
        assert codes == {live: KafkaError.NON_EMPTY_GROUP, unknown: KafkaError.GROUP_ID_NOT_FOUND}
        assert zk_offsets(b, live) == {(t, 0): 2}  # refused: kept
    assert offset_fetch(b, empty) == {} and zk_offsets(b, empty) == {}
    assert not group_node(b, empty)
    (f,) = admin.delete_consumer_groups([live], request_timeout=30).values()  # (it left: Empty now)
    assert f.result(30) is None
    assert offset_fetch(b, live) == {} and not group_node(b, live)


def test_kafka_python_delete_groups(b):
    from kafka.admin import KafkaAdminClient

    t, empty, live = empty_and_live_groups(b, "kp")
    unknown = unique("kp-unknown")
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=20_000)
    try:
        with member(b, t, live):
            assert admin.delete_groups([empty, live, unknown]) == {
                empty: "OK", live: "NonEmptyGroupError", unknown: "GroupIdNotFoundError"}  # fmt: skip
            assert admin.list_group_offsets({empty: None})[empty] == {}
        assert not group_node(b, empty)
        # the same group made again starts afresh: its old offsets do not come back
        commit_as(b, empty, {(t, 1): 1})
        assert offset_fetch(b, empty) == {(t, 1): 1}
    finally:
        admin.close()


def test_delete_groups_answers_each_group_once(b):
    t, empty, _ = empty_and_live_groups(b, "dup")
    with open_conn(b) as conn:
        answer = conn.request(ApiKey.DELETE_GROUPS, {"groups_names": [empty, empty, ""]})
    assert answer["results"] == [{"group_id": empty, "error_code": 0},
                                 {"group_id": "", "error_code": ErrorCode.GROUP_ID_NOT_FOUND}]  # fmt: skip
    assert offset_fetch(b, empty) == {}


# --- OffsetDelete ----------------------------------------------------------------------------------


def test_offset_delete_refuses_subscribed_topics_and_deletes_the_others(b):
    from kafka.admin import KafkaAdminClient
    from kafka.errors import GroupSubscribedToTopicError, NoError

    consumed = create_topic(b.bootstrap, unique("od-consumed"), 2)
    other = create_topic(b.bootstrap, unique("od-other"), 2)
    produce(b, consumed, 2, 6)
    g = unique("od")
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=20_000)
    try:
        with member(b, consumed, g) as c:
            c.commit({TopicPartition(consumed, 0): OffsetAndMetadata(2, "", -1),
                      TopicPartition(consumed, 1): OffsetAndMetadata(1, "", -1)})  # fmt: skip
            with zk_session(b.zk_connect) as zk:  # (offsets of a topic no member subscribes to)
                consumers.commit(zk, g, {(other, 0): 5, (other, 1): 6})
            result = admin.delete_group_offsets(g, [TopicPartition(consumed, 0), TopicPartition(other, 0)])
            assert {tp.topic: e for tp, e in result.items()} == {consumed: GroupSubscribedToTopicError,
                                                                  other: NoError}  # fmt: skip
            assert zk_offsets(b, g) == {(consumed, 0): 2, (consumed, 1): 1, (other, 1): 6}
            nosuch = unique("nosuch")
            raw = offset_delete(b, g, [(other, 1), (other, 9), (nosuch, 0)])
            assert raw["error_code"] == 0
            unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert {(t["name"], p["partition_index"]): p["error_code"] for t in raw["topics"]
                    for p in t["partitions"]} == {(other, 1): 0, (other, 9): unknown, (nosuch, 0): unknown}  # fmt: skip
            assert offset_fetch(b, g) == {(consumed, 0): 2, (consumed, 1): 1}
        # it left: Empty, every offset may go, and the group with the last of them (as Kafka)
        assert offset_delete(b, g, [(consumed, 0), (consumed, 1)]) == {
            "error_code": 0, "throttle_time_ms": 0,
            "topics": [{"name": consumed, "partitions": [{"partition_index": 0, "error_code": 0},
                                                         {"partition_index": 1, "error_code": 0}]}]}  # fmt: skip
        assert offset_fetch(b, g) == {} and not group_node(b, g)
        assert offset_delete(b, g, [(consumed, 0)])["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        assert offset_delete(b, "", [(consumed, 0)])["error_code"] == ErrorCode.INVALID_GROUP_ID
    finally:
        admin.close()


# --- kafkactl ---------------------------------------------------------------------------------------


def test_kafkactl_group_delete_goes_through_delete_groups(b):
    t, empty, live = empty_and_live_groups(b, "cli")
    with member(b, t, live):
        r = group(b, "delete", live)
        error_line(r, live, "live member")
        assert r.returncode == 1 and r.stdout == ""
    assert ok(group(b, "delete", empty)) == f"deleted group {empty}\n"
    assert offset_fetch(b, empty) == {} and not group_node(b, empty)
    r = group(b, "delete", empty)
    error_line(r, "no consumer group", empty)


def test_kafkactl_group_delete_offsets(b):
    consumed = create_topic(b.bootstrap, unique("cli-consumed"), 2)
    other = create_topic(b.bootstrap, unique("cli-other"), 3)
    produce(b, consumed, 2, 4)
    g = unique("cli-od")
    with member(b, consumed, g) as c:
        c.commit({TopicPartition(consumed, 0): OffsetAndMetadata(1, "", -1)})
        with zk_session(b.zk_connect) as zk:
            consumers.commit(zk, g, {(other, 0): 5, (other, 1): 6, (other, 2): 7})
        r = group(b, "delete-offsets", g, "--topic", consumed)
        error_line(r, g, f"{consumed}-0", f"{consumed}-1", "GROUP_SUBSCRIBED_TO_TOPIC", "live member subscribes")
        assert tsv(r.stdout) == [["TOPIC", "PARTITION", "STATUS"], [consumed, "0", "GROUP_SUBSCRIBED_TO_TOPIC"],
                                 [consumed, "1", "GROUP_SUBSCRIBED_TO_TOPIC"]]  # fmt: skip
        r = group(b, "delete-offsets", g, "--topic", other, "--partition", "2", "-p", "0")
        assert tsv(ok(r)) == [["TOPIC", "PARTITION", "STATUS"], [other, "0", "deleted"], [other, "2", "deleted"]]
        assert zk_offsets(b, g) == {(consumed, 0): 1, (other, 1): 6}
        r = group(b, "delete-offsets", g, "--topic", other, "-p", "7")
        error_line(r, "has no partition 7")
        assert r.returncode == 2
        r = group(b, "delete-offsets", g, "--topic", unique("nosuch"))
        error_line(r, "unknown topic")
    rows = json_lines(ok(group(b, "delete-offsets", g, "-t", consumed, "-o", "json")))
    assert rows == [{"group": g, "topic": consumed, "partition": p, "deleted": True, "error": None} for p in (0, 1)]
    assert zk_offsets(b, g) == {(other, 1): 6}


def test_kafkactl_delete_offsets_of_a_zookeeper_group(b):
    t = create_topic(b.bootstrap, unique("zkod"), 2)
    g = unique("zkod")
    with zk_session(b.zk_connect) as zk:
        consumers.commit(zk, g, {(t, 0): 3, (t, 1): 4})
        consumers.register(zk, g, f"{g}_box-1", [t])
        r = group(b, "delete-offsets", g, "--topic", t)
        error_line(r, g, "1 live member")
        consumers.deregister(zk, g, f"{g}_box-1")
    ok(group(b, "delete-offsets", g, "--topic", t, "-p", "1"))
    assert zk_offsets(b, g) == {(t, 0): 3}
