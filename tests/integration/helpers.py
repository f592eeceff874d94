"""Helpers for the integration tests of the broker and topic commands: the CLI (in this process where it
can be), polling with deadlines, raw wire requests, ZooKeeper reads, and child processes that are always
stopped by pid."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from broker.client.connection import Connection
from broker.daemon import is_alive, stop_process
from broker.protocol.api import ApiKey
from broker.records.batch import Record, build_batch, decode_header, iter_records
from tests.cli_runner import run_cli
from tests.integration.cluster import BrokerProcess, new_chroot

T = TypeVar("T")

# --- the command line ------------------------------------------------------------------------------


def cli_env(home: Path | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKACTL_") or k == "KAFKACTL_HOME"}
    env.update(extra)
    if home is not None:
        env["KAFKACTL_HOME"] = str(home)
    return env


def cli(*args: object, home: Path | None = None, timeout: float = 60.0,
        input_text: str | None = None) -> subprocess.CompletedProcess:  # fmt: skip
    """`kafkactl ARGS` (in this process where it can be: tests/cli_runner.py) with the environment of
    `cli_env(home)`, output captured as text; `input_text` its standard input (else none)."""
    return run_cli(list(args), cli_env(home), input=input_text, timeout=timeout)


def ok(result: subprocess.CompletedProcess) -> str:
    """The stdout of a command that must have succeeded, with no error output."""
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout


def error_line(result: subprocess.CompletedProcess, *needles: str) -> str:
    """The single `kafkactl: error: ...` line of a failed command (no traceback); it must contain `needles`."""
    assert result.returncode != 0, f"expected a failure\nstdout: {result.stdout}\nstderr: {result.stderr}"
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one error line, got {len(lines)}:\n{result.stderr}"
    line = lines[0]
    assert line.startswith("kafkactl: error: "), line
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in text.splitlines() if ln.strip()]


def tsv(text: str) -> list[list[str]]:
    """Rows of a table printed to a pipe (tab-separated, header first)."""
    return [ln.split("\t") for ln in text.splitlines() if ln.strip()]


# --- waiting ---------------------------------------------------------------------------------------


def wait_until(fn: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll `fn` until it returns something truthy (returned) or `timeout` seconds pass (AssertionError)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = fn()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not true after {timeout:g}s (last: {last!r})")
        time.sleep(interval)


# --- ZooKeeper -------------------------------------------------------------------------------------


@contextlib.contextmanager
def zk_session(hosts: str) -> Iterator[KazooClient]:
    """A started kazoo client for `host:port[/chroot]`, stopped and closed afterwards."""
    client = KazooClient(hosts=hosts, timeout=10.0)
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def zk_json(zk: KazooClient, path: str) -> Any:
    data, _ = zk.get(path)
    return json.loads(data)


def controller_of(zk_connect: str) -> int | None:
    """The broker `/controller` names, read once (an exists and a get can see the ephemeral go between them)."""
    with zk_session(zk_connect) as zk:
        try:
            return zk_json(zk, "/controller")["brokerid"]
        except NoNodeError:  # (none, or its session just expired)
            return None


# --- the wire protocol -----------------------------------------------------------------------------


def connect(bootstrap: str) -> Connection:
    host, _, port = bootstrap.rpartition(":")
    return Connection(host, int(port), client_id="it-tests", timeout=15.0)


def metadata(bootstrap: str, topics: list[str] | None = None, *, auto_create: bool = False) -> dict[str, Any]:
    body = {"topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": auto_create}  # fmt: skip
    with connect(bootstrap) as conn:
        return conn.request(ApiKey.METADATA, body)


def leaders(md: dict[str, Any], topic: str) -> dict[int, int]:
    """{partition: leader id} of `topic` in a Metadata answer."""
    (t,) = [t for t in md["topics"] if t["name"] == topic]
    return {p["partition_index"]: p["leader_id"] for p in t["partitions"]}


def make_batch(values: list[bytes], key: bytes | None = None) -> bytes:
    ts = int(time.time() * 1000)
    return build_batch([Record(i, ts, key, v) for i, v in enumerate(values)])


def produce_body(topic: str, partition: int, batch: bytes, acks: int = 1) -> dict[str, Any]:
    return {"transactional_id": None, "acks": acks, "timeout_ms": 10000,
            "topics": [{"name": topic, "partitions": [{"index": partition, "records": batch}]}]}  # fmt: skip


def produce(conn: Connection, topic: str, partition: int, values: list[bytes]) -> dict[str, Any]:
    """Send one Produce (acks=1) of `values` as one batch; returns the partition's answer."""
    answer = conn.request(ApiKey.PRODUCE, produce_body(topic, partition, make_batch(values)))
    (t,) = answer["topics"]
    (p,) = t["partitions"]
    return p


def fetch_body(topic: str, partition: int, offset: int = 0, max_wait_ms: int = 0) -> dict[str, Any]:
    return {
        "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{
            "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset, "log_start_offset": -1,
            "partition_max_bytes": 1 << 20,
        }]}],
        "forgotten_topics_data": [], "rack_id": "",
    }  # fmt: skip


def fetch(conn: Connection, topic: str, partition: int, offset: int = 0) -> dict[str, Any]:
    """One Fetch (no wait) of one partition; returns the partition's answer."""
    answer = conn.request(ApiKey.FETCH, fetch_body(topic, partition, offset))
    (t,) = answer["topics"]
    (p,) = t["partitions"]
    return p


def records_of(data: bytes | None) -> list[Record]:
    """Every record of the whole batches in a fetched record set."""
    buf = bytes(data or b"")
    out: list[Record] = []
    pos = 0
    while pos + 61 <= len(buf):
        header = decode_header(buf, pos)
        if pos + header.size > len(buf):
            break
        out.extend(iter_records(buf, pos, header))
        pos += header.size
    return out


def kcat_produce(bootstrap: str, topic: str, partition: int, values: list[str]) -> None:
    """Produce one message per value with kcat (librdkafka) to one partition."""
    out = subprocess.run(
        ["/usr/bin/kcat", "-P", "-b", bootstrap, "-t", topic, "-p", str(partition)],
        input="".join(v + "\n" for v in values), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr


# --- processes -------------------------------------------------------------------------------------


def terminate(pid: int | None, timeout: float = 20.0) -> None:
    """Stop a process this test started (continue it if stopped, SIGTERM, SIGKILL after `timeout`)."""
    if pid is None or not is_alive(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)
    stop_process(pid, timeout)


class CliProcess:
    """A long-running `kafkactl ...` child (a foreground broker), stdout and stderr in separate files."""

    def __init__(self, args: list[object], root: Path, *, home: Path | None = None, name: str = "cli") -> None:
        self.args = [str(a) for a in args]
        self.root = Path(root)
        self.home = home
        self.stdout_path = self.root / f"{name}.stdout"
        self.stderr_path = self.root / f"{name}.stderr"
        self.proc: subprocess.Popen | None = None

    def start(self) -> CliProcess:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.stdout_path, "ab") as out, open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kafkactl", *self.args], stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                env=cli_env(self.home),
            )  # fmt: skip
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace") if self.stdout_path.exists() else ""

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def output(self) -> str:
        return f"--- stdout\n{self.stdout()}--- stderr\n{self.stderr()}"

    def wait_for_stdout(self, text: str, timeout: float = 30.0) -> None:
        """Until `text` appears on stdout; fails at once if the process exits first."""
        deadline = time.monotonic() + timeout
        while text not in self.stdout():
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"exited with {self.proc.returncode} before printing {text!r}:\n{self.output()}")
            if time.monotonic() >= deadline:
                raise AssertionError(f"{text!r} not printed after {timeout:g}s:\n{self.output()}")
            time.sleep(0.05)

    def terminate(self, timeout: float = 30.0, sig: signal.Signals = signal.SIGTERM) -> int:
        """SIGTERM (or `sig`, e.g. SIGINT as Ctrl-C sends) and wait (the clean shutdown); returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"did not exit within {timeout:g}s of {sig.name}:\n{self.output()}") from None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> CliProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.alive:
            try:
                self.terminate(20)
            except AssertionError:
                pass
        self.kill()


@contextlib.contextmanager
def running_cluster(zk_connect: str, root: Path, ids: tuple[int, ...] = (1, 2, 3),
                    overrides: dict[str, str] | None = None) -> Iterator[list[BrokerProcess]]:  # fmt: skip
    """Brokers `ids` of one new cluster (a fresh chroot under `zk_connect`); all stopped by pid afterwards."""
    chroot = new_chroot(zk_connect)
    brokers: list[BrokerProcess] = []
    try:
        for i in ids:
            b = BrokerProcess(i, chroot, root, overrides=overrides)
            brokers.append(b)
            b.start()
        yield brokers
    finally:
        for b in brokers:
            try:
                b.stop(timeout=20)
            except Exception:
                b.kill()


def partition_dirs(log_dir: Path, topic: str) -> list[str]:
    """Names of the entries of `log_dir` that belong to `topic` (`<topic>-<p>`, also `...-delete` leftovers)."""
    if not log_dir.is_dir():
        return []
    prefix = f"{topic}-"
    out = []
    for e in os.scandir(log_dir):
        rest = e.name[len(prefix) :] if e.name.startswith(prefix) else None
        if rest is not None and rest.split(".", 1)[0].isdigit():
            out.append(e.name)
    return sorted(out)


def log_files_size(partition_dir: Path) -> int:
    return sum(f.stat().st_size for f in partition_dir.glob("*.log"))
