"""Idempotent producers: producer ids handed out in blocks, and per-partition sequence checks.

Each partition remembers, per producer id, its epoch and the sequence ranges and offsets of its
last five batches (as Kafka does). A batch repeating one of them is a duplicate: it is not
appended again and its first answer is repeated. A batch that skips sequences is refused with
OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch with INVALID_PRODUCER_EPOCH. A producer the partition
has no state for (a new one) is accepted at any sequence. A clean shutdown writes each partition's
state to a snapshot file (`broker.log.producer_snapshot`) that start-up reads back (`load_states`).
After a failed write or fsync a partition's state is `repair`ed to what its log holds.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker.log import producer_snapshot
from broker.log.producer_snapshot import SnapshotEntry
from broker.protocol.errors import ErrorCode
from broker.records.batch import BatchHeader

if TYPE_CHECKING:
    from broker.log.log import PartitionLog

MAX_SEQ = 2**31 - 1
KEEP = 5


#: a producer silent this long is forgotten when the state is saved or loaded (Kafka's producer.id.expiration.ms)
EXPIRATION_MS = 24 * 3600 * 1000


@dataclass
class _Entry:
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=KEEP))  # (first_seq, last_seq, first_offset)
    last_ms: int = 0  # when it last wrote (epoch ms)


class ProducerStates:
    """Sequence state of every producer writing to one partition."""

    def __init__(self) -> None:
        self.entries: dict[int, _Entry] = {}

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int) -> tuple[ErrorCode, int]:
        """(NONE, -1) to append; (NONE, offset) for a duplicate first appended at `offset`; or an error."""
        e = self.entries.get(producer_id)
        if e is None:
            return ErrorCode.NONE, -1
        if epoch < e.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH, -1
        if epoch > e.epoch:
            return (ErrorCode.NONE, -1) if first_seq == 0 else (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
        for f, last, offset in e.batches:
            if f == first_seq and last == last_seq:
                return ErrorCode.NONE, offset
        if not e.batches:
            return ErrorCode.NONE, -1
        expected = (e.batches[-1][1] + 1) % (MAX_SEQ + 1)
        if first_seq != expected:
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
        return ErrorCode.NONE, -1

    def record(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, first_offset: int,
               when_ms: int | None = None) -> None:  # fmt: skip
        e = self.entries.get(producer_id)
        if e is None or epoch != e.epoch:
            e = self.entries[producer_id] = _Entry(epoch)
        e.batches.append((first_seq, last_seq, first_offset))
        e.last_ms = int(time.time() * 1000) if when_ms is None else when_ms

    def repair(self, log_end_offset: int, written: Iterable[BatchHeader]) -> None:
        """After a failed write or fsync: forget the batches the log no longer holds (at or past its end),
        and record the `written` ones (the log's batches from where the failed append began) that are not."""
        for e in self.entries.values():
            e.batches = deque((b for b in e.batches if b[2] < log_end_offset), maxlen=KEEP)
        self.record_batches(written)

    def record_batches(self, headers: Iterable[BatchHeader]) -> None:
        """Record the idempotent ones of a log's batches (oldest first) that are not recorded yet."""
        for h in headers:
            if h.producer_id < 0 or h.base_sequence < 0:
                continue
            e = self.entries.get(h.producer_id)
            if e is not None and e.epoch == h.producer_epoch and any(b[2] == h.base_offset for b in e.batches):
                continue
            self.record(h.producer_id, h.producer_epoch, h.base_sequence,
                        (h.base_sequence + h.last_offset_delta) % (MAX_SEQ + 1), h.base_offset,
                        h.max_timestamp)  # fmt: skip

    def active(self) -> list[tuple[int, int, int, int]]:
        """(producer id, epoch, last sequence, last write in epoch ms) of each producer this partition
        knows, as DescribeProducers lists them."""
        return [(pid, e.epoch, e.batches[-1][1] if e.batches else -1, e.last_ms) for pid, e in self.entries.items()]

    def snapshot(self, now_ms: int) -> list[SnapshotEntry]:
        """Each producer's last batch, as a snapshot file keeps it (Kafka keeps no more either); producers
        silent for EXPIRATION_MS are left out."""
        out = []
        for pid, e in self.entries.items():
            if e.batches and now_ms - e.last_ms < EXPIRATION_MS:
                first_seq, last_seq, first_offset = e.batches[-1]
                delta = (last_seq - first_seq) % (MAX_SEQ + 1)
                out.append(SnapshotEntry(pid, e.epoch, last_seq, first_offset + delta, delta, e.last_ms))
        return out

    @classmethod
    def from_snapshot(cls, entries: Iterable[SnapshotEntry], now_ms: int) -> ProducerStates:
        states = cls()
        for e in entries:
            if now_ms - e.timestamp < EXPIRATION_MS:
                first_seq = (e.last_sequence - e.offset_delta) % (MAX_SEQ + 1)
                states.record(e.producer_id, e.epoch, first_seq, e.last_sequence, e.last_offset - e.offset_delta,
                              e.timestamp)  # fmt: skip
        return states


#: after a crash, start-up reads at most about this much of a partition's log end for its producers
LOAD_TAIL_BYTES = 16 << 20


def load_states(plog: PartitionLog) -> ProducerStates:
    """A partition's producer state at start-up: its snapshot (written at the last clean shutdown) and the
    batches after it; without a snapshot in the active segment, the batches of the active segment's last
    LOAD_TAIL_BYTES (bounded work after a crash, a few seconds at most: a producer that wrote only
    further back is taken as new, as one was before snapshots)."""
    snap = producer_snapshot.latest(plog.dir, plog.log_end_offset)
    active_base = plog.bases[-1]
    if snap is not None and snap[0] >= active_base:
        states, since = ProducerStates.from_snapshot(snap[1], int(time.time() * 1000)), snap[0]
    else:
        states, since = ProducerStates(), active_base
    states.record_batches(plog.batch_headers_from(since, LOAD_TAIL_BYTES))
    return states


class ProducerIdPool:
    """Producer ids from cluster-wide blocks; `refill` claims the next block (a blocking ZooKeeper call)."""

    def __init__(self) -> None:
        self.next = 0
        self.end = -1

    def take(self) -> int | None:
        if self.next > self.end:
            return None
        pid = self.next
        self.next += 1
        return pid

    def add_block(self, first: int, last: int) -> None:
        self.next, self.end = first, last
