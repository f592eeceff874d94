"""`kafkactl mirror` from a three-broker cluster into a one-broker cluster (real brokers, two ZooKeeper
chroots): the configs that belong to the target (min.insync.replicas, ...) are not copied and the replication
factor is capped at the target's brokers, so everything arrives; a target partition that refuses batches
(NOT_ENOUGH_REPLICAS) is named in the progress line with its error, said once, and caught up once fixed.
The audit topic of a three-broker cluster gets three replicas, as Kafka's internal topics do."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.audit.counts import AUDIT_TOPIC
from broker.audit.topic import ensure_audit_topic
from broker.client.admin import Admin
from broker.client.producer import AsyncProducer
from broker.protocol.api import ApiKey
from tests.fixtures import TWO_CLUSTER_OVERRIDES
from tests.integration.cluster import BrokerProcess
from tests.integration.helpers import CliProcess, cli, connect, json_lines, ok, running_cluster, wait_until
from tests.integration.test_mirror import produce, read_all


@pytest.fixture
def three_to_one(zk_server, tmp_path: Path) -> Iterator[tuple[str, str, list[BrokerProcess]]]:
    """(the bootstrap of a source cluster of brokers 1-3, that of a target cluster of broker 11, the source's
    brokers)."""
    with running_cluster(zk_server.connect_string, tmp_path, (1, 2, 3), TWO_CLUSTER_OVERRIDES) as source, \
            running_cluster(zk_server.connect_string, tmp_path, (11,), TWO_CLUSTER_OVERRIDES) as target:  # fmt: skip
        yield ",".join(b.bootstrap for b in source), target[0].bootstrap, source


def _replicas(bootstrap: str, topic: str) -> set[int]:
    with Admin(bootstrap) as admin:
        return {len(p.replicas) for p in admin.describe_topic(topic)}


def _overrides(bootstrap: str, topic: str) -> dict[str, str | None]:
    with Admin(bootstrap) as admin:
        return {k: v for k, (v, override) in admin.describe_config(topic).items() if override}


def _status(source: str, target: str) -> list[dict]:
    return json_lines(ok(cli("mirror", "status", "--from", source, "--to", target, "--include", "orders", "-o",
                             "json")))  # fmt: skip


def _lags(source: str, target: str) -> list[int]:
    return [r["lag"] for r in _status(source, target)]


def test_a_mirror_into_a_one_broker_cluster_leaves_it_its_own_configs_and_names_what_is_stuck(three_to_one, tmp_path):
    source, target, _ = three_to_one
    configs = ["min.insync.replicas=2", "retention.ms=86400000", "unclean.leader.election.enable=true"]
    ok(cli("topic", "create", "orders", "-p", 3, "-r", 3, *(a for c in configs for a in ("--config", c)), "-b", source))
    produce(source, "orders", 1500)

    r = cli("mirror", "start", "--from", source, "--to", target, "-r", 3, "--exit", timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    # the replication factor asked for is lowered to the target's one broker, said once
    assert r.stderr.count("--replication-factor is 3 but the target has 1 live broker") == 1, r.stderr
    assert "created orders (3 partitions, retention.ms=86400000); left to the target: min.insync.replicas=2, " \
           "unclean.leader.election.enable=true" in r.stderr, r.stderr  # fmt: skip
    assert "mirrored 1,500 messages of 3 partition(s)" in r.stderr and "retried:" not in r.stderr, r.stderr
    assert _replicas(target, "orders") == {1}
    assert _overrides(target, "orders") == {"retention.ms": "86400000"}
    want = read_all(source, "orders")
    assert read_all(target, "orders") == want and sum(map(len, want.values())) == 1500

    # the target refuses every batch: its partitions are named stuck with the error, which is said once
    ok(cli("topic", "alter", "orders", "--config", "min.insync.replicas=2", "-b", target))
    produce(source, "orders", 900, start=1500)
    with CliProcess(["mirror", "start", "--from", source, "--to", target, "--report-interval", 1], tmp_path,
                    name="mirror") as mirror:  # fmt: skip
        wait_until(lambda: "stuck: orders[0,1,2] NOT_ENOUGH_REPLICAS (for " in mirror.stderr(), 90,
                   "the progress line naming the stuck partitions")  # fmt: skip
        wait_until(lambda: mirror.stderr().count("; stuck: orders[0,1,2] NOT_ENOUGH_REPLICAS") >= 3, 60,
                   "three progress lines naming them")  # fmt: skip
        assert mirror.stderr().count("refuses batches: NOT_ENOUGH_REPLICAS") == 1, mirror.stderr()
        rows = _status(source, target)  # the status names the cause too, from the clusters alone
        assert all(r["lag"] > 0 for r in rows), rows
        assert [r["problem"] for r in rows] == ["NOT_ENOUGH_REPLICAS: 1 in sync, min.insync.replicas=2"] * 3, rows
        text = ok(cli("mirror", "status", "--from", source, "--to", target, "--include", "orders"))
        assert "PROBLEM" in text and text.count("NOT_ENOUGH_REPLICAS") == 3, text
        assert mirror.alive
        # fixed on the target: the mirror catches up by itself
        ok(cli("topic", "alter", "orders", "--delete-config", "min.insync.replicas", "-b", target))
        wait_until(lambda: _lags(source, target) == [0, 0, 0], 90, "the mirror catching up", interval=0.5)
        assert all(r["problem"] is None for r in _status(source, target))
        assert mirror.terminate(60) == 0, mirror.output()
    err = mirror.stderr()
    assert "Traceback" not in err
    last = [line for line in err.splitlines() if "; lag " in line][-1]
    assert "of 3 partition(s)" in last and "; retried: NOT_ENOUGH_REPLICAS " in last, err
    want = read_all(source, "orders")
    assert read_all(target, "orders") == want and sum(map(len, want.values())) == 2400


def _send(bootstrap: str, topic: str, counts: dict[int, int], start: int) -> None:
    """`counts[p]` numbered messages with keys and headers to each partition p."""

    async def main() -> None:
        async with AsyncProducer(bootstrap, acks="all", linger_ms=2) as producer:
            for p, n in counts.items():
                for i in range(start, start + n):
                    await producer.send(topic, b"v%d" % i, key=b"k%d" % i, partition=p, headers=[("i", b"%d" % i)])
            await producer.flush()

    asyncio.run(main())


@pytest.mark.chaos
def test_a_dead_source_broker_holds_back_its_partitions_only(three_to_one, tmp_path):
    """Source partition 2 on broker 3 alone: broker 3 killed, the mirror names it stuck and copies the others
    meanwhile; broker 3 back, it catches up and everything is there once."""
    source, target, brokers = three_to_one
    with connect(brokers[0].bootstrap) as conn:
        answer = conn.request(ApiKey.CREATE_TOPICS, {"topics": [{
            "name": "spread", "num_partitions": -1, "replication_factor": -1, "configs": [],
            "assignments": [{"partition_index": p, "broker_ids": [p + 1]} for p in range(3)]}],
            "timeout_ms": 30000, "validate_only": False})  # fmt: skip
    assert answer["topics"][0]["error_code"] == 0, answer
    _send(source, "spread", {0: 200, 1: 200, 2: 200}, 0)
    with CliProcess(["mirror", "start", "--from", source, "--to", target, "--report-interval", 1,
                     "--refresh-interval", 1], tmp_path, name="mirror") as mirror:  # fmt: skip
        wait_until(lambda: "mirrored 600 messages" in mirror.stderr(), 60, "the first 600 copied", interval=0.2)
        brokers[2].kill()  # kill -9: partition 2 has no other replica
        _send(brokers[0].bootstrap, "spread", {0: 150, 1: 150}, 200)
        wait_until(lambda: "stuck: source spread[2] LEADER_NOT_AVAILABLE" in mirror.stderr(), 60,
                   "partition 2 named stuck", interval=0.2)  # fmt: skip
        wait_until(lambda: "mirrored 900 messages" in mirror.stderr(), 60, "the others copied meanwhile", interval=0.2)
        assert mirror.alive, mirror.output()
        brokers[2].start()
        _send(source, "spread", {2: 100}, 200)
        wait_until(lambda: "mirrored 1,000 messages" in mirror.stderr(), 90, "partition 2 caught up", interval=0.2)
        assert mirror.terminate(60) == 0, mirror.output()
    assert "Traceback" not in mirror.stderr()
    want = read_all(source, "spread")
    assert read_all(target, "spread") == want and [len(want[p]) for p in range(3)] == [350, 350, 300]


def test_the_audit_topic_of_three_brokers_has_three_replicas(zk_server, tmp_path: Path):
    """Made by a broker's auto-creation (an audited producer's counts) and by `ensure_audit_topic` alike."""
    with running_cluster(zk_server.connect_string, tmp_path, (1, 2, 3), TWO_CLUSTER_OVERRIDES) as brokers:
        bootstrap = ",".join(b.bootstrap for b in brokers)

        async def audited() -> None:
            async with AsyncProducer(bootstrap, acks="all", audit_enabled=True) as p:
                await p.send("clicks", b"one")
                await p.flush()

        asyncio.run(audited())
        with Admin(bootstrap) as admin:
            wait_until(lambda: AUDIT_TOPIC in admin.list_topics(), 30, "the audit topic", interval=0.2)
        assert _replicas(bootstrap, AUDIT_TOPIC) == {3}
        ok(cli("topic", "delete", AUDIT_TOPIC, "--execute", "-b", bootstrap))
        with Admin(bootstrap) as admin:
            wait_until(lambda: AUDIT_TOPIC not in admin.list_topics(), 30, "the audit topic deleted")
            deadline = time.monotonic() + 30
            while not ensure_audit_topic(admin):  # (a deletion may still be finishing)
                assert time.monotonic() < deadline, "ensure_audit_topic never created it"
                time.sleep(0.2)
        assert _replicas(bootstrap, AUDIT_TOPIC) == {3}
