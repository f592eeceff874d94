"""The broker's producer snapshots (a Broker without ZooKeeper or sockets): the minute's snapshots only for
partitions whose producers changed, written off the event loop and installed only while the state they hold is
still the partition's; the newest snapshot at or below the high watermark kept (a truncation reads from it); a
partition whose producers could not be read (start-up, a failed write's repair, a truncation) is unknown:
never snapshotted, its snapshots deleted so that the next start-up reads its whole log."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from broker.log import producer_snapshot
from broker.log.config import LogConfig
from broker.log.log import PartitionLog
from broker.log.producer_state import ProducerStates
from broker.log.producer_state_io import take_snapshot
from broker.protocol.api import ApiKey
from broker.protocol.framing import RequestHeader
from broker.records.batch import Record, build_batch
from broker.server.handlers.produce import produce_now

TOPIC = "snap-upkeep"
TP = (TOPIC, 0)


def _produce(broker: Any, records: bytes) -> int:
    req = {"transactional_id": None, "acks": 1, "timeout_ms": 1000,
           "topics": [{"name": TOPIC, "partitions": [{"index": 0, "records": memoryview(records)}]}]}  # fmt: skip
    out = produce_now(broker, RequestHeader(ApiKey.PRODUCE, 8, 1, "c"), req)
    if asyncio.iscoroutine(out):
        out = asyncio.run(out)
    broker.write_deferred()
    part = out["topics"][0]["partitions"][0]
    assert part["error_code"] == 0
    return part["base_offset"]


def _plain() -> bytes:
    return build_batch([Record(0, int(time.time() * 1000), b"k", b"plain")])


def _idempotent(seq: int) -> bytes:
    return build_batch([Record(0, int(time.time() * 1000), b"k", b"idem")], producer_id=9, producer_epoch=0,
                       base_sequence=seq)  # fmt: skip


def _minute(broker: Any) -> bool:
    """The broker's minutely checkpoint, its snapshot writes awaited; whether it wrote any."""

    async def run() -> bool:
        broker.loop = asyncio.get_running_loop()
        broker._snapshots = None
        broker.checkpoint()
        task = broker._snapshots
        if task is not None:
            await task
        return task is not None

    return asyncio.run(run())


def _snaps(broker: Any) -> list[int]:
    return [offset for offset, _ in producer_snapshot.snapshots(broker.logs.get(*TP).dir)]


def _leftovers(broker: Any) -> list[str]:
    return [p.name for p in broker.logs.get(*TP).dir.iterdir() if p.name.endswith(producer_snapshot.UNLINKED)]


def test_the_minute_snapshots_only_partitions_whose_producers_changed(broker) -> None:
    _produce(broker, _plain())
    assert not _minute(broker) and _snaps(broker) == []  # the log end moved, no producer: no write
    _produce(broker, _idempotent(0))
    assert _minute(broker) and _snaps(broker) == [2]  # written off the loop, then installed
    _produce(broker, _plain())
    assert not _minute(broker) and _snaps(broker) == [2]  # its producers did not change since
    _produce(broker, _idempotent(1))
    assert _minute(broker) and _snaps(broker) == [4]  # the older minutely one deleted
    assert _leftovers(broker) == []
    states = producer_snapshot.latest(broker.logs.get(*TP).dir, 4)
    assert states is not None and states[1][0].last_sequence == 1


def test_an_off_loop_snapshot_is_not_installed_once_its_state_was_replaced(broker) -> None:
    """A truncation (or a failed load) while the snapshot is being written: the state it holds is no longer the
    partition's, so it must not be installed (a later log reaching its offset again would load a stale state)."""
    _produce(broker, _idempotent(0))
    _produce(broker, _idempotent(1))
    plog = broker.logs.get(*TP)

    async def run() -> None:
        broker.loop = asyncio.get_running_loop()
        broker.checkpoint()
        task = broker._snapshots
        assert task is not None
        broker.replicas.truncate_copy(TP, plog, 1, "as a test")  # before the write is installed
        await task

    asyncio.run(run())
    assert _snaps(broker) == [] and _leftovers(broker) == []
    _produce(broker, _plain())
    assert _minute(broker) and _snaps(broker) == [2]  # the rebuilt state is snapshotted next


def test_the_newest_snapshot_at_or_below_the_high_watermark_is_kept(tmp_path) -> None:
    """A follower's truncation never goes below the high watermark: keeping the newest snapshot at or below it
    bounds what the truncation's rebuild reads (not the whole active segment from its base)."""
    log = PartitionLog(tmp_path / "t-0", LogConfig())
    states = ProducerStates()
    now = int(time.time() * 1000)
    for seq in range(4):
        r = log.append(_idempotent(seq))
        states.record(9, 0, seq, seq, r.first_offset)
        take_snapshot(log, states, now, high_watermark=2)
    assert [o for o, _ in producer_snapshot.snapshots(log.dir)] == [2, 4]  # the HW's and the newest
    log.truncate_to(3)  # a truncation at or above the high watermark
    assert producer_snapshot.latest(log.dir, log.log_end_offset)[0] == 2
    log.close()


def test_a_partition_whose_producers_failed_to_load_is_never_snapshotted(broker, monkeypatch) -> None:
    _produce(broker, _idempotent(0))
    plog = broker.logs.get(*TP)
    broker._save_producer_states()
    assert _snaps(broker) == [1]

    def fail(_plog: Any) -> None:
        raise OSError("unreadable segment")

    monkeypatch.setattr("broker.server.broker.load_states", fail)
    plog.producer_states = ProducerStates()
    broker._load_producer_states()
    assert plog.producer_states.unknown and _snaps(broker) == []  # the next start-up reads the whole log
    _produce(broker, _idempotent(1))
    broker._snapshot_at_roll(plog)
    broker._save_producer_states()
    assert not _minute(broker) and _snaps(broker) == []  # no "nothing open" written for it


def test_a_failed_repair_leaves_the_partition_unknown(broker, monkeypatch) -> None:
    _produce(broker, _idempotent(0))
    plog = broker.logs.get(*TP)
    broker._save_producer_states()

    def fail(_since: int) -> None:
        raise OSError("short file")

    monkeypatch.setattr(plog, "batch_headers_from", fail)
    broker.reload_producer_states(plog, 0)
    assert plog.producer_states.unknown and _snaps(broker) == []
    broker._save_producer_states()
    assert _snaps(broker) == []


def test_a_failed_rebuild_after_a_truncation_leaves_the_partition_unknown(broker, monkeypatch) -> None:
    _produce(broker, _idempotent(0))
    _produce(broker, _idempotent(1))
    plog = broker.logs.get(*TP)
    broker._save_producer_states()

    def fail(_plog: Any) -> None:
        raise OSError("unreadable segment")

    monkeypatch.setattr("broker.replication.manager.load_states", fail)
    broker.replicas.truncate_copy(TP, plog, 1, "as a test")
    states = plog.producer_states
    assert states.unknown and states.entries == {}  # not the stale state of the cut log
    assert _snaps(broker) == []
    broker._snapshot_at_roll(plog)
    assert _snaps(broker) == []


@pytest.fixture(autouse=True)
def _no_loop_left(broker) -> None:
    broker.loop = None


def test_a_copy_whose_truncation_fails_does_not_skip_the_others_of_the_pass() -> None:
    """ReplicaFetcher._truncate (a fake manager and connection): the failing copy stays truncating (retried after
    a pause), the next one is truncated and fetched."""
    from types import SimpleNamespace

    from broker.replication.fetcher import Followed, ReplicaFetcher

    done: list[tuple[str, int]] = []

    def truncate_copy(tp: tuple[str, int], plog: Any, point: int, why: str) -> None:
        if tp[1] == 0:
            raise OSError("unreadable segment")
        done.append(tp)

    m = SimpleNamespace(broker_id=1, follower_log=lambda t, p: object(), latest_epoch=lambda tp, plog: 1,
                        truncation_point=lambda *args: 5, truncate_copy=truncate_copy)  # fmt: skip

    class Conn:
        async def request(self, api: Any, req: dict, version: int) -> dict:
            parts = [{"partition": p["partition"], "error_code": 0, "leader_epoch": 1, "end_offset": 5}
                     for p in req["topics"][0]["partitions"]]  # fmt: skip
            return {"topics": [{"topic": "t", "partitions": parts}]}

    fetcher = ReplicaFetcher(m, 2)  # type: ignore[arg-type]
    truncating = {("t", 0): Followed(1), ("t", 1): Followed(1)}
    fetcher.partitions = dict(truncating)
    asyncio.run(fetcher._truncate(Conn(), truncating))  # type: ignore[arg-type]
    assert done == [("t", 1)] and not truncating[("t", 1)].truncating
    assert truncating[("t", 0)].truncating and truncating[("t", 0)].paused_until > time.monotonic()
