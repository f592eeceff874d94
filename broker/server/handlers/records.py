"""DeleteRecords: move partitions' log start offsets up, as Kafka's `ReplicaManager.deleteRecords`.

On each partition's leader the log start offset moves to the offset asked (-1: the high watermark); whole
segments below it are deleted, the one holding it kept, and the new starts are checkpointed at once
(`log-start-offset-checkpoint`) so they hold across a crash. An offset above the high watermark (or below
-1) is OFFSET_OUT_OF_RANGE; one at or below the current start changes nothing. The answer waits (Kafka's
DelayedDeleteRecords) until every replica on a live broker starts there too — followers take the leader's
start from their fetch answers and tell theirs in their next fetch — or `timeout_ms` passes
(REQUEST_TIMED_OUT); its `low_watermark` is the smallest start over those replicas.

As Kafka: Delete on the topic is needed (TOPIC_AUTHORIZATION_FAILED), an unknown partition is
UNKNOWN_TOPIC_OR_PARTITION, another broker's NOT_LEADER_OR_FOLLOWER, an internal topic
INVALID_TOPIC_EXCEPTION, a topic whose `cleanup.policy` lacks `delete` POLICY_VIOLATION.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from broker.protocol.errors import ErrorCode
from broker.protocol.framing import RequestHeader
from broker.protocol.messages.records import HIGH_WATERMARK
from broker.security.acl import Operation, ResourceType
from broker.security.acl_authorizer import allowed
from broker.topics import is_internal

if TYPE_CHECKING:
    from broker.server.services import Services

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


async def handle_delete_records(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    results: dict[TopicPartition, dict[str, Any]] = {}
    required: dict[TopicPartition, int] = {}  # what the followers must reach before the answer
    topics = []
    for t in req["topics"]:
        name = t["name"]
        permitted = allowed(b.authorizer, Operation.DELETE, ResourceType.TOPIC, name, "DeleteRecords")
        parts = []
        for p in t["partitions"]:
            tp = (name, p["partition_index"])
            out = results[tp] = {"partition_index": tp[1], "low_watermark": -1, "error_code": ErrorCode.NONE}
            parts.append(out)
            if not permitted:
                out["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            code, offset = await _delete_on_leader(b, tp, p["offset"], out)
            out["error_code"] = code
            if code == ErrorCode.NONE:
                required[tp] = offset
        topics.append({"name": name, "partitions": parts})
    if required:
        for problem in b.logs.checkpoint():
            log.error("%s", problem)
        await _wait_for_followers(b, required, results, req["timeout_ms"])
    return {"throttle_time_ms": 0, "topics": topics}


async def _delete_on_leader(b: Services, tp: TopicPartition, offset: int,
                            out: dict[str, Any]) -> tuple[ErrorCode, int]:  # fmt: skip
    """Move the leader's log start offset of `tp` to `offset`; the error and the offset the replicas must reach."""
    code, plog, info = await b.leader_log(*tp)
    if plog is None or info is None:
        return code, -1
    if is_internal(tp[0]):
        return ErrorCode.INVALID_TOPIC_EXCEPTION, -1
    if b.logs.is_offline(tp):
        return ErrorCode.KAFKA_STORAGE_ERROR, -1
    if "delete" not in b.cache.configs.get(tp[0], {}).get("cleanup.policy", "delete").split(","):
        return ErrorCode.POLICY_VIOLATION, -1
    hw = b.high_watermark(plog)
    target = hw if offset == HIGH_WATERMARK else offset
    if target < 0 or target > hw:
        return ErrorCode.OFFSET_OUT_OF_RANGE, -1
    before = plog.log_start_offset
    deleted = plog.advance_log_start(target)
    if plog.log_start_offset > before:
        log.info("DeleteRecords moved the log start offset of %s-%d from %d to %d (%d segment(s) deleted)",
                 *tp, before, plog.log_start_offset, len(deleted))  # fmt: skip
    out["low_watermark"] = b.replicas.low_watermark(tp, plog)
    return ErrorCode.NONE, target


async def _wait_for_followers(b: Services, required: dict[TopicPartition, int],
                              results: dict[TopicPartition, dict[str, Any]], timeout_ms: int) -> None:  # fmt: skip
    """Wait, together, until each partition's replicas start at its offset (or the time is up), and answer each
    one's low watermark as its leader then knows it."""
    timeout_s = max(timeout_ms, 0) / 1000
    tps = list(required)
    codes = await asyncio.gather(*(b.replicas.wait_log_start(tp, required[tp], timeout_s) for tp in tps))
    for tp, code in zip(tps, codes, strict=True):
        out = results[tp]
        out["error_code"] = code
        plog = b.logs.get(*tp)
        if code != ErrorCode.NOT_LEADER_OR_FOLLOWER and plog is not None:
            out["low_watermark"] = b.replicas.low_watermark(tp, plog)
