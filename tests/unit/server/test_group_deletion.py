"""The DeleteGroups and OffsetDelete handlers (broker/server/handlers/groups.py) over a real group coordinator
and group store, the store on test_group_store's in-memory ZooKeeper; the broker's other services are stand-ins
(this broker coordinates every group unless told otherwise, no authorizer). The same APIs against a real broker,
ZooKeeper and Kafka's clients: tests/integration/test_group_deletion.py.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from broker.coordinator.group.coordinator import GroupCoordinator
from broker.protocol.errors import ErrorCode
from broker.server.handlers import groups
from tests.unit.coordinator.test_coordinator import join_req, subscription
from tests.unit.coordinator.test_group_store import FakeZk, offsets_of, run, short_bounds, started  # noqa: F401 - the fixture

TOPICS = {"orders": 2, "audit": 1}


def services(zk: FakeZk, store: Any, not_mine: set[str] | None = None) -> SimpleNamespace:
    async def load_group(gid: str) -> None:
        return None

    cache = SimpleNamespace(partition=lambda t, p: object() if 0 <= p < TOPICS.get(t, 0) else None)
    return SimpleNamespace(coordinator=GroupCoordinator(initial_delay_ms=0, min_session_ms=10), group_store=store,
                           authorizer=None, cache=cache, load_group=load_group,
                           coordinates=lambda g: g not in (not_mine or set()))  # fmt: skip


async def delete_groups(b: SimpleNamespace, *names: str) -> dict[str, int]:
    answer = await groups.handle_delete_groups(b, None, {"groups_names": list(names)})  # type: ignore[arg-type]
    return {r["group_id"]: r["error_code"] for r in answer["results"]}


async def offset_delete(b: SimpleNamespace, gid: str, tps: list[tuple[str, int]]) -> tuple[int, dict]:
    topics: dict[str, list] = {}
    for t, p in tps:
        topics.setdefault(t, []).append({"partition_index": p})
    body = {"group_id": gid, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
    answer = await groups.handle_offset_delete(b, None, body)  # type: ignore[arg-type]
    return answer["error_code"], {(t["name"], p["partition_index"]): p["error_code"]
                                  for t in answer["topics"] for p in t["partitions"]}  # fmt: skip


def test_delete_groups_deletes_an_empty_group_and_refuses_the_others() -> None:
    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        b = services(zk, store, not_mine={"elsewhere"})
        await store.commit("empty", {("orders", 0): 3})
        await store.commit("live", {("orders", 1): 4})
        join = asyncio.create_task(b.coordinator.join(join_req(gid="live"), "c", "/h"))
        assert (await join)["error_code"] == 0
        assert await delete_groups(b, "empty", "live", "unknown", "elsewhere", "empty", "") == {
            "empty": 0, "live": ErrorCode.NON_EMPTY_GROUP, "unknown": ErrorCode.GROUP_ID_NOT_FOUND,
            "elsewhere": ErrorCode.NOT_COORDINATOR, "": ErrorCode.GROUP_ID_NOT_FOUND}  # fmt: skip
        assert offsets_of(await store.fetch("empty", None)) == {}
        assert offsets_of(await store.fetch("live", None)) == {("orders", 1): 4}
        zk.down()
        assert await delete_groups(b, "live-gone") == {"live-gone": ErrorCode.COORDINATOR_NOT_AVAILABLE}
        b.coordinator.close()
        await store.close(1)

    run(main())


def test_offset_delete_spares_subscribed_topics_and_reports_each_partition() -> None:
    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        b = services(zk, store)
        await store.commit("g", {("orders", 0): 3, ("orders", 1): 4, ("audit", 0): 5})
        req = join_req(gid="g", protocols=[("range", subscription("orders"))])
        assert (await b.coordinator.join(req, "c", "/h"))["error_code"] == 0
        error, parts = await offset_delete(b, "g", [("orders", 0), ("audit", 0), ("audit", 3), ("nosuch", 0)])
        unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert error == 0 and parts == {("orders", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, ("audit", 0): 0,
                                        ("audit", 3): unknown, ("nosuch", 0): unknown}  # fmt: skip
        assert offsets_of(await store.fetch("g", None)) == {("orders", 0): 3, ("orders", 1): 4}
        other = join_req(gid="connect", protocol_type="connect", protocols=[("v1", b"x")])
        assert (await b.coordinator.join(other, "c", "/h"))["error_code"] == 0
        assert await offset_delete(b, "connect", [("audit", 0)]) == (ErrorCode.NON_EMPTY_GROUP, {})
        assert await offset_delete(b, "unknown", [("audit", 0)]) == (ErrorCode.GROUP_ID_NOT_FOUND, {})
        assert await offset_delete(b, "", [("audit", 0)]) == (ErrorCode.INVALID_GROUP_ID, {})
        b.coordinator.close()  # (every member gone: the group is Empty)
        assert await offset_delete(b, "g", [("orders", 0), ("orders", 1)]) == (0, {("orders", 0): 0, ("orders", 1): 0})
        assert not [p for p in zk.nodes if p.startswith("/consumers/g")]
        await store.close(1)

    run(main())
