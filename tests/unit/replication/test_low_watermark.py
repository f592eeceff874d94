"""The leader's low watermark (DeleteRecords' answer): the smallest log start over its live replicas."""

from __future__ import annotations

from broker.replication.isr import LeaderPartition


def _lp() -> LeaderPartition:
    return LeaderPartition.start(1, [1, 2, 3], [1, 2, 3], 0, 0, 0, 100, 0)


def test_unknown_until_every_live_follower_told_its_start() -> None:
    lp = _lp()
    assert lp.low_watermark(40, {1: 0, 2: 0, 3: 0}) == -1
    lp.fetched(2, 100, 100, 1, log_start=40)
    assert lp.low_watermark(40, {1: 0, 2: 0, 3: 0}) == -1
    lp.fetched(3, 100, 100, 1, log_start=30)
    assert lp.low_watermark(40, {1: 0, 2: 0, 3: 0}) == 30
    lp.fetched(3, 100, 100, 2, log_start=40)
    assert lp.low_watermark(40, {1: 0, 2: 0, 3: 0}) == 40


def test_a_follower_on_a_dead_broker_does_not_count() -> None:
    lp = _lp()
    lp.fetched(2, 100, 100, 1, log_start=40)
    assert lp.low_watermark(40, {1: 0, 2: 0}) == 40


def test_a_fetch_without_a_start_keeps_the_last_one_told() -> None:
    lp = _lp()
    lp.fetched(2, 100, 100, 1, log_start=40)
    lp.fetched(2, 100, 100, 2)
    assert lp.followers[2].log_start == 40
