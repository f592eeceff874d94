"""The transaction coordinators' ZooKeeper state (broker.server.txn_store) on a real ZooKeeper: writes are
conditional on the znode version, so of two brokers that both believe they coordinate an id only one wins;
TxnOffsetCommit's held offsets merge within a producer epoch, start afresh in a new one, are listed by group
and dropped."""

from __future__ import annotations

import pytest

from broker.server import txn_store
from broker.server.txn_state import TxnMeta, TxnState
from tests.integration.helpers import zk_session


def test_two_coordinators_cannot_both_win(zk_chroot: str) -> None:
    with zk_session(zk_chroot) as zk:
        meta = TxnMeta(5, 0, 60000)
        assert txn_store.create(zk, "a/b", meta) == 0
        with pytest.raises(txn_store.Fenced):
            txn_store.create(zk, "a/b", meta)  # (someone created it first)
        ongoing = TxnMeta(5, 0, 60000, TxnState.ONGOING, partitions=frozenset({("t", 0)}), start_ms=1)
        assert txn_store.update(zk, "a/b", ongoing, 0) == 1  # broker 1, from version 0
        with pytest.raises(txn_store.Fenced):  # broker 2, still holding version 0: it lost
            txn_store.update(zk, "a/b", TxnMeta(5, 1, 60000), 0)
        assert txn_store.load(zk, "a/b") == (ongoing, 1)
        assert txn_store.load(zk, "unknown") is None
        assert "a/b" in txn_store.ids(zk)
        with pytest.raises(txn_store.Fenced):
            txn_store.delete(zk, "a/b", 0)
        txn_store.delete(zk, "a/b", 1)
        assert txn_store.load(zk, "a/b") is None


def test_held_offsets(zk_chroot: str) -> None:
    po = txn_store.PendingOffset
    with zk_session(zk_chroot) as zk:
        assert txn_store.pending_partitions(zk, "g") == set()
        for txn_id, pid in (("tx", 5), ("tx2", 9)):  # (their transactions, under way)
            txn_store.create(zk, txn_id, TxnMeta(pid, 0, 60000, TxnState.ONGOING, groups=frozenset({"g"})))
        txn_store.add_offsets(zk, "g", "tx", 5, 0, {("t", 0): po(10, -1, "m")})
        txn_store.add_offsets(zk, "g", "tx", 5, 0, {("t", 1): po(20, 3, "")})  # (merged)
        assert txn_store.take_offsets(zk, "g", "tx", 5) == {("t", 0): po(10, -1, "m"), ("t", 1): po(20, 3, "")}
        assert txn_store.take_offsets(zk, "g", "tx", 6) == {}  # (another producer's: not these)
        txn_store.add_offsets(zk, "g", "tx2", 9, 0, {("u", 0): po(1, -1, "")})
        assert txn_store.pending_partitions(zk, "g") == {("t", 0), ("t", 1), ("u", 0)}
        txn_store.add_offsets(zk, "g", "tx", 5, 1, {("t", 2): po(30, -1, "")})  # a new epoch starts afresh
        assert txn_store.take_offsets(zk, "g", "tx", 5) == {("t", 2): po(30, -1, "")}
        # offsets of an epoch the transaction no longer has (held after it ended) are not pending, and go
        assert txn_store.pending_partitions(zk, "g") == {("u", 0)}
        assert txn_store.take_offsets(zk, "g", "tx", 5) == {}
        txn_store.drop_offsets(zk, "g", "tx")
        txn_store.drop_offsets(zk, "g", "tx2")
        assert txn_store.pending_partitions(zk, "g") == set()
        txn_store.drop_offsets(zk, "g", "tx")  # (twice: harmless)
