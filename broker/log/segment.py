"""One segment of a partition log: `<base offset, 20 digits>.log` with its `.index` and `.timeindex`.

The `.log` holds whole batches back to back (framing in `broker.log.scanner`); its name is the first
offset it may hold. Appends go to the end through one O_APPEND descriptor; reads hand out
(descriptor, position, length) slices for `sendfile`. The segment keeps in memory only what its
indexes and a short tail read give it: size, next offset, largest timestamp.

A deferred append (`append(defer=True)`) moves that state on at once but leaves its bytes queued,
so the appends of pipelined requests reach the file with one `writev` (`write_deferred`). Whatever
reads, flushes, cuts or closes the file writes the queue first, so no read sees a batch the file
does not hold; a failed write cuts the segment back to what the file holds.
"""

from __future__ import annotations

import os
import re
import struct
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple, Protocol

from broker.log.index import IndexCorruptError, OffsetIndex, TimeIndex
from broker.log.scanner import ScannedBatch
from broker.records.batch import LOG_OVERHEAD, MAGIC_OFFSET

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
_NAME = re.compile(r"^(\d{20})\.log$")
# baseOffset, batchLength, epoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp, maxTimestamp
_HEAD = struct.Struct(">qiibIhiqq")
_LEGACY_TS = struct.Struct(">q")
_LEGACY_TS_AT = 18  # offset, size, crc, magic, attributes, then a magic 1 message's timestamp
_IOV_MAX = 1024  # Linux's limit on the buffers of one writev


def segment_name(base_offset: int, suffix: str = LOG_SUFFIX) -> str:
    """Kafka's file name for a segment: the base offset zero-padded to 20 digits."""
    return f"{base_offset:020d}{suffix}"


def parse_segment_name(name: str) -> int | None:
    """The base offset a `.log` file name encodes, or None if it is not a segment name."""
    m = _NAME.match(name)
    return int(m.group(1)) if m else None


class StitchableRun(Protocol):
    """Single batches to append as one (see `broker.server.handlers.produce_run`): `stitch` assigns
    their offsets and says where the indexes take entries, by `_note_batch`'s rule."""

    first_max_timestamp: int

    def stitch(self, first_offset: int, leader_epoch: int, position: int, since_index: int, interval: int,
               max_timestamp: int) -> tuple[bytes, list[tuple[int, int, int]], int, int, int]: ...  # fmt: skip


class BatchHead(NamedTuple):
    """The part of a batch header the read path needs, read with one pread."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int


class LogSegment:
    """A segment file and its two indexes."""

    def __init__(
        self, directory: Path, base_offset: int, *, index_interval_bytes: int = 4096, created_ms: int | None = None
    ) -> None:
        self.dir = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = directory / segment_name(base_offset)
        self.index = OffsetIndex(directory / segment_name(base_offset, INDEX_SUFFIX), base_offset)
        self.time_index = TimeIndex(directory / segment_name(base_offset, TIMEINDEX_SUFFIX), base_offset)
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        st = os.fstat(self.fd)
        self.size = st.st_size
        # segment.ms counts from the first batch's timestamp, else from creation (on the log's clock)
        if self.size:
            self.created_ms = int(st.st_mtime * 1000)
        else:
            self.created_ms = int(time.time() * 1000) if created_ms is None else created_ms
        if not self.size:  # a new segment starts with its (empty) indexes, as Kafka's do (kept if there)
            for p in (self.index.path, self.time_index.path):
                os.close(os.open(p, os.O_WRONLY | os.O_CREAT, 0o644))
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.first_timestamp = -1  # max timestamp of the first batch: the clock segment.ms rolls by
        self._bytes_since_index = 0
        self._deferred: list = []  # buffers of deferred appends, not yet in the file (the last _deferred_bytes of size)
        self._deferred_bytes = 0

    # -- loading -------------------------------------------------------------------------------

    def load_indexes(self) -> None:
        """Read both indexes and the tail after the last index entry; IndexCorruptError if they lie."""
        self.index.load(self.size)
        self._load_tail()
        self.time_index.load(self.next_offset)
        self.max_timestamp = max(self.max_timestamp, self.time_index.last_timestamp)

    def rebuild_indexes(self, batches: Iterable[ScannedBatch]) -> None:
        """Rebuild both indexes from a scan of this segment's valid batches, and flush them.

        As Kafka's recovery does, the time index ends with the segment's largest timestamp, the entry
        a roll or a clean close writes.
        """
        self.index.reset()
        self.time_index.reset()
        self._bytes_since_index = 0
        self.next_offset, self.max_timestamp, self.first_timestamp = self.base_offset, -1, -1
        for b in batches:
            self._note_batch(b.position, b.size, b.last_offset, b.max_timestamp)
        if self.next_offset > self.base_offset:
            self.time_index.maybe_append(self.max_timestamp, self.next_offset - 1)
        self.flush()

    def _load_tail(self) -> None:
        entries = self.index.keys
        start = self.index.values[-1] if entries else 0
        if entries:  # the last entry must point at a batch, or the tail read would start inside one
            head = self.read_head(start)
            if head is None or not self.base_offset <= head.base_offset <= entries[-1]:
                raise IndexCorruptError(f"{self.index.path.name}: last entry points at no batch holding its offset")
        self.next_offset = self.base_offset
        for head in self.heads(start):
            self.next_offset = head.last_offset + 1
            self.max_timestamp = max(self.max_timestamp, head.max_timestamp)
        if entries and entries[-1] >= self.next_offset:
            raise IndexCorruptError(f"{self.index.path.name}: last entry is past the end of the log")
        if self.size:
            first = self.read_head(0)
            self.first_timestamp = first.max_timestamp if first else -1

    # -- writing -------------------------------------------------------------------------------

    def _note_batch(self, position: int, size: int, last_offset: int, max_timestamp: int) -> None:
        if position == 0:
            self.first_timestamp = max_timestamp
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
        if self._bytes_since_index > self.index_interval_bytes:  # Kafka's rule, checked before adding
            self.index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, last_offset)
            self._bytes_since_index = 0
        self._bytes_since_index += size
        self.next_offset = last_offset + 1
        self.size = position + size

    def append(self, iov: list, batches: list[tuple[int, int, int]], total: int | None = None, *,
               defer: bool = False) -> None:  # fmt: skip
        """Write `iov` (whole batches, `total` bytes) at the end; `batches` gives (size, last offset, max ts).

        With `defer` the bytes are only queued (kept by reference: they must not change) until
        `write_deferred` or anything else that touches the file.
        """
        if total is None:
            total = sum(len(b) for b in iov)
        if defer or self._deferred:
            self._deferred += iov
            self._deferred_bytes += total
            self._note_batches(batches)
            if not defer:
                self.write_deferred()
            return
        self._write(iov, total)
        self._note_batches(batches)

    def append_run(self, run: StitchableRun, first_offset: int, leader_epoch: int) -> None:
        """Queue (as a deferred append) a run of batches that get their offsets from `first_offset` on."""
        data, marks, since, max_ts, next_offset = run.stitch(
            first_offset, leader_epoch, self.size, self._bytes_since_index, self.index_interval_bytes,
            self.max_timestamp,
        )  # fmt: skip
        if self.size == 0:
            self.first_timestamp = run.first_max_timestamp
        for last_offset, position, ts in marks:  # `_note_batch`'s rule, applied by the stitcher
            self.index.append(last_offset, position)
            self.time_index.maybe_append(ts, last_offset)
        self._bytes_since_index = since
        self.max_timestamp = max_ts
        self.next_offset = next_offset
        self.size += len(data)
        self._deferred.append(data)
        self._deferred_bytes += len(data)

    def _note_batches(self, batches: list[tuple[int, int, int]]) -> None:
        pos = self.size
        for size, last_offset, max_ts in batches:
            self._note_batch(pos, size, last_offset, max_ts)
            pos += size

    def _write(self, iov: list, total: int) -> None:
        written = os.writev(self.fd, iov) if len(iov) <= _IOV_MAX else 0
        if written != total:  # a short write (or too many buffers for one writev): finish it
            rest = b"".join(iov)[written:]
            while rest:
                n = os.write(self.fd, rest)
                rest = rest[n:]

    @property
    def deferred_bytes(self) -> int:
        """Bytes appended with `defer` and not yet written."""
        return self._deferred_bytes

    def write_deferred(self) -> None:
        """Write the deferred appends with one writev. If that fails, the segment (file, indexes and state)
        is cut back to the end of what was written before them, and the OSError goes on."""
        if not self._deferred:
            return
        iov, total = self._deferred, self._deferred_bytes
        self._deferred, self._deferred_bytes = [], 0
        try:
            self._write(iov, total)
        except OSError:
            self.truncate_to_position(self.size - total)
            raise

    def flush(self, *, sync: bool = True) -> None:
        """fsync the log, then write and fsync the new index entries (`sync=False`: only write them out)."""
        self.write_deferred()
        if sync:
            os.fsync(self.fd)
        self.index.flush(sync=sync)
        self.time_index.flush(sync=sync)

    def truncate_to_position(self, position: int) -> None:
        """Cut the log at `position` (a batch boundary) and forget index entries past it."""
        self.write_deferred()
        os.ftruncate(self.fd, position)
        self.size = position
        self.index.truncate_to_position(position)
        # the timestamps of the cut batches go with them: recompute from the kept entries and the tail
        self.max_timestamp = self.first_timestamp = -1
        self._bytes_since_index = 0
        self._load_tail()
        self.time_index.truncate_to_offset(self.next_offset)
        self.max_timestamp = max(self.max_timestamp, self.time_index.last_timestamp)

    # -- reading -------------------------------------------------------------------------------

    def read_head(self, position: int) -> BatchHead | None:
        """The header of the batch at `position`, or None past the end or where the framing breaks."""
        if self._deferred:
            self.write_deferred()
        data = os.pread(self.fd, _HEAD.size, position)
        if len(data) < MAGIC_OFFSET + 1:
            return None
        base_offset, length = struct.unpack_from(">qi", data)
        size = length + LOG_OVERHEAD
        if length <= 0 or position + size > self.size:
            return None
        if data[MAGIC_OFFSET] != 2 or len(data) < _HEAD.size:
            # a legacy message (a wrapper's offset is its last inner one); magic 1 carries a timestamp
            ts = _LEGACY_TS.unpack_from(data, _LEGACY_TS_AT)[0] if data[MAGIC_OFFSET] == 1 and len(data) >= 26 else -1
            return BatchHead(position, size, base_offset, base_offset, ts)
        f = _HEAD.unpack(data)
        return BatchHead(position, size, base_offset, base_offset + f[6], f[8])

    def heads(self, position: int = 0) -> Iterator[BatchHead]:
        """Batch headers from `position` to the end."""
        while position < self.size:
            head = self.read_head(position)
            if head is None:
                return
            yield head
            position += head.size

    def find(self, offset: int) -> BatchHead | None:
        """The first batch whose last offset is >= `offset`, or None if the segment ends before it."""
        if offset >= self.next_offset:
            return None
        for head in self.heads(self.index.lookup(offset)):
            if head.last_offset >= offset:
                return head
        return None

    def find_timestamp(self, timestamp: int) -> BatchHead | None:
        """The first batch with a max timestamp >= `timestamp`, starting from the time index's hint."""
        start_offset = self.time_index.lookup(timestamp)
        head = self.find(start_offset)
        if head is None:
            return None
        for h in self.heads(head.position):
            if h.max_timestamp >= timestamp:
                return h
        return None

    def read(self, position: int, length: int) -> bytes:
        self.write_deferred()
        return os.pread(self.fd, length, position)

    @property
    def rolling_base_ms(self) -> int:
        return self.first_timestamp if self.first_timestamp >= 0 else self.created_ms

    def close(self) -> None:
        if self.fd >= 0:
            try:
                self.write_deferred()
            finally:
                os.close(self.fd)
            self.fd = -1

    def files(self) -> list[Path]:
        return [self.log_path, self.index.path, self.time_index.path]

    def delete(self) -> None:
        """Close and remove the segment's files (retention: expired data, not damage)."""
        self.close()
        for p in self.files():
            p.unlink(missing_ok=True)
