"""Where the cluster is: `-b/--bootstrap-server`, `-z/--zookeeper` and `--schema-registry`, from the command, the root
options, `KAFKACTL_*` environment variables or a context of `~/.config/kafkactl/config.toml`.

    current-context = "local"
    [contexts.local]
    bootstrap-server = "localhost:9092"
    zookeeper = "localhost:2181"
    schema-registry = "http://localhost:8081"

The first of these that names a value wins, in that order; then the defaults (localhost).
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Annotated

import typer

from broker.errors import UsageError

DEFAULTS = {"bootstrap-server": "localhost:9092", "zookeeper": "localhost:2181",
            "schema-registry": "http://localhost:8081"}  # fmt: skip
ENV = {"bootstrap-server": "KAFKACTL_BOOTSTRAP_SERVER", "zookeeper": "KAFKACTL_ZOOKEEPER",
       "schema-registry": "KAFKACTL_SCHEMA_REGISTRY"}  # fmt: skip

root: dict[str, str | None] = {"bootstrap-server": None, "zookeeper": None, "context": None}

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
]


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
    tmp.write_text("\n".join(lines).lstrip("\n") + "\n")
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
    return resolve("bootstrap-server", option)


def zookeeper(option: str | None = None) -> str:
    return resolve("zookeeper", option)


def schema_registry(option: str | None = None) -> str:
    return resolve("schema-registry", option)
