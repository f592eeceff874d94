"""Clients keep going when part of a topic is down (issue 14, item 7).

Three real brokers, a topic of 6 partitions (two led by each, no replication); one broker stops, so
its partitions have no leader until it is back. `consume` reads the others at full speed, warns once,
and (without --follow) ends non-zero naming what it could not read; `consume -f` takes the stopped
broker's partitions up when it returns; keyless `produce` writes to partitions that have leaders.
"""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from broker.client.partitioner import partition_for_key
from broker.client.producer import AsyncProducer
from tests.cli_runner import run_cli
from tests.integration.helpers import (
    CliProcess,
    cli,
    cli_env,
    connect,
    json_lines,
    leaders,
    metadata,
    ok,
    produce,
    wait_until,
    zk_json,
    zk_session,
)

N = 4  # messages per partition


def lead_of(zk_connect: str, topic: str) -> dict[int, int]:
    with zk_session(zk_connect) as zk:
        return {int(p): r[0] for p, r in zk_json(zk, f"/brokers/topics/{topic}")["partitions"].items()}


def topic_with_messages(brokers, zk_connect: str, topic: str) -> dict[int, int]:
    """`topic` with 6 partitions, N messages `p<p>-<i>` in each (sent to its leader); {partition: leader}."""
    ok(cli("topic", "create", topic, "-p", "6", "-b", brokers[0].bootstrap))
    lead = lead_of(zk_connect, topic)
    assert sorted(lead.values()) == [1, 1, 2, 2, 3, 3]
    by_id = {b.broker_id: b for b in brokers}
    for b in brokers:
        wait_until(lambda b=b: leaders(metadata(b.bootstrap, [topic]), topic) == lead, 10,
                   f"broker {b.broker_id} sees the leaders of {topic}")  # fmt: skip
    for p, owner in lead.items():
        with connect(by_id[owner].bootstrap) as conn:
            assert produce(conn, topic, p, [f"p{p}-{i}".encode() for i in range(N)])["error_code"] == 0
    return lead


def stop_and_wait_leaderless(victim, bootstrap: str, topic: str, gone: list[int]) -> None:
    assert victim.stop() == 0
    wait_until(lambda: all(leaders(metadata(bootstrap, [topic]), topic)[p] == -1 for p in gone), 15,
               f"partitions {gone} without a leader")  # fmt: skip


def messages(lines: str) -> set[str]:
    return {ln for ln in lines.splitlines() if ln}


def last_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    """The `kafkactl: error: ...` line that ends a failed command's stderr (no traceback)."""
    assert result.returncode == 1, f"stdout: {result.stdout}\nstderr: {result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    line = result.stderr.splitlines()[-1]
    assert line.startswith("kafkactl: error: "), result.stderr
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line


def produce_lines(text: str, *args: object) -> subprocess.CompletedProcess:
    return run_cli(["produce", *args], cli_env(), input=text, timeout=30)


def test_consume_reads_the_partitions_that_have_a_leader(cluster3, zk_chroot, tmp_path):
    topic = "halfdown"
    lead = topic_with_messages(cluster3, zk_chroot, topic)
    victim = cluster3[2]  # broker 3; the others are the bootstrap servers
    bootstrap = f"{cluster3[0].bootstrap},{cluster3[1].bootstrap}"
    gone = sorted(p for p, owner in lead.items() if owner == victim.broker_id)
    healthy = sorted(p for p in lead if p not in gone)
    stop_and_wait_leaderless(victim, cluster3[0].bootstrap, topic, gone)

    # a follower started while the broker is down: it must take that broker's partitions up when it is back
    follower = CliProcess(["consume", topic, "-f", "--offset", "beginning", "--format", "%p:%s\\n", "-b", bootstrap],
                          tmp_path, name="follow")  # fmt: skip
    with follower:
        everything = {f"{p}:p{p}-{i}" for p in lead for i in range(N)}
        readable = {f"{p}:p{p}-{i}" for p in healthy for i in range(N)}

        # the default mode: every message of the healthy partitions, one warning, then an error naming the rest
        run = cli("consume", topic, "--format", "%p:%s\\n", "-b", bootstrap, timeout=30)
        assert run.returncode == 1, run
        assert messages(run.stdout) == readable and len(run.stdout.splitlines()) == len(readable)
        lines = run.stderr.splitlines()
        assert (
            lines[0] == f"kafkactl: warning: {topic} partitions {gone[0]}, {gone[1]} have no leader; reading the others"
        )
        assert lines[1].startswith(f"consumed {len(readable)} message(s)")
        assert lines[2] == (f"kafkactl: error: {topic} partitions {gone[0]}, {gone[1]} not read: no leader "
                            "(LEADER_NOT_AVAILABLE)")  # fmt: skip
        assert len(lines) == 3, run.stderr

        # one healthy partition: no wait on the others (it once took 20 s of metadata waits)
        one = ok(cli("consume", topic, "-p", healthy[0], "-o", "json", "-b", bootstrap, timeout=15))
        assert [(r["partition"], r["value"]) for r in json_lines(one)] == [(healthy[0], f"p{healthy[0]}-{i}")
                                                                             for i in range(N)]  # fmt: skip

        # only the offline partition: the warning and the error, nothing else
        alone = cli("consume", topic, "-p", gone[0], "-b", bootstrap, timeout=15)
        assert alone.stdout == ""
        assert alone.stderr.splitlines() == [
            f"kafkactl: warning: {topic} partition {gone[0]} has no leader; waiting for a leader",
            last_error(alone, f"{topic} partition {gone[0]} not read"),
        ]

        # a group member reads what it can too, and with --exit ends as the plain consume does
        group = cli("consume", topic, "--group", "g", "--reset", "earliest", "--exit", "--format", "%p:%s\\n",
                    "-b", bootstrap, "-z", zk_chroot, timeout=30)  # fmt: skip
        assert messages(group.stdout) == readable and len(group.stdout.splitlines()) == len(readable)
        last_error(group, f"{topic} partitions {gone[0]}, {gone[1]} not read")

        wait_until(lambda: messages(follower.stdout()) == readable, 20, "the follower reads the healthy partitions")
        assert follower.stderr().splitlines() == [
            f"kafkactl: warning: {topic} partitions {gone[0]}, {gone[1]} have no leader; reading the others"
        ]

        victim.start()
        wait_until(lambda: messages(follower.stdout()) == everything, 20, "the follower reads the returned partitions")
        assert len(follower.stdout().splitlines()) == len(everything)  # nothing twice
    # back: everything, and no warning
    run = cli("consume", topic, "--format", "%p:%s\\n", "-b", bootstrap, timeout=30)
    assert run.returncode == 0, run
    assert messages(run.stdout) == everything and len(run.stdout.splitlines()) == len(everything)
    assert "warning" not in run.stderr


def test_keyless_produce_skips_partitions_without_a_leader(cluster3, zk_chroot):
    topic = "halfwrite"
    lead = topic_with_messages(cluster3, zk_chroot, topic)
    victim = cluster3[2]
    bootstrap = f"{cluster3[0].bootstrap},{cluster3[1].bootstrap}"
    gone = sorted(p for p, owner in lead.items() if owner == victim.broker_id)
    stop_and_wait_leaderless(victim, cluster3[0].bootstrap, topic, gone)

    text = "".join(f"new-{i}\n" for i in range(300))
    res = produce_lines(text, topic, "-b", bootstrap, "--batch-size", "200", "--linger-ms", "0")
    assert res.returncode == 0, res
    assert "Traceback" not in res.stderr and "produced 300 message(s)" in res.stderr, res.stderr

    # a keyed message for an offline partition waits up to delivery.timeout.ms, then fails naming it
    key = next(f"k{i}" for i in range(1000) if partition_for_key(f"k{i}".encode(), 6) == gone[0])
    keyed = produce_lines(f"{key}:v\n", topic, "-K:", "-b", bootstrap, "--delivery-timeout-ms", "1500")
    last_error(keyed, "1 message(s) not acknowledged", f"{topic}-{gone[0]}", "delivery.timeout.ms")

    # a keyed message sent while its partition is down goes out to the leader as soon as it is back
    async def send_across_the_restart():
        async with AsyncProducer(bootstrap, linger_ms=0, delivery_timeout_ms=60000) as producer:
            delivery = await producer.send(topic, b"came back", key.encode())
            await asyncio.to_thread(victim.start)
            return await delivery

    md = asyncio.run(send_across_the_restart())
    assert (md.partition, md.offset) == (gone[0], N)

    chosen = [x for p in sorted(lead) if p not in gone for x in ("-p", p)]
    got = json_lines(ok(cli("consume", topic, *chosen, "-o", "json", "-b", bootstrap, timeout=30)))
    new = [r for r in got if r["value"].startswith("new-")]
    assert sorted(r["value"] for r in new) == sorted(f"new-{i}" for i in range(300))


def test_spark_load_plan_names_partitions_without_a_leader_or_skips_them(cluster3, zk_chroot, tmp_path):
    from broker.spark import load  # (planning needs no Spark session)

    topic = "halfload"
    lead = topic_with_messages(cluster3, zk_chroot, topic)
    victim = cluster3[2]
    gone = sorted(p for p, owner in lead.items() if owner == victim.broker_id)
    bootstrap = f"{cluster3[0].bootstrap},{cluster3[1].bootstrap}"
    stop_and_wait_leaderless(victim, cluster3[0].bootstrap, topic, gone)
    out = load.OutputDir(tmp_path / "out")
    opts = load.LoadOptions(topics=[topic], output=out.path, bootstrap=bootstrap)
    with pytest.raises(load.SparkLoadError) as caught:
        load.plan_load(out, opts)
    assert str(caught.value) == (f"no leader for {topic}-{gone[0]}, {topic}-{gone[1]} (the brokers holding it are "
                                 "down); nothing was loaded (--skip-offline loads the other partitions)")  # fmt: skip
    opts.skip_offline = True
    plan = load.plan_load(out, opts)
    assert sorted((r.partition, r.start, r.end) for r in plan.ranges) == [
        (p, 0, N) for p in sorted(lead) if p not in gone
    ]  # fmt: skip
    assert plan.warnings == [f"skipped {topic}-{gone[0]}, {topic}-{gone[1]}: no leader (brokers down); a later load "
                             "takes them from their committed offsets"]  # fmt: skip
