"""ElectLeaders (43): a leader election a client asks for (`kafka-leader-election`, AdminClient.elect_leaders).

Kafka sends it to the controller; here any broker takes it and reaches the controller through ZooKeeper.
A preferred election (type 0) goes through `/admin/preferred_replica_election`, as `kafkactl topic
elect-leaders` does, and is answered once each partition is led by its first replica (REQUEST_TIMED_OUT
for those that are not by the request's timeout). An unclean election (type 1) is for partitions with no
leader: this broker writes the first live replica as leader (`election.on_brokers` with unclean on),
conditional on the state's version, so a controller's write in between wins; what only the lost ISR
held is gone. Per partition: ELECTION_NOT_NEEDED (already led as asked), PREFERRED_LEADER_NOT_AVAILABLE
(the preferred replica is down or out of sync), ELIGIBLE_LEADERS_NOT_AVAILABLE (no live replica),
UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from broker.protocol.errors import ErrorCode
from broker.protocol.framing import RequestHeader
from broker.replication import election
from broker.security.acl import Operation
from broker.security.acl_authorizer import cluster_allowed
from broker.zk import registry

if TYPE_CHECKING:
    from broker.server.services import Services

PREFERRED, UNCLEAN = 0, 1
TopicPartition = tuple[str, int]


async def handle_elect_leaders(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    kind = req.get("election_type", PREFERRED)
    if not cluster_allowed(b.authorizer, Operation.ALTER, "ElectLeaders"):  # (Alter on the cluster, as Kafka)
        asked = req["topic_partitions"] or []
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "replica_election_results": [{"topic": t["topic"], "partition_result": [
                    {"partition_id": p, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": None}
                    for p in t["partitions"]]} for t in asked]}  # fmt: skip
    if kind not in (PREFERRED, UNCLEAN):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_REQUEST, "replica_election_results": []}
    asked = req["topic_partitions"]
    if asked is None:  # every partition of every topic
        wanted = [(t, p) for t, parts in sorted(b.cache.topics.items()) for p in sorted(parts)]
    else:
        wanted = [(t["topic"], p) for t in asked for p in t["partitions"]]
        for topic in {t for t, _ in wanted if t not in b.cache.topics}:
            await b.refresh_topic(topic)
    results: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
    todo = []
    for tp in wanted:
        code = _check(b, tp, kind)
        if code is None:
            todo.append(tp)
        else:
            results[tp] = (code, None if code == ErrorCode.ELECTION_NOT_NEEDED else f"{code.name} for {tp[0]}-{tp[1]}")
    deadline = time.monotonic() + max(req["timeout_ms"], 0) / 1000
    why = b.zookeeper_problem() if todo else None
    if why:
        results.update({tp: (ErrorCode.UNKNOWN_SERVER_ERROR, why) for tp in todo})
        todo = []
    if todo and kind == PREFERRED:
        results.update(await _preferred(b, todo, deadline))
    elif todo:
        for tp in todo:
            results[tp] = await _unclean(b, tp)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (t, p), (code, message) in results.items():
        by_topic.setdefault(t, []).append({"partition_id": p, "error_code": code, "error_message": message})
    return {"throttle_time_ms": 0, "error_code": 0, "replica_election_results": [
        {"topic": t, "partition_result": parts} for t, parts in by_topic.items()]}  # fmt: skip


def _check(b: Services, tp: TopicPartition, kind: int) -> ErrorCode | None:
    """The answer for a partition that needs no election (or cannot have one), None for one that can."""
    info = b.cache.partition(*tp)
    if info is None or not info.replicas:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    live = set(b.cache.brokers)
    if kind == UNCLEAN:
        if info.leader >= 0 and info.leader in live:
            return ErrorCode.ELECTION_NOT_NEEDED
        return None if any(r in live for r in info.replicas) else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    first = info.replicas[0]
    if info.leader == first:
        return ErrorCode.ELECTION_NOT_NEEDED
    if first not in live or first not in info.isr:
        return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    return None


async def _preferred(b: Services, todo: list[TopicPartition], deadline: float
                     ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:  # fmt: skip
    """Ask the controller for the preferred leaders of `todo` and wait until they lead (or `deadline`)."""
    while not await b.blocking(registry.request_preferred_election, b.zk, todo):  # another request is pending
        if time.monotonic() > deadline:
            return {tp: (ErrorCode.REQUEST_TIMED_OUT, "another preferred leader election is pending") for tp in todo}
        await asyncio.sleep(0.05)
    while True:
        left = [tp for tp in todo if not _on_preferred(b, tp)]
        if not left or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.02)
    return {tp: (ErrorCode.REQUEST_TIMED_OUT, f"{tp[0]}-{tp[1]} was not on its preferred replica in time")
            if tp in left else (ErrorCode.NONE, None) for tp in todo}  # fmt: skip


def _on_preferred(b: Services, tp: TopicPartition) -> bool:
    info = b.cache.partition(*tp)
    return info is None or (bool(info.replicas) and info.leader == info.replicas[0])


async def _unclean(b: Services, tp: TopicPartition) -> tuple[ErrorCode, str | None]:
    """Elect the first live replica of a partition with no leader, in or out of its last ISR."""
    info = b.cache.partition(*tp)
    assert info is not None
    for _ in range(3):
        st = await b.blocking(registry.partition_state, b.zk, *tp)
        if st is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        state = election.State(st.get("leader", -1), st.get("leader_epoch", 0), list(st.get("isr", [])))
        live = set(await b.blocking(registry.live_brokers, b.zk))  # (not the cache: it may lag a broker's return)
        if state.leader in live:
            return ErrorCode.ELECTION_NOT_NEEDED, None
        new = election.on_brokers(info.replicas, state, live, unclean=True)
        if new is None or new.leader < 0:
            return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, f"no live replica of {tp[0]}-{tp[1]}"
        if await b.blocking(registry.write_partition_state, b.zk, *tp, new.leader, new.leader_epoch, new.isr,
                            st["zk_version"]) is not None:  # fmt: skip
            return ErrorCode.NONE, None
    return ErrorCode.REQUEST_TIMED_OUT, f"the state of {tp[0]}-{tp[1]} kept changing"
