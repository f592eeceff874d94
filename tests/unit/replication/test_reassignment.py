"""A reassignment's pure rules: the widened assignment, the state that finishes a move, throttled replicas,
plan parsing, and the throttle's byte budget."""

import json

import pytest

from broker.replication.election import State
from broker.replication.reassignment import PlanError, finished, parse_plan, plan_json, throttled, widened
from broker.replication.throttle import Throttle


def test_a_widened_assignment_lists_the_target_first_then_the_replicas_leaving():
    assert widened([1, 2, 3], [4, 2, 5]) == ([4, 2, 5, 1, 3], [4, 5], [1, 3])
    assert widened([1, 2], [2, 1]) == ([2, 1], [], [])  # a reorder adds and removes nothing
    assert widened([1, 2, 3], [1]) == ([1, 2, 3], [], [2, 3])


def test_a_move_finishes_only_once_every_target_replica_is_in_sync():
    live = {1, 2, 3, 4}
    assert finished([4, 2], State(1, 5, [1, 2]), live) is None  # 4 still copying
    # the leader leaves: the first live target replica leads at a new epoch; the ISR shrinks to the target
    assert finished([4, 2], State(1, 5, [1, 2, 4]), live) == State(4, 6, [2, 4])
    # the leader stays: same epoch, only the ISR shrinks
    assert finished([2, 4], State(2, 5, [1, 2, 4]), live) == State(2, 5, [2, 4])
    # a dead leader in the target is not kept
    assert finished([2, 4], State(2, 5, [2, 4]), {4}) == State(4, 6, [2, 4])
    assert finished([2], State(1, 5, [1, 2]), {1}) is None  # no live target replica to lead


def test_throttled_replicas_are_named_partition_colon_broker_or_star():
    assert throttled("0:3,1:3", 1, 3) and not throttled("0:3,1:3", 1, 2) and not throttled("0:3,1:3", 2, 3)
    assert throttled(" * ", 9, 9) and not throttled("", 0, 0) and not throttled(None, 0, 0)


def test_a_plan_round_trips_through_kafkas_json():
    moves = {("a", 0): [1, 2], ("a", 1): [2, 3], ("b.c", 0): [3]}
    text = plan_json(moves)
    assert parse_plan(text) == moves
    assert json.loads(text)["partitions"][0] == {"topic": "a", "partition": 0, "replicas": [1, 2],
                                                  "log_dirs": ["any", "any"]}  # fmt: skip


@pytest.mark.parametrize(
    ("plan", "why"),
    [
        ("[", "not JSON"),
        ("[]", 'no "partitions"'),
        ('{"partitions": []}', 'no "partitions"'),
        ('{"partitions": [1]}', "is not an object"),
        ('{"partitions": [{"partition": 0, "replicas": [1]}]}', 'no "topic"'),
        ('{"partitions": [{"topic": "a b", "partition": 0, "replicas": [1]}]}', "has characters other than"),
        ('{"partitions": [{"topic": "a", "partition": -1, "replicas": [1]}]}', 'no "partition"'),
        ('{"partitions": [{"topic": "a", "partition": true, "replicas": [1]}]}', 'no "partition"'),
        ('{"partitions": [{"topic": "a", "partition": 0, "replicas": ["1"]}]}', "non-empty list"),
        ('{"partitions": [{"topic": "a", "partition": 0, "replicas": [2, 2]}]}', "names a broker twice"),
        ('{"partitions": [{"topic": "a", "partition": 0, "replicas": [1], "log_dirs": ["/d"]}]}', "log dirs"),
        (
            '{"partitions": [{"topic": "a", "partition": 0, "replicas": [1]}, {"topic": "a", "partition": 0, '
            '"replicas": [2]}]}',
            "in the plan twice",
        ),
    ],
)
def test_a_bad_plan_names_its_first_fault(plan, why):
    with pytest.raises(PlanError, match=None) as err:
        parse_plan(plan)
    assert why in str(err.value)


def test_the_throttle_lets_a_second_of_its_rate_through_then_makes_throttled_copies_wait():
    t = Throttle()
    t.took(10**9, now=0.0)
    assert t.wait_s(now=0.0) == 0.0  # no rate: no throttle
    t.set_rate(1000)
    t._at = 0.0  # (a fixed clock)
    assert t.wait_s(now=1.0) == 0.0  # a second's budget, never more
    assert t.wait_s(now=60.0) == 0.0
    t.took(3000, now=60.0)  # 1000 of budget, 3000 taken: 2000 owed, two seconds at 1000 B/s
    assert t.wait_s(now=60.0) == pytest.approx(2.0)
    assert t.wait_s(now=61.5) == pytest.approx(0.5)
    assert t.wait_s(now=62.0) == 0.0
    t.set_rate(0)  # removed
    assert t.rate is None and t.wait_s(now=62.0) == 0.0
