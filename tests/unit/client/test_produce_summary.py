"""What `kafkactl produce` says of a run: the rate (not misleading for a few messages) and what it waited for."""

from __future__ import annotations

from broker.client.producer import ProduceStats
from kafkactl.commands.produce import _rate


def test_the_rate_has_the_precision_a_small_rate_needs_and_is_left_out_when_it_says_nothing():
    assert _rate(4, 12.0) == " (0.33 msg/s)"  # (it said "0 msg/s")
    assert _rate(30, 12.0) == " (2.5 msg/s)"
    assert _rate(200000, 3.5) == " (57,143 msg/s)"
    assert _rate(4, 0.02) == ""  # under a second
    assert _rate(2, 12.0) == ""  # a message or two


def test_the_waits_are_counted_in_one_clause():
    stats = ProduceStats()
    assert stats.describe() == ""
    stats.retries = {"NOT_ENOUGH_REPLICAS": 3, "an unreachable broker": 1}
    stats.throttled, stats.throttle_ms = 12, 41234
    stats.leader_wait_s = 9.84
    assert stats.describe() == ("3 retries after NOT_ENOUGH_REPLICAS, 1 retry after an unreachable broker, "
                                "waited 9.8 s for a leader, throttled 12 times (41.2 s)")  # fmt: skip
