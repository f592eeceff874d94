"""The `.txnindex` format and a partition's aborted-transaction index: entries per segment, overlap look-ups
across segments, deletion with a segment, truncation, a torn last entry, and the log keeping it."""

from __future__ import annotations

import struct
from pathlib import Path

from broker.log.log import PartitionLog
from broker.log.txn_index import (
    ENTRY,
    AbortedTxn,
    TxnIndex,
    decode,
    encode,
    index_path,
    marker_record,
    parse_marker,
    read_file,
)
from broker.records.batch import Record, build_batch


def test_an_entry_is_kafkas_34_bytes() -> None:
    e = AbortedTxn(producer_id=7, first_offset=10, last_offset=20, last_stable_offset=21)
    assert encode(e) == struct.pack(">hqqqq", 0, 7, 10, 20, 21)
    assert ENTRY.size == 34
    assert decode(encode(e) * 2 + encode(e)[:20]) == [e, e]  # a torn last entry is left out


def test_marker_records_as_kafkas_end_transaction_marker() -> None:
    key, value = marker_record(True, 5)
    assert (key, value) == (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05")
    assert parse_marker(key, value) == (True, 5)
    assert parse_marker(*marker_record(False, 0)) == (False, 0)
    assert parse_marker(b"\x00\x00\x00\x07", value) is None
    assert parse_marker(None, None) is None


def test_overlapping_across_segments_drop_and_truncate(tmp_path: Path) -> None:
    idx = TxnIndex(tmp_path, [0, 100])
    a, b, c = AbortedTxn(1, 5, 50, 51), AbortedTxn(2, 40, 120, 121), AbortedTxn(1, 130, 140, 141)
    assert idx.add(0, a) and idx.add(100, b) and idx.add(100, c)
    assert not idx.add(100, b)  # the same marker twice: one entry
    assert read_file(index_path(tmp_path, 100)) == [b, c]
    assert idx.overlapping(0, 10) == [a]
    assert idx.overlapping(45, 60) == [a, b]  # b's first offset lies in segment 0, its marker in segment 100
    assert idx.overlapping(51, 130) == [b]
    assert idx.overlapping(141, 200) == []
    assert TxnIndex(tmp_path, [0, 100]).all() == [a, b, c]  # loaded back from the files
    idx.truncate(130)
    assert idx.all() == [a, b] and read_file(index_path(tmp_path, 100)) == [b]
    idx.truncate(100)
    assert idx.all() == [a] and not index_path(tmp_path, 100).exists()
    idx.drop_segment(0)
    assert idx.all() == [] and not index_path(tmp_path, 0).exists()


def _batch(n: int) -> bytes:
    return build_batch([Record(i, 1000, None, b"v") for i in range(n)])


def test_the_log_deletes_and_truncates_the_index_with_its_segments(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = PartitionLog(d)
    log.append(_batch(5))
    log.roll()
    log.append(_batch(5))  # offsets 5..9 in segment 5
    log.add_aborted(AbortedTxn(1, 0, 3, 4))
    log.add_aborted(AbortedTxn(1, 4, 8, 9))
    assert sorted(p.name for p in d.glob("*.txnindex")) == [f"{0:020d}.txnindex", f"{5:020d}.txnindex"]
    log.truncate_to(7)
    assert log.txn_index.all() == [AbortedTxn(1, 0, 3, 4)]  # the marker at 8 is gone with its batch
    log.close()
    log = PartitionLog(d)
    assert log.txn_index.all() == [AbortedTxn(1, 0, 3, 4)]
    log.advance_log_start(6)  # segment 0 goes, and its .txnindex
    assert log.txn_index.all() == [] and not list(d.glob("*.txnindex"))
    log.close()


def test_an_entry_added_again_is_held_once_until_truncated_or_dropped(tmp_path, monkeypatch) -> None:
    # a rebuild adds every aborted transaction again (looked up in a set: a scan per add made it quadratic)
    monkeypatch.setattr("broker.log.txn_index.os.fsync", lambda fd: None)
    idx = TxnIndex(tmp_path, [0])
    n = 1000
    for i in range(n):
        assert idx.add(0, AbortedTxn(7, 2 * i, 2 * i + 1, 2 * i + 2))
    for i in range(n):
        assert not idx.add(0, AbortedTxn(7, 2 * i, 2 * i + 1, 2 * i + 2))  # held: not added twice
    idx.truncate(2 * n - 1)  # the last marker cut: its entry may be added again, the others stay held
    assert idx.add(0, AbortedTxn(7, 2 * n - 2, 2 * n - 1, 2 * n))
    assert not idx.add(0, AbortedTxn(7, 0, 1, 2))
    idx.drop_segment(0)
    assert idx.add(0, AbortedTxn(7, 0, 1, 2))
    assert len(TxnIndex(tmp_path, [0]).all()) == 1
