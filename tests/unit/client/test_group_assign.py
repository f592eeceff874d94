"""The group consumer's pure parts: Algorithm 1's range assignment and the property parser."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.client.group import assign_range, range_assignment
from broker.client.group_member import describe_assignment, new_consumer_id, settings_from_properties
from broker.errors import UsageError


def test_twelve_partitions_three_consumers_get_four_contiguous_each() -> None:
    parts = list(range(12))
    cs = ["c1", "c2", "c3"]
    assert assign_range(parts, cs, "c1") == [0, 1, 2, 3]
    assert assign_range(parts, cs, "c2") == [4, 5, 6, 7]
    assert assign_range(parts, cs, "c3") == [8, 9, 10, 11]


def test_the_first_n_mod_c_consumers_get_one_extra() -> None:
    parts = list(range(10))
    cs = ["a", "b", "c"]
    assert [assign_range(parts, cs, c) for c in cs] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert [assign_range(list(range(5)), ["a", "b"], c) for c in ("a", "b")] == [[0, 1, 2], [3, 4]]


def test_inputs_are_sorted_first_so_every_member_computes_the_same() -> None:
    # partitions sort numerically (10 after 9), consumers as strings
    parts = [10, 3, 0, 9, 1, 2]
    assert assign_range(parts, ["z", "a"], "a") == [0, 1, 2]
    assert assign_range(parts, ["z", "a"], "z") == [3, 9, 10]
    assert assign_range(parts, ["a", "z", "a"], "z") == [3, 9, 10]  # duplicates ignored


def test_more_consumers_than_partitions_leaves_the_last_idle() -> None:
    cs = ["a", "b", "c", "d"]
    assert [assign_range([0, 1], cs, c) for c in cs] == [[0], [1], [], []]


def test_edge_cases() -> None:
    assert assign_range([], ["a"], "a") == []
    assert assign_range([0, 1], ["a"], "stranger") == []
    assert assign_range([0, 1, 2], ["a"], "a") == [0, 1, 2]


@given(
    n=st.integers(min_value=0, max_value=64),
    members=st.sets(st.text(alphabet="abcdefgh0123456789_-", min_size=1, max_size=8), min_size=1, max_size=12),
)
def test_ranges_partition_the_topic(n: int, members: set[str]) -> None:
    """Disjoint, together everything, contiguous, sizes differ by at most one, larger ones first."""
    parts = list(range(n))
    ordered = sorted(members)
    ranges = [assign_range(parts, list(members), c) for c in ordered]
    flat = [p for r in ranges for p in r]
    assert flat == parts  # in member order the ranges are consecutive and cover every partition once
    sizes = [len(r) for r in ranges]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)


def test_range_assignment_per_topic_subscribers() -> None:
    got = range_assignment({"t": [0, 1, 2, 3], "u": [0, 1]}, {"a": ["t", "u"], "b": ["t"], "c": ["u"]})
    assert got == {"a": [("t", 0), ("t", 1), ("u", 0)], "b": [("t", 2), ("t", 3)], "c": [("u", 1)]}
    assert range_assignment({"t": []}, {"a": ["t"]}) == {"a": []}


def test_describe_assignment() -> None:
    assert describe_assignment(["t"], [("t", 2), ("t", 0), ("t", 1)]) == "t[0,1,2]"
    assert describe_assignment(["t"], []) == "t[]"
    assert describe_assignment(["u", "t"], [("u", 1), ("t", 0)]) == "t[0] u[1]"


def test_consumer_ids_are_unique_and_start_with_the_group() -> None:
    a, b = new_consumer_id("g"), new_consumer_id("g")
    assert a != b and a.startswith("g_") and b.startswith("g_")
    assert "/" not in a


def test_properties_become_typed_settings() -> None:
    got = settings_from_properties({
        "zookeeper.session.timeout.ms": "2000", "enable.auto.commit": "false", "auto.offset.reset": "earliest",
        "fetch.max.wait.ms": "100", "isolation.level": "read_committed",
    })  # fmt: skip
    assert got == {
        "zookeeper_session_timeout_ms": 2000, "enable_auto_commit": False, "auto_offset_reset": "earliest",
        "fetch_max_wait_ms": 100, "isolation_level": 1,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("props", "needle"),
    [
        ({"no.such.key": "1"}, "no.such.key"),
        ({"group.id": "g"}, "group.id"),
        ({"auto.commit.interval.ms": "soon"}, "integer"),
        ({"auto.commit.interval.ms": "-1"}, "negative"),
        ({"enable.auto.commit": "yes"}, "true or false"),
        ({"isolation.level": "dirty"}, "read_committed"),
    ],
)
def test_bad_properties_are_usage_errors(props: dict[str, str], needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        settings_from_properties(props)
