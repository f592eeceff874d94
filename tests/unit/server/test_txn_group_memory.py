"""The group store's memory of committed offsets and transactions (broker/coordinator/group/store.py): a partition a
TxnOffsetCommit touched is never answered from memory (during a ZooKeeper outage, or a read slower than
READ_WAIT_S) with what it had before the transaction: its transaction's coordinator, maybe on another broker,
commits the offsets straight to ZooKeeper, and the group's coordinator is not told. On the in-memory kazoo
stand-in of test_group_store."""

from __future__ import annotations

from types import SimpleNamespace

from broker.protocol.errors import ErrorCode
from broker.server.handlers.transactions import handle_txn_offset_commit
from broker.zk import paths
from tests.unit.coordinator.test_group_store import FakeZk, G, T, offsets_of, put_entry, run, short_bounds, started

__all__ = ["short_bounds"]  # (its autouse fixture: short bounds here too)


def held_copy(zk: FakeZk, txn_id: str, offsets: dict[tuple[str, int], int]) -> None:
    """What `txn_store.add_offsets` leaves in ZooKeeper for a transaction's TxnOffsetCommit."""
    body = {"version": 1, "producer_id": 7, "producer_epoch": 0, "txn_number": 1,
            "offsets": [[t, p, o, -1, ""] for (t, p), o in sorted(offsets.items())]}  # fmt: skip
    zk.put(paths.txn_group_offsets(G, txn_id), paths.dumps(body))


def txn_committed(zk: FakeZk, txn_id: str, offsets: dict[tuple[str, int], int]) -> None:
    """What `txn_store.finish` does on the transaction coordinator's broker (maybe another one): the offsets
    become the group's (in their offset blocks), the held copy goes."""
    for (t, p), o in offsets.items():
        put_entry(zk, t, p, o)
    with zk.lock:
        del zk.nodes[paths.txn_group_offsets(G, txn_id)]


def test_a_txn_offset_commit_drops_the_partitions_from_memory_until_its_transaction_ended() -> None:
    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        await store.commit(G, {(T, 0): 5, (T, 1): 5})
        assert offsets_of(await store.fetch(G, {T: [0, 1]})) == {(T, 0): 5, (T, 1): 5}
        # TxnOffsetCommit on this broker (the group's coordinator) for partition 0
        store.note_txn_offsets(G, [(T, 0)])
        held_copy(zk, "tx", {(T, 0): 9})
        # a read while the transaction is open says 5 (right now), but memory must not keep it
        assert offsets_of(await store.fetch(G, {T: [0, 1]})) == {(T, 0): 5, (T, 1): 5}
        txn_committed(zk, "tx", {(T, 0): 9})  # on another broker: nobody tells this one
        zk.down()
        # partition 0: not known here (COORDINATOR_LOAD_IN_PROGRESS), never the stale 5; partition 1 still is
        assert await store.fetch(G, {T: [0, 1]}) is None
        assert offsets_of(await store.fetch(G, {T: [1]})) == {(T, 1): 5}
        zk.up()
        assert offsets_of(await store.fetch(G, {T: [0, 1]})) == {(T, 0): 9, (T, 1): 5}
        zk.down()  # read after its transaction ended: known again
        assert offsets_of(await store.fetch(G, {T: [0, 1]})) == {(T, 0): 9, (T, 1): 5}
        await store.close(1)

    run(main())


def test_a_transaction_whose_offsets_another_broker_took_is_not_answered_from_memory() -> None:
    """The TxnOffsetCommit went to the group's previous coordinator; this one read the group while the
    transaction was open: what it read is not kept for the partitions a transaction holds."""

    async def main() -> None:
        zk = FakeZk()
        zk.put(paths.group_offset(G, T, 0), b"5")
        held_copy(zk, "tx", {(T, 0): 9})
        store = await started(zk)
        assert offsets_of(await store.fetch(G, {T: [0]})) == {(T, 0): 5}
        txn_committed(zk, "tx", {(T, 0): 9})
        zk.down()
        assert await store.fetch(G, {T: [0]}) is None
        await store.close(1)

    run(main())


def test_a_txn_offset_commit_during_a_read_keeps_that_read_out_of_memory() -> None:
    async def main() -> None:
        zk = FakeZk()
        zk.put(paths.group_offset(G, T, 0), b"5")
        store = await started(zk)
        real = store._read_offsets

        async def read_then_txn(group: str, topics: list[str] | None) -> dict:
            out = await real(group, topics)  # (read: 5)
            store.note_txn_offsets(G, [(T, 0)])  # (meanwhile: the TxnOffsetCommit, its transaction committed)
            held_copy(zk, "tx", {(T, 0): 9})
            txn_committed(zk, "tx", {(T, 0): 9})
            return out

        store._read_offsets = read_then_txn  # type: ignore[method-assign]
        assert offsets_of(await store.fetch(G, {T: [0]})) == {(T, 0): 5}
        store._read_offsets = real  # type: ignore[method-assign]
        zk.down()
        assert await store.fetch(G, {T: [0]}) is None
        await store.close(1)

    run(main())


def test_the_transaction_coordinators_own_note_of_a_commit_is_known() -> None:
    async def main() -> None:
        zk = FakeZk()
        zk.put(paths.group_offset(G, T, 0), b"5")
        store = await started(zk)
        assert offsets_of(await store.fetch(G, {T: [0]})) == {(T, 0): 5}
        store.note_txn_offsets(G, [(T, 0)])
        held_copy(zk, "tx", {(T, 0): 9})
        txn_committed(zk, "tx", {(T, 0): 9})
        store.note_committed(G, {(T, 0): paths.StoredOffset(9)})  # (finish answered on this broker)
        zk.down()
        assert offsets_of(await store.fetch(G, {T: [0]})) == {(T, 0): 9}
        await store.close(1)

    run(main())


def test_the_txn_offset_commit_handler_drops_them_from_memory_before_holding_them() -> None:
    """handle_txn_offset_commit (on the group's coordinator) tells the group store before its held write."""

    async def main() -> None:
        zk = FakeZk()
        zk.put(paths.group_offset(G, T, 0), b"5")
        store = await started(zk)
        assert offsets_of(await store.fetch(G, {T: [0]})) == {(T, 0): 5}
        known_at_write: list[bool] = []

        async def blocking(fn, *args):  # noqa: ANN001, ANN002, ANN202 - the txn_store call, not run
            known_at_write.append((T, 0) in store._known.get(G, {}))
            return ErrorCode.NONE

        out = await handle_txn_offset_commit(_broker(store, blocking), None, _request())  # type: ignore[arg-type]
        assert out["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
        assert known_at_write == [False]
        zk.down()
        assert await store.fetch(G, {T: [0]}) is None  # (not the 5 from before the transaction)
        await store.close(1)

    run(main())


def test_a_read_made_while_the_held_write_is_under_way_is_not_kept() -> None:
    """A fetch that read ZooKeeper after the TxnOffsetCommit began but before its held copy landed (so it saw
    no transaction) and ended before the write's answer: what it read is dropped once the write is answered."""

    async def main() -> None:
        zk = FakeZk()
        zk.put(paths.group_offset(G, T, 0), b"5")
        store = await started(zk)

        async def blocking(fn, *args):  # noqa: ANN001, ANN002, ANN202 - the held write, done by hand
            assert offsets_of(await store.fetch(G, {T: [0]})) == {(T, 0): 5}  # (before the held copy lands)
            held_copy(zk, "tx", {(T, 0): 9})
            return ErrorCode.NONE

        out = await handle_txn_offset_commit(_broker(store, blocking), None, _request())  # type: ignore[arg-type]
        assert out["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
        txn_committed(zk, "tx", {(T, 0): 9})
        zk.down()
        assert await store.fetch(G, {T: [0]}) is None  # (not the 5 read meanwhile)
        await store.close(1)

    run(main())


def _broker(store: object, blocking: object) -> SimpleNamespace:
    """What handle_txn_offset_commit uses of the broker: no authorizer, every partition known."""

    async def allowed_offsets(*args):  # noqa: ANN002, ANN202
        return ErrorCode.NONE

    return SimpleNamespace(authorizer=None, coordinates=lambda g: True, zk=object(), blocking=blocking,
                           group_store=store, txn_coordinator=SimpleNamespace(txn_offsets_allowed=allowed_offsets),
                           cache=SimpleNamespace(partition=lambda t, p: object()),
                           config=SimpleNamespace(offset_metadata_max_bytes=4096))  # fmt: skip


def _request() -> dict:
    part = {"partition_index": 0, "committed_offset": 9, "committed_leader_epoch": -1, "committed_metadata": ""}
    return {"transactional_id": "tx", "group_id": G, "producer_id": 7, "producer_epoch": 0,
            "topics": [{"name": T, "partitions": [part]}]}  # fmt: skip
