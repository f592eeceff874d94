"""The markers' coordinator epoch (broker.coordinator.txn.coordinator, txn_state.marker_epoch): kept in the
transaction's znode, the same for every transaction of one coordinator and raised by one only when a Prepare is
written again (a takeover, a retried completion), so an id committing every 100 ms does not take its int32 past
2^31 as the znode version (3-4 writes a transaction) would; a znode without one (an earlier kafkactl) gives its
version, as that kafkactl used. In-memory fakes of kazoo and of the markers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from broker.coordinator.txn.state import TxnMeta, TxnState
from broker.zk import paths
from tests.unit.coordinator.test_txn_completion import _coordinator, _txn_id_on
from tests.unit.coordinator.test_txn_size_limits import Zk

ONGOING = TxnMeta(7, 0, 60000, TxnState.ONGOING, partitions=frozenset({("t", 0)}), start_ms=1, update_ms=1,
                  txn_number=1)  # fmt: skip


class VersionedZk(Zk):
    """The size-limit fake with znode versions through multi-ops too (txn_store.finish reads the new one)."""

    connected = True

    def transaction(self) -> Any:
        zk, ops = self, []

        class T:
            def check(self, path: str, version: int) -> None:
                ops.append(("check", path, b""))

            def set_data(self, path: str, data: bytes, version: int) -> None:
                ops.append(("set", path, data))

            def commit(self) -> list[Any]:
                out = []
                for kind, path, data in ops:
                    out.append(zk.set(path, data) if kind == "set" else True)
                return out

        return T()

    def state(self, txn_id: str) -> tuple[TxnMeta, int]:
        data, stat = self.get(paths.transaction(txn_id))
        return TxnMeta.from_json(json.loads(data)), stat.version


class Markers:
    """Markers written at once; the coordinator epochs they carried."""

    def __init__(self) -> None:
        self.epochs: list[int] = []

    async def write(self, txn_id: str, pid: int, epoch: int, commit: bool, coordinator_epoch: int,
                    partitions: set, still_mine: Any) -> None:  # fmt: skip
        assert await still_mine()
        self.epochs.append(coordinator_epoch)

    async def close(self) -> None:
        pass


def _setup(meta: TxnMeta, version: int) -> tuple[VersionedZk, Any, Markers, str]:
    zk = VersionedZk()
    txn_id = _txn_id_on(1, [1])
    zk.nodes[paths.transaction(txn_id)] = (paths.dumps(meta.to_json()), version)
    coord, _ = _coordinator(zk, {1: None})  # type: ignore[arg-type]
    coord.markers = markers = Markers()
    return zk, coord, markers, txn_id


def test_the_coordinator_epoch_is_kept_from_one_transaction_to_the_next() -> None:
    async def run() -> None:
        zk, coord, markers, txn_id = _setup(ONGOING, 7)  # (written by an earlier kafkactl: no epoch in it)
        assert await coord.end_txn(txn_id, 7, 0, True) == 0
        assert markers.epochs == [8]  # the Prepare's own version, as the earlier kafkactl used
        meta, version = zk.state(txn_id)
        assert (meta.state, meta.coordinator_epoch, version) == (TxnState.COMPLETE_COMMIT, 8, 9)
        for _ in range(5):  # more transactions: the version rises, the epoch stays
            assert await coord.add_to_txn(txn_id, 7, 0, {("t", 0), ("t", 1)}, set()) == 0
            assert await coord.end_txn(txn_id, 7, 0, False) == 0
        assert markers.epochs == [8] * 6
        meta, version = zk.state(txn_id)
        assert (meta.state, meta.coordinator_epoch, version) == (TxnState.COMPLETE_ABORT, 8, 24)
        # a new producer (InitProducerId) keeps it too
        assert (await coord.init_producer_id(txn_id, 60000))[0] == 0
        assert zk.state(txn_id)[0].coordinator_epoch == 8
        await coord.close()

    asyncio.run(run())


def test_a_takeover_raises_the_coordinator_epoch_by_one() -> None:
    async def run() -> None:
        prepared = TxnMeta(7, 0, 60000, TxnState.PREPARE_ABORT, partitions=frozenset({("t", 0)}), start_ms=1,
                           txn_number=4, coordinator_epoch=8)  # fmt: skip
        zk, coord, markers, txn_id = _setup(prepared, 40)
        await coord._get(txn_id)  # (finds it in Prepare: completes it, after writing it again)
        await asyncio.sleep(0.05)
        assert markers.epochs == [9]
        meta, version = zk.state(txn_id)
        assert (meta.state, meta.coordinator_epoch, version) == (TxnState.COMPLETE_ABORT, 9, 42)
        await coord.close()

    asyncio.run(run())


def test_a_state_without_a_coordinator_epoch_reads_as_unrecorded() -> None:
    d = ONGOING.to_json()
    del d["coordinator_epoch"]
    assert TxnMeta.from_json(d).coordinator_epoch == -1
