"""A leader's bookkeeping: follower log end offsets, the high watermark, ISR shrink and rejoin."""

from broker.replication.isr import LeaderPartition


def leader(isr=(1, 2, 3), hw=0, now=0):
    return LeaderPartition.start(1, [1, 2, 3], list(isr), 0, 0, hw, 0, now)


def test_the_high_watermark_is_the_smallest_log_end_over_the_isr_and_never_moves_back():
    lp = leader()
    assert lp.high_watermark(10) == 0  # followers not heard from yet: it stays
    lp.fetched(2, 10, 10, 1)
    assert lp.high_watermark(10) == 0
    lp.fetched(3, 6, 10, 1)
    assert lp.high_watermark(10) == 6
    lp.isr = [1, 2]  # 3 left the ISR
    assert lp.high_watermark(12) == 10
    lp.fetched(2, 4, 12, 2)  # (a stale answer cannot pull it back)
    assert lp.high_watermark(12) == 10


def test_a_leader_alone_in_its_isr_has_its_log_end_as_high_watermark():
    lp = leader(isr=[1])
    assert lp.high_watermark(42) == 42


def test_a_follower_behind_for_longer_than_the_lag_time_leaves_and_rejoins_once_at_the_high_watermark():
    lp = leader(now=0)
    lp.fetched(2, 10, 10, 100)  # caught up
    lp.fetched(3, 5, 10, 100)  # behind
    assert lp.lagging(150, 100) == [3]  # not caught up since the leader took over (0)
    lp.fetched(3, 10, 20, 200)  # still behind, but it reached where the leader was at its previous fetch
    assert lp.lagging(150, 100) == []  # so it counts as caught up as of that fetch (100)
    assert lp.lagging(350, 100) == [2, 3]  # neither caught up since
    lp.fetched(2, 20, 20, 360)
    assert lp.lagging(360, 100) == [3]
    lp.isr = [1, 2]
    assert lp.high_watermark(20) == 20
    assert lp.rejoining(20) == []
    lp.fetched(3, 20, 20, 400)
    assert lp.rejoining(20) == [3]


def test_a_follower_rejoins_a_leader_alone_in_its_isr_only_at_its_log_end():
    lp = leader(isr=[1])  # nothing waited for followers while the leader was alone: its kept hw is stale
    lp.fetched(2, 18, 300, 10)
    assert lp.rejoining(300) == []  # 18 of 300: it would have joined the ISR without 282 records
    lp.fetched(2, 300, 300, 20)
    assert lp.rejoining(300) == [2]
