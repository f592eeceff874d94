"""Replica assignment as Kafka's rack-unaware `AdminUtils.assignReplicasToBrokers` does it (issue 26, item 9).

Leaders go round-robin from a start index; followers sit at a distance that shifts by one each round of brokers,
so a dead broker's leaderships spread over the others instead of all falling to its neighbour."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.topics import assign_replicas, leader_index


def _takeover(assignment: dict[int, list[int]], dead: int) -> Counter:
    """Who leads the partitions `dead` led once it is gone: the first replica still alive in each list."""
    return Counter(next(r for r in replicas if r != dead) for replicas in assignment.values() if replicas[0] == dead)


def test_kafkas_documented_example() -> None:
    """AdminUtils' scaladoc: 5 brokers, 10 partitions, 3 replicas, start index 0 —

    broker-0  broker-1  broker-2  broker-3  broker-4
    p0        p1        p2        p3        p4       (1st replica)
    p5        p6        p7        p8        p9       (1st replica)
    p4        p0        p1        p2        p3       (2nd replica)
    p8        p9        p5        p6        p7       (2nd replica)
    p3        p4        p0        p1        p2       (3rd replica)
    p7        p8        p9        p5        p6       (3rd replica)
    """
    assert assign_replicas([0, 1, 2, 3, 4], 10, 3, 0) == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2],
    }  # fmt: skip


def test_broker_ids_are_placed_by_their_sorted_order() -> None:
    assert assign_replicas([40, 0, 30, 10, 20], 10, 3, 0) == {
        p: [r * 10 for r in replicas] for p, replicas in assign_replicas([0, 1, 2, 3, 4], 10, 3, 0).items()
    }


def test_the_issues_topic_no_longer_hands_one_broker_every_leadership() -> None:
    """`topic create orders -p 6 -r 3` on brokers 1, 2, 3 gave 1,2,3 2,3,1 3,1,2 1,2,3 2,3,1 3,1,2: broker 1's death
    gave broker 2 four leaders of six. Whatever the start and shift, each survivor now takes one of its two."""
    for start in range(3):
        for shift in range(3):
            got = assign_replicas([1, 2, 3], 6, 3, start, replica_shift=shift)
            for dead in (1, 2, 3):
                assert sorted(_takeover(got, dead).values()) == [1, 1], (start, shift, dead, got)
    assert assign_replicas([1, 2, 3], 6, 3, 0) == {
        0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2], 3: [1, 3, 2], 4: [2, 1, 3], 5: [3, 2, 1],
    }  # fmt: skip


def test_start_index_and_shift_are_random_unless_given() -> None:
    rng = random.Random(7)
    layouts = [assign_replicas([1, 2, 3, 4], 4, 2, rng=rng) for _ in range(200)]
    assert {layout[0][0] for layout in layouts} == {1, 2, 3, 4}  # every start index
    assert {layout[0][1] - layout[0][0] for layout in layouts if layout[0][0] == 1} == {1, 2, 3}  # every shift
    assert assign_replicas([1, 2, 3, 4], 4, 2, rng=random.Random(3)) == assign_replicas(
        [1, 2, 3, 4], 4, 2, rng=random.Random(3)
    )


def test_added_partitions_continue_from_partition_zeros_leader() -> None:
    """CreatePartitions, as Kafka: start index = the index of the first broker with an id >= partition 0's
    leader, numbering from the partitions there are: the leaders go on round-robin."""
    ids = [1, 2, 3, 4]
    created = assign_replicas(ids, 6, 3, 2)
    added = assign_replicas(ids, 5, 3, leader_index(ids, created[0][0]), start_partition=6)
    assert sorted(added) == [6, 7, 8, 9, 10]
    leaders = [{**created, **added}[p][0] for p in range(11)]
    assert leaders == [ids[(p + 2) % 4] for p in range(11)]
    assert Counter(leaders) == {3: 3, 4: 3, 1: 3, 2: 2}
    assert all(len(set(r)) == 3 for r in added.values())


def test_leader_index() -> None:
    assert leader_index([5, 1, 3], 3) == 1
    assert leader_index([1, 3, 5], 4) == 2  # that broker is gone: the next id up
    assert leader_index([1, 3, 5], 9) == 0  # none above it: from the start


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(2, 8),
    rounds=st.integers(1, 3),
    rf=st.integers(2, 8),
    start=st.integers(0, 20),
    shift=st.integers(0, 20),
    seed=st.integers(0, 2**16),
)
def test_a_dead_brokers_leaderships_spread_evenly(n: int, rounds: int, rf: int, start: int, shift: int,
                                                  seed: int) -> None:  # fmt: skip
    """For p a multiple of n(n-1): removing any broker hands each other broker the same number of its
    leaderships, and each other broker follows the same number of its partitions (Kafka's goal 2)."""
    rf = min(rf, n)
    ids = random.Random(seed).sample(range(1000), n)
    partitions = rounds * n * (n - 1)
    got = assign_replicas(ids, partitions, rf, start, replica_shift=shift)
    for b in ids:
        others = [o for o in ids if o != b]
        assert [_takeover(got, b)[o] for o in others] == [rounds] * (n - 1)
        follows = Counter(f for r in got.values() if r[0] == b for f in r[1:])
        assert [follows[o] for o in others] == [rounds * (rf - 1)] * (n - 1)


@settings(max_examples=300, deadline=None)
@given(
    brokers=st.sets(st.integers(0, 1000), min_size=2, max_size=8).map(list),
    partitions=st.integers(1, 60),
    rf=st.integers(2, 8),
    start_partition=st.integers(0, 30),
    seed=st.integers(0, 2**16),
)
def test_takeover_is_as_even_as_the_counts_allow(brokers: list[int], partitions: int, rf: int, start_partition: int,
                                                 seed: int) -> None:  # fmt: skip
    """For any count (added partitions too), a dead broker's leaderships differ by at most one between the others,
    and leaders stay within one of each other."""
    rf = min(rf, len(brokers))
    got = assign_replicas(brokers, partitions, rf, start_partition=start_partition, rng=random.Random(seed))
    assert sorted(got) == list(range(start_partition, start_partition + partitions))
    assert all(len(set(r)) == rf and set(r) <= set(brokers) for r in got.values())
    leads = Counter(r[0] for r in got.values())
    assert max(leads[b] for b in brokers) - min(leads[b] for b in brokers) <= 1
    for b in brokers:
        taken = _takeover(got, b)
        counts = [taken[o] for o in brokers if o != b]
        assert max(counts) - min(counts) <= 1, (b, got)
