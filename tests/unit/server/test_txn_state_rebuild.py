"""The producer state a partition rebuilds from its log (producer_state_io.load_states) never skips a range: at start-up
after a crash and after a follower's truncation, from the newest snapshot at or below the log end (one is taken
at every segment roll) or from the log start; the `.txnindex` rebuilt over the same range; the sequence checks
around transactions (Kafka's order) and the last stable offset capped at the log start."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

from broker.log import producer_snapshot
from broker.log.config import LogConfig
from broker.log.log import PartitionLog
from broker.log.producer_state import ProducerStates
from broker.log.producer_state_io import load_states, maybe_snapshot, take_snapshot
from broker.log.txn_index import AbortedTxn, index_path, marker_record
from broker.protocol.errors import ErrorCode
from broker.records.batch import Record, build_batch
from broker.server.handlers.fetch import last_stable_offset

E = ErrorCode
MIB = 1 << 20


def _now() -> int:
    return int(time.time() * 1000)  # (old timestamps would roll a segment per batch: segment.ms)


def _txn(log: PartitionLog, states: ProducerStates, pid: int, seq: int, size: int = 100) -> int:
    r = log.append(build_batch([Record(0, _now(), None, b"t" * size)], producer_id=pid, producer_epoch=0,
                               base_sequence=seq, transactional=True))  # fmt: skip
    states.record(pid, 0, seq, seq, r.first_offset, transactional=True)
    return r.first_offset


def _marker(log: PartitionLog, states: ProducerStates, pid: int, commit: bool, coordinator_epoch: int = 3) -> int:
    key, value = marker_record(commit, coordinator_epoch)
    m = build_batch([Record(0, _now(), key, value)], producer_id=pid, producer_epoch=0, transactional=True,
                    control=True)  # fmt: skip
    offset = log.append(m, validated=log.validate(m, client=False)).first_offset
    states.end_txn(pid, 0, coordinator_epoch, offset, commit)
    return offset


def _plain(log: PartitionLog, n: int = 1, size: int = 1000) -> None:
    for _ in range(n):
        log.append(build_batch([Record(0, _now(), None, b"p" * size)]))


def _crash_and_reopen(log: PartitionLog) -> PartitionLog:
    """As a kill -9 after the last flush (its recovery point checkpointed): no snapshot written at the end."""
    log.flush()
    log.close()
    return PartitionLog(log.dir, log.config, clean=False, recovery_point=log.recovery_point)


def _snapshotting_log(path: Path, states: ProducerStates, **config) -> PartitionLog:
    """A log that snapshots `states` at each roll, as the broker's (LogManager.on_roll)."""
    log = PartitionLog(path, LogConfig(**config))
    log.on_roll = lambda plog: take_snapshot(plog, states, _now())
    return log


def test_a_transaction_begun_segments_back_is_open_after_a_crash_without_any_snapshot(tmp_path) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig(segment_bytes=64 * 1024))
    states = ProducerStates()
    first = _txn(log, states, 7, 0)
    _plain(log, 200)
    assert len(log.bases) > 3 and not producer_snapshot.snapshots(log.dir)
    log = _crash_and_reopen(log)
    assert load_states(log).open_transactions() == {7: first}
    log.close()


def test_a_transaction_more_than_16_mib_back_in_the_active_segment_is_open_after_a_crash(tmp_path) -> None:
    log = PartitionLog(tmp_path / "t-0")
    states = ProducerStates()
    first = _txn(log, states, 7, 0)
    _plain(log, 17, 1_000_000)
    log = _crash_and_reopen(log)
    loaded = load_states(log)
    assert loaded.open_transactions() == {7: first}
    # its abort then indexes the whole transaction, not an empty one at the marker
    done = loaded.end_txn(7, 0, 3, log.log_end_offset, commit=False)
    assert (done.first_offset, done.aborted) == (first, True)
    log.close()


def test_a_marker_after_the_snapshot_closes_its_transaction_however_far_back(tmp_path) -> None:
    """A snapshot taken while the transaction was open, its marker, then more than 16 MiB: the marker is read."""
    log = PartitionLog(tmp_path / "t-0")
    states = ProducerStates()
    _txn(log, states, 7, 0)
    assert maybe_snapshot(log, states, _now()) and not maybe_snapshot(log, states, _now())  # (the end moved?)
    marker = _marker(log, states, 7, commit=True)
    _plain(log, 17, 1_000_000)
    log = _crash_and_reopen(log)
    loaded = load_states(log)
    assert loaded.open_transactions() == {} and loaded.first_unstable_offset() is None
    assert loaded.entries[7].marker_offset == marker
    log.close()


def test_a_snapshot_is_taken_at_every_roll_and_those_at_segment_bases_are_kept(tmp_path) -> None:
    states = ProducerStates()
    log = _snapshotting_log(tmp_path / "t-0", states, segment_bytes=16 * 1024)
    _txn(log, states, 7, 0)
    _plain(log, 60)
    snaps = [offset for offset, _ in producer_snapshot.snapshots(log.dir)]
    assert snaps == log.bases[1:]  # one at each roll, at the new segment's base
    assert not maybe_snapshot(log, states, _now())  # no producer changed since the last roll's snapshot
    second = _txn(log, states, 8, 0)
    assert maybe_snapshot(log, states, _now())  # the minutely one at the log end
    _txn(log, states, 8, 1)
    maybe_snapshot(log, states, _now())  # replaces the older minutely one, keeps the segment bases'
    assert [o for o, _ in producer_snapshot.snapshots(log.dir)] == log.bases[1:] + [log.log_end_offset]
    # the newest is read at start-up, with the transaction that began segments before it
    log = _crash_and_reopen(log)
    assert load_states(log).open_transactions() == {7: 0, 8: second}
    log.close()


def test_truncating_away_two_markers_reopens_the_transaction_they_closed(tmp_path) -> None:
    """Kafka's truncateTo: the state is rebuilt from the newest snapshot below the cut and the log after it."""
    states = ProducerStates()
    log = _snapshotting_log(tmp_path / "t-0", states, segment_bytes=4 * 1024)
    first = _txn(log, states, 7, 0)
    _plain(log, 3)
    commit = _marker(log, states, 7, commit=True)
    _txn(log, states, 7, 1)
    _plain(log, 5)
    _marker(log, states, 7, commit=False)
    _plain(log, 5)
    assert len(producer_snapshot.snapshots(log.dir)) >= 2
    log.truncate_to(commit)  # both markers cut away (a follower whose leader never had them)
    rebuilt = load_states(log)
    assert rebuilt.open_transactions() == {7: first}
    assert all(o <= log.log_end_offset for o, _ in producer_snapshot.snapshots(log.dir))
    # the retried marker copied from the new leader aborts the whole transaction
    assert rebuilt.end_txn(7, 0, 3, log.log_end_offset, commit=False).first_offset == first
    log.close()


def test_after_a_restart_a_truncation_below_the_marker_reopens_its_transaction(tmp_path) -> None:
    states = ProducerStates()
    log = _snapshotting_log(tmp_path / "t-0", states, segment_bytes=4 * 1024)
    _plain(log, 5)
    first = _txn(log, states, 7, 0)
    marker = _marker(log, states, 7, commit=False)
    _plain(log, 2)
    take_snapshot(log, states, _now())  # a clean shutdown
    log.close()
    log = PartitionLog(log.dir, log.config)
    loaded = load_states(log)
    assert loaded.open_transactions() == {}
    log.truncate_to(marker)
    assert load_states(log).open_transactions() == {7: first}
    assert log.txn_index.all() == []  # the abort's entry went with its marker
    log.close()


def test_the_txnindex_is_rebuilt_over_the_range_start_up_reads(tmp_path) -> None:
    """A crash between a marker's append and its `.txnindex` entry: start-up notes the abort again."""
    log = PartitionLog(tmp_path / "t-0", LogConfig(segment_bytes=4 * 1024))
    states = ProducerStates()
    first = _txn(log, states, 7, 0)
    _plain(log, 6)
    marker = _marker(log, states, 7, commit=False)  # (its entry never written: the crash came first)
    _plain(log, 6)
    assert len(log.bases) > 2 and log.txn_index.all() == []
    log = _crash_and_reopen(log)
    load_states(log)
    assert log.txn_index.all() == [AbortedTxn(7, first, marker, marker + 1)]
    assert index_path(log.dir, log.txn_index.segment_for(log.bases, marker)).stat().st_size == 34
    load_states(log)  # (once each)
    assert len(log.txn_index.all()) == 1
    log.close()


def test_a_repeated_marker_waits_for_the_first_ones_offset() -> None:
    s = ProducerStates()
    s.record(1, 0, 0, 0, 10, transactional=True)
    assert s.check_marker(1, 0, 2) == (E.NONE, -1)  # to write
    s.end_txn(1, 0, 2, 11, commit=True)
    assert s.check_marker(1, 0, 2) == (E.NONE, 11)  # a retry: answered once the ISR holds offset 11
    s.repair(11, [])  # the marker was cut away: it is written again
    assert s.check_marker(1, 0, 2) == (E.NONE, -1)
    s.end_txn(1, 0, 2, 11, commit=True)
    back = ProducerStates.from_snapshot(producer_snapshot.decode(producer_snapshot.encode(s.snapshot(0))), 0)
    assert back.check_marker(1, 0, 2) == (E.NONE, -1)  # its offset unknown after a restart: appended again


def test_sequence_checks_around_transactions_in_kafkas_order() -> None:
    s = ProducerStates()
    s.record(1, 0, 0, 0, 10, transactional=True)
    # a plain batch at a newer epoch while the transaction is open: still INVALID_TXN_STATE
    assert s.check(1, 1, 0, 0, transactional=False) == (E.INVALID_TXN_STATE, -1)
    s.end_txn(1, 1, 4, 11, commit=False)  # the coordinator's abort raised the epoch to 1
    assert s.check(1, 1, 5, 5, transactional=True) == (E.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
    assert s.check(1, 1, 0, 0, transactional=True) == (E.NONE, -1)


def test_the_last_stable_offset_is_never_below_the_log_start(tmp_path) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig(segment_bytes=16 * 1024, retention_bytes=32 * 1024))
    states = ProducerStates()
    _txn(log, states, 7, 0)
    _plain(log, 100)
    log.delete_retained()
    assert log.log_start_offset > 0
    log.producer_states = states
    b = SimpleNamespace(high_watermark=lambda plog: plog.log_end_offset)
    lso = last_stable_offset(b, log)
    assert lso == log.log_start_offset
    assert log.read(lso, MIB) is not None  # a read_committed consumer reads from there (no OFFSET_OUT_OF_RANGE)
    log.close()


def test_a_takeover_marker_raises_the_coordinator_epoch_so_the_old_coordinators_late_marker_is_fenced(
    tmp_path,
) -> None:
    # coordinator A writes T1's marker (coordinator epoch 3); B takes the Prepare over (epoch 4) and sends its
    # marker again: it is written (not taken as a repeat), so the partition, its log and its followers hold 4
    log = PartitionLog(tmp_path / "t-0", LogConfig())
    states = ProducerStates()
    _txn(log, states, 5, 0)
    first = _marker(log, states, 5, commit=False, coordinator_epoch=3)
    assert states.check_marker(5, 0, 3) == (E.NONE, first)  # A's own retry: a repeat
    assert states.check_marker(5, 0, 4) == (E.NONE, -1)  # B's: appended
    _marker(log, states, 5, commit=False, coordinator_epoch=4)
    assert states.entries[5].coordinator_epoch == 4
    t2 = _txn(log, states, 5, 1)  # the producer's next transaction, same producer epoch
    assert states.check_marker(5, 0, 3) == (E.TRANSACTION_COORDINATOR_FENCED, -1)  # A's late marker
    assert states.open_transactions() == {5: t2}
    for rebuilt in (load_states(log), ProducerStates.from_snapshot(states.snapshot(_now()), _now())):
        assert rebuilt.check_marker(5, 0, 3) == (E.TRANSACTION_COORDINATOR_FENCED, -1)
        assert rebuilt.open_transactions() == {5: t2}
    log.close()
