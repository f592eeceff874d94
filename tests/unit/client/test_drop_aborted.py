"""kafkactl's consumer under read_committed: the batches of aborted transactions are dropped from the aborted
transaction's first offset until its producer's abort marker (as Kafka's consumer), control batches always."""

from __future__ import annotations

from broker.client.consumer import decode_records, drop_aborted
from broker.log.txn_index import marker_record
from broker.records.batch import Record, build_batch


def _txn(offset: int, pid: int, values: list[bytes]) -> bytes:
    recs = [Record(offset + i, 1000, None, v) for i, v in enumerate(values)]
    return build_batch(recs, producer_id=pid, producer_epoch=0, base_sequence=offset, transactional=True)


def _marker(offset: int, pid: int, commit: bool) -> bytes:
    key, value = marker_record(commit, 0)
    return build_batch([Record(offset, 1000, key, value)], producer_id=pid, producer_epoch=0, transactional=True,
                       control=True)  # fmt: skip


def test_aborted_batches_and_markers_are_dropped_committed_ones_kept() -> None:
    data = b"".join([
        _txn(0, 1, [b"c0", b"c1"]),
        _txn(2, 2, [b"a2", b"a3"]),
        _marker(4, 2, commit=False),
        _txn(5, 2, [b"n5"]),  # the producer's next transaction: not the aborted one
        _marker(6, 1, commit=True),
        build_batch([Record(7, 1000, None, b"p7")]),  # not transactional
    ])  # fmt: skip
    kept = drop_aborted(data, [{"producer_id": 2, "first_offset": 2}])
    assert [r.value for r in decode_records(kept, "t", 0, 0)] == [b"c0", b"c1", b"n5", b"p7"]
    everything = decode_records(data, "t", 0, 0)  # read_uncommitted: every data record, never a marker
    assert [r.value for r in everything] == [b"c0", b"c1", b"a2", b"a3", b"n5", b"p7"]


def test_an_abort_that_began_before_the_fetched_data_drops_from_the_start() -> None:
    data = _txn(10, 3, [b"a10"]) + _marker(11, 3, commit=False) + _txn(12, 4, [b"c12"])
    assert [r.value for r in decode_records(drop_aborted(data, [{"producer_id": 3, "first_offset": 4}]), "t", 0, 0)
            ] == [b"c12"]  # fmt: skip
    assert drop_aborted(data, []) == _txn(10, 3, [b"a10"]) + _txn(12, 4, [b"c12"])  # (no abort listed: kept)
