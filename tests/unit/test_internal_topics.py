"""Kafka's internal topic names (broker/topics.py): legal names that no client creates or deletes."""

from __future__ import annotations

import pytest

from broker.topics import INTERNAL_TOPICS, internal_topic_error, is_internal, topic_name_error


def test_kafkas_internal_topics() -> None:
    """org.apache.kafka.common.internals.Topic's INTERNAL_TOPICS, KRaft's metadata log included."""
    assert INTERNAL_TOPICS == {"__consumer_offsets", "__transaction_state", "__cluster_metadata"}
    for name in INTERNAL_TOPICS:
        assert topic_name_error(name) is None  # legal names: refused for what they are, not their characters
        assert is_internal(name)
        assert internal_topic_error(name, "deleted") == f"topic {name} is a Kafka internal topic and is not " \
            "allowed to be deleted"  # fmt: skip


@pytest.mark.parametrize("name", ["__consumer_offsets_", "_consumer_offsets", "__Consumer_offsets", "__x",
                                  "__confluent.support.metrics", "connect-offsets"])  # fmt: skip
def test_other_names_are_not_internal(name: str) -> None:
    assert not is_internal(name)
    assert internal_topic_error(name, "created") is None
