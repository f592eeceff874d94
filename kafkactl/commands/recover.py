"""`kafkactl recover`: offline CRC recovery of a partition dir or a log dir (dry run unless --execute)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from typer.exceptions import Exit

from broker.log import offline
from broker.log.recovery import format_lost
from kafkactl import files
from kafkactl.render import Output, json_line, progress, table


def recover(
    path: Annotated[Path, typer.Argument(help="A partition dir (<topic>-<partition>) or a log dir.")],
    execute: Annotated[bool, typer.Option("--execute", help="Apply the plan (default: a dry run).")] = False,
    salvage: Annotated[
        bool, typer.Option("--salvage", help="Keep valid batches found after a damaged region.")
    ] = False,
    quarantine_dir: Annotated[
        Path | None, typer.Option("--quarantine-dir", help="Where cut bytes go (default: beside each segment).")
    ] = None,
    output: Annotated[Output, typer.Option("-o", "--output", help="text or json.")] = Output.text,
) -> None:
    """Find damaged batches by CRC and cut them into quarantine files; never deletes a byte.

    Nothing that resolves outside PATH is written, truncated or moved: a partition whose recovery would
    (a symlinked partition dir, segment or index) is left as it is, with a line saying so.
    Exit code 0 when nothing needed cutting, 3 when it cut (or, in a dry run, would cut, or left damage).
    """
    files.require([path])
    parts = offline.partition_dirs(path)[1]
    with progress("scanning", len(parts)) as advance:
        run = offline.plan(path, salvage=salvage, advance=advance)
    refused = [p for p in run.plans if p.refused]
    if execute:
        with progress("recovering", len(run.plans)) as advance:
            offline.execute(run, quarantine_dir=quarantine_dir, advance=advance)
    rows = []
    for p in run.plans:
        for s in p.segments:
            if not (s.needs_cut or s.index_problem):
                continue
            rows.append({
                "partition": p.dir.name, "segment": s.path.name, "size": s.size, "valid_bytes": s.valid_bytes,
                "first_bad_position": s.first_bad_position, "reason": s.reason,
                "damage": "whole segment after damage" if s.dropped else s.kind,
                "cut_bytes": 0 if p.refused else s.cut_bytes, "index_problem": s.index_problem,
            })  # fmt: skip
    if output == Output.json:
        for r in rows:
            json_line({"type": "segment", **r})
        for p in run.plans:
            json_line({"type": "partition", "partition": p.dir.name, "lost": p.lost,
                       "log_end_offset": p.next_offset, "refused": p.refused})  # fmt: skip
        json_line({"type": "summary", "executed": run.executed, "needs_cut": run.needs_cut,
                   "partitions": len(run.plans), "refused": [str(p.dir) for p in refused],
                   "quarantined": [str(q) for q in run.quarantined]})  # fmt: skip
    else:
        if rows:
            cols = [
                "partition",
                "segment",
                "size",
                "valid_bytes",
                "first_bad_position",
                "damage",
                "cut_bytes",
                "reason",
            ]
            table(cols, ([r[c] for c in cols] for r in rows), title="Recovery plan")
            for r in rows:
                if r["index_problem"] and r["partition"] not in {p.dir.name for p in refused}:
                    print(f"{r['partition']}/{r['segment']}: index will be rebuilt ({r['index_problem']})")
        for p in run.plans:
            if p.refused:
                print(f"{p.dir.name}: left as it is (recover writes nothing outside the dir given): {p.refused}")
            elif p.needs_cut:
                print(f"{p.dir.name}: offsets lost {format_lost(p.lost)}; log end offset becomes {p.next_offset}")
        verb = "quarantined" if execute else "would quarantine"
        total = sum(r["cut_bytes"] for r in rows)
        print(f"{len(run.plans)} partitions scanned; {verb} {total} bytes"
              + ("" if execute or not run.needs_cut else " (dry run: add --execute to apply)"))  # fmt: skip
        for q in run.quarantined:
            print(f"quarantined: {q}")
    if run.needs_cut:
        raise Exit(3)
