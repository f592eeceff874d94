"""split_ranges (broker.spark.source): Spark's offset-range calculator, plus reaching minPartitions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from broker.spark.source import OffsetRange, split_ranges  # noqa: E402


def R(topic: str, partition: int, start: int, end: int) -> OffsetRange:  # noqa: N802
    return OffsetRange(topic, partition, start, end)


def test_nothing_in_nothing_out():
    assert split_ranges([]) == []
    assert split_ranges([], 4, 10) == []


def test_without_limits_one_piece_per_nonempty_range_sorted():
    ranges = [R("b", 0, 0, 5), R("a", 1, 3, 3), R("a", 1, 7, 9), R("a", 0, 10, 20)]
    assert split_ranges(ranges) == [R("a", 0, 10, 20), R("a", 1, 7, 9), R("b", 0, 0, 5)]


def test_enough_ranges_already_leaves_them_whole():
    ranges = [R("t", p, 1, 2) for p in range(3)]
    assert split_ranges(ranges, 3) == ranges
    assert split_ranges(ranges, 2) == ranges


def test_one_range_into_min_partitions_pieces():
    assert split_ranges([R("t", 0, 1, 5)], 4) == [R("t", 0, 1, 2), R("t", 0, 2, 3), R("t", 0, 3, 4), R("t", 0, 4, 5)]


def test_empty_ranges_are_ignored_and_the_rest_split():
    # Spark's SPARK-30656 case: the empty range counts for nothing, the other gets all three pieces
    got = split_ranges([R("t", 0, 1, 1), R("t", 1, 1, 21)], 3)
    assert got == [R("t", 1, 1, 7), R("t", 1, 7, 14), R("t", 1, 14, 21)]


def test_small_ranges_stay_whole_and_big_ones_take_the_rest_proportionally():
    # total 24, ideal 8: t-0 (4 = 0.5 shares) stays whole; t-1 gets the other 2 of 3 partitions
    got = split_ranges([R("t", 0, 1, 5), R("t", 1, 1, 21)], 3)
    assert got == [R("t", 0, 1, 5), R("t", 1, 1, 11), R("t", 1, 11, 21)]


def test_later_pieces_take_the_remainder():
    # Spark's getDividedPartition: piece i takes remaining // (parts - i)
    assert split_ranges([R("t", 0, 0, 10)], 3) == [R("t", 0, 0, 3), R("t", 0, 3, 6), R("t", 0, 6, 10)]


def test_spark_rounding_short_of_min_partitions_is_topped_up():
    # Spark leaves 3 ranges of 10 as 3 partitions for minPartitions=4 (each is 1.33 shares < 1.5);
    # the largest piece (ties: first in order) is split once more
    ranges = [R("t", p, 0, 10) for p in range(3)]
    assert split_ranges(ranges, 4) == [R("t", 0, 0, 5), R("t", 0, 5, 10), R("t", 1, 0, 10), R("t", 2, 0, 10)]


def test_rounding_half_up_as_scala():
    # both ranges are big (1.5 and 2.5 shares of 4); t-1's 2.5 parts round up to 3 as Scala's math.round
    # does (Python's round would give 2)
    got = split_ranges([R("t", 0, 0, 3), R("t", 1, 0, 5)], 4)
    assert got == [R("t", 0, 0, 1), R("t", 0, 1, 3), R("t", 1, 0, 1), R("t", 1, 1, 3), R("t", 1, 3, 5)]


def test_min_partitions_beyond_the_offsets_gives_one_offset_each():
    assert split_ranges([R("t", 0, 7, 10)], 10) == [R("t", 0, 7, 8), R("t", 0, 8, 9), R("t", 0, 9, 10)]


def test_max_records_caps_every_piece():
    assert split_ranges([R("t", 0, 0, 10)], None, 3) == [R("t", 0, 0, 2), R("t", 0, 2, 4), R("t", 0, 4, 7),
                                                         R("t", 0, 7, 10)]  # fmt: skip
    assert split_ranges([R("t", 0, 0, 9)], None, 3) == [R("t", 0, 0, 3), R("t", 0, 3, 6), R("t", 0, 6, 9)]
    assert split_ranges([R("t", 0, 5, 8)], None, 100) == [R("t", 0, 5, 8)]


def test_max_records_then_min_partitions():
    # 4 pieces of at most 5 after max_records, then split further to reach 6
    got = split_ranges([R("t", 0, 0, 20)], 6, 5)
    assert len(got) >= 6 and all(r.size <= 5 for r in got)
    assert got == sorted(got) and _covered(got) == set(range(20))


@pytest.mark.parametrize("bad", [(0, None), (-1, None), (None, 0), (None, -5)])
def test_non_positive_limits_are_refused(bad):
    with pytest.raises(ValueError):
        split_ranges([R("t", 0, 0, 10)], *bad)


def _covered(ranges: list[OffsetRange]) -> set[int]:
    return {o for r in ranges for o in range(r.start, r.end)}


ranges_strategy = st.lists(
    st.tuples(st.sampled_from("abc"), st.integers(0, 3), st.integers(0, 1000), st.integers(0, 400)),
    max_size=8,
).map(lambda xs: list({(t, p): R(t, p, s, s + n) for t, p, s, n in xs}.values()))


@given(ranges_strategy, st.one_of(st.none(), st.integers(1, 60)), st.one_of(st.none(), st.integers(1, 500)))
def test_the_pieces_tile_the_ranges_exactly(ranges, min_partitions, max_records):
    got = split_ranges(ranges, min_partitions, max_records)
    assert got == split_ranges(list(reversed(ranges)), min_partitions, max_records)  # deterministic, order-free
    assert got == sorted(got)
    assert all(r.size > 0 for r in got)
    whole = {(r.topic, r.partition, o) for r in ranges for o in range(r.start, r.end)}
    pieces = [(r.topic, r.partition, o) for r in got for o in range(r.start, r.end)]
    assert len(pieces) == len(set(pieces)) and set(pieces) == whole  # every offset exactly once
    if max_records is not None:
        assert all(r.size <= max_records for r in got)
    if min_partitions is not None:
        assert len(got) >= min(min_partitions, len(whole))
    for r in got:  # a piece never spans two input ranges
        assert any(r.topic == i.topic and r.partition == i.partition and i.start <= r.start and r.end <= i.end
                   for i in ranges)  # fmt: skip
