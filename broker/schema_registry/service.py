"""Running the schema registry: in the foreground until Ctrl-C or SIGTERM, or as a daemon
(`run/schema-registry-<port>.pid`, `logs/schema-registry-<port>.log`), and stopping it."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable

from broker import home
from broker.daemon import (
    kafkactl_command,
    port_open,
    read_pid,
    remove_pid_file,
    sigterm_as_interrupt,
    start_daemon,
    stop_process,
    write_pid_file,
)
from broker.errors import KafkactlError
from broker.schema_registry.server import RegistryServer
from broker.schema_registry.store import SchemaStore
from broker.zk import client as zkclient

log = logging.getLogger(__name__)


def daemon_name(port: int) -> str:
    return f"schema-registry-{port}"


def run(zookeeper: str, host: str = "127.0.0.1", port: int = 8081,
        announce: Callable[[str], None] = print) -> None:  # fmt: skip
    """Serve until Ctrl-C or SIGTERM; the state is ZooKeeper's, so nothing is lost when it stops."""
    pid_path = home.pid_file(daemon_name(port))
    other = read_pid(pid_path)
    if other is not None and other != os.getpid():
        raise KafkactlError(f"a schema registry is already running on port {port} (pid {other})")
    if port_open(host, port):
        raise KafkactlError(f"cannot start the schema registry: {host}:{port} is already in use")
    zk = zkclient.connect(zookeeper, connect_timeout_s=zkclient.COMMAND_CONNECT_TIMEOUT_S)
    try:
        server = RegistryServer(SchemaStore(zk), host, port)
        write_pid_file(pid_path, os.getpid())
        announce(f"schema registry serving on http://{host}:{server.port} (ZooKeeper {zookeeper}, pid {os.getpid()})")
        sys.stdout.flush()
        stopped = threading.Event()
        with sigterm_as_interrupt():
            try:
                thread = server.start_thread()
                while thread.is_alive() and not stopped.wait(0.5):
                    pass
            except KeyboardInterrupt:
                pass
            finally:
                server.shutdown()
    finally:
        remove_pid_file(pid_path, os.getpid())
        zkclient.close(zk)


def start_daemon_process(zookeeper: str, host: str, port: int, timeout: float = 30.0) -> int:
    """`kafkactl schema-registry start` detached; returns its pid once it listens."""
    argv = kafkactl_command("schema-registry", "start", "-z", zookeeper, "--host", host, "--port", str(port))
    name = daemon_name(port)
    return start_daemon(argv, home.log_file(name), home.pid_file(name), lambda: port_open(host, port, 0.2),
                        timeout=timeout, what="the schema registry")  # fmt: skip


def stop(port: int, timeout: float = 30.0) -> int:
    """Stop the registry `start --daemon` runs on this port; returns its pid."""
    path = home.pid_file(daemon_name(port))
    pid = read_pid(path)
    if pid is None:
        raise KafkactlError(f"no schema registry started by kafkactl is running on port {port}")
    stop_process(pid, timeout)
    remove_pid_file(path, pid)
    return pid


def running() -> dict[int, int]:
    """{port: pid} of the registries kafkactl runs on this machine, found by their pid files (whatever port
    each was started on)."""
    out: dict[int, int] = {}
    prefix = daemon_name(0).removesuffix("0")
    for path in sorted(home.pid_file(daemon_name(0)).parent.glob(f"{prefix}*.pid")):
        port = path.stem.removeprefix(prefix)
        if port.isdigit() and (pid := read_pid(path)) is not None:
            out[int(port)] = pid
    return out
