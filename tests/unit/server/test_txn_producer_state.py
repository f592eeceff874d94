"""Producer state for transactions: a transactional batch opens a transaction, a marker closes it, fencing by
the marker's producer epoch and coordinator epoch, the first unstable offset (LSO), the same state rebuilt
from the log's batches (a follower, start-up) and kept by the snapshot."""

from __future__ import annotations

from broker.log import producer_snapshot
from broker.log.producer_state import CompletedTxn, ProducerStates
from broker.protocol.errors import ErrorCode
from broker.records.batch import CONTROL_BIT, TRANSACTIONAL_BIT, BatchHeader

E = ErrorCode


def _header(offset: int, pid: int, epoch: int, seq: int, n: int = 1, *, txn: bool = True,
            control: bool = False) -> BatchHeader:  # fmt: skip
    attrs = (TRANSACTIONAL_BIT if txn else 0) | (CONTROL_BIT if control else 0)
    return BatchHeader(offset, 0, 0, 2, 0, attrs, n - 1, 0, 1000, pid, epoch, seq, n)


def test_a_transaction_opens_with_its_first_batch_and_a_marker_closes_it() -> None:
    s = ProducerStates()
    assert s.first_unstable_offset() is None
    s.record(1, 0, 0, 2, 10, transactional=True)
    s.record(2, 0, 0, 0, 13, transactional=True)
    s.record(1, 0, 3, 3, 14, transactional=True)
    assert s.first_unstable_offset() == 10 and s.open_transactions() == {1: 10, 2: 13}
    assert s.check_marker(1, 0, 0) == (E.NONE, -1)
    assert s.end_txn(1, 0, 0, 15, commit=True) == CompletedTxn(1, 10, 15, False)
    assert s.first_unstable_offset() == 13
    assert s.end_txn(2, 0, 0, 16, commit=False) == CompletedTxn(2, 13, 16, True)
    assert s.first_unstable_offset() is None
    # repeated: nothing to close and no newer epoch, so it is not written again but answered once the
    # replicas hold the first one (its offset)
    assert s.check_marker(1, 0, 0) == (E.NONE, 15)
    # an unknown producer's marker is written (it may have raised its epoch elsewhere)
    assert s.check_marker(99, 0, 0) == (E.NONE, -1)


def test_fencing_by_producer_epoch_and_coordinator_epoch() -> None:
    s = ProducerStates()
    s.record(1, 3, 0, 0, 0, transactional=True)
    s.end_txn(1, 3, 5, 1, commit=True)
    s.record(1, 3, 1, 1, 2, transactional=True)
    assert s.check_marker(1, 3, 4) == (E.TRANSACTION_COORDINATOR_FENCED, -1)
    assert s.check_marker(1, 2, 9) == (E.INVALID_PRODUCER_EPOCH, -1)
    assert s.check_marker(1, 4, 5) == (E.NONE, -1)  # the coordinator bumped the epoch: abort, fence
    s.end_txn(1, 4, 5, 3, commit=False)
    assert s.check(1, 3, 2, 2, True) == (E.INVALID_PRODUCER_EPOCH, -1)  # the zombie
    assert s.check(1, 4, 0, 0, True) == (E.NONE, -1)  # the new producer, from sequence 0
    s.record(1, 4, 0, 0, 4, transactional=True)
    assert s.check(1, 4, 1, 1, False) == (E.INVALID_TXN_STATE, -1)  # a plain batch inside a transaction
    assert s.check(1, 4, 1, 1, True) == (E.NONE, -1)
    assert s.active() == [(1, 4, 0, s.entries[1].last_ms, 5, 4)]


def test_the_same_state_from_the_log_batches_and_from_the_snapshot() -> None:
    markers = {20: (True, 2), 30: (False, 2)}
    headers = [
        _header(10, 1, 0, 0, 3),
        _header(13, 2, 0, 0, 2),
        _header(15, 3, 0, 0, 1, txn=False),  # an idempotent producer, no transaction
        _header(16, 1, 0, 3, 4),
        _header(20, 1, 0, -1, control=True),
        _header(21, 1, 0, 7, 2),
        _header(30, 2, 0, -1, control=True),
    ]
    s = ProducerStates()
    done = s.record_batches(headers, lambda h: markers[h.base_offset])
    assert done == [CompletedTxn(1, 10, 20, False), CompletedTxn(2, 13, 30, True)]
    assert s.open_transactions() == {1: 21} and s.first_unstable_offset() == 21
    assert s.entries[1].coordinator_epoch == 2
    data = producer_snapshot.encode(s.snapshot(now_ms=2000))
    back = ProducerStates.from_snapshot(producer_snapshot.decode(data), now_ms=2000)
    assert back.open_transactions() == {1: 21}
    assert {pid: (e.epoch, e.coordinator_epoch, list(e.batches)[-1:]) for pid, e in back.entries.items()} == {
        pid: (e.epoch, e.coordinator_epoch, list(e.batches)[-1:]) for pid, e in s.entries.items()}  # fmt: skip
    # a producer with an open transaction is kept past the expiration; an idle one is not
    late = ProducerStates.from_snapshot(producer_snapshot.decode(data), now_ms=10**12)
    assert set(late.entries) == {1}


def test_repair_forgets_a_transaction_the_log_no_longer_holds() -> None:
    s = ProducerStates()
    s.record(1, 0, 0, 0, 5, transactional=True)
    s.repair(5, [])
    assert s.first_unstable_offset() is None


def test_repair_reopens_a_transaction_whose_marker_the_log_lost() -> None:
    """A follower cut back below a marker (its leader never had it): the transaction is open again."""
    s = ProducerStates()
    s.record(1, 0, 0, 1, 3, transactional=True)
    s.end_txn(1, 0, 0, 5, commit=False)
    s.repair(5, [])
    assert s.open_transactions() == {1: 3}
    s.end_txn(1, 0, 0, 5, commit=True)
    s.repair(3, [])
    assert s.open_transactions() == {}


def test_a_transaction_opened_before_the_active_segment_survives_a_crash(tmp_path) -> None:
    """The broker's minutely snapshot (when the log end moved): start-up (no clean shutdown) reads the log from
    there and finds the transaction though its first batch lies in an older segment."""
    from broker.log.log import PartitionLog
    from broker.log.producer_state_io import load_states, maybe_snapshot
    from broker.records.batch import Record, build_batch

    log = PartitionLog(tmp_path / "t-0")
    s = ProducerStates()
    txn = build_batch([Record(0, 1000, None, b"t")], producer_id=1, producer_epoch=0, base_sequence=0,
                      transactional=True)  # fmt: skip
    s.record(1, 0, 0, 0, log.append(txn).first_offset, transactional=True)
    log.roll()
    log.append(build_batch([Record(0, 1000, None, b"plain")]))
    assert maybe_snapshot(log, s, 1000)
    assert not maybe_snapshot(log, s, 1000)  # the log end did not move
    log.close()
    reopened = PartitionLog(tmp_path / "t-0", clean=False)
    assert load_states(reopened).open_transactions() == {1: 0}
    reopened.close()


def test_start_up_reads_markers_below_the_log_start_and_notes_the_aborts(tmp_path) -> None:
    """DeleteRecords moved the log start past a marker in the active segment: start-up still reads it (the
    transaction is closed) and the abort is in the .txnindex."""
    import time

    from broker.log.log import PartitionLog
    from broker.log.producer_state_io import load_states
    from broker.log.txn_index import AbortedTxn, marker_record
    from broker.records.batch import Record, build_batch

    now = int(time.time() * 1000)  # (old timestamps would roll a segment per batch: segment.ms)
    log = PartitionLog(tmp_path / "t-0")
    log.append(build_batch([Record(0, now, None, b"t")], producer_id=1, producer_epoch=0, base_sequence=0,
                           transactional=True))  # fmt: skip
    key, value = marker_record(False, 3)
    marker = build_batch([Record(0, now, key, value)], producer_id=1, producer_epoch=0, transactional=True,
                         control=True)  # fmt: skip
    log.append(marker, validated=log.validate(marker, client=False))
    log.append(build_batch([Record(0, now, None, b"plain")]))
    log.advance_log_start(2)
    log.close()
    reopened = PartitionLog(tmp_path / "t-0", clean=False, log_start_offset=2)
    states = load_states(reopened)
    assert states.open_transactions() == {} and states.entries[1].coordinator_epoch == 3
    assert reopened.txn_index.all() == [AbortedTxn(1, 0, 1, 2)]
    reopened.close()
