"""`kafkactl audit`: the paper's audit, per topic and time window, across the pipeline's tiers."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

import typer
from typer.exceptions import Exit

from broker.audit.reconcile import TIER_ORDER, reconcile
from kafkactl import completion, contexts
from kafkactl.render import Output, json_line, table


def _window(start_ms: int) -> str:
    return dt.datetime.fromtimestamp(start_ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


Topics = Annotated[list[str] | None, typer.Argument(help="Topics (default: every audited one).",
                                                    autocompletion=completion.topics, show_default=False)]  # fmt: skip


def audit(
    topics: Topics = None,
    bootstrap: contexts.Bootstrap = None,
    mirror: Annotated[
        str | None,
        typer.Option(
            "--mirror",
            help="Bootstrap servers of a cluster mirroring this "
            "one: its mirrored counts and its copies join the table.",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    grace: Annotated[
        float,
        typer.Option(
            "--grace",
            min=0,
            help="Seconds after a window ends before a disagreement in it is a loss, not messages in flight.",
        ),
    ] = 120.0,  # fmt: skip
    output: Annotated[Output, typer.Option("-o", "--output", help="text or json.")] = Output.text,
) -> None:
    """Set each window's counts side by side: produced (the producers' published counts), stored (what the
    cluster holds), mirrored and mirror-stored (with --mirror), loaded (spark-load's counts). Exit code 1 when a
    settled window lost or duplicated messages; the row names the two tiers between which it happened."""
    rows = reconcile(contexts.bootstrap(bootstrap), mirror=mirror, topics=topics or None, grace_ms=int(grace * 1000))
    tiers = [t for t in TIER_ORDER if any(r.counts.get(t) is not None for r in rows)] or ["produced", "stored"]
    if output == Output.json:
        for r in rows:
            json_line(r.to_json())
    else:
        table(["TOPIC", "WINDOW", *(t.upper() for t in tiers), "STATUS"],
              [(r.topic, _window(r.window_start), *(r.counts.get(t) if r.counts.get(t) is not None else "-"
                                                   for t in tiers), r.status + (f": {r.detail}" if r.detail else ""))
               for r in rows])  # fmt: skip
    if any(r.problem for r in rows):
        raise Exit(1)
