"""What `kafkactl inspect segments` reports: a stream of plain dicts, one per file, batch, record,
index finding or error, and a closing summary — the command line only renders them.

Paths may be `.log` files, partition dirs or log dirs. Damage is reported and skipped: after a
framing break the scan resumes at the next batch that frames and checksums, so one bad region does
not hide the rest of a file. Entries of a dir given that resolve outside it (a symlinked partition
dir, or a segment or index symlinked out of its partition dir) are read, and reported as `outside`
events: `recover` and start-up recovery leave such a partition as it is.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from broker.errors import CorruptRecordError
from broker.log.cleaner_progress import progress_events as inspect_cleaner  # noqa: F401  (`kafkactl inspect cleaner`)
from broker.log.index import OFFSET_ENTRY, TIME_ENTRY
from broker.log.log import parse_partition_dir
from broker.log.recovery import resolves_outside
from broker.log.scanner import Damage, ScannedBatch, find_next_batch, open_segment, scan
from broker.log.segment import INDEX_SUFFIX, TIMEINDEX_SUFFIX, parse_segment_name
from broker.log.txn_index import SUFFIX as TXN_INDEX_SUFFIX
from broker.log.txn_index import parse_marker
from broker.log.txn_index import read_file as read_txn_index
from broker.records.batch import TIMESTAMP_TYPE_BIT, iter_records
from broker.records.compression import Codec
from broker.records.legacy import inner_messages

Event = dict[str, Any]


def expand_paths(paths: list[Path]) -> Iterator[tuple[Path | None, str | None]]:
    """(segment file, None) for every `.log` under `paths`, or (path, error) for what is not a log."""
    for path in paths:
        if path.is_file():
            yield path, None
        elif path.is_dir():
            segs = sorted(p for p in path.iterdir() if p.suffix == ".log" and p.is_file())
            parts = sorted(p for p in path.iterdir() if p.is_dir() and parse_partition_dir(p.name))
            if segs:
                yield from ((s, None) for s in segs)
            elif parts:
                for part in parts:
                    yield from ((s, None) for s in sorted(part.glob("*.log")))
            else:
                yield path, "not a log dir, partition dir or segment file"
        elif path.exists():
            yield path, "not a regular file, log dir or partition dir"
        else:
            yield path, "no such file or directory"


def outside_entries(path: Path) -> Iterator[Event]:
    """An `outside` event for each entry of a dir given that resolves outside it: a partition dir outside
    the log dir, a segment or index file outside its partition dir."""
    if not path.is_dir():
        return
    parts = sorted(p for p in path.iterdir() if p.is_dir() and parse_partition_dir(p.name))
    dirs = [path] if any(p.suffix == ".log" for p in path.iterdir()) or not parts else parts
    for d in dirs:
        if d is not path and (target := resolves_outside(d, path)) is not None:
            yield {"type": "outside", "file": str(d), "target": str(target), "root": str(path)}
        for f in sorted(d.iterdir()):
            if f.suffix in (".log", INDEX_SUFFIX, TIMEINDEX_SUFFIX) and (target := resolves_outside(f, d)):
                yield {"type": "outside", "file": str(f), "target": str(target), "root": str(d)}


def codec_name(codec: int) -> str:
    try:
        return Codec(codec).name.lower()
    except ValueError:
        return f"unknown({codec})"


def batch_event(path: Path, b: ScannedBatch, buf: Any = None) -> Event:
    ev: Event = {
        "type": "batch",
        "file": str(path),
        "base_offset": b.base_offset,
        "last_offset": b.last_offset,
        "count": b.record_count,
        "position": b.position,
        "size": b.size,
        "magic": b.magic,
        "crc": b.stored_crc,
        "computed_crc": b.computed_crc,
        "valid": b.valid,
    }
    if b.problem:
        ev["problem"] = b.problem
    if b.header is not None:
        h = b.header
        ev.update(
            create_time=h.base_timestamp, max_timestamp=h.max_timestamp,
            timestamp_type="LogAppendTime" if h.timestamp_type else "CreateTime",
            codec=codec_name(h.codec), producer_id=h.producer_id, producer_epoch=h.producer_epoch,
            base_sequence=h.base_sequence, partition_leader_epoch=h.partition_leader_epoch,
            transactional=h.is_transactional, control=h.is_control,
        )  # fmt: skip
        if h.is_control and buf is not None:  # a transaction marker: COMMIT or ABORT, and its coordinator epoch
            with contextlib.suppress(CorruptRecordError, struct.error):
                for r in iter_records(buf, b.position, h):
                    marker = parse_marker(r.key, r.value)
                    if marker is not None:
                        ev.update(marker="COMMIT" if marker[0] else "ABORT", coordinator_epoch=marker[1])
    else:
        m = b.legacy
        ev.update(create_time=m.timestamp, max_timestamp=b.max_timestamp, codec=codec_name(m.codec))
        if m.magic == 1:
            ev["timestamp_type"] = "LogAppendTime" if m.attributes & TIMESTAMP_TYPE_BIT else "CreateTime"
    return ev


def record_events(path: Path, buf, b: ScannedBatch, print_data: bool) -> Iterator[Event]:
    """One event per record of a batch (or an error event if the records do not decode)."""
    try:
        if b.header is not None:
            records = [
                (r.offset, r.timestamp, r.key, r.value, r.headers) for r in iter_records(buf, b.position, b.header)
            ]
        else:
            records = [(m.offset, m.timestamp, m.key, m.value, ()) for m in inner_messages(b.legacy)]
    except CorruptRecordError as exc:
        yield {"type": "error", "file": str(path), "position": b.position, "message": f"records: {exc}"}
        return
    for offset, ts, key, value, headers in records:
        ev: Event = {
            "type": "record", "file": str(path), "offset": offset, "timestamp": ts,
            "key_size": -1 if key is None else len(key), "value_size": -1 if value is None else len(value),
            "header_keys": [k for k, _ in headers],
        }  # fmt: skip
        if print_data:
            ev.update(key=key, value=value, headers=[[k, v] for k, v in headers])
        yield ev


def inspect_segment(path: Path, *, deep: bool, print_data: bool, verify_index: bool) -> Iterator[Event]:
    """Events for one segment file; the last one is a per-file tally."""
    base = parse_segment_name(path.name)
    size = path.stat().st_size
    yield {"type": "file", "file": str(path), "base_offset": base, "size": size}
    if base is None:
        yield {"type": "error", "file": str(path), "position": None,
               "message": "file name is not a 20-digit offset; offsets not checked against it"}  # fmt: skip
    tally = {"batches": 0, "records": 0, "invalid": 0, "errors": 0, "trailing_bytes": 0}
    batches: list[ScannedBatch] = []
    with open_segment(path) as buf:
        pos = 0
        while pos < size:
            resume = None
            for item in scan(buf, pos):
                if isinstance(item, Damage):
                    tally["errors"] += 1
                    resume = find_next_batch(buf, item.position, size)
                    skipped = (resume if resume is not None else size) - item.position
                    yield {"type": "error", "file": str(path), "position": item.position,
                           "message": f"{item.reason}; {skipped} bytes skipped"}  # fmt: skip
                    if resume is None:
                        tally["trailing_bytes"] = size - item.position
                    break
                batches.append(item)
                tally["batches"] += 1
                tally["records"] += item.record_count
                tally["invalid"] += not item.valid
                yield batch_event(path, item, buf)
                if deep or print_data:
                    for ev in record_events(path, buf, item, print_data):
                        tally["errors"] += ev["type"] == "error"
                        yield ev
            if resume is None:
                break
            pos = resume
    for e in read_txn_index(path.with_suffix(TXN_INDEX_SUFFIX)):  # the segment's aborted transactions
        yield {"type": "aborted_txn", "file": str(path.with_suffix(TXN_INDEX_SUFFIX)), **e._asdict()}
    if verify_index and base is not None:
        for ev in verify_indexes(path, base, batches, size):
            tally["errors"] += 1
            yield ev
    yield {"type": "file_summary", "file": str(path), **tally}


def verify_indexes(path: Path, base: int, batches: list[ScannedBatch], size: int) -> Iterator[Event]:
    """Findings that contradict the log: index entries that point nowhere, out of order or garbage."""
    by_pos = {b.position: b for b in batches}
    index = path.with_suffix(INDEX_SUFFIX)
    tindex = path.with_suffix(TIMEINDEX_SUFFIX)

    def finding(kind: str, file: Path, message: str) -> Event:
        return {"type": "index", "file": str(file), "kind": kind, "message": message}

    prev = None
    for b in batches:
        if prev is not None and b.base_offset != prev.last_offset + 1:
            yield finding("gap", path, f"offsets jump from {prev.last_offset} to {b.base_offset} at byte {b.position}")
        prev = b
    if not index.exists():
        yield finding("missing", index, "offset index is missing")
    else:
        data = index.read_bytes()
        if len(data) % OFFSET_ENTRY.size:
            yield finding("garbage", index, f"size {len(data)} is not a multiple of {OFFSET_ENTRY.size}")
        last = (-1, -1)
        for i, (rel, pos) in enumerate(OFFSET_ENTRY.iter_unpack(data[: len(data) // 8 * 8])):
            if (rel, pos) == (0, 0) and i > 0:  # Kafka preallocates: trailing zero entries are unused space
                break
            b = by_pos.get(pos)
            if (rel, pos) <= last or pos >= size:
                yield finding("order", index, f"entry {i} ({rel}, {pos}) is out of order or past the log")
            elif b is None:
                yield finding("mismatch", index, f"entry {i} points at byte {pos}, where no batch starts")
            elif b.last_offset != base + rel:
                message = f"entry {i}: offset {base + rel} but the batch at {pos} ends at {b.last_offset}"
                yield finding("mismatch", index, message)
            last = (rel, pos)
    if not tindex.exists():
        yield finding("missing", tindex, "time index is missing")
        return
    data = tindex.read_bytes()
    if len(data) % TIME_ENTRY.size:
        yield finding("garbage", tindex, f"size {len(data)} is not a multiple of {TIME_ENTRY.size}")
    by_last = {b.last_offset: b for b in batches}
    last_ts, last_off = -(2**63), -1
    for i, (ts, rel) in enumerate(TIME_ENTRY.iter_unpack(data[: len(data) // 12 * 12])):
        if (ts, rel) == (0, 0) and i > 0:
            break
        off = base + rel
        b = by_last.get(off)
        if ts < last_ts or off < last_off:
            yield finding("order", tindex, f"entry {i} ({ts}, {off}) goes backwards")
        elif b is None:
            yield finding("mismatch", tindex, f"entry {i}: offset {off} is not the last offset of any batch")
        elif b.max_timestamp > ts:
            yield finding(
                "mismatch", tindex, f"entry {i}: timestamp {ts} but the batch ending at {off} has {b.max_timestamp}"
            )
        last_ts, last_off = ts, off


def inspect_paths(
    paths: list[Path], *, deep: bool = False, print_data: bool = False, verify_index: bool = False
) -> Iterator[Event]:
    """Every event for every segment under `paths`, then a summary event."""
    total = {"files": 0, "batches": 0, "records": 0, "invalid": 0, "errors": 0, "outside": 0, "unreadable": 0}
    for path in paths:
        try:
            for ev in outside_entries(path):
                total["outside"] += 1
                yield ev
        except OSError as exc:
            total["errors"] += 1
            yield {"type": "error", "file": str(path), "position": None, "message": f"cannot read: {exc}"}
    for path, problem in expand_paths(paths):
        if problem:  # a path given that is not a log to read (a usage error, not damage)
            total["errors"] += 1
            total["unreadable"] += 1
            yield {"type": "error", "file": str(path), "position": None, "message": problem}
            continue
        total["files"] += 1
        try:
            for ev in inspect_segment(path, deep=deep, print_data=print_data, verify_index=verify_index):
                if ev["type"] == "file_summary":
                    for k in ("batches", "records", "invalid", "errors"):
                        total[k] += ev[k]
                yield ev
        except (OSError, ValueError, struct.error) as exc:
            total["errors"] += 1
            yield {"type": "error", "file": str(path), "position": None, "message": f"cannot read: {exc}"}
    yield {"type": "summary", **total}
