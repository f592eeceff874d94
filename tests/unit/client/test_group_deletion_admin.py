"""`broker.client.group_admin.delete` and `delete_offsets` on stand-ins for ZooKeeper and the broker's admin
APIs: which way each kind of group goes (DeleteGroups/OffsetDelete at the coordinator for a broker-coordinated
group, ZooKeeper for kafkactl's own), the partitions chosen, and the coordinator's refusals in kafkactl's words.
Against a real broker: tests/integration/test_group_deletion.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from broker.client import group_admin
from broker.client.admin import AdminError
from broker.errors import KafkactlError, UsageError
from broker.protocol.errors import ErrorCode
from broker.zk import consumers
from tests.unit.coordinator.test_group_store import FakeZk, put_entry


class FakeAdmin:
    """The coordinator's side: DescribeGroups members, and what DeleteGroups/OffsetDelete answer."""

    def __init__(self, members: int = 0, refuse: str | None = None,
                 partition_errors: dict[tuple[str, int], int] | None = None) -> None:  # fmt: skip
        self.members, self.refuse, self.partition_errors = members, refuse, partition_errors or {}
        self.calls: list[tuple[str, Any]] = []

    def list_topics(self) -> dict[str, int]:
        return {"orders": 3}

    def describe_group(self, group: str) -> dict[str, Any]:
        members = [{"member_id": f"m{i}", "client_id": "c", "client_host": "/h", "member_assignment": b""}
                   for i in range(self.members)]  # fmt: skip
        return {"group_state": "Stable" if members else "Dead", "members": members}

    def delete_group(self, group: str) -> None:
        self.calls.append(("delete_group", group))
        if self.refuse:
            raise AdminError(f"cannot delete group {group!r}: {self.refuse}")

    def delete_offsets(self, group: str, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        self.calls.append(("delete_offsets", tps))
        if self.refuse:
            raise AdminError(f"cannot delete offsets of group {group!r}: {self.refuse}")
        return {tp: self.partition_errors.get(tp, 0) for tp in tps}


def test_a_broker_group_is_deleted_by_its_coordinator() -> None:
    zk, admin = FakeZk(), FakeAdmin()
    group_admin.delete(zk, admin, "g")  # type: ignore[arg-type]
    assert admin.calls == [("delete_group", "g")]
    with pytest.raises(KafkactlError, match="no consumer group 'g'$"):
        group_admin.delete(zk, FakeAdmin(refuse="GROUP_ID_NOT_FOUND"), "g")  # type: ignore[arg-type]
    with pytest.raises(KafkactlError, match="group 'g' has live members; stop them before deleting it"):
        group_admin.delete(zk, FakeAdmin(refuse="NON_EMPTY_GROUP"), "g")  # type: ignore[arg-type]
    live = FakeAdmin(members=2)
    with pytest.raises(KafkactlError, match="2 live member"):
        group_admin.delete(zk, live, "g")  # type: ignore[arg-type]
    assert live.calls == []


def test_delete_offsets_of_a_broker_group() -> None:
    zk = FakeZk()
    admin = FakeAdmin(partition_errors={("orders", 1): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC})
    got = group_admin.delete_offsets(zk, admin, "g", "orders", None)  # type: ignore[arg-type]
    assert got == {("orders", 0): None, ("orders", 1): "GROUP_SUBSCRIBED_TO_TOPIC", ("orders", 2): None}
    assert group_admin.delete_offsets(zk, admin, "g", "orders", [2, 0, 2]) == {  # type: ignore[arg-type]
        ("orders", 0): None, ("orders", 2): None}  # fmt: skip
    with pytest.raises(UsageError, match="has no partition 3"):
        group_admin.delete_offsets(zk, admin, "g", "orders", [3])  # type: ignore[arg-type]
    with pytest.raises(KafkactlError, match="unknown topic 'nosuch'"):
        group_admin.delete_offsets(zk, admin, "g", "nosuch", None)  # type: ignore[arg-type]
    with pytest.raises(KafkactlError, match="no consumer group 'g'$"):
        group_admin.delete_offsets(zk, FakeAdmin(refuse="GROUP_ID_NOT_FOUND"), "g", "orders", [0])  # type: ignore[arg-type]


def test_delete_offsets_of_a_zookeeper_group_goes_to_zookeeper() -> None:
    zk, admin = FakeZk(), FakeAdmin()
    for p, o in ((0, 3), (1, 4)):
        put_entry(zk, "orders", p, o, group="zg")
    zk.put("/consumers/zg/offsets/orders/2", b"5")  # (an earlier version's znode of partition 2)
    zk.put("/consumers/zg/ids", b"")  # (kafkactl's own consumer joined it once: none is live now)
    deleted = group_admin.delete_offsets(zk, admin, "zg", "orders", [1, 2])  # type: ignore[arg-type]
    assert deleted == {("orders", 1): None, ("orders", 2): None} and admin.calls == []
    assert zk.offset("orders", 0, group="zg") == 3 and zk.offset("orders", 1, group="zg") is None
    assert {tp: c.offset for tp, c in consumers.committed(zk, "zg").items()} == {("orders", 0): 3}  # type: ignore[arg-type]
