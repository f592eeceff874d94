"""Broker restart time with many partitions: from starting the process to a Metadata answer that names a leader
for every partition (issue 28, step 2 of docs/plans/scale.md).

    .venv/bin/python benchmarks/zk_startup.py [--partitions 5000] [--topics 5] [--restarts 3] [--repo DIR ...]

Starts a ZooKeeper (`broker.zk.server`) and one broker (`python -m kafkactl broker start`, run from the first
`--repo`, by default this checkout), creates `--topics` topics sharing `--partitions` partitions at replication
factor 1, waits until all are led, then stops the broker (SIGTERM) and starts it again `--restarts` times from
each `--repo` in turn (the same ZooKeeper and log dirs: give two checkouts to compare them). Reports, per
restart, the seconds until the broker logs "serving on" and until Metadata shows every partition with a leader.
Before the restarts it also times the ZooKeeper part alone, in this process: reading every topic's assignment and
partition states and watching each state, one round trip after another with a kazoo `DataWatch` per state (the
broker before issue 28's step 2) and pipelined (`broker.zk.node_watches`, as the broker does now).
JSON on stdout; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from broker.client.admin import Admin
from broker.daemon import free_port, port_open
from broker.zk import paths, registry
from broker.zk.node_watches import NodeWatches
from broker.zk.server import ZooKeeperServer

REPO = Path(__file__).resolve().parent.parent


def led_partitions(bootstrap: str, topics: list[str]) -> int:
    """How many partitions of `topics` Metadata shows with a leader (0 while the broker does not answer)."""
    try:
        with Admin(bootstrap, timeout=5) as admin:
            md = admin.cluster.metadata(topics)
    except Exception:
        return 0
    return sum(1 for t in md["topics"] for p in t["partitions"] if p["leader_id"] >= 0)


class Broker:
    def __init__(self, repo: Path, root: Path, zk_connect: str, port: int) -> None:
        self.port = port
        self.output = root / "broker.out"
        self.argv = [sys.executable, "-m", "kafkactl", "broker", "start", "--broker-id", "1", "--port",
                     str(self.port), "--log-dirs", str(root / "logs"), "-z", zk_connect,
                     "--no-embedded-zookeeper"]  # fmt: skip
        self.env = {**os.environ, "KAFKACTL_HOME": str(root / "home"), "PYTHONPATH": str(repo)}
        self.repo = repo
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.output, "w") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=self.repo)

    def serving(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"the broker exited with {self.proc.returncode}: see {self.output}")
        return port_open("127.0.0.1", self.port, 0.2) and "serving on" in self.output.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def wait_led(broker: Broker, topics: list[str], total: int, timeout: float) -> tuple[float | None, float]:
    """(seconds until "serving on", seconds until every partition is led) since now."""
    start = time.monotonic()
    serving = None
    while time.monotonic() - start < timeout:
        if serving is None and broker.serving():
            serving = time.monotonic() - start
        if serving is not None and led_partitions(broker.bootstrap, topics) == total:
            return serving, time.monotonic() - start
        time.sleep(0.1)
    raise RuntimeError(f"not all {total} partitions led after {timeout:g}s")


def zk_read(zk_connect: str, topics: list[str]) -> dict[str, float]:
    """Seconds to read and watch every partition state of `topics`: serially (with DataWatches), and pipelined."""
    from kazoo.client import KazooClient
    from kazoo.recipe.watchers import DataWatch

    out = {}
    for way in ("serial_s", "pipelined_s"):
        zk = KazooClient(hosts=zk_connect, timeout=10.0)
        zk.start(timeout=15)
        try:
            started = time.monotonic()
            if way == "serial_s":
                for t in topics:
                    found = registry.moves_and_id(zk, t)
                    assert found is not None
                    for p in found[0][0]:
                        registry.partition_state(zk, t, p)
                        DataWatch(zk, paths.partition_state(t, p), lambda data, stat: None)
            else:
                found_all = registry.topics_moves_and_ids(zk, topics)
                watches: NodeWatches[tuple[str, int]] = NodeWatches(zk, lambda changes: None)
                watches.watch({(t, p): paths.partition_state(t, p) for t, m in found_all.items() if m for p in m[0][0]})
            out[way] = round(time.monotonic() - started, 2)
        finally:
            zk.stop()
            zk.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=5000, help="partitions in all (default 5000)")
    parser.add_argument("--topics", type=int, default=5, help="topics sharing them (default 5)")
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--repo", type=Path, action="append",
                        help="a checkout whose broker runs (repeatable; default this one)")  # fmt: skip
    args = parser.parse_args()
    per, extra = divmod(args.partitions, args.topics)
    counts = {f"scale-{i}": per + (1 if i < extra else 0) for i in range(args.topics)}
    root = Path(tempfile.mkdtemp(prefix="kafkactl-zk-startup-"))
    zk = ZooKeeperServer(root / "zookeeper", free_port())
    zk.start()
    repos = [r.resolve() for r in args.repo or [REPO]]
    port = free_port()
    broker = Broker(repos[0], root, zk.connect_string, port)
    try:
        broker.start()
        wait_led(broker, [], 0, 60)
        started = time.monotonic()
        with Admin(broker.bootstrap, timeout=120) as admin:
            for name, n in counts.items():
                admin.create_topic(name, n, 1)
        _, led = wait_led(broker, list(counts), args.partitions, 600)
        create_s = time.monotonic() - started
        read = zk_read(zk.connect_string, list(counts))
        runs: dict[str, list[dict[str, float]]] = {str(r): [] for r in repos}
        for _ in range(args.restarts):
            for repo in repos:
                broker.stop()
                broker = Broker(repo, root, zk.connect_string, port)
                broker.start()
                serving, led = wait_led(broker, list(counts), args.partitions, 600)
                runs[str(repo)].append({"serving_s": round(serving or 0, 2), "all_led_s": round(led, 2)})
        print(json.dumps({"partitions": args.partitions, "topics": args.topics, "create_s": round(create_s, 2),
                          "zk_read": read, "restarts": runs}))  # fmt: skip
    finally:
        broker.stop()
        zk.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
