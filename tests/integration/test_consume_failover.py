"""Consumers across a leader's death (issue 26, consumer side): on a 3-broker cluster with a 6-partition RF 3
topic (min.insync.replicas 2) and an acks=all producer writing throughout, each broker is killed with kill -9
in turn (and restarted before the next kill). A running `kafkactl consume -f` (and a `--group` member) never
exits, and reads every acknowledged message exactly once, in offset order per partition; a plain
`consume --exit` started right after a kill returns every message rather than failing.

The ZooKeeper session is short (the controller moves leadership about SESSION_MS after a kill) so that a
run is quick, but the window in which the metadata still names the dead broker as a leader is there.
"""

from __future__ import annotations

import collections
import json
import os
import time
from pathlib import Path

import pytest

from broker.client.admin import Admin
from broker.protocol.messages.fetch import EARLIEST, LATEST
from broker.spark.ranges import wait_offsets
from tests.integration.clientkit import AckedProducer
from tests.integration.helpers import CliProcess, cli, ok, wait_until
from tests.integration.test_replication import create, full_isr, states

#: KAFKACTL_FAILOVER_DEFAULTS=1 runs the brokers with their default session (18 s) and ISR lag (30 s) instead
DEFAULTS = os.environ.get("KAFKACTL_FAILOVER_DEFAULTS") == "1"
SESSION_MS = 18000 if DEFAULTS else 4000
OVERRIDES = {} if DEFAULTS else {"zookeeper.session.timeout.ms": str(SESSION_MS), "replica.lag.time.max.ms": "2000"}
TOPIC = "orders"
FORMAT = "%p %o %k %s\\n"


def told_partitions(lines: list[str]) -> set[int]:
    """The partitions of `orders` that wait lines name (`orders[2,5]`)."""
    return {int(p) for ln in lines for p in ln.split("orders[", 1)[1].split("]", 1)[0].split(",")}


def parse(stdout: str) -> list[tuple[int, int, bytes, bytes]]:
    """(partition, offset, key, value) of each whole line `FORMAT` printed."""
    out = []
    for line in stdout.splitlines(keepends=True):
        if not line.endswith("\n"):
            break  # a line still being written
        p, o, k, v = line.rstrip("\n").split(" ", 3)
        out.append((int(p), int(o), k.encode(), v.encode()))
    return out


def check_exactly_once_in_order(read: list[tuple[int, int, bytes, bytes]], acked: list[tuple[int, int, bytes]]):
    """Every acked message read once at its offset, keys and values as sent; offsets rise per partition."""
    last: dict[int, int] = {}
    at: dict[tuple[int, int], bytes] = {}
    for p, o, k, v in read:
        assert o > last.get(p, -1), f"partition {p}: offset {o} read after {last.get(p)}"
        last[p] = o
        assert k == v, f"{p}@{o}: key {k!r} is not its value {v!r}"
        at[(p, o)] = v
    missing = [(p, o, v) for p, o, v in acked if at.get((p, o)) != v]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages not read, e.g. {missing[:5]}"


@pytest.fixture
def cluster(start_broker, zk_chroot):
    brokers = [start_broker(i, overrides=OVERRIDES) for i in (1, 2, 3)]
    create(brokers, TOPIC, 6, 3, 2)
    wait_until(lambda: full_isr(zk_chroot, TOPIC), 30, "a full ISR")
    return brokers


def kill_each_in_turn(brokers, zk_chroot: str, check_alive, after_kill=None) -> None:
    """kill -9 each broker in turn while the producer writes; restart it and wait for a full ISR before the next.
    `after_kill(victim, leaders before the kill)` runs right after each kill."""
    for b in brokers:
        time.sleep(1.0)
        leaders = {p: st["leader"] for p, st in states(zk_chroot, TOPIC).items()}
        b.kill()
        if after_kill is not None:
            after_kill(b, leaders)
        time.sleep(SESSION_MS / 1000 + 2)  # through the window where it is still named leader, and past it
        check_alive()
        b.start()
        wait_until(lambda: full_isr(zk_chroot, TOPIC), 60, "a full ISR after the restart")
        check_alive()


def _drain(tail: CliProcess, acked: list[tuple[int, int, bytes]], timeout: float = 60) -> None:
    """Wait until the tail printed every acknowledged message (or fail with what it printed)."""
    want = {(p, o) for p, o, _ in acked}
    deadline = time.monotonic() + timeout
    while True:
        got = {(p, o) for p, o, _, _ in parse(tail.stdout())}
        if want <= got:
            return
        assert tail.alive, f"the tail exited with {tail.proc.returncode}:\n{tail.output()[-4000:]}"
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(want - got)} acked messages not read after {timeout}s, e.g. "
                                 f"{sorted(want - got)[:5]}\n{tail.stderr()[-4000:]}")  # fmt: skip
        time.sleep(0.2)


def acked_a_while(bootstrap: str, seconds: float = 2.0) -> AckedProducer:
    """A producer that wrote for `seconds` and stopped, something acknowledged."""
    producer = AckedProducer(bootstrap, TOPIC)
    producer.start()
    time.sleep(seconds)
    producer.stop.set()
    producer.join(60)
    assert producer.acked, producer.failed[:5]
    return producer


def busiest_leader(brokers, zk_chroot: str):
    """The broker that leads the most partitions of the topic now."""
    leader_counts = collections.Counter(st["leader"] for st in states(zk_chroot, TOPIC).values())
    return next(b for b in brokers if b.broker_id == leader_counts.most_common(1)[0][0])


def reads_through_each_kill(brokers, zk_chroot: str, reader: CliProcess, after_kill=None) -> None:
    """With a producer writing, `reader` (a `consume` printing `FORMAT`, not started) reads while each broker is
    killed in turn (`kill_each_in_turn`, `after_kill` passed on); it never exits, and then reads every
    acknowledged message exactly once, in offset order, without a traceback."""
    producer = AckedProducer(",".join(b.bootstrap for b in brokers), TOPIC)
    what = reader.stdout_path.stem  # the name it was given: "tail", "member"
    producer.start()
    with reader:
        try:
            wait_until(lambda: len(parse(reader.stdout())) > 100, 60, f"the {what} reading")

            def alive() -> None:
                assert reader.alive, f"the {what} exited with {reader.proc.returncode}:\n{reader.output()[-4000:]}"

            kill_each_in_turn(brokers, zk_chroot, alive, after_kill)
        finally:
            producer.stop.set()
            producer.join(90)
        assert len(producer.acked) > 1000, producer.failed[:5]
        _drain(reader, producer.acked)
        reader.terminate()
    check_exactly_once_in_order(parse(reader.stdout()), producer.acked)
    assert "Traceback" not in reader.stderr(), reader.stderr()


@pytest.mark.chaos
@pytest.mark.timeout(600 if DEFAULTS else 300)
def test_tail_survives_each_broker_kill_and_reads_every_acked_message_once(cluster, zk_chroot, tmp_path: Path):
    bootstrap = ",".join(b.bootstrap for b in cluster)
    tail = CliProcess(["consume", TOPIC, "-f", "--offset", "beginning", "--format", FORMAT, "-b", bootstrap],
                      tmp_path, name="tail")  # fmt: skip

    def one_healthy_partition(victim, leaders: dict[int, int]) -> None:
        """`consume -p N --exit` of a partition the dead broker did not lead: read at once, no wait."""
        p = next(p for p, leader in sorted(leaders.items()) if leader != victim.broker_id)
        r = cli("consume", TOPIC, "-p", p, "--exit", "--format", FORMAT, "-b", bootstrap, timeout=60)
        assert parse(ok(r)) and {q for q, *_ in parse(r.stdout)} == {p}
        assert "waiting" not in r.stderr, r.stderr

    reads_through_each_kill(cluster, zk_chroot, tail, one_healthy_partition)
    assert "kafkactl: waiting for a leader of orders[" in tail.stderr(), tail.stderr()  # told, once a broker died
    assert "a leader again" in tail.stderr(), tail.stderr()


@pytest.mark.chaos
@pytest.mark.timeout(600 if DEFAULTS else 300)
def test_group_member_survives_each_broker_kill_and_reads_every_acked_message_once(cluster, zk_chroot, tmp_path: Path):
    bootstrap = ",".join(b.bootstrap for b in cluster)
    member = CliProcess(["consume", TOPIC, "--group", "g1", "--reset", "earliest", "--format", FORMAT,
                         "-b", bootstrap, "-z", zk_chroot], tmp_path, name="member")  # fmt: skip
    reads_through_each_kill(cluster, zk_chroot, member)


@pytest.mark.chaos
@pytest.mark.timeout(180)
def test_plain_consume_right_after_a_kill_waits_for_the_leaders_and_returns_everything(cluster, zk_chroot):
    bootstrap = ",".join(b.bootstrap for b in cluster)
    producer = acked_a_while(bootstrap)
    victim = busiest_leader(cluster, zk_chroot)
    victim.kill()
    r = cli("consume", TOPIC, "--exit", "--format", FORMAT, "-b", bootstrap, timeout=120)
    out = ok(r)
    check_exactly_once_in_order(parse(out), producer.acked)
    assert len(parse(out)) == len(producer.acked)
    notes = [ln for ln in r.stderr.splitlines() if not ln.startswith("consumed ")]
    # each partition's wait is told when it starts and when it ends (partitions may start and end in several
    # groups as the controller moves them); when every leadership moved before the command asked for metadata,
    # there is nothing to wait for
    waits = [ln for ln in notes if ln.startswith("kafkactl: waiting for a leader of orders[")]
    backs = [ln for ln in notes if "orders[" in ln and ": a leader again (" in ln]
    assert not [ln for ln in notes if "error" in ln or "Traceback" in ln], r.stderr
    assert bool(waits) == bool(backs) and all("unreachable" in ln for ln in waits), r.stderr
    assert told_partitions(waits) == told_partitions(backs), r.stderr
    victim.start()
    wait_until(lambda: full_isr(zk_chroot, TOPIC), 60, "a full ISR after the restart")

    # a group member with --exit started right after a kill reads everything too, and ends; the broker killed is
    # the lowest id, the first of the bootstrap list (kafkactl once sent its first group requests there)
    victim = min(cluster, key=lambda b: b.broker_id)
    victim.kill()
    r = cli("consume", TOPIC, "--group", "gx", "--reset", "earliest", "--exit", "--format", FORMAT,
            "-b", bootstrap, "-z", zk_chroot, timeout=120)  # fmt: skip
    check_exactly_once_in_order(parse(ok(r)), producer.acked)
    assert len(parse(r.stdout)) == len(producer.acked)
    victim.start()
    wait_until(lambda: full_isr(zk_chroot, TOPIC), 60, "a full ISR after the restart")

    # the admin's offset look-ups (group describe's lag, spark-load's plan) wait for a leader as well
    victim = busiest_leader(cluster, zk_chroot)
    tps = [(TOPIC, p) for p in range(6)]
    with Admin(bootstrap) as admin:
        admin.list_topics()  # connections to every broker, the victim's too
        before = admin.cluster.list_offsets(tps, LATEST)[0]
        victim.kill()
        told: list[str] = []
        ends, why = admin.cluster.list_offsets(tps, LATEST, on_wait=lambda _tps, reason: told.append(reason))
        assert not why and ends == before, (why, ends, before)
        assert len(told) == 1 and "unreachable" in told[0], told
        assert wait_offsets(admin, tps, EARLIEST, AssertionError) == {tp: 0 for tp in tps}


@pytest.mark.chaos
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_spark_load_right_after_a_kill_loads_every_message_once(cluster, zk_chroot, tmp_path: Path):
    pytest.importorskip("pyspark")
    bootstrap = ",".join(b.bootstrap for b in cluster)
    producer = acked_a_while(bootstrap)
    victim = busiest_leader(cluster, zk_chroot)
    victim.kill()
    out = tmp_path / "out"
    run = cli("spark-load", TOPIC, "--to", out, "-b", bootstrap, "--master", "local[2]", "--format", "json",
              "--value-format", "utf8", "-o", "json", timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    doc = json.loads(run.stdout)
    assert doc["rows"] == doc["expected"] == len(producer.acked), doc
    rows = [json.loads(ln) for f in sorted(out.rglob("*.json")) if "_kafkactl" not in f.parts
            for ln in f.read_text().splitlines() if ln.strip()]  # fmt: skip
    loaded = collections.Counter((r["partition"], r["offset"], r["value"].encode()) for r in rows)
    assert all(n == 1 for n in loaded.values()), "a message loaded twice"
    assert set(loaded) == set(producer.acked)
