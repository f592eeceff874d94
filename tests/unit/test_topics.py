"""Topic rules: Kafka's legal names and replica assignment (Kafka's own cases are in test_assignment.py)."""

from __future__ import annotations

import string
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.topics import MAX_NAME_LENGTH, MAX_PARTITIONS, assign_replicas, topic_name_error

LEGAL_CHARS = string.ascii_letters + string.digits + "._-"


# --- names ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["t", "my-topic", "my_topic", "my.topic", "T0", "__consumer_offsets", "...", ".a", "a.", "-", "_", "0",
     LEGAL_CHARS],
)  # fmt: skip
def test_legal_names(name: str) -> None:
    assert topic_name_error(name) is None


def test_length_limit() -> None:
    assert MAX_NAME_LENGTH == 249
    assert topic_name_error("a" * 249) is None
    err = topic_name_error("a" * 250)
    assert err is not None and "250" in err and "249" in err
    assert topic_name_error("a" * 1000) is not None


@pytest.mark.parametrize("name", [".", ".."])
def test_dot_and_dot_dot(name: str) -> None:
    err = topic_name_error(name)
    assert err is not None and repr(name) in err


def test_empty() -> None:
    err = topic_name_error("")
    assert err is not None and "empty" in err


@pytest.mark.parametrize(
    "name",
    ["a b", "a/b", "a\\b", "a:b", "a,b", "a*", "a+b", "é", "topic!", "a\tb", " a", "a ", "a\x00", "ü-topic", "a@b",
     "a#b", "名前"],
)  # fmt: skip
def test_illegal_characters(name: str) -> None:
    err = topic_name_error(name)
    assert err is not None and repr(name) in err


@pytest.mark.parametrize("name", ["abc\n", "\nabc", "a\nb", "abc\r\n"])
def test_newlines_are_illegal(name: str) -> None:
    # Kafka's rule is [a-zA-Z0-9._-]+ over the whole name: a newline is never legal
    assert topic_name_error(name) is not None


@settings(max_examples=300)
@given(name=st.text(min_size=1, max_size=260))
def test_name_rule_matches_kafkas(name: str) -> None:
    legal = name not in (".", "..") and len(name) <= 249 and all(c in LEGAL_CHARS for c in name)
    assert (topic_name_error(name) is None) == legal


# --- replica assignment -----------------------------------------------------------------------


def test_round_robin_leaders_and_shifted_followers() -> None:
    # leaders round-robin; the followers' distance grows by one each round of brokers (Kafka's layout)
    assert assign_replicas([1, 2, 3], 6, 2, 0) == {
        0: [1, 2], 1: [2, 3], 2: [3, 1], 3: [1, 3], 4: [2, 1], 5: [3, 2],
    }  # fmt: skip


def test_brokers_are_sorted_first() -> None:
    assert assign_replicas([3, 1, 2], 3, 3, 0) == {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
    assert assign_replicas([10, 5], 2, 1, 0) == {0: [5], 1: [10]}


def test_start_offset_shifts_the_leaders() -> None:
    # (a fixed start index fixes the followers' shift too, as Kafka's fixedStartIndex does)
    assert assign_replicas([1, 2, 3], 3, 2, start_index=1) == {0: [2, 1], 1: [3, 2], 2: [1, 3]}
    assert assign_replicas([1, 2, 3], 2, 1, start_index=5) == {0: [3], 1: [1]}  # start wraps around
    assert assign_replicas([1, 2, 3], 1, 1, start_index=3) == assign_replicas([1, 2, 3], 1, 1, start_index=0)


def test_single_broker() -> None:
    assert assign_replicas([7], 3, 1) == {0: [7], 1: [7], 2: [7]}


@settings(max_examples=200)
@given(
    brokers=st.sets(st.integers(0, 1000), min_size=1, max_size=8).map(list),
    partitions=st.integers(1, 40),
    rf=st.integers(1, 8),
    start=st.none() | st.integers(0, 50),
)
def test_assignment_properties(brokers: list[int], partitions: int, rf: int, start: int | None) -> None:
    if rf > len(brokers):
        with pytest.raises(ValueError):
            assign_replicas(brokers, partitions, rf, start)
        return
    got = assign_replicas(brokers, partitions, rf, start)
    assert sorted(got) == list(range(partitions))
    for replicas in got.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf  # distinct
        assert set(replicas) <= set(brokers)
    # leaders spread evenly: no broker leads more than one partition more than any other
    leads = Counter(r[0] for r in got.values())
    counts = [leads.get(b, 0) for b in brokers]
    assert max(counts) - min(counts) <= 1
    # and so do replicas overall
    load = Counter(b for r in got.values() for b in r)
    counts = [load.get(b, 0) for b in brokers]
    assert max(counts) - min(counts) <= rf


@pytest.mark.parametrize(
    ("brokers", "partitions", "rf", "match"),
    [
        ([1, 2], 0, 1, "partitions must be between 1 and 10000, not 0"),
        ([1, 2], -3, 1, "not -3"),
        ([1, 2], 10001, 1, "partitions must be between 1 and 10000, not 10001"),
        ([1, 2], 1, 0, "replication factor must be at least 1, not 0"),
        ([1, 2], 1, 3, "replication factor 3 is larger than the 2 live broker"),
        ([], 1, 1, "larger than the 0 live broker"),
    ],
)
def test_errors(brokers: list[int], partitions: int, rf: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        assign_replicas(brokers, partitions, rf)


def test_partition_cap() -> None:
    assert MAX_PARTITIONS == 10000
    got = assign_replicas([1, 2, 3], MAX_PARTITIONS, 3)
    assert len(got) == MAX_PARTITIONS and sorted(got[MAX_PARTITIONS - 1]) == [1, 2, 3]


def test_input_list_is_not_modified() -> None:
    brokers = [3, 1, 2]
    assign_replicas(brokers, 2, 2)
    assert brokers == [3, 1, 2]
