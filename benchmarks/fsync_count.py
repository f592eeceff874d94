"""fsyncs on control paths at many partitions: topic creation, an idempotent round, a clean stop.

    .venv/bin/python benchmarks/fsync_count.py --partitions 2000 [--strace] [--round]

Starts a private local cluster of ONE broker (`kafkactl cluster up`, under a temporary KAFKACTL_HOME),
creates a topic of `--partitions` partitions with one replica and measures:
- create: seconds from CreateTopics until Metadata shows every partition led;
- round (with `--round`): one idempotent message to every partition, then the broker's minutely checkpoint
  (waited for: 65 s), where the producer snapshots are written;
- stop: seconds of the broker's clean stop (SIGTERM until it exited).
With `--strace`, each phase runs under `strace -f -c` attached to the broker and reports its counts of
fsync, fdatasync and syncfs (strace slows the broker: compare times from a run without it). JSON on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from broker.client.admin import Admin
from broker.client.producer import AsyncProducer

TOPIC = "fsyncs"
CALLS = ("fsync", "fdatasync", "syncfs")


class Trace:
    """`strace -f -c` attached to a process for one phase: the counts of the sync calls."""

    def __init__(self, pid: int, out: Path) -> None:
        self.out = out
        self.proc = subprocess.Popen(["strace", "-f", "-c", "-e", "trace=" + ",".join(CALLS), "-o", str(out),
                                      "-p", str(pid)], stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(1)  # (attached to every thread)

    def counts(self) -> dict[str, int]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        self.proc.wait(30)
        text = self.out.read_text() if self.out.exists() else ""
        row = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", re.M)
        found = {m.group(2): int(m.group(1)) for m in row.finditer(text)}
        return {c: found.get(c, 0) for c in CALLS}


def all_led(bootstrap: str, n: int) -> bool:
    try:
        with Admin(bootstrap) as admin:
            parts = admin.describe_topic(TOPIC)
    except Exception:
        return False
    return len(parts) == n and all(p.leader >= 0 for p in parts)


async def one_round(bootstrap: str, n: int) -> None:
    producer = await AsyncProducer(bootstrap, acks="all", enable_idempotence=True).start()
    try:
        for p in range(n):
            await producer.send(TOPIC, b"x", partition=p)
        await producer.flush()
    finally:
        await producer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--strace", action="store_true", help="count sync calls per phase (slows the broker)")
    parser.add_argument("--round", action="store_true", help="also an idempotent round and the minute's pass")
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="kafkactl-fsyncs-")
    os.environ["KAFKACTL_HOME"] = home
    from broker import local_cluster  # (reads KAFKACTL_HOME)

    status = local_cluster.up("fsyncs", 1)
    bootstrap = status["bootstrap"]
    pid = status["brokers"][0]["pid"]
    out: dict = {"partitions": args.partitions, "strace": args.strace}
    trace = None
    try:
        if args.strace:
            trace = Trace(pid, Path(home) / "create.strace")
        start = time.monotonic()
        try:
            with Admin(bootstrap) as admin:
                admin.create_topic(TOPIC, args.partitions, 1)
        except Exception as exc:  # (a broker busy creating logs may answer late: the topic is created anyway)
            out["create_answer"] = f"{type(exc).__name__}: {exc}"
        while not all_led(bootstrap, args.partitions):
            time.sleep(0.2)
        out["create_s"] = round(time.monotonic() - start, 2)
        if trace is not None:
            time.sleep(2)
            out["create_syncs"] = trace.counts()
        if args.round:
            if args.strace:
                trace = Trace(pid, Path(home) / "round.strace")
            start = time.monotonic()
            asyncio.run(one_round(bootstrap, args.partitions))
            out["round_s"] = round(time.monotonic() - start, 2)
            time.sleep(65)  # the minutely checkpoint and its snapshot pass
            if trace is not None:
                out["round_and_minute_syncs"] = trace.counts()
        if args.strace:
            trace = Trace(pid, Path(home) / "stop.strace")
        start = time.monotonic()
        local_cluster.down("fsyncs", broker=status["brokers"][0]["id"])
        out["stop_s"] = round(time.monotonic() - start, 2)
        if trace is not None:
            out["stop_syncs"] = trace.counts()
        trace = None
    finally:
        if trace is not None:
            trace.counts()
        local_cluster.down("fsyncs", purge=True)
        shutil.rmtree(home, ignore_errors=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
