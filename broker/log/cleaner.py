"""The log cleaner: compaction of `cleanup.policy=compact` logs, as Kafka's LogCleaner. This module cleans one log.

A compacted log keeps, for each key, at least its latest record. The cleaner checkpoint of a log is its
*first dirty offset*: below it the log was cleaned, from it on it is dirty. A clean of one log:

1. Picks the log (`broker.log.cleaner_selection`): the one whose cleanable section, from its first dirty
   offset to the active segment or the compaction lag, is dirtiest over `min.cleanable.dirty.ratio`.
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
4. Swaps the cleaned segment in, crash-safely, Kafka's way (`broker.log.cleaner_swap`, which start-up also
   runs to finish or roll back a swap a stop cut short).

Both passes check every batch's CRC: damage stops the clean (a re-built batch would get a good CRC, a bad
batch's keys could drop good records) and leaves the log uncleanable until the broker restarts.

The rest of the cleaner: `broker.log.cleaner_io` (how it reads a segment: chunks through its own descriptor,
the throttle, the aborts), `broker.log.cleaner_threads` (`LogCleaner`: the threads, aborts, the swap run on
the event loop), `broker.log.cleaner_progress` (its checkpoint file and `kafkactl inspect cleaner`).
"""

from __future__ import annotations

import bisect
import operator
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import compress, repeat

from broker.log.cleaner_io import CleanAborted, CleanDamage, Throttler, segment_batches
from broker.log.cleaner_selection import Cleanable
from broker.log.cleaner_swap import TXNINDEX_SUFFIX, CleanedSegment, cleaned_path, swap_in
from broker.log.index import OffsetIndex, TimeIndex
from broker.log.log import PartitionLog
from broker.log.offset_map import OffsetMap, key_hash, key_hashes
from broker.log.scanner import Damage, ScannedBatch
from broker.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, LogSegment, segment_name
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

_SKIP = TRANSACTIONAL_BIT | CONTROL_BIT
_MAX_RELATIVE = 2**31 - 1
_LAST_DELTA = struct.Struct(">i")
_LAST_DELTA_AT = 23  # lastOffsetDelta in a batch header
_CRC = struct.Struct(">I")
_WRITE_BYTES = 1 << 20  # what the rewrite holds before it writes (Kafka's log.cleaner.io.buffer.size is 512 KB)
_KEY = operator.itemgetter(2)
_VALUE = operator.itemgetter(3)
_OFFSET = operator.itemgetter(0)


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
        for data, item in segment_batches(seg.log_path, seg.size, note, verify=True):
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
    log_path = cleaned_path(d, base, LOG_SUFFIX)
    index = OffsetIndex(cleaned_path(d, base, INDEX_SUFFIX), base)
    time_index = TimeIndex(cleaned_path(d, base, TIMEINDEX_SUFFIX), base)
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
                for data, item in segment_batches(seg.log_path, seg.size, note, verify=True):
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
                        if not records:  # an emptied batch a clean kept: only while it is its producer's last
                            kept, kept_count = None, 0
                            if h.base_offset in producers_last:
                                kept = memoryview(data)[item.position : item.end]
                        elif keep is records:
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
            tpath = cleaned_path(d, base, TXNINDEX_SUFFIX)
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


def last_batches_of_producers(segments: list[LogSegment]) -> set[int]:
    """The base offsets of each producer id's last data batch in `segments` (a header-only pass): without the
    partition's producer state, a clean keeps that batch, emptied if need be, so that the producer's last
    sequence survives the clean."""
    last: dict[int, int] = {}
    for seg in segments:
        for _, item in segment_batches(seg.log_path, seg.size):
            if isinstance(item, Damage):
                break
            h = item.header
            if h is not None and h.producer_id >= 0 and not h.attributes & CONTROL_BIT:
                last[h.producer_id] = h.base_offset
    return set(last.values())


def producers_last_batches(states) -> set[int] | None:
    """The base offsets of each active producer's last batch in the whole log, as the partition's producer state
    holds them (Kafka's lastRecordsOfActiveProducers; read from the cleaner's thread: a copy of the dict, the
    last of each deque); None when there is no state or it is unknown."""
    if states is None or getattr(states, "unknown", False):
        return None
    return {batches[-1][2] for batches in [e.batches for e in states.entries.copy().values()] if batches}


def clean_log(plog: PartitionLog, first_dirty: Cleanable, offset_map: OffsetMap, *, now_ms: int,
              run_locked: Callable[[Callable[[], object]], object] = lambda fn: fn(),
              stop: Callable[[], bool] = lambda: False, throttler: Throttler | None = None,
              retire: Callable[[list[LogSegment]], None] | None = None,
              producers_last: set[int] | None = None) -> CleanStats:  # fmt: skip
    """One clean of `plog` over its cleanable section; returns its stats (`end_offset`: the new first dirty
    offset). `run_locked(fn)` runs `fn` where the partition's log may be changed (the broker's event loop);
    `retire` is given the replaced segments (closed at once without it); `producers_last`: the base offsets of
    the active producers' last batches in the whole log (their emptied last batches stay); without it, each
    producer's last batch in the cleaned section stays."""
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
    # each active producer's last batch in the whole log (Kafka's lastRecordsOfActiveProducers), from the producer
    # state: one the producer wrote after the cleaned section empties its batches there for good, instead of
    # leaving an empty batch at every clean; unknown, each producer's last in the cleaned section stays
    if producers_last is None:
        producers_last = last_batches_of_producers(to_clean)
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
