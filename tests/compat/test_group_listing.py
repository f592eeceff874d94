"""Listing and describing consumer groups through unmodified third-party admin clients against a live kafkactl
broker (a real broker process on a real ZooKeeper), now that ListGroups reaches v4 (each group's state and
the states filter, KIP-518) and DescribeGroups v5 (flexible).

Two groups: one Stable (a confluent-kafka consumer subscribed and assigned every partition) and one Empty
(offsets committed by a consumer that never joined). confluent-kafka's AdminClient (librdkafka),
kafka-python's KafkaAdminClient and aiokafka's AIOKafkaAdminClient must see both with their real states,
filter them by state, and describe the stable one's member and assignment.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from confluent_kafka import Consumer, ConsumerGroupState, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka.admin import KafkaAdminClient

from broker.client.admin import Admin
from tests.integration.cluster import BrokerProcess

GROUP_OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}
PARTITIONS = 3
DEADLINE = 30.0

pytestmark = pytest.mark.slow


class Groups:
    """A broker with a topic, a Stable group (`stable`, its consumer `member`) and an Empty group (`empty`)."""

    def __init__(self, b: BrokerProcess) -> None:
        self.b = b
        self.topic = f"listing-{uuid.uuid4().hex[:8]}"
        self.stable = f"stable-{uuid.uuid4().hex[:8]}"
        self.empty = f"empty-{uuid.uuid4().hex[:8]}"
        with Admin(b.bootstrap) as admin:
            admin.create_topic(self.topic, PARTITIONS, 1)
        committer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": self.empty, "enable.auto.commit": False})
        try:  # a commit without membership (generation -1): the group has offsets and no member
            committer.commit(offsets=[TopicPartition(self.topic, p, 5 + p) for p in range(PARTITIONS)],
                             asynchronous=False)  # fmt: skip
        finally:
            committer.close()
        self.member = Consumer({"bootstrap.servers": b.bootstrap, "group.id": self.stable,
                                "session.timeout.ms": 6000, "auto.offset.reset": "earliest"})  # fmt: skip
        self.member.subscribe([self.topic])
        deadline = time.monotonic() + DEADLINE
        while len(self.member.assignment()) < PARTITIONS:
            assert time.monotonic() < deadline, "the stable group's member was never assigned every partition"
            self.member.poll(0.2)
        self.member_id = self.member.memberid()

    def close(self) -> None:
        self.member.close()


@pytest.fixture
def groups(start_broker) -> Iterator[Groups]:  # noqa: ANN001
    g = Groups(start_broker(1, overrides=GROUP_OVERRIDES))
    try:
        yield g
    finally:
        g.close()


def wait_stable(list_states: Any, g: Groups) -> dict[str, str]:
    """Poll `list_states()` ({group: state}) until the stable group is listed Stable (its SyncGroup may still
    be on its way when the consumer reports the assignment); the last listing."""
    deadline = time.monotonic() + DEADLINE
    while True:
        states = list_states()
        if states.get(g.stable) == "Stable" or time.monotonic() > deadline:
            return states
        time.sleep(0.2)


def test_confluent_kafka_lists_groups_with_their_states_filters_and_describes(groups: Groups) -> None:
    admin = AdminClient({"bootstrap.servers": groups.b.bootstrap})

    def listed(states: set[ConsumerGroupState] | None = None) -> dict[str, str]:
        kwargs = {"states": states} if states else {}
        result = admin.list_consumer_groups(request_timeout=10, **kwargs).result()
        assert not result.errors, result.errors
        return {g.group_id: g.state.name for g in result.valid}

    everything = wait_stable(lambda: {k: v.title() for k, v in listed().items()}, groups)
    assert everything == {groups.stable: "Stable", groups.empty: "Empty"}  # (no longer "Unknown")
    assert listed({ConsumerGroupState.STABLE}) == {groups.stable: "STABLE"}
    assert listed({ConsumerGroupState.EMPTY}) == {groups.empty: "EMPTY"}
    assert listed({ConsumerGroupState.EMPTY, ConsumerGroupState.STABLE}).keys() == {groups.stable, groups.empty}
    assert listed({ConsumerGroupState.PREPARING_REBALANCING}) == {}

    described = {g: f.result() for g, f in admin.describe_consumer_groups([groups.stable, groups.empty]).items()}
    stable, empty = described[groups.stable], described[groups.empty]
    assert (stable.state, stable.is_simple_consumer_group, stable.partition_assignor) == (
        ConsumerGroupState.STABLE,
        False,
        "range",
    )
    assert stable.coordinator.id == 1
    [member] = stable.members
    assert member.member_id == groups.member_id
    assert sorted((tp.topic, tp.partition) for tp in member.assignment.topic_partitions) == [
        (groups.topic, p) for p in range(PARTITIONS)
    ]
    assert empty.state == ConsumerGroupState.EMPTY and empty.members == []


def test_kafka_python_lists_groups_with_their_states_filters_and_describes(groups: Groups) -> None:
    admin = KafkaAdminClient(bootstrap_servers=groups.b.bootstrap, request_timeout_ms=10_000)
    try:

        def listed(states: list[str] | None = None) -> dict[str, str]:
            return {g["group_id"]: g["group_state"] for g in admin.list_groups(states_filter=states)}

        assert wait_stable(listed, groups) == {groups.stable: "Stable", groups.empty: "Empty"}
        assert listed(["Stable"]) == {groups.stable: "Stable"}
        assert listed(["Empty"]) == {groups.empty: "Empty"}
        assert listed(["Dead"]) == {}
        described = admin.describe_groups([groups.stable, groups.empty])
        stable, empty = described[groups.stable], described[groups.empty]
        assert (stable["error"], stable["group_state"], stable["protocol_type"]) == (None, "Stable", "consumer")
        [member] = stable["members"]
        assert member["member_id"] == groups.member_id
        assignment = member["member_assignment"]  # (decoded by kafka-python: the consumer protocol's fields)
        assert sorted((t["topic"], p) for t in assignment["assigned_partitions"] for p in t["partitions"]) == [
            (groups.topic, p) for p in range(PARTITIONS)
        ]
        assert (empty["error"], empty["group_state"], empty["members"]) == (None, "Empty", [])
    finally:
        admin.close()


def test_aiokafka_lists_and_describes_groups(groups: Groups) -> None:
    async def main() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=groups.b.bootstrap, request_timeout_ms=10_000)
        await admin.start()
        try:
            listed = await admin.list_consumer_groups()
            assert {g[0]: g[1] for g in listed} == {groups.stable: "consumer", groups.empty: "consumer"}
            [response] = await admin.describe_consumer_groups([groups.stable])
            [group] = [g for g in response.groups if g[1] == groups.stable]
            error_code, _, state, protocol_type, protocol, members = group[:6]
            assert (error_code, state, protocol_type, protocol) == (0, "Stable", "consumer", "range")
            assert [m[0] for m in members] == [groups.member_id]
        finally:
            await admin.close()

    asyncio.run(main())
