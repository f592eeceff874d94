"""Aborted transactions of a partition: the `.txnindex` file beside each segment, in Kafka's format.

`<20-digit base offset>.txnindex` holds one entry per transaction aborted by a marker in that segment
(the segment the abort marker went to), in the order the markers were written. All integers are
big-endian; each entry is 34 bytes:

| field | type |
|---|---|
| version | int16 = 0 |
| producer_id | int64 |
| first_offset | int64: the transaction's first offset in this partition |
| last_offset | int64: the offset of its abort marker |
| last_stable_offset | int64: the partition's last stable offset once it was aborted |

A read_committed Fetch answers the aborted transactions overlapping the offsets it returns
(`overlapping`): a consumer drops the records of such a producer from the transaction's first offset
until its abort marker. The file goes with its segment (retention, truncation deletes it; truncation
also cuts entries whose marker lies past the new log end); a trailing partial entry (a torn write) is
ignored. Start-up rebuilds the entries of the markers it reads again (`add` skips an entry already held).
The whole index stays in memory (34 bytes an aborted transaction), so a Fetch looks up no file.
"""

from __future__ import annotations

import bisect
import os
import struct
from pathlib import Path
from typing import NamedTuple

SUFFIX = ".txnindex"
VERSION = 0
ENTRY = struct.Struct(">hqqqq")  # version, producer id, first offset, last offset, last stable offset
assert ENTRY.size == 34


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def index_path(directory: Path, base_offset: int) -> Path:
    return Path(directory) / f"{base_offset:020d}{SUFFIX}"


def encode(entry: AbortedTxn) -> bytes:
    return ENTRY.pack(VERSION, *entry)


def decode(data: bytes) -> list[AbortedTxn]:
    """The whole version-0 entries of a `.txnindex` file's bytes (a trailing partial entry is left out)."""
    out = []
    for i in range(len(data) // ENTRY.size):
        version, *fields = ENTRY.unpack_from(data, i * ENTRY.size)
        if version != VERSION:
            break
        out.append(AbortedTxn(*fields))
    return out


def read_file(path: Path) -> list[AbortedTxn]:
    try:
        return decode(Path(path).read_bytes())
    except FileNotFoundError:
        return []


class TxnIndex:
    """The aborted transactions of one partition's segments: their `.txnindex` files and a copy in memory."""

    def __init__(self, directory: Path, bases: list[int], *, scan: bool = True) -> None:
        """Load the entries of `bases`' segments, and delete files of other segments (`scan` False: a new
        log's dir, holding none)."""
        self.dir = Path(directory)
        self.by_segment: dict[int, list[AbortedTxn]] = {}
        self._sorted: list[AbortedTxn] | None = None  # every entry by last offset (rebuilt after a change)
        self._keys: set[tuple[int, int]] = set()  # (producer id, last offset) of every entry: `add` looks up here
        if not scan:
            return
        kept = set(bases)
        for path in self.dir.glob(f"*{SUFFIX}"):
            stem = path.name[: -len(SUFFIX)]
            if len(stem) == 20 and stem.isdigit() and int(stem) not in kept:
                path.unlink(missing_ok=True)  # its segment is gone (recovery moved it to quarantine)
        for base in bases:
            entries = read_file(index_path(self.dir, base))
            if entries:
                self.by_segment[base] = entries
                self._keys.update((e.producer_id, e.last_offset) for e in entries)

    def all(self) -> list[AbortedTxn]:
        """Every entry, in marker order."""
        if self._sorted is None:
            self._sorted = sorted((e for es in self.by_segment.values() for e in es), key=lambda e: e.last_offset)
        return self._sorted

    def add(self, segment_base: int, entry: AbortedTxn) -> bool:
        """Append `entry` to the segment's file, unless an entry for the same marker is held; returns whether
        it was added (a set look-up, not a scan: a rebuild adds every aborted transaction again)."""
        key = (entry.producer_id, entry.last_offset)
        if key in self._keys:
            return False
        fd = os.open(index_path(self.dir, segment_base), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, encode(entry))
            os.fsync(fd)  # (an abort is rare; its entry must outlive a power loss as the flushed marker does)
        finally:
            os.close(fd)
        self.by_segment.setdefault(segment_base, []).append(entry)
        self._keys.add(key)
        self._sorted = None
        return True

    def overlapping(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions holding an offset in [start, end): last offset >= start, first < end
        (Kafka's collectAbortedTransactions), oldest first."""
        entries = self.all()
        i = bisect.bisect_left(entries, start, key=lambda e: e.last_offset)
        return [e for e in entries[i:] if e.first_offset < end]

    def drop_segment(self, segment_base: int) -> None:
        """The segment was deleted: its file and entries go too."""
        dropped = self.by_segment.pop(segment_base, None)
        if dropped is not None:
            self._sorted = None
            self._keys.difference_update((e.producer_id, e.last_offset) for e in dropped)
        index_path(self.dir, segment_base).unlink(missing_ok=True)

    def truncate(self, offset: int) -> None:
        """Cut every entry whose marker lies at or past `offset` (the log was cut back there)."""
        for base in list(self.by_segment):
            es = self.by_segment[base]
            kept = [e for e in es if e.last_offset < offset]
            if len(kept) == len(es):
                continue
            self._sorted = None
            path = index_path(self.dir, base)
            if kept:
                self._keys.difference_update((e.producer_id, e.last_offset) for e in es if e.last_offset >= offset)
                self.by_segment[base] = kept
                tmp = path.with_name(path.name + ".tmp")
                with open(tmp, "wb") as f:
                    f.write(b"".join(encode(e) for e in kept))
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            else:
                self.drop_segment(base)

    def segment_for(self, bases: list[int], offset: int) -> int:
        """The base of the segment holding `offset` among `bases` (sorted)."""
        return bases[max(bisect.bisect_right(bases, offset) - 1, 0)]


# -- the control record of a transaction marker ------------------------------------------------------

#: a marker's control record: key = version int16 0, type int16 (0 abort, 1 commit); value = version int16 0,
#: coordinator epoch int32 (Kafka's EndTransactionMarker)
MARKER_KEY = struct.Struct(">hh")
MARKER_VALUE = struct.Struct(">hi")
ABORT, COMMIT = 0, 1


def marker_record(commit: bool, coordinator_epoch: int) -> tuple[bytes, bytes]:
    """(key, value) of a marker's control record."""
    return MARKER_KEY.pack(0, COMMIT if commit else ABORT), MARKER_VALUE.pack(0, coordinator_epoch)


def parse_marker(key: bytes | None, value: bytes | None) -> tuple[bool, int] | None:
    """(commit?, coordinator epoch) of a control record, or None if it is no transaction marker."""
    if key is None or len(key) < MARKER_KEY.size:
        return None
    _, kind = MARKER_KEY.unpack_from(key)
    if kind not in (ABORT, COMMIT):
        return None
    epoch = MARKER_VALUE.unpack_from(value)[1] if value is not None and len(value) >= MARKER_VALUE.size else -1
    return kind == COMMIT, epoch
