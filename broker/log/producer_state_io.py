"""A partition's producer state and its log: rebuilt from the newest snapshot and the batches after it
(`load_states`), snapshotted where that bounds the replay (`take_snapshot`, `prepare_snapshot`): at segment
rolls, in the broker's minutely pass once enough was appended past the last snapshot (`snapshot_due`), and
at a clean shutdown if it changed; forgotten when unreadable (`forget_states`); and the transaction markers
read back from the segment files. The state itself (`ProducerStates`) is `broker.log.producer_state`, held
by each `PartitionLog`; the snapshot file format is `broker.log.producer_snapshot`.

Why not a snapshot every minute for every changed state: at thousands of partitions (followers included),
an idempotent round of one message each would write thousands of files a minute for nothing. A snapshot
is an optimisation (the load replays everything after the newest intact one), and the roll's bounds the
replay to a segment anyway; the minutely one only shortens that within a big active segment, so it is due
once `SNAPSHOT_DUE_BYTES` of log or `SNAPSHOT_DUE_CHANGES` producer-state changes lie past the last one."""

from __future__ import annotations

import bisect
import contextlib
import mmap
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from broker.log import producer_snapshot
from broker.log.producer_state import CompletedTxn, ProducerStates
from broker.log.scanner import ScannedBatch, scan
from broker.log.txn_index import AbortedTxn, parse_marker
from broker.records.batch import HEADER, BatchHeader, iter_records

if TYPE_CHECKING:
    from broker.log.log import PartitionLog


def load_states(plog: PartitionLog) -> ProducerStates:
    """A partition's producer state as its log leaves it (at start-up, and after a truncation): the newest
    snapshot at or below the log end (snapshots past it are deleted) and every batch after it; without one,
    every batch from the log start. No range is ever skipped (as Kafka's loadProducerState), so each open
    transaction is found and each marker closes its own; the aborted ones are noted in the `.txnindex` again
    (once each: an entry the file holds is not added twice), which rebuilds what a crash lost of it. The cost
    is bounded by the snapshots: one at every segment roll and, in the broker's minutely pass, one once
    `SNAPSHOT_DUE_BYTES` lie past the last (`snapshot_due`), so at most about a segment is read (about 8 MiB
    while the producers change); a truncation (never below
    the high watermark) reads from the newest one at or below it, kept for that."""
    snap = producer_snapshot.latest(plog.dir, plog.log_end_offset)
    if snap is not None:
        states, since = ProducerStates.from_snapshot(snap[1], int(time.time() * 1000)), snap[0]
    else:
        states, since = ProducerStates(), plog.bases[0]
    note_completed(plog, states, states.record_batches(iter_headers(plog, since), lambda h: marker_in_log(plog, h)))
    states.saved_offset = since
    return states


def iter_headers(plog: PartitionLog, offset: int) -> Iterator[BatchHeader]:
    """The v2 batch headers of the log whose last offset is at or past `offset`, to its end, as the files hold
    them (below the log start offset too), one segment mapped at a time: memory stays small for any log."""
    for base in plog.bases[max(bisect.bisect_right(plog.bases, offset) - 1, 0) :]:
        seg = plog.segments[base]
        seg.write_deferred()
        start = 0
        if offset > base:
            head = seg.find(offset)
            if head is None:
                continue  # every batch of it lies before `offset`
            start = head.position
        size = min(seg.size, os.fstat(seg.fd).st_size)
        if size <= start:
            continue
        with mmap.mmap(seg.fd, size, access=mmap.ACCESS_READ) as buf:
            item = None
            for item in scan(buf, start, size, verify_crc=False):
                if isinstance(item, ScannedBatch) and item.header is not None:
                    yield item.header
            item = None  # (no view into the map may outlive it)


#: the minutely pass snapshots a changed state once this much log lies past its last snapshot (what a start-up
#: after a crash would replay) ...
SNAPSHOT_DUE_BYTES = 8 << 20
#: ... or once its producers changed this often since (batches of idempotent producers, markers)
SNAPSHOT_DUE_CHANGES = 4096


def take_snapshot(plog: PartitionLog, states: ProducerStates | None, now_ms: int, high_watermark: int = -1, *,
                  sync: bool = True) -> Path | None:  # fmt: skip
    """Write the snapshot of the producers at the log end (at a segment roll, at a clean shutdown), keeping the
    ones at segment bases and the newest at or below the high watermark (a truncation reloads from the newest
    one below its point, never below the high watermark) and deleting every other one (those of deleted
    segments too). Nothing is written for a partition whose producers are unknown (`forget_states`).
    `sync=False`: without fsync (a clean shutdown's `syncfs` makes it durable). Returns the path written."""
    if states is not None and states.unknown:
        return None
    changes = states.changes if states is not None else 0
    keep = set(plog.bases)
    path = producer_snapshot.write(plog.dir, plog.log_end_offset, states.snapshot(now_ms) if states is not None
                                   else [], keep=lambda offset: offset in keep, keep_newest_to=high_watermark,
                                   sync=sync)  # fmt: skip
    if states is not None:
        states.saved = max(states.saved, changes)
        states.saved_offset = plog.log_end_offset
    return path


def changed(states: ProducerStates | None) -> bool:
    """Whether the partition's producer state changed since its last snapshot (one whose producers did not
    change needs none: the last snapshot and the log after it give the same state)."""
    return states is not None and not states.unknown and states.changes != states.saved


def snapshot_due(plog: PartitionLog, states: ProducerStates | None) -> bool:
    """Whether the minutely pass should snapshot the partition: its state `changed` and the replay it would
    save is worth a file (`SNAPSHOT_DUE_BYTES` of log past the last snapshot, or `SNAPSHOT_DUE_CHANGES`
    changes). A round of one message per partition writes none; the roll's snapshot bounds the rest."""
    if not changed(states):
        return False
    assert states is not None
    return states.changes - states.saved >= SNAPSHOT_DUE_CHANGES or bytes_after(plog, states.saved_offset) >= (
        SNAPSHOT_DUE_BYTES
    )


def bytes_after(plog: PartitionLog, offset: int) -> int:
    """About how many bytes of the log lie from the batch holding `offset` to the log end (the whole log
    for an offset below it)."""
    i = max(bisect.bisect_right(plog.bases, offset) - 1, 0)
    first = plog.segments[plog.bases[i]]
    skip = 0
    if offset > first.base_offset:
        head = first.find(offset)
        skip = head.position if head is not None else first.size  # (None: the segment ends before it)
    return sum(plog.segments[b].size for b in plog.bases[i:]) - skip


def maybe_snapshot(plog: PartitionLog, states: ProducerStates | None, now_ms: int, high_watermark: int = -1) -> bool:
    """`take_snapshot` if its state `changed`, on the calling thread. Returns whether it wrote."""
    if not changed(states):
        return False
    take_snapshot(plog, states, now_ms, high_watermark)
    return True


class SnapshotJob(NamedTuple):
    """A snapshot encoded on the event loop, to be written off it (`write_unlinked`) and installed on it."""

    offset: int
    data: bytes
    changes: int  # the state's change count it holds
    keep: frozenset[int]  # the segment bases then
    high_watermark: int

    def kept(self, offset: int) -> bool:
        """Whether its prune keeps the snapshot at `offset`: one at a segment base, or a newer one (a roll's)."""
        return offset in self.keep or offset > self.offset


def prepare_snapshot(plog: PartitionLog, states: ProducerStates, now_ms: int, high_watermark: int) -> SnapshotJob:
    """Encode the snapshot of `states` at the log end (cheap: an entry per producer) for an off-loop write."""
    return SnapshotJob(plog.log_end_offset, producer_snapshot.encode(states.snapshot(now_ms)), states.changes,
                       frozenset(plog.bases), high_watermark)  # fmt: skip


def write_unlinked_all(jobs: list[tuple[Path, SnapshotJob]]) -> list[Path | OSError]:
    """Write each job's snapshot (partition dir, job) under its unlinked name without fsync (a blocking call,
    one for the whole pass: the caller makes them durable with one `syncfs` per log dir before installing
    any); per job, the path written or the OSError that kept it from being written."""
    out: list[Path | OSError] = []
    for directory, job in jobs:
        try:
            out.append(producer_snapshot.write_unlinked(directory, job.offset, job.data, sync=False))
        except OSError as exc:
            out.append(exc)
    return out


def prune_all(jobs: list[tuple[Path, SnapshotJob]]) -> list[tuple[Path, OSError]]:
    """After installing them: delete the older snapshots of each (partition dir, job) (a blocking call, one for
    the whole pass); the dirs where that failed, with why."""
    failed = []
    for directory, job in jobs:
        try:
            producer_snapshot.prune(directory, job.offset, job.kept, job.high_watermark)
        except OSError as exc:
            failed.append((directory, exc))
    return failed


def forget_states(plog: PartitionLog) -> ProducerStates:
    """The state of a partition whose producers could not be read from its log (a load or a truncation's
    rebuild raised): an empty one marked unknown, never snapshotted, and the partition's snapshots deleted, so
    that no snapshot makes "no producer, nothing open" permanent: the next start-up reads the whole log."""
    with contextlib.suppress(OSError):  # (those left are true states of the log at their offsets: no harm)
        producer_snapshot.delete_from(plog.dir, 0)
    return ProducerStates(unknown=True)


def marker_in_log(plog: PartitionLog, h: BatchHeader) -> tuple[bool, int] | None:
    """(commit?, coordinator epoch) of the control batch `h` of the log, read from its segment file (below the
    log start offset too: start-up reads whole segments)."""
    seg = plog.segments[plog.bases[max(bisect.bisect_right(plog.bases, h.base_offset) - 1, 0)]]
    head = seg.find(h.base_offset)
    if head is None or head.base_offset != h.base_offset:
        return None
    return marker_in(seg.read(head.position, head.size), 0)


def marker_in(data: bytes | memoryview, pos: int) -> tuple[bool, int] | None:
    """(commit?, coordinator epoch) of the control batch at `pos` of `data`, None if it holds no marker."""
    h = BatchHeader(*HEADER.unpack_from(data, pos))
    for r in iter_records(data, pos, h):
        return parse_marker(r.key, r.value)
    return None


def note_completed(plog: PartitionLog, states: ProducerStates, done: Iterable[CompletedTxn]) -> None:
    """Note the aborted ones of transactions markers closed in the log's `.txnindex` (once each)."""
    for c in done:
        if c.aborted:
            lso = states.first_unstable_offset()
            plog.add_aborted(AbortedTxn(c.producer_id, c.first_offset, c.last_offset,
                                        c.last_offset + 1 if lso is None else min(lso, c.last_offset + 1)))  # fmt: skip
