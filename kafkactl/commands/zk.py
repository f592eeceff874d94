"""`kafkactl zk`: browse ZooKeeper and show the registries kafkactl and Kafka keep there."""

from __future__ import annotations

import typer

app = typer.Typer(help="Browse ZooKeeper: ls, get, tree, and the broker/topic/consumer registries.",
                  no_args_is_help=True)  # fmt: skip
