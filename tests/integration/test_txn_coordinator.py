"""The transaction coordinator on real brokers, through raw requests: each API's Kafka errors, the whole path
of a transaction (its records, markers and held offsets), OffsetFetch's require_stable, ListTransactions and
DescribeTransactions; and a coordinator killed -9 mid-transaction on a 3-broker cluster, whose successor takes
the transaction over from ZooKeeper and completes it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from broker.coordinator.group.coordinator import coordinator_for
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.zk import paths
from tests.integration.clientkit import create_topic, unique
from tests.integration.helpers import cli, connect, error_line, json_lines, ok, wait_until, zk_json, zk_session
from tests.integration.test_replication import create, start3
from tests.integration.test_shell_completion import shell_env
from tests.integration.txn_raw import produce_txn, read_values

OPERATION_NOT_ATTEMPTED = 55


def _init(conn, txn_id: str, timeout_ms: int = 60000, version: int = 4) -> dict:
    return conn.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": txn_id, "transaction_timeout_ms": timeout_ms},
                        version)  # fmt: skip


def _add(conn, txn_id: str, pid: int, epoch: int, parts: dict[str, list[int]], version: int = 3) -> dict:
    body = {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
            "topics": [{"name": t, "partitions": ps} for t, ps in parts.items()]}  # fmt: skip
    answer = conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, body, version)
    return {(t["name"], p["partition_index"]): p["error_code"] for t in answer["results"] for p in t["results"]}


def _end(conn, txn_id: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    body = {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch, "committed": commit}
    return conn.request(ApiKey.END_TXN, body, version)["error_code"]


def _describe(conn, txn_id: str) -> dict:
    (state,) = conn.request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [txn_id]})["transaction_states"]
    return state


def test_coordinator_errors_and_a_whole_transaction(shared_broker) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, unique("txc"), partitions=2)
    txn_id = unique("raw-txn")
    with connect(bs) as conn:
        found = conn.request(ApiKey.FIND_COORDINATOR, {"key": txn_id, "key_type": 1}, 3)
        assert (found["error_code"], found["node_id"]) == (0, 1)
        assert _init(conn, txn_id, timeout_ms=900001)["error_code"] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        assert _add(conn, txn_id, 1, 0, {topic: [0]}) == {(topic, 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING}
        assert _describe(conn, txn_id)["error_code"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND

        first = _init(conn, txn_id)
        assert first["error_code"] == 0 and first["producer_epoch"] == 0
        pid = first["producer_id"]
        second = _init(conn, txn_id)
        assert (second["error_code"], second["producer_id"], second["producer_epoch"]) == (0, pid, 1)
        # the fenced epoch: INVALID_PRODUCER_EPOCH before KIP-588's versions, PRODUCER_FENCED from them
        assert _add(conn, txn_id, pid, 0, {topic: [0]}, version=1) == {(topic, 0): ErrorCode.INVALID_PRODUCER_EPOCH}
        assert _add(conn, txn_id, pid, 0, {topic: [0]}, version=2) == {(topic, 0): ErrorCode.PRODUCER_FENCED}
        assert _end(conn, txn_id, pid, 0, True, version=1) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert _end(conn, txn_id, pid + 1, 1, True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert _end(conn, txn_id, pid, 1, True) == ErrorCode.INVALID_TXN_STATE  # (no transaction: Empty)
        # a partition that does not exist: it fails, the others are not attempted
        assert _add(conn, txn_id, pid, 1, {topic: [0, 7]}) == {
            (topic, 0): OPERATION_NOT_ATTEMPTED,
            (topic, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }

        assert _add(conn, txn_id, pid, 1, {topic: [0, 1]}) == {(topic, 0): 0, (topic, 1): 0}
        for p in (0, 1):
            assert produce_txn(conn, txn_id, topic, p, [b"v%d" % p], pid, 1, 0)["error_code"] == 0
        state = _describe(conn, txn_id)
        assert state["transaction_state"] == "Ongoing" and state["transaction_start_time_ms"] > 0
        assert state["topics"] == [{"topic": topic, "partitions": [0, 1]}]
        listed = conn.request(ApiKey.LIST_TRANSACTIONS, {"state_filters": ["Ongoing"], "producer_id_filters": []})
        assert {"transactional_id": txn_id, "producer_id": pid, "transaction_state": "Ongoing"} in \
            listed["transaction_states"]  # fmt: skip
        assert read_values(conn, topic, 0, committed=True) == []  # (open: below the last stable offset, nothing)

        assert _end(conn, txn_id, pid, 1, True) == 0
        assert _end(conn, txn_id, pid, 1, True) == 0  # a retry of a completed commit
        assert _end(conn, txn_id, pid, 1, False) == ErrorCode.INVALID_TXN_STATE
        assert _describe(conn, txn_id)["transaction_state"] == "CompleteCommit"
        assert [read_values(conn, topic, p, committed=True) for p in (0, 1)] == [[b"v0"], [b"v1"]]
        listed = conn.request(ApiKey.LIST_TRANSACTIONS, {"state_filters": ["Nope"], "producer_id_filters": []})
        assert listed["unknown_state_filters"] == ["Nope"] and listed["transaction_states"] == []


def _offset_fetch(conn, group: str, topic: str, stable: bool) -> dict:
    body = {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}], "require_stable": stable}
    (t,) = conn.request(ApiKey.OFFSET_FETCH, body, 7)["topics"]
    (p,) = t["partitions"]
    return p


def test_txn_offset_commit_is_pending_until_the_commit(shared_broker) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, unique("txo"))
    txn_id, group = unique("off-txn"), unique("off-group")
    with connect(bs) as conn:
        init = _init(conn, txn_id)
        pid, epoch = init["producer_id"], init["producer_epoch"]
        body = {"transactional_id": txn_id, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
                "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 42,
                                                           "committed_metadata": "m"}]}]}  # fmt: skip
        (t,) = conn.request(ApiKey.TXN_OFFSET_COMMIT, body, 3)["topics"]
        assert t["partitions"][0]["error_code"] == ErrorCode.INVALID_TXN_STATE  # (AddOffsetsToTxn first)
        add = {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch, "group_id": group}
        assert conn.request(ApiKey.ADD_OFFSETS_TO_TXN, add, 3)["error_code"] == 0
        (t,) = conn.request(ApiKey.TXN_OFFSET_COMMIT, body, 3)["topics"]
        assert t["partitions"][0]["error_code"] == 0
        fenced = {**body, "producer_epoch": epoch - 1}
        (t,) = conn.request(ApiKey.TXN_OFFSET_COMMIT, fenced, 3)["topics"]
        assert t["partitions"][0]["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH

        assert _offset_fetch(conn, group, topic, True)["error_code"] == ErrorCode.UNSTABLE_OFFSET_COMMIT
        assert _offset_fetch(conn, group, topic, False)["committed_offset"] == -1  # (not committed yet)
        assert _end(conn, txn_id, pid, epoch, True) == 0
        got = _offset_fetch(conn, group, topic, True)
        assert (got["error_code"], got["committed_offset"], got["metadata"]) == (0, 42, "m")

        # an aborted transaction's offsets are dropped
        assert conn.request(ApiKey.ADD_OFFSETS_TO_TXN, add, 3)["error_code"] == 0
        (t,) = conn.request(ApiKey.TXN_OFFSET_COMMIT, {**body, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": 99, "committed_metadata": None}]}]}, 3)["topics"]  # fmt: skip
        assert t["partitions"][0]["error_code"] == 0
        assert _end(conn, txn_id, pid, epoch, False) == 0
        got = _offset_fetch(conn, group, topic, True)
        assert (got["error_code"], got["committed_offset"]) == (0, 42)


def _read_committed(bootstrap: str, topic: str, partitions: int, expect: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})  # fmt: skip
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + 60
    quiet = time.monotonic()
    while time.monotonic() < deadline:
        msgs = [m for m in c.consume(500, 0.3) if m.error() is None]
        out.extend(m.value() for m in msgs)
        if msgs:
            quiet = time.monotonic()
        elif len(out) >= expect and time.monotonic() - quiet > 2:
            break
    c.close()
    return out


@pytest.mark.slow
def test_the_coordinator_killed_mid_transaction(start_broker) -> None:
    """kill -9 of the transaction's coordinator between its produces and its commit: the producer's commit
    goes to the new coordinator, which took the Ongoing state over from ZooKeeper, and completes."""
    brokers = start3(start_broker)
    topic = "txn-coordinator-move"
    create(brokers, topic, 3, 3, 2)
    ids = [b.broker_id for b in brokers]
    txn_id = next(f"move-{i}" for i in range(1000) if coordinator_for(f"move-{i}", ids) == 2)  # (not the controller)
    victim = next(b for b in brokers if b.broker_id == 2)
    alive = [b for b in brokers if b is not victim]
    bootstrap = ",".join(b.bootstrap for b in alive)  # (the producer never bootstraps from the victim)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5,
                  "transaction.timeout.ms": 60000, "message.timeout.ms": 60000})  # fmt: skip
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(60):
        p.produce(topic, b"before-%02d" % i, partition=i % 3)
    assert p.flush(30) == 0
    victim.kill()
    for i in range(60):
        p.produce(topic, b"after-%02d" % i, partition=i % 3)
    p.commit_transaction(90)
    new = coordinator_for(txn_id, [b.broker_id for b in alive])
    with connect(next(b.bootstrap for b in alive if b.broker_id == new)) as conn:
        wait_until(lambda: _describe(conn, txn_id)["transaction_state"] == "CompleteCommit", 30, "the commit")
    got = _read_committed(bootstrap, topic, 3, 120)
    assert sorted(got) == sorted([b"before-%02d" % i for i in range(60)] + [b"after-%02d" % i for i in range(60)])
    # and the next transaction, aborted, through the new coordinator
    p.begin_transaction()
    p.produce(topic, b"never", partition=0)
    assert p.flush(30) == 0
    p.abort_transaction(60)
    assert b"never" not in _read_committed(bootstrap, topic, 3, 120)


def test_kafkactl_txn_list_and_describe(shared_broker) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, unique("txcli"), partitions=2)
    done_id, open_id = unique("cli-done"), unique("cli-open")
    with connect(bs) as conn:
        done = _init(conn, done_id)
        assert _add(conn, done_id, done["producer_id"], 0, {topic: [0]}) == {(topic, 0): 0}
        assert _end(conn, done_id, done["producer_id"], 0, True) == 0
        opened = _init(conn, open_id)
        assert _add(conn, open_id, opened["producer_id"], 0, {topic: [0, 1]}) == {(topic, 0): 0, (topic, 1): 0}

    rows = {r["transactional_id"]: r for r in json_lines(ok(cli("txn", "list", "-o", "json", "-b", bs)))}
    assert rows[done_id] == {"transactional_id": done_id, "coordinator": 1, "producer_id": done["producer_id"],
                             "state": "CompleteCommit"}  # fmt: skip
    assert rows[open_id]["state"] == "Ongoing"
    ongoing = json_lines(ok(cli("txn", "list", "--state", "Ongoing", "-o", "json", "-b", bs)))
    assert open_id in {r["transactional_id"] for r in ongoing} and done_id not in {
        r["transactional_id"] for r in ongoing
    }
    text = ok(cli("txn", "list", "-b", bs))
    assert text.splitlines()[0].split("\t") == ["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"]
    assert f"{open_id}\t1\t{opened['producer_id']}\tOngoing" in text

    (d,) = json_lines(ok(cli("txn", "describe", open_id, "-o", "json", "-b", bs)))
    assert d["state"] == "Ongoing" and d["producer_epoch"] == 0 and d["timeout_ms"] == 60000 and d["start_time_ms"] > 0
    assert d["partitions"] == [{"topic": topic, "partition": 0}, {"topic": topic, "partition": 1}]
    assert f"{topic}-0,{topic}-1" in ok(cli("txn", "describe", open_id, "-b", bs))
    error_line(cli("txn", "describe", "no-such-txn-id", "-b", bs), "not found")
    error_line(cli("txn", "list", "--state", "Bogus", "-b", bs), "unknown transaction state 'Bogus'")

    # the shell completes `txn describe`'s id from the coordinators' ids
    prefix = open_id[: len("cli-open")]
    env = {**shell_env(bs), "COMP_WORDS": f"kafkactl txn describe {prefix}", "COMP_CWORD": "3",
           "_KAFKACTL_COMPLETE": "complete_bash"}  # fmt: skip
    r = subprocess.run([sys.executable, "-m", "kafkactl"], capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 0 and r.stderr == "", r
    assert open_id in r.stdout.split() and done_id not in r.stdout.split()


def test_init_producer_id_with_the_producers_own_id_and_epoch(shared_broker) -> None:
    """KIP-360 (InitProducerId v3+ naming the producer's id and epoch): the current epoch is bumped, a retry
    naming the previous epoch gets the same answer again, anything else is PRODUCER_FENCED."""
    txn_id = unique("kip360")
    with connect(shared_broker.bootstrap) as conn:
        first = _init(conn, txn_id)
        pid = first["producer_id"]

        def init(epoch: int, who: int = pid) -> tuple[int, int, int]:
            body = {"transactional_id": txn_id, "transaction_timeout_ms": 60000, "producer_id": who,
                    "producer_epoch": epoch}  # fmt: skip
            a = conn.request(ApiKey.INIT_PRODUCER_ID, body, 4)
            return a["error_code"], a["producer_id"], a["producer_epoch"]

        assert init(0) == (0, pid, 1)
        assert init(0) == (0, pid, 1)  # a retry: the same epoch again, not another bump
        assert init(1) == (0, pid, 2)
        assert init(5)[0] == ErrorCode.PRODUCER_FENCED
        assert init(2, who=pid + 1000)[0] == ErrorCode.PRODUCER_FENCED


def test_a_prepare_state_left_behind_is_completed_by_the_next_coordinator(start_broker, zk_chroot) -> None:
    """A coordinator that stopped right after writing PrepareCommit (made here by writing the state a
    coordinator writes, with the broker down): the broker that coordinates the id next finishes it at start-up, writing
    the markers, so the records become readable read_committed and the id is CompleteCommit."""
    b = start_broker(1)
    topic = create_topic(b.bootstrap, unique("prep"))
    txn_id = unique("prepared")
    with connect(b.bootstrap) as conn:
        init = _init(conn, txn_id)
        pid = init["producer_id"]
        assert _add(conn, txn_id, pid, 0, {topic: [0]}) == {(topic, 0): 0}
        assert produce_txn(conn, txn_id, topic, 0, [b"p0", b"p1"], pid, 0, 0)["error_code"] == 0
    b.stop()
    with zk_session(zk_chroot) as zk:
        path = paths.transaction(txn_id)
        state = zk_json(zk, path)
        assert state["state"] == "Ongoing" and state["partitions"] == [[topic, 0]]
        zk.set(path, json.dumps({**state, "state": "PrepareCommit"}).encode())
    b.start()
    with connect(b.bootstrap) as conn:
        wait_until(lambda: _describe(conn, txn_id)["transaction_state"] == "CompleteCommit", 30, "the completion")
        wait_until(lambda: read_values(conn, topic, 0, committed=True) == [b"p0", b"p1"], 10, "the records")
