"""A leader's ISR changes in a `ReplicaManager` against a real ZooKeeper (no brokers): the changes one fetch round
makes are written together, with one notification naming them all, and a change decided on a state someone
rewrote meanwhile loses its race instead of overwriting the newer state."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from kazoo.client import KazooClient

from broker.log.manager import LogManager
from broker.records.batch import Record, build_batch
from broker.replication.manager import ReplicaManager
from broker.server.cache import MetadataCache, PartitionInfo
from broker.server.config import BrokerConfig
from broker.server.purgatory import Purgatory
from broker.zk import paths, registry
from tests.fixtures import zk_client

N = 5


def _setup(tmp_path: Path, zk: KazooClient) -> tuple[ReplicaManager, LogManager]:
    """Broker 1 leading t-0..t-4 (replicas 1, 2; ISR [1] at state version 0) with two records each."""
    registry.ensure_roots(zk)
    registry.create_topic(zk, "t", {p: [1, 2] for p in range(N)}, {})
    for p in range(N):
        zk.set(paths.partition_state("t", p), paths.state_json(1, 0, [1]), version=0)
    logs = LogManager([tmp_path / "logs"], broker_id=1)
    logs.startup()
    cache = MetadataCache(brokers={1: ("h", 1, None), 2: ("h", 2, None)})
    cache.topics["t"] = {p: PartitionInfo([1, 2], 1, 0, [1], zk_version=1) for p in range(N)}

    async def blocking(fn, *args):
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    m = ReplicaManager(1, BrokerConfig(), cache, logs, Purgatory(), lambda t, p: logs.get_or_create(t, p),
                       blocking, lambda: zk)  # fmt: skip
    for p in range(N):
        m.apply(("t", p), cache.topics["t"][p])
        logs.get("t", p).append(build_batch([Record(0, 0, None, b"a"), Record(1, 0, None, b"b")]))
    return m, logs


def _isrs(zk: KazooClient) -> list[list[int]]:
    return [st["isr"] for st in registry.partition_states_of(zk, [("t", p) for p in range(N)])]


def test_the_changes_of_one_fetch_round_are_written_together(tmp_path: Path, zk_chroot: str) -> None:
    zk = zk_client(zk_chroot)
    try:
        m, logs = _setup(tmp_path, zk)

        async def run() -> None:
            for p in range(N):  # follower 2 caught up on every partition in one fetch
                m.replica_fetched(("t", p), 2, 2, logs.get("t", p))
            assert m._isr_writer is not None
            await m._isr_writer
            assert [m.leaders[("t", p)].isr for p in range(N)] == [[1, 2]] * N
            await m.close()

        asyncio.run(run())
        assert _isrs(zk) == [[1, 2]] * N
        notes = zk.get_children(paths.ISR_CHANGE)
        assert len(notes) == 1  # one notification for the batch, naming every partition
        named = json.loads(zk.get(f"{paths.ISR_CHANGE}/{notes[0]}")[0])["partitions"]
        assert sorted((n["topic"], n["partition"]) for n in named) == [("t", p) for p in range(N)]
        logs.shutdown()
    finally:
        zk.stop()
        zk.close()


def test_a_change_decided_on_an_older_state_loses_its_race(tmp_path: Path, zk_chroot: str) -> None:
    zk = zk_client(zk_chroot)
    try:
        m, logs = _setup(tmp_path, zk)

        async def run() -> None:
            m.replica_fetched(("t", 0), 2, 2, logs.get("t", 0))  # queued: ISR [1, 2] decided on version 1
            # before it is written, the controller rewrites the state and the watch brings it (same epoch)
            version = zk.set(paths.partition_state("t", 0), paths.state_json(1, 0, [1]), version=1).version
            m.apply(("t", 0), PartitionInfo([1, 2], 1, 0, [1], zk_version=version))
            await m._isr_writer
            lp = m.leaders[("t", 0)]
            assert (lp.isr, lp.zk_version) == ([1], version)  # not overwritten by the lost write's ISR
            await m.close()

        asyncio.run(run())
        assert _isrs(zk)[0] == [1]
        logs.shutdown()
    finally:
        zk.stop()
        zk.close()
