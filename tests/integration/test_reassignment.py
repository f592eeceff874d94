"""Partition reassignment between real brokers (issue 14): `kafkactl topic reassign` writes Kafka's plan to
`/admin/reassign_partitions`; the controller copies each partition to its new replicas, moves leadership
off a leaving leader and drops the old replicas, while an acks=all producer keeps writing.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

from kazoo.client import KazooClient

from broker.client.producer import AsyncProducer
from broker.protocol.api import ApiKey
from broker.replication import reassignment
from broker.replication.reassignment import Move
from tests.integration.helpers import cli, json_lines, ok, wait_until, zk_json, zk_session
from tests.integration.test_replication import (
    create,
    full_isr,
    identical_replicas,
    produce_acked,
    read_values,
    replicas_of,
    start3,
    states,
)
from tests.integration.wire import open_conn


def plan_of(moves: dict[int, list[int]], topic: str) -> str:
    return json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": p, "replicas": r}
                                                    for p, r in sorted(moves.items())]})  # fmt: skip


def test_partitions_move_to_a_new_broker_under_load_and_every_message_stays(start_broker, zk_chroot, tmp_path):
    brokers = start3(start_broker)
    create(brokers, "moved", 3, 2, 1)
    brokers.append(start3(start_broker, ids=(4,))[0])
    before = replicas_of(zk_chroot, "moved")
    leaders = {p: st["leader"] for p, st in states(zk_chroot, "moved").items()}
    # every partition's leader leaves for broker 4, which becomes the preferred replica
    target = {p: [4] + [r for r in reps if r != leaders[p]] for p, reps in before.items()}
    plan = tmp_path / "plan.json"
    plan.write_text(plan_of(target, "moved"))

    dry = json_lines(ok(cli("topic", "reassign", plan, "-z", zk_chroot, "-o", "json")))
    assert {d["partition"]: (d["current"], d["target"]) for d in dry} == {p: (before[p], target[p]) for p in before}
    assert replicas_of(zk_chroot, "moved") == before  # a dry run writes nothing
    with zk_session(zk_chroot) as zk:
        assert zk.exists("/admin/reassign_partitions") is None

    bootstrap = ",".join(b.bootstrap for b in brokers)
    first = [f"a{i:05d}".encode() for i in range(2000)]
    acked, errors = asyncio.run(produce_acked(bootstrap, "moved", first))
    assert not errors and acked == first

    async def produce_while_moving() -> tuple[list[bytes], list[str]]:
        """Keep an acks=all producer writing from before --execute until --verify says every move is done."""
        producer = await AsyncProducer(bootstrap, acks="all", linger_ms=2, delivery_timeout_ms=60000).start()
        sent: list[tuple[bytes, asyncio.Future]] = []

        async def keep_sending(stop: asyncio.Event) -> None:
            while not stop.is_set():
                for _ in range(50):
                    value = f"b{len(sent):05d}".encode()
                    sent.append((value, await producer.send("moved", value, key=value)))
                await asyncio.sleep(0.02)

        stop = asyncio.Event()
        sending = asyncio.ensure_future(keep_sending(stop))
        try:
            await asyncio.sleep(0.2)
            started = await asyncio.to_thread(cli, "topic", "reassign", plan, "--execute", "-z", zk_chroot)
            rollback = json.loads(ok(started))  # stdout: the rollback plan alone (the moves on stderr)
            assert {e["partition"]: e["replicas"] for e in rollback["partitions"]} == before
            deadline = time.monotonic() + 60
            while (await asyncio.to_thread(cli, "topic", "reassign", plan, "--verify", "-z", zk_chroot)).returncode:
                assert time.monotonic() < deadline, "the moves did not complete within 60 s"
                await asyncio.sleep(0.2)
            await asyncio.sleep(0.5)  # and some more writes after the move
        finally:
            stop.set()
            await sending
            await producer.flush()
            await producer.close()
        acked, errors = [], []
        for value, delivery in sent:
            try:
                await delivery
                acked.append(value)
            except Exception as exc:
                errors.append(str(exc))
        return acked, errors

    more, errors = asyncio.run(produce_while_moving())
    assert not errors, errors[:3]
    assert len(more) > 1000
    done = json_lines(ok(cli("topic", "reassign", plan, "--verify", "-z", zk_chroot, "-o", "json")))
    assert {d["partition"]: d["status"] for d in done} == {p: "completed" for p in target}
    assert replicas_of(zk_chroot, "moved") == target
    with zk_session(zk_chroot) as zk:
        assert zk.exists("/admin/reassign_partitions") is None
        moves = zk_json(zk, "/brokers/topics/moved")
        assert moves["adding_replicas"] == {} and moves["removing_replicas"] == {}
    for p, st in states(zk_chroot, "moved").items():  # the leader left: broker 4 leads, the ISR is the target
        assert st["leader"] in target[p] and sorted(st["isr"]) == sorted(target[p])
    wait_until(lambda: full_isr(zk_chroot, "moved"), 20, "every target replica in sync")
    wait_until(lambda: identical_replicas(brokers, zk_chroot, "moved"), 20, "identical copies on the new replicas")
    by_id = {b.broker_id: b for b in brokers}
    for p in target:  # the leaving replicas' brokers deleted their copies
        gone = leaders[p]
        assert not (by_id[gone].log_dir / f"moved-{p}").exists(), f"broker {gone} still holds moved-{p}"
        assert (by_id[4].log_dir / f"moved-{p}").is_dir()
    values = read_values(brokers[3].bootstrap, "moved", len(first) + len(more))
    assert sorted(values) == sorted(first + more)
    # per partition, the order the producer sent in
    out = ok(cli("consume", "moved", "-e", "-b", bootstrap, "--format", "%p %s\\n", timeout=60))
    per_partition: dict[int, list[bytes]] = {}
    for line in out.splitlines():
        p, v = line.split(" ", 1)
        per_partition.setdefault(int(p), []).append(v.encode())
    for vs in per_partition.values():
        assert vs == sorted(vs)


def test_a_throttled_move_copies_slowly_and_verify_removes_the_throttle(start_broker, zk_chroot, tmp_path):
    brokers = start3(start_broker)
    create(brokers, "slow", 1, 1, 1)
    (old,) = replicas_of(zk_chroot, "slow")[0]
    new = next(b.broker_id for b in brokers if b.broker_id != old)
    values = [b"%06d" % i + b"x" * 994 for i in range(150)]  # about 300 KB (each value is its key too)
    acked, errors = asyncio.run(produce_acked(brokers[0].bootstrap, "slow", values, batch_size=16384))
    assert not errors and len(acked) == 150
    plan = tmp_path / "plan.json"
    plan.write_text(plan_of({0: [new]}, "slow"))
    ok(cli("topic", "reassign", plan, "--execute", "--throttle", "100000", "-z", zk_chroot))
    with zk_session(zk_chroot) as zk:  # Kafka's throttle keys, on both brokers and on the topic
        for b in (old, new):
            assert zk_json(zk, f"/config/brokers/{b}")["config"]["follower.replication.throttled.rate"] == "100000"
        config = zk_json(zk, "/config/topics/slow")["config"]
        assert config["follower.replication.throttled.replicas"] == f"0:{new}"
        assert config["leader.replication.throttled.replicas"] == f"0:{old}"
    # an override changed meanwhile keeps the throttle (AlterConfigs sends the whole set back)
    ok(cli("topic", "alter", "slow", "--config", "retention.ms=86400000", "-b", brokers[0].bootstrap))
    with zk_session(zk_chroot) as zk:
        assert zk_json(zk, "/config/topics/slow")["config"]["follower.replication.throttled.replicas"] == f"0:{new}"
    # 300 KB at 100 KB/s (a second's worth at most ahead) cannot be copied within the first two seconds
    r = cli("topic", "reassign", plan, "--verify", "-z", zk_chroot)
    assert r.returncode == 1 and "in progress" in r.stdout and "not completed yet" in r.stderr
    wait_until(lambda: cli("topic", "reassign", plan, "--verify", "-z", zk_chroot).returncode == 0, 60,
               "the throttled move completed")  # fmt: skip
    with zk_session(zk_chroot) as zk:  # the last --verify took the throttle away
        for b in (old, new):
            assert "follower.replication.throttled.rate" not in zk_json(zk, f"/config/brokers/{b}")["config"]
        assert "follower.replication.throttled.replicas" not in zk_json(zk, "/config/topics/slow")["config"]
    assert replicas_of(zk_chroot, "slow") == {0: [new]}
    assert states(zk_chroot, "slow")[0]["leader"] == new
    assert read_values(brokers[0].bootstrap, "slow", 150) == values


def test_bad_plans_are_one_error_line_and_change_nothing(start_broker, zk_chroot, tmp_path):
    brokers = start3(start_broker)
    create(brokers, "kept", 2, 2, 1)
    before = replicas_of(zk_chroot, "kept")
    cases = {
        "not json": "the plan is not JSON",
        json.dumps({"version": 1}): 'no "partitions" list',
        plan_of({0: [1, 1]}, "kept"): "names a broker twice",
        plan_of({0: [1, 9]}, "kept"): "broker(s) 9 not live",
        plan_of({7: [1, 2]}, "kept"): "has no partition 7",
        plan_of({0: [1]}, "../../etc"): "topic name '../../etc' has characters other than",
        plan_of({0: [1]}, "absent"): "unknown topic 'absent'",
        json.dumps({"partitions": [{"topic": "kept", "partition": 0, "replicas": []}]}): "non-empty list",
    }
    for i, (text, why) in enumerate(cases.items()):
        plan = tmp_path / f"bad{i}.json"
        plan.write_text(text)
        r = cli("topic", "reassign", plan, "--execute", "-z", zk_chroot)
        assert r.returncode == 1, (text, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kafkactl: error: ") and why in lines[0], (text, r.stderr)
    r = cli("topic", "reassign", tmp_path / "missing.json", "-z", zk_chroot)
    assert (r.returncode, r.stderr) == (2, f"kafkactl: error: {tmp_path / 'missing.json'}: no such file or directory\n")
    r = cli("topic", "reassign", "--verify", "--execute", tmp_path / "bad0.json", "-z", zk_chroot)
    assert r.returncode == 2
    assert replicas_of(zk_chroot, "kept") == before
    with zk_session(zk_chroot) as zk:
        assert zk.exists("/admin/reassign_partitions") is None
    # --generate proposes a plan over the brokers given, keeping the replication factor; nothing moves
    proposed = json.loads(ok(cli("topic", "reassign", "--generate", "-t", "kept", "--brokers", "2,3", "-z",
                                 zk_chroot)))  # fmt: skip
    assert {(e["topic"], e["partition"]) for e in proposed["partitions"]} == {("kept", 0), ("kept", 1)}
    assert all(sorted(e["replicas"]) == [2, 3] for e in proposed["partitions"])
    assert replicas_of(zk_chroot, "kept") == before


def test_a_move_that_adds_no_broker_completes_and_the_leaving_replica_stays_out(start_broker, zk_chroot, tmp_path):
    """Lowering the replication factor and reordering add no replica: no ISR change comes to wake the controller
    for the last step, which it must take anyway; the replica that leaves does not come back into the ISR."""
    brokers = start3(start_broker)
    create(brokers, "shrunk", 2, 3, 1)
    before = replicas_of(zk_chroot, "shrunk")
    target = {0: before[0][:2], 1: [before[1][1], before[1][0], before[1][2]]}  # RF 3 → 2, and a reorder
    plan = tmp_path / "plan.json"
    plan.write_text(plan_of(target, "shrunk"))
    acked, errors = asyncio.run(produce_acked(brokers[0].bootstrap, "shrunk", [b"x%d" % i for i in range(500)]))
    assert not errors
    ok(cli("topic", "reassign", plan, "--execute", "-z", zk_chroot))
    wait_until(lambda: cli("topic", "reassign", plan, "--verify", "-z", zk_chroot).returncode == 0, 30,
               "the moves completed")  # fmt: skip
    assert replicas_of(zk_chroot, "shrunk") == target
    time.sleep(3)  # (longer than a few fetches of the leaving replica, had it kept fetching)
    st = states(zk_chroot, "shrunk")
    assert sorted(st[0]["isr"]) == sorted(target[0]) and sorted(st[1]["isr"]) == sorted(target[1]), st
    gone = before[0][2]
    by_id = {b.broker_id: b for b in brokers}
    wait_until(lambda: not (by_id[gone].log_dir / "shrunk-0").exists(), 10, "the leaving replica's copy deleted")
    assert sorted(read_values(brokers[1].bootstrap, "shrunk", 500)) == sorted(acked)


class ReadThenRace(KazooClient):
    """A real kazoo client on the real ZooKeeper which, right after its next read of `path`, runs `between`:
    another writer's change landing between a read-modify-write's read and its write, every time."""

    path: str | None = None
    between: Callable[[], None] | None = None

    def race(self, path: str, between: Callable[[], None]) -> None:
        self.path, self.between = path, between

    def get(self, path: str, watch=None):  # noqa: ANN001, ANN201 - kazoo's signature
        got = super().get(path, watch)
        if path == self.path and self.between is not None:
            between, self.between = self.between, None
            between()
        return got


def test_a_throttle_set_or_removed_keeps_a_config_change_made_meanwhile(start_broker, zk_chroot):
    """`topic reassign --throttle` and the --verify that removes it change /config/brokers/<id> and the topic's
    config as IncrementalAlterConfigs does: a change IncrementalAlterConfigs makes between their read and
    their write stays (an unconditional write of what they read would undo it)."""
    (b,) = start3(start_broker, ids=(1,))
    create([b], "raced", 1, 1, 1)

    def alter(rtype: int, name: str, key: str, operation: int, value: str | None) -> None:
        """IncrementalAlterConfigs through the broker (operation 0: SET, 1: DELETE)."""
        with open_conn(b) as conn:
            res = {"resource_type": rtype, "resource_name": name,
                   "configs": [{"name": key, "config_operation": operation, "value": value}]}  # fmt: skip
            r = conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [res], "validate_only": False})
        assert r["responses"][0]["error_code"] == 0, r

    moves = [Move("raced", 0, [1], [1])]
    with zk_session(zk_chroot) as plain:
        plain.create("/config/brokers/1", json.dumps({"version": 1, "config": {"x.custom.key": "1"}}).encode(),
                     makepath=True)  # fmt: skip
    zk = ReadThenRace(hosts=zk_chroot, timeout=10.0)
    zk.start(timeout=15)
    try:
        # the throttle set: a key deleted from the broker's config and one set on the topic's, meanwhile
        zk.race("/config/brokers/1", lambda: alter(4, "1", "x.custom.key", 1, None))
        reassignment.set_throttle(zk, moves, 1000)
        zk.race("/config/topics/raced", lambda: alter(2, "raced", "retention.ms", 0, "60000"))
        reassignment.set_throttle(zk, moves, 2000)
        assert zk_json(zk, "/config/brokers/1")["config"] == {
            "leader.replication.throttled.rate": "2000", "follower.replication.throttled.rate": "2000"}  # fmt: skip
        topic = zk_json(zk, "/config/topics/raced")["config"]
        assert topic["retention.ms"] == "60000" and topic["leader.replication.throttled.replicas"] == "0:1"
        # the throttle removed: a key set on each meanwhile
        zk.race("/config/brokers/1", lambda: alter(4, "1", "follower.replication.throttled.rate", 0, "5"))
        zk.race("/config/topics/raced", lambda: alter(2, "raced", "segment.ms", 0, "600000"))
        assert reassignment.remove_throttle(zk, {("raced", 0): [1]})
        assert zk_json(zk, "/config/brokers/1")["config"] == {}
        assert zk_json(zk, "/config/topics/raced")["config"] == {
            "min.insync.replicas": "1", "retention.ms": "60000", "segment.ms": "600000"}  # fmt: skip
        assert not reassignment.remove_throttle(zk, {("raced", 0): [1]})  # nothing left to remove
    finally:
        zk.stop()
        zk.close()
