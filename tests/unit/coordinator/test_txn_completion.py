"""The transaction coordinator's completion of a Prepare state (broker.coordinator.txn.coordinator), with the
markers and ZooKeeper replaced by in-memory fakes: a coordinator that takes a Prepare over writes it again and
uses that write's version as its markers' coordinator epoch; a completion stops when its id moves to another
broker, and when the ZooKeeper session it began in is gone (expired: others may own the id now)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest

from broker.coordinator.group.coordinator import coordinator_for
from broker.coordinator.txn.coordinator import NotCoordinator, TxnCoordinator
from broker.coordinator.txn.markers_sender import Superseded
from broker.coordinator.txn.state import TxnMeta, TxnState

PREPARED = TxnMeta(7, 2, 60000, TxnState.PREPARE_COMMIT, partitions=frozenset({("t", 0)}), start_ms=1, txn_number=3)


class FakeZk:
    """One transactional id's znode (data and version), and a session id."""

    def __init__(self, meta: TxnMeta, version: int) -> None:
        self.data, self.version = json.dumps(meta.to_json()).encode(), version
        self.connected, self._session_id = True, 0x51
        self.finished = False

    def get(self, path: str) -> tuple[bytes, Any]:
        return self.data, SimpleNamespace(version=self.version)

    def set(self, path: str, data: bytes, version: int = -1) -> Any:
        assert version in (-1, self.version)
        self.data, self.version = data, self.version + 1
        return SimpleNamespace(version=self.version)

    def transaction(self) -> Any:  # (txn_store.finish: the completion got past its markers)
        self.finished = True
        raise AssertionError("finished")


class FakeMarkers:
    """Rounds of markers until `still_mine` says no (as MarkerSender's write): never done otherwise."""

    def __init__(self) -> None:
        self.epochs: list[int] = []
        self.rounds = 0

    async def write(self, txn_id: str, pid: int, epoch: int, commit: bool, coordinator_epoch: int,
                    partitions: set, still_mine: Any) -> None:  # fmt: skip
        self.epochs.append(coordinator_epoch)
        while True:
            if not await still_mine():
                raise Superseded(txn_id)
            self.rounds += 1
            await asyncio.sleep(0.005)

    async def close(self) -> None:
        pass


def _coordinator(zk: FakeZk, brokers: dict[int, Any]) -> tuple[TxnCoordinator, FakeMarkers]:
    async def blocking(fn: Any, *args: Any) -> Any:
        return fn(*args)

    async def no_pid() -> int:
        raise AssertionError("no new producer id here")

    cache = SimpleNamespace(brokers=brokers)
    coord = TxnCoordinator(1, SimpleNamespace(props={}), cache, zk=lambda: zk, blocking=blocking,  # type: ignore[arg-type]
                           new_producer_id=no_pid, endpoint=lambda node: None)  # fmt: skip
    coord.markers = markers = FakeMarkers()  # type: ignore[assignment]
    coord.serving = True  # (as `start` makes it, without its sweeper)
    return coord, markers


def _txn_id_on(broker: int, brokers: list[int]) -> str:
    return next(f"tx-{i}" for i in range(1000) if coordinator_for(f"tx-{i}", brokers) == broker)


def test_a_takeover_writes_the_prepare_again_and_uses_its_version_as_coordinator_epoch() -> None:
    async def run() -> None:
        zk = FakeZk(PREPARED, 7)  # (its previous coordinator wrote it at version 7, and sent markers with 7)
        coord, markers = _coordinator(zk, {1: None})
        txn_id = _txn_id_on(1, [1])
        assert (await coord._get(txn_id)) == (PREPARED, 7)
        await asyncio.sleep(0.05)
        assert markers.epochs == [8] and zk.version == 8  # (above its predecessor's)
        assert TxnMeta.from_json(json.loads(zk.data)).state == TxnState.PREPARE_COMMIT
        await coord.close()

    asyncio.run(run())


def test_a_completion_stops_when_its_id_moves_to_another_broker() -> None:
    async def run() -> None:
        zk = FakeZk(PREPARED, 7)
        coord, markers = _coordinator(zk, {1: None})
        txn_id = _txn_id_on(2, [1, 2])  # (coordinated by 1 alone now, by 2 once it is live)
        coord._txns[txn_id] = (PREPARED, 7)
        task = coord._complete_later(txn_id, fresh=True)
        await asyncio.sleep(0.03)
        assert markers.rounds > 0
        coord.cache.brokers = {1: None, 2: None}
        coord.brokers_changed()
        await asyncio.sleep(0.03)
        assert task.done() and txn_id not in coord._txns and txn_id not in coord._completing
        rounds = markers.rounds
        await asyncio.sleep(0.03)
        assert markers.rounds == rounds and not zk.finished
        await coord.close()

    asyncio.run(run())


def test_a_completion_stops_when_its_zookeeper_session_expired() -> None:
    async def run() -> None:
        zk = FakeZk(PREPARED, 7)
        coord, markers = _coordinator(zk, {1: None})
        txn_id = _txn_id_on(1, [1])
        coord._check_session()
        coord._txns[txn_id] = (PREPARED, 7)
        task = coord._complete_later(txn_id, fresh=True)
        await asyncio.sleep(0.03)
        assert markers.rounds > 0 and not task.done()
        zk._session_id = 0x52  # (expired, and a new session made: this broker may not own the id any more)
        await asyncio.sleep(0.03)
        assert task.done() and txn_id not in coord._txns
        rounds = markers.rounds
        await asyncio.sleep(0.03)
        assert markers.rounds == rounds and not zk.finished
        # the next look at the id reads it again (and, finding it still Prepare, takes it over anew)
        assert (await coord._get(txn_id)) == (PREPARED, 7)
        await asyncio.sleep(0.03)
        assert markers.epochs[-1] == 8
        await coord.close()

    asyncio.run(run())


def test_a_completion_stops_when_another_coordinator_wrote_the_id() -> None:
    async def run() -> None:
        zk = FakeZk(PREPARED, 7)
        coord, markers = _coordinator(zk, {1: None})
        txn_id = _txn_id_on(1, [1])
        coord._txns[txn_id] = (PREPARED, 7)
        task = coord._complete_later(txn_id, fresh=True)
        await asyncio.sleep(0.03)
        zk.set("", zk.data)  # (a coordinator that took it over)
        await asyncio.sleep(0.03)
        assert task.done() and txn_id not in coord._txns and not zk.finished
        await coord.close()

    asyncio.run(run())


def test_before_start_a_prepare_state_is_left_alone() -> None:
    """Until `start` (the broker's metadata loaded), the coordinator coordinates nothing: a Prepare state read
    then would be completed against a cache that knows none of its topics, its markers given up."""

    async def run() -> None:
        zk = FakeZk(PREPARED, 7)
        coord, markers = _coordinator(zk, {1: None})
        coord.serving = False
        txn_id = _txn_id_on(1, [1])
        with pytest.raises(NotCoordinator):
            await coord._get(txn_id)
        await asyncio.sleep(0.02)
        assert markers.epochs == [] and coord._completing == {}

    asyncio.run(run())
