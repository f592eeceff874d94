"""The partition side of transactions (KIP-98) on real brokers, driven by raw protocol: transactional batches,
WriteTxnMarkers as a coordinator sends them, the last stable offset, read_committed fetches with their aborted
lists, fencing, restarts, a follower taking over, and what kafkactl and third-party consumers read."""

from __future__ import annotations

import time

import pytest

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from tests.integration.clientkit import create_topic, unique
from tests.integration.helpers import cli, connect, json_lines, metadata, ok, wait_until
from tests.integration.txn_raw import batches_of, fetch, produce_txn, read_values, write_markers

PID, PID2 = 4000, 4001


def _values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


def _list_latest(conn, topic: str, committed: bool) -> int:
    body = {"replica_id": -1, "isolation_level": 1 if committed else 0,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                       "timestamp": -1}]}]}  # fmt: skip
    (t,) = conn.request(ApiKey.LIST_OFFSETS, body)["topics"]
    (p,) = t["partitions"]
    assert p["error_code"] == 0, p
    return p["offset"]


def _interleaved(conn, topic: str) -> tuple[list[bytes], list[bytes]]:
    """Two producers' transactions on partition 0: PID commits 2 batches, PID2 aborts 2 batches, interleaved;
    returns (committed values, aborted values)."""
    committed, aborted = _values("c", 3) + _values("c2", 2), _values("a", 2) + _values("a2", 4)
    assert produce_txn(conn, "t1", topic, 0, committed[:3], PID, 0, 0)["error_code"] == 0
    assert produce_txn(conn, "t2", topic, 0, aborted[:2], PID2, 0, 0)["error_code"] == 0
    assert produce_txn(conn, "t1", topic, 0, committed[3:], PID, 0, 3)["error_code"] == 0
    assert produce_txn(conn, "t2", topic, 0, aborted[2:], PID2, 0, 2)["error_code"] == 0
    return committed, aborted


def test_commit_and_abort_as_read_committed_and_read_uncommitted_see_them(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("txn"))
    with connect(shared_broker.bootstrap) as conn:
        committed, aborted = _interleaved(conn, topic)
        # open transactions hold the last stable offset at the first one's first offset
        p = fetch(conn, topic, 0, committed=True)
        assert (p["high_watermark"], p["last_stable_offset"]) == (11, 0)
        assert not p["records"]
        assert read_values(conn, topic, 0, committed=False) == committed[:3] + aborted[:2] + committed[3:] + aborted[2:]
        assert (_list_latest(conn, topic, True), _list_latest(conn, topic, False)) == (0, 11)

        assert write_markers(conn, PID, 0, True, 0, [(topic, 0)]) == {(topic, 0): 0}  # commit at offset 11
        p = fetch(conn, topic, 0, committed=True)
        assert p["last_stable_offset"] == 3  # PID2's transaction (from offset 3) is still open
        assert [r.value for _, rs in batches_of(p["records"]) for r in rs] == committed[:3]

        assert write_markers(conn, PID2, 0, False, 0, [(topic, 0)]) == {(topic, 0): 0}  # abort at offset 12
        p = fetch(conn, topic, 0, committed=True)
        assert (p["high_watermark"], p["last_stable_offset"]) == (13, 13)
        assert p["aborted_transactions"] == [{"producer_id": PID2, "first_offset": 3}]
        assert read_values(conn, topic, 0, committed=True) == committed
        assert _list_latest(conn, topic, True) == 13
        # read_uncommitted sees every data record, never a control batch as one
        assert read_values(conn, topic, 0, committed=False) == committed[:3] + aborted[:2] + committed[3:] + aborted[2:]
        markers = [h for h, _ in batches_of(fetch(conn, topic, 0)["records"]) if h.is_control]
        assert [(h.base_offset, h.producer_id, h.is_transactional, h.base_sequence) for h in markers] == [
            (11, PID, True, -1), (12, PID2, True, -1)]  # fmt: skip


def test_markers_are_refused_from_a_stale_coordinator_or_an_old_producer_epoch(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("fence"))
    with connect(shared_broker.bootstrap) as conn:
        assert produce_txn(conn, "t", topic, 0, [b"x"], PID, 3, 0)["error_code"] == 0
        assert write_markers(conn, PID, 3, True, 5, [(topic, 0)]) == {(topic, 0): 0}
        assert produce_txn(conn, "t", topic, 0, [b"y"], PID, 3, 1)["error_code"] == 0
        # a coordinator with an older epoch than the last marker's is fenced; the transaction stays open
        assert write_markers(conn, PID, 3, False, 4, [(topic, 0)]) == {
            (topic, 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED
        }
        assert fetch(conn, topic, 0, committed=True)["last_stable_offset"] == 2
        # a new producer epoch's abort (the coordinator fenced the producer) closes it and raises the epoch
        assert write_markers(conn, PID, 4, False, 6, [(topic, 0)]) == {(topic, 0): 0}
        assert fetch(conn, topic, 0, committed=True)["last_stable_offset"] == 4
        zombie = produce_txn(conn, "t", topic, 0, [b"z"], PID, 3, 2)
        assert zombie["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH
        assert write_markers(conn, PID, 3, True, 7, [(topic, 0)]) == {(topic, 0): ErrorCode.INVALID_PRODUCER_EPOCH}
        # the new epoch writes from sequence 0; a repeated marker is answered and not written again
        assert produce_txn(conn, "t", topic, 0, [b"w"], PID, 4, 0)["error_code"] == 0
        assert write_markers(conn, PID, 4, True, 6, [(topic, 0)]) == {(topic, 0): 0}
        assert write_markers(conn, PID, 4, True, 6, [(topic, 0)], version=1) == {(topic, 0): 0}
        assert fetch(conn, topic, 0)["high_watermark"] == 6
        assert read_values(conn, topic, 0, committed=True) == [b"x", b"w"]
        # transactional batches need a transactional id; a producer in a transaction writes only transactional ones
        assert produce_txn(conn, None, topic, 0, [b"v"], PID2, 0, 0)["error_code"] == (
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        )
        assert produce_txn(conn, "t", topic, 0, [b"v"], PID, 4, 1)["error_code"] == 0
        plain = produce_txn(conn, None, topic, 0, [b"u"], PID, 4, 2, transactional=False)
        assert plain["error_code"] == ErrorCode.INVALID_TXN_STATE
        # DescribeProducers tells the open transaction and the coordinator epoch
        body = {"topics": [{"name": topic, "partition_indexes": [0]}]}
        (t,) = conn.request(ApiKey.DESCRIBE_PRODUCERS, body)["topics"]
        (prod,) = [a for a in t["partitions"][0]["active_producers"] if a["producer_id"] == PID]
        assert (prod["producer_epoch"], prod["coordinator_epoch"], prod["current_txn_start_offset"]) == (4, 6, 6)


def _state_after(conn, topic: str) -> tuple[int, int, list[dict[str, int]], list[bytes]]:
    """(high watermark, LSO, aborted list from 0, read_committed values) of partition 0."""
    p = fetch(conn, topic, 0, committed=True)
    assert p["error_code"] == 0, p
    return p["high_watermark"], p["last_stable_offset"], p["aborted_transactions"], read_values(
        conn, topic, 0, committed=True)  # fmt: skip


def _aborted_then_open(conn, topic: str) -> None:
    """PID aborts offsets 0-1 (marker 2), commits 3-4 (marker 5); PID2 opens a transaction at 6."""
    assert produce_txn(conn, "t", topic, 0, [b"a0", b"a1"], PID, 0, 0)["error_code"] == 0
    assert write_markers(conn, PID, 0, False, 0, [(topic, 0)]) == {(topic, 0): 0}
    assert produce_txn(conn, "t", topic, 0, [b"c0", b"c1"], PID, 0, 2)["error_code"] == 0
    assert write_markers(conn, PID, 0, True, 0, [(topic, 0)]) == {(topic, 0): 0}
    assert produce_txn(conn, "t2", topic, 0, [b"o0"], PID2, 0, 0)["error_code"] == 0


FAST_SESSION = {"zookeeper.session.timeout.ms": "6000"}  # a killed broker's registration goes sooner


@pytest.mark.parametrize("how", ["clean", pytest.param("kill -9", marks=pytest.mark.slow)])
def test_a_restart_keeps_the_open_transaction_and_the_aborted_index(start_broker, how):
    b = start_broker(1, FAST_SESSION)
    topic = create_topic(b.bootstrap, unique("restart"))
    with connect(b.bootstrap) as conn:
        _aborted_then_open(conn, topic)
        before = _state_after(conn, topic)
    assert before == (7, 6, [{"producer_id": PID, "first_offset": 0}], [b"c0", b"c1"])
    b.stop() if how == "clean" else b.kill()
    b.start()

    def answered():
        with connect(b.bootstrap) as conn:
            return _state_after(conn, topic)

    assert wait_until(lambda: _quietly(answered), 30, "the restarted broker leading") == before
    with connect(b.bootstrap) as conn:  # the open transaction is still there to close, with its sequence
        assert produce_txn(conn, "t2", topic, 0, [b"o1"], PID2, 0, 1)["error_code"] == 0
        assert write_markers(conn, PID2, 0, True, 0, [(topic, 0)]) == {(topic, 0): 0}
        assert read_values(conn, topic, 0, committed=True) == [b"c0", b"c1", b"o0", b"o1"]


def _quietly(fn):
    try:
        return fn()
    except AssertionError:
        return None
    except Exception:
        return None


@pytest.mark.slow
def test_a_follower_taking_over_has_the_same_lso_and_aborted_list(start_broker):
    cluster3 = [start_broker(i, FAST_SESSION) for i in (1, 2, 3)]
    topic = unique("follow")
    ok(cli("topic", "create", topic, "-p", 1, "-r", 3, "-b", cluster3[0].bootstrap))
    md = wait_until(lambda: _leader_with_isr(cluster3[0].bootstrap, topic, 3), 30, "three in-sync replicas")
    leader = next(b for b in cluster3 if b.broker_id == md)
    with connect(leader.bootstrap) as conn:
        _aborted_then_open(conn, topic)
        before = _state_after(conn, topic)
    assert before[:3] == (7, 6, [{"producer_id": PID, "first_offset": 0}])
    time.sleep(0.5)  # the followers fetch what the high watermark already counts
    leader.kill()
    others = [b for b in cluster3 if b is not leader]

    def new_leader_state():
        new = _leader_with_isr(others[0].bootstrap, topic, 1)
        if new in (None, leader.broker_id):
            return None
        with connect(next(b for b in others if b.broker_id == new).bootstrap) as conn:
            state = _state_after(conn, topic)
            return (new, state) if state[0] == before[0] else None  # (a new leader's high watermark catches up)

    new, after = wait_until(lambda: _quietly(new_leader_state), 40, "a new leader")
    assert after == before
    with connect(next(b for b in others if b.broker_id == new).bootstrap) as conn:
        # its producer state came from the copied batches: the open transaction goes on, and closes
        assert produce_txn(conn, "t2", topic, 0, [b"o1"], PID2, 0, 1)["error_code"] == 0
        assert write_markers(conn, PID2, 0, False, 1, [(topic, 0)]) == {(topic, 0): 0}
        assert _state_after(conn, topic)[1:] == (
            9,
            [{"producer_id": PID, "first_offset": 0}, {"producer_id": PID2, "first_offset": 6}],
            [b"c0", b"c1"],
        )


def _leader_with_isr(bootstrap: str, topic: str, isr: int) -> int | None:
    md = metadata(bootstrap, [topic])
    (t,) = [t for t in md["topics"] if t["name"] == topic]
    if t["error_code"] or not t["partitions"]:
        return None
    p = t["partitions"][0]
    return p["leader_id"] if p["leader_id"] >= 0 and len(p["isr_nodes"]) >= isr else None


def test_kafkactl_consume_isolation_and_inspect_segments(broker):
    topic = create_topic(broker.bootstrap, unique("cli"))
    with connect(broker.bootstrap) as conn:
        _aborted_then_open(conn, topic)
    b = broker.bootstrap
    committed = json_lines(ok(cli("consume", topic, "--isolation", "read-committed", "-o", "json", "-b", b)))
    assert [(r["offset"], r["value"]) for r in committed] == [(3, "c0"), (4, "c1")]
    everything = json_lines(ok(cli("consume", topic, "-o", "json", "-b", b)))
    assert [r["value"] for r in everything] == ["a0", "a1", "c0", "c1", "o0"]  # never a marker
    assert "expected read-uncommitted or read-committed" in cli("consume", topic, "--isolation", "x", "-b", b).stderr
    part = broker.log_dir / f"{topic}-0"
    text = ok(cli("inspect", "segments", part))
    batches = [ln for ln in text.splitlines() if ln.startswith("base_offset")]
    assert len(batches) == 5
    assert "control: true" in batches[1] and "marker: ABORT coordinator_epoch: 0" in batches[1]
    assert "marker: COMMIT coordinator_epoch: 0" in batches[3]
    assert "transactional: true" in batches[4] and "control" not in batches[4]
    assert f"producer_id: {PID} first_offset: 0 last_offset: 2" in text


def _confluent_values(bootstrap: str, topic: str, want: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("ck"),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )  # (isolation.level: read_committed, librdkafka's default)
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[bytes] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191 and len(out) >= want:  # _PARTITION_EOF
                    break
                continue
            out.append(m.value())
        return out
    finally:
        c.close()


def _kafka_python_values(bootstrap: str, topic: str) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False,
                      consumer_timeout_ms=3000)  # fmt: skip
    try:
        c.assign([TopicPartition(topic, 0)])
        c.seek_to_beginning()
        return [m.value for m in c]
    finally:
        c.close()


def _aiokafka_values(bootstrap: str, topic: str, want: int) -> list[bytes]:
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> list[bytes]:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False, auto_offset_reset="earliest")  # fmt: skip
        await c.start()
        try:
            c.assign([TopicPartition(topic, 0)])
            await c.seek_to_beginning()
            out: list[bytes] = []
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and len(out) < want:
                for msgs in (await c.getmany(timeout_ms=500)).values():
                    out += [m.value for m in msgs]
            await asyncio.sleep(1)  # nothing more comes (the aborted records stay away)
            for msgs in (await c.getmany(timeout_ms=500)).values():
                out += [m.value for m in msgs]
            return out
        finally:
            await c.stop()

    return asyncio.run(run())


def test_third_party_read_committed_consumers_read_only_committed_data(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("clients"))
    with connect(shared_broker.bootstrap) as conn:
        committed, _ = _interleaved(conn, topic)
        assert write_markers(conn, PID, 0, True, 0, [(topic, 0)]) == {(topic, 0): 0}
        assert write_markers(conn, PID2, 0, False, 0, [(topic, 0)]) == {(topic, 0): 0}
        assert produce_txn(conn, "t3", topic, 0, [b"open"], PID + 10, 0, 0)["error_code"] == 0  # stays open
    bs = shared_broker.bootstrap
    assert _confluent_values(bs, topic, len(committed)) == committed
    assert _kafka_python_values(bs, topic) == committed
    assert _aiokafka_values(bs, topic, len(committed)) == committed


def test_the_spark_source_reads_committed_data_up_to_the_last_stable_offset(shared_broker):
    """spark-load's planning and reading (no Spark needed for them): ranges end at the LSO, aborted
    transactions' records and markers never come out."""
    from broker.spark.ranges import OffsetRange, plan_ranges
    from broker.spark.read import read_range

    topic = create_topic(shared_broker.bootstrap, unique("spark"))
    with connect(shared_broker.bootstrap) as conn:
        committed, _ = _interleaved(conn, topic)
        assert write_markers(conn, PID, 0, True, 0, [(topic, 0)]) == {(topic, 0): 0}
        assert write_markers(conn, PID2, 0, False, 0, [(topic, 0)]) == {(topic, 0): 0}
        assert produce_txn(conn, "t3", topic, 0, [b"open"], PID + 10, 0, 0)["error_code"] == 0  # offset 13
    assert plan_ranges(shared_broker.bootstrap, {"subscribe": topic}) == [OffsetRange(topic, 0, 0, 13)]
    got = [v for b in read_range(shared_broker.bootstrap, OffsetRange(topic, 0, 0, 13))
           for v in b.column("value").to_pylist()]  # fmt: skip
    assert got == committed


def test_markers_need_cluster_action_and_transactional_batches_write_on_the_transactional_id(start_broker, zk_chroot):
    """With the authorizer on (as Kafka's KafkaApis): WriteTxnMarkers needs ClusterAction on the cluster, a
    Produce of transactional batches Write on its TransactionalId; alice (SCRAM) has neither at first."""
    from broker.client.connection import Connection
    from broker.client.security import ClientSecurity
    from broker.daemon import free_port
    from broker.security import credentials
    from broker.security.scram import make_credential
    from tests.integration.helpers import zk_session

    with zk_session(zk_chroot) as zk:
        credentials.write_user(zk, "alice", {"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", "alice-secret")})
    port, sasl_port = free_port(), free_port()
    b = start_broker(1, {
        "listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "inter.broker.listener.name": "PLAINTEXT", "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS", "allow.everyone.if.no.acl.found": "false"}, port=port)  # fmt: skip
    topic = create_topic(b.bootstrap, unique("acl"))
    ok(cli("acl", "add", "--allow-principal", "User:alice", "--operation", "Write", "--topic", topic,
           "-b", b.bootstrap))  # fmt: skip
    sec = ClientSecurity(protocol="SASL_PLAINTEXT", mechanism="SCRAM-SHA-256", username="alice",
                         password="alice-secret")  # fmt: skip

    def alice() -> Connection:
        return Connection("127.0.0.1", sasl_port, client_id="alice", timeout=15, security=sec)

    with alice() as conn:
        assert write_markers(conn, PID, 0, True, 0, [(topic, 0)]) == {
            (topic, 0): ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        }
        assert produce_txn(conn, "tx-a", topic, 0, [b"x"], PID, 0, 0)["error_code"] == (
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        )
    ok(cli("acl", "add", "--allow-principal", "User:alice", "--operation", "Write", "--transactional-id", "tx-a",
           "-b", b.bootstrap))  # fmt: skip
    ok(cli("acl", "add", "--allow-principal", "User:alice", "--operation", "ClusterAction", "--cluster",
           "-b", b.bootstrap))  # fmt: skip
    wait_until(lambda: _quietly(lambda: _alice_writes(alice, topic)), 10, "alice's grants in force")
    with connect(b.bootstrap) as conn:
        assert read_values(conn, topic, 0, committed=True) == [b"x"]


def _alice_writes(alice, topic: str) -> bool:
    with alice() as conn:
        assert produce_txn(conn, "tx-a", topic, 0, [b"x"], PID, 0, 0)["error_code"] == 0
        assert write_markers(conn, PID, 0, True, 0, [(topic, 0)]) == {(topic, 0): 0}
    return True


def test_a_waiting_read_committed_fetch_wakes_when_a_marker_moves_the_lso(shared_broker):
    import threading

    topic = create_topic(shared_broker.bootstrap, unique("wake"))
    with connect(shared_broker.bootstrap) as conn:
        assert produce_txn(conn, "t", topic, 0, [b"x", b"y"], PID, 0, 0)["error_code"] == 0
    got: dict[str, object] = {}

    def waiting_fetch() -> None:
        with connect(shared_broker.bootstrap) as c:
            t0 = time.monotonic()
            got["answer"] = fetch(c, topic, 0, committed=True, max_wait_ms=8000)
            got["seconds"] = time.monotonic() - t0

    th = threading.Thread(target=waiting_fetch)
    th.start()
    time.sleep(0.5)  # the fetch waits in the purgatory: nothing below the LSO (0)
    with connect(shared_broker.bootstrap) as conn:
        assert write_markers(conn, PID, 0, True, 0, [(topic, 0)]) == {(topic, 0): 0}
    th.join(15)
    answer = got["answer"]
    assert isinstance(answer, dict) and answer["last_stable_offset"] == 3
    assert [r.value for h, rs in batches_of(answer["records"]) if not h.is_control for r in rs] == [b"x", b"y"]
    assert got["seconds"] < 4, got["seconds"]


@pytest.mark.slow
def test_after_kill_9_a_transaction_begun_segments_back_stays_open_and_aborts_whole(start_broker):
    """Start-up reads the producers from the newest snapshot (one at each roll) or the log start, never only the
    active segment's tail: the open transaction whose first batch lies several segments back holds the last
    stable offset after a kill -9, and its abort hides its records from read_committed."""
    b = start_broker(1, FAST_SESSION)
    topic = create_topic(b.bootstrap, unique("segs"), config={"segment.bytes": "4096"})
    plain = [b"p%03d" % i + b"." * 1000 for i in range(24)]
    with connect(b.bootstrap) as conn:
        assert produce_txn(conn, "t", topic, 0, [b"x0"], PID, 0, 0)["error_code"] == 0  # open at offset 0
        for i, v in enumerate(plain):
            assert produce_txn(conn, None, topic, 0, [v], -1, -1, -1, transactional=False)["error_code"] == 0
            if i == 12:  # another producer's transaction, committed between
                assert produce_txn(conn, "t2", topic, 0, [b"c0"], PID2, 0, 0)["error_code"] == 0
                assert write_markers(conn, PID2, 0, True, 0, [(topic, 0)]) == {(topic, 0): 0}
        hw, lso, _, _ = _state_after(conn, topic)
    assert (hw, lso) == (27, 0)
    b.kill()
    b.start()

    def restarted():
        with connect(b.bootstrap) as conn:
            return _state_after(conn, topic)[:2]

    assert wait_until(lambda: _quietly(restarted), 30, "the restarted broker leading") == (27, 0)
    with connect(b.bootstrap) as conn:
        assert write_markers(conn, PID, 0, False, 0, [(topic, 0)]) == {(topic, 0): 0}
        hw, lso, aborted, committed = _state_after(conn, topic)
        assert (hw, lso, aborted) == (28, 28, [{"producer_id": PID, "first_offset": 0}])
        assert committed == plain[:13] + [b"c0"] + plain[13:]
        assert b"x0" in read_values(conn, topic, 0, committed=False)
