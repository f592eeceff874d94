"""Where kafkactl keeps its own files when the user names none: data dirs, pid files and logs.

Everything lives under one home, `$KAFKACTL_HOME` or `~/.local/share/kafkactl`:
`broker-<id>/` (a broker's default log dir), `zookeeper/` (the embedded ZooKeeper's data),
`run/<name>.pid` and `logs/<name>.log` (daemons), and `clusters/<name>/` (a local cluster of
`kafkactl cluster up`, itself laid out as a home for its daemons: see `broker/local_cluster.py`).
"""

from __future__ import annotations

import os
from pathlib import Path


def home_dir() -> Path:
    """The root of kafkactl's default files."""
    env = os.environ.get("KAFKACTL_HOME")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "kafkactl"


def default_log_dir(broker_id: int) -> Path:
    return home_dir() / f"broker-{broker_id}"


def default_zookeeper_dir() -> Path:
    return home_dir() / "zookeeper"


def pid_file(name: str, root: Path | None = None) -> Path:
    """`run/<name>.pid`, e.g. name `broker-1` or `zookeeper-2181`, under `root` (default: the home)."""
    return (root or home_dir()) / "run" / f"{name}.pid"


def log_file(name: str, root: Path | None = None) -> Path:
    """`logs/<name>.log` under `root` (default: the home)."""
    return (root or home_dir()) / "logs" / f"{name}.log"
