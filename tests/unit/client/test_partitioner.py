"""Kafka's default partitioner (broker.client.partitioner): murmur2, key → partition, sticky unkeyed batches."""

from __future__ import annotations

import collections

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.client.partitioner import StickyPartitioner, murmur2, partition_for_key

kp_default = pytest.importorskip("kafka.partitioner.default")

# Apache Kafka's clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def _signed(h: int) -> int:
    h &= 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@pytest.mark.parametrize(("data", "expected"), list(KAFKA_VECTORS.items()))
def test_murmur2_matches_kafkas_test_vectors(data, expected):
    assert murmur2(data) == expected


@pytest.mark.parametrize("data", [b"", b"a", b"ab", b"abc", b"abcd", b"abcde", b"\xff" * 9, bytes(range(256))])
def test_every_tail_length_matches_kafka_python(data):
    assert murmur2(data) == _signed(kp_default.murmur2(data))


@given(st.binary(max_size=300))
def test_murmur2_matches_kafka_python(data):
    assert murmur2(data) == _signed(kp_default.murmur2(data))
    assert -(2**31) <= murmur2(data) < 2**31


class _Cluster:
    """The two ClusterMetadata calls kafka-python's DefaultPartitioner makes."""

    def __init__(self, n: int) -> None:
        self.n = n

    def topics(self):
        return {"t"}

    def partitions_for_topic(self, topic):
        return set(range(self.n))

    def available_partitions_for_topic(self, topic):
        return set(range(self.n))


@given(st.binary(max_size=100), st.integers(min_value=1, max_value=64))
def test_partition_for_key_matches_kafka_pythons_default_partitioner(key, n):
    expected = kp_default.DefaultPartitioner().partition("t", key, key, None, None, _Cluster(n))
    assert partition_for_key(key, n) == expected == (murmur2(key) & 0x7FFFFFFF) % n


def test_a_negative_hash_is_masked_not_negated():
    # murmur2(b"21") is negative; Java masks the sign bit (toPositive), it does not take abs().
    assert partition_for_key(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7 == 3
    assert partition_for_key(b"21", 7) != abs(-973932308) % 7


@given(st.binary(max_size=50), st.integers(min_value=1, max_value=1000))
def test_partition_for_key_is_in_range_and_stable(key, n):
    p = partition_for_key(key, n)
    assert 0 <= p < n
    assert partition_for_key(bytes(key), n) == p


# --- sticky ----------------------------------------------------------------------------------------


def test_sticky_stays_on_one_partition_until_the_batch_is_done():
    s = StickyPartitioner()
    first = s.partition("t", 8)
    assert 0 <= first < 8
    assert all(s.partition("t", 8) == first for _ in range(100))
    s.batch_done("t", first, 8)
    second = s.partition("t", 8)
    assert second != first
    assert all(s.partition("t", 8) == second for _ in range(100))


def test_sticky_moves_to_another_partition_after_every_batch():
    s = StickyPartitioner()
    seen = collections.Counter()
    prev = s.partition("t", 4)
    for _ in range(400):
        s.batch_done("t", prev, 4)
        cur = s.partition("t", 4)
        assert cur != prev
        seen[cur] += 1
        prev = cur
    assert set(seen) == {0, 1, 2, 3}  # every partition gets batches


def test_sticky_with_one_partition_stays_there():
    s = StickyPartitioner()
    assert s.partition("t", 1) == 0
    s.batch_done("t", 0, 1)
    assert s.partition("t", 1) == 0


def test_a_batch_done_for_another_partition_changes_nothing():
    s = StickyPartitioner()
    cur = s.partition("t", 5)
    s.batch_done("t", (cur + 1) % 5, 5)
    assert s.partition("t", 5) == cur


def test_topics_are_independent():
    s = StickyPartitioner()
    a = s.partition("a", 6)
    s.partition("b", 6)
    s.batch_done("b", s.partition("b", 6), 6)
    assert s.partition("a", 6) == a


def test_fewer_partitions_than_the_sticky_one_picks_again_in_range():
    s = StickyPartitioner()
    s.current["t"] = 9
    assert 0 <= s.partition("t", 3) < 3
