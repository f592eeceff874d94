"""A partition's producer state (Kafka's ProducerStateManager): idempotent producers' sequence checks and
transactions open here. (Producer ids are handed out by `broker.coordinator.txn.producer_ids`.)

Each partition's `PartitionLog` holds one (`plog.producer_states`). Per producer id it remembers the epoch
and the sequence ranges and offsets of the last five batches (as Kafka does). A batch repeating one of
them is a duplicate: it is not appended again and its first answer is repeated. A batch that skips
sequences is refused with OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch with INVALID_PRODUCER_EPOCH. A
producer the partition has no state for (a new one) is accepted at any sequence. Snapshots, start-up and
a follower's truncation rebuild it from the log (`broker.log.producer_state_io`); after a failed write
or fsync it is `repair`ed to what the log holds.

Transactions (KIP-98): a producer's first transactional batch opens its transaction here (its first
offset is kept); the coordinator's marker (WriteTxnMarkers, a control batch) closes it. While it is open
the producer may write only transactional batches (INVALID_TXN_STATE otherwise). A marker with a newer
producer epoch raises the partition's (the fenced producer's later batches get INVALID_PRODUCER_EPOCH),
one from an older coordinator epoch than the last seen for the producer is refused
(TRANSACTION_COORDINATOR_FENCED). The last stable offset is the first offset of the oldest open
transaction (`first_unstable_offset`), at least the log start offset, capped by the high watermark.
Leaders, followers and start-up all feed the same state from the batches (`record_batches`), so a follower
that becomes leader has the same open transactions.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from broker.log.producer_snapshot import SnapshotEntry
from broker.protocol.errors import ErrorCode
from broker.records.batch import BatchHeader

MAX_SEQ = 2**31 - 1
KEEP = 5


#: a producer silent this long is forgotten when the state is saved or loaded (Kafka's producer.id.expiration.ms)
EXPIRATION_MS = 24 * 3600 * 1000


@dataclass
class _Entry:
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=KEEP))  # (first_seq, last_seq, first_offset)
    last_ms: int = 0  # when it last wrote (epoch ms)
    txn_first: int = -1  # first offset of its open transaction here, -1 without one
    coordinator_epoch: int = -1  # of the last marker for it here
    closed: tuple[int, int] | None = None  # (first offset, marker offset) of the transaction it last closed here
    marker_offset: int = -1  # offset of the last marker for it here that this broker saw written, -1 unknown


class CompletedTxn(NamedTuple):
    """A transaction a marker closed at `last_offset` (its offset)."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


#: a control batch's marker as `record_batches` needs it: (commit?, coordinator epoch), None if unreadable
MarkerOf = Callable[[BatchHeader], "tuple[bool, int] | None"]


class ProducerStates:
    """Sequence state of every producer writing to one partition."""

    def __init__(self, unknown: bool = False) -> None:
        self.entries: dict[int, _Entry] = {}
        #: the partition's producers could not be read from its log (start-up, a truncation, a failed write's
        #: repair): what is held here is only what came after, so it is never snapshotted (`take_snapshot`)
        #: and the partition's snapshots are deleted: the next start-up reads the whole log
        self.unknown = unknown
        self.changes = 0  # counts the changes (batches, markers, repairs); `saved`: the count the last snapshot had
        self.saved = 0
        #: the log offset the last snapshot (or the start of the replay that built this state) is at: what a
        #: start-up would replay from (`producer_state_io.snapshot_due` weighs the log appended past it)
        self.saved_offset = 0

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int,
              transactional: bool = False) -> tuple[ErrorCode, int]:  # fmt: skip
        """(NONE, -1) to append; (NONE, offset) for a duplicate first appended at `offset`; or an error."""
        e = self.entries.get(producer_id)
        if e is None:
            return ErrorCode.NONE, -1
        if epoch < e.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH, -1
        if e.txn_first >= 0 and not transactional:  # (Kafka: "Expected transactional write from producer")
            return ErrorCode.INVALID_TXN_STATE, -1  # (whatever the epoch: an open transaction waits for its marker)
        if epoch > e.epoch:
            return (ErrorCode.NONE, -1) if first_seq == 0 else (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
        for f, last, offset in e.batches:
            if f == first_seq and last == last_seq:
                return ErrorCode.NONE, offset
        if not e.batches:  # (an epoch a marker raised: the producer starts it at sequence 0, as Kafka's checkSequence)
            ok = first_seq == 0 or e.coordinator_epoch < 0
            return (ErrorCode.NONE, -1) if ok else (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
        expected = (e.batches[-1][1] + 1) % (MAX_SEQ + 1)
        if first_seq != expected:
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
        return ErrorCode.NONE, -1

    def record(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, first_offset: int,
               when_ms: int | None = None, transactional: bool = False) -> None:  # fmt: skip
        e = self.entries.get(producer_id)
        if e is None or epoch != e.epoch:
            old = e
            e = self.entries[producer_id] = _Entry(epoch)
            if old is not None:  # (an open transaction stays open until a marker closes it, as Kafka's)
                e.coordinator_epoch, e.txn_first = old.coordinator_epoch, old.txn_first
        e.batches.append((first_seq, last_seq, first_offset))
        e.last_ms = int(time.time() * 1000) if when_ms is None else when_ms
        self.changes += 1
        if transactional and e.txn_first < 0:
            e.txn_first = first_offset

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> tuple[ErrorCode, int]:
        """Whether a coordinator's marker for the producer may be written: (NONE, -1) to append it; (NONE,
        offset) for a repeat of the last marker, at `offset` (it closes nothing and raises neither the producer
        epoch nor the coordinator epoch here): not
        written again, but answered only once the in-sync replicas hold that marker (a first attempt that
        timed out waiting for them must not be taken as done); else the error to answer (the producer's epoch
        is older than this partition's, or the coordinator's epoch is older than the last marker's). A repeat
        whose first marker's offset is unknown here (it lies before the snapshot start-up read) is appended
        again, as Kafka appends every marker: an abort closes an empty transaction then, harmless. A marker
        with a newer coordinator epoch is never a repeat (a coordinator that took the transaction over): it is
        appended, closing nothing, so that the partition, its log and its followers keep that epoch and fence
        the old coordinator's late markers (which would otherwise close the producer's next transaction)."""
        e = self.entries.get(producer_id)
        if e is None:
            return ErrorCode.NONE, -1
        if epoch < e.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH, -1
        if coordinator_epoch < e.coordinator_epoch:
            return ErrorCode.TRANSACTION_COORDINATOR_FENCED, -1
        if e.txn_first >= 0 or epoch > e.epoch or coordinator_epoch > e.coordinator_epoch:
            return ErrorCode.NONE, -1  # (a newer coordinator's: written, so that its epoch is kept, on disk too)
        return ErrorCode.NONE, e.marker_offset

    def end_txn(self, producer_id: int, epoch: int, coordinator_epoch: int, marker_offset: int, commit: bool,
                when_ms: int | None = None) -> CompletedTxn:  # fmt: skip
        """Apply a marker written at `marker_offset`: the producer's open transaction here (if any) is closed,
        its epoch and coordinator epoch raised to the marker's. Returns the transaction closed (an abort
        with nothing open closes an empty one at the marker, as Kafka's)."""
        e = self.entries.get(producer_id)
        if e is None or epoch > e.epoch:
            old = e
            e = self.entries[producer_id] = _Entry(epoch)
            if old is not None:
                e.coordinator_epoch = old.coordinator_epoch
                e.txn_first = old.txn_first
        first = e.txn_first if e.txn_first >= 0 else marker_offset
        if e.txn_first >= 0 or e.closed is None:  # (a marker closing nothing leaves the last closed one noted)
            e.closed = (e.txn_first, marker_offset)
        e.marker_offset = marker_offset
        e.txn_first = -1
        e.coordinator_epoch = max(e.coordinator_epoch, coordinator_epoch)
        e.last_ms = int(time.time() * 1000) if when_ms is None else when_ms
        self.changes += 1
        return CompletedTxn(producer_id, first, marker_offset, not commit)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction still open here (the LSO below the high watermark)."""
        firsts = [e.txn_first for e in self.entries.values() if e.txn_first >= 0]
        return min(firsts) if firsts else None

    def open_transactions(self) -> dict[int, int]:
        """producer id -> the first offset of its open transaction here."""
        return {pid: e.txn_first for pid, e in self.entries.items() if e.txn_first >= 0}

    def repair(self, log_end_offset: int, written: Iterable[BatchHeader]) -> None:
        """After a failed write or fsync: forget the batches the log no longer holds (at or past its end),
        and record the `written` ones (the log's batches from where the failed append began) that are not."""
        self.changes += 1
        for e in self.entries.values():
            e.batches = deque((b for b in e.batches if b[2] < log_end_offset), maxlen=KEEP)
            if e.closed is not None and e.closed[1] >= log_end_offset:  # its marker is gone: open again
                e.txn_first, e.closed = e.closed[0], None
            if e.marker_offset >= log_end_offset:
                e.marker_offset = -1
            if e.txn_first >= log_end_offset:
                e.txn_first = -1
        self.record_batches(written)

    def record_batches(self, headers: Iterable[BatchHeader], marker_of: MarkerOf | None = None) -> list[CompletedTxn]:
        """Record the idempotent and transactional ones of a log's batches (oldest first) that are not recorded
        yet, and apply its control batches (`marker_of` reads a control batch's marker; without it they are
        passed over); returns the transactions the markers closed."""
        done: list[CompletedTxn] = []
        for h in headers:
            if h.is_control:
                marker = marker_of(h) if marker_of is not None and h.producer_id >= 0 else None
                if marker is not None:
                    done.append(self.end_txn(h.producer_id, h.producer_epoch, marker[1], h.base_offset, marker[0],
                                             h.max_timestamp))  # fmt: skip
                continue
            if h.producer_id < 0 or h.base_sequence < 0:
                continue
            e = self.entries.get(h.producer_id)
            if e is not None and e.epoch == h.producer_epoch and any(b[2] == h.base_offset for b in e.batches):
                continue
            self.record(h.producer_id, h.producer_epoch, h.base_sequence,
                        (h.base_sequence + h.last_offset_delta) % (MAX_SEQ + 1), h.base_offset,
                        h.max_timestamp, h.is_transactional)  # fmt: skip
        return done

    def active(self) -> list[tuple[int, int, int, int, int, int]]:
        """(producer id, epoch, last sequence, last write in epoch ms, coordinator epoch, open transaction's
        first offset) of each producer this partition knows, as DescribeProducers lists them."""
        return [(pid, e.epoch, e.batches[-1][1] if e.batches else -1, e.last_ms, e.coordinator_epoch, e.txn_first)
                for pid, e in self.entries.items()]  # fmt: skip

    def snapshot(self, now_ms: int) -> list[SnapshotEntry]:
        """Each producer's last batch, as a snapshot file keeps it (Kafka keeps no more either); producers
        silent for EXPIRATION_MS are left out."""
        out = []
        for pid, e in self.entries.items():
            if e.txn_first < 0 and now_ms - e.last_ms >= EXPIRATION_MS:
                continue  # (a producer with an open transaction is kept: the LSO waits for it)
            if e.batches:
                first_seq, last_seq, first_offset = e.batches[-1]
                delta = (last_seq - first_seq) % (MAX_SEQ + 1)
                out.append(SnapshotEntry(pid, e.epoch, last_seq, first_offset + delta, delta, e.last_ms,
                                         e.coordinator_epoch, e.txn_first))  # fmt: skip
            elif e.coordinator_epoch >= 0 or e.txn_first >= 0:  # an epoch only a marker set
                out.append(SnapshotEntry(pid, e.epoch, -1, -1, 0, e.last_ms, e.coordinator_epoch, e.txn_first))
        return out

    @classmethod
    def from_snapshot(cls, entries: Iterable[SnapshotEntry], now_ms: int) -> ProducerStates:
        states = cls()
        for e in entries:
            if now_ms - e.timestamp < EXPIRATION_MS or e.current_txn_first_offset >= 0:
                entry = states.entries[e.producer_id] = _Entry(e.epoch, last_ms=e.timestamp)
                entry.coordinator_epoch, entry.txn_first = e.coordinator_epoch, e.current_txn_first_offset
                if e.last_sequence >= 0:
                    first_seq = (e.last_sequence - e.offset_delta) % (MAX_SEQ + 1)
                    entry.batches.append((first_seq, e.last_sequence, e.last_offset - e.offset_delta))
        return states
