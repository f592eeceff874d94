"""The transaction coordinator's state machine (broker.coordinator.txn.state): pure rules, no I/O."""

from __future__ import annotations

from dataclasses import replace

from broker.coordinator.txn import state as st
from broker.coordinator.txn.state import TxnMeta, TxnState
from broker.protocol.errors import ErrorCode

T0 = 1_000_000


def _ongoing(**kw) -> TxnMeta:
    base = TxnMeta(7, 3, 60000, TxnState.ONGOING, 2, frozenset({("t", 0)}), frozenset(), T0, T0)
    return replace(base, **kw)


def test_json_round_trip() -> None:
    meta = _ongoing(groups=frozenset({"g"}), partitions=frozenset({("a", 1), ("b/c", 0)}))
    assert TxnMeta.from_json(meta.to_json()) == meta
    assert meta.to_json()["state"] == "Ongoing" and meta.to_json()["partitions"] == [["a", 1], ["b/c", 0]]


def test_a_new_id_starts_at_epoch_0_and_a_known_one_is_bumped() -> None:
    first = st.next_producer(None, 42, 5000, T0)
    assert (first.producer_id, first.producer_epoch, first.state) == (42, 0, TxnState.EMPTY)
    again = st.next_producer(replace(first, state=TxnState.COMPLETE_COMMIT), -1, 6000, T0 + 1)
    assert (again.producer_id, again.producer_epoch, again.last_producer_epoch, again.timeout_ms) == (42, 1, 0, 6000)


def test_epoch_overflow_takes_a_new_producer_id() -> None:
    meta = TxnMeta(42, st.MAX_EPOCH - 1, 5000, TxnState.COMPLETE_ABORT)
    nxt = st.next_producer(meta, 43, 5000, T0)
    assert (nxt.producer_id, nxt.producer_epoch) == (43, 0)


def test_check_producer() -> None:
    meta = _ongoing()
    assert st.check_producer(meta, 7, 3) == ErrorCode.NONE
    assert st.check_producer(meta, 8, 3) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert st.check_producer(None, 7, 3) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert st.check_producer(meta, 7, 2) == ErrorCode.PRODUCER_FENCED
    assert (
        st.fenced_error(1, 2) == ErrorCode.INVALID_PRODUCER_EPOCH and st.fenced_error(2, 2) == ErrorCode.PRODUCER_FENCED
    )


def test_adding_partitions_begins_and_extends_a_transaction() -> None:
    empty = TxnMeta(7, 0, 60000)
    error, nxt = st.add_to_txn(empty, {("t", 0)}, set(), T0)
    assert error == ErrorCode.NONE and nxt is not None
    assert nxt.state == TxnState.ONGOING and nxt.start_ms == T0 and nxt.partitions == {("t", 0)}
    error, again = st.add_to_txn(nxt, {("t", 0)}, set(), T0 + 5)
    assert error == ErrorCode.NONE and again is None  # (nothing new: nothing to write)
    error, more = st.add_to_txn(nxt, {("t", 1)}, {"g"}, T0 + 5)
    assert more is not None and more.partitions == {("t", 0), ("t", 1)} and more.groups == {"g"}
    assert more.start_ms == T0  # (the transaction's start stays)
    completed = replace(nxt, state=TxnState.COMPLETE_COMMIT, partitions=frozenset())
    _, fresh = st.add_to_txn(completed, {("u", 0)}, set(), T0 + 9)
    assert fresh is not None and fresh.partitions == {("u", 0)} and fresh.start_ms == T0 + 9


def test_nothing_is_added_while_a_transaction_completes() -> None:
    for state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        assert st.add_to_txn(_ongoing(state=state), {("t", 9)}, set(), T0) == (ErrorCode.CONCURRENT_TRANSACTIONS, None)
    assert st.add_to_txn(_ongoing(state=TxnState.DEAD), {("t", 9)}, set(), T0)[0] == ErrorCode.INVALID_TXN_STATE


def test_end_txn_transitions_and_retries() -> None:
    error, nxt = st.end_txn(_ongoing(), True, T0)
    assert error == ErrorCode.NONE and nxt is not None and nxt.state == TxnState.PREPARE_COMMIT
    error, nxt = st.end_txn(_ongoing(), False, T0)
    assert nxt is not None and nxt.state == TxnState.PREPARE_ABORT
    assert st.end_txn(_ongoing(state=TxnState.PREPARE_COMMIT), True, T0) == (ErrorCode.CONCURRENT_TRANSACTIONS, None)
    assert st.end_txn(_ongoing(state=TxnState.PREPARE_COMMIT), False, T0)[0] == ErrorCode.INVALID_TXN_STATE
    assert st.end_txn(_ongoing(state=TxnState.COMPLETE_COMMIT), True, T0) == (ErrorCode.NONE, None)  # a retry
    assert st.end_txn(_ongoing(state=TxnState.COMPLETE_ABORT), True, T0)[0] == ErrorCode.INVALID_TXN_STATE
    assert st.end_txn(_ongoing(state=TxnState.EMPTY), False, T0)[0] == ErrorCode.INVALID_TXN_STATE


def test_completion_clears_the_transaction() -> None:
    done = st.completed(_ongoing(state=TxnState.PREPARE_COMMIT, groups=frozenset({"g"})), T0 + 1)
    assert done.state == TxnState.COMPLETE_COMMIT and not done.partitions and not done.groups
    assert st.completed(_ongoing(state=TxnState.PREPARE_ABORT), T0).state == TxnState.COMPLETE_ABORT


def test_a_coordinator_abort_raises_the_epoch() -> None:
    aborting = st.abort_with_bump(_ongoing(), T0)
    assert aborting.state == TxnState.PREPARE_ABORT
    assert (aborting.producer_epoch, aborting.last_producer_epoch) == (4, 3)
    assert aborting.partitions == {("t", 0)}  # (the markers go to them)


def test_timeout_and_expiration() -> None:
    meta = _ongoing(timeout_ms=1000)
    assert not st.timed_out(meta, T0 + 1000) and st.timed_out(meta, T0 + 1001)
    assert not st.timed_out(replace(meta, state=TxnState.PREPARE_ABORT), T0 + 10**6)
    idle = replace(meta, state=TxnState.COMPLETE_COMMIT, update_ms=T0)
    assert st.expired(idle, T0 + 501, 500) and not st.expired(idle, T0 + 500, 500)
    assert not st.expired(meta, T0 + 10**9, 500)  # (a transaction under way never expires)


def test_each_transaction_gets_the_next_number_and_offsets_are_tagged_with_it() -> None:
    """A client's abort keeps the epoch: only the transaction number tells transaction 2's held offsets from
    the ones transaction 1 left behind."""
    empty = TxnMeta(7, 3, 60000, TxnState.EMPTY, txn_number=4)
    _, first = st.add_to_txn(empty, {("t", 0)}, {"g"}, T0)
    assert first is not None and first.txn_number == 5
    _, more = st.add_to_txn(first, {("t", 1)}, set(), T0 + 1)
    assert more is not None and more.txn_number == 5  # (the same transaction)
    assert st.holds_offsets_of(first, 7, 3, 5)
    assert not st.holds_offsets_of(first, 7, 3, 4)  # (left by the one before)
    assert not st.holds_offsets_of(first, 7, 2, 5) and not st.holds_offsets_of(None, 7, 3, 5)
    _, prepared = st.end_txn(first, False, T0 + 2)
    assert prepared is not None and st.holds_offsets_of(prepared, 7, 3, 5)
    done = st.completed(prepared, T0 + 3)
    assert not st.holds_offsets_of(done, 7, 3, 5)
    _, second = st.add_to_txn(done, {("t", 0)}, {"g"}, T0 + 4)
    assert second is not None and second.txn_number == 6 and not st.holds_offsets_of(second, 7, 3, 5)
    assert st.next_producer(done, -1, 60000, T0).txn_number == 5  # (kept across epochs)
    assert TxnMeta.from_json(second.to_json()) == second


def test_txn_offsets_error() -> None:
    meta = _ongoing(groups=frozenset({"g"}))
    assert st.txn_offsets_error(meta, "g", 7, 3) == ErrorCode.NONE
    assert st.txn_offsets_error(meta, "h", 7, 3) == ErrorCode.INVALID_TXN_STATE
    assert st.txn_offsets_error(meta, "g", 7, 2) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert st.txn_offsets_error(meta, "g", 8, 3) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert st.txn_offsets_error(None, "g", 7, 3) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert st.txn_offsets_error(replace(meta, state=TxnState.PREPARE_ABORT), "g", 7, 3) == ErrorCode.INVALID_TXN_STATE
