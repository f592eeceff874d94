"""`kafkactl mirror`: copy topics from one cluster to another, exactly once, and say how far it is."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from dataclasses import asdict
from typing import Annotated

import typer
from typer.exceptions import Exit

from broker.client import security as client_security
from broker.client.properties import pairs
from broker.client.security import ClientSecurity
from broker.errors import UsageError
from broker.mirror.engine import Mirror, MirrorConfig
from broker.mirror.status import mirror_status
from broker.mirror.topics import Selection
from kafkactl import contexts
from kafkactl.render import Output, json_line, table

app = typer.Typer(help="Mirror topics between clusters (the paper's cross-datacenter copy), exactly once.",
                  no_args_is_help=True)  # fmt: skip

From = Annotated[str, typer.Option("--from", help="Bootstrap servers of the source cluster.", show_default=False)]
To = Annotated[str | None, typer.Option("--to", help="Bootstrap servers of the target cluster (default: -b, "
                                        "KAFKACTL_BOOTSTRAP_SERVER or the context).", show_default=False)]  # fmt: skip
Include = Annotated[str, typer.Option("--include", help="Regular expression of the topics to mirror (whole name).")]
Exclude = Annotated[str | None, typer.Option("--exclude", help="Regular expression of topics to leave out.",
                                             show_default=False)]  # fmt: skip
Rename = Annotated[list[str] | None, typer.Option("--rename", metavar="SOURCE:TARGET",
                                                  help="Mirror topic SOURCE as TARGET (repeatable).")]  # fmt: skip
Prefix = Annotated[str, typer.Option("--prefix", help="Prefix the names of the target topics with this.")]


SourceSecurity = Annotated[list[str] | None, typer.Option(
    "--source-property", metavar="KEY=VALUE", show_default=False,
    help="A security setting of the source cluster (security.protocol, ssl.*, sasl.*; repeatable). Without any, "
         "both clusters take the root -X and the context's settings.")]  # fmt: skip
TargetSecurity = Annotated[list[str] | None, typer.Option(
    "--target-property", metavar="KEY=VALUE", show_default=False,
    help="A security setting of the target cluster, as --source-property.")]  # fmt: skip


def _selection(include: str, exclude: str | None, rename: list[str] | None, prefix: str) -> Selection:
    return Selection.parse(include, exclude, rename or [], prefix)


def _security(items: list[str] | None, option: str) -> ClientSecurity | None:
    """One cluster's own settings, or None (the process default) when none are given."""
    if not items:
        return None
    props = pairs(items, option)
    for key in props:
        if key not in client_security.KEYS:
            raise UsageError(f"{option} {key}: only security settings (security.protocol, ssl.*, sasl.*)")
    return ClientSecurity.from_properties(props)


@app.command("start")
def start(
    source: From,
    target: To = None,
    include: Include = ".*",
    exclude: Exclude = None,
    rename: Rename = None,
    prefix: Prefix = "",
    start_at: Annotated[
        str, typer.Option("--start", help="Where a partition the target has nothing of starts: earliest or latest.")
    ] = "earliest",  # fmt: skip
    replication_factor: Annotated[
        int | None,
        typer.Option(
            "--replication-factor",
            "-r",
            help="Replicas of the "
            "topics made on the target (default: the target's default.replication.factor, "
            "at most its broker count).",
        ),
    ] = None,  # fmt: skip
    exit_at_end: Annotated[
        bool,
        typer.Option(
            "--exit",
            "-e",
            help="Exit once every partition is mirrored up to "
            "its last stable offset (its end, less an open transaction; else "
            "run until Ctrl-C or SIGTERM).",
        ),
    ] = False,  # fmt: skip
    report: Annotated[
        float, typer.Option("--report-interval", min=0.5, help="Seconds between progress lines on stderr.")
    ] = 10.0,  # fmt: skip
    refresh: Annotated[
        float,
        typer.Option("--refresh-interval", min=1, help="Seconds between looks for new source topics and partitions."),
    ] = 30.0,  # fmt: skip
    audit: Annotated[
        bool,
        typer.Option(
            "--audit",
            help="Publish per-window counts of the audited messages mirrored to the target's kafkactl-audit topic.",
        ),
    ] = False,  # fmt: skip
    audit_window_ms: Annotated[
        int, typer.Option("--audit-window-ms", min=1, help="The audit's window (the producers' audit.window.ms).")
    ] = 60000,  # fmt: skip
    source_property: SourceSecurity = None,
    target_property: TargetSecurity = None,
) -> None:
    """Copy the selected topics of the source cluster to the target: partition i to partition i, keys, values,
    headers and timestamps kept, target topics made with the source's partitions and configs.

    Exactly once across crashes: each target batch's first record carries a `kafkactl.mirror` header with the
    source offset after it, and a restarted mirror carries on from the target's last batch with the same
    idempotent producer id, so what a killed mirror left in flight is neither lost nor stored twice.
    """
    if start_at not in ("earliest", "latest"):
        raise UsageError(f"--start {start_at!r}: expected earliest or latest")
    cfg = MirrorConfig(source, contexts.bootstrap(target), _selection(include, exclude, rename, prefix),
                       start=start_at, exit_at_end=exit_at_end,
                       replication_factor=-1 if replication_factor is None else replication_factor,
                       report_s=report, refresh_s=refresh, audit=audit, audit_window_ms=audit_window_ms,
                       source_security=_security(source_property, "--source-property"),
                       target_security=_security(target_property, "--target-property"))  # fmt: skip

    def say(line: str) -> None:
        print(f"mirror: {line}", file=sys.stderr, flush=True)

    async def run():  # noqa: ANN202
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):  # leave cleanly: what was sent is answered first
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, stop.set)
        return await Mirror(cfg, say).run(stop)

    summary = asyncio.run(run())
    rate = summary.mirrored / summary.seconds if summary.seconds > 0 else 0.0
    retried = f"; retried: {summary.errors}" if summary.errors else ""
    say(f"mirrored {summary.mirrored:,} messages of {summary.partitions} partition(s) in {summary.seconds:.1f}s "
        f"({rate:,.0f}/s); lag {summary.lag:,}{retried}")  # fmt: skip


@app.command("status")
def status(
    source: From,
    target: To = None,
    include: Include = ".*",
    exclude: Exclude = None,
    rename: Rename = None,
    prefix: Prefix = "",
    output: Annotated[Output, typer.Option("-o", "--output", help="text or json.")] = Output.text,
    source_property: SourceSecurity = None,
    target_property: TargetSecurity = None,
) -> None:
    """Per partition: the source's end, the source offset the target holds up to, and the lag (from the two
    clusters alone; the mirror need not run), and why a target partition cannot take batches now (no leader, fewer
    in-sync replicas than its min.insync.replicas). Exit code 1 when a target partition holds foreign messages."""
    rows = mirror_status(source, contexts.bootstrap(target), _selection(include, exclude, rename, prefix),
                         _security(source_property, "--source-property"),
                         _security(target_property, "--target-property"))  # fmt: skip
    if output == Output.json:
        for row in rows:
            json_line(asdict(row))
    else:
        problems = any(r.problem for r in rows)  # (the column only when a target partition has one)
        table(["TOPIC", "PARTITION", "TARGET", "SOURCE END", "MIRRORED", "LAG", *(["PROBLEM"] if problems else [])],
              [(r.topic, r.partition, r.target_topic, r.source_end,
                "foreign data" if r.foreign else "-" if r.mirrored is None else r.mirrored, r.lag,
                *([r.problem or "-"] if problems else []))
               for r in rows])  # fmt: skip
    if any(r.foreign for r in rows):
        raise Exit(1)
