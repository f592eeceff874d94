"""Real broker processes for integration tests: start `kafkactl broker start` as a child, wait, stop by pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from kazoo.client import KazooClient

from broker.daemon import free_port, port_open


def new_chroot(zk_connect: str) -> str:
    """`host:port/t<hex>` with the chroot created."""
    chroot = f"/t{uuid.uuid4().hex}"
    client = KazooClient(hosts=zk_connect, timeout=10.0)
    client.start(timeout=15)
    try:
        client.ensure_path(chroot)
    finally:
        client.stop()
        client.close()
    return zk_connect + chroot


class BrokerProcess:
    """One `kafkactl broker start` child with its own port and log dir."""

    def __init__(self, broker_id: int, zk_connect: str, root: Path, *, port: int | None = None,
                 overrides: dict[str, str] | None = None, env: dict[str, str] | None = None) -> None:  # fmt: skip
        self.broker_id = broker_id
        self.zk_connect = zk_connect
        self.port = port or free_port()
        self.root = Path(root)
        self.log_dir = self.root / f"broker-{broker_id}-logs"
        self.home = self.root / "home"
        self.output = self.root / f"broker-{broker_id}.out"
        self.overrides = dict(overrides or {})
        self.env = dict(env or {})  # over the test's own environment
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        argv = [sys.executable, "-m", "kafkactl", "broker", "start", "--broker-id", str(self.broker_id),
                "--port", str(self.port), "--log-dirs", str(self.log_dir), "-z", self.zk_connect,
                "--no-embedded-zookeeper"]  # fmt: skip
        for key, value in self.overrides.items():
            argv += ["--override", f"{key}={value}"]
        return argv

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        """Start the broker and wait until this run of it serves (its output is appended to the last run's: only
        what this run printed counts; a restart may first wait for its old registration to expire)."""
        self.home.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "KAFKACTL_HOME": str(self.home), **self.env}
        begin = self.output.stat().st_size if self.output.exists() else 0
        if begin:
            timeout = max(timeout, 90.0)
        with open(self.output, "ab") as out:
            self.proc = subprocess.Popen(self.argv(), stdout=out, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker {self.broker_id} exited with {self.proc.returncode}:\n{self.log_text()}")
            if port_open("127.0.0.1", self.port, 0.2) and b"serving on" in self._output_since(begin):
                return self
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"broker {self.broker_id} not serving after {timeout}s:\n{self.log_text()}")
            time.sleep(0.05)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait: the clean shutdown path. Returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGUSR1)  # its threads' stacks into its output, for the failure report
            time.sleep(0.5)
            self.kill()
            raise

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def pause(self) -> None:
        """SIGSTOP: the process stops answering (and heartbeating ZooKeeper) until `resume`."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop(timeout=20)
        except Exception:
            self.kill()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _output_since(self, offset: int) -> bytes:
        try:
            with open(self.output, "rb") as f:
                f.seek(offset)
                return f.read()
        except OSError:
            return b""

    def log_text(self) -> str:
        try:
            return self.output.read_text(errors="replace")
        except OSError:
            return ""
