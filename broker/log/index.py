"""The two sparse indexes beside each segment, `.index` and `.timeindex`, in Kafka's formats.

`.index`: 8-byte entries, int32 offset relative to the segment's base offset and int32 byte position
in the `.log`. An entry (o, p) says the batch starting at p ends with offset base+o, so the batch
holding any offset > base+o starts after p. One entry per `index.interval.bytes` of log.

`.timeindex`: 12-byte entries, int64 timestamp and int32 relative offset: the largest timestamp seen
so far in the segment and the last offset of the batch that carried it. Entries never go backwards.

Both are derived data: the log is the truth, and an index that fails its sanity check is rebuilt
from it. Entries live in memory (arrays, bisected) and are appended to the file on flush.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_right
from pathlib import Path

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")


class IndexCorruptError(Exception):
    """An index file that fails its sanity check; the caller rebuilds it."""


class _SparseIndex:
    """Two parallel ascending arrays mirrored to an append-only file of fixed-size entries."""

    entry: struct.Struct

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.keys = array("q")
        self.values = array("q")
        self._unflushed = 0  # entries not yet written to the file

    def _pack(self, key: int, value: int) -> bytes:
        raise NotImplementedError

    def _read_entries(self) -> list[tuple[int, int]]:
        data = self.path.read_bytes() if self.path.exists() else b""
        if len(data) % self.entry.size:
            raise IndexCorruptError(f"{self.path.name}: size {len(data)} is not a multiple of {self.entry.size}")
        return list(self.entry.iter_unpack(data))

    def _add(self, key: int, value: int) -> None:
        self.keys.append(key)
        self.values.append(value)
        self._unflushed += 1

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self.keys, self.values, strict=True))

    def _truncate(self, n: int) -> None:
        """Keep the first `n` entries. The file is cut in place, never rewritten: a truncation is how a failed
        append on a full disk is undone, and it must not need room on that disk itself."""
        if n >= len(self.keys):
            return
        written = len(self.keys) - self._unflushed
        del self.keys[n:], self.values[n:]
        if n < written:
            os.truncate(self.path, n * self.entry.size)
            self._unflushed = 0
        else:
            self._unflushed = n - written

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        del self.keys[:], self.values[:]
        self.rewrite()

    def _encode(self, start: int) -> bytes:
        pack = self._pack
        return b"".join(pack(k, v) for k, v in zip(self.keys[start:], self.values[start:], strict=True))

    def flush(self, *, sync: bool = True) -> None:
        """Append the unwritten entries to the file and fsync it (`sync=False`: only write them, for a
        durability point the caller makes for the whole dir)."""
        if not self._unflushed:
            return
        with open(self.path, "ab") as f:
            f.write(self._encode(len(self.keys) - self._unflushed))
            if sync:
                f.flush()
                os.fsync(f.fileno())
        self._unflushed = 0

    def rewrite(self) -> None:
        """Write every entry afresh (after a truncation or a rebuild)."""
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_bytes(self._encode(0))
        os.replace(tmp, self.path)
        self._unflushed = 0


class OffsetIndex(_SparseIndex):
    """Last offset of a batch → its file position, sparse, for one segment (keys are absolute)."""

    entry = OFFSET_ENTRY

    def _pack(self, key: int, value: int) -> bytes:
        return OFFSET_ENTRY.pack(key - self.base_offset, value)

    def load(self, log_size: int) -> None:
        """Read the file, raising IndexCorruptError when it cannot describe a log of `log_size` bytes."""
        last_off, last_pos = -1, -1
        for rel, pos in self._read_entries():
            off = self.base_offset + rel
            if rel < 0 or off <= last_off or pos <= last_pos or pos >= log_size:
                raise IndexCorruptError(f"{self.path.name}: entry ({rel}, {pos}) out of order or range")
            self.keys.append(off)
            self.values.append(pos)
            last_off, last_pos = off, pos

    def append(self, last_offset: int, position: int) -> None:
        self._add(last_offset, position)

    def lookup(self, offset: int) -> int:
        """Position of a batch at or before the one holding `offset` (0 if none is indexed)."""
        i = bisect_right(self.keys, offset - 1) - 1
        return self.values[i] if i >= 0 else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop entries at or past `position` of the log."""
        self._truncate(bisect_right(self.values, position - 1))


class TimeIndex(_SparseIndex):
    """Largest timestamp so far → last offset of its batch, sparse and non-decreasing (keys are times)."""

    entry = TIME_ENTRY

    def _pack(self, key: int, value: int) -> bytes:
        return TIME_ENTRY.pack(key, value - self.base_offset)

    def load(self, next_offset: int) -> None:
        """Read the file, raising IndexCorruptError when it is not a valid time index of the segment."""
        last_ts, last_off = -(2**63), self.base_offset - 1
        limit = max(next_offset, self.base_offset + 1)
        for ts, rel in self._read_entries():
            off = self.base_offset + rel
            if ts < last_ts or off < last_off or rel < 0 or off >= limit:
                raise IndexCorruptError(f"{self.path.name}: entry ({ts}, {rel}) out of order or range")
            self.keys.append(ts)
            self.values.append(off)
            last_ts, last_off = ts, off

    @property
    def last_timestamp(self) -> int:
        return self.keys[-1] if self.keys else -1

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add (timestamp, offset) when it moves the largest timestamp forward."""
        if timestamp > self.last_timestamp:
            self._add(timestamp, offset)

    def lookup(self, timestamp: int) -> int:
        """An offset at or before the first record with a timestamp >= `timestamp` (base if none)."""
        i = bisect_right(self.keys, timestamp - 1) - 1
        return self.values[i] if i >= 0 else self.base_offset

    def truncate_to_offset(self, next_offset: int) -> None:
        """Drop entries for offsets >= `next_offset` (their timestamps may be anything)."""
        n = 0
        while n < len(self.values) and self.values[n] < next_offset:
            n += 1
        self._truncate(n)
