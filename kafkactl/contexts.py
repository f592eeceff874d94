"""Where the cluster is: `-b/--bootstrap-server`, `-z/--zookeeper` and `--schema-registry`, from the command, the root
options, `KAFKACTL_*` environment variables or a context of `~/.config/kafkactl/config.toml`.

    current-context = "local"
    [contexts.local]
    bootstrap-server = "localhost:9092"
    zookeeper = "localhost:2181"
    schema-registry = "http://localhost:8081"
    "security.protocol" = "SASL_SSL"           # and the other keys of broker.client.security, by
    "sasl.mechanism" = "SCRAM-SHA-256"         # librdkafka's names
    "sasl.username" = "alice"
    "sasl.password" = "alice-secret"
    zookeeper-auth = "kafka:zk-secret"         # ZooKeeper digest credentials (or KAFKACTL_ZOOKEEPER_AUTH)
    "ssl.ca.location" = "/etc/kafkactl/ca.pem"

The first of these that names a value wins, in that order; then the defaults (localhost). Security settings
come from the context, then the root `-X KEY=VALUE`, then a command's own `-X` (produce, consume), the later
winning key by key; every command that reaches the brokers resolves them with the bootstrap servers.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Annotated, Any

import typer

from broker.client import security as client_security
from broker.client.security import ClientSecurity
from broker.errors import UsageError
from broker.zk import client as zkclient

DEFAULTS = {"bootstrap-server": "localhost:9092", "zookeeper": "localhost:2181",
            "schema-registry": "http://localhost:8081"}  # fmt: skip
ENV = {"bootstrap-server": "KAFKACTL_BOOTSTRAP_SERVER", "zookeeper": "KAFKACTL_ZOOKEEPER",
       "schema-registry": "KAFKACTL_SCHEMA_REGISTRY"}  # fmt: skip

root: dict[str, str | None] = {"bootstrap-server": None, "zookeeper": None, "context": None}
#: the security settings of the root `-X`, and those of the command's own `-X` (produce, consume)
_security_props: dict[str, dict[str, str]] = {"root": {}, "command": {}}

Bootstrap = Annotated[
    str | None,
    typer.Option("-b", "--bootstrap-server", help="Brokers to start from (host:port,...).", show_default=False),
]
ZooKeeper = Annotated[
    str | None, typer.Option("-z", "--zookeeper", help="ZooKeeper (host:port, optionally /chroot).", show_default=False)
]
SchemaRegistry = Annotated[
    str | None,
    typer.Option("--schema-registry", help="The schema registry's URL (default: KAFKACTL_SCHEMA_REGISTRY, the "
                 "context's schema-registry, else http://localhost:8081).", show_default=False),
]  # fmt: skip


def security_option(help_text: str, *decls: str) -> Any:
    """The one declaration of `-X KEY=VALUE` (repeatable; `--security` by default, `--property` where it takes
    a client's properties too, as produce and consume do), with each command's own help."""
    return Annotated[list[str] | None, typer.Option(*(decls or ("-X", "--security")), help=help_text,
                                                    show_default=False)]  # fmt: skip


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "kafkactl" / "config.toml"


def load_config() -> dict:
    """The config file as a dict ({} when there is none); UsageError when it cannot be read."""
    path = config_path()
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None


def save_config(doc: dict) -> Path:
    """Write `current-context` and the `[contexts.NAME]` tables (string values) back as TOML."""
    lines = []
    if doc.get("current-context"):
        lines.append(f"current-context = {json.dumps(str(doc['current-context']))}")
    for name, values in sorted((doc.get("contexts") or {}).items()):
        lines += ["", f"[contexts.{json.dumps(str(name))}]"]
        lines += [f"{json.dumps(str(k))} = {json.dumps(str(v))}" for k, v in values.items()]
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".toml.tmp")
    tmp.unlink(missing_ok=True)
    secret = any(k in client_security.SECRETS or k == "zookeeper-auth" for v in (doc.get("contexts") or {}).values()
                 for k in v)  # fmt: skip
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if secret else 0o666)  # a password: owner only
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines).lstrip("\n") + "\n")
    tmp.replace(path)
    return path


def _context_values() -> dict[str, str]:
    path = config_path()
    name = root.get("context") or os.environ.get("KAFKACTL_CONTEXT")
    if not path.exists():
        if name:
            raise UsageError(f"context {name!r} named, but {path} does not exist")
        return {}
    doc = load_config()
    name = name or doc.get("current-context")
    if not name:
        return {}
    contexts = doc.get("contexts") or {}
    if name not in contexts:
        raise UsageError(f"no context {name!r} in {path} (have: {', '.join(sorted(contexts)) or 'none'})")
    return {str(k): str(v) for k, v in contexts[name].items()}


def resolve(key: str, option: str | None) -> str:
    """The value of `bootstrap-server` or `zookeeper` for this command."""
    return configured(key, option) or DEFAULTS[key]


def configured(key: str, option: str | None = None) -> str | None:
    """`resolve` without the default: None when no option, variable or context names a value."""
    named = _context_values() if root.get("context") else None  # a named context must exist even if unused
    for value in (option, root.get(key), os.environ.get(ENV[key])):
        if value:
            return value
    values = named if named is not None else _context_values()
    return values.get(key) or None


def bootstrap(option: str | None = None) -> str:
    """The bootstrap servers of this command; its security settings become the connections' default too. A
    context's security settings go with its cluster: they apply when the context gives the bootstrap servers
    or is named (`--context`, KAFKACTL_CONTEXT), not to servers named by an option or variable alone."""
    explicit = option or root.get("bootstrap-server") or os.environ.get(ENV["bootstrap-server"])
    security(context=not explicit or bool(root.get("context") or os.environ.get("KAFKACTL_CONTEXT")))
    return resolve("bootstrap-server", option)


def zookeeper(option: str | None = None) -> str:
    """ZooKeeper's address for this command; its digest credentials (KAFKACTL_ZOOKEEPER_AUTH, else the context's
    `zookeeper-auth`, `user:password`) go with every session the command opens."""
    auth = os.environ.get("KAFKACTL_ZOOKEEPER_AUTH") or _context_values().get("zookeeper-auth")
    if auth:
        zkclient.use_credentials(auth)
    return resolve("zookeeper", option)


def schema_registry(option: str | None = None) -> str:
    return resolve("schema-registry", option)


def set_root_security(props: dict[str, str]) -> None:
    """The root `-X KEY=VALUE` settings (security ones only: a producer's or consumer's go after the command)."""
    for key in props:
        if key not in client_security.KEYS:
            raise UsageError(f"-X {key}: only security settings go before the command (security.protocol, ssl.*, "
                             "sasl.*); give producer and consumer properties to produce/consume")  # fmt: skip
    _security_props["root"] = dict(props)
    _security_props["command"] = {}
    client_security.set_default(ClientSecurity())


def command_security(props: dict[str, str]) -> None:
    """A command's own `-X` security settings (produce, consume): over the context's and the root's, from the
    next `bootstrap()` on."""
    _security_props["command"].update(props)


def security(*, context: bool = True) -> ClientSecurity:
    """This command's security settings (the context's unless not `context`, the root `-X`, then the command's
    own), made the default of every connection the process opens."""
    values = _context_values() if context else {}
    props = {k: v for k, v in values.items() if k in client_security.KEYS}
    props.update(_security_props["root"])
    props.update(_security_props["command"])
    sec = ClientSecurity.from_properties(props)
    client_security.set_default(sec)
    return sec
