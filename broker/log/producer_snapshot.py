"""Producer-state snapshots: what a partition's idempotent producers last wrote, kept across restarts.

A snapshot is `<20-digit offset>.snapshot` in the partition dir, in Kafka's format (version 1): the
state the log's batches below `offset` leave. All integers are big-endian.

| field | type |
|---|---|
| version | int16 = 1 |
| crc | uint32: CRC-32C of every byte after it |
| entries | int32 count, then per producer: |
| · producer_id | int64 |
| · epoch | int16 |
| · last_sequence | int32: the last sequence of its last batch |
| · last_offset | int64: the last offset of its last batch |
| · offset_delta | int32: last_sequence − the batch's first sequence |
| · timestamp | int64: when it last wrote, epoch ms |
| · coordinator_epoch | int32: of the last transaction marker for it here (-1: none) |
| · current_txn_first_offset | int64: first offset of its open transaction here (-1: none) |

The broker writes one at every segment roll (at the new segment's base, as Kafka's onSegmentRoll), in the
minute's pass for a partition whose producer state changed and whose log grew enough past its last snapshot
to make its replay worth bounding (`producer_state_io.snapshot_due`: all of them written in one job off the
event loop with `write_unlinked`, made durable by one `syncfs` per log dir, then `install`ed on the loop),
and at a clean shutdown for a partition whose state changed since its last one (written without fsync, the
shutdown's `syncfs` makes them durable); it keeps
those at segment bases, the newest at or below the high watermark (a follower's truncation never cuts below
it, so it reads at most about a minute of log back) and the newest. Start-up reads the newest at or below
the log end back and the log after it (from the log start without one); a truncation does the same from the
newest below its point. A file that fails its CRC or its layout is no snapshot (an older one, or the whole
log, is read instead). A partition whose producers could not be read has no snapshot at all (the next
start-up reads its whole log).
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from broker.log.checkpoint import write_atomically
from broker.records.crc import crc32c

SUFFIX = ".snapshot"
UNLINKED = ".snapshot.unlinked"  # a snapshot written off the event loop, not yet installed (a crash may leave one)
VERSION = 1
_NAME = re.compile(r"^(\d{20})\.snapshot$")
_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_FROM = 6


class SnapshotEntry(NamedTuple):
    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SUFFIX}"


def encode(entries: list[SnapshotEntry]) -> bytes:
    body = bytearray(_HEAD.pack(VERSION, 0, len(entries)))
    for e in entries:
        body += _ENTRY.pack(*e)
    struct.pack_into(">I", body, 2, crc32c(memoryview(body)[_CRC_FROM:]))
    return bytes(body)


def decode(data: bytes) -> list[SnapshotEntry] | None:
    """The entries of a snapshot file's bytes, or None if they are not a whole, intact version-1 snapshot."""
    if len(data) < _HEAD.size:
        return None
    version, crc, count = _HEAD.unpack_from(data)
    if version != VERSION or count < 0 or len(data) != _HEAD.size + count * _ENTRY.size:
        return None
    if crc32c(memoryview(data)[_CRC_FROM:]) != crc:
        return None
    return [SnapshotEntry(*_ENTRY.unpack_from(data, _HEAD.size + i * _ENTRY.size)) for i in range(count)]


def snapshots(directory: Path) -> list[tuple[int, Path]]:
    """The snapshot files of a partition dir as (offset, path), oldest first."""
    out = []
    for entry in os.scandir(directory):
        m = _NAME.match(entry.name)
        if m and entry.is_file():
            out.append((int(m.group(1)), Path(entry.path)))
    return sorted(out)


def write(directory: Path, offset: int, entries: list[SnapshotEntry],
          keep: Callable[[int], bool] = lambda offset: False, keep_newest_to: int = -1, *,
          sync: bool = True) -> Path:  # fmt: skip
    """Write the snapshot at `offset` (atomically; `sync=False`: without fsync, for a batched durability
    point) and delete every other one of the partition but those at the offsets `keep` names (the broker
    keeps those at segment bases: a truncation reloads from them) and the newest at or below
    `keep_newest_to` (the high watermark). Returns the snapshot's path."""
    path = snapshot_path(directory, offset)
    write_atomically(path, encode(entries), sync=sync)
    prune(directory, offset, keep, keep_newest_to, off_loop=False)
    return path


def prune(directory: Path, offset: int, keep: Callable[[int], bool], keep_newest_to: int = -1,
          off_loop: bool = True) -> None:  # fmt: skip
    """Delete every snapshot of the partition but the one at `offset`, those `keep` names and the newest at or
    below `keep_newest_to`. Deleting a snapshot is always safe (a load reads more log), so this may run off
    the event loop; `off_loop` (after an `install`, the partition's only snapshot write in flight): also
    delete snapshots left unlinked (by a crash, or a write a shutdown cut short). Deletions are not fsynced:
    a snapshot a power loss brings back is still a true state of the log at its offset (or is past the log
    end, and `latest` deletes it)."""
    found = snapshots(directory)
    below = [o for o, _ in found if o <= keep_newest_to]
    newest_below = below[-1] if below else -1
    for other_offset, other in found:
        if other_offset not in (offset, newest_below) and not keep(other_offset):
            other.unlink(missing_ok=True)
    if not off_loop:  # (an unlinked snapshot may be one being written: left to the writer's own prune)
        return
    for entry in os.scandir(directory):
        if entry.name.endswith(UNLINKED):
            Path(entry.path).unlink(missing_ok=True)


def write_unlinked(directory: Path, offset: int, data: bytes, *, sync: bool = True) -> Path:
    """Write and fsync the snapshot `data` at `offset` under a name no load reads (a blocking call, run off the
    event loop); `install` gives it its name. `sync=False`: no fsync (the caller makes a batch of them
    durable at once, before installing any). A failed write leaves nothing behind and the OSError goes on."""
    path = Path(directory) / f"{offset:020d}{UNLINKED}"
    try:
        with open(path, "wb") as f:
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
    except OSError:
        path.unlink(missing_ok=True)
        raise
    return path


def install(unlinked: Path, offset: int) -> None:
    """Give a snapshot `write_unlinked` wrote its name (on the event loop, once the caller checked that the
    log still holds `offset` and the state it describes is still the partition's)."""
    os.replace(unlinked, snapshot_path(unlinked.parent, offset))


def delete_from(directory: Path, offset: int) -> None:
    """Delete the snapshots at or past `offset` (the log was emptied and restarts there)."""
    for other_offset, other in snapshots(directory):
        if other_offset >= offset:
            other.unlink(missing_ok=True)


def latest(directory: Path, at_most: int) -> tuple[int, list[SnapshotEntry]] | None:
    """The newest intact snapshot at an offset the log still reaches (`at_most`, its end), as (offset,
    entries); snapshots past the log end (it was cut back) and unreadable ones are deleted."""
    for offset, path in reversed(snapshots(directory)):
        try:
            entries = decode(path.read_bytes()) if offset <= at_most else None
        except FileNotFoundError:  # (deleted meanwhile: a prune off the event loop)
            continue
        if entries is not None:
            return offset, entries
        path.unlink(missing_ok=True)
    return None
