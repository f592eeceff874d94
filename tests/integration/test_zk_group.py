"""`kafkactl consume TOPIC --group G`: the paper's ZooKeeper-coordinated group consumer, as subprocesses
against a real broker and the real ZooKeeper (ownership, takeover after kill -9, commits, resets)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest

from broker.client.group import GroupConsumer
from broker.client.sync import Producer
from broker.daemon import free_port
from broker.zk import consumers
from tests.integration.clientkit import consumed_summary, create_topic, kcli, one_error, unique
from tests.integration.cluster import BrokerProcess
from tests.integration.helpers import CliProcess, wait_until, zk_session

SESSION_MS = 2000  # the members' ZooKeeper session: a killed member's partitions move after about this long
FAST = ["-X", f"zookeeper.session.timeout.ms={SESSION_MS}", "-X", "auto.commit.interval.ms=300"]
_ASSIGNED = re.compile(r"^group (\S+): assigned (\S+)\[([\d,]*)\]$", re.M)


# --- helpers ---------------------------------------------------------------------------------------


def member(broker: BrokerProcess, topic: str, group: str, root: Path, name: str, *extra: str) -> CliProcess:
    """A `kafkactl consume TOPIC --group G -o json` child (stopped by pid at the end of the `with`)."""
    args = ["consume", topic, "--group", group, "-o", "json", "-b", broker.bootstrap, "-z", broker.zk_connect,
            *FAST, *extra]  # fmt: skip
    return CliProcess(args, root, name=name)


def assigned(proc: CliProcess) -> list[int] | None:
    """The partitions of the last `group G: assigned T[...]` line on the member's stderr (None: none yet)."""
    found = _ASSIGNED.findall(proc.stderr())
    if not found:
        return None
    return [int(p) for p in found[-1][2].split(",") if p]


def records(proc: CliProcess) -> list[dict]:
    """The JSON lines the member printed (a line cut short by kill -9 is left out)."""
    out = []
    for line in proc.stdout().split("\n"):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def owners(zk_connect: str, group: str) -> dict[tuple[str, int], str]:
    with zk_session(zk_connect) as zk:
        return consumers.owners(zk, group)


def members(zk_connect: str, group: str) -> list[str]:
    with zk_session(zk_connect) as zk:
        return list(consumers.members(zk, group))


def committed(zk_connect: str, group: str, topic: str) -> dict[int, int]:
    with zk_session(zk_connect) as zk:
        return {p: c.offset for (_, p), c in consumers.committed(zk, group, [topic]).items()}


def produce(bootstrap: str, topic: str, start: int, count: int) -> dict[tuple[int, int], str]:
    """`count` keyed messages `m-<i>` (keys k0..k36); returns {(partition, offset): value}."""
    with Producer(bootstrap, linger_ms=2) as p:
        futures = [(f"m-{i}", p.send(topic, f"m-{i}".encode(), key=f"k{i % 37}".encode()))
                   for i in range(start, start + count)]  # fmt: skip
        sent = {}
        for value, f in futures:
            md = f.result(timeout=30)
            sent[(md.partition, md.offset)] = value
    return sent


def interrupt(proc: CliProcess, timeout: float = 30) -> int:
    """SIGINT (Ctrl-C) and wait for the exit code."""
    assert proc.proc is not None
    proc.proc.send_signal(signal.SIGINT)
    try:
        return proc.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"no exit within {timeout}s of SIGINT:\n{proc.output()}") from None


def assert_in_order(proc: CliProcess) -> None:
    """Within one member's output, each partition's offsets strictly increase."""
    last: dict[int, int] = {}
    for r in records(proc):
        assert r["offset"] > last.get(r["partition"], -1), f"p{r['partition']} offset {r['offset']} after " \
            f"{last.get(r['partition'])}:\n{proc.output()}"  # fmt: skip
        last[r["partition"]] = r["offset"]


def consumed_all(procs: list[CliProcess], sent: dict[tuple[int, int], str]) -> bool:
    seen = {(r["partition"], r["offset"]): r["value"] for p in procs for r in records(p)}
    return all(seen.get(k) == v for k, v in sent.items())


def clean_stderr(proc: CliProcess) -> None:
    err = proc.stderr()
    assert "Traceback" not in err and "error" not in err.lower(), proc.output()


# --- usage -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--group", "g", "--offset", "beginning"], ["--offset", "--group", "committed", "--reset"]),
        (["--group", "g", "-p", "0"], ["--partition", "--group"]),
        (["--group", "g", "--reset", "middle"], ["--reset", "earliest or latest"]),
        (["--group", "g", "-X", "no.such.key=1"], ["no.such.key"]),
        (["--group", "g", "-X", "novalue"], ["KEY=VALUE"]),
        (["--reset", "earliest"], ["--reset needs --group"]),
        (["--group", "a/b"], ["group id"]),
    ],
)
def test_group_usage_errors(args: list[str], needles: list[str]) -> None:
    r = kcli("consume", "t", *args, "-b", "127.0.0.1:1", "-z", "127.0.0.1:1")
    one_error(r, *needles, code=2)


def test_unknown_topic_is_one_error_line(broker: BrokerProcess) -> None:
    r = kcli("consume", "no-such-topic", "--group", "g", "-b", broker.bootstrap, "-z", broker.zk_connect, timeout=60)
    one_error(r, "no-such-topic", allow_summary=True)
    assert members(broker.zk_connect, "g") == []


# --- three members, kill -9, takeover --------------------------------------------------------------


@pytest.mark.slow
def test_three_members_share_twelve_partitions_and_take_over_after_kill_9(broker: BrokerProcess, tmp_path: Path):
    bs, zk = broker.bootstrap, broker.zk_connect
    topic = create_topic(bs, unique("grp"), 12)
    group = unique("g")
    sent = produce(bs, topic, 0, 300)  # before any member starts
    procs = [member(broker, topic, group, tmp_path, f"m{i}", "--reset", "earliest") for i in range(3)]
    try:
        for p in procs:
            p.start()

        def balanced() -> bool:
            lines = [assigned(p) for p in procs]
            if any(a is None or len(a) != 4 for a in lines):
                return False
            own = owners(zk, group)
            if len(own) != 12:
                return False
            by_owner: dict[str, list[int]] = defaultdict(list)
            for (_, part), cid in own.items():
                by_owner[cid].append(part)
            return sorted(sorted(v) for v in by_owner.values()) == sorted(lines)  # type: ignore[type-var]

        wait_until(balanced, 60, "three members own 4 partitions each", interval=0.2)
        ranges = sorted(assigned(p) for p in procs)  # type: ignore[type-var]
        assert ranges == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
        assert len(members(zk, group)) == 3
        for p in procs:
            assert p.alive, p.output()

        sent |= produce(bs, topic, 300, 300)  # during
        wait_until(lambda: consumed_all(procs, sent), 60, "all 600 consumed by the three", interval=0.2)

        # kill -9 one member: its session expires, the other two rebalance and own all 12
        victim, survivors = procs[1], [procs[0], procs[2]]
        victim_parts = set(assigned(victim) or [])
        victim_id = owners(zk, group)[(topic, min(victim_parts))]
        t0 = time.monotonic()
        victim.kill()

        expired: list[float] = []

        def taken_over() -> bool:
            if not expired and victim_id not in members(zk, group):
                expired.append(time.monotonic() - t0)
            own = owners(zk, group)
            return len(own) == 12 and victim_id not in own.values() and all(len(assigned(p) or []) == 6
                                                                            for p in survivors)  # fmt: skip

        wait_until(taken_over, SESSION_MS / 1000 + 30, "the two survivors own all 12", interval=0.05)
        takeover = time.monotonic() - t0
        print(f"kill -9 takeover: {takeover:.2f}s, of which session expiry {expired[0] if expired else takeover:.2f}s"
              f" (session timeout {SESSION_MS} ms)")  # fmt: skip
        assert victim_id not in members(zk, group)
        sent |= produce(bs, topic, 600, 300)  # after the takeover
        wait_until(lambda: consumed_all(procs, sent), 60, "all 900 consumed at least once", interval=0.2)
        for p in procs:
            assert_in_order(p)

        # Ctrl-C both survivors: they commit exactly what they printed and leave
        last: dict[int, int] = {}
        for p in survivors:
            assert interrupt(p) == 0, p.output()
            clean_stderr(p)
            for r in records(p):
                last[r["partition"]] = max(last.get(r["partition"], -1), r["offset"])
        ends = {part: 0 for part in range(12)}  # a partition no key hashed to stays at its (committed) start
        for part, off in sent:
            ends[part] = max(ends[part], off + 1)
        assert committed(zk, group, topic) == ends
        assert {p: o + 1 for p, o in last.items()} == {p: e for p, e in ends.items() if e}
        assert owners(zk, group) == {}
        assert members(zk, group) == []
    finally:
        for p in procs:
            p.kill()


# --- Ctrl-C commits; a restart resumes ------------------------------------------------------------


@pytest.mark.slow
def test_ctrl_c_commits_leaves_and_a_restart_resumes(broker: BrokerProcess, tmp_path: Path):
    bs, zk = broker.bootstrap, broker.zk_connect
    topic = create_topic(bs, unique("grp"), 4)
    group = unique("g")
    sent = produce(bs, topic, 0, 200)
    first = member(broker, topic, group, tmp_path, "first", "--reset", "earliest",
                   "-X", "enable.auto.commit=false")  # fmt: skip
    with first:
        wait_until(lambda: assigned(first) == [0, 1, 2, 3], 30, "assigned all four")
        wait_until(lambda: len(records(first)) >= 200, 30, "all 200 printed")
        (member_id,) = members(zk, group)
        assert committed(zk, group, topic) == {p: 0 for p in range(4)}  # the reset start, committed at once
        rc = interrupt(first)
    assert rc == 0, first.output()
    clean_stderr(first)
    assert consumed_summary(first.stderr()) == 200
    got = records(first)
    assert {(r["partition"], r["offset"]): r["value"] for r in got} == sent
    last = {}
    for r in got:
        last[r["partition"]] = r["offset"] + 1
    assert committed(zk, group, topic) == last  # commit on Ctrl-C, auto-commit off
    assert member_id not in members(zk, group)
    assert owners(zk, group) == {}

    # a restart of the group sees only what came after the commit
    more = produce(bs, topic, 200, 40)
    second = member(broker, topic, group, tmp_path, "second")
    with second:
        wait_until(lambda: len(records(second)) >= 40, 30, "the 40 new messages")
        wait_until(lambda: assigned(second) == [0, 1, 2, 3], 5, "assigned all four")
        assert second.terminate(30) == 0, second.output()  # SIGTERM leaves as cleanly as Ctrl-C
    clean_stderr(second)
    assert {(r["partition"], r["offset"]): r["value"] for r in records(second)} == more
    assert committed(zk, group, topic) == {p: max(off for (q, off) in sent | more if q == p) + 1 for p in range(4)}
    assert members(zk, group) == [] and owners(zk, group) == {}

    # --exit with nothing new: prints nothing, ends by itself, commits nothing new
    before = committed(zk, group, topic)
    r = kcli("consume", topic, "--group", group, "-e", "-o", "json", "-b", bs, "-z", zk, *FAST, timeout=60)
    assert r.returncode == 0, str(r)
    assert r.stdout == ""
    assert consumed_summary(r.err) == 0
    assert committed(zk, group, topic) == before


@pytest.mark.slow
def test_max_messages_commits_exactly_what_was_printed(broker: BrokerProcess):
    bs, zk = broker.bootstrap, broker.zk_connect
    topic = create_topic(bs, unique("grp"), 1)
    group = unique("g")
    produce(bs, topic, 0, 10)
    r = kcli("consume", topic, "--group", group, "--reset", "earliest", "-c", "4", "--format", "%o\\n", "-b", bs,
             "-z", zk, *FAST, timeout=60)  # fmt: skip
    assert r.returncode == 0, str(r)
    assert r.stdout == "0\n1\n2\n3\n"
    assert committed(zk, group, topic) == {0: 4}
    r = kcli("consume", topic, "--group", group, "-e", "--format", "%o\\n", "-b", bs, "-z", zk, *FAST, timeout=60)
    assert r.returncode == 0, str(r)
    assert r.stdout == "4\n5\n6\n7\n8\n9\n"
    assert committed(zk, group, topic) == {0: 10}


# --- auto.offset.reset on a new group --------------------------------------------------------------


@pytest.mark.slow
def test_a_new_group_starts_at_earliest_or_latest(broker: BrokerProcess, tmp_path: Path):
    bs, zk = broker.bootstrap, broker.zk_connect
    topic = create_topic(bs, unique("grp"), 2)
    old = produce(bs, topic, 0, 20)

    early = unique("early")
    r = kcli("consume", topic, "--group", early, "--reset", "earliest", "-e", "-o", "json", "-b", bs, "-z", zk,
             *FAST, timeout=60)  # fmt: skip
    assert r.returncode == 0, str(r)
    assert {(o["partition"], o["offset"]): o["value"] for o in map(json.loads, r.stdout.splitlines())} == old
    assert "assigned" in r.err

    late = unique("late")  # latest is the default, as in Kafka
    r = kcli("consume", topic, "--group", late, "-e", "-o", "json", "-b", bs, "-z", zk, *FAST, timeout=60)
    assert r.returncode == 0, str(r)
    assert r.stdout == ""
    ends: dict[int, int] = defaultdict(int)
    for part, off in old:
        ends[part] = max(ends[part], off + 1)
    assert committed(zk, late, topic) == {p: ends[p] for p in range(2)}  # where it started is remembered

    tail = member(broker, topic, unique("tail"), tmp_path, "tail", "--reset", "latest")
    with tail:
        wait_until(lambda: assigned(tail) == [0, 1], 30, "assigned both")
        new = produce(bs, topic, 20, 6)
        wait_until(lambda: len(records(tail)) >= 6, 30, "the 6 new messages")
        assert interrupt(tail) == 0, tail.output()
    assert {(o["partition"], o["offset"]): o["value"] for o in records(tail)} == new


@pytest.mark.slow
def test_no_committed_offset_with_reset_none_is_one_error_line(broker: BrokerProcess):
    bs, zk = broker.bootstrap, broker.zk_connect
    topic = create_topic(bs, unique("grp"), 1)
    group = unique("g")
    r = kcli("consume", topic, "--group", group, "-X", "auto.offset.reset=none", "-b", bs, "-z", zk, *FAST)
    one_error(r, group, "no committed offset", f"{topic}-0", allow_summary=True)
    assert members(zk, group) == []


def test_zookeeper_not_answering_is_one_error_line(broker: BrokerProcess):
    topic = create_topic(broker.bootstrap, unique("grp"), 1)
    r = kcli("consume", topic, "--group", "g", "-b", broker.bootstrap, "-z", f"127.0.0.1:{free_port()}",
             "-X", "zookeeper.connection.timeout.ms=1000")  # fmt: skip
    one_error(r, "ZooKeeper", allow_summary=True)


# --- a rebalance that cannot converge --------------------------------------------------------------


@pytest.mark.slow
def test_a_member_that_cannot_take_its_range_gives_up_with_a_clear_error(broker: BrokerProcess, tmp_path: Path):
    """A stopped (SIGSTOP) member with a long session keeps its partitions; a newcomer whose range it holds
    retries a bounded number of times, then fails with one error line and leaves the group."""
    bs, zk = broker.bootstrap, broker.zk_connect
    topic = create_topic(bs, unique("grp"), 4)
    group = unique("g")
    holder = CliProcess(["consume", topic, "--group", group, "-b", bs, "-z", zk, "-X",
                         "zookeeper.session.timeout.ms=30000"], tmp_path, name="holder")  # fmt: skip
    with holder:
        wait_until(lambda: assigned(holder) == [0, 1, 2, 3], 30, "the holder owns all four")
        (holder_id,) = members(zk, group)
        os.kill(holder.pid, signal.SIGSTOP)
        try:
            r = kcli("consume", topic, "--group", group, "-b", bs, "-z", zk, *FAST,
                     "-X", "rebalance.max.retries=3", "-X", "rebalance.backoff.ms=200", timeout=60)  # fmt: skip
            one_error(r, "did not converge", "3 attempts", holder_id, allow_summary=True)
            assert members(zk, group) == [holder_id]  # the newcomer left
            assert set(owners(zk, group).values()) == {holder_id}
        finally:
            os.kill(holder.pid, signal.SIGCONT)
        assert interrupt(holder) == 0, holder.output()
    assert members(zk, group) == []


# --- the library API -------------------------------------------------------------------------------


@pytest.mark.slow
def test_group_consumer_api_assignment_iteration_and_manual_commit(broker: BrokerProcess):
    """Two GroupConsumers in one process: disjoint assignments, the async iterator, a manual commit that
    writes exactly the positions after what was handed out, and a clean close that deregisters."""
    bs, zk = broker.bootstrap, broker.zk_connect
    topic = create_topic(bs, unique("grp"), 4)
    group = unique("g")
    sent = produce(bs, topic, 0, 80)
    # the default 6 s session: a shorter one can expire on a loaded CI machine and rebalance mid-test
    settings = {"auto_offset_reset": "earliest", "enable_auto_commit": False, "fetch_max_wait_ms": 100}

    async def scenario() -> None:
        a = await GroupConsumer(bs, zk, group, [topic], **settings).start()
        b = await GroupConsumer(bs, zk, group, [topic], **settings).start()
        try:
            deadline = asyncio.get_running_loop().time() + 30
            while len(a.assignment()) != 2 or len(b.assignment()) != 2:
                assert asyncio.get_running_loop().time() < deadline, (a.assignment(), b.assignment())
                await a.getmany(timeout_ms=100)  # a's rebalance runs while it polls
                await b.getmany(timeout_ms=100)
            assert sorted(a.assignment() + b.assignment()) == [(topic, p) for p in range(4)]
            # seeing what b and a owned: drain a through its iterator, b through getmany
            seen: dict[tuple[int, int], str] = {}
            want = {k for k in sent if (topic, k[0]) in a.assignment()}
            try:
                async with asyncio.timeout(60):  # a hang says what was missing, not a bare pytest timeout
                    async for batch in a:
                        seen.update({(r.partition, r.offset): r.value.decode() for r in batch})
                        if want <= seen.keys():
                            break
            except TimeoutError:
                pytest.fail(f"a never handed out {sorted(want - seen.keys())} of {a.assignment()}")
            await a.commit()
            assert a.committed() == {tp: a.position(tp) for tp in a.assignment()}
            with zk_session(zk) as client:
                stored = {tp: c.offset for tp, c in consumers.committed(client, group, [topic]).items()}
            for tp in a.assignment():
                assert stored[tp] == max(o for (p, o) in want if p == tp[1]) + 1
            assert {k: v for k, v in seen.items()} == {k: sent[k] for k in seen}
        finally:
            await b.close()
            await a.close()
        with zk_session(zk) as client:
            assert consumers.members(client, group) == {}
            assert consumers.owners(client, group) == {}

    asyncio.run(asyncio.wait_for(scenario(), 150))  # a stuck await fails with its traceback
