"""`kafkactl inspect segments`: dump and check segment files, as Kafka's DumpLogSegments does;
`kafkactl inspect cleaner`: the log cleaner's progress per partition."""

from __future__ import annotations

import base64
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.exceptions import Exit

from broker.log.inspection import inspect_cleaner, inspect_paths
from kafkactl import files
from kafkactl.render import Output, json_line

app = typer.Typer(help="Inspect what kafkactl (or Apache Kafka) stored.", no_args_is_help=True)


class Decode(StrEnum):
    utf8 = "utf8"
    hex = "hex"
    base64 = "base64"


def _decode(value: Any, how: Decode) -> Any:
    if value is None:
        return None
    if how == Decode.hex:
        return value.hex()
    if how == Decode.base64:
        return base64.b64encode(value).decode()
    return value.decode("utf-8", "backslashreplace")


def _text(ev: dict[str, Any]) -> str:
    t = ev["type"]
    if t == "file":
        return f"Dumping {ev['file']} ({ev['size']} bytes)"
    if t == "batch":
        fields = ["base_offset", "last_offset", "count", "position", "size", "create_time", "max_timestamp",
                  "magic", "codec", "producer_id", "producer_epoch", "base_sequence"]  # fmt: skip
        parts = [f"{k}: {ev[k]}" for k in fields if k in ev]
        parts.append(f"crc: {ev['crc']:#010x}")
        if ev["computed_crc"] is not None:
            parts.append(f"computed_crc: {ev['computed_crc']:#010x}")
        for flag in ("transactional", "control"):
            if ev.get(flag):
                parts.append(f"{flag}: true")
        if "marker" in ev:
            parts.append(f"marker: {ev['marker']} coordinator_epoch: {ev['coordinator_epoch']}")
        parts.append(f"valid: {str(ev['valid']).lower()}")
        if ev.get("problem"):
            parts.append(f"problem: {ev['problem']}")
        return " ".join(parts)
    if t == "record":
        line = (f"| offset: {ev['offset']} timestamp: {ev['timestamp']} key_size: {ev['key_size']} "
                f"value_size: {ev['value_size']} headers: {','.join(ev['header_keys']) or '-'}")  # fmt: skip
        if "value" in ev:
            line += f" key: {ev['key']} value: {ev['value']}"
        return line
    if t == "error":
        where = f" at byte {ev['position']}" if ev.get("position") is not None else ""
        return f"ERROR {ev['file']}{where}: {ev['message']}"
    if t == "aborted_txn":
        return (f"ABORTED {ev['file']}: producer_id: {ev['producer_id']} first_offset: {ev['first_offset']} "
                f"last_offset: {ev['last_offset']} last_stable_offset: {ev['last_stable_offset']}")  # fmt: skip
    if t == "index":
        return f"INDEX {ev['kind']} {ev['file']}: {ev['message']}"
    if t == "outside":
        return (f"OUTSIDE {ev['file']} resolves to {ev['target']}, outside {ev['root']}: recover and start-up "
                f"recovery leave its partition as it is")  # fmt: skip
    if t == "file_summary":
        return (f"{ev['file']}: {ev['batches']} batches, {ev['records']} records, {ev['invalid']} invalid, "
                f"{ev['errors']} errors, {ev['trailing_bytes']} trailing invalid bytes")  # fmt: skip
    return (f"Summary: {ev['files']} files, {ev['batches']} batches, {ev['records']} records, "
            f"{ev['invalid']} invalid batches, {ev['errors']} errors"
            + (f", {ev['outside']} entries resolving outside the dir given" if ev["outside"] else ""))  # fmt: skip


@app.command("segments")
def segments(
    paths: Annotated[list[Path], typer.Argument(help="Segment .log files, partition dirs or log dirs.")],
    deep: Annotated[
        bool, typer.Option("--deep", help="A line per record: offset, timestamp, sizes, header keys.")
    ] = False,
    print_data: Annotated[bool, typer.Option("--print-data", help="Show record keys, values and headers.")] = False,
    decode: Annotated[Decode, typer.Option("--decode", help="How --print-data shows bytes.")] = Decode.utf8,
    verify_index: Annotated[
        bool, typer.Option("--verify-index", help="Check .index and .timeindex against the log.")
    ] = False,
    output: Annotated[
        Output, typer.Option("-o", "--output", help="text, or json (one object per line).")
    ] = Output.text,
) -> None:
    """Dump the batches of segment files and check their CRCs, offsets and indexes.

    Exit code 0 when everything checked is valid, 3 when damage or an index mismatch was found, 2 when a path
    given is missing or not a log (and nothing read was damaged).
    """
    files.require(paths)
    damaged = unreadable = False
    for ev in inspect_paths(paths, deep=deep, print_data=print_data, verify_index=verify_index):
        if ev["type"] == "record" and "value" in ev:
            ev["key"], ev["value"] = _decode(ev["key"], decode), _decode(ev["value"], decode)
            ev["headers"] = [[k, _decode(v, decode)] for k, v in ev["headers"]]
        if ev["type"] == "summary":
            unreadable = bool(ev["unreadable"])
            damaged = bool(ev["errors"] - ev["unreadable"] or ev["invalid"])
        if output == Output.json:
            json_line(ev)
        else:
            print(_text(ev))
    if damaged:
        raise Exit(3)
    if unreadable:
        raise Exit(2)


def _cleaner_text(ev: dict[str, Any]) -> str:
    if ev["type"] == "error":
        return f"ERROR {ev['path']}: {ev['message']}"
    if ev["type"] == "summary":
        hidden = ev.get("not_compacted_hidden")
        return (f"Summary: {ev['partitions']} partitions, {ev['with_checkpoint']} with a cleaner checkpoint, "
                f"{ev['leftovers']} files left by a clean"
                + (f"; {hidden} not compacted left out (--all shows them)" if hidden else ""))  # fmt: skip
    ckpt = "none" if ev["cleaner_checkpoint"] is None else ev["cleaner_checkpoint"]
    when = "-" if ev["checkpointed_ms"] is None else time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(ev["checkpointed_ms"] / 1000))  # fmt: skip
    if not ev.get("compacted", True):
        return (f"{ev['topic']}-{ev['partition']}: not compacted (no cleaner checkpoint), offsets "
                f"[{ev['log_start']}, {ev['log_end']}), {ev['segments']} segments")  # fmt: skip
    line = (f"{ev['topic']}-{ev['partition']}: cleaner checkpoint {ckpt} (written {when}), offsets "
            f"[{ev['log_start']}, {ev['log_end']}), {ev['segments']} segments, clean {ev['clean_bytes']} bytes, "
            f"dirty {ev['dirty_bytes']} bytes, dirty ratio {ev['dirty_ratio']:.4f}")  # fmt: skip
    kinds: dict[str, int] = {}
    for name in ev["leftovers"]:  # (.deleted: replaced segments, kept log.segment.delete.delay.ms)
        kinds[name.rsplit(".", 1)[-1]] = kinds.get(name.rsplit(".", 1)[-1], 0) + 1
    return line + (", left by a clean: " + ", ".join(f"{n} .{k}" for k, n in sorted(kinds.items())) if kinds else "")


@app.command("cleaner")
def cleaner(
    paths: Annotated[list[Path], typer.Argument(help="Log dirs or partition dirs.")],
    all_: Annotated[
        bool, typer.Option("--all", help="Also the partitions the cleaner has not compacted (no checkpoint).")
    ] = False,
    output: Annotated[
        Output, typer.Option("-o", "--output", help="text, or json (one object per line).")
    ] = Output.text,
) -> None:
    """The log cleaner's progress per compacted partition: its checkpoint (first dirty offset), the clean and
    dirty bytes and dirty ratio by segment, when the checkpoint was written, files a clean left behind.

    Read from the files (a running broker's log dirs too), which do not hold a topic's cleanup.policy: a
    partition counts as compacted once the cleaner has a checkpoint for it or left files of a clean (a
    compacted topic's partition that was never cleaned yet shows with --all). Each JSON object says
    `compacted`. Exit code 2 when a path given is not a log dir."""
    files.require(paths)
    bad = False
    hidden = 0
    for ev in inspect_cleaner(paths):
        bad = bad or ev["type"] == "error"
        if ev["type"] == "partition":
            ev["compacted"] = ev["cleaner_checkpoint"] is not None or bool(ev["leftovers"])
            if not ev["compacted"] and not all_:
                hidden += 1
                continue
        if ev["type"] == "summary":
            ev["not_compacted_hidden"] = hidden
        if output == Output.json:
            json_line(ev)
        else:
            print(_cleaner_text(ev))
    if bad:
        raise Exit(2)
