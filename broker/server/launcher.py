"""Running a broker process: a private ZooKeeper when none answers, the pid file, the event loop.

`kafkactl broker start` calls `run_broker` in the foreground, or `start_broker_daemon` to run the
same command detached and wait until the broker is registered and listening. The broker logs through
`broker_logging`: one line per record, repeated lines rate-limited; to stderr in the foreground, to
`$KAFKACTL_HOME/logs/broker-<id>.log` (rotated by size) as a daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from broker.daemon import (
    kafkactl_command,
    last_error_line,
    log_lines_since,
    read_pid,
    remove_pid_file,
    start_daemon,
    stop_process,
    wait_port,
    write_pid_file,
)
from broker.errors import KafkactlError
from broker.home import log_file, pid_file
from broker.server import broker_logging
from broker.server.broker import Broker
from broker.server.config import BrokerConfig
from broker.zk import client as zkclient
from broker.zk import private

log = logging.getLogger(__name__)


def private_zookeeper_line(log_path: Path, broker_id: int) -> str | None:
    """The line a broker daemon logged when it started a private ZooKeeper in its latest run, or None."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    serving = [i for i, line in enumerate(lines) if f"broker {broker_id} serving on" in line]
    if not serving:
        return None
    for line in reversed(lines[max(0, serving[-1] - 50) : serving[-1]]):
        if private.STARTED in line:
            return line.strip() + "; it stops with the last broker that uses it"
        if "serving on" in line:
            return None  # an earlier run's
    return None


def ensure_chroot(connect: str) -> None:
    """Create the chroot of `connect` if it is missing (as Kafka does), so the broker can build under it."""
    hosts, chroot = zkclient.split_connect(connect)
    if not chroot:
        return
    zk = zkclient.new_client(",".join(f"{h}:{p}" for h, p in hosts))
    try:
        zk.start(timeout=15)
        zk.ensure_path(chroot)
    except Exception:  # the broker's own connection reports an unreachable ZooKeeper properly
        pass
    finally:
        with contextlib.suppress(Exception):
            zk.stop()
            zk.close()


def run_broker(config: BrokerConfig, *, embedded_zookeeper: bool = True,
               announce: Callable[[str], None] = print) -> None:  # fmt: skip
    """Run one broker in this process until SIGTERM or Ctrl-C; a clean shutdown either way. SIGUSR1 writes
    every thread's stack to stderr (the log), for a broker that seems stuck."""
    broker_logging.configure(os.environ.pop(broker_logging.LOG_PATH_ENV, None))
    with contextlib.suppress(AttributeError, ValueError, OSError):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    pid_path = pid_file(f"broker-{config.broker_id}")
    other = read_pid(pid_path)
    if other is not None and other != os.getpid():
        raise KafkactlError(f"broker {config.broker_id} is already running here (pid {other}, {pid_path})")
    zookeeper = private.acquire(config.zookeeper_connect, announce) if embedded_zookeeper else None
    try:
        zkclient.configure_from(config.props)
        ensure_chroot(config.zookeeper_connect)
        write_pid_file(pid_path, os.getpid())
        broker = Broker(config)

        def ready(b: Broker) -> None:
            dirs = ",".join(str(d) for d in config.log_dirs)
            listeners = ", ".join(f"{s.host}:{s.port} ({name})" for name, s in b.servers.items())
            announce(
                f"broker {config.broker_id} serving on {listeners} "
                f"(ZooKeeper {config.zookeeper_connect}, log dirs {dirs}, pid {os.getpid()})"
            )
            sys.stdout.flush()

        try:
            asyncio.run(broker.run(ready))
        except KeyboardInterrupt:  # a second Ctrl-C during shutdown
            pass
        if broker.unclean_shutdown:  # exit non-zero: `broker stop` and supervisors see it
            raise KafkactlError(f"broker {config.broker_id} did not shut down cleanly: {broker.unclean_shutdown}")
    finally:
        remove_pid_file(pid_path, os.getpid())
        if zookeeper is not None:  # after the broker left ZooKeeper: stopped unless others still use it
            zookeeper.release(announce)


def daemon_argv(overrides: dict[str, str], *, config: Path | None = None, embedded_zookeeper: bool = True) -> list[str]:
    """The `kafkactl broker start ...` arguments (no --daemon) a daemon runs: the file, then each override."""
    argv = ["broker", "start"]
    if config is not None:
        argv += ["--config", str(config.resolve())]
    for key, value in overrides.items():
        argv += ["--override", f"{key}={value}"]
    if not embedded_zookeeper:
        argv.append("--no-embedded-zookeeper")
    return argv


def start_broker_daemon(argv: list[str], config: BrokerConfig, timeout: float = 60.0, *,
                        home: Path | None = None) -> int:  # fmt: skip
    """Run `kafkactl broker start ...` (argv without --daemon) detached; returns its pid once it listens.

    `home`: the KAFKACTL_HOME of the daemon (its pid file and log), default this process's."""
    name = f"broker-{config.broker_id}"
    other = read_pid(pid_file(name, home))
    if other is not None:
        raise KafkactlError(f"broker {config.broker_id} is already running here (pid {other})")
    host = "127.0.0.1" if config.host in ("", "0.0.0.0") else config.host
    log_path = log_file(name, home)
    offset = log_path.stat().st_size if log_path.exists() else 0
    serving = f"broker {config.broker_id} serving on"

    def ready() -> bool:  # listening is not enough: the line comes once it is registered in ZooKeeper
        nonlocal offset
        try:
            with open(log_path, "rb") as f:
                if os.fstat(f.fileno()).st_size < offset:
                    offset = 0  # the broker rotated its log as it started: the line is in the new file
                f.seek(offset)
                if serving.encode() not in f.read():
                    return False
        except OSError:
            return False
        return wait_port(host, config.port, 0.2)

    env = {**os.environ, broker_logging.LOG_PATH_ENV: str(log_path)}  # it logs to the file itself, rotating it
    if home is not None:
        env["KAFKACTL_HOME"] = str(home)
    return start_daemon(kafkactl_command(*argv), log_path, pid_file(name, home), ready,
                        timeout=timeout, what=f"broker {config.broker_id}", env=env)  # fmt: skip


def stop_broker(broker_id: int, timeout: float = 60.0, *, home: Path | None = None) -> tuple[int, str | None]:
    """SIGTERM the broker with this id started on this machine (under `home`); returns its pid, and the line
    it logged of the private ZooKeeper it used (stopped, or left to other brokers), if any. Raises
    KafkactlError with the broker's own line when its shutdown was not clean (a log dir it could not flush
    or checkpoint)."""
    path = pid_file(f"broker-{broker_id}", home)
    pid = read_pid(path)
    if pid is None:
        raise KafkactlError(f"no broker {broker_id} is running here (no live pid in {path})")
    log_path = log_file(f"broker-{broker_id}", home)
    offset = log_path.stat().st_size if log_path.exists() else 0
    stop_process(pid, timeout)
    remove_pid_file(path, pid)
    last = last_error_line(log_path, offset)
    if "did not shut down cleanly" in last:
        raise KafkactlError(f"{last} (pid {pid})")
    said = [line for line in log_lines_since(log_path, offset) if private.RELEASED in line]
    return pid, (said[-1] if said else None)


def running_brokers() -> dict[int, int]:
    """{broker id: pid} of the brokers this machine's pid files name."""
    out = {}
    run = pid_file("x").parent
    if run.is_dir():
        for f in sorted(run.glob("broker-*.pid")):
            with contextlib.suppress(ValueError):
                pid = read_pid(f)
                if pid is not None:
                    out[int(f.stem.removeprefix("broker-"))] = pid
    return out
