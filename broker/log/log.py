"""A partition log: the ordered segments of one topic partition in `<log dir>/<topic>-<partition>/`.

The sorted list of segment base offsets is the paper's in-memory offset index: bisect it for the
segment, then the segment's sparse `.index` for a position. Appends validate each batch (framing,
magic, CRC, size) and assign offsets by rewriting the 16 bytes outside the CRC; the record bytes are
written as received. Reads return `FetchSlice`s — descriptor, position, length — for `sendfile`.
An append may be deferred (`append(defer=True)`, then `write_deferred()`): the broker writes the
appends of one read's pipelined Produce requests together, before it answers any of them.
"""

from __future__ import annotations

import bisect
import mmap
import os
import random
import re
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from broker.errors import CorruptRecordError, InvalidRecordError, OffsetOutOfRangeError, RecordTooLargeError
from broker.log import recovery
from broker.log.config import LogConfig
from broker.log.index import IndexCorruptError
from broker.log.producer_state import ProducerStates
from broker.log.scanner import Damage, ScannedBatch, scan
from broker.log.segment import LogSegment, StitchableRun
from broker.log.txn_index import AbortedTxn, TxnIndex
from broker.records.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_BIT,
    CRC_OFFSET,
    PREFIX,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    Record,
    check_records,
    iter_records,
)
from broker.records.crc import crc32c
from broker.records.legacy import inner_messages

Buffer = bytes | bytearray | memoryview
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
_MAX_TS = struct.Struct(">q")
_MAX_TS_OFFSET = 35
_ATTRS = struct.Struct(">h")
_MAX_RELATIVE = 2**31 - 1


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) from a `<topic>-<partition>` dir name, or None."""
    m = _PARTITION_DIR.match(name)
    return (m.group(1), int(m.group(2))) if m else None


class AppendResult(NamedTuple):
    first_offset: int
    last_offset: int
    record_count: int
    batch_count: int
    max_timestamp: int
    log_append_time: int  # -1 unless the log stamps LogAppendTime


class FetchSlice(NamedTuple):
    """Bytes of a segment file ready for `sendfile(fd, position, length)`."""

    fd: int
    position: int
    length: int
    first_offset: int  # base offset of the first batch in the slice

    def read(self) -> bytes:
        return os.pread(self.fd, self.length, self.position)


def validate_batches(
    data: Buffer, max_batch_bytes: int, *, client: bool = True
) -> list[tuple[int, int, int, int, int]]:
    """Check that `data` is whole, checksummed v2 batches whose headers tell the truth about their records,
    as Kafka's LogValidator does for a client's batches; returns (position, size, count, delta, max ts) each.
    A client's batch whose max timestamp is not its records' largest is taken, as Kafka takes it: the max
    timestamp returned is the records' (librdkafka sends records stamped -1 under a max timestamp of 0), and
    `PartitionLog.append` writes it into the header.

    Raises CorruptRecordError (framing, magic, CRC), InvalidRecordError (a header that disagrees with its
    records, or a batch a client may not write) or RecordTooLargeError; nothing is appended then. Batches
    a leader already validated and stamped (`client=False`: a follower's copy) are only framed and checksummed.
    """
    out = []
    if len(data) == 0:
        raise CorruptRecordError("empty record set")
    for item in scan(data):
        pos = item.position
        if isinstance(item, Damage):
            raise CorruptRecordError(f"record batch at byte {pos}: {item.reason}")
        if item.magic != 2:
            raise CorruptRecordError(f"record batch at byte {pos}: magic {item.magic} (only magic 2 is accepted)")
        if not item.crc_ok:
            raise CorruptRecordError(f"record batch at byte {pos}: CRC mismatch")
        if item.size > max_batch_bytes:
            raise RecordTooLargeError(
                f"record batch of {item.size} bytes is over max.message.bytes ({max_batch_bytes})"
            )
        h = item.header
        assert h is not None
        largest = h.max_timestamp
        problem = _client_batch_problem(h) if client else None
        if problem is None and client:
            largest = check_records(data, pos, h)  # (`append` writes it into a header that says otherwise)
        if problem is not None:
            raise InvalidRecordError(f"record batch at byte {pos}: {problem}")
        out.append((pos, item.size, h.record_count, h.last_offset_delta, largest))
    return out


def _client_batch_problem(h: BatchHeader) -> str | None:
    """What in a client's batch header Kafka refuses (LogValidator.validateBatch), or None."""
    if h.record_count <= 0:
        return f"record count {h.record_count}"
    if h.last_offset_delta + 1 != h.record_count:
        return f"last offset delta {h.last_offset_delta} does not fit its record count {h.record_count}"
    if h.attributes & CONTROL_BIT:
        return "clients may not write control batches"
    if h.attributes & TRANSACTIONAL_BIT and (h.producer_id < 0 or h.base_sequence < 0):
        return f"a transactional batch with producer {h.producer_id}, sequence {h.base_sequence}"
    if h.attributes & TIMESTAMP_TYPE_BIT:
        return "producers may not stamp LogAppendTime"
    if h.producer_id >= 0 and h.base_sequence < 0:
        return f"producer {h.producer_id} with sequence {h.base_sequence}"
    return None


class PartitionLog:
    """One partition's segments, with append, read, time lookup, roll, flush, retention and truncation."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig | None = None,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.dir = Path(directory)
        parsed = parse_partition_dir(self.dir.name)
        self.topic, self.partition = parsed if parsed else (self.dir.name, 0)
        self.config = config or LogConfig()
        self.clock = clock
        #: its dir was made here: it holds nothing to scan, recover or load (no topic id yet, for one); thousands
        #: are made at topic creation
        self.created = True
        try:
            self.dir.mkdir(parents=True)
        except FileExistsError:
            self.created = False
        self.recovery_plan: recovery.PartitionPlan | None = None
        if not clean and not self.created:  # logs a WARNING with what it cut, and where to
            self.recovery_plan = recovery.recover(self.dir, from_offset=recovery_point,
                                                  index_interval_bytes=self.config.index_interval_bytes)  # fmt: skip
        self.segments: dict[int, LogSegment] = {}
        self.bases: list[int] = []
        for base, _ in [] if self.created else recovery.segment_files(self.dir):
            self._open_segment(base)
        if not self.bases:
            self._open_segment(max(log_start_offset, recovery_point if not clean else 0), empty=self.created)
        self.log_start_offset = max(log_start_offset, self.bases[0])
        #: aborted transactions (broker/log/txn_index.py)
        self.txn_index = TxnIndex(self.dir, self.bases, scan=not self.created)
        #: its producers' sequences and open transactions (Kafka's ProducerStateManager, owned by its log);
        #: empty until the broker loads them (`load_states`) or batches come
        self.producer_states = ProducerStates()
        self.txn_index.truncate(self.log_end_offset)  # (entries of markers recovery cut away)
        self.recovery_point = self.log_end_offset if not clean else max(recovery_point, self.bases[0])
        self._unflushed_messages = 0
        self._last_flush_ms = self._now_ms()
        #: told after a roll, at the new active segment's base (the broker snapshots the producers there)
        self.on_roll: Callable[[PartitionLog], None] | None = None
        #: told after a truncation (truncate_to, reset_to): the log cleaner lowers its checkpoint to the new end
        self.on_truncate: Callable[[PartitionLog], None] | None = None

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _new_segment(self, base: int) -> LogSegment:
        return LogSegment(
            self.dir, base, index_interval_bytes=self.config.index_interval_bytes, created_ms=self._now_ms()
        )

    def _open_segment(self, base: int, *, empty: bool = False) -> LogSegment:
        """Open (or create) the segment at `base` with its indexes loaded (rebuilt if missing or corrupt);
        `empty`: it was just created, there is nothing to load."""
        seg = self._new_segment(base)
        if not empty:
            seg = self._with_indexes(seg)
        self.segments[base] = seg
        bisect.insort(self.bases, base)
        self._roll_jitter_ms = self._random_jitter()  # (the last opened is the active segment)
        return seg

    def _with_indexes(self, seg: LogSegment) -> LogSegment:
        """`seg` with its indexes loaded, or a new one over the same files after rebuilding them."""
        base = seg.base_offset
        if seg.size and not (seg.index.path.exists() and seg.time_index.path.exists()):
            seg.close()
            recovery.rebuild_indexes(self.dir, base, index_interval_bytes=self.config.index_interval_bytes)
            seg = self._new_segment(base)
        try:
            seg.load_indexes()
        except IndexCorruptError:
            seg.close()
            recovery.rebuild_indexes(self.dir, base, index_interval_bytes=self.config.index_interval_bytes)
            seg = self._new_segment(base)
            seg.load_indexes()
        return seg

    def _random_jitter(self) -> int:
        """segment.jitter.ms: how much earlier than segment.ms a new active segment rolls, drawn per segment as
        Kafka's randomSegmentJitter (so that the partitions of a topic do not all roll at once)."""
        jitter = self.config.segment_jitter_ms
        return random.randrange(min(jitter, self.config.segment_ms)) if jitter > 0 else 0

    # -- state ---------------------------------------------------------------------------------

    @property
    def active(self) -> LogSegment:
        return self.segments[self.bases[-1]]

    @property
    def log_end_offset(self) -> int:
        return self.active.next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments.values())

    # -- append --------------------------------------------------------------------------------

    def append(self, data: Buffer, *, leader_epoch: int = -1, assign_offsets: bool = True,
               validated: list[tuple[int, int, int, int, int]] | None = None,
               defer: bool = False) -> AppendResult:  # fmt: skip
        """Validate and append whole batches; with `assign_offsets` they get the next offsets of the log.

        Without it (a follower copying its leader) the batches keep their offsets, which must move forward,
        and, unless `leader_epoch` is given, the leader epochs they carry: the copy is byte for byte.
        `validated` is `self.validate(data)` already done by the caller (so the CRC is checked only once).
        With `defer` the log's state moves on but the bytes (`data` is kept by reference: it must not
        change) reach the file only at `write_deferred()`, or before anything reads, rolls or flushes.
        """
        mv = memoryview(data)
        batches = validated if validated is not None else self.validate(mv, client=assign_offsets)
        total = sum(b[1] for b in batches)
        now = int(self.clock() * 1000)
        if assign_offsets:
            first_offset = self.log_end_offset
            last_offset = first_offset + sum(b[3] for b in batches) + len(batches) - 1
        else:
            first_offset, last_offset = _base_offset(mv, 0), _base_offset(mv, batches[-1][0]) + batches[-1][3]
        self._maybe_roll(total, now, first_offset, last_offset)
        config = self.config
        keep_prefix = not assign_offsets and leader_epoch < 0
        log_append = config.message_timestamp_type == "LogAppendTime" and assign_offsets
        active = self.segments[self.bases[-1]]
        next_offset = active.next_offset
        first = next_offset if assign_offsets else _base_offset(mv, 0)
        iov: list = []
        notes: list[tuple[int, int, int]] = []
        records = 0
        max_ts = -1
        for pos, size, count, delta, batch_max_ts in batches:
            base = next_offset if assign_offsets else _base_offset(mv, pos)
            if base < next_offset:
                raise CorruptRecordError(f"batch offset {base} is below the log end offset {next_offset}")
            if log_append or (assign_offsets and _MAX_TS.unpack_from(mv, pos + _MAX_TS_OFFSET)[0] != batch_max_ts):
                # LogAppendTime: the log's clock stamps the batch; CreateTime: its max timestamp is set to its
                # records' largest (`validate_batches`), as Kafka's LogValidator sets it; the CRC follows
                body = bytearray(mv[pos + 16 : pos + size])
                if log_append:
                    batch_max_ts = now
                    attrs = _ATTRS.unpack_from(body, ATTRIBUTES_OFFSET - 16)[0] | TIMESTAMP_TYPE_BIT
                    _ATTRS.pack_into(body, ATTRIBUTES_OFFSET - 16, attrs)
                _MAX_TS.pack_into(body, _MAX_TS_OFFSET - 16, batch_max_ts)
                struct.pack_into(">I", body, CRC_OFFSET - 16, crc32c(memoryview(body)[ATTRIBUTES_OFFSET - 16 :]))
                rest: Buffer = body
            else:
                rest = mv[pos + 16 : pos + size]
            if keep_prefix:  # a follower's copy: offsets and leader epoch as the leader stamped them
                iov.append(mv[pos : pos + 16])
            else:
                iov.append(PREFIX.pack(base, size - 12, leader_epoch))
            iov.append(rest)
            notes.append((size, base + delta, batch_max_ts))
            records += count
            max_ts = max(max_ts, batch_max_ts)
            next_offset = base + delta + 1
        active.append(iov, notes, total, defer=defer)
        self._unflushed_messages += records
        if self._unflushed_messages >= config.flush_messages:
            self.flush()
        return AppendResult(first, next_offset - 1, records, len(batches), max_ts, now if log_append else -1)

    def takes_run(self, total: int, batches: int) -> bool:
        """Whether a run of `batches` batches, `total` bytes, goes into the active segment with no roll due
        before any of them: not into an empty segment (its first batch sets the segment's age), nor past
        segment.bytes, segment.ms or the index sizes. Else its requests go one by one, rolling as `append` does."""
        seg = self.segments[self.bases[-1]]
        config = self.config
        if not seg.size or seg.size + total > config.segment_bytes:
            return False
        if int(self.clock() * 1000) - seg.rolling_base_ms > config.segment_ms - self._roll_jitter_ms:
            return False
        max_bytes = config.index_max_bytes  # each batch adds one index entry at most
        return batches < min(max_bytes // 8 - len(seg.index.keys), max_bytes // 12 - 1 - len(seg.time_index.keys))

    def append_run(self, run: StitchableRun, total: int, records: int, *, leader_epoch: int = -1) -> int:
        """Append, deferred, a run of `records` records in batches of `total` bytes that `run` stitches with
        their offsets (the broker's path for pipelined one-batch requests), once `takes_run` said it fits;
        returns the first offset."""
        active = self.segments[self.bases[-1]]
        first = active.next_offset
        active.append_run(run, first, leader_epoch)
        self._unflushed_messages += records
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()
        return first

    def write_deferred(self) -> None:
        """Write the deferred appends (only the active segment has any: a roll flushes the old one)."""
        self.segments[self.bases[-1]].write_deferred()

    def batch_headers_from(self, offset: int, tail_bytes: int | None = None) -> list[BatchHeader]:
        """The v2 batch headers from the batch holding `offset` to the log end, as the files hold them (read
        through the one segment parser): what a failed append left behind it. With `tail_bytes`, no more
        than about that much of each segment's end is read (from the first indexed batch within it)."""
        headers: list[BatchHeader] = []
        if offset >= self.log_end_offset:
            return headers
        for base in self.bases[max(bisect.bisect_right(self.bases, offset) - 1, 0) :]:
            seg = self.segments[base]
            seg.write_deferred()
            head = seg.find(offset) if offset > base else None
            if head is None and offset > base:
                continue  # every batch of it lies before `offset`
            start = head.position if head is not None else 0
            if tail_bytes is not None and seg.size - start > tail_bytes:
                positions = seg.index.values
                i = bisect.bisect_left(positions, seg.size - tail_bytes)
                start = max(start, positions[i]) if i < len(positions) else start
            size = min(seg.size, os.fstat(seg.fd).st_size)
            if size > start:
                with mmap.mmap(seg.fd, size, access=mmap.ACCESS_READ) as buf:
                    headers += _v2_headers(buf, start)
        return headers

    def validate(self, data: Buffer, *, client: bool = True) -> list[tuple[int, int, int, int, int]]:
        """`validate_batches` under this log's `max.message.bytes`: the check `append` makes first. A client's
        records to a compacted log must have keys (Kafka's LogValidator: the cleaner could keep no other)."""
        batches = validate_batches(data, self.config.max_message_bytes, client=client)
        if client and self.config.compact:
            why = f"Compacted topic cannot accept message without key in topic partition {self.topic}-{self.partition}."
            keyless: list[tuple[int, str]] = []
            for pos, *_ in batches:
                h = BatchHeader._make(struct.unpack_from(">qiibIhiqqqhii", data, pos))
                if not h.attributes & CONTROL_BIT:
                    keyless += [(i, why) for i, r in enumerate(iter_records(data, pos, h)) if r.key is None]
            if keyless:  # (each one named, as Kafka's LogValidator: the client fails those and retries the rest)
                raise InvalidRecordError(f"One or more records have been rejected due to {len(keyless)} record "
                                         f"errors in total: {why}", keyless)  # fmt: skip
        return batches

    def _maybe_roll(self, incoming: int, now_ms: int, first_offset: int, last_offset: int) -> None:
        """Roll before an append of `incoming` bytes, offsets `first_offset`..`last_offset`, when Kafka would."""
        seg = self.active
        if not seg.size:
            return
        # past the relative offsets an index entry can hold (int32), as Kafka's canConvertToRelativeOffset
        full = seg.size + incoming > self.config.segment_bytes or last_offset - seg.base_offset > _MAX_RELATIVE
        # Kafka's isFull: no room for another offset entry, or for another time entry besides the one
        # reserved for the roll
        max_bytes = self.config.index_max_bytes
        index_full = len(seg.index.keys) >= max_bytes // 8 or len(seg.time_index.keys) >= max_bytes // 12 - 1
        aged = now_ms - seg.rolling_base_ms > self.config.segment_ms - self._roll_jitter_ms
        if full or index_full or aged:
            self.roll(first_offset)

    def roll(self, base: int | None = None) -> LogSegment:
        """Start a new active segment at `base` (a follower's next batch may start past the log end), by
        default at the log end offset."""
        old = self.active
        if not old.size:
            return old
        old.time_index.maybe_append(old.max_timestamp, old.next_offset - 1)
        old.flush()
        seg = self._open_segment(old.next_offset if base is None else max(base, old.next_offset))
        if self.on_roll is not None:
            self.on_roll(self)
        return seg

    # -- flush ---------------------------------------------------------------------------------

    def flush(self, *, sync: bool = True) -> None:
        """fsync every segment holding data past the recovery point, then move the recovery point.
        `sync=False` (a clean shutdown's, before one `syncfs` of the whole log dir): only write out what is
        held in memory, without fsync, and leave the recovery point; `flushed()` once the dir is durable."""
        for seg in self.unflushed_segments():
            seg.flush(sync=sync)
        if sync:
            self.flushed()

    def unflushed_segments(self) -> list[LogSegment]:
        """The segments holding data past the recovery point."""
        i = max(bisect.bisect_right(self.bases, self.recovery_point) - 1, 0)
        return [self.segments[base] for base in self.bases[i:]]

    def flushed(self) -> None:
        """Everything written is durable (`flush`, or a durability point of the whole dir): move the recovery
        point to the log end."""
        self.recovery_point = self.log_end_offset
        self._unflushed_messages = 0
        self._last_flush_ms = self._now_ms()

    def maybe_flush(self, now_ms: int | None = None) -> bool:
        """Flush unflushed data when the last flush is `flush.ms` old (Kafka's rule); returns whether it flushed."""
        now_ms = self._now_ms() if now_ms is None else now_ms
        if self.recovery_point < self.log_end_offset and now_ms - self._last_flush_ms >= self.config.flush_ms:
            self.flush()
            return True
        return False

    # -- read ----------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None) -> FetchSlice | None:
        """Batches from the one holding `offset`, at most `max_bytes` (but always one whole batch).

        `max_offset` (exclusive, e.g. the high watermark) stops the slice at the batch that reaches it.
        Returns None when nothing is there to read yet; raises OffsetOutOfRangeError outside the log.
        """
        leo = self.log_end_offset
        if offset < self.log_start_offset or offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside {self.topic}-{self.partition} [{self.log_start_offset}, {leo}]"
            )
        limit = leo if max_offset is None else min(max_offset, leo)
        if offset >= limit:
            return None
        i = bisect.bisect_right(self.bases, offset) - 1
        for base in self.bases[max(i, 0) :]:
            seg = self.segments[base]
            head = seg.find(offset)
            if head is None:
                continue  # the offset fell in a gap at the segment's end
            if head.base_offset >= limit:
                return None
            end = seg.size
            if limit < seg.next_offset:
                stop = seg.find(limit)  # the batch holding `limit` is not served (HWs sit on batch boundaries)
                end = stop.position if stop is not None else end
            if end <= head.position:
                return None  # `limit` falls inside the batch holding `offset`: none of it may be served
            length = min(end - head.position, max(max_bytes, head.size))
            return FetchSlice(seg.fd, head.position, length, head.base_offset)
        return None

    def read_records(self, offset: int, max_bytes: int = 1 << 20):
        """Decoded records from `offset` (for tools and tests; the broker sends slices instead)."""
        sl = self.read(offset, max_bytes)
        if sl is None:
            return []
        data = sl.read()
        out = []
        for item in scan(data, verify_crc=False):
            if isinstance(item, Damage):
                break
            out.extend(r for r in _records_of(data, item) if r.offset >= offset)
        return out

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record stamped >= `timestamp`, or None if there is none."""
        start = self.log_start_offset
        for base in self.bases:
            seg = self.segments[base]
            if seg.max_timestamp < timestamp or seg.next_offset <= start:
                continue
            head = seg.find_timestamp(timestamp)
            if head is None:
                continue
            # the records of a batch before the log start do not count: go on to the next batches
            for h in seg.heads(head.position):
                if h.max_timestamp < timestamp or h.last_offset < start:
                    continue
                data = seg.read(h.position, h.size)
                item = next(scan(data, verify_crc=False), None)
                for r in _records_of(data, item) if isinstance(item, ScannedBatch) else ():
                    if r.timestamp >= timestamp and r.offset >= start:
                        return r.offset, r.timestamp
        return None

    def add_aborted(self, entry: AbortedTxn) -> None:
        """Note an aborted transaction in the `.txnindex` of the segment holding its marker (once)."""
        self.txn_index.add(self.txn_index.segment_for(self.bases, entry.last_offset), entry)

    # -- retention and truncation ---------------------------------------------------------------

    def delete_retained(self, now_ms: int | None = None) -> list[int]:
        """Delete whole segments past `retention.ms` or beyond `retention.bytes` (when cleanup.policy holds
        `delete`); returns their bases."""
        now_ms = self._now_ms() if now_ms is None else now_ms
        deleted: list[int] = []
        cfg = self.config
        if not cfg.delete:  # cleanup.policy=compact: only the log cleaner removes records
            return deleted
        if cfg.retention_ms >= 0:
            for base in list(self.bases):
                seg = self.segments[base]
                if not seg.size:
                    if base == self.bases[-1]:
                        break
                    deleted.append(self._delete_segment(base))  # an empty segment (left by salvage) holds nothing
                    continue
                if now_ms - seg.max_timestamp <= cfg.retention_ms:
                    break
                if base == self.bases[-1]:
                    self.roll()
                deleted.append(self._delete_segment(base))
        if cfg.retention_bytes >= 0:
            excess = self.size_bytes - cfg.retention_bytes
            for base in list(self.bases[:-1]):
                seg = self.segments[base]
                if excess - seg.size < 0:
                    break
                excess -= seg.size
                deleted.append(self._delete_segment(base))
        if deleted:
            self.log_start_offset = max(self.log_start_offset, self.bases[0])
        return deleted

    def advance_log_start(self, offset: int) -> list[int]:
        """Move the log start offset up to `offset` (DeleteRecords on a leader, or a follower taking its leader's
        start), never past the log end nor back: readers see nothing below it. Whole segments below it are
        deleted, the one holding it is kept (its earlier records stay on disk, unread); returns the deleted
        segments' bases. The caller checkpoints the new start (`log-start-offset-checkpoint`)."""
        offset = min(offset, self.log_end_offset)
        if offset <= self.log_start_offset:
            return []
        self.log_start_offset = offset
        deleted: list[int] = []
        while len(self.bases) > 1 and self.bases[1] <= offset:  # the next segment starts at or below it
            deleted.append(self._delete_segment(self.bases[0]))
        return deleted

    def _delete_segment(self, base: int) -> int:
        self.segments.pop(base).delete()
        self.txn_index.drop_segment(base)
        self.bases.remove(base)
        return base

    def truncate_to(self, offset: int) -> None:
        """Remove every batch from the one holding `offset` on (a follower's truncation to its HW)."""
        if offset >= self.log_end_offset:
            return
        for base in [b for b in self.bases if b >= offset and b != self.bases[0]]:
            self._delete_segment(base)
        seg = self.active
        head = seg.find(offset)
        if head is not None:
            seg.truncate_to_position(head.position)
        self.txn_index.truncate(self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        if self.on_truncate is not None:
            self.on_truncate(self)

    def reset_to(self, offset: int) -> None:
        """Remove every segment and start empty at `offset` (a follower whose leader's log starts past ours)."""
        for base in list(self.bases):
            self._delete_segment(base)
        self._open_segment(offset)
        self.log_start_offset = self.recovery_point = offset
        if self.on_truncate is not None:
            self.on_truncate(self)

    def close(self) -> None:
        for seg in self.segments.values():
            seg.close()


def _records_of(data: Buffer, item: ScannedBatch) -> list[Record]:
    """The records of a scanned batch of any magic (a legacy wrapper's inner messages, with their offsets)."""
    if item.header is not None:
        return list(iter_records(data, item.position, item.header))
    assert item.legacy is not None
    return [Record(m.offset, m.timestamp, m.key, m.value) for m in inner_messages(item.legacy)]


def _base_offset(mv: memoryview, pos: int) -> int:
    return struct.unpack_from(">q", mv, pos)[0]


def _v2_headers(buf: Buffer | mmap.mmap, start: int) -> list[BatchHeader]:
    """The headers of the v2 batches of a segment's bytes from `start` (no views into `buf` outlive the call)."""
    items = scan(buf, start, verify_crc=False)
    return [item.header for item in items if isinstance(item, ScannedBatch) and item.header]
