"""`kafkactl schema-registry`: a Confluent-compatible schema registry for Avro, its state in ZooKeeper."""

from __future__ import annotations

from typing import Annotated

import typer

from broker.errors import KafkactlError, UsageError
from broker.schema_registry import service
from kafkactl import contexts

app = typer.Typer(help="A schema registry (Confluent's REST API, Avro schemas kept in ZooKeeper).",
                  no_args_is_help=True)  # fmt: skip

Port = Annotated[int, typer.Option("--port", "-p", min=1, max=65535, help="HTTP port.")]


@app.command("start")
def start(
    port: Port = 8081,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    daemon: Annotated[bool, typer.Option("--daemon", "-d", help="Run in the background until stopped.")] = False,
    zookeeper: contexts.ZooKeeper = None,
) -> None:
    """Serve the registry in the foreground until Ctrl-C or SIGTERM, or with --daemon in the background. Any
    number of registries can share one ZooKeeper: they serve the same schemas."""
    zk = contexts.zookeeper(zookeeper)
    if daemon:
        pid = service.start_daemon_process(zk, host, port)
        print(f"schema registry started on http://{host}:{port} (pid {pid}, ZooKeeper {zk})")
        return
    service.run(zk, host, port)


@app.command("stop")
def stop(
    port: Annotated[
        int | None,
        typer.Option(
            "--port",
            "-p",
            min=1,
            max=65535,
            show_default=False,
            help="The registry's HTTP port (default: the one `start --daemon` runs, by its pid "
            "file; give it when several run).",
        ),
    ] = None,
) -> None:
    """Stop a registry `start --daemon` runs: the one on --port, or the only one running, whatever its port."""
    if port is None:
        found = service.running()
        if not found:
            raise KafkactlError("no schema registry started by kafkactl is running")
        if len(found) > 1:
            raise UsageError("schema registries run on ports " + ", ".join(map(str, sorted(found)))
                             + ": give --port to say which to stop")  # fmt: skip
        (port,) = found
    pid = service.stop(port)
    print(f"schema registry on port {port} stopped (pid {pid})")
