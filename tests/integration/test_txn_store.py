"""The transaction coordinators' ZooKeeper state (broker.coordinator.txn.store) on a real ZooKeeper: writes are
conditional on the znode version, so of two brokers that both believe they coordinate an id only one wins;
TxnOffsetCommit's held offsets are written only while their transaction is Ongoing (checked in the same
multi-op), merge within one transaction, are listed by group, and a transaction's end commits them, drops
them and writes its Complete state all at once, or not at all."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE, make_acl

from broker.coordinator.txn import store as txn_store
from broker.coordinator.txn.state import TxnMeta, TxnState
from broker.protocol.errors import ErrorCode
from broker.zk import consumers, paths
from tests.integration.helpers import zk_json, zk_session

po = txn_store.PendingOffset


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


def _ongoing(pid: int, epoch: int = 0, number: int = 1, groups: frozenset[str] = frozenset({"g"})) -> TxnMeta:
    return TxnMeta(pid, epoch, 60000, TxnState.ONGOING, groups=groups, start_ms=1, txn_number=number)


def test_held_offsets(zk_chroot: str) -> None:
    with zk_session(zk_chroot) as zk:
        assert txn_store.pending_partitions(zk, "g") == set()
        for txn_id, pid in (("tx", 5), ("tx2", 9)):  # (their transactions, under way)
            txn_store.create(zk, txn_id, _ongoing(pid))
        assert txn_store.add_offsets(zk, "g", "tx", 5, 0, {("t", 0): po(10, -1, "m")}) == ErrorCode.NONE
        assert txn_store.add_offsets(zk, "g", "tx", 5, 0, {("t", 1): po(20, 3, "")}) == ErrorCode.NONE  # (merged)
        meta, _ = txn_store.load(zk, "tx")
        assert txn_store.held_offsets(zk, "g", "tx", meta) == {("t", 0): po(10, -1, "m"), ("t", 1): po(20, 3, "")}
        assert txn_store.add_offsets(zk, "g", "tx2", 9, 0, {("u", 0): po(1, -1, "")}) == ErrorCode.NONE
        assert txn_store.pending_partitions(zk, "g") == {("t", 0), ("t", 1), ("u", 0)}
        # only the current producer's, while Ongoing with the group added (checked in the write itself)
        assert txn_store.add_offsets(zk, "g", "tx", 5, 1, {("t", 2): po(1, -1, "")}) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert (
            txn_store.add_offsets(zk, "g", "tx", 6, 0, {("t", 2): po(1, -1, "")})
            == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        )
        assert txn_store.add_offsets(zk, "h", "tx", 5, 0, {("t", 2): po(1, -1, "")}) == ErrorCode.INVALID_TXN_STATE
        assert not zk.exists(paths.txn_group_offsets("h", "tx"))
        txn_store.drop_offsets(zk, "g", "tx")
        txn_store.drop_offsets(zk, "g", "tx2")
        assert txn_store.pending_partitions(zk, "g") == set()
        txn_store.drop_offsets(zk, "g", "tx")  # (twice: harmless)


class _EndingMeanwhile:
    """A ZooKeeper session that, when the transaction's znode is first read, has another session end the
    transaction right after the read: the interleaving of a TxnOffsetCommit with a timeout abort or EndTxn."""

    def __init__(self, zk: KazooClient, other: KazooClient, txn_id: str, ended: TxnMeta) -> None:
        self._zk, self._other, self._txn_id, self._ended, self.fired = zk, other, txn_id, ended, False

    def get(self, path: str, *args: Any, **kw: Any) -> Any:
        got = self._zk.get(path, *args, **kw)
        if path == paths.transaction(self._txn_id) and not self.fired:
            self.fired = True
            txn_store.update(self._other, self._txn_id, self._ended, got[1].version)
        return got

    def __getattr__(self, name: str) -> Any:
        return getattr(self._zk, name)


def test_offsets_are_not_held_for_a_transaction_that_ended_meanwhile(zk_chroot: str) -> None:
    """The check and the write are one: a transaction aborted between the TxnOffsetCommit's read of its state
    and its write leaves no held offsets behind (they would stay pending, or be committed by a later
    transaction of the same producer id and epoch)."""
    with zk_session(zk_chroot) as zk, zk_session(zk_chroot) as other:
        meta = _ongoing(5)
        txn_store.create(zk, "tx", meta)
        aborted = replace(meta, state=TxnState.COMPLETE_ABORT, groups=frozenset())
        racing = _EndingMeanwhile(zk, other, "tx", aborted)
        assert txn_store.add_offsets(racing, "g", "tx", 5, 0, {("t", 0): po(10, -1, "")}) == ErrorCode.INVALID_TXN_STATE
        assert racing.fired
        assert not zk.exists(paths.txn_group_offsets("g", "tx"))
        assert txn_store.pending_partitions(zk, "g") == set()


def test_offsets_left_by_an_earlier_transaction_of_the_same_epoch_are_not_taken(zk_chroot: str) -> None:
    """Held offsets of transaction 1 (aborted) left behind, and transaction 2 of the same producer id and epoch
    under way (a client's abort does not raise the epoch): they are not pending, not merged into transaction
    2's, and not committed with it."""
    with zk_session(zk_chroot) as zk:
        second = _ongoing(5, number=2)
        txn_store.create(zk, "tx", second)
        left = {"version": 1, "producer_id": 5, "producer_epoch": 0, "txn_number": 1, "offsets": [["t", 0, 99, -1, ""]]}
        zk.create(paths.txn_group_offsets("g", "tx"), paths.dumps(left), makepath=True)
        assert txn_store.pending_partitions(zk, "g") == set()
        assert not zk.exists(paths.txn_group_offsets("g", "tx"))  # (removed)
        zk.create(paths.txn_group_offsets("g", "tx"), paths.dumps(left), makepath=True)
        assert txn_store.add_offsets(zk, "g", "tx", 5, 0, {("t", 1): po(7, -1, "")}) == ErrorCode.NONE
        assert txn_store.pending_partitions(zk, "g") == {("t", 1)}
        got, version = txn_store.load(zk, "tx")
        prepared = replace(got, state=TxnState.PREPARE_COMMIT)
        version = txn_store.update(zk, "tx", prepared, version)
        _, committed = txn_store.finish(zk, "tx", prepared, version, replace(prepared, state=TxnState.COMPLETE_COMMIT))
        assert committed == {"g": {("t", 1): po(7, -1, "")}}
        assert committed_offset(zk, "g", "t", 0) is None


def _prepared(zk: KazooClient, txn_id: str, offsets: dict, commit: bool = True) -> tuple[TxnMeta, int]:
    meta = _ongoing(5, groups=frozenset({"g", "g2"}))
    txn_store.create(zk, txn_id, meta)
    for group, held in offsets.items():
        assert txn_store.add_offsets(zk, group, txn_id, 5, 0, held) == ErrorCode.NONE
    prepared = replace(meta, state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
    return prepared, txn_store.update(zk, txn_id, prepared, 0)


def committed_offset(zk: KazooClient, group: str, topic: str, p: int) -> tuple[int, int, str] | None:
    """The group's committed offset of one partition as ZooKeeper holds it (offset, leader epoch, metadata)."""
    c = consumers.committed(zk, group, [topic]).get((topic, p))
    return None if c is None else (c.offset, c.leader_epoch, c.metadata)


def test_finish_commits_drops_and_completes_at_once(zk_chroot: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with zk_session(zk_chroot) as zk:
        held = {("t", 0): po(10, 4, "m"), ("t", 1): po(20, -1, "")}
        zk.create(paths.group_offset("g", "t", 1), b"3", makepath=True)  # (an earlier version's, older)
        consumers.commit(zk, "g", {("t", 2): 30}, "theirs")  # (another partition of the same block)
        prepared, version = _prepared(zk, "tx", {"g": held, "g2": {("u", 0): po(5, -1, "")}})
        with pytest.raises(txn_store.Fenced):  # (another coordinator wrote since: nothing done)
            txn_store.finish(zk, "tx", prepared, version - 1, replace(prepared, state=TxnState.COMPLETE_COMMIT))
        assert zk.exists(paths.txn_group_offsets("g", "tx")) and committed_offset(zk, "g", "t", 0) is None
        done = replace(prepared, state=TxnState.COMPLETE_COMMIT, groups=frozenset())
        new_version, done_offsets = txn_store.finish(zk, "tx", prepared, version, done)
        assert (new_version, set(done_offsets)) == (version + 1, {"g", "g2"})
        assert txn_store.load(zk, "tx") == (done, version + 1)
        assert committed_offset(zk, "g", "t", 0) == (10, 4, "m")
        assert committed_offset(zk, "g", "t", 1) == (20, -1, "")  # (the block's entry over the older znode)
        assert committed_offset(zk, "g", "t", 2) == (30, -1, "theirs")
        assert committed_offset(zk, "g2", "u", 0) == (5, -1, "")
        assert txn_store.pending_partitions(zk, "g") == set() and not zk.exists(paths.txn_offsets("g"))

        # an abort drops them only; more offsets than one multi-op takes are written in several
        prepared, version = _prepared(zk, "ab", {"g": {("t", 0): po(99, -1, "")}}, commit=False)
        txn_store.finish(zk, "ab", prepared, version, replace(prepared, state=TxnState.COMPLETE_ABORT))
        assert committed_offset(zk, "g", "t", 0) == (10, 4, "m") and not zk.exists(paths.txn_offsets("g"))
        monkeypatch.setattr(txn_store, "MULTI_MAX_OPS", 4)
        many = {("v", p * paths.OFFSET_BLOCK): po(100 + p, -1, "") for p in range(9)}  # (9 blocks: 9 writes)
        prepared, version = _prepared(zk, "many", {"g": many})
        new_version, _ = txn_store.finish(
            zk, "many", prepared, version, replace(prepared, state=TxnState.COMPLETE_COMMIT)
        )
        assert new_version == version + 1
        assert [committed_offset(zk, "g", "v", p * paths.OFFSET_BLOCK) for p in range(9)] == [
            (100 + p, -1, "") for p in range(9)]  # fmt: skip


def test_finish_undone_when_zookeeper_refuses_a_write(zk_chroot: str) -> None:
    """An offset write ZooKeeper refuses (here: an ACL on the offset block) leaves the held offsets and the
    Prepare state as they were, so the completion is retried and no offsets are lost; once it can, it finishes."""
    with zk_session(zk_chroot) as zk:
        block = paths.group_offset_block("g", "t", 0)
        zk.ensure_path(block.rsplit("/", 1)[0])
        read_only = [make_acl("world", "anyone", read=True, admin=True)]
        zk.create(block, paths.offset_block_json({0: paths.BlockEntry(paths.StoredOffset(1), 0)}), acl=read_only)
        prepared, version = _prepared(zk, "tx", {"g": {("t", 0): po(42, -1, "")}})
        done = replace(prepared, state=TxnState.COMPLETE_COMMIT, groups=frozenset())
        with pytest.raises(NoAuthError):
            txn_store.finish(zk, "tx", prepared, version, done)
        assert txn_store.load(zk, "tx") == (prepared, version)
        assert txn_store.pending_partitions(zk, "g") == {("t", 0)} and committed_offset(zk, "g", "t", 0) == (1, -1, "")
        zk.set_acls(block, OPEN_ACL_UNSAFE)
        assert txn_store.finish(zk, "tx", prepared, version, done)[0] == version + 1
        assert committed_offset(zk, "g", "t", 0) == (42, -1, "")
        assert zk_json(zk, paths.transaction("tx"))["state"] == "CompleteCommit"


def test_states_up_to_the_size_bound_are_taken_by_zookeeper_and_larger_ones_never_sent(zk_chroot: str) -> None:
    """`STATE_MAX_BYTES` is under ZooKeeper's 1 MiB request limit with room for the multi-op around it: held
    offsets just under it are written (and committed by `finish`), a transaction state just under it takes its
    Prepare write; held offsets over it are refused (INVALID_COMMIT_OFFSET_SIZE) and the session stays up."""
    with zk_session(zk_chroot) as zk:
        name = "a-topic-of-a-fair-length-" * 4
        entry = len(paths.dumps([name, 99999])) + 1
        n = (txn_store.STATE_MAX_BYTES - 1000) // entry  # (partitions 10000 and up: every entry that long)
        big = replace(_ongoing(5), partitions=frozenset((name, p) for p in range(10_000, 10_000 + n)))
        assert txn_store.STATE_MAX_BYTES * 99 // 100 < len(paths.dumps(big.to_json())) <= txn_store.STATE_MAX_BYTES
        txn_store.create(zk, "big", big)
        prepared = replace(big, state=TxnState.PREPARE_COMMIT, coordinator_epoch=1)
        assert txn_store.update(zk, "big", prepared, 0) == 1  # (a few bytes longer: the margin takes it)

        assert txn_store.create(zk, "tx", _ongoing(7)) == 0
        one = len(paths.dumps([["t", 0, 0, -1, "x" * 4000]]))
        fitting = {("t", p): po(p, -1, "x" * 4000) for p in range(txn_store.STATE_MAX_BYTES // one - 2)}
        assert txn_store.add_offsets(zk, "g", "tx", 7, 0, fitting) == ErrorCode.NONE
        more = {("u", p): po(p, -1, "y" * 4000) for p in range(10)}
        assert txn_store.add_offsets(zk, "g", "tx", 7, 0, more) == ErrorCode.INVALID_COMMIT_OFFSET_SIZE
        assert zk.connected
        meta, version = txn_store.load(zk, "tx")
        assert set(txn_store.held_offsets(zk, "g", "tx", meta)) == set(fitting)  # (what was held stays)
        prepared = replace(meta, state=TxnState.PREPARE_COMMIT)
        version = txn_store.update(zk, "tx", prepared, version)
        _, committed = txn_store.finish(zk, "tx", prepared, version, replace(prepared, state=TxnState.COMPLETE_COMMIT))
        assert set(committed["g"]) == set(fitting)
