"""`kafkactl broker`: start a broker (foreground or daemon), stop it, list the registered ones."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from broker.errors import KafkactlError, UsageError
from broker.home import log_file as launcher_log_file
from broker.server import launcher
from broker.server.config import BrokerConfig, parse_override, with_first_port
from broker.zk import client as zkclient
from broker.zk import registry
from kafkactl import contexts
from kafkactl.render import Output, json_line, table

app = typer.Typer(help="Run brokers and see which are registered.", no_args_is_help=True)


@app.command("start")
def start(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="A server.properties file.")] = None,
    override: Annotated[
        list[str] | None, typer.Option("--override", help="key=value over the file (repeatable).")
    ] = None,
    broker_id: Annotated[int | None, typer.Option("--broker-id", help="broker.id")] = None,
    port: Annotated[
        int | None,
        typer.Option(
            "--port", "-p", help="The port of the first listener (default listeners: PLAINTEXT://127.0.0.1:PORT)."
        ),
    ] = None,
    log_dirs: Annotated[str | None, typer.Option("--log-dirs", help="Comma-separated log directories.")] = None,
    zookeeper: contexts.ZooKeeper = None,
    daemon: Annotated[
        bool, typer.Option("--daemon", "-d", help="Run in the background; a pid file in ~/.local/share/kafkactl/run.")
    ] = False,
    no_embedded: Annotated[
        bool, typer.Option("--no-embedded-zookeeper", help="Never start a private ZooKeeper.")
    ] = False,
) -> None:
    """Start a broker. With no arguments: broker 0 on 127.0.0.1:9092, data in ~/.local/share/kafkactl, and a
    private ZooKeeper if none answers at localhost:2181. Ctrl-C or SIGTERM shuts it down cleanly."""
    overrides = dict(parse_override(o) for o in override or [])
    if broker_id is not None:
        overrides["broker.id"] = str(broker_id)
    if port is not None:
        if not 0 < port < 65536:
            raise UsageError(f"--port {port}: not a TCP port")
        overrides["listeners"] = with_first_port(BrokerConfig.load(config, overrides).props["listeners"], port)
    if log_dirs is not None:
        overrides["log.dirs"] = log_dirs
    zk = zookeeper or contexts.root.get("zookeeper")
    if zk:
        overrides["zookeeper.connect"] = zk
    cfg = BrokerConfig.load(config, overrides)
    if daemon:
        argv = launcher.daemon_argv(overrides, config=config, embedded_zookeeper=not no_embedded)
        pid = launcher.start_broker_daemon(argv, cfg)
        where = launcher_log_file(f"broker-{cfg.broker_id}")
        print(f"broker {cfg.broker_id} started on {cfg.host}:{cfg.port} (pid {pid}, log {where})")
        private = launcher.private_zookeeper_line(where, cfg.broker_id)
        if private:  # the daemon started its own ZooKeeper: say so, and when it stops
            print(private)
        return
    launcher.run_broker(cfg, embedded_zookeeper=not no_embedded)


@app.command("stop")
def stop(
    broker_id: Annotated[
        int | None, typer.Option("--broker-id", help="Which broker (default: the only one running here).")
    ] = None,
) -> None:
    """Stop a broker started on this machine (clean shutdown by SIGTERM)."""
    if broker_id is None:
        running = launcher.running_brokers()
        if not running:
            raise KafkactlError("no broker is running here")
        if len(running) > 1:
            raise UsageError(f"several brokers run here ({', '.join(map(str, running))}): pick one with --broker-id")
        broker_id = next(iter(running))
    pid, zookeeper = launcher.stop_broker(broker_id)
    print(f"broker {broker_id} stopped (pid {pid})")
    if zookeeper:
        print(zookeeper)


@app.command("list")
def list_(
    zookeeper: contexts.ZooKeeper = None,
    output: Annotated[Output, typer.Option("-o", "--output", help="text or json.")] = Output.text,
) -> None:
    """The brokers registered in ZooKeeper, and which one is controller."""
    with zkclient.session(contexts.zookeeper(zookeeper)) as zk:
        brokers = registry.live_brokers(zk)
        controller = registry.controller_id(zk)
    rows = [(i, h, p, r, i == controller) for i, (h, p, r) in brokers.items()]
    if output == Output.json:
        for i, h, p, r, c in rows:
            json_line({"id": i, "host": h, "port": p, "rack": r, "controller": c})
        return
    table(
        ["ID", "HOST", "PORT", "RACK", "CONTROLLER"], [(i, h, p, r or "", "yes" if c else "") for i, h, p, r, c in rows]
    )
