"""Three real brokers in one cluster: registration in ZooKeeper, partition spread, routing to leaders, and
what the others say when one broker stops.

The read-only tests share one module-wide cluster (each with its own topics); the test that stops a
broker has a cluster of its own (`cluster3`).
"""

from __future__ import annotations

import re
import subprocess

import pytest

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.fetch import LATEST
from broker.zk import paths, registry
from tests.integration.helpers import (
    cli,
    connect,
    controller_of,
    fetch,
    fetch_body,
    json_lines,
    kcat_produce,
    leaders,
    log_files_size,
    make_batch,
    metadata,
    ok,
    partition_dirs,
    produce,
    produce_body,
    records_of,
    running_cluster,
    tsv,
    wait_until,
    zk_json,
    zk_session,
)

NOT_LEADER = ErrorCode.NOT_LEADER_OR_FOLLOWER  # 6
LEADER_NOT_AVAILABLE = ErrorCode.LEADER_NOT_AVAILABLE  # 5


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    with running_cluster(zk_server.connect_string, tmp_path_factory.mktemp("cluster3")) as brokers:
        yield brokers


def by_id(brokers) -> dict:
    return {b.broker_id: b for b in brokers}


def assignment(zk_connect: str, topic: str) -> dict[int, list[int]]:
    with zk_session(zk_connect) as zk:
        return {int(p): r for p, r in zk_json(zk, f"/brokers/topics/{topic}")["partitions"].items()}


def create_and_lead(brokers, topic: str, partitions: int, bootstrap: str, zk_connect: str) -> dict[int, int]:
    """Create a topic with the CLI and wait until every broker knows its leaders; {partition: leader}."""
    ok(cli("topic", "create", topic, "-p", str(partitions), "-b", bootstrap))
    lead = {p: r[0] for p, r in assignment(zk_connect, topic).items()}
    wait_same_leaders(brokers, topic, lead)
    return lead


def wait_same_leaders(brokers, topic: str, expected: dict[int, int]) -> None:
    """Until every broker's Metadata names `expected` leaders for `topic` (brokers learn topics by watches)."""
    for b in brokers:
        wait_until(lambda b=b: leaders(metadata(b.bootstrap, [topic]), topic) == expected, 10,
                   f"broker {b.broker_id} sees the leaders of {topic}")  # fmt: skip


# --- registration ----------------------------------------------------------------------------------


def test_registration_znodes(cluster):
    zk_connect = cluster[0].zk_connect
    with zk_session(zk_connect) as zk:
        assert sorted(zk.get_children("/brokers/ids"), key=int) == ["1", "2", "3"]
        owners = set()
        for b in cluster:
            data, stat = zk.get(f"/brokers/ids/{b.broker_id}")
            reg = zk_json(zk, f"/brokers/ids/{b.broker_id}")
            assert stat.ephemeralOwner != 0
            owners.add(stat.ephemeralOwner)
            assert reg["version"] == 5
            assert (reg["host"], reg["port"], reg["jmx_port"]) == ("127.0.0.1", b.port, -1)
            assert reg["endpoints"] == [f"PLAINTEXT://127.0.0.1:{b.port}"]
            assert reg["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
            assert reg["rack"] is None
            assert reg["features"] == {}
            assert re.fullmatch(r"\d{13}", reg["timestamp"]), reg
        assert len(owners) == 3  # one session per broker

        cluster_id = zk_json(zk, "/cluster/id")
        assert cluster_id["version"] == "1"
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id["id"]), cluster_id

        ctrl = zk_json(zk, "/controller")
        assert ctrl["version"] == 1
        assert ctrl["brokerid"] in (1, 2, 3)
        assert re.fullmatch(r"\d{13}", ctrl["timestamp"]), ctrl
        _, stat = zk.get("/controller")
        assert stat.ephemeralOwner != 0
        epoch, _ = zk.get("/controller_epoch")
        assert int(epoch) >= 1

    for b in cluster:  # every broker tells the same story
        md = metadata(b.bootstrap)
        assert md["cluster_id"] == cluster_id["id"]
        assert md["controller_id"] == ctrl["brokerid"]
        assert [(x["node_id"], x["host"], x["port"]) for x in md["brokers"]] == [
            (c.broker_id, "127.0.0.1", c.port) for c in cluster
        ]


# --- spread ----------------------------------------------------------------------------------------


def test_six_partitions_with_two_replicas_spread_as_kafka_places_them(cluster):
    ok(cli("topic", "create", "spread", "-p", "6", "-r", "2", "-b", cluster[0].bootstrap))
    zk_connect = cluster[0].zk_connect
    replicas = assignment(zk_connect, "spread")
    assert sorted(replicas) == list(range(6))
    for p, reps in replicas.items():
        assert len(reps) == 2 and len(set(reps)) == 2 and set(reps) <= {1, 2, 3}, (p, reps)
    lead = {p: reps[0] for p, reps in replicas.items()}
    order = [1, 2, 3]
    for p in range(5):  # round-robin: each next partition leads on the next broker
        assert lead[p + 1] == order[(order.index(lead[p]) + 1) % 3], lead
    assert sorted(list(lead.values()).count(i) for i in (1, 2, 3)) == [2, 2, 2]
    # Kafka's placement: the follower's distance from the leader is one per round of 3 partitions, shifted by one
    # each round, so the two partitions a broker leads have different followers: its death spreads them
    distance = {p: (order.index(reps[1]) - order.index(reps[0])) % 3 for p, reps in replicas.items()}
    assert distance[0] == distance[1] == distance[2] != distance[3] == distance[4] == distance[5], replicas
    for b in order:
        assert len({reps[1] for reps in replicas.values() if reps[0] == b}) == 2, replicas

    with zk_session(zk_connect) as zk:
        for p, reps in replicas.items():
            state = zk_json(zk, f"/brokers/topics/spread/partitions/{p}/state")
            assert (state["leader"], state["leader_epoch"], state["isr"]) == (reps[0], 0, reps)  # every replica in sync

    wait_same_leaders(cluster, "spread", lead)
    for b in cluster:  # describe through any broker shows the same
        (doc,) = json_lines(ok(cli("topic", "describe", "spread", "-o", "json", "-b", b.bootstrap)))
        assert [(p["partition"], p["leader"], p["replicas"], p["isr"], p["log_end_offset"], p["error"])
                for p in doc["partitions"]] == [
            (p, replicas[p][0], replicas[p], replicas[p], 0, None) for p in range(6)
        ]  # fmt: skip


# --- any broker bootstraps a client ----------------------------------------------------------------


def test_clients_bootstrap_from_any_broker(cluster):
    b1, b2, b3 = cluster
    lead = create_and_lead(cluster, "anywhere", 3, b2.bootstrap, b1.zk_connect)
    assert sorted(lead.values()) == [1, 2, 3]

    for b in cluster:
        md = metadata(b.bootstrap, ["anywhere"])
        assert sorted(x["node_id"] for x in md["brokers"]) == [1, 2, 3]

    counts = {0: 3, 1: 4, 2: 5}
    for p, n in counts.items():  # kcat knows only broker 3 and finds each leader from its metadata
        kcat_produce(b3.bootstrap, "anywhere", p, [f"v{p}-{i}" for i in range(n)])
    out = subprocess.run(
        ["/usr/bin/kcat", "-C", "-b", b1.bootstrap, "-t", "anywhere", "-o", "beginning", "-e", "-q", "-f", "%p %s\\n"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    got = sorted(out.stdout.split("\n")[:-1])
    assert got == sorted(f"{p} v{p}-{i}" for p, n in counts.items() for i in range(n))

    docs = [json_lines(ok(cli("topic", "describe", "anywhere", "-o", "json", "-b", b.bootstrap)))[0] for b in cluster]
    assert docs[0] == docs[1] == docs[2]
    by_broker = by_id(cluster)
    for p in docs[0]["partitions"]:
        i = p["partition"]
        assert (p["leader"], p["log_end_offset"]) == (lead[i], counts[i])
        assert p["size"] == log_files_size(by_broker[lead[i]].log_dir / f"anywhere-{i}")


# --- requests to a broker that does not lead the partition -----------------------------------------


def test_produce_and_fetch_to_a_non_leader_get_not_leader_or_follower(cluster):
    ok(cli("topic", "create", "routing", "-p", "3", "-r", "2", "-b", cluster[0].bootstrap))
    replicas = assignment(cluster[0].zk_connect, "routing")
    lead = {p: r[0] for p, r in replicas.items()}
    wait_same_leaders(cluster, "routing", lead)
    brokers = by_id(cluster)

    for p in range(3):
        leader = brokers[lead[p]]
        others = [b for b in cluster if b.broker_id != lead[p]]
        follower = next(b for b in others if b.broker_id in replicas[p])  # a replica, but not the leader
        stranger = next(b for b in others if b.broker_id not in replicas[p])  # holds no replica at all
        batch = make_batch([f"p{p}-a".encode(), f"p{p}-b".encode()])
        for wrong in (follower, stranger):
            with connect(wrong.bootstrap) as conn:
                (t,) = conn.request(ApiKey.PRODUCE, produce_body("routing", p, batch))["topics"]
                (answer,) = t["partitions"]
                assert (answer["index"], answer["error_code"], answer["base_offset"]) == (p, NOT_LEADER, -1)
                (t,) = conn.request(ApiKey.FETCH, fetch_body("routing", p))["topics"]
                (answer,) = t["partitions"]
                assert answer["error_code"] == NOT_LEADER, answer
                assert not answer["records"]
                body = {
                    "replica_id": -1,
                    "isolation_level": 0,
                    "topics": [{"name": "routing", "partitions": [{"partition_index": p, "timestamp": LATEST}]}],
                }
                (t,) = conn.request(ApiKey.LIST_OFFSETS, body)["topics"]
                assert t["partitions"][0]["error_code"] == NOT_LEADER
            assert log_files_size(wrong.log_dir / f"routing-{p}") == 0  # nothing appended there

        with connect(leader.bootstrap) as conn:  # the same batch to the leader is taken
            (t,) = conn.request(ApiKey.PRODUCE, produce_body("routing", p, batch))["topics"]
            (answer,) = t["partitions"]
            assert (answer["error_code"], answer["base_offset"]) == (0, 0), answer
            assert produce(conn, "routing", p, [b"third"])["base_offset"] == 2
            # acks=1: consumers see it once the follower has copied it (the high watermark reaches 3)
            got = wait_until(lambda conn=conn, p=p: (g := fetch(conn, "routing", p))["high_watermark"] == 3 and g, 10,
                             "the follower's copy")  # fmt: skip
            assert got["error_code"] == 0
            assert [r.value for r in records_of(got["records"])] == [f"p{p}-a".encode(), f"p{p}-b".encode(), b"third"]
            assert [r.offset for r in records_of(got["records"])] == [0, 1, 2]


# --- a broker leaves -------------------------------------------------------------------------------


def test_a_cleanly_stopped_broker_leaves_the_cluster(cluster3, zk_chroot):
    ok(cli("topic", "create", "orphans", "-p", "6", "-b", cluster3[0].bootstrap))
    lead = {p: r[0] for p, r in assignment(zk_chroot, "orphans").items()}
    assert sorted(lead.values()) == [1, 1, 2, 2, 3, 3]
    wait_same_leaders(cluster3, "orphans", lead)
    with zk_session(zk_chroot) as zk:
        controller = zk_json(zk, "/controller")["brokerid"]

    victim = by_id(cluster3)[controller]  # the controller itself goes: another must take over
    survivors = [b for b in cluster3 if b is not victim]
    live = sorted(b.broker_id for b in survivors)
    assert victim.stop() == 0
    assert "Traceback" not in victim.log_text()

    # deregistered before it exited: gone from `broker list` at once
    rows = json_lines(ok(cli("broker", "list", "-z", zk_chroot, "-o", "json")))
    assert [r["id"] for r in rows] == live
    assert [r["port"] for r in rows] == [b.port for b in survivors]
    table = tsv(ok(cli("broker", "list", "-z", zk_chroot)))
    assert [r[0] for r in table[1:]] == [str(i) for i in live]

    new_controller = wait_until(lambda: controller_of(zk_chroot), 15, "a new controller")
    assert new_controller in live
    assert [r["controller"] for r in json_lines(ok(cli("broker", "list", "-z", zk_chroot, "-o", "json")))] == [
        i == new_controller for i in live
    ]

    for b in survivors:
        wait_until(lambda b=b: sorted(x["node_id"] for x in metadata(b.bootstrap)["brokers"]) == live, 10,
                   f"broker {b.broker_id} forgets broker {victim.broker_id}")  # fmt: skip
        md = metadata(b.bootstrap, ["orphans"])
        assert md["controller_id"] == new_controller
        (t,) = md["topics"]
        assert t["error_code"] == 0
        for p in t["partitions"]:
            i = p["partition_index"]
            if lead[i] == victim.broker_id:
                assert (p["error_code"], p["leader_id"]) == (LEADER_NOT_AVAILABLE, -1), p
                assert p["isr_nodes"] == []
                assert p["offline_replicas"] == [victim.broker_id]
            else:
                assert (p["error_code"], p["leader_id"], p["isr_nodes"]) == (0, lead[i], [lead[i]]), p
                assert p["offline_replicas"] == []
            assert p["replica_nodes"] == [lead[i]]

    (doc,) = json_lines(ok(cli("topic", "describe", "orphans", "-o", "json", "-b", survivors[0].bootstrap)))
    for p in doc["partitions"]:
        if lead[p["partition"]] == victim.broker_id:
            assert (p["leader"], p["error"]) == (-1, "LEADER_NOT_AVAILABLE"), p
        else:
            assert (p["leader"], p["error"], p["log_end_offset"]) == (lead[p["partition"]], None, 0), p

    # the partitions the survivors lead still take writes
    for p, owner in lead.items():
        if owner != victim.broker_id:
            with connect(by_id(cluster3)[owner].bootstrap) as conn:
                assert produce(conn, "orphans", p, [b"still here"])["error_code"] == 0


# --- topic deletion --------------------------------------------------------------------------------


def produce_to_leaders(brokers, topic: str, lead: dict[int, int], n: int, tag: str) -> None:
    """`n` messages `<tag>-<p>-<i>` to each partition, through its leader."""
    for p, owner in lead.items():
        with connect(by_id(brokers)[owner].bootstrap) as conn:
            answer = produce(conn, topic, p, [f"{tag}-{p}-{i}".encode() for i in range(n)])
            assert answer["error_code"] == 0, answer


def wait_dirs_gone(brokers, topic: str) -> None:
    for b in brokers:
        wait_until(lambda b=b: partition_dirs(b.log_dir, topic) == [], 15,
                   f"broker {b.broker_id} removes the partition dirs of {topic}")  # fmt: skip


def assert_starts_empty(brokers, topic: str, lead: dict[int, int]) -> None:
    """Each partition's leader answers from offset 0 with nothing old: empty, then only what is new."""
    for p, owner in lead.items():
        with connect(by_id(brokers)[owner].bootstrap) as conn:
            got = fetch(conn, topic, p)
            assert (got["error_code"], got["high_watermark"], records_of(got["records"])) == (0, 0, []), (p, got)
            assert produce(conn, topic, p, [b"fresh"])["base_offset"] == 0
            assert [(r.offset, r.value) for r in records_of(fetch(conn, topic, p)["records"])] == [(0, b"fresh")]


def recreate_in_one_transaction(zk_connect: str, topic: str, replicas: dict[int, list[int]]) -> None:
    """Delete a topic's znodes and create them again in one ZooKeeper multi: the other brokers' topic
    watch sees one change with the name still there (as when a re-create follows a delete closely)."""
    with zk_session(zk_connect) as zk:
        tx = zk.transaction()
        for p in sorted(replicas):
            tx.delete(paths.partition_state(topic, p))
            tx.delete(f"{paths.topic(topic)}/partitions/{p}")
        tx.delete(f"{paths.topic(topic)}/partitions")
        tx.delete(paths.topic(topic))
        tx.create(paths.topic(topic), paths.assignment_json(replicas))
        tx.create(f"{paths.topic(topic)}/partitions")
        for p, reps in sorted(replicas.items()):
            tx.create(f"{paths.topic(topic)}/partitions/{p}")
            tx.create(paths.partition_state(topic, p), paths.state_json(reps[0], 0, [reps[0]]))
        assert all(r is True or isinstance(r, str) for r in tx.commit())


def create_with_assignment(bootstrap: str, topic: str, replicas: dict[int, list[int]]) -> None:
    body = {
        "topics": [{"name": topic, "num_partitions": -1, "replication_factor": -1, "configs": [],
                    "assignments": [{"partition_index": p, "broker_ids": r} for p, r in sorted(replicas.items())]}],
        "timeout_ms": 10000, "validate_only": False,
    }  # fmt: skip
    with connect(bootstrap) as conn:
        (t,) = conn.request(ApiKey.CREATE_TOPICS, body)["topics"]
    assert t["error_code"] == 0, t


def test_delete_then_recreate_starts_empty_on_every_broker(cluster):
    b1, b2, _ = cluster
    lead = create_and_lead(cluster, "phoenix", 3, b1.bootstrap, b1.zk_connect)
    assert sorted(lead.values()) == [1, 2, 3]
    produce_to_leaders(cluster, "phoenix", lead, 4, "old")
    for p, owner in lead.items():
        assert log_files_size(by_id(cluster)[owner].log_dir / f"phoenix-{p}") > 0

    assert ok(cli("topic", "delete", "phoenix", "--execute", "-b", b2.bootstrap)) == "deleted topic phoenix\n"
    wait_dirs_gone(cluster, "phoenix")
    for b in cluster:
        wait_until(lambda b=b: metadata(b.bootstrap, ["phoenix"])["topics"][0]["error_code"] != 0, 10,
                   f"broker {b.broker_id} forgets phoenix")  # fmt: skip

    lead = create_and_lead(cluster, "phoenix", 3, b1.bootstrap, b1.zk_connect)
    assert_starts_empty(cluster, "phoenix", lead)


def test_recreate_seen_as_one_watch_event_drops_the_old_logs(cluster):
    b1 = cluster[0]
    ok(cli("topic", "create", "blink", "-p", "3", "-b", b1.bootstrap))
    replicas = assignment(b1.zk_connect, "blink")
    lead = {p: r[0] for p, r in replicas.items()}
    wait_same_leaders(cluster, "blink", lead)
    produce_to_leaders(cluster, "blink", lead, 3, "old")
    # every partition moves on to the next broker: the brokers must learn the new leaders, not keep the old
    moved = {p: [lead[p] % 3 + 1] for p in replicas}
    recreate_in_one_transaction(b1.zk_connect, "blink", moved)
    new_lead = {p: r[0] for p, r in moved.items()}
    wait_same_leaders(cluster, "blink", new_lead)
    for p, owner in lead.items():  # the old leaders dropped their logs
        wait_until(lambda p=p, owner=owner: f"blink-{p}" not in partition_dirs(by_id(cluster)[owner].log_dir, "blink"),
                   15, f"broker {owner} drops the old log of blink-{p}")  # fmt: skip
    assert_starts_empty(cluster, "blink", new_lead)
    # and once more in place (same leaders): the logs must not survive either
    produce_to_leaders(cluster, "blink", new_lead, 2, "older")
    recreate_in_one_transaction(b1.zk_connect, "blink", moved)
    for p, owner in new_lead.items():
        with connect(by_id(cluster)[owner].bootstrap) as conn:
            wait_until(lambda conn=conn, p=p: fetch(conn, "blink", p)["high_watermark"] == 0, 15,
                       f"broker {owner} starts blink-{p} again from offset 0")  # fmt: skip
    assert_starts_empty(cluster, "blink", new_lead)


@pytest.mark.parametrize("recreate_while_down", [False, True], ids=["recreate-after-restart", "recreate-while-down"])
def test_a_broker_down_during_a_delete_does_not_reuse_the_old_log(cluster3, zk_chroot, recreate_while_down):
    b1, _, b3 = cluster3
    ok(cli("topic", "create", "lazarus", "-p", "3", "-b", b1.bootstrap))
    replicas = assignment(zk_chroot, "lazarus")
    lead = {p: r[0] for p, r in replicas.items()}
    wait_same_leaders(cluster3, "lazarus", lead)
    produce_to_leaders(cluster3, "lazarus", lead, 5, "old")
    assert b3.stop() == 0

    assert ok(cli("topic", "delete", "lazarus", "--execute", "-b", b1.bootstrap)) == "deleted topic lazarus\n"
    wait_dirs_gone(cluster3[:2], "lazarus")
    if recreate_while_down:  # the same partition on broker 3 again: written to ZooKeeper directly, since a
        with zk_session(zk_chroot) as zk:  # CreateTopics naming a broker that is not registered is refused
            registry.create_topic(zk, "lazarus", replicas, {})
    b3.start()
    if not recreate_while_down:  # once broker 1 has seen broker 3 come back (an assignment names it)
        wait_until(lambda: 3 in {b["node_id"] for b in metadata(b1.bootstrap, [])["brokers"]}, 15,
                   "broker 1 sees broker 3 again")  # fmt: skip
        create_with_assignment(b1.bootstrap, "lazarus", replicas)
    wait_same_leaders(cluster3, "lazarus", lead)
    assert_starts_empty(cluster3, "lazarus", lead)
    assert "Traceback" not in b3.log_text()
