"""A private ZooKeeper and one broker process under a temporary directory, for the benchmarks that measure a
broker alone (`idle_connections.py`, `offset_commits.py`): `with private_broker() as (pid, port, zk_connect):`."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from broker.zk.server import ZooKeeperServer


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kb(pid: int) -> int:
    """A process's resident memory (VmRSS), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def _start_broker(root: Path, zk_connect: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    argv = [sys.executable, "-m", "kafkactl", "broker", "start", "--broker-id", "1", "--port", str(port),
            "--log-dirs", str(root / "logs"), "-z", zk_connect, "--no-embedded-zookeeper"]  # fmt: skip
    out = root / "broker.out"
    env = {**os.environ, "KAFKACTL_HOME": str(root / "home")}
    with open(out, "ab") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 60
    while "serving on" not in out.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"broker did not start:\n{out.read_text(errors='replace')}")
        time.sleep(0.1)
    return proc, port


@contextlib.contextmanager
def private_broker() -> Iterator[tuple[int, int, str]]:
    """(the broker's pid, its port, ZooKeeper's connect string); both stopped, and their files removed, at the
    end."""
    root = Path(tempfile.mkdtemp(prefix="kafkactl-bench-"))
    zk = ZooKeeperServer(root / "zookeeper", free_port())
    zk.start()
    broker = None
    try:
        broker, port = _start_broker(root, zk.connect_string)
        yield broker.pid, port, zk.connect_string
    finally:
        if broker is not None and broker.poll() is None:
            broker.send_signal(signal.SIGTERM)
            try:
                broker.wait(30)
            except subprocess.TimeoutExpired:
                broker.kill()
                broker.wait(10)
        zk.stop()
        shutil.rmtree(root, ignore_errors=True)  # (its log dirs and ZooKeeper's data)
