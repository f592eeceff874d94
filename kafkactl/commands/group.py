"""`kafkactl group`: list, describe, rewind and delete consumer groups of both kinds."""

from __future__ import annotations

import typer

app = typer.Typer(help="Consumer groups: list, describe, rewind committed offsets, delete.", no_args_is_help=True)
