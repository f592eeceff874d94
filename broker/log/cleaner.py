"""The log cleaner: compaction of `cleanup.policy=compact` logs, as Kafka's LogCleaner.

A compacted log keeps, for each key, at least its latest record. The cleaner checkpoint of a log is its
*first dirty offset*: below it the log was cleaned, from it on it is dirty. A clean of one log:

1. Picks the log. Its cleanable section runs from the first dirty offset to the first *uncleanable* offset:
   the active segment's base, or the base of the first segment holding a record younger than
   `min.compaction.lag.ms`, whichever is lower. Dirty ratio = cleanable bytes / (clean + cleanable bytes)
   (whole segments, as Kafka counts them). The log with the highest ratio over `min.cleanable.dirty.ratio`
   goes first; a log whose oldest dirty record is past `max.compaction.lag.ms` is cleaned whatever its ratio.
2. Builds the offset map (`broker.log.offset_map`: key hash → last offset) over the cleanable section. The
   map is bounded (`log.cleaner.dedupe.buffer.size`): where it is full the clean stops at that batch, and
   the rest is left dirty for the next clean.
3. Rewrites the segments below that point, in groups of consecutive segments whose sum fits in
   `segment.bytes` (small cleaned segments are merged), each group into one segment named by its first base
   offset. A record is kept when no later record of its key is in the map; a tombstone (a null value) is
   kept while its segment's modification time is past the delete horizon, the modification time of the last
   cleaned segment less `delete.retention.ms`, as in Kafka 2.8 (a record's own timestamp would let a producer
   back-date a tombstone, or stamp it -1, and have it dropped at once; a cleaned segment is given its group's
   last modification time: as in Kafka 2.8, a tombstone merged into the last cleaned segment stays until a
   later cleaned segment is `delete.retention.ms` newer, KAFKA-8522), and always when it lies at or past where
   the map stopped (its key is not in the map: the value it deleted may still be below); a record without a
   key is dropped (Kafka's cleaner counts it invalid). Offsets are preserved, leaving gaps: a batch keeps its base
   offset, last offset delta, producer id, epoch and base sequence (Kafka's buildRetainedRecordsInto: the
   producer's last sequence stays), is re-built with its kept records (CRC recomputed; a compressed batch
   recompressed with its codec) and copied byte for byte when it keeps them all; each producer's last batch
   in the cleaned range stays even with no record left, as an empty batch of 61 bytes, while the partition's
   producer state holds that producer (Kafka's lastRecordsOfActiveProducers; every producer's when the
   state is unknown). Transactional and control batches (attributes bits
   4 and 5) are copied whole and never go into the map, so an aborted transaction's record never hides a
   committed value; a segment's `.txnindex` is carried over unchanged (removing aborted data and old markers
   is not done). Legacy (magic 0/1) batches are copied whole. Kafka instead maps committed transactional
   records and removes aborted ones; kafkactl does not yet. So that a value in such an unmapped batch never
   comes back, the keys of those batches are noted as the rewrite passes them (`OffsetMap.unmapped`, in the
   map's slots) and a later tombstone of one of those keys is never dropped (past the slots, none is).
4. Swaps the cleaned segment in, crash-safely, Kafka's way. The group is written as
   `<base>.log.cleaned` (and `.index.cleaned`, `.timeindex.cleaned`, `.txnindex.cleaned`), fsynced, then,
   under the partition's lock (`run_locked`: the broker's event loop), renamed to `.swap` — the indexes
   first, the `.log` last: the `.log.swap` is the commit point — the old segments after the first renamed
   to `.deleted`, and the `.swap` files renamed over the first old segment's files. Start-up
   (`recover_swaps`) finishes a swap whose `.log.swap` exists (the old segments it covers are removed),
   rolls back one without it (`.cleaned` files and orphan index `.swap`s are removed, the old segments
   stay) and removes `.deleted` files; a `.log.swap` that does not scan whole is moved to quarantine
   (`.quarantined`) and the `.deleted` segments it would have replaced are renamed back.

Both passes check every batch's CRC: damage stops the clean (a re-built batch would get a good CRC, a bad
batch's keys could drop good records) and leaves the log uncleanable until the broker restarts.

The old segments' descriptors stay open `log.segment.delete.delay.ms` after a swap (a fetch may still be
sending from them), then close. Appends never wait for the cleaner: it reads only non-active segments through its
own descriptors, and the swap checks that the segments it replaces are still the log's, unchanged
(retention, DeleteRecords or a follower's truncation may have removed them meanwhile: the clean is then
dropped). Leader and followers each clean their own copy.

The cleaner's progress is `cleaner-offset-checkpoint` in each log dir, in Kafka's checkpoint format
(`broker.log.checkpoint`): topic, partition, first dirty offset. A removed log's line goes from it (a topic
re-created under the same name starts dirty), and a truncation below a log's checkpoint lowers it to the
new log end (what is appended there again is dirty). The cleaner thread reads a log's high watermark as
stored (it never recomputes replication state off the event loop), and an abort (a removal, a truncation)
reaches a clean within a read chunk or a 50 ms throttle slice.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import logging
import operator
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import compress, repeat
from pathlib import Path

from broker.errors import CorruptRecordError
from broker.log.checkpoint import CheckpointError, OffsetCheckpointFile, TopicPartition, fsync_dir, read_or_set_aside
from broker.log.index import OffsetIndex, TimeIndex
from broker.log.log import PartitionLog
from broker.log.offset_map import OffsetMap, key_hash, key_hashes
from broker.log.recovery import QUARANTINE_SUFFIX
from broker.log.scanner import Damage, ScannedBatch, read_batch, scan
from broker.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, LogSegment, parse_segment_name, segment_name
from broker.records.batch import (
    BATCH_HEADER_SIZE,
    CODEC_MASK,
    CONTROL_BIT,
    CRC_OFFSET,
    HEADER,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    build_batch,
    compute_crc,
    decode_records,
)
from broker.records.legacy import inner_messages

log = logging.getLogger(__name__)

CHECKPOINT = "cleaner-offset-checkpoint"
CLEANED = ".cleaned"
SWAP = ".swap"
DELETED = ".deleted"
TXNINDEX_SUFFIX = ".txnindex"
#: the files of a segment, the `.log` last (the order a swap renames them in: the `.log` commits it)
SUFFIXES = (INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX, LOG_SUFFIX)
_SKIP = TRANSACTIONAL_BIT | CONTROL_BIT
_MAX_RELATIVE = 2**31 - 1
_LAST_DELTA = struct.Struct(">i")
_LAST_DELTA_AT = 23  # lastOffsetDelta in a batch header
_CRC = struct.Struct(">I")
_WRITE_BYTES = 1 << 20  # what the rewrite holds before it writes (Kafka's log.cleaner.io.buffer.size is 512 KB)
_READ_BYTES = 4 << 20  # what the cleaner reads of a segment at once (more for a batch larger than that)
_FRAME_LENGTH = struct.Struct(">i")
_KEY = operator.itemgetter(2)
_VALUE = operator.itemgetter(3)
_OFFSET = operator.itemgetter(0)


class CleanAborted(Exception):
    """A clean given up: the log changed under it (segments removed or cut), or it was told to stop."""


class CleanDamage(CleanAborted):
    """A clean given up on damage in a segment (a framing break, a CRC mismatch): the log is left uncleaned
    until the broker restarts (Kafka's uncleanable partitions); `kafkactl recover` mends it."""


@dataclass
class CleanStats:
    """What one clean did, for the broker log and `kafkactl inspect`."""

    topic: str = ""
    partition: int = 0
    first_dirty: int = 0
    end_offset: int = 0  # the new first dirty offset
    dirty_ratio: float = 0.0
    bytes_read: int = 0
    bytes_written: int = 0
    messages_read: int = 0
    messages_written: int = 0
    map_bytes_read: int = 0
    map_messages: int = 0
    map_keys: int = 0
    segments_in: int = 0
    segments_out: int = 0
    started: float = 0.0
    map_done: float = 0.0
    finished: float = 0.0

    @property
    def elapsed(self) -> float:
        return max(self.finished - self.started, 1e-9)

    def summary(self, thread: int = 0) -> str:
        """Kafka's LogCleaner report of a clean, on one line (the broker log is one line a record)."""
        mb = 1024 * 1024
        read = self.bytes_read + self.map_bytes_read
        size_cut = 100 * (1 - self.bytes_written / self.bytes_read) if self.bytes_read else 0.0
        msg_cut = 100 * (1 - self.messages_written / self.messages_read) if self.messages_read else 0.0
        map_s = max(self.map_done - self.started, 1e-9)
        clean_s = max(self.finished - self.map_done, 1e-9)
        read_mb, map_mb, clean_mb, out_mb = (
            read / mb,
            self.map_bytes_read / mb,
            self.bytes_read / mb,
            self.bytes_written / mb,
        )
        return "; ".join((
            f"Log cleaner thread {thread} cleaned log {self.topic}-{self.partition} (dirty section = "
            f"[{self.first_dirty}, {self.end_offset}], dirty ratio {self.dirty_ratio:.3f})",
            f"{read_mb:.1f} MB of log processed in {self.elapsed:.1f} seconds ({read_mb / self.elapsed:.1f} MB/sec)",
            f"Indexed {map_mb:.1f} MB in {map_s:.1f} seconds ({map_mb / map_s:.1f} MB/sec, {self.map_keys} keys "
            "in the offset map)",
            f"Cleaned {clean_mb:.1f} MB in {clean_s:.1f} seconds ({clean_mb / clean_s:.1f} MB/sec)",
            f"Start size: {clean_mb:.1f} MB ({self.messages_read} messages, {self.segments_in} segments)",
            f"End size: {out_mb:.1f} MB ({self.messages_written} messages, {self.segments_out} segments)",
            f"{size_cut:.1f}% size reduction ({msg_cut:.1f}% fewer messages)",
        ))  # fmt: skip


@dataclass
class Cleanable:
    """Where a log's dirty section lies and how dirty it is (Kafka's LogToClean)."""

    first_dirty: int
    uncleanable: int  # the first offset the cleaner may not touch
    clean_bytes: int
    cleanable_bytes: int
    must_clean: bool  # max.compaction.lag.ms passed for its oldest dirty record

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


def cleanable(plog: PartitionLog, checkpoint: int | None, now_ms: int, stable_end: int | None = None) -> Cleanable:
    """The cleanable section of `plog` given its checkpointed first dirty offset (None: none yet). With
    `stable_end` (the high watermark), no segment holding it or anything above is cleaned or mapped, as
    Kafka's cleaner stops below it: a record a new leader may truncate away must not replace an older one."""
    bases = list(plog.bases)
    segments = dict(plog.segments)
    start = plog.log_start_offset
    first_dirty = checkpoint if checkpoint is not None and start <= checkpoint <= plog.log_end_offset else start
    cfg = plog.config
    uncleanable = bases[-1]  # the active segment
    if stable_end is not None:
        uncleanable = min(uncleanable, bases[max(bisect.bisect_right(bases, stable_end) - 1, 0)])
    lag = cfg.min_compaction_lag_ms
    i = max(bisect.bisect_right(bases, first_dirty) - 1, 0)
    must = False
    for base in bases[i:-1]:
        seg = segments[base]
        if lag > 0 and seg.max_timestamp > now_ms - lag:
            uncleanable = base
            break
        if seg.size and 0 <= seg.first_timestamp < now_ms - cfg.max_compaction_lag_ms:
            must = True
    uncleanable = max(uncleanable, first_dirty)
    clean = sum(segments[b].size for b in bases[:i])
    dirty = sum(segments[b].size for b in bases[i:] if b < uncleanable)
    return Cleanable(first_dirty, uncleanable, clean, dirty, must and dirty > 0)


class Throttler:
    """Kafka's cleaner throttler: sleeps so that the cleaner's I/O stays under `bytes_per_second`."""

    def __init__(self, bytes_per_second: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = bytes_per_second
        self.clock = clock
        self.start = clock()
        self.done = 0

    #: the longest sleep between two looks at `stop` (an abort waits no longer than about this)
    SLICE_S = 0.05

    def tick(self, n: int, stop: Callable[[], bool] | None = None) -> None:
        """Account for `n` bytes and sleep as long as the cleaner is ahead of its rate, in slices of at most
        `SLICE_S` that check `stop` (raising CleanAborted when it says so)."""
        if self.rate >= 1e18:
            return
        self.done += n
        ahead = self.done / self.rate - (self.clock() - self.start)
        if ahead > 0.01:
            until = time.monotonic() + ahead
            while (left := until - time.monotonic()) > 0:
                if stop is not None and stop():
                    raise CleanAborted("stopped")
                time.sleep(min(left, self.SLICE_S))
        if self.clock() - self.start > 1.0:  # a new window, so that a pause is not made up for by a burst
            self.start, self.done = self.clock(), 0


def _batches(path: Path, size: int, on_read: Callable[[int], None] | None = None, *, verify: bool = False
             ) -> Iterator[tuple[bytes, ScannedBatch | Damage]]:  # fmt: skip
    """(chunk, batch) for each batch of the first `size` bytes of a segment file, read in chunks of about
    `_READ_BYTES` through the cleaner's own descriptor: memory stays bounded whatever segment.bytes is, a
    segment deleted meanwhile cannot turn into another file under a reused descriptor number, and a file cut
    under the cleaner (a follower's truncation) is a short read, not the SIGBUS a mapping would get. A
    `Damage` ends it; `on_read(n)` hears of each read (stats, the throttle)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise CleanAborted(f"{path.name} is gone") from None
    try:
        pos, want = 0, _READ_BYTES
        while pos < size:
            n = min(want, size - pos)
            data = os.pread(fd, n, pos)
            if len(data) < n:
                raise CleanAborted(f"{path.name} was cut under the cleaner")
            p, want = 0, _READ_BYTES
            while p < n:
                item = read_batch(data, p, n, verify_crc=verify)
                if isinstance(item, Damage):
                    if pos + n < size:  # the chunk ends before the file does: the batch may run past it
                        fits = p + LOG_OVERHEAD <= n
                        need = _FRAME_LENGTH.unpack_from(data, p + 8)[0] + LOG_OVERHEAD if fits else n + 1
                        if p > 0 or need > n:
                            want = max(_READ_BYTES, need)
                            break
                    yield data, Damage(pos + item.position, item.reason)
                    return
                if not item.crc_ok:
                    yield data, Damage(pos + p, f"CRC mismatch in the batch at offset {item.base_offset}")
                    return
                yield data, item
                p = item.end
            pos += p
            if on_read is not None and p:
                on_read(p)
            if p == 0 and want == _READ_BYTES:
                return
    finally:
        os.close(fd)


def build_offset_map(plog: PartitionLog, start: int, end: int, offset_map: OffsetMap, stats: CleanStats,
                     stop: Callable[[], bool] = lambda: False, throttler: Throttler | None = None) -> int:  # fmt: skip
    """Put the keys of the records in [`start`, `end`) in `offset_map`; returns where it stopped: `end`, or
    the base offset of the first batch that did not fit."""
    bases = [b for b in plog.bases if b < end]
    segments = dict(plog.segments)
    i = max(bisect.bisect_right(bases, start) - 1, 0)
    for base in bases[i:]:

        def note(n: int) -> None:
            stats.map_bytes_read += n
            if stop():
                raise CleanAborted("stopped")
            if throttler:
                throttler.tick(n, stop)
            if stop():  # (a chunk at a time: a removal waiting for this clean waits no longer)
                raise CleanAborted("stopped")

        seg = segments[base]
        for data, item in _batches(seg.log_path, seg.size, note, verify=True):
            if isinstance(item, Damage):  # (its keys would drop good records: nothing of it is cleaned)
                raise CleanDamage(f"{seg.log_path.name}: {item.reason} at byte {item.position}")
            if item.last_offset < start:
                continue
            if item.base_offset >= end:
                return end
            h = item.header
            if h is None or h.attributes & _SKIP:
                continue  # legacy, transactional and control batches go in no map
            records = decode_records(data, item.position, h)
            if start > h.base_offset:
                records = [r for r in records if r.offset >= start]
            keys = list(map(_KEY, records))
            if None in keys:  # (records without a key: never mapped, a clean drops them)
                records = [r for r in records if r.key is not None]
                keys = list(map(_KEY, records))
            if not offset_map.room_for(len(keys)):
                return h.base_offset
            offset_map.put_hashes(list(key_hashes(keys)), list(map(_OFFSET, records)))
            stats.map_messages += len(records)
        if stop():
            raise CleanAborted("stopped")
    return end


def group_segments(segments: list[LogSegment], max_bytes: int) -> list[list[LogSegment]]:
    """Consecutive segments grouped so that each group fits one segment: at most `max_bytes` (segment.bytes)
    and offsets within an int32 of its base (Kafka's groupSegmentsBySize)."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size = segments[i].size
        i += 1
        while i < len(segments):
            nxt = segments[i]
            if size + nxt.size > max_bytes or nxt.next_offset - 1 - group[0].base_offset > _MAX_RELATIVE:
                break
            group.append(nxt)
            size += nxt.size
            i += 1
        groups.append(group)
    return groups


@dataclass
class CleanedSegment:
    """A group's cleaned segment, written as `.cleaned` files, not yet swapped in."""

    base: int
    group: list[LogSegment]
    sizes: list[int]
    paths: dict[str, Path] = field(default_factory=dict)  # suffix → its `.cleaned` file


def _cleaned_path(directory: Path, base: int, suffix: str, state: str = CLEANED) -> Path:
    return directory / (segment_name(base, suffix) + state)


def clean_group(plog: PartitionLog, group: list[LogSegment], offset_map: OffsetMap, delete_horizon_ms: int,
                stats: CleanStats, stop: Callable[[], bool] = lambda: False, throttler: Throttler | None = None,
                producers_last: set[int] | frozenset[int] = frozenset(), map_end: int | None = None,
                ) -> CleanedSegment:  # fmt: skip
    """Write the cleaned copy of `group` as `.cleaned` files (fsynced), its `.log` given the modification time
    of the group's last segment (Kafka's: the delete horizon is judged by it). A tombstone stays while its
    segment was modified after `delete_horizon_ms`, and always at or past `map_end` (where the map stopped:
    the keys there are not in it, so the value a tombstone deleted may still be below)."""
    if map_end is None:
        map_end = group[-1].next_offset
    base = group[0].base_offset
    d = plog.dir
    out = CleanedSegment(base, group, [s.size for s in group])
    log_path = _cleaned_path(d, base, LOG_SUFFIX)
    index = OffsetIndex(_cleaned_path(d, base, INDEX_SUFFIX), base)
    time_index = TimeIndex(_cleaned_path(d, base, TIMEINDEX_SUFFIX), base)
    for p in (log_path, index.path, time_index.path):
        p.unlink(missing_ok=True)
    out.paths = {LOG_SUFFIX: log_path, INDEX_SUFFIX: index.path, TIMEINDEX_SUFFIX: time_index.path}
    interval = plog.config.index_interval_bytes
    position, since_index, max_ts, last_offset = 0, 0, -1, base - 1
    get = offset_map.raw_get  # the dict's own get (C): key hash, default -> offset

    def note(n: int) -> None:
        stats.bytes_read += n
        if stop():
            raise CleanAborted("stopped")
        if throttler:
            throttler.tick(n, stop)
        if stop():
            raise CleanAborted("stopped")

    try:
        with open(log_path, "wb") as f:
            for seg in group:
                pieces: list[bytes | memoryview] = []
                pending = 0
                seg_retains = _mtime_ns(seg) // 1_000_000 > delete_horizon_ms
                for data, item in _batches(seg.log_path, seg.size, note, verify=True):
                    if isinstance(item, Damage):  # (a batch re-built would get a good CRC: damage would pass)
                        raise CleanDamage(f"{seg.log_path.name}: {item.reason} at byte {item.position}")
                    h = item.header
                    kept: bytes | memoryview | None
                    count = item.record_count
                    stats.messages_read += count
                    rebuilt = False
                    if h is None or h.attributes & _SKIP:
                        kept, kept_count = memoryview(data)[item.position : item.end], count
                        _note_unmapped(offset_map, data, item)
                    else:
                        retain_deletes = seg_retains or offset_map.unmapped_overflow or h.base_offset >= map_end
                        unmapped = offset_map.unmapped
                        records = decode_records(data, item.position, h)
                        keys = list(map(_KEY, records))
                        if None in keys:  # (records without a key go: a slow path, Kafka refuses them now)
                            keep = [r for r in records if r.key is not None and get(key_hash(r.key), -1) <= r.offset
                                    and (retain_deletes or r.value is not None
                                         or key_hash(r.key) in unmapped)]  # fmt: skip
                        else:  # per batch, in C: a record stays when no later offset of its key is in the map
                            latest = map(get, key_hashes(keys), repeat(-1))
                            mask = list(map(operator.le, latest, map(_OFFSET, records)))
                            deletes = not retain_deletes and None in map(_VALUE, records)
                            if not deletes and all(mask):
                                keep = records
                            else:
                                keep = list(compress(records, mask)) if any(mask) else []
                                if deletes:  # (a tombstone of an unmapped batch's key stays: see OffsetMap)
                                    keep = [r for r in keep if r.value is not None or key_hash(r.key) in unmapped]
                        if keep is records:
                            kept, kept_count = memoryview(data)[item.position : item.end], count
                        else:
                            kept_count, rebuilt = len(keep), True
                            keep_empty = not keep and h.base_offset in producers_last
                            kept = _rebuild(h, keep) if keep or keep_empty else None
                    if kept is None:
                        continue
                    size = len(kept)
                    stats.messages_written += kept_count
                    if rebuilt:
                        fields = HEADER.unpack_from(kept, 0)
                        h_last, h_max = fields[0] + fields[6], fields[8]
                    else:
                        h_last, h_max = item.last_offset, item.max_timestamp
                    # the segment's index rule (`LogSegment._note_batch`)
                    max_ts = max(max_ts, h_max)
                    if since_index > interval:
                        index.append(h_last, position)
                        time_index.maybe_append(max_ts, h_last)
                        since_index = 0
                    since_index += size
                    position += size
                    last_offset = h_last
                    pieces.append(kept)
                    pending += size
                    if pending >= _WRITE_BYTES:
                        f.write(b"".join(pieces))
                        pieces, pending = [], 0
                f.write(b"".join(pieces))
                if stop():
                    raise CleanAborted("stopped")
            f.flush()
            os.fsync(f.fileno())
        mtime = _mtime_ns(group[-1])
        os.utime(log_path, ns=(mtime, mtime))
        if position:
            time_index.maybe_append(max_ts, last_offset)
        for idx in (index, time_index):
            idx.path.touch()
            idx.flush()
        stats.bytes_written += position
        txn = [s for s in group if (s.dir / segment_name(s.base_offset, TXNINDEX_SUFFIX)).exists()]
        if txn:  # aborted-transaction entries of the group, unchanged (offsets are preserved)
            tpath = _cleaned_path(d, base, TXNINDEX_SUFFIX)
            out.paths[TXNINDEX_SUFFIX] = tpath
            with open(tpath, "wb") as tf:  # (fsynced like the other cleaned files: the swap renames it in)
                tf.write(b"".join((s.dir / segment_name(s.base_offset, TXNINDEX_SUFFIX)).read_bytes()
                                  for s in group if s in txn))  # fmt: skip
                tf.flush()
                os.fsync(tf.fileno())
    except BaseException:
        for p in out.paths.values():
            p.unlink(missing_ok=True)
        raise
    return out


def _mtime_ns(seg: LogSegment) -> int:
    """A segment's modification time (what the delete horizon is judged by: producers cannot back-date it)."""
    try:
        return os.stat(seg.log_path).st_mtime_ns
    except FileNotFoundError:
        raise CleanAborted(f"{seg.log_path.name} is gone") from None


def _note_unmapped(offset_map: OffsetMap, data: bytes, item: ScannedBatch) -> None:
    """Note the keys of a batch copied whole and never mapped (transactional data, legacy) in
    `offset_map.unmapped`, so that a later tombstone of one of them stays (a control batch has none)."""
    h = item.header
    if h is not None:
        if not h.attributes & CONTROL_BIT:
            offset_map.note_unmapped(list(key_hashes(k for k in map(_KEY, decode_records(data, item.position, h))
                                                    if k is not None)))  # fmt: skip
    elif item.legacy is not None:  # (a compressed wrapper: its inner messages' keys)
        offset_map.note_unmapped(list(key_hashes(m.key for m in inner_messages(item.legacy) if m.key is not None)))


def _rebuild(h, records: list) -> bytes:
    """A batch of the kept `records` of the batch `h`: its base offset, last offset delta, producer fields,
    leader epoch and codec kept (Kafka's buildRetainedRecordsInto: the last offset stays, so the producer's last
    sequence does too), the CRC recomputed. With no record, an empty batch (its header alone, uncompressed):
    Kafka keeps one for a producer's last batch, whose sequence the broker must still know after a restart."""
    if records:
        ts_type = LOG_APPEND_TIME if h.attributes & TIMESTAMP_TYPE_BIT else 0
        batch = bytearray(build_batch(
            records, base_offset=h.base_offset, codec=h.codec, timestamp_type=ts_type, producer_id=h.producer_id,
            producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
            partition_leader_epoch=h.partition_leader_epoch,
        ))  # fmt: skip
    else:
        batch = bytearray(BATCH_HEADER_SIZE)
        HEADER.pack_into(
            batch, 0, h.base_offset, BATCH_HEADER_SIZE - LOG_OVERHEAD, h.partition_leader_epoch, 2, 0,
            h.attributes & ~CODEC_MASK, h.last_offset_delta, h.base_timestamp, h.max_timestamp, h.producer_id,
            h.producer_epoch, h.base_sequence, 0,
        )  # fmt: skip
    _LAST_DELTA.pack_into(batch, _LAST_DELTA_AT, h.last_offset_delta)
    _CRC.pack_into(batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))
    return bytes(batch)


def last_batches_of_producers(segments: list[LogSegment], active: set[int] | None = None) -> set[int]:
    """The base offsets of each producer id's last data batch in `segments` (a header-only pass): a clean keeps
    that batch, emptied if need be, so that the producer's last sequence survives the clean. With `active`
    (the producer ids the partition's producer state holds), only those producers' (Kafka's
    lastRecordsOfActiveProducers: an expired producer's sequence is not needed)."""
    last: dict[int, int] = {}
    for seg in segments:
        for _, item in _batches(seg.log_path, seg.size):
            if isinstance(item, Damage):
                break
            h = item.header
            if h is not None and h.producer_id >= 0 and not h.attributes & CONTROL_BIT:
                last[h.producer_id] = h.base_offset
    return {base for pid, base in last.items() if active is None or pid in active}


def active_producer_ids(states) -> set[int] | None:
    """The producer ids a partition's producer state (`broker.server.producers.ProducerStates`) holds, read
    from the cleaner's thread (a dict copy is atomic); None (keep every producer's last batch) when there is
    no state or it is unknown."""
    if states is None or getattr(states, "unknown", False):
        return None
    return set(states.entries.copy())


def swap_in(plog: PartitionLog, cleaned: CleanedSegment) -> list[LogSegment]:
    """Replace the group's segments by the cleaned one (the caller holds the partition's lock); returns the old
    segments, whose descriptors the caller closes later. Raises CleanAborted (the `.cleaned` files removed)
    when the group is no longer the log's as it was cleaned."""
    d = plog.dir
    group = cleaned.group
    active = plog.bases[-1]
    for seg, size in zip(group, cleaned.sizes, strict=True):
        if plog.segments.get(seg.base_offset) is not seg or seg.size != size or seg.base_offset == active:
            for p in cleaned.paths.values():
                p.unlink(missing_ok=True)
            raise CleanAborted(f"segment {seg.base_offset} of {d.name} changed during the clean")
    base = cleaned.base
    for suffix in SUFFIXES:  # .cleaned -> .swap, the .log last: from there on the swap completes at start-up
        if suffix in cleaned.paths:
            os.replace(cleaned.paths[suffix], _cleaned_path(d, base, suffix, SWAP))
    fsync_dir(d)
    for seg in group[1:]:
        for suffix in SUFFIXES:
            p = d / segment_name(seg.base_offset, suffix)
            if p.exists():
                os.replace(p, p.with_name(p.name + DELETED))
    if len(group) > 1:  # (durable before the old names are reused: a crash must not bring them back live)
        fsync_dir(d)
    jitter = plog._roll_jitter_ms
    first_txn = d / segment_name(base, TXNINDEX_SUFFIX)
    if TXNINDEX_SUFFIX not in cleaned.paths:
        first_txn.unlink(missing_ok=True)
    for suffix in SUFFIXES:
        swap = _cleaned_path(d, base, suffix, SWAP)
        if swap.exists():
            os.replace(swap, d / segment_name(base, suffix))
    fsync_dir(d)
    for seg in group:
        del plog.segments[seg.base_offset]
        plog.bases.remove(seg.base_offset)
    txn = getattr(plog, "txn_index", None)  # the aborted transactions in memory (broker/log/txn_index.py)
    if txn is not None:
        merged = [e for seg in group for e in txn.by_segment.pop(seg.base_offset, [])]
        if merged:
            txn.by_segment[base] = merged
    plog._open_segment(base)
    plog._roll_jitter_ms = jitter
    return group


def recover_swaps(directory: Path, clock: Callable[[], float] = time.time) -> list[str]:
    """Start-up: finish or roll back a swap the broker was stopped in; returns what it did (for the log)."""
    d = Path(directory)
    done: list[str] = []
    names = sorted(os.listdir(d))
    for name in names:
        if name.endswith(CLEANED):
            os.unlink(d / name)
            done.append(f"removed {name} (a clean that did not finish)")
    swaps = sorted(n for n in names if n.endswith(LOG_SUFFIX + SWAP))
    for name in swaps:
        base = parse_segment_name(name[: -len(SWAP)])
        assert base is not None
        path = d / name
        items = list(scan(path.read_bytes(), 0, verify_crc=True))
        bad = next((i for i in items if isinstance(i, Damage) or not i.crc_ok), None)
        if bad is not None:  # roll back: the old segments come back, the swap goes to quarantine
            for suffix in SUFFIXES:
                swap = _cleaned_path(d, base, suffix, SWAP)
                if swap.exists():
                    os.replace(swap, swap.with_name(f"{swap.name}.{int(clock() * 1000)}{QUARANTINE_SUFFIX}"))
            # only the old segments this swap covers come back: those `.deleted` above its base, below the next
            # live segment (an earlier group's swap completed: its `.deleted` segments stay deleted)
            live = [b for b in (parse_segment_name(n) for n in os.listdir(d)) if b is not None and b > base]
            upto = min(live, default=None)
            for deleted in sorted(n for n in os.listdir(d) if n.endswith(DELETED)):
                b = parse_segment_name(deleted[: -len(DELETED)].rsplit(".", 1)[0] + LOG_SUFFIX)
                if b is not None and base < b and (upto is None or b < upto):
                    os.replace(d / deleted, d / deleted[: -len(DELETED)])
            done.append(f"{name} does not scan whole: quarantined, the swap rolled back")
            continue
        next_offset = max((i.last_offset + 1 for i in items), default=base)
        for other in list(os.listdir(d)):
            b = parse_segment_name(other)
            if b is not None and base < b < next_offset:
                for suffix in SUFFIXES:
                    (d / segment_name(b, suffix)).unlink(missing_ok=True)
        for suffix in SUFFIXES:
            swap = _cleaned_path(d, base, suffix, SWAP)
            if swap.exists():
                os.replace(swap, d / segment_name(base, suffix))
        done.append(f"completed the swap of cleaned segment {base} (offsets up to {next_offset - 1})")
    for name in sorted(os.listdir(d)):
        if name.endswith(SWAP):  # an index .swap whose .log never reached .swap: the swap had not begun
            os.unlink(d / name)
            done.append(f"removed {name} (a swap that had not begun)")
        elif name.endswith(DELETED):
            os.unlink(d / name)
    if done:
        fsync_dir(d)
    return done


def clean_log(plog: PartitionLog, first_dirty: Cleanable, offset_map: OffsetMap, *, now_ms: int,
              run_locked: Callable[[Callable[[], object]], object] = lambda fn: fn(),
              stop: Callable[[], bool] = lambda: False, throttler: Throttler | None = None,
              retire: Callable[[list[LogSegment]], None] | None = None,
              active_producers: set[int] | None = None) -> CleanStats:  # fmt: skip
    """One clean of `plog` over its cleanable section; returns its stats (`end_offset`: the new first dirty
    offset). `run_locked(fn)` runs `fn` where the partition's log may be changed (the broker's event loop);
    `retire` is given the replaced segments (closed at once without it); `active_producers`: the producer ids
    whose emptied last batch stays (None: every producer's)."""
    stats = CleanStats(plog.topic, plog.partition, first_dirty.first_dirty, started=time.monotonic(),
                       dirty_ratio=first_dirty.ratio)  # fmt: skip
    offset_map.clear()
    end = build_offset_map(plog, first_dirty.first_dirty, first_dirty.uncleanable, offset_map, stats, stop,
                           throttler)  # fmt: skip
    stats.end_offset, stats.map_keys = end, len(offset_map)
    stats.map_done = time.monotonic()
    if end <= first_dirty.first_dirty:  # (its first dirty batch has more keys than the map has slots)
        stats.finished = time.monotonic()
        return stats  # nothing cleaned: no rewrite
    bases = list(plog.bases)
    segments = dict(plog.segments)
    # the delete horizon: the modification time of the last segment cleaned before, less delete.retention.ms
    below = [segments[b] for b in bases[:-1] if segments[b].next_offset <= first_dirty.first_dirty]
    horizon = (_mtime_ns(below[-1]) // 1_000_000 if below else 0) - plog.config.delete_retention_ms
    to_clean = [segments[b] for b in bases[:-1] if b < end]
    producers_last = last_batches_of_producers(to_clean, active_producers)
    for group in group_segments(to_clean, plog.config.segment_bytes):
        cleaned = clean_group(plog, group, offset_map, horizon, stats, stop, throttler, producers_last, end)
        try:
            old = run_locked(lambda c=cleaned: swap_in(plog, c))
        except CleanAborted:
            for p in cleaned.paths.values():  # (unless the swap had begun: then they are .swap files)
                p.unlink(missing_ok=True)
            raise
        stats.segments_in += len(group)
        stats.segments_out += 1
        if retire is not None:
            retire(old)  # type: ignore[arg-type]
        else:
            for seg in old:  # type: ignore[union-attr]
                seg.close()
    stats.finished = time.monotonic()
    return stats


@dataclass
class PartitionProgress:
    """The cleaner's knowledge of one log, as `kafkactl inspect cleaner` shows it."""

    checkpoint: int | None = None
    last_clean: CleanStats | None = None
    last_clean_ms: int = -1
    last_error: str | None = None


class LogCleaner:
    """The cleaner threads of a broker (`log.cleaner.threads`), over the logs of its LogManager."""

    def __init__(self, manager, *, threads: int = 1, dedupe_buffer_bytes: int = 134217728,
                 load_factor: float = 0.9, backoff_ms: int = 15000, io_max_bytes_per_second: float = 1.7e308,
                 delete_delay_ms: int = 60000, loop: asyncio.AbstractEventLoop | None = None,
                 clock: Callable[[], float] = time.time,
                 stable_end: Callable[[PartitionLog], int] | None = None,
                 active_producers: Callable[[PartitionLog], set[int] | None] | None = None) -> None:  # fmt: skip
        self.manager = manager
        #: a log's high watermark as last stored, read only (called from the cleaner threads: recomputing it
        #: would write replication state off the event loop); None: the whole log is stable (a broker-less test)
        self.stable_end = stable_end
        #: the producer ids a log's producer state holds (`active_producer_ids`); None: keep every producer's
        self.active_producers = active_producers
        if log.getEffectiveLevel() > logging.INFO:  # each clean is reported, as Kafka's log-cleaner.log is
            log.setLevel(logging.INFO)
        self.threads = max(1, threads)
        self.map_bytes = dedupe_buffer_bytes // self.threads  # shared by the threads, as Kafka's
        self.load_factor = load_factor
        self.backoff_s = backoff_ms / 1000
        self.io_rate = io_max_bytes_per_second
        self.delete_delay_s = delete_delay_ms / 1000
        self.loop = loop  # where the logs are changed (the broker's event loop); None: the calling thread
        self.clock = clock
        self.progress: dict[TopicPartition, PartitionProgress] = {}
        self._lock = threading.Lock()
        self._checkpoint_lock = threading.Lock()  # one checkpoint file write at a time (see _write_checkpoint)
        self._in_progress: set[TopicPartition] = set()
        #: logs a clean found damaged: not cleaned again until the broker restarts (Kafka's uncleanable partitions)
        self.uncleanable: set[TopicPartition] = set()
        self._aborted: set[TopicPartition] = set()
        self._stuck: set[TopicPartition] = set()  # logs a clean made no progress on (said once in the log)
        self._retired: list[tuple[float, list[LogSegment]]] = []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._workers: list[threading.Thread] = []
        self._throttler = Throttler(io_max_bytes_per_second)
        for d in manager.log_dirs:
            for tp, offset in self._read_checkpoint(Path(d)).items():
                self.progress.setdefault(tp, PartitionProgress()).checkpoint = offset

    # -- checkpoints ---------------------------------------------------------------------------

    def _read_checkpoint(self, d: Path) -> dict[TopicPartition, int]:
        return read_or_set_aside(d / CHECKPOINT, self.clock, "the logs are cleaned from their start again")

    def _write_checkpoint(self, d: Path) -> None:
        """Rewrite `d`'s checkpoint file with its logs' checkpoints. Under `_checkpoint_lock`, from the snapshot
        to the rename: cleaner threads (and a removal or truncation on the event loop) write the same `.tmp`
        name, and a later snapshot must not be overwritten by an earlier one."""
        with self._checkpoint_lock:
            with self._lock:
                offsets = {tp: p.checkpoint for tp, p in self.progress.items()
                           if p.checkpoint is not None and self.manager.dir_of(tp) == d}  # fmt: skip
            OffsetCheckpointFile(d / CHECKPOINT).write(offsets)

    # -- threads -------------------------------------------------------------------------------

    def start(self) -> None:
        for i in range(self.threads):
            t = threading.Thread(target=self._run, args=(i,), name=f"kafka-log-cleaner-thread-{i}", daemon=True)
            t.start()
            self._workers.append(t)

    def stop(self) -> None:
        """Stop the threads (a clean in progress is dropped, its `.cleaned` files removed) and close the
        replaced segments' descriptors."""
        self._stop.set()
        self._wake.set()
        for t in self._workers:
            t.join(timeout=30)
        self._workers.clear()
        self._close_retired(force=True)

    def wake(self) -> None:
        """Look for work now (tests; a config change)."""
        self._wake.set()

    def abort(self, tp: TopicPartition, timeout: float = 0.5) -> None:
        """Drop the clean of `tp` in progress, if any, then forget the log: its checkpoint goes from its dir's
        file (Kafka's updateCheckpoints(dir, partitionToRemove): a topic re-created under the same name must
        not take the old first dirty offset) and from `uncleanable`. Called on the broker's event loop before
        the log is removed, so it waits at most `timeout` for the clean to stop (it looks at its stop flag at
        least every chunk and throttle slice); `tp` stays aborted until that clean has exited, so it neither
        swaps into nor checkpoints a log of the same name."""
        with self._lock:
            running = tp in self._in_progress
            if running:
                self._aborted.add(tp)  # (removed by the clean as it exits)
        if running:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                with self._lock:
                    if tp not in self._in_progress:
                        break
                time.sleep(0.005)
        with self._lock:
            had = self.progress.pop(tp, None)
            self.uncleanable.discard(tp)
            self._stuck.discard(tp)
        d = self.manager.dir_of(tp)
        if had is not None and had.checkpoint is not None and d is not None:
            self._write_checkpoint(d)

    def truncated(self, tp: TopicPartition, end: int) -> None:
        """`tp`'s log was cut back to `end` (a follower's truncation or reset): a checkpoint past it comes down
        to it (Kafka's maybeTruncateCheckpoint; what is appended there again is dirty) and a clean in progress
        is dropped (its swap refuses, its checkpoint is not taken)."""
        with self._lock:
            if tp in self._in_progress:
                self._aborted.add(tp)  # (removed when that clean exits)
            prog = self.progress.get(tp)
            lower = prog is not None and prog.checkpoint is not None and prog.checkpoint > end
            if lower:
                prog.checkpoint = end
        d = self.manager.dir_of(tp)
        if lower and d is not None:
            self._write_checkpoint(d)

    def _run(self, thread: int) -> None:
        omap = OffsetMap(self.map_bytes, self.load_factor)
        while not self._stop.is_set():
            self._close_retired()
            try:
                cleaned = self.clean_once(omap, thread)
            except Exception:  # a bug: logged, and the thread goes on after its back-off
                log.exception("log cleaner thread %d failed", thread)
                cleaned = False
            if not cleaned:
                self._wake.wait(self.backoff_s)
                self._wake.clear()

    def _close_retired(self, force: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            due = [segs for t, segs in self._retired if force or t <= now]
            self._retired = [(t, segs) for t, segs in self._retired if not (force or t <= now)]
        for segs in due:
            for seg in segs:
                seg.close()
                for suffix in SUFFIXES:
                    Path(str(seg.dir / segment_name(seg.base_offset, suffix)) + DELETED).unlink(missing_ok=True)

    def _retire(self, segs: list[LogSegment]) -> None:
        with self._lock:
            self._retired.append((time.monotonic() + self.delete_delay_s, segs))

    # -- one clean -----------------------------------------------------------------------------

    def dirtiest(self, now_ms: int) -> tuple[TopicPartition, PartitionLog, Cleanable] | None:
        """The compacted log to clean next (Kafka's grabFilthiestCompactedLog), or None."""
        best = None
        for tp, plog in list(self.manager.logs.items()):
            if not plog.config.compact or tp in self._in_progress or tp in self.uncleanable:
                continue
            if self.manager.is_offline(tp):
                continue
            prog = self.progress.get(tp)
            end = self.stable_end(plog) if self.stable_end is not None else None
            c = cleanable(plog, prog.checkpoint if prog else None, now_ms, end)
            if c.cleanable_bytes <= 0:
                continue
            if (c.must_clean or c.ratio > plog.config.min_cleanable_dirty_ratio) and (
                    best is None or c.ratio > best[2].ratio):  # fmt: skip
                best = (tp, plog, c)
        return best

    def clean_once(self, omap: OffsetMap, thread: int = 0) -> bool:
        """Clean the dirtiest log, if one is over its ratio; returns whether one was cleaned."""
        now_ms = int(self.clock() * 1000)
        with self._lock:
            pick = self.dirtiest(now_ms)
            if pick is None:
                return False
            tp, plog, c = pick
            self._in_progress.add(tp)
        try:
            return self._clean(tp, plog, c, omap, now_ms, thread)
        finally:
            with self._lock:  # (only now: a removal or truncation meanwhile finds the clean still running)
                self._in_progress.discard(tp)
                self._aborted.discard(tp)

    def _clean(self, tp: TopicPartition, plog: PartitionLog, c: Cleanable, omap: OffsetMap, now_ms: int,
               thread: int) -> bool:  # fmt: skip
        active = self.active_producers(plog) if self.active_producers is not None else None
        try:
            stats = clean_log(plog, c, omap, now_ms=now_ms, run_locked=self._locked_for(tp, plog),
                              stop=lambda: self._stop.is_set() or tp in self._aborted,
                              throttler=self._throttler, retire=self._retire,
                              active_producers=active)  # fmt: skip
        except (CleanDamage, CorruptRecordError) as exc:
            log.error("log cleaner thread %d: %s-%d is damaged and is not cleaned until the broker restarts "
                      "(kafkactl recover mends it): %s", thread, tp[0], tp[1], exc)  # fmt: skip
            with self._lock:
                self.uncleanable.add(tp)
                self.progress.setdefault(tp, PartitionProgress()).last_error = str(exc)
            return False
        except (CleanAborted, OSError) as exc:
            asked = self._stop.is_set() or tp in self._aborted  # (a stop, a log removed: as asked, no warning)
            log.log(logging.INFO if asked else logging.WARNING, "log cleaner thread %d: the clean of %s-%d was "
                    "dropped: %s", thread, tp[0], tp[1], exc)  # fmt: skip
            with self._lock:
                if not self._gone(tp, plog):
                    self.progress.setdefault(tp, PartitionProgress()).last_error = str(exc)
            return False
        with self._lock:  # (a truncation or removal meanwhile: its checkpoint is not taken)
            dropped = self._gone(tp, plog)
            if not dropped and stats.end_offset > c.first_dirty:
                self._stuck.discard(tp)
                prog = self.progress.setdefault(tp, PartitionProgress())
                prog.checkpoint, prog.last_clean, prog.last_clean_ms, prog.last_error = (
                    stats.end_offset, stats, int(self.clock() * 1000), None)  # fmt: skip
        if dropped:
            log.info("log cleaner thread %d: the clean of %s-%d was dropped: the log was cut or removed", thread,
                     tp[0], tp[1])  # fmt: skip
            return False
        if stats.end_offset <= c.first_dirty:  # no progress: back off (no rewrite, no busy loop), said once
            with self._lock:
                said = tp in self._stuck
                self._stuck.add(tp)
                self.progress.setdefault(tp, PartitionProgress()).last_error = "no progress: the offset map is full"
            if not said:
                log.warning("log cleaner thread %d: no progress on %s-%d: the batch at offset %d holds more keys "
                            "than the offset map has slots (%d; log.cleaner.dedupe.buffer.size)", thread, tp[0],
                            tp[1], c.first_dirty, omap.slots)  # fmt: skip
            return False
        d = self.manager.dir_of(tp)
        if d is not None:
            self._write_checkpoint(d)
        log.info("%s", stats.summary(thread))
        return True

    def _gone(self, tp: TopicPartition, plog: PartitionLog) -> bool:
        """Whether the clean of `plog` was aborted (a removal, a truncation) or its log is no longer `tp`'s."""
        return tp in self._aborted or self.manager.get(*tp) is not plog

    def _locked_for(self, tp: TopicPartition, plog: PartitionLog) -> Callable[[Callable[[], object]], object]:
        """`run_locked` of a clean of `tp`: runs the swap on the event loop and waits for it, giving up when
        the cleaner stops or the clean is aborted (the loop may be waiting for exactly that)."""

        def stopped() -> bool:
            return self._stop.is_set() or tp in self._aborted or self.manager.get(*tp) is not plog

        def locked(fn: Callable[[], object]) -> object:
            def guarded() -> object:
                if stopped():
                    raise CleanAborted("the cleaner stopped, or the log was removed")
                return fn()

            if self.loop is None:
                return guarded()
            fut: concurrent.futures.Future = concurrent.futures.Future()

            def run() -> None:
                if fut.set_running_or_notify_cancel():
                    try:
                        fut.set_result(guarded())
                    except BaseException as exc:  # handed to the waiting cleaner thread
                        fut.set_exception(exc)

            try:
                self.loop.call_soon_threadsafe(run)
            except RuntimeError:  # the loop is closed
                raise CleanAborted("the broker stopped") from None
            while True:
                try:
                    return fut.result(timeout=0.05)
                except concurrent.futures.TimeoutError:
                    if stopped() and fut.cancel():
                        raise CleanAborted("the cleaner stopped, or the log was removed") from None

        return locked

    @classmethod
    def from_props(cls, manager, props: dict[str, str], loop: asyncio.AbstractEventLoop | None = None,
                   stable_end: Callable[[PartitionLog], int] | None = None,
                   active_producers: Callable[[PartitionLog], set[int] | None] | None = None,
                   ) -> LogCleaner:  # fmt: skip
        """The cleaner of a broker's config (Kafka's `log.cleaner.*` keys)."""
        return cls(
            manager, threads=int(props.get("log.cleaner.threads", "1")),
            dedupe_buffer_bytes=int(props.get("log.cleaner.dedupe.buffer.size", "134217728")),
            load_factor=float(props.get("log.cleaner.io.buffer.load.factor", "0.9")),
            backoff_ms=int(props.get("log.cleaner.backoff.ms", "15000")),
            io_max_bytes_per_second=float(props.get("log.cleaner.io.max.bytes.per.second", "1.7e308")),
            delete_delay_ms=int(props.get("log.segment.delete.delay.ms", "60000")), loop=loop, stable_end=stable_end,
            active_producers=active_producers,
        )  # fmt: skip


def progress_events(paths: list[Path]) -> Iterator[dict]:
    """What `kafkactl inspect cleaner` reports, read from the files alone (a running broker's dirs too): per
    compacted-or-not partition under `paths` (log dirs or partition dirs), its cleaner checkpoint (first dirty
    offset), offsets, clean and dirty bytes and dirty ratio by segment (as the cleaner counts them, before
    `min.compaction.lag.ms`), when the checkpoint was last written, and any `.cleaned`/`.swap`/`.deleted`
    file a clean left (start-up finishes or removes them). Then a summary."""
    from broker.log.log import parse_partition_dir
    from broker.log.manager import is_log_dir  # (here: the manager imports this module)

    parts: list[Path] = []
    for path in paths:
        if path.is_dir() and parse_partition_dir(path.name) and any(parse_segment_name(n) for n in os.listdir(path)):
            parts.append(path)
        elif path.is_dir() and (is_log_dir(path) or (path / CHECKPOINT).exists()):
            parts += sorted(p for p in path.iterdir() if p.is_dir() and parse_partition_dir(p.name))
        else:
            yield {"type": "error", "path": str(path), "message": "not a log dir or partition dir"}
    total = {"type": "summary", "partitions": 0, "with_checkpoint": 0, "leftovers": 0}
    for part in parts:
        tp = parse_partition_dir(part.name)
        assert tp is not None
        ckpt_path = part.parent / CHECKPOINT
        try:
            checkpoint = OffsetCheckpointFile(ckpt_path).read().get(tp)
        except CheckpointError as exc:
            yield {"type": "error", "path": str(ckpt_path), "message": str(exc)}
            checkpoint = None
        bases = sorted(b for b in (parse_segment_name(n) for n in os.listdir(part)) if b is not None)
        sizes = [os.path.getsize(part / segment_name(b)) for b in bases]
        log_end = bases[-1] if bases else 0
        if bases:
            last_path = part / segment_name(bases[-1])
            for _, item in _batches(last_path, last_path.stat().st_size):
                if not isinstance(item, Damage):
                    log_end = item.last_offset + 1
        first_dirty = checkpoint if checkpoint is not None and bases and bases[0] <= checkpoint else (
            bases[0] if bases else 0)  # fmt: skip
        i = max(bisect.bisect_right(bases, first_dirty) - 1, 0)
        clean, dirty = sum(sizes[:i]), sum(sizes[i:-1])
        leftovers = sorted(n for n in os.listdir(part) if n.endswith((CLEANED, SWAP, DELETED)))
        total["partitions"] += 1
        total["with_checkpoint"] += checkpoint is not None
        total["leftovers"] += len(leftovers)
        yield {
            "type": "partition", "partition_dir": str(part), "topic": tp[0], "partition": tp[1],
            "cleaner_checkpoint": checkpoint, "log_start": bases[0] if bases else 0, "log_end": log_end,
            "segments": len(bases), "clean_bytes": clean, "dirty_bytes": dirty,
            "dirty_ratio": round(dirty / (clean + dirty), 4) if clean + dirty else 0.0,
            "checkpointed_ms": int(ckpt_path.stat().st_mtime * 1000) if checkpoint is not None else None,
            "leftovers": leftovers,
        }  # fmt: skip
    yield total
