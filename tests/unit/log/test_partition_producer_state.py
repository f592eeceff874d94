"""Idempotent producer state: sequence checks per partition (the producer-id pool: tests/unit/coordinator)."""

from __future__ import annotations

import pytest

from broker.log.producer_state import KEEP, MAX_SEQ, ProducerStates
from broker.protocol.errors import ErrorCode
from broker.records.batch import BatchHeader

OK = (ErrorCode.NONE, -1)
OUT_OF_ORDER = (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
BAD_EPOCH = (ErrorCode.INVALID_PRODUCER_EPOCH, -1)


def append(states: ProducerStates, pid: int, epoch: int, first: int, last: int, offset: int) -> tuple:
    """What the log does: check, and record only what is to be appended."""
    verdict = states.check(pid, epoch, first, last)
    if verdict == OK:
        states.record(pid, epoch, first, last, offset)
    return verdict


def test_constants() -> None:
    assert MAX_SEQ == 2**31 - 1
    assert KEEP == 5


@pytest.mark.parametrize("first", [0, 1, 17, MAX_SEQ])
def test_new_producer_is_accepted_at_any_sequence(first: int) -> None:
    s = ProducerStates()
    assert s.check(1000, 0, first, first) == OK
    assert s.check(1000, 7, first, first) == OK


def test_next_sequence_is_accepted() -> None:
    s = ProducerStates()
    assert append(s, 1, 0, 0, 9, 100) == OK  # ten records
    assert s.check(1, 0, 10, 10) == OK
    assert append(s, 1, 0, 10, 14, 110) == OK
    assert s.check(1, 0, 15, 20) == OK


def test_gap_is_out_of_order() -> None:
    s = ProducerStates()
    append(s, 1, 0, 0, 4, 0)
    assert s.check(1, 0, 6, 6) == OUT_OF_ORDER
    assert s.check(1, 0, 4, 6) == OUT_OF_ORDER  # overlaps the last batch without repeating it
    assert s.check(1, 0, 3, 4) == OUT_OF_ORDER  # the tail of a batch is not a duplicate of it
    assert s.check(1, 0, 0, 3) == OUT_OF_ORDER


def test_duplicate_of_any_of_the_last_five_batches_returns_its_offset() -> None:
    s = ProducerStates()
    offsets = {}
    for i in range(KEEP):
        first = i * 3
        assert append(s, 1, 0, first, first + 2, 1000 + 10 * i) == OK
        offsets[first] = 1000 + 10 * i
    for first, offset in offsets.items():
        assert s.check(1, 0, first, first + 2) == (ErrorCode.NONE, offset)
    # the duplicate was not recorded again: the next sequence is still 15
    assert s.check(1, 0, 15, 15) == OK


def test_older_duplicates_beyond_five_are_out_of_order() -> None:
    s = ProducerStates()
    for i in range(KEEP + 2):  # batches 0..6, one record each; 2..6 are remembered
        assert append(s, 1, 0, i, i, 50 + i) == OK
    assert s.check(1, 0, 0, 0) == OUT_OF_ORDER
    assert s.check(1, 0, 1, 1) == OUT_OF_ORDER
    for i in range(2, KEEP + 2):
        assert s.check(1, 0, i, i) == (ErrorCode.NONE, 50 + i)
    assert s.check(1, 0, KEEP + 2, KEEP + 2) == OK


def test_older_epoch_is_refused() -> None:
    s = ProducerStates()
    append(s, 1, 3, 0, 0, 0)
    assert s.check(1, 2, 1, 1) == BAD_EPOCH
    assert s.check(1, 0, 0, 0) == BAD_EPOCH
    assert s.check(1, 2, 0, 0) == BAD_EPOCH  # even a "duplicate" under an old epoch


def test_newer_epoch_must_start_at_zero() -> None:
    s = ProducerStates()
    append(s, 1, 0, 0, 4, 0)
    assert s.check(1, 1, 5, 5) == OUT_OF_ORDER
    assert s.check(1, 1, 1, 1) == OUT_OF_ORDER
    assert append(s, 1, 1, 0, 2, 10) == OK
    # the new epoch replaced the old state: old sequences are gone, the old epoch is fenced
    assert s.check(1, 1, 3, 3) == OK
    assert s.check(1, 1, 5, 5) == OUT_OF_ORDER
    assert s.check(1, 1, 0, 2) == (ErrorCode.NONE, 10)
    assert s.check(1, 0, 5, 5) == BAD_EPOCH


def test_sequence_wraps_after_max() -> None:
    s = ProducerStates()
    assert append(s, 1, 0, MAX_SEQ - 2, MAX_SEQ, 0) == OK
    assert s.check(1, 0, 0, 0) == OK
    assert s.check(1, 0, MAX_SEQ + 1, MAX_SEQ + 1) == OUT_OF_ORDER
    assert append(s, 1, 0, 0, 4, 3) == OK
    assert s.check(1, 0, 5, 5) == OK
    assert s.check(1, 0, MAX_SEQ - 2, MAX_SEQ) == (ErrorCode.NONE, 0)  # still a remembered duplicate


def test_batch_spanning_the_wrap() -> None:
    s = ProducerStates()
    assert append(s, 1, 0, MAX_SEQ - 1, 1, 0) == OK  # four records: MAX-1, MAX, 0, 1
    assert s.check(1, 0, 2, 2) == OK
    assert s.check(1, 0, 0, 0) == OUT_OF_ORDER
    assert s.check(1, 0, MAX_SEQ - 1, 1) == (ErrorCode.NONE, 0)


def test_producers_are_independent() -> None:
    s = ProducerStates()
    append(s, 1, 0, 0, 0, 0)
    append(s, 2, 5, 100, 100, 1)
    assert s.check(1, 0, 1, 1) == OK
    assert s.check(2, 5, 101, 101) == OK
    assert s.check(2, 5, 1, 1) == OUT_OF_ORDER
    assert s.check(1, 0, 0, 0) == (ErrorCode.NONE, 0)
    assert s.check(2, 5, 100, 100) == (ErrorCode.NONE, 1)
    assert s.check(3, 0, 42, 42) == OK


def test_record_keeps_only_the_last_five() -> None:
    s = ProducerStates()
    for i in range(12):
        s.record(9, 0, i, i, i)
    assert list(s.entries[9].batches) == [(i, i, i) for i in range(7, 12)]
    assert s.entries[9].epoch == 0


def test_state_with_no_batches_accepts_anything() -> None:
    s = ProducerStates()
    s.record(1, 0, 0, 0, 0)
    s.entries[1].batches.clear()
    assert s.check(1, 0, 77, 80) == OK


def _header(pid: int, epoch: int, seq: int, base_offset: int, records: int = 1) -> BatchHeader:
    return BatchHeader(base_offset, 0, 0, 2, 0, 0, records - 1, 0, 0, pid, epoch, seq, records)


def test_repair_forgets_what_the_log_lost_and_records_what_it_kept() -> None:
    """The log was cut back to offset 6 (batches at 6 and 8 lost), and a failed append wrote batches at
    offsets 6 and 7 (one already recorded, one not, one of another producer, one not idempotent)."""
    s = ProducerStates()
    for seq, offset in ((0, 2), (1, 4), (2, 6), (3, 8)):
        s.record(5, 0, seq, seq, offset)
    s.repair(8, [_header(5, 0, 2, 6), _header(5, 0, 3, 7, records=2), _header(6, 1, 0, 9), _header(-1, -1, -1, 10)])
    assert [s.check(5, 0, q, q) for q in (0, 1, 2)] == [(ErrorCode.NONE, 2), (ErrorCode.NONE, 4), (ErrorCode.NONE, 6)]
    assert s.check(5, 0, 3, 4) == (ErrorCode.NONE, 7)  # the unrecorded batch the log kept: a duplicate now
    assert s.check(5, 0, 5, 5) == (ErrorCode.NONE, -1)  # and the next one is new
    assert s.check(6, 1, 0, 0) == (ErrorCode.NONE, 9)
    s.repair(3, [])  # cut back further: only the batch at offset 2 stays
    assert s.check(5, 0, 0, 0) == (ErrorCode.NONE, 2) and s.check(5, 0, 1, 1) == (ErrorCode.NONE, -1)
    assert s.check(6, 1, 1, 1) == (ErrorCode.NONE, -1)  # nothing of producer 6 left: any sequence goes
