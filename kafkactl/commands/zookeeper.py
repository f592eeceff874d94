"""`kafkactl zookeeper`: run a local Apache ZooKeeper server for brokers to register in."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from typer.exceptions import Exit

from broker import home
from broker.daemon import read_pid, run_foreground, stop_process
from broker.errors import KafkactlError, UsageError
from broker.zk import private
from broker.zk.server import ZooKeeperServer, daemon_name, server_info, start_server_daemon
from kafkactl import contexts
from kafkactl.render import Output, json_line

app = typer.Typer(help="Run a local ZooKeeper server (Apache ZooKeeper, as a child JVM).", no_args_is_help=True)

Port = Annotated[int, typer.Option("--port", "-p", min=1, max=65535, help="Client port.")]
ListenHost = Annotated[str, typer.Option("--host", help="Address to listen on.")]


@app.command("start")
def start(
    port: Port = 2181,
    host: ListenHost = "127.0.0.1",
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Data dir (snapshots, logs, zoo.cfg); default $KAFKACTL_HOME/zookeeper."),
    ] = None,
    daemon: Annotated[
        bool, typer.Option("--daemon", "-d", help="Run in the background and return once serving.")
    ] = False,
    timeout: Annotated[float, typer.Option("--timeout", min=1, help="Seconds to wait until it serves.")] = 60.0,
) -> None:
    """Start a ZooKeeper server: in the foreground until Ctrl-C or SIGTERM, or with --daemon in the background."""
    pid_path = home.pid_file(daemon_name(port))
    running = read_pid(pid_path)
    if running is not None and running != os.getpid():  # a daemon's parent wrote our own pid already
        raise KafkactlError(f"zookeeper on port {port} is already running (pid {running})")
    data_dir = (data_dir or home.default_zookeeper_dir()).expanduser().resolve()
    if daemon:
        pid = start_server_daemon(port, host, data_dir, timeout=timeout)
        print(f"zookeeper started on {host}:{port} (pid {pid}, data {data_dir})")
        return
    server = ZooKeeperServer(data_dir, port, host)
    code = run_foreground(
        pid_path,
        start=lambda: server.start(timeout),
        wait=server.wait,
        stop=server.stop,
        on_ready=lambda: print(
            f"zookeeper serving on {host}:{port} (pid {os.getpid()}, java pid {server.pid}, data {data_dir}); "
            "Ctrl-C stops it",
            flush=True,
        ),
    )
    if code is not None:
        raise KafkactlError(f"zookeeper exited by itself with code {code} (log: {server.log_path})")


TargetPort = Annotated[
    int | None,
    typer.Option("--port", "-p", min=1, max=65535, show_default=False,
                 help="Client port (default: that of the root -z, KAFKACTL_ZOOKEEPER or the context, else 2181)."),
]  # fmt: skip


def _target(host: str | None, port: int | None) -> tuple[str, int]:
    """The server a command means: --host/--port, else the ZooKeeper the root -z, KAFKACTL_ZOOKEEPER or the
    context names (its first address), else 127.0.0.1:2181."""
    named = contexts.configured("zookeeper")
    if named and (host is None or port is None):
        first = named.split(",")[0].split("/")[0]
        h, sep, p = first.rpartition(":")
        try:
            named_host, named_port = (h or "127.0.0.1", int(p)) if sep else (first, 2181)
        except ValueError:
            raise UsageError(f"ZooKeeper address {first!r}: port is not a number") from None
        return host or named_host, port or named_port
    return host or "127.0.0.1", port or 2181


@app.command("stop")
def stop(
    port: TargetPort = None,
    timeout: Annotated[float, typer.Option("--timeout", min=1, help="Seconds before SIGKILL.")] = 30.0,
) -> None:
    """Stop the ZooKeeper server that `kafkactl zookeeper start` runs on this port."""
    _, port = _target(None, port)
    pid = read_pid(home.pid_file(daemon_name(port)))
    if pid is None:
        raise KafkactlError(f"no zookeeper started by kafkactl is running on port {port}")
    stop_process(pid, timeout)
    print(f"zookeeper on port {port} stopped (pid {pid})")


@app.command("status")
def status(
    port: TargetPort = None,
    host: Annotated[str | None, typer.Option("--host", help="Address of the server.", show_default=False)] = None,
    output: Annotated[Output, typer.Option("-o", "--output", help="text or json.")] = Output.text,
) -> None:
    """Whether a ZooKeeper server serves on host:port (exit code 0) or not (1), with its mode and version."""
    host, port = _target(host, port)
    info = server_info(host, port)
    pid = read_pid(home.pid_file(daemon_name(port)))
    mine = pid is not None and private.running(port) == pid
    result = {"address": f"{host}:{port}", "serving": info is not None, "pid": pid, "private": mine, **(info or {})}
    if output == Output.json:
        json_line(result)
    elif info is None:
        print(f"zookeeper on {host}:{port}: not running" + (f" (pid {pid} runs, not serving)" if pid else ""))
    else:
        parts = [f"mode {info['mode']}", f"version {info['version']}"]
        parts += [f"pid {pid}"] if pid else []
        parts += ["private: started by a broker, stops with the last one"] if mine else []
        parts += [f"{info['znodes']} znodes"] if info.get("znodes") is not None else []
        print(f"zookeeper on {host}:{port}: serving, " + ", ".join(parts))
    if info is None:
        raise Exit(1)
