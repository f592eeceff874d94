"""`kafkactl config`: two halves under one name.

- Contexts of ~/.config/kafkactl/config.toml, on this machine: list, current, add, use, remove.
- A topic's or a broker's configuration on the cluster: describe, set, delete — through the broker's
  DescribeConfigs and IncrementalAlterConfigs, which change the keys named and keep the others.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from broker.client import properties
from broker.client import security as client_security
from broker.client.admin import Admin
from broker.client.security import ClientSecurity
from broker.errors import UsageError
from broker.protocol.messages.admin import BROKER_RESOURCE, TOPIC_RESOURCE
from broker.protocol.messages.configs import OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT
from kafkactl import completion, contexts
from kafkactl.render import Output, json_line, table

app = typer.Typer(
    help="Contexts on this machine (list, current, add, use, remove: named clusters to work against) and "
    "configuration on the cluster (describe, set, delete: a topic's overrides or a broker's dynamic config).",
    no_args_is_help=True,
)

OutputOpt = Annotated[Output, typer.Option("-o", "--output", help="text or json.")]
NameArg = Annotated[str, typer.Argument(help="Context name.")]
Security = contexts.security_option(
    "A security setting KEY=VALUE (repeatable), by librdkafka's names: "
    "security.protocol, ssl.ca.location, sasl.mechanism, sasl.username, sasl.password, ...; an "
    "empty VALUE removes the key."
)


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
    security: Security = None,
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


# --- configuration on the cluster ------------------------------------------------------------------

TopicOpt = Annotated[
    str | None,
    typer.Option("--topic", "-t", autocompletion=completion.topics, help="A topic's config.", show_default=False),
]
BrokerOpt = Annotated[
    int | None, typer.Option("--broker", help="A broker's config (its id).", show_default=False)
]  # fmt: skip
ValidateOpt = Annotated[
    bool, typer.Option("--validate-only", help="Have the broker check the change, and change nothing.")
]


def _resource(topic: str | None, broker: int | None) -> tuple[int, str]:
    """(resource type, name) of --topic or --broker: exactly one is given."""
    if (topic is None) == (broker is None):
        raise UsageError("give --topic TOPIC or --broker ID (one of them)")
    return (TOPIC_RESOURCE, topic) if topic is not None else (BROKER_RESOURCE, str(broker))


def _label(rtype: int, name: str) -> str:
    return f"topic {name}" if rtype == TOPIC_RESOURCE else f"broker {name}"


@app.command("describe")
def describe(
    topic: TopicOpt = None,
    broker: BrokerOpt = None,
    overrides: Annotated[bool, typer.Option("--overrides", help="Only the keys set on the topic or broker.")] = False,
    bootstrap: contexts.Bootstrap = None,
    output: OutputOpt = Output.text,
) -> None:
    """Every key of a topic's or a broker's config, with its value and where it comes from.

    SOURCE is topic (the topic's override), static (the broker's properties file) or default.
    A secret's value is never shown."""
    rtype, name = _resource(topic, broker)
    with Admin(contexts.bootstrap(bootstrap)) as admin:
        values = admin.describe_configs(rtype, name)
    if overrides:
        values = [v for v in values if v.source not in ("default", "static")]
    if output == Output.json:
        for v in values:
            json_line({"name": v.name, "value": v.value, "source": v.source, "sensitive": v.sensitive})
        return
    rows = [(v.name, "(secret)" if v.sensitive else ("" if v.value is None else v.value), v.source) for v in values]
    table(["KEY", "VALUE", "SOURCE"], rows, title=_label(rtype, name))


@app.command("set")
def set_(
    pairs: Annotated[list[str], typer.Argument(metavar="KEY=VALUE", help="One or more.", show_default=False)],
    topic: TopicOpt = None,
    broker: BrokerOpt = None,
    append: Annotated[
        bool, typer.Option("--append", help="Add VALUE's comma-separated items to a list key (cleanup.policy, ...).")
    ] = False,
    subtract: Annotated[bool, typer.Option("--subtract", help="Remove VALUE's items from a list key.")] = False,
    validate_only: ValidateOpt = False,
    bootstrap: contexts.Bootstrap = None,
    output: OutputOpt = Output.text,
) -> None:
    """Set keys of a topic's config or a broker's dynamic config; the other keys stay.

    All the keys change together or none does: an unknown key or a bad value is refused, named in one
    line. --append/--subtract add or remove items of a list key (cleanup.policy,
    leader/follower.replication.throttled.replicas). A broker's dynamic keys are the replication
    throttle rates (leader/follower.replication.throttled.rate)."""
    if append and subtract:
        raise UsageError("give --append or --subtract, not both")
    rtype, name = _resource(topic, broker)
    values = properties.pairs(pairs, "KEY=VALUE")
    op = OP_APPEND if append else OP_SUBTRACT if subtract else OP_SET
    _alter(rtype, name, [(k, op, v) for k, v in values.items()], validate_only, bootstrap, output)


@app.command("delete")
def delete(
    keys: Annotated[list[str], typer.Argument(metavar="KEY", help="One or more.", show_default=False)],
    topic: TopicOpt = None,
    broker: BrokerOpt = None,
    validate_only: ValidateOpt = False,
    bootstrap: contexts.Bootstrap = None,
    output: OutputOpt = Output.text,
) -> None:
    """Remove keys of a topic's or a broker's config: they take their defaults again.

    A topic key that is not overridden is refused before anything changes."""
    rtype, name = _resource(topic, broker)
    if any(not k.strip() for k in keys):
        raise UsageError("an empty key")
    _alter(rtype, name, [(k.strip(), OP_DELETE, None) for k in keys], validate_only, bootstrap, output)


def _alter(rtype: int, name: str, ops: list[tuple[str, int, str | None]], validate_only: bool,
           bootstrap: str | None, output: Output) -> None:  # fmt: skip
    """One IncrementalAlterConfigs; then the topic's overrides (or the broker's changed keys) shown."""
    with Admin(contexts.bootstrap(bootstrap)) as admin:
        after = admin.change_config(rtype, name, ops, validate_only=validate_only)
    changed = {k: v for k, _, v in ops}
    key = "topic" if rtype == TOPIC_RESOURCE else "broker"
    if output == Output.json:
        json_line({key: name if rtype == TOPIC_RESOURCE else int(name), "validate_only": validate_only,
                   "changed": changed, **({"config": after} if after is not None else {})})  # fmt: skip
        return
    if validate_only:
        print(f"{_label(rtype, name)}: the change is valid (nothing changed: --validate-only)")
    elif after is not None:
        print(f"{_label(rtype, name)}: " + (", ".join(f"{k}={v}" for k, v in sorted(after.items())) or "no overrides"))
    else:
        done = [f"{k}={v}" if v is not None else f"{k} deleted" for k, v in changed.items()]
        print(f"{_label(rtype, name)}: " + ", ".join(done))
