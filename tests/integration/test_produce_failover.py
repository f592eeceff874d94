"""`kafkactl produce` when brokers fail or hold it back, with real brokers and real processes: a leader killed
mid-produce (acks=all) costs a wait named once on stderr and every line is acknowledged exactly once;
NOT_ENOUGH_REPLICAS is named on stderr and Ctrl-C during it returns with an honest count; Ctrl-C during a
quota-throttled produce returns and the count it prints is what the log holds."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from broker.client.admin import Admin
from tests.integration.clientkit import create_topic, unique
from tests.integration.helpers import cli, cli_env, json_lines, ok, wait_until

FAST_FAILOVER = {"zookeeper.session.timeout.ms": "6000", "replica.lag.time.max.ms": "4000"}


class Produce:
    """`kafkactl produce ARGS` running in the background; stderr read line by line as it comes."""

    def __init__(self, *args: object) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "kafkactl", "produce", *map(str, args)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=cli_env())  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def stderr(self) -> str:
        return "\n".join(self.lines)

    def wait(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        return rc


def _end(bootstrap: str, topic: str, partitions: int = 1) -> int:
    with Admin(bootstrap) as admin:
        return sum(admin.list_offsets([(topic, p) for p in range(partitions)], -1).values())


def _read_back(bootstrap: str, topic: str) -> list[tuple[str, str]]:
    out = ok(cli("consume", topic, "-b", bootstrap, "--offset", "beginning", "--exit", "-o", "json", timeout=120))
    return [(r["key"], r["value"]) for r in json_lines(out)]


def _produced(stderr: str) -> int:
    found = re.search(r"^produced (\d+) message\(s\)", stderr, re.M)
    assert found, stderr
    return int(found.group(1))


@pytest.mark.chaos
@pytest.mark.slow
def test_a_leader_killed_mid_produce_costs_a_wait_named_once_and_every_line_is_acknowledged_once(
    start_broker, tmp_path: Path
):
    brokers = {i: start_broker(i, overrides=FAST_FAILOVER) for i in (1, 2, 3)}
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    topic = unique("fo")
    with Admin(bootstrap) as admin:
        admin.create_topic(topic, 3, 3)
        wait_until(lambda: all(p.leader > 0 for p in admin.describe_topic(topic)) and len(admin.describe_topic(topic))
                   == 3, 20, "leaders")  # fmt: skip
        leader = next(p.leader for p in admin.describe_topic(topic) if p.partition == 0)
    lines = int(os.environ.get("KAFKACTL_FAILOVER_LINES", "300000"))
    data = tmp_path / "in.txt"
    data.write_text("".join(f"k{i}\tv{i}\n" for i in range(lines)))
    run = Produce(topic, "-b", bootstrap, "-f", data, "--acks", "all", "-K", "\t")
    wait_until(lambda: _end(bootstrap, topic, 3) > 0 or run.proc.poll() is not None, 60, "the first appends")
    brokers[leader].kill()
    rc = run.wait(180)
    err = run.stderr()
    assert rc == 0, err
    notices = [line for line in run.lines if line.startswith("kafkactl: ") and not line.startswith("kafkactl: error")]
    assert notices, err  # the wait is said...
    assert len(notices) <= 3, err  # ...once per cause, not once per retry
    assert any(f"{topic}-" in line for line in notices), err
    assert _produced(err) == lines
    got = _read_back(",".join(b.bootstrap for i, b in brokers.items() if i != leader), topic)
    assert len(got) == lines
    assert sorted(got) == sorted((f"k{i}", f"v{i}") for i in range(lines))


def test_not_enough_replicas_is_named_and_ctrl_c_returns_with_an_honest_count(shared_broker, tmp_path: Path):
    b = shared_broker
    topic = create_topic(b.bootstrap, unique("ner"), 1, {"min.insync.replicas": "2"})  # one replica: never enough
    data = tmp_path / "in.txt"
    data.write_text("".join(f"v{i}\n" for i in range(20)))
    run = Produce(topic, "-b", b.bootstrap, "-f", data, "--acks", "all")
    wait_until(lambda: "NOT_ENOUGH_REPLICAS" in run.stderr(), 60, "NOT_ENOUGH_REPLICAS on stderr")
    time.sleep(0.5)  # (more retries: counted, not said)
    run.proc.send_signal(signal.SIGINT)
    rc = run.wait(45)
    err = run.stderr()
    assert rc == 130, err
    assert sum("NOT_ENOUGH_REPLICAS" in line for line in run.lines if "retrying" in line) == 1, err
    assert _produced(err) == 0
    assert "0 message(s) acknowledged, 20 not (none of them appended)" in err
    assert "Traceback" not in err
    assert _end(b.bootstrap, topic) == 0


def test_ctrl_c_during_a_throttled_produce_returns_and_counts_what_the_log_holds(shared_broker, tmp_path: Path):
    b = shared_broker
    client = unique("slow")
    ok(cli("quota", "set", "--client-id", client, "producer_byte_rate=100000", "-b", b.bootstrap))
    topic = create_topic(b.bootstrap, unique("thr"), 1)
    data = tmp_path / "in.txt"
    data.write_text("".join(f"{i:06d} {'x' * 93}\n" for i in range(30000)))  # 3 MB: 30 s at 100 KB/s
    run = Produce(topic, "-b", b.bootstrap, "-f", data, "-X", f"client.id={client}")
    wait_until(lambda: "throttled" in run.stderr(), 60, "the throttle named on stderr")
    run.proc.send_signal(signal.SIGINT)
    rc = run.wait(45)
    err = run.stderr()
    assert rc == 130, err
    assert sum("throttled this client" in line for line in run.lines) == 1, err
    assert re.search(r"throttled \d+ times? \(", err), err
    produced = _produced(err)
    assert 0 < produced < 30000, err
    assert _end(b.bootstrap, topic) == produced
    assert [v for _, v in _read_back(b.bootstrap, topic)] == [f"{i:06d} {'x' * 93}" for i in range(produced)]


def test_ctrl_c_while_waiting_for_input_returns_with_what_was_acknowledged(shared_broker):
    b = shared_broker
    topic = create_topic(b.bootstrap, unique("pipe"), 1)
    proc = subprocess.Popen([sys.executable, "-m", "kafkactl", "produce", topic, "-b", b.bootstrap],
                            stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())  # fmt: skip
    try:
        assert proc.stdin is not None
        proc.stdin.write("a\nb\nc\n")  # ...and the pipe stays open: kafkactl waits for more
        proc.stdin.flush()
        wait_until(lambda: _end(b.bootstrap, topic) == 3, 60, "the three lines in the log")
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert rc == 130, err
    assert _produced(err) == 3
    assert "every message read was acknowledged (3); the input after them was not read" in err


@pytest.mark.chaos
@pytest.mark.slow
def test_the_bench_producer_goes_on_after_its_leader_is_killed(start_broker):
    """`kafkactl bench produce` shares the producer: a leader killed mid-run is waited out, and the run reports its
    figures with what the failover cost (acks=1 loses what the old leader had not replicated)."""
    from broker.bench import client as bench

    brokers = {i: start_broker(i, overrides=FAST_FAILOVER) for i in (1, 2, 3)}
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    messages = int(os.environ.get("KAFKACTL_BENCH_FAILOVER_MESSAGES", "3000000"))
    result: dict = {}

    def run() -> None:
        try:
            result.update(bench.run("produce", messages=messages, acks=1, bootstrap=bootstrap, replication_factor=3))
        except Exception as exc:  # noqa: BLE001 - the test says it
            result["error"] = f"{type(exc).__name__}: {exc}"

    runner = threading.Thread(target=run, daemon=True)
    runner.start()

    def writing() -> tuple[str, int] | None:
        with Admin(bootstrap) as admin:
            for t in admin.list_topics():
                if t.startswith("bench-produce-"):
                    part = admin.describe_topic(t)[0]
                    if (part.log_end_offset or 0) > 0 and part.leader > 0:
                        return t, part.leader
        return None

    _, leader = wait_until(writing, 60, "the bench's first appends")
    assert runner.is_alive(), "the bench ended before the kill: raise KAFKACTL_BENCH_FAILOVER_MESSAGES"
    brokers[leader].kill()
    runner.join(300)
    assert not runner.is_alive(), "the bench did not finish"
    assert "error" not in result, result
    assert result["produce_msgs_per_s"] > 0  # (a shortfall, if any, is reported beside: leader_changes)
