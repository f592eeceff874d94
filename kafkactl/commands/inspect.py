"""`kafkactl inspect segments`: dump and check segment files, as Kafka's DumpLogSegments does."""

from __future__ import annotations

import base64
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.exceptions import Exit

from broker.log.inspection import inspect_paths
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
