"""The group coordinator over the wire, on three real broker processes and a real ZooKeeper.

- FindCoordinator names the same broker from every broker: `coordinator_for(group, live ids)`; the group
  APIs sent to another broker get NOT_COORDINATOR (16).
- A whole group round on the coordinator with raw requests: JoinGroup (two members on their own
  connections), SyncGroup, Heartbeat, OffsetCommit (stored in ZooKeeper in offset blocks,
  /consumers/<g>/offsets/<t>/block-<n>), OffsetFetch v1 and v2+ (null topics: every committed partition),
  DescribeGroups, ListGroups, LeaveGroup.
- A malformed JoinGroup closes only its own connection.
- The coordinator broker stopped: FindCoordinator from the others names another live broker, which takes
  the group's stable generation over from ZooKeeper (/consumers/<g>/generation): a member heartbeats and
  commits there without rejoining, and a kafka-python consumer group resumes from its committed offsets.
- ZooKeeper killed (a private server): heartbeats, commits (held in memory), OffsetFetch, a new group's join
  and sync, ListGroups are answered at once; an offset the broker cannot know then is
  COORDINATOR_LOAD_IN_PROGRESS; the held commits reach ZooKeeper when it is back; one log line each way.
  (tests/compat/test_group_zk_outage.py rides a confluent-kafka group through a 40 s outage.)
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kazoo.client import KazooClient

from broker.client.connection import Connection
from broker.client.sync import Producer
from broker.coordinator.group.coordinator import coordinator_for
from broker.errors import KafkactlError
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.primitives import I16, I32, Reader
from broker.zk import consumers
from broker.zk.server import ZooKeeperServer
from tests.fixtures import zk_client
from tests.integration.clientkit import kafka_python_knows
from tests.integration.cluster import BrokerProcess, new_chroot
from tests.integration.helpers import running_cluster
from tests.integration.wire import (
    closed_by_broker,
    connect,
    create_topic,
    decode_answer,
    frame,
    local_port,
    raw_frame,
    read_frame,
    wait_for_closing_lines,
)

NONE = 0
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79

#: fast groups: no initial rebalance delay, sessions down to one second
GROUP_OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}
DEADLINE = 30.0
IDS = [1, 2, 3]

GROUP_NAMES = [
    "orders",
    "analytics",
    "polygenelubricants",
    "日本語のグループ",
    "😀-group",
    "g",
    "kafkactl-group-negative",
]


# --- fixtures and helpers ------------------------------------------------------------------------------


def wait_until(what: str, check, timeout: float = DEADLINE, interval: float = 0.05) -> Any:  # noqa: ANN001
    """Poll `check()` until it returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def conn_to(b: BrokerProcess, client_id: str = "group-test") -> Connection:
    return Connection("127.0.0.1", b.port, client_id=client_id, timeout=DEADLINE)


def live_ids(b: BrokerProcess) -> list[int]:
    with conn_to(b) as c:
        return sorted(
            x["node_id"]
            for x in c.request(ApiKey.METADATA, {"topics": [], "allow_auto_topic_creation": False})["brokers"]
        )


def wait_for_live_set(brokers: list[BrokerProcess], ids: list[int]) -> None:
    for b in brokers:
        wait_until(f"broker {b.broker_id} to see brokers {ids}", lambda b=b: live_ids(b) == ids)


def start_cluster(start, ids: list[int] = IDS) -> list[BrokerProcess]:  # noqa: ANN001
    brokers = [start(i, overrides=GROUP_OVERRIDES) for i in ids]
    wait_for_live_set(brokers, ids)
    return brokers


@pytest.fixture(scope="module")
def groups3(zk_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    """Brokers 1, 2 and 3 of one cluster with fast group settings, shared by the tests that stop none."""
    root = tmp_path_factory.mktemp("group-coordinator")
    with running_cluster(zk_server.connect_string, root, tuple(IDS), GROUP_OVERRIDES) as brokers:
        wait_for_live_set(brokers, IDS)
        yield brokers


@pytest.fixture
def zk_of(zk_server) -> Iterator:  # noqa: ANN001
    """`zk_of(broker)`: a kazoo client under that broker's chroot (stopped at the end)."""
    clients: list[KazooClient] = []

    def make(b: BrokerProcess) -> KazooClient:
        client = zk_client(b.zk_connect)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.stop()
        client.close()


def by_id(brokers: list[BrokerProcess], node: int) -> BrokerProcess:
    return next(b for b in brokers if b.broker_id == node)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def group_on(node: int, ids: list[int] = IDS, prefix: str = "grp") -> str:
    """A fresh group name whose coordinator among `ids` is `node`."""
    for _ in range(1000):
        g = unique(prefix)
        if coordinator_for(g, ids) == node:
            return g
    raise AssertionError("no group name found")


def find_coordinator(b: BrokerProcess, group: str, version: int | None = None) -> dict[str, Any]:
    with conn_to(b) as c:
        body = {"key": group, "key_type": 0}
        return c.request(ApiKey.FIND_COORDINATOR, body, version)


def join_body(group: str, member_id: str = "", *, session_ms: int = 10_000, rebalance_ms: int = 10_000,
              metadata: bytes = b"meta", protocol_type: str = "consumer") -> dict[str, Any]:  # fmt: skip
    return {"group_id": group, "session_timeout_ms": session_ms, "rebalance_timeout_ms": rebalance_ms,
            "member_id": member_id, "group_instance_id": None, "protocol_type": protocol_type,
            "protocols": [{"name": "range", "metadata": metadata}]}  # fmt: skip


def sync_body(group: str, generation: int, member_id: str, assignments: dict[str, bytes] | None = None) -> dict:
    return {"group_id": group, "generation_id": generation, "member_id": member_id, "group_instance_id": None,
            "protocol_type": "consumer", "protocol_name": "range",  # (v5+: required, and checked)
            "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()]}  # fmt: skip


def heartbeat(c: Connection, group: str, generation: int, member_id: str) -> int:
    body = {"group_id": group, "generation_id": generation, "member_id": member_id, "group_instance_id": None}
    return c.request(ApiKey.HEARTBEAT, body)["error_code"]


def commit_body(group: str, generation: int, member_id: str, offsets: dict[tuple[str, int], int]) -> dict:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (t, p), off in offsets.items():
        topics.setdefault(t, []).append({"partition_index": p, "committed_offset": off, "committed_metadata": ""})
    return {"group_id": group, "generation_id": generation, "member_id": member_id, "group_instance_id": None,
            "retention_time_ms": -1, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}  # fmt: skip


def commit_errors(answer: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {(t["name"], p["partition_index"]): p["error_code"] for t in answer["topics"] for p in t["partitions"]}


def fetch_offsets(c: Connection, group: str, topics: dict[str, list[int]] | None, version: int) -> dict[str, Any]:
    wanted = None if topics is None else [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]
    body = {"group_id": group, "topics": wanted}
    return c.request(ApiKey.OFFSET_FETCH, body, version)


def fetched(answer: dict[str, Any]) -> dict[tuple[str, int], tuple[int, int]]:
    """{(topic, partition): (committed offset, error code)}."""
    return {(t["name"], p["partition_index"]): (p["committed_offset"], p["error_code"])
            for t in answer["topics"] for p in t["partitions"]}  # fmt: skip


def zk_offsets(zk: KazooClient, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets of `topic` as ZooKeeper holds them (`consumers.committed`)."""
    return {p: c.offset for (_, p), c in consumers.committed(zk, group, [topic]).items()}


def describe(c: Connection, group: str, version: int | None = None) -> dict[str, Any]:
    body = {"groups": [group], "include_authorized_operations": False}
    [g] = c.request(ApiKey.DESCRIBE_GROUPS, body, version)["groups"]
    return g


def list_groups(c: Connection) -> dict[str, str]:
    answer = c.request(ApiKey.LIST_GROUPS, {})
    assert answer["error_code"] == NONE
    return {g["group_id"]: g["protocol_type"] for g in answer["groups"]}


def assigned_partitions(member_assignment: bytes) -> dict[str, list[int]]:
    """A consumer-protocol assignment (the bytes a leader hands out in SyncGroup): {topic: partitions}."""
    if not member_assignment:
        return {}
    r = Reader(member_assignment)
    r.int16()  # version
    out = {}
    for _ in range(r.int32()):
        topic = r.string()
        out[topic] = [r.int32() for _ in range(r.int32())]
    return out


def metadata_gaps(b: BrokerProcess, topic: str, partitions: int, *, stopping: bool = False) -> str | None:
    """What is wrong with `topic` in `b`'s Metadata answer (missing, an error, partitions missing), or None.

    Kafka always lists an existing topic with all its partitions; a partition without a live leader is
    LEADER_NOT_AVAILABLE with leader -1, the topic itself has no error. A `stopping` broker may not answer."""
    try:
        with conn_to(b) as c:
            answer = c.request(ApiKey.METADATA, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    except (KafkactlError, OSError) as exc:
        return None if stopping else f"broker {b.broker_id}: {exc}"
    found = [t for t in answer["topics"] if t["name"] == topic]
    if len(found) != 1 or found[0]["error_code"] != NONE:
        return f"broker {b.broker_id}: {answer['topics']!r}"
    if sorted(p["partition_index"] for p in found[0]["partitions"]) != list(range(partitions)):
        return f"broker {b.broker_id}: partitions {found[0]['partitions']!r}"
    return None


def new_member_id(c: Connection, group: str, session_ms: int = 10_000) -> str:
    """The member id a JoinGroup v5 without one is answered with (MEMBER_ID_REQUIRED, KIP-394)."""
    answer = c.request(ApiKey.JOIN_GROUP, join_body(group, session_ms=session_ms), 5)
    assert answer["error_code"] == MEMBER_ID_REQUIRED and answer["member_id"], answer
    return answer["member_id"]


class TwoMembers:
    """Two members of one group, each on its own connection to the coordinator, Stable in one generation."""

    def __init__(self, b: BrokerProcess, group: str) -> None:
        self.group = group
        self.a = conn_to(b, "member-a")
        self.b = conn_to(b, "member-b")
        first = self.a.request(ApiKey.JOIN_GROUP, join_body(group, new_member_id(self.a, group), metadata=b"meta-a"))
        assert (first["error_code"], first["generation_id"]) == (NONE, 1), first
        self.ma = first["member_id"]
        assert first["leader"] == self.ma
        # b joins: its answer waits until a rejoins; a hears of the rebalance through its heartbeat
        cid_b, v_b = self.b.send(ApiKey.JOIN_GROUP, join_body(group, new_member_id(self.b, group), metadata=b"meta-b"))
        wait_until("a's heartbeat to say REBALANCE_IN_PROGRESS",
                   lambda: heartbeat(self.a, group, 1, self.ma) == REBALANCE_IN_PROGRESS)  # fmt: skip
        self.join_a = self.a.request(ApiKey.JOIN_GROUP, join_body(group, self.ma, metadata=b"meta-a"))
        self.join_b = self.b.receive(ApiKey.JOIN_GROUP, cid_b, v_b)
        assert self.join_a["error_code"] == self.join_b["error_code"] == NONE
        self.gen = self.join_a["generation_id"]
        assert self.gen == self.join_b["generation_id"] == 2
        self.mb = self.join_b["member_id"]
        assert self.join_a["leader"] == self.join_b["leader"] == self.ma
        # b syncs first and waits for the leader's assignment
        cid_b, v_b = self.b.send(ApiKey.SYNC_GROUP, sync_body(group, self.gen, self.mb))
        assignments = {self.ma: b"assign-a", self.mb: b"assign-b"}
        self.sync_a = self.a.request(ApiKey.SYNC_GROUP, sync_body(group, self.gen, self.ma, assignments))
        self.sync_b = self.b.receive(ApiKey.SYNC_GROUP, cid_b, v_b)

    def close(self) -> None:
        self.a.close()
        self.b.close()


# --- FindCoordinator and NOT_COORDINATOR ---------------------------------------------------------------------


def test_find_coordinator_is_the_same_from_every_broker(groups3) -> None:
    for group in GROUP_NAMES:
        want = coordinator_for(group, IDS)
        coordinator = by_id(groups3, want)
        for b in groups3:
            for version in (0, 1, 2):
                answer = find_coordinator(b, group, version)
                got = (answer["error_code"], answer["node_id"], answer["host"], answer["port"])
                assert got == (NONE, want, "127.0.0.1", coordinator.port), (group, b.broker_id, version, answer)
    # the three brokers all coordinate some of the groups
    assert {coordinator_for(f"spread-{i}", IDS) for i in range(20)} == set(IDS)


def test_find_coordinator_for_transactions(groups3) -> None:
    """Key type 1: a transactional id's coordinator, by the groups' hash, the same from every broker; an unknown
    key type is INVALID_REQUEST."""
    want = coordinator_for("some-transactional-id", IDS)
    for b in groups3:
        with conn_to(b) as c:
            for version in (1, 3):
                answer = c.request(ApiKey.FIND_COORDINATOR, {"key": "some-transactional-id", "key_type": 1}, version)
                assert (answer["error_code"], answer["node_id"]) == (NONE, want)
                assert answer["port"] == by_id(groups3, want).port
            answer = c.request(ApiKey.FIND_COORDINATOR, {"key": "x", "key_type": 2}, 3)
            assert answer["error_code"] == ErrorCode.INVALID_REQUEST


def test_group_requests_to_a_non_coordinator_get_not_coordinator(groups3) -> None:
    group = group_on(2)
    for b in (by_id(groups3, 1), by_id(groups3, 3)):
        with conn_to(b) as c:
            for version in (0, 1, 2, 3, 4, 5):
                j = c.request(ApiKey.JOIN_GROUP, join_body(group), version)
                assert (j["error_code"], j["generation_id"]) == (NOT_COORDINATOR, -1), (version, j)
            assert c.request(ApiKey.SYNC_GROUP, sync_body(group, 1, "m"))["error_code"] == NOT_COORDINATOR
            assert heartbeat(c, group, 1, "m") == NOT_COORDINATOR
            leave = c.request(ApiKey.LEAVE_GROUP, {"group_id": group, "member_id": "m"}, 0)
            assert leave["error_code"] == NOT_COORDINATOR
            commit = c.request(ApiKey.OFFSET_COMMIT, commit_body(group, -1, "", {("t", 0): 1}), 2)
            assert commit_errors(commit) == {("t", 0): NOT_COORDINATOR}
            v1 = fetch_offsets(c, group, {"t": [0]}, 1)
            assert fetched(v1) == {("t", 0): (-1, NOT_COORDINATOR)}
            v3 = fetch_offsets(c, group, None, 3)
            assert v3["error_code"] == NOT_COORDINATOR
            assert describe(c, group)["error_code"] == NOT_COORDINATOR
    # ...and the coordinator itself takes them
    with conn_to(by_id(groups3, 2)) as c:
        j = c.request(ApiKey.JOIN_GROUP, join_body(group, session_ms=1000), 3)
        assert (j["error_code"], j["generation_id"]) == (NONE, 1)
        leave = c.request(ApiKey.LEAVE_GROUP, {"group_id": group, "member_id": j["member_id"]}, 0)
        assert leave["error_code"] == NONE


# --- a whole group round with raw requests ------------------------------------------------------------------


def test_join_sync_heartbeat_describe_list_leave(groups3) -> None:
    node = 3
    group = group_on(node)
    coordinator = by_id(groups3, node)
    m = TwoMembers(coordinator, group)
    try:
        assert (m.sync_a["error_code"], m.sync_a["assignment"]) == (NONE, b"assign-a")
        assert (m.sync_b["error_code"], m.sync_b["assignment"]) == (NONE, b"assign-b")
        assert sorted((x["member_id"], x["metadata"]) for x in m.join_a["members"]) == sorted(
            [(m.ma, b"meta-a"), (m.mb, b"meta-b")]
        )
        assert m.join_b["members"] == []
        assert m.ma.startswith("member-a-") and m.mb.startswith("member-b-")
        assert heartbeat(m.a, group, m.gen, m.ma) == NONE
        assert heartbeat(m.b, group, m.gen, m.mb) == NONE
        assert heartbeat(m.b, group, m.gen - 1, m.mb) == ILLEGAL_GENERATION
        assert heartbeat(m.b, group, m.gen, "stranger") == UNKNOWN_MEMBER_ID

        with conn_to(coordinator) as c:
            for version in (0, 1, 2, 3, 4):
                d = describe(c, group, version)
                assert (d["error_code"], d["group_id"], d["group_state"]) == (NONE, group, "Stable"), d
                assert (d["protocol_type"], d["protocol_data"]) == ("consumer", "range")
                members = {x["member_id"]: x for x in d["members"]}
                assert set(members) == {m.ma, m.mb}
                assert members[m.ma]["client_id"] == "member-a" and members[m.mb]["client_id"] == "member-b"
                assert all(x["client_host"] == "/127.0.0.1" for x in members.values())
                assert members[m.ma]["member_metadata"] == b"meta-a"
                assert members[m.mb]["member_assignment"] == b"assign-b"
            assert list_groups(c).get(group) == "consumer"
            unknown = describe(c, group_on(node, prefix="never-joined"))
            assert (unknown["error_code"], unknown["group_state"], unknown["members"]) == (NONE, "Dead", [])
        for b in groups3:  # ListGroups is per broker: only the coordinator lists the group
            if b is not coordinator:
                with conn_to(b) as c:
                    assert group not in list_groups(c)

        # b leaves (v0); a learns of the rebalance and rejoins alone as generation 3
        leave = m.b.request(ApiKey.LEAVE_GROUP, {"group_id": group, "member_id": m.mb}, 0)
        assert leave["error_code"] == NONE
        assert heartbeat(m.a, group, m.gen, m.ma) == REBALANCE_IN_PROGRESS
        with conn_to(coordinator) as c:
            assert describe(c, group)["group_state"] == "PreparingRebalance"
        again = m.a.request(ApiKey.JOIN_GROUP, join_body(group, m.ma, metadata=b"meta-a"))
        assert (again["error_code"], again["generation_id"], again["leader"]) == (NONE, m.gen + 1, m.ma)
        assert [x["member_id"] for x in again["members"]] == [m.ma]
        with conn_to(coordinator) as c:
            assert describe(c, group)["group_state"] == "CompletingRebalance"
        s = m.a.request(ApiKey.SYNC_GROUP, sync_body(group, m.gen + 1, m.ma, {m.ma: b"everything"}))
        assert (s["error_code"], s["assignment"]) == (NONE, b"everything")
        # a leaves with LeaveGroup v3 (a batch of one, plus a stranger)
        body = {"group_id": group, "members": [{"member_id": m.ma, "group_instance_id": None},
                                               {"member_id": "stranger", "group_instance_id": None}]}  # fmt: skip
        leave3 = m.a.request(ApiKey.LEAVE_GROUP, body, 3)
        assert leave3["error_code"] == NONE
        results = [(x["member_id"], x["error_code"]) for x in leave3["members"]]
        assert results == [(m.ma, NONE), ("stranger", UNKNOWN_MEMBER_ID)]
        with conn_to(coordinator) as c:
            d = describe(c, group)
            assert d["members"] == [] and d["group_state"] in ("Empty", "Dead")
    finally:
        m.close()


def test_offset_commit_goes_to_zookeeper_and_offset_fetch_reads_it(groups3, zk_of) -> None:
    node = 1
    group = group_on(node)
    coordinator = by_id(groups3, node)
    t1, t2 = unique("offsets-a"), unique("offsets-b")
    with conn_to(coordinator) as c:
        create_topic(c, t1, 3)
        create_topic(c, t2, 2)
    wait_until("every broker to know both topics", lambda: all(_knows(b, [t1, t2]) for b in groups3))
    zk = zk_of(coordinator)
    m = TwoMembers(coordinator, group)
    try:
        answer = m.a.request(ApiKey.OFFSET_COMMIT, commit_body(group, m.gen, m.ma, {(t1, 0): 5, (t1, 2): 42}), 2)
        assert commit_errors(answer) == {(t1, 0): NONE, (t1, 2): NONE}
        answer = m.b.request(ApiKey.OFFSET_COMMIT, commit_body(group, m.gen, m.mb, {(t2, 1): 7, (t2, 0): 0}), 7)
        assert commit_errors(answer) == {(t2, 1): NONE, (t2, 0): NONE}
        # in ZooKeeper, as decimal strings
        assert zk_offsets(zk, group, t1) == {0: 5, 2: 42}
        assert zk_offsets(zk, group, t2) == {0: 0, 1: 7}

        # refused commits write nothing
        stale = m.a.request(ApiKey.OFFSET_COMMIT, commit_body(group, m.gen - 1, m.ma, {(t1, 0): 99}), 2)
        assert commit_errors(stale) == {(t1, 0): ILLEGAL_GENERATION}
        stranger = m.a.request(ApiKey.OFFSET_COMMIT, commit_body(group, m.gen, "stranger", {(t1, 0): 99}), 2)
        assert commit_errors(stranger) == {(t1, 0): UNKNOWN_MEMBER_ID}
        simple = m.a.request(ApiKey.OFFSET_COMMIT, commit_body(group, -1, "", {(t1, 0): 99}), 2)
        assert commit_errors(simple) == {(t1, 0): UNKNOWN_MEMBER_ID}  # the group is live: not a simple commit
        unknown = m.a.request(ApiKey.OFFSET_COMMIT, commit_body(group, m.gen, m.ma, {(t1, 9): 1, ("nope", 0): 1}), 2)
        assert commit_errors(unknown) == {(t1, 9): 3, ("nope", 0): 3}  # UNKNOWN_TOPIC_OR_PARTITION
        assert zk_offsets(zk, group, t1) == {0: 5, 2: 42}

        with conn_to(coordinator) as c:
            # v1: the partitions asked for, -1 where nothing was committed, errors per partition
            v1 = fetch_offsets(c, group, {t1: [0, 1, 2], t2: [1]}, 1)
            assert fetched(v1) == {(t1, 0): (5, NONE), (t1, 1): (-1, NONE), (t1, 2): (42, NONE), (t2, 1): (7, NONE)}
            v0 = fetch_offsets(c, group, {t1: [2]}, 0)
            assert fetched(v0) == {(t1, 2): (42, NONE)}
            for version in (2, 3, 4, 5):
                everything = fetch_offsets(c, group, None, version)  # null topics: every committed partition
                assert everything["error_code"] == NONE
                assert fetched(everything) == {(t1, 0): (5, NONE), (t1, 2): (42, NONE), (t2, 0): (0, NONE),
                                               (t2, 1): (7, NONE)}, version  # fmt: skip
                some = fetch_offsets(c, group, {t2: [0, 1]}, version)
                assert fetched(some) == {(t2, 0): (0, NONE), (t2, 1): (7, NONE)}
            nothing = fetch_offsets(c, group_on(node, prefix="nothing"), None, 3)
            assert (nothing["error_code"], nothing["topics"]) == (NONE, [])

        # after everyone left, a simple commit (generation -1, no member) is allowed, as in Kafka
        m.a.request(ApiKey.LEAVE_GROUP, {"group_id": group, "member_id": m.ma}, 0)
        m.b.request(ApiKey.LEAVE_GROUP, {"group_id": group, "member_id": m.mb}, 0)
        simple = m.a.request(ApiKey.OFFSET_COMMIT, commit_body(group, -1, "", {(t1, 1): 11}), 2)
        assert commit_errors(simple) == {(t1, 1): NONE}
        v0_commit = m.a.request(ApiKey.OFFSET_COMMIT, commit_body(group, -1, "", {(t1, 0): 6}), 0)
        assert commit_errors(v0_commit) == {(t1, 0): NONE}
        assert zk_offsets(zk, group, t1) == {0: 6, 1: 11, 2: 42}
    finally:
        m.close()


def _knows(b: BrokerProcess, topics: list[str]) -> bool:
    with conn_to(b) as c:
        answer = c.request(
            ApiKey.METADATA, {"topics": [{"name": t} for t in topics], "allow_auto_topic_creation": False}
        )
    return all(t["error_code"] == NONE for t in answer["topics"])


def test_join_group_v4_with_empty_member_id_asks_for_a_member_id(groups3) -> None:
    node = 2
    group = group_on(node)
    with conn_to(by_id(groups3, node)) as c:
        answer = c.request(ApiKey.JOIN_GROUP, join_body(group, session_ms=1000), 4)
        if answer["error_code"] == NONE:
            c.request(ApiKey.LEAVE_GROUP, {"group_id": group, "member_id": answer["member_id"]}, 0)
    assert answer["error_code"] == MEMBER_ID_REQUIRED
    assert answer["member_id"]


def simple_commit(brokers: list[BrokerProcess], group: str, topic: str, offset: int) -> int:
    """A commit with generation -1 and no member (no group membership) to the group's coordinator."""
    with conn_to(by_id(brokers, coordinator_for(group, IDS))) as c:
        answer = c.request(ApiKey.OFFSET_COMMIT, commit_body(group, -1, "", {(topic, 0): offset}), 2)
    return commit_errors(answer)[(topic, 0)]


def committed_via_fetch(brokers: list[BrokerProcess], group: str) -> dict[tuple[str, int], tuple[int, int]]:
    with conn_to(by_id(brokers, coordinator_for(group, IDS))) as c:
        answer = fetch_offsets(c, group, None, 3)
    assert answer["error_code"] == NONE, answer
    return fetched(answer)


def test_distinct_group_ids_never_share_committed_offsets(groups3) -> None:
    topic = unique("gid")
    with conn_to(groups3[0]) as c:
        create_topic(c, topic, 1)
    wait_until("every broker to know the topic", lambda: all(_knows(b, [topic]) for b in groups3))
    base = unique("g")
    pairs = [(f"{base}/q", f"{base}//q"), (f"{base}-t", f"{base}-t/")]
    for i, (one, other) in enumerate(pairs):
        assert simple_commit(groups3, one, topic, 10 + i) == NONE
        assert simple_commit(groups3, other, topic, 20 + i) == NONE
    assert [committed_via_fetch(groups3, g) for pair in pairs for g in pair] == [
        {(topic, 0): (10, NONE)}, {(topic, 0): (20, NONE)}, {(topic, 0): (11, NONE)}, {(topic, 0): (21, NONE)},
    ]  # fmt: skip


def test_group_ids_dot_and_dot_dot_can_commit(groups3) -> None:
    topic = unique("dots")
    with conn_to(groups3[0]) as c:
        create_topic(c, topic, 1)
    wait_until("every broker to know the topic", lambda: all(_knows(b, [topic]) for b in groups3))
    for group in (".", ".."):
        assert simple_commit(groups3, group, topic, 5) == NONE, group
        assert committed_via_fetch(groups3, group) == {(topic, 0): (5, NONE)}


def test_join_with_the_member_id_handed_out_is_admitted(groups3) -> None:
    node = 1
    group = group_on(node)
    with conn_to(by_id(groups3, node)) as c:
        first = c.request(ApiKey.JOIN_GROUP, join_body(group, session_ms=5000), 5)
        assert first["error_code"] == MEMBER_ID_REQUIRED
        j = c.request(ApiKey.JOIN_GROUP, join_body(group, first["member_id"], session_ms=5000), 5)
        assert (j["error_code"], j["member_id"], j["leader"]) == (NONE, first["member_id"], first["member_id"])
        s = c.request(ApiKey.SYNC_GROUP, sync_body(group, j["generation_id"], j["member_id"], {j["member_id"]: b"x"}))
        assert (s["error_code"], s["assignment"]) == (NONE, b"x")
        # an id that was never handed out is still unknown
        stranger = c.request(ApiKey.JOIN_GROUP, join_body(group, "made-up-id", session_ms=5000), 5)
        assert stranger["error_code"] == UNKNOWN_MEMBER_ID
        c.request(ApiKey.LEAVE_GROUP, {"group_id": group, "member_id": j["member_id"]}, 0)


def test_a_group_with_offsets_and_no_members_is_empty_not_dead(groups3) -> None:
    topic = unique("empty")
    with conn_to(groups3[0]) as c:
        create_topic(c, topic, 1)
    wait_until("every broker to know the topic", lambda: all(_knows(b, [topic]) for b in groups3))
    group = unique("idle")
    assert simple_commit(groups3, group, topic, 3) == NONE
    coordinator = by_id(groups3, coordinator_for(group, IDS))
    with conn_to(coordinator) as c:
        d = describe(c, group)
        assert (d["error_code"], d["group_state"], d["members"]) == (NONE, "Empty", [])
        assert list_groups(c).get(group) == "consumer"
    for b in groups3:
        if b is not coordinator:
            with conn_to(b) as c:
                assert group not in list_groups(c)


def test_kafka_2_8_versions_protocol_names_states_and_require_stable(groups3) -> None:
    """JoinGroup v7 names the protocol type (null in an error answer), SyncGroup v5 must name the group's
    protocol type and name (INCONSISTENT_GROUP_PROTOCOL otherwise, a missing one before any other check),
    ListGroups v4 answers states and filters by them, OffsetFetch v7 with require_stable answers the offsets."""
    topic = unique("v28")
    with conn_to(groups3[0]) as c:
        create_topic(c, topic, 1)
    wait_until("every broker to know the topic", lambda: all(_knows(b, [topic]) for b in groups3))
    live, idle = group_on(1), group_on(1)
    assert simple_commit(groups3, idle, topic, 4) == NONE
    with conn_to(by_id(groups3, 1)) as c:
        first = c.request(ApiKey.JOIN_GROUP, join_body(group_on(1), "made-up-id", session_ms=5000), 7)
        assert (first["error_code"], first["protocol_type"], first["protocol_name"]) == (UNKNOWN_MEMBER_ID, None, None)
        asked = c.request(ApiKey.JOIN_GROUP, join_body(live, session_ms=5000), 7)
        assert (asked["error_code"], asked["protocol_type"], asked["protocol_name"]) == (MEMBER_ID_REQUIRED, None, None)
        j = c.request(ApiKey.JOIN_GROUP, join_body(live, asked["member_id"], session_ms=5000), 7)
        assert (j["error_code"], j["protocol_type"], j["protocol_name"]) == (NONE, "consumer", "range")
        gen, member = j["generation_id"], j["member_id"]
        states = {g["group_id"]: g["group_state"] for g in c.request(ApiKey.LIST_GROUPS, {}, 4)["groups"]}
        assert (states[live], states[idle]) == ("CompletingRebalance", "Empty")

        body = sync_body(live, gen, member, {member: b"all"})
        for missing in ("protocol_type", "protocol_name"):  # Kafka refuses before even looking at the group
            for group_id in (live, "no-such-group"):
                s = c.request(ApiKey.SYNC_GROUP, {**body, "group_id": group_id, missing: None}, 5)
                assert s["error_code"] == INCONSISTENT_GROUP_PROTOCOL, (missing, group_id)
                assert s["protocol_type"] is None and s["protocol_name"] is None
        for wrong in ({"protocol_type": "connect"}, {"protocol_name": "roundrobin"}):
            assert c.request(ApiKey.SYNC_GROUP, {**body, **wrong}, 5)["error_code"] == INCONSISTENT_GROUP_PROTOCOL
        s = c.request(ApiKey.SYNC_GROUP, body, 5)
        assert (s["error_code"], s["protocol_type"], s["protocol_name"]) == (NONE, "consumer", "range")
        assert s["assignment"] == b"all"
        old = c.request(ApiKey.SYNC_GROUP, {k: v for k, v in body.items() if not k.startswith("protocol_")}, 3)
        assert (old["error_code"], old["assignment"]) == (NONE, b"all")  # v3 names neither: nothing to check

        def listed(states_filter: list[str], version: int = 4) -> dict[str, str]:
            answer = c.request(ApiKey.LIST_GROUPS, {"states_filter": states_filter}, version)
            assert answer["error_code"] == NONE
            return {g["group_id"]: g.get("group_state", "-") for g in answer["groups"] if g["group_id"] in (live, idle)}

        assert listed([]) == {live: "Stable", idle: "Empty"}
        assert listed(["Stable"]) == {live: "Stable"}
        assert listed(["Empty", "Dead"]) == {idle: "Empty"}
        assert listed(["stable"]) == {}  # (Kafka 2.8 compares the names exactly)
        assert listed([], 2) == {live: "-", idle: "-"}  # (before v4: no state, no filter)

        for require_stable in (False, True):
            body = {"group_id": idle, "topics": [{"name": topic, "partition_indexes": [0]}],
                    "require_stable": require_stable}  # fmt: skip
            answer = c.request(ApiKey.OFFSET_FETCH, body, 7)
            assert answer["error_code"] == NONE and fetched(answer) == {(topic, 0): (4, NONE)}
        c.request(ApiKey.LEAVE_GROUP, {"group_id": live, "members": [{"member_id": member}]}, 4)
        # its last member left: Empty, as Kafka's; with no committed offsets, kafkactl forgets it as soon as
        # its stored generation is deleted (Kafka at its next offsets clean-up), so it may be gone already
        assert listed(["Empty"]) in ({live: "Empty", idle: "Empty"}, {idle: "Empty"})
        assert listed(["Stable"]) == {}


# --- bad input ----------------------------------------------------------------------------------------------


def test_malformed_join_group_closes_only_its_connection(groups3) -> None:
    node = 2
    group = group_on(node)
    coordinator = by_id(groups3, node)
    m = TwoMembers(coordinator, group)
    try:
        good = frame(ApiKey.JOIN_GROUP, 1, 7, join_body(group))
        cases = [
            ("JoinGroup 3 bytes short", I32.pack(len(good) - 4 - 3) + good[4:-3]),
            ("JoinGroup protocols count 2^31-1",
             raw_frame(11, 1, 8, I16.pack(len(group.encode())) + group.encode() + I32.pack(10_000) * 2 + I16.pack(0)
                       + I16.pack(8) + b"consumer" + I32.pack(0x7FFFFFFF))),
            ("JoinGroup group id past the end", raw_frame(11, 0, 9, I16.pack(500) + b"abc")),
            ("JoinGroup bytes after the body", I32.pack(len(good) - 4 + 2) + good[4:] + b"\x00\x01"),
            ("JoinGroup v5 without the instance id", raw_frame(11, 5, 10, I16.pack(1) + b"g" + I32.pack(10_000) * 2
                                                               + I16.pack(0))),
        ]  # fmt: skip
        for what, data in cases:
            s = connect(coordinator.port)
            port = local_port(s)
            try:
                s.sendall(data)
                assert closed_by_broker(s, 10.0), f"{what}: the broker kept the connection open"
            finally:
                s.close()
            lines = wait_for_closing_lines(coordinator, port, 1)
            assert len(lines) == 1, (what, lines)
            # the members' connections are untouched and the group stays Stable
            assert heartbeat(m.a, group, m.gen, m.ma) == NONE, what
            assert heartbeat(m.b, group, m.gen, m.mb) == NONE, what
        with conn_to(coordinator) as c:
            d = describe(c, group)
            assert d["group_state"] == "Stable" and len(d["members"]) == 2
        # a well-formed JoinGroup on a raw socket still works after all that
        s = connect(coordinator.port)
        try:
            s.sendall(frame(ApiKey.JOIN_GROUP, 1, 77, join_body(group_on(node, prefix="solo"), session_ms=1000)))
            data = read_frame(s)
            assert data is not None
            cid, body = decode_answer(data, ApiKey.JOIN_GROUP, 1)
            assert (cid, body["error_code"]) == (77, NONE)
        finally:
            s.close()
        log = coordinator.log_text()
        assert "Traceback" not in log and "internal error" not in log, log[-4000:]
    finally:
        m.close()


# --- the coordinator broker stops ---------------------------------------------------------------------------


def test_coordinator_failover_kafka_python_group_resumes_from_committed_offsets(start_broker, zk_of) -> None:
    brokers = start_cluster(start_broker)
    victim = 2
    group = group_on(victim, prefix="failover")
    survivors = [b for b in brokers if b.broker_id != victim]
    successor = coordinator_for(group, [b.broker_id for b in survivors])
    topic = unique("failover")
    partitions = 4
    with conn_to(brokers[0]) as c:  # every partition on a broker that stays up
        body = {"topics": [{"name": topic, "num_partitions": -1, "replication_factor": -1, "configs": [],
                            "assignments": [{"partition_index": p, "broker_ids": [survivors[p % 2].broker_id]}
                                            for p in range(partitions)]}],
                "timeout_ms": 10000, "validate_only": False}  # fmt: skip
        [t] = c.request(ApiKey.CREATE_TOPICS, body)["topics"]
        assert t["error_code"] == NONE, t
    wait_until("every broker to know the topic", lambda: all(_knows(b, [topic]) for b in brokers))
    for b in brokers:
        assert find_coordinator(b, group)["node_id"] == victim
    bootstrap = ",".join(b.bootstrap for b in brokers)
    zk = zk_of(survivors[0])

    def produce(tag: str, n: int) -> dict[tuple[int, int], bytes]:
        sent = {}
        with Producer(",".join(b.bootstrap for b in survivors), acks="all") as producer:
            futures = [(p, i, producer.send(topic, f"{tag}-{p}-{i}".encode(), key=f"k{i}".encode(), partition=p))
                       for i in range(n) for p in range(partitions)]  # fmt: skip
            for p, i, f in futures:
                md = f.result(timeout=DEADLINE)
                sent[(p, md.offset)] = f"{tag}-{p}-{i}".encode()
        return sent

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id="failover-consumer",
                             enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=3000,
                             heartbeat_interval_ms=300, fetch_max_wait_ms=100, request_timeout_ms=10_000,
                             retry_backoff_ms=100, reconnect_backoff_ms=100, reconnect_backoff_max_ms=500,
                             metadata_max_age_ms=2000)  # fmt: skip
    assert kafka_python_knows(consumer, topic) == set(range(partitions))
    consumed: list[tuple[int, int, bytes]] = []

    def consume_until(want: set[tuple[int, int]], phase: str) -> None:
        deadline = time.monotonic() + DEADLINE
        while not want <= {(p, o) for p, o, _ in consumed}:
            assert time.monotonic() < deadline, (
                f"{phase}: missing {sorted(want - {(p, o) for p, o, _ in consumed})[:10]}"
            )
            got = consumer.poll(timeout_ms=200)
            for tp, records in got.items():
                consumed.extend((tp.partition, r.offset, r.value) for r in records)
            if got:
                consumer.commit()  # synchronous: ZooKeeper holds what was consumed before the next poll

    try:
        first = produce("before", 5)
        consume_until(set(first), "before the failover")
        assert {tp.partition for tp in consumer.assignment()} == set(range(partitions))
        committed_before = zk_offsets(zk, group, topic)
        assert committed_before == {p: 5 for p in range(partitions)}
        with conn_to(by_id(brokers, victim)) as c:
            d = describe(c, group)
            assert d["group_state"] == "Stable" and [x["client_id"] for x in d["members"]] == ["failover-consumer"]
        n_before = len(consumed)

        # while the coordinator stops and the live set changes, every broker still answering keeps listing
        # the topic with all its partitions (a client's group leader assigns only what its metadata lists)
        gaps: list[str] = []
        watched = threading.Event()

        def watch_metadata() -> None:
            while not watched.wait(0.01):
                for b in brokers:
                    if gap := metadata_gaps(b, topic, partitions, stopping=b.broker_id == victim):
                        gaps.append(gap)

        watcher = threading.Thread(target=watch_metadata, daemon=True)
        watcher.start()
        try:
            by_id(brokers, victim).stop(timeout=20)
            for b in survivors:  # both survivors agree on the new coordinator
                answer = wait_until(
                    f"broker {b.broker_id} to name the successor",
                    lambda b=b: (a := find_coordinator(b, group))["node_id"] == successor and a,
                )
                assert answer["error_code"] == NONE and answer["port"] == by_id(brokers, successor).port
            wait_for_live_set(survivors, [b.broker_id for b in survivors])
        finally:
            watched.set()
            watcher.join(DEADLINE)
        assert not gaps, gaps[:5]
        assert successor != victim

        # the successor takes the group's stored generation over (see test_members_survive_a_coordinator_move);
        # should the consumer rejoin all the same (say, its heartbeat raced the move), the coordinator is
        # Stable as soon as it has the leader's SyncGroup, and the consumer takes its assignment from the
        # SyncGroup answer only in a later poll() (kafka-python's join runs on its IO thread and a poll that
        # times out leaves it in flight): the consumer is settled at the successor when both agree.
        def rejoined() -> bool:
            assert not consumer.poll(timeout_ms=100)
            with conn_to(by_id(brokers, successor)) as c:
                d = describe(c, group)
            if d["group_state"] != "Stable" or [x["client_id"] for x in d["members"]] != ["failover-consumer"]:
                return False
            if assigned_partitions(d["members"][0]["member_assignment"]) != {topic: list(range(partitions))}:
                return False  # kafka-python may rejoin once more (its metadata changed): wait for that round
            return {tp.partition for tp in consumer.assignment()} == set(range(partitions))

        wait_until("the consumer to rejoin at the successor and take its assignment", rejoined)

        second = produce("after", 3)
        consume_until(set(second), "after the failover")
        after = consumed[n_before:]
        # nothing committed before the failover is consumed again; the new messages exactly once
        assert all(o >= committed_before[p] for p, o, _ in after), after[:10]
        assert sorted((p, o) for p, o, _ in after) == sorted(second)
        assert all(second[(p, o)] == v for p, o, v in after)
        assert all(first[(p, o)] == v for p, o, v in consumed[:n_before])
        assert set(zk_offsets(zk, group, topic).values()) == {8}
        with conn_to(by_id(brokers, successor)) as c:
            d = describe(c, group)
            assert d["group_state"] == "Stable", d
            assert [x["client_id"] for x in d["members"]] == ["failover-consumer"]
            assert list_groups(c).get(group) == "consumer"
            v2 = fetch_offsets(c, group, None, 2)
            assert fetched(v2) == {(topic, p): (8, NONE) for p in range(partitions)}
        assert consumer.committed(KpTopicPartition(topic, 0)) == 8
        for b in survivors:
            log = b.log_text()
            assert "Traceback" not in log and "internal error" not in log, log[-4000:]
    finally:
        consumer.close(autocommit=False)


def test_members_survive_a_coordinator_move(start_broker) -> None:
    """As Kafka (which keeps a group's generation in __consumer_offsets): after its coordinator stops, the
    successor takes the group's stable generation from ZooKeeper, and the member heartbeats, commits and
    describes without rejoining."""
    brokers = start_cluster(start_broker, [1, 2])
    group = group_on(1, [1, 2], prefix="move")
    topic = unique("move")
    with conn_to(brokers[1]) as c:
        body = {"topics": [{"name": topic, "num_partitions": -1, "replication_factor": -1, "configs": [],
                            "assignments": [{"partition_index": 0, "broker_ids": [2]}]}],
                "timeout_ms": 10000, "validate_only": False}  # fmt: skip
        assert c.request(ApiKey.CREATE_TOPICS, body)["topics"][0]["error_code"] == NONE
    wait_until("both brokers to know the topic", lambda: all(_knows(b, [topic]) for b in brokers))
    with conn_to(brokers[0], "mover") as c:
        j = c.request(ApiKey.JOIN_GROUP, join_body(group, new_member_id(c, group, 30_000), session_ms=30_000))
        member, gen = j["member_id"], j["generation_id"]
        s = c.request(ApiKey.SYNC_GROUP, sync_body(group, gen, member, {member: b"all"}))
        assert (j["error_code"], s["error_code"]) == (NONE, NONE)
    brokers[0].stop(timeout=20)
    wait_until("broker 2 to coordinate the group", lambda: find_coordinator(brokers[1], group)["node_id"] == 2)
    with conn_to(brokers[1], "mover") as c:
        assert heartbeat(c, group, gen, member) == NONE
        answer = c.request(ApiKey.OFFSET_COMMIT, commit_body(group, gen, member, {(topic, 0): 0}), 2)
        assert commit_errors(answer) == {(topic, 0): NONE}
        d = describe(c, group)
        assigned = [(m["member_id"], m["member_assignment"]) for m in d["members"]]
        assert (d["group_state"], assigned) == ("Stable", [(member, b"all")])
        assert c.request(ApiKey.SYNC_GROUP, sync_body(group, gen, member, {}))["error_code"] == NONE


# --- ZooKeeper down: group requests answered without it ------------------------------------------------------


def timed(fn) -> tuple[Any, float]:  # noqa: ANN001
    began = time.monotonic()
    result = fn()
    return result, time.monotonic() - began


@pytest.mark.chaos
def test_group_requests_are_answered_at_once_while_zookeeper_is_down(private_zk: ZooKeeperServer,
                                                                     tmp_path) -> None:  # noqa: ANN001  # fmt: skip
    """ZooKeeper killed under a stable group: heartbeats, commits (held in memory, error 0), OffsetFetch of the
    held offsets, a new group's JoinGroup and SyncGroup, ListGroups are each answered within a second; an offset
    neither held nor read before is COORDINATOR_LOAD_IN_PROGRESS (retriable). Started again, ZooKeeper gets the
    held commits within seconds. The broker logs the outage once, its end once, and nothing per request."""
    fast = 1.0  # seconds: "at once", with room for a loaded machine
    with BrokerProcess(1, new_chroot(private_zk.connect_string), tmp_path, overrides=GROUP_OVERRIDES) as b:
        topic, group, other = unique("held"), unique("grp"), unique("new")
        with conn_to(b) as c:
            create_topic(c, topic, 3)
        zk = zk_client(b.zk_connect)
        try:
            members = TwoMembers(b, group)
            a, gen, ma = members.a, members.gen, members.ma
            assert commit_errors(a.request(ApiKey.OFFSET_COMMIT, commit_body(group, gen, ma, {(topic, 0): 5}))) == {
                (topic, 0): NONE}  # fmt: skip
            assert zk_offsets(zk, group, topic) == {0: 5}  # written before the answer, while ZooKeeper is up
            assert fetched(fetch_offsets(a, group, {topic: [1]}, 5)) == {(topic, 1): (-1, NONE)}
        finally:
            zk.stop()
            zk.close()

        os.kill(private_zk.pid, signal.SIGKILL)
        private_zk.stop()
        time.sleep(1.0)  # (the broker notices the connection drop)
        for _ in range(3):
            error, took = timed(lambda: heartbeat(a, group, gen, ma))
            assert error == NONE and took < fast
            body = commit_body(group, gen, ma, {(topic, 0): 7, (topic, 2): 9})
            answer, took = timed(lambda body=body: a.request(ApiKey.OFFSET_COMMIT, body))
            assert commit_errors(answer) == {(topic, 0): NONE, (topic, 2): NONE} and took < fast
            assert heartbeat(members.b, group, gen, members.mb) == NONE
        for version in (1, 5):  # held, and read before (none); partition 1 is neither
            answer, took = timed(lambda v=version: fetch_offsets(a, group, {topic: [0, 1, 2]}, v))
            assert took < fast and fetched(answer) == {(topic, 0): (7, NONE), (topic, 1): (-1, NONE),
                                                       (topic, 2): (9, NONE)}, answer  # fmt: skip
        answer = fetch_offsets(a, unique("cold"), {topic: [0]}, 5)  # nothing known of it: the client retries
        assert answer["error_code"] == COORDINATOR_LOAD_IN_PROGRESS
        answer = fetch_offsets(a, unique("cold"), {topic: [0]}, 1)
        assert fetched(answer) == {(topic, 0): (-1, COORDINATOR_LOAD_IN_PROGRESS)}
        with conn_to(b, "newcomer") as c:  # a new group forms without ZooKeeper
            (member, took) = timed(lambda: new_member_id(c, other))
            joined, took2 = timed(lambda: c.request(ApiKey.JOIN_GROUP, join_body(other, member)))
            assert joined["error_code"] == NONE and took + took2 < 2 * fast, joined
            synced, took = timed(lambda: c.request(ApiKey.SYNC_GROUP, sync_body(other, joined["generation_id"],
                                                                                member, {member: b"x"})))  # fmt: skip
            assert synced["error_code"] == NONE and took < fast
            groups, took = timed(lambda: list_groups(c))
            assert {group, other} <= set(groups) and took < fast

        private_zk.start()
        zk = zk_client(b.zk_connect)
        try:
            try:  # (CI once timed out here at 10 s, cause unknown: the broker's log says how its session fared)
                wait_until("the held commits in ZooKeeper",
                           lambda: zk_offsets(zk, group, topic) == {0: 7, 2: 9}, timeout=20)  # fmt: skip
            except AssertionError as e:
                raise AssertionError(f"{e}\n--- broker log ---\n{b.log_text()[-6000:]}") from None
            assert heartbeat(a, group, gen, ma) == NONE
        finally:
            zk.stop()
            zk.close()
        wait_until("the end of the outage logged", lambda: "ZooKeeper back" in b.log_text())
        members.close()
        log = b.log_text()
        assert log.count("ZooKeeper unreachable") == 1 and log.count("ZooKeeper back") == 1, log[-3000:]
        assert "ZooKeeper back after" in log and "wrote 2 held commits" in log, log[-3000:]
        assert "generation failed" not in log, log[-3000:]
