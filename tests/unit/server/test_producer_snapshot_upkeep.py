"""The broker's producer snapshots (a Broker without ZooKeeper or sockets): the minute's snapshots only for
partitions whose producers changed and whose log grew enough past the last snapshot (a round of one message
each writes none), written in one job off the event loop and installed only while the state they hold is
still the partition's; a clean shutdown snapshots only the changed ones; the newest snapshot at or below the
high watermark kept (a truncation reads from it); a partition whose producers could not be read (start-up,
a failed write's repair, a truncation) is unknown: never snapshotted, its snapshots deleted so that the next
start-up reads its whole log."""

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
        broker.logs.take_unsynced()  # (only snapshots due start the pass here)
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


@pytest.fixture
def every_change_due(monkeypatch) -> None:
    """The minute's rule without its size threshold: any change of the producers makes a snapshot due."""
    monkeypatch.setattr("broker.log.producer_state_io.SNAPSHOT_DUE_CHANGES", 1)


def test_a_round_of_one_message_per_partition_writes_no_snapshot(broker, monkeypatch) -> None:
    """The producers changed, but the replay a snapshot would save is one batch: not worth a file (and at
    thousands of partitions, thousands of files a minute). Once enough log lies past the last snapshot, it is."""
    for seq in range(3):
        _produce(broker, _idempotent(seq))
        assert not _minute(broker) and _snaps(broker) == []
    monkeypatch.setattr("broker.log.producer_state_io.SNAPSHOT_DUE_BYTES", 200)  # (3 small batches exceed it)
    assert _minute(broker) and _snaps(broker) == [3]
    _produce(broker, _idempotent(3))
    assert not _minute(broker) and _snaps(broker) == [3]  # one batch past it: not yet
    monkeypatch.setattr("broker.log.producer_state_io.SNAPSHOT_DUE_CHANGES", 1)
    assert _minute(broker) and _snaps(broker) == [4]  # or enough changes


def test_a_clean_shutdown_snapshots_only_what_changed_since(broker) -> None:
    _produce(broker, _plain())
    broker._save_producer_states()
    assert _snaps(broker) == []  # no producer: nothing to save
    _produce(broker, _idempotent(0))
    broker._save_producer_states()
    assert _snaps(broker) == [2]
    _produce(broker, _plain())
    broker._save_producer_states()
    assert _snaps(broker) == [2]  # unchanged since: the snapshot and the log after it give the same state


def test_the_pass_installs_only_the_logs_still_current(broker, every_change_due) -> None:
    """One job writes every due snapshot (and makes them durable together); back on the loop, a partition
    whose log was replaced meanwhile (deleted and created again) gets nothing installed, the others do."""
    broker.cache.set_topic(TOPIC, {0: [1], 1: [1]}, {p: {"leader": 1, "leader_epoch": 0, "isr": [1]} for p in (0, 1)})
    broker.replicas.apply((TOPIC, 1), broker.cache.partition(TOPIC, 1))
    other = broker.logs.get(TOPIC, 1)
    other.append(_idempotent(0))
    other.producer_states.record(9, 0, 0, 0, 0)
    _produce(broker, _idempotent(0))
    threads: list[int] = []
    real = broker._write_durably

    def spy(*args: Any) -> Any:
        threads.append(1)
        return real(*args)

    broker._write_durably = spy

    async def run() -> None:
        broker.loop = asyncio.get_running_loop()
        broker.checkpoint()
        task = broker._snapshots
        assert task is not None
        broker.logs.delete(TOPIC, 1)  # before the pass comes back to the loop
        broker.logs.get_or_create(TOPIC, 1)
        await task

    asyncio.run(run())
    assert threads == [1]  # one job for every partition of the pass
    assert _snaps(broker) == [1] and _leftovers(broker) == []
    new = broker.logs.get(TOPIC, 1)
    assert producer_snapshot.snapshots(new.dir) == []
    assert not [p for p in new.dir.iterdir() if p.name.endswith(producer_snapshot.UNLINKED)]


def test_the_pass_makes_new_files_durable_in_one_batch(broker, monkeypatch) -> None:
    """A new log's files and its epoch checkpoint are written without fsync; the minute's pass makes them
    durable with one syncfs per log dir (else an fsync each)."""
    calls: list[Any] = []
    monkeypatch.setattr("broker.log.manager.make_durable", lambda d, paths: calls.append((d, set(paths))))
    broker.logs.get_or_create("fresh", 0, topic_id=7)
    unsynced = {p.name for paths in broker.logs.unsynced.values() for p in paths}
    assert {"fresh-0", "topic.id"} <= unsynced

    async def run() -> None:
        broker.loop = asyncio.get_running_loop()
        broker._snapshots = None
        broker.checkpoint()
        assert broker._snapshots is not None
        await broker._snapshots

    asyncio.run(run())
    assert len(calls) == 1 and calls[0][0] == broker.logs.log_dirs[0]
    assert {p.name for p in calls[0][1]} >= {"fresh-0", "topic.id"}
    assert broker.logs.unsynced == {}


def test_the_minute_snapshots_only_partitions_whose_producers_changed(broker, every_change_due) -> None:
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


def test_an_off_loop_snapshot_is_not_installed_once_its_state_was_replaced(broker, every_change_due) -> None:
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
