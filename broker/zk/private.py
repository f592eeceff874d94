"""The private ZooKeeper: the server a broker starts when none answers at its local address.

It runs as a daemon of its own, the one `kafkactl zookeeper start --daemon` runs (`run/zookeeper-<port>.pid`,
data in `$KAFKACTL_HOME/zookeeper`), so it outlives the broker that started it while other brokers still
use it. A marker, `run/zookeeper-<port>.private` holding the daemon's pid, says a broker started it: every
broker that finds that server at its address shares it, and the one that stops when nothing is registered
in it (no ephemeral znode: no broker, no controller, no ZooKeeper-based consumer) and no other client is
connected stops it too. A server the user started (no marker) is never stopped by a broker. Start and
stop hold `run/zookeeper-<port>.lock`, so two brokers never both start one, nor adopt one being stopped.
Each broker using it also holds a lease, `run/zookeeper-<port>.users/<pid>`, from before it connects: a
broker still starting (not registered, perhaps not connected yet) counts as a user too. When ZooKeeper
does not say what uses it (`mntr` unanswered), it is left running.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from broker import home
from broker.daemon import is_alive, read_pid_of, remove_pid_file, stop_process, write_pid_file
from broker.zk.client import split_connect
from broker.zk.server import daemon_name, four_letter, is_serving, start_server_daemon

HOST = "127.0.0.1"
_LOCAL = ("127.0.0.1", "localhost", "::1")
#: in the line a broker announces when it starts one (`broker start --daemon` repeats it)
STARTED = "started a private one"
#: in the line a broker logs as it stops (`broker stop` repeats it)
RELEASED = "the private ZooKeeper on"
_DAEMON_MARK = b"zookeeper"


def marker_file(port: int) -> Path:
    """`run/zookeeper-<port>.private`: the pid of a ZooKeeper daemon a broker started."""
    return home.pid_file(daemon_name(port)).with_suffix(".private")


@contextlib.contextmanager
def _locked(port: int) -> Iterator[None]:
    path = home.pid_file(daemon_name(port)).with_suffix(".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _leases(port: int) -> Path:
    return home.pid_file(daemon_name(port)).with_suffix(".users")


def _take_lease(port: int) -> None:
    leases = _leases(port)
    leases.mkdir(parents=True, exist_ok=True)
    (leases / str(os.getpid())).touch()


def _other_users(port: int) -> list[int]:
    """The live processes other than this one holding a lease (stale leases are removed)."""
    out = []
    leases = _leases(port)
    for f in leases.glob("*") if leases.is_dir() else []:
        pid = int(f.name) if f.name.isdigit() else 0
        if pid == os.getpid():
            continue
        if pid > 0 and is_alive(pid):
            out.append(pid)
        else:
            f.unlink(missing_ok=True)
    return out


def running(port: int) -> int | None:
    """The pid of the private ZooKeeper daemon on `port`, if one runs (a stale marker is removed)."""
    return read_pid_of(marker_file(port), _DAEMON_MARK)


def usage(port: int) -> tuple[int, int] | None:
    """(ephemeral znodes, client connections besides this question) of the server on `port`; None if it
    does not answer."""
    answer = four_letter(HOST, port, "mntr")
    if not answer:
        return None
    fields = dict(line.split("\t", 1) for line in answer.splitlines() if "\t" in line)
    try:
        return int(fields["zk_ephemerals_count"]), max(0, int(fields["zk_num_alive_connections"]) - 1)
    except (KeyError, ValueError):
        return None


@dataclass
class PrivateZooKeeper:
    """A private ZooKeeper this broker uses: started by it, or found running."""

    port: int
    pid: int

    def release(self, announce: Callable[[str], None]) -> None:
        """Once this broker has left ZooKeeper: stop the server when nothing else uses it, else say what does."""
        with _locked(self.port):
            (_leases(self.port) / str(os.getpid())).unlink(missing_ok=True)
            if running(self.port) != self.pid:
                return  # stopped meanwhile (`zookeeper stop`, or another broker)
            where = f"{HOST}:{self.port} (pid {self.pid})"
            others = _other_users(self.port)
            if others:
                announce(f"left the private ZooKeeper on {where} running: broker process(es) "
                         f"{', '.join(map(str, others))} use it; the last broker to stop stops it")  # fmt: skip
                return
            used = usage(self.port)
            if used is None:
                announce(f"left the private ZooKeeper on {where} running: it did not say what uses it "
                         "(`kafkactl zookeeper stop` stops it)")  # fmt: skip
                return
            if any(used):
                ephemerals, connections = used
                announce(
                    f"left the private ZooKeeper on {where} running: others use it ({connections} connection(s), "
                    f"{ephemerals} ephemeral znode(s)); the last broker to stop stops it"
                )
                return
            stop_process(self.pid)
            remove_pid_file(marker_file(self.port), self.pid)
            announce(f"stopped the private ZooKeeper on {where}: no other broker uses it")


def acquire(connect: str, announce: Callable[[str], None]) -> PrivateZooKeeper | None:
    """The private ZooKeeper at a local `connect` address: started when none answers there, or found running
    when a broker started it; None for any other server (the user's own, or a remote ensemble)."""
    hosts, _ = split_connect(connect)
    host, port = hosts[0]
    if host not in _LOCAL or len(hosts) > 1:
        return None  # a remote ensemble: if it does not answer, the connection timeout says so
    with _locked(port):
        if is_serving(HOST, port):
            pid = running(port)
            if pid is None:
                return None
            _take_lease(port)
            return PrivateZooKeeper(port, pid)
        data_dir = home.default_zookeeper_dir().resolve()
        pid = start_server_daemon(port, HOST, data_dir)
        write_pid_file(marker_file(port), pid)
        _take_lease(port)
    announce(f"no ZooKeeper answered at {host}:{port}: {STARTED} (pid {pid}, data {data_dir})")
    return PrivateZooKeeper(port, pid)
