"""A transactional id's state and the transaction coordinator's rules over it (pure: no I/O).

The state machine is Kafka 2.8's `TransactionMetadata` (KIP-98):

    Empty ──AddPartitions/AddOffsets──▶ Ongoing ──EndTxn(commit)──▶ PrepareCommit ──markers──▶ CompleteCommit
      ▲                                   │ EndTxn(abort), a timeout, a fencing InitProducerId
      │                                   ▼
      └──── InitProducerId ◀── CompleteAbort ◀──markers── PrepareAbort

A Complete state takes a new transaction like Empty does. Each transaction an id begins gets the next
`txn_number` (kept across epochs of one producer id): TxnOffsetCommit's held offsets carry it, so offsets
held for a transaction that ended are never taken for a later one of the same producer id and epoch (a
client's abort does not raise the epoch).

`coordinator_epoch` is the coordinator epoch of the id's markers (Kafka's is the transaction log partition's
leader epoch). It only grows: set at a Prepare write to that write's znode version when the state has none
(-1: written by a kafkactl that used the version itself), kept by every later state, and raised by one only
when a coordinator writes a Prepare again (it took the id over, or retries a completion that failed), so
that markers a previous coordinator may still have in flight are fenced by the partitions. It stays at most
the znode's version (which rises 3-4 times a transaction; an int32 epoch taken from it would overflow after
about 2^31 / 4 transactions of one id): it rises once per takeover or retried completion, not per
transaction, so its int32 bound is out of reach.

`broker.coordinator.txn.coordinator` applies these rules, `broker.coordinator.txn.store` keeps the result in ZooKeeper
(its JSON is `TxnMeta.to_json`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from broker.protocol.errors import ErrorCode

#: the largest producer epoch (Kafka's Short.MaxValue); an id whose epoch would pass it gets a new producer id
MAX_EPOCH = 32767


class TxnState(StrEnum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"

    @property
    def preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def open(self) -> bool:
        """No transaction under way: a new one may begin (Empty or Complete*)."""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class TxnMeta:
    """What a coordinator keeps of one transactional id (Kafka's TransactionMetadata)."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    last_producer_epoch: int = -1
    partitions: frozenset[TopicPartition] = frozenset()
    groups: frozenset[str] = frozenset()
    start_ms: int = -1
    update_ms: int = -1
    txn_number: int = 0  # transactions this id began (the current one's number while one is under way)
    coordinator_epoch: int = -1  # its markers' coordinator epoch (-1: not recorded, see `marker_epoch`)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1, "producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
            "last_producer_epoch": self.last_producer_epoch, "timeout_ms": self.timeout_ms, "state": str(self.state),
            "partitions": sorted([t, p] for t, p in self.partitions), "groups": sorted(self.groups),
            "start_ms": self.start_ms, "update_ms": self.update_ms, "txn_number": self.txn_number,
            "coordinator_epoch": self.coordinator_epoch,
        }  # fmt: skip

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TxnMeta:
        return cls(
            producer_id=int(d["producer_id"]), producer_epoch=int(d["producer_epoch"]),
            timeout_ms=int(d["timeout_ms"]), state=TxnState(d["state"]),
            last_producer_epoch=int(d.get("last_producer_epoch", -1)),
            partitions=frozenset((str(t), int(p)) for t, p in d.get("partitions", ())),
            groups=frozenset(d.get("groups", ())), start_ms=int(d.get("start_ms", -1)),
            update_ms=int(d.get("update_ms", -1)), txn_number=int(d.get("txn_number", 0)),
            coordinator_epoch=int(d.get("coordinator_epoch", -1)),
        )  # fmt: skip


def fenced_error(version: int, first_fenced_version: int) -> ErrorCode:
    """PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH for the versions before KIP-588 gave clients the former."""
    return ErrorCode.PRODUCER_FENCED if version >= first_fenced_version else ErrorCode.INVALID_PRODUCER_EPOCH


def check_producer(meta: TxnMeta | None, producer_id: int, producer_epoch: int) -> ErrorCode:
    """Whether a request of (producer id, epoch) is the id's current producer: INVALID_PRODUCER_ID_MAPPING for
    another (or no) producer id, PRODUCER_FENCED for another epoch (the caller maps it by version)."""
    if meta is None or meta.producer_id != producer_id:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    if meta.producer_epoch != producer_epoch:
        return ErrorCode.PRODUCER_FENCED
    return ErrorCode.NONE


def add_to_txn(meta: TxnMeta, partitions: set[TopicPartition], groups: set[str], now_ms: int
               ) -> tuple[ErrorCode, TxnMeta | None]:  # fmt: skip
    """AddPartitionsToTxn / AddOffsetsToTxn of the current producer: (error, the new state to write; None:
    nothing to write). CONCURRENT_TRANSACTIONS while a Prepare is being completed, INVALID_TXN_STATE when
    the id is Dead."""
    if meta.state.preparing:
        return ErrorCode.CONCURRENT_TRANSACTIONS, None
    if meta.state == TxnState.DEAD:
        return ErrorCode.INVALID_TXN_STATE, None
    if meta.state == TxnState.ONGOING and partitions <= meta.partitions and groups <= meta.groups:
        return ErrorCode.NONE, None  # (all there already)
    if meta.state == TxnState.ONGOING:
        return ErrorCode.NONE, replace(meta, partitions=meta.partitions | partitions, groups=meta.groups | groups,
                                       update_ms=now_ms)  # fmt: skip
    return ErrorCode.NONE, replace(meta, state=TxnState.ONGOING, partitions=frozenset(partitions),
                                   groups=frozenset(groups), start_ms=now_ms, update_ms=now_ms,
                                   txn_number=meta.txn_number + 1)  # fmt: skip


def end_txn(meta: TxnMeta, commit: bool, now_ms: int) -> tuple[ErrorCode, TxnMeta | None]:
    """EndTxn of the current producer: (error, the Prepare state to write; None: nothing to do), as Kafka's
    `TransactionCoordinator.endTransaction`: a retried EndTxn of a completed (or completing) transaction of
    the same outcome succeeds (CONCURRENT_TRANSACTIONS while it is still completing), the other outcome is
    INVALID_TXN_STATE, and so is ending no transaction (Empty)."""
    state = meta.state
    if state == TxnState.ONGOING:
        target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        return ErrorCode.NONE, replace(meta, state=target, update_ms=now_ms)
    if state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
        return ErrorCode.NONE, None
    if state == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
        return ErrorCode.CONCURRENT_TRANSACTIONS, None
    return ErrorCode.INVALID_TXN_STATE, None


def completed(meta: TxnMeta, now_ms: int) -> TxnMeta:
    """The Complete state that follows a Prepare once every partition has its marker."""
    target = TxnState.COMPLETE_COMMIT if meta.state == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
    return replace(meta, state=target, partitions=frozenset(), groups=frozenset(), update_ms=now_ms)


def abort_with_bump(meta: TxnMeta, now_ms: int) -> TxnMeta:
    """An Ongoing transaction aborted by the coordinator (its timeout, or a new producer's InitProducerId),
    with the epoch raised so the old producer's markers fence it (Kafka 2.8's `prepareAbortOrFenceProducer`)."""
    return replace(meta, state=TxnState.PREPARE_ABORT, last_producer_epoch=meta.producer_epoch,
                   producer_epoch=meta.producer_epoch + 1, update_ms=now_ms)  # fmt: skip


def next_producer(meta: TxnMeta | None, new_pid: int, timeout_ms: int, now_ms: int) -> TxnMeta:
    """InitProducerId of an id with no transaction under way: epoch 0 for a new id, the epoch raised by one for
    a known one (fencing its earlier producer), or a new producer id (`new_pid`) at epoch 0 when the epoch
    would overflow."""
    if meta is None:
        return TxnMeta(new_pid, 0, timeout_ms, TxnState.EMPTY, -1, update_ms=now_ms)
    if meta.producer_epoch + 1 >= MAX_EPOCH:
        return TxnMeta(new_pid, 0, timeout_ms, TxnState.EMPTY, -1, update_ms=now_ms,
                       coordinator_epoch=meta.coordinator_epoch)  # fmt: skip
    return TxnMeta(meta.producer_id, meta.producer_epoch + 1, timeout_ms, TxnState.EMPTY,
                   last_producer_epoch=meta.producer_epoch, update_ms=now_ms, txn_number=meta.txn_number,
                   coordinator_epoch=meta.coordinator_epoch)  # fmt: skip


def marker_epoch(meta: TxnMeta, version: int) -> int:
    """The coordinator epoch of the markers of `meta`, a Prepare state at znode `version`: the one it records,
    or (a state an earlier kafkactl wrote, which kept none) the version itself, as that kafkactl used."""
    return meta.coordinator_epoch if meta.coordinator_epoch >= 0 else version


def txn_offsets_error(meta: TxnMeta | None, group: str, producer_id: int, producer_epoch: int) -> ErrorCode:
    """Whether a TxnOffsetCommit of (producer id, epoch) may hold offsets for `group` in the id's transaction
    (`meta`: the id's state, None when unknown): only the current producer's, while its transaction is Ongoing
    with the group added (AddOffsetsToTxn)."""
    if meta is None or meta.producer_id != producer_id:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    if meta.producer_epoch != producer_epoch:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if meta.state != TxnState.ONGOING or group not in meta.groups:
        return ErrorCode.INVALID_TXN_STATE
    return ErrorCode.NONE


def holds_offsets_of(meta: TxnMeta | None, producer_id: int, producer_epoch: int, txn_number: int) -> bool:
    """Whether offsets held with this tag (the TxnOffsetCommit's producer id and epoch, and the transaction's
    number when they were held) belong to the id's transaction under way (Ongoing, or being completed); any
    other are left behind by a transaction that ended."""
    return (
        meta is not None
        and (meta.state == TxnState.ONGOING or meta.state.preparing)
        and (meta.producer_id, meta.producer_epoch, meta.txn_number) == (producer_id, producer_epoch, txn_number)
    )


def timed_out(meta: TxnMeta, now_ms: int) -> bool:
    """An Ongoing transaction open longer than its timeout (the sweep aborts it)."""
    return meta.state == TxnState.ONGOING and meta.start_ms >= 0 and now_ms - meta.start_ms > meta.timeout_ms


def expired(meta: TxnMeta, now_ms: int, expiration_ms: int) -> bool:
    """An id with no transaction under way, unused for `transactional.id.expiration.ms` (then removed)."""
    return meta.state.open and meta.update_ms >= 0 and now_ms - meta.update_ms > expiration_ms
