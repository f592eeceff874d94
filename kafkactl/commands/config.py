"""`kafkactl config`: the contexts of ~/.config/kafkactl/config.toml — list, show, add, use, remove."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from broker.client import properties
from broker.client import security as client_security
from broker.client.security import ClientSecurity
from broker.errors import UsageError
from kafkactl import contexts
from kafkactl.render import Output, json_line, table

app = typer.Typer(help="Contexts: named clusters (bootstrap servers and ZooKeeper) to work against.",
                  no_args_is_help=True)  # fmt: skip

OutputOpt = Annotated[Output, typer.Option("-o", "--output", help="text or json.")]
NameArg = Annotated[str, typer.Argument(help="Context name.")]


def _contexts(doc: dict) -> dict[str, dict[str, str]]:
    return {str(k): {str(a): str(b) for a, b in v.items()} for k, v in (doc.get("contexts") or {}).items()}


@app.command("list")
def list_(output: OutputOpt = Output.text) -> None:
    """Every context, the current one marked."""
    doc = contexts.load_config()
    current = doc.get("current-context")
    rows = [(name, "*" if name == current else "", v.get("bootstrap-server", ""), v.get("zookeeper", ""))
            for name, v in sorted(_contexts(doc).items())]  # fmt: skip
    if output == Output.json:
        for name, mark, bs, zk in rows:
            json_line({"name": name, "current": bool(mark), "bootstrap-server": bs or None, "zookeeper": zk or None})
    else:
        table(["NAME", "CURRENT", "BOOTSTRAP-SERVER", "ZOOKEEPER"], rows)


@app.command("current")
def current(output: OutputOpt = Output.text) -> None:
    """The cluster commands use now, and where each value comes from (option, environment, context, default)."""
    values = {key: contexts.resolve(key, None) for key in contexts.DEFAULTS}
    values.update(contexts.security().to_properties(secrets=False))  # (a password is never shown)
    doc = contexts.load_config()
    name = contexts.root.get("context") or os.environ.get("KAFKACTL_CONTEXT") or doc.get("current-context")
    if output == Output.json:
        json_line({"context": name, **values})
    else:
        print(f"context: {name or '(none)'}")
        for key, value in values.items():
            print(f"{key}: {value}")


@app.command("add")
def add(
    name: NameArg,
    bootstrap: Annotated[str | None, typer.Option("-b", "--bootstrap-server", help="Brokers (host:port,...).")] = None,
    zookeeper: Annotated[str | None, typer.Option("-z", "--zookeeper", help="ZooKeeper (host:port/chroot).")] = None,
    schema_registry: Annotated[
        str | None, typer.Option("--schema-registry", help="The schema registry's URL.", show_default=False)
    ] = None,
    security: Annotated[
        list[str] | None,
        typer.Option(
            "-X",
            "--security",
            help="A security setting KEY=VALUE (repeatable), by librdkafka's names: "
            "security.protocol, ssl.ca.location, sasl.mechanism, sasl.username, sasl.password, ...; an "
            "empty VALUE removes the key.",
            show_default=False,
        ),
    ] = None,
    use: Annotated[bool, typer.Option("--use", help="Make it the current context too.")] = False,
) -> None:
    """Add a context, or change the values given of an existing one."""
    if not name.strip():
        raise UsageError("a context needs a name")
    settings = properties.pairs(security or [], "-X")
    for key in settings:
        if key not in client_security.KEYS:
            raise UsageError(f"-X {key}: not a security setting ({', '.join(client_security.KEYS)})")
    if bootstrap is None and zookeeper is None and schema_registry is None and not settings:
        raise UsageError("give -b/--bootstrap-server, -z/--zookeeper, --schema-registry and/or -X")
    doc = contexts.load_config()
    entry = doc.setdefault("contexts", {}).setdefault(name, {})
    for key, value in (("bootstrap-server", bootstrap), ("zookeeper", zookeeper), ("schema-registry", schema_registry)):
        if value is not None:
            entry[key] = value
    for key, value in settings.items():
        if value:
            entry[key] = value
        else:
            entry.pop(key, None)
    ClientSecurity.from_properties({k: str(v) for k, v in entry.items() if k in client_security.KEYS})  # checked
    if use or not doc.get("current-context"):
        doc["current-context"] = name
    path = contexts.save_config(doc)
    print(f"context {name} saved in {path}" + (" (current)" if doc["current-context"] == name else ""))


@app.command("use")
def use(name: NameArg) -> None:
    """Make a context the current one."""
    doc = contexts.load_config()
    if name not in _contexts(doc):
        have = ", ".join(sorted(_contexts(doc))) or "none"
        raise UsageError(f"no context {name!r} (have: {have}); add it with `kafkactl config add {name} -b ...`")
    doc["current-context"] = name
    contexts.save_config(doc)
    print(f"current context: {name}")


@app.command("remove")
def remove(name: NameArg) -> None:
    """Remove a context (and stop using it, if it was the current one)."""
    doc = contexts.load_config()
    if name not in _contexts(doc):
        raise UsageError(f"no context {name!r}")
    del doc["contexts"][name]
    if doc.get("current-context") == name:
        doc.pop("current-context")
    contexts.save_config(doc)
    print(f"removed context {name}")
