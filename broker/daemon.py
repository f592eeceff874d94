"""Process helpers shared by ZooKeeper and the broker: pid files, detached daemons, clean stops, ports.

A daemon is started detached (`spawn_daemon`), writes its own pid file, and removes it when it stops;
`read_pid` treats a file naming a dead process as absent (and removes it), so a crash never blocks a
restart. `stop_process` is SIGTERM first, SIGKILL only after a timeout.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from broker.errors import KafkactlError


def write_pid_file(path: Path, pid: int) -> None:
    """Write `pid` to `path` atomically (a reader never sees a half-written file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{pid}\n")
    os.replace(tmp, path)


def read_pid(path: Path) -> int | None:
    """The live process `path` names, or None; a stale or garbled file is removed."""
    path = Path(path)
    try:
        text = path.read_text().strip()
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return None
    try:
        pid = int(text)
    except ValueError:
        pid = 0
    if pid > 0 and is_alive(pid):
        return pid
    with suppress(OSError):
        path.unlink()
    return None


def read_pid_of(path: Path, marker: bytes) -> int | None:
    """`read_pid`, for a process whose command line holds `marker`: a file naming another process (one that
    reused the pid, after a reboot) is stale and removed, so a stop never signals a stranger."""
    pid = read_pid(path)
    if pid is None:
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return pid
    if marker in cmdline:
        return pid
    remove_pid_file(path, pid)
    return None


def remove_pid_file(path: Path, pid: int | None = None) -> None:
    """Remove `path`, but only if it still names `pid` (when given): never another process's file."""
    path = Path(path)
    if pid is not None:
        try:
            if path.read_text().strip() != str(pid):
                return
        except OSError:
            return
    with suppress(FileNotFoundError):
        path.unlink()


def is_alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (reaped or not)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    try:  # a zombie answers kill(0) until reaped, and a container's pid 1 may never reap it
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2] not in "ZX"
    except (OSError, ValueError, IndexError):
        return True


def _reap(pid: int) -> None:
    with suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def stop_process(pid: int, timeout: float = 30.0) -> bool:
    """SIGTERM `pid`, wait until it is gone (reaping it if it is our child), SIGKILL after `timeout`.

    Returns whether it was running.
    """
    _reap(pid)
    if not is_alive(pid):
        return False
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while True:
        _reap(pid)
        if not is_alive(pid):
            return True
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        _reap(pid)
        if not is_alive(pid):
            break
        time.sleep(0.05)
    return True


def kafkactl_command(*args: str) -> list[str]:
    """The command line that runs `kafkactl args` in a child process: this interpreter, so the child imports
    the kafkactl (and compiled codecs) this one was installed with.

    `-P` (Python >= 3.11) keeps the child's working directory off its import path: `python -m` would put it
    first, and a `kafkactl/` or `broker/` package in the directory a daemon is started from (a clone of the
    project, say) would be run instead. PYTHONPATH and the environment are left as they are (unlike `-I`).
    Every daemon kafkactl starts (brokers, ZooKeeper launchers, the schema registry, bench brokers) is
    started through this."""
    return [sys.executable, "-P", "-m", "kafkactl", *args]


def spawn_daemon(argv: list[str], log_path: Path, *, env: dict | None = None) -> subprocess.Popen:
    """Start `argv` detached: a new session, stdin from /dev/null, stdout and stderr appended to `log_path`."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True, close_fds=True,
        )  # fmt: skip


def log_lines_since(log_path: Path, offset: int) -> list[str]:
    """The non-blank lines a process wrote to its log after `offset` (all of them if it rotated the log)."""
    try:
        with open(log_path, "rb") as f:
            if os.fstat(f.fileno()).st_size < offset:
                offset = 0  # the process rotated its log: what it wrote is all in the new file
            f.seek(offset)
            return [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return []


def last_error_line(log_path: Path, offset: int = 0) -> str:
    """The most telling line a failed process left in its log after `offset`: its `kafkactl: error:`
    line if any, else its last line."""
    lines = log_lines_since(log_path, offset)
    for line in reversed(lines):
        if line.startswith("kafkactl: error: "):
            return line.removeprefix("kafkactl: error: ")
    return lines[-1] if lines else ""


def start_daemon(
    argv: list[str],
    log_path: Path,
    pid_path: Path,
    ready: Callable[[], bool],
    *,
    timeout: float = 60.0,
    what: str = "daemon",
    env: dict | None = None,
) -> int:
    """Spawn `argv` as a daemon, record its pid in `pid_path` and wait until `ready()`; returns its pid.

    If it exits first, or is not ready within `timeout` (then it is stopped), raises KafkactlError with
    the line it left in its log.
    """
    log_path = Path(log_path)
    offset = log_path.stat().st_size if log_path.exists() else 0
    proc = spawn_daemon(argv, log_path, env=env)
    write_pid_file(pid_path, proc.pid)
    deadline = time.monotonic() + timeout
    while not ready():
        code = proc.poll()
        if code is not None:
            remove_pid_file(pid_path, proc.pid)
            reason = last_error_line(log_path, offset) or f"exit code {code}"
            raise KafkactlError(f"{what} did not start: {reason} (log: {log_path})")
        if time.monotonic() >= deadline:
            stop_process(proc.pid)
            remove_pid_file(pid_path, proc.pid)
            raise KafkactlError(f"{what} not ready after {timeout:g}s; stopped it (log: {log_path})")
        time.sleep(0.1)
    return proc.pid


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Inside, SIGTERM raises KeyboardInterrupt, so `kill` and Ctrl-C take the same clean-stop path."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_foreground(
    pid_path: Path,
    start: Callable[[], object],
    wait: Callable[[], int],
    stop: Callable[[], object],
    on_ready: Callable[[], object] | None = None,
) -> int | None:
    """Run a service in this process until Ctrl-C or SIGTERM, with our pid in `pid_path` meanwhile.

    Returns None after a requested stop, or `wait()`'s exit code if the service ended by itself.
    """
    pid = os.getpid()
    with sigterm_as_interrupt():
        try:
            write_pid_file(pid_path, pid)
            start()
            if on_ready is not None:
                on_ready()
            return wait()
        except KeyboardInterrupt:
            return None
        finally:
            try:
                stop()
            except KeyboardInterrupt:  # a second signal while stopping: finish the stop anyway
                stop()
            finally:
                remove_pid_file(pid_path, pid)


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_port(host: str, port: int, timeout: float) -> bool:
    """Poll a TCP connect to host:port until it succeeds (True) or `timeout` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while True:
        if port_open(host, port, timeout=min(0.5, max(0.05, timeout))):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


#: "low-high": the ports `free_port` draws from. The test suite gives each of its parallel workers a range of its
#: own below the kernel's ephemeral range, so neither another worker nor an outgoing connection takes a port
#: between its choice and its bind; children inherit it. Unset, the kernel picks.
PORT_RANGE_ENV = "KAFKACTL_PORT_RANGE"
_port_cursor: int | None = None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing uses right now (for tests, benches and `cluster up`)."""
    global _port_cursor
    spec = os.environ.get(PORT_RANGE_ENV, "")
    low, _, high = spec.partition("-")
    if low.isdigit() and high.isdigit() and 0 < int(low) < int(high) < 65536:
        lo, hi = int(low), int(high)
        if _port_cursor is None or not lo <= _port_cursor <= hi:
            _port_cursor = lo + (os.getpid() * 7919) % (hi - lo + 1)  # parent and children start apart
        for _ in range(hi - lo + 1):
            port, _port_cursor = _port_cursor, lo + (_port_cursor + 1 - lo) % (hi - lo + 1)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
