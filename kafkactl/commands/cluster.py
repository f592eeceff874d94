"""`kafkactl cluster`: a local cluster (a private ZooKeeper and N brokers) in one command (broker/local_cluster.py)."""

from __future__ import annotations

import shlex
import sys
from typing import Annotated

import typer
from typer.exceptions import Exit

from broker import local_cluster
from broker.errors import KafkactlError
from kafkactl.render import Output, json_line, table

app = typer.Typer(
    help="A local cluster: a private ZooKeeper and brokers 1..N as daemons, data in $KAFKACTL_HOME/clusters/NAME.",
    no_args_is_help=True,
)

Name = Annotated[str, typer.Option("--name", help="Which local cluster.")]
OutputOpt = Annotated[Output, typer.Option("-o", "--output", help="text or json.")]
Timeout = Annotated[float, typer.Option("--timeout", min=1, help="Seconds to wait for each daemon.")]


def _say(line: str) -> None:
    print(line, flush=True)


def _render(st: dict, headline: str) -> None:
    _say(headline)
    zk = st["zookeeper"]
    zk_state = "serving" if zk["serving"] else "not serving"
    _say(f"zookeeper {zk['address']} ({zk_state}, pid {zk['pid'] or '-'})")
    rows = [
        (b["id"], b["host"], b["port"], b["pid"] or "-", "yes" if b["alive"] else "no",
         "yes" if b["registered"] else "no", b["log_dir"])
        for b in st["brokers"]
    ]  # fmt: skip
    table(["ID", "HOST", "PORT", "PID", "ALIVE", "REGISTERED", "LOG DIR"], rows)
    _say(f"bootstrap: {st['bootstrap']}")


def _env_line(st: dict) -> str:
    return (
        f"export KAFKACTL_BOOTSTRAP_SERVER={shlex.quote(st['bootstrap'])} "
        f"KAFKACTL_ZOOKEEPER={shlex.quote(st['zookeeper']['address'])}"
    )


@app.command("up")
def up(
    brokers: Annotated[
        int | None,
        typer.Option(
            "-n", "--brokers", help="How many brokers (ids 1..N) a new cluster has [default: 3].", show_default=False
        ),
    ] = None,
    name: Name = local_cluster.DEFAULT_NAME,
    output: OutputOpt = Output.text,
    timeout: Timeout = 60.0,
    base_port: Annotated[
        int | None,
        typer.Option(
            "--base-port",
            min=1,
            max=65535,
            show_default=False,
            help="Broker i listens on this port + i - 1 (default: free ports).",
        ),
    ] = None,
    zookeeper_port: Annotated[
        int | None,
        typer.Option(
            "--zookeeper-port",
            min=1,
            max=65535,
            show_default=False,
            help="ZooKeeper's client port (default: a free port).",
        ),
    ] = None,
) -> None:
    """Start a local cluster: a private ZooKeeper, then brokers 1..N, on 127.0.0.1: on the ports asked for
    (--base-port, --zookeeper-port), else on free ones.

    A cluster that exists already comes back with its data and, while they are free, its ports (ports asked
    for replace the saved ones: a part running elsewhere must be stopped first); one that is already up is
    left as it is (exit 0, with its status). The ports are kept in $KAFKACTL_HOME/clusters/NAME/cluster.json.
    A port asked for that another process holds is an error; if a start fails, what this command started is
    stopped again."""
    ports = local_cluster.Ports(zookeeper=zookeeper_port, base=base_port)
    st = local_cluster.up(name, brokers, timeout=timeout, ports=ports)
    if output == Output.json:
        json_line(st)
        return
    started = st["started"]
    if not started["zookeeper"] and not started["brokers"]:
        headline = f"cluster {name} is already up ({st['dir']})"
    elif started["zookeeper"] and len(started["brokers"]) == len(st["brokers"]):
        headline = f"cluster {name} up: zookeeper and {len(st['brokers'])} brokers started ({st['dir']})"
    else:
        parts = (["zookeeper"] if started["zookeeper"] else []) + [f"broker {i}" for i in started["brokers"]]
        headline = f"cluster {name} up: started {', '.join(parts)} ({st['dir']})"
    _render(st, headline)
    _say(f"use it: {_env_line(st)}")
    if st["state"] != "up":
        _say(f"note: cluster {name} is {st['state']}: see `kafkactl cluster status --name {name}`")


@app.command("down")
def down(
    name: Name = local_cluster.DEFAULT_NAME,
    purge: Annotated[bool, typer.Option("--purge", help="Also delete its data (topics, messages, ZooKeeper).")] = False,
    output: OutputOpt = Output.text,
    timeout: Timeout = 60.0,
    broker: Annotated[
        int | None, typer.Option("--broker", help="Stop this broker only (a controlled shutdown); `up` restarts it.")
    ] = None,
) -> None:
    """Stop a local cluster: SIGTERM each broker in id order (a clean shutdown), then its ZooKeeper.

    Its data is kept, so `kafkactl cluster up` brings the same cluster back; --purge deletes it."""
    result = local_cluster.down(name, purge=purge, timeout=timeout, broker=broker)
    if output == Output.json:
        json_line(result)
        return
    stopped = result["stopped"]
    parts = [f"broker {b['id']} (pid {b['pid']})" for b in stopped["brokers"]]
    if stopped["zookeeper"] is not None:
        parts.append(f"zookeeper (pid {stopped['zookeeper']})")
    what = f"stopped {', '.join(parts)}" if parts else "nothing was running"
    kept = f"data deleted ({result['dir']})" if purge else f"data kept in {result['dir']} (--purge deletes it)"
    _say(f"cluster {name} down: {what}; {kept}")


@app.command("status")
def status(name: Name = local_cluster.DEFAULT_NAME, output: OutputOpt = Output.text) -> None:
    """A local cluster's ZooKeeper and brokers: pid, alive, registered in ZooKeeper; the bootstrap string.

    Exit code 0 when it is up (everything running and registered), 1 when it is down or degraded."""
    st = local_cluster.status(name)
    if output == Output.json:
        json_line(st)
    else:
        _render(st, f"cluster {name}: {st['state']} ({st['dir']})")
    if st["state"] != "up":
        raise Exit(1)


@app.command("env")
def env(name: Name = local_cluster.DEFAULT_NAME) -> None:
    """Print `export KAFKACTL_BOOTSTRAP_SERVER=... KAFKACTL_ZOOKEEPER=...` for a running local cluster:
    `eval "$(kafkactl cluster env)"`."""
    st = local_cluster.status(name)
    if st["state"] == "down":
        raise KafkactlError(f"cluster {name} is down: `kafkactl cluster up --name {name}` first")
    print(_env_line(st))
    sys.stdout.flush()
