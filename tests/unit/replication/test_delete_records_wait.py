"""The leader's side of DeleteRecords in a `ReplicaManager` (no network): the answer waits until every live
follower's fetch reports a log start at or past the new start, fails when leadership goes, times out."""

from __future__ import annotations

import asyncio

from broker.protocol.errors import ErrorCode
from broker.records.batch import Record, build_batch
from broker.server.cache import PartitionInfo
from tests.unit.replication.leader import TP, leader_manager


def test_the_answer_waits_for_every_live_follower(tmp_path):
    async def run() -> None:
        m, plog = leader_manager(tmp_path)
        for i in range(10):
            plog.append(build_batch([Record(0, 0, None, b"v%d" % i)]))
        plog.advance_log_start(5)
        waiting = asyncio.ensure_future(m.wait_log_start(TP, 5, 5))
        await asyncio.sleep(0.01)
        assert not waiting.done()  # the followers have not told their starts yet
        m.replica_fetched(TP, 2, 10, plog, log_start=5)
        m.replica_fetched(TP, 3, 10, plog, log_start=3)
        await asyncio.sleep(0.01)
        assert not waiting.done() and m.low_watermark(TP, plog) == 3
        m.replica_fetched(TP, 3, 10, plog, log_start=5)
        assert await waiting == ErrorCode.NONE
        assert m.low_watermark(TP, plog) == 5

    asyncio.run(run())


def test_a_dead_follower_is_not_waited_for_and_a_lost_lead_fails_the_wait(tmp_path):
    async def run() -> None:
        m, plog = leader_manager(tmp_path)
        del m.cache.brokers[3]
        assert await m.wait_log_start(TP, 0, 0.05) == ErrorCode.REQUEST_TIMED_OUT  # broker 2 never told
        m.replica_fetched(TP, 2, 0, plog, log_start=0)
        assert await m.wait_log_start(TP, 0, 5) == ErrorCode.NONE
        m.cache.brokers[3] = ("h", 3, None)
        waiting = asyncio.ensure_future(m.wait_log_start(TP, 0, 5))
        await asyncio.sleep(0.01)
        m.apply(TP, PartitionInfo([1, 2, 3], 2, 1, [2, 3]))  # broker 2 leads now
        assert await waiting == ErrorCode.NOT_LEADER_OR_FOLLOWER
        await m.close()

    asyncio.run(run())


def test_a_follower_takes_its_leaders_start_up_to_its_own_end(tmp_path):
    m, plog = leader_manager(tmp_path)
    for i in range(10):
        plog.append(build_batch([Record(0, 0, None, b"v%d" % i)]))
    m.follower_log_start(TP, plog, 4)
    assert plog.log_start_offset == 4
    m.follower_log_start(TP, plog, 2)  # never back
    assert plog.log_start_offset == 4
    m.follower_log_start(TP, plog, 50)  # (a leader's start past the copy's end: the next fetch resets the copy)
    assert plog.log_start_offset == plog.log_end_offset == 10
