"""ApiVersions and Metadata: what the broker speaks, and who leads which partition.

Metadata may create a topic it is asked about (`auto.create.topics.enable`, and from v4 the
request's own `allow_auto_topic_creation`), with `num.partitions` and `default.replication.factor`;
never one of Kafka's internal topics (`__consumer_offsets`, ...), which kafkactl does not use. A topic
of such a name found in ZooKeeper (one shared with a Kafka cluster) is marked `is_internal`, as Kafka
marks it.

A request naming many topics the broker does not know cannot make it flood ZooKeeper: at most
`LOOKUPS_PER_REQUEST` of them are looked up (and auto-created) per request, and at most
`CREATES_PER_SECOND` topics are auto-created per second (a second's worth may come at once); the others
are answered UNKNOWN_TOPIC_OR_PARTITION, which a client retries.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any

from broker.protocol.api import api_versions_table
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import RequestHeader
from broker.topics import assign_replicas, is_internal, topic_name_error
from broker.zk import registry

if TYPE_CHECKING:
    from broker.server.services import Services

LOOKUPS_PER_REQUEST = 100
CREATES_PER_SECOND = 50.0
_creates = {"budget": CREATES_PER_SECOND, "at": time.monotonic()}  # the broker's auto-create budget


def _may_create() -> bool:
    """Take one auto-creation from the broker's budget (refilled at CREATES_PER_SECOND), if there is one."""
    now = time.monotonic()
    _creates["budget"] = min(CREATES_PER_SECOND, _creates["budget"] + (now - _creates["at"]) * CREATES_PER_SECOND)
    _creates["at"] = now
    if _creates["budget"] < 1:
        return False
    _creates["budget"] -= 1
    return True


async def handle_api_versions(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    return {"error_code": 0, "api_keys": api_versions_table()}


async def handle_metadata(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    version = header.api_version
    requested = req["topics"]
    if requested is None or (version == 0 and not requested):
        names = sorted(b.cache.topics)
        requested_names: set[str] = set()
    else:
        names = [t["name"] for t in requested]
        requested_names = set(names)
    allow_create = b.config.auto_create_topics and (version < 4 or req["allow_auto_topic_creation"])
    topics = []
    lookups = LOOKUPS_PER_REQUEST
    for name in names:
        if lookups > 0 and name not in b.cache.topics and name in requested_names and topic_name_error(name) is None:
            lookups -= 1
            if not await b.refresh_topic(name) and allow_create and not is_internal(name) and _may_create():
                await auto_create(b, name)
        topics.append(_topic(b, name))
    brokers = [{"node_id": i, "host": h, "port": p, "rack": r} for i, (h, p, r) in sorted(b.cache.brokers.items())]
    return {
        "brokers": brokers, "cluster_id": b.cache.cluster_id, "controller_id": b.cache.controller_id,
        "topics": topics,
    }  # fmt: skip


def _topic(b: Services, name: str) -> dict[str, Any]:
    parts = b.cache.topics.get(name)
    if parts is None:
        code = ErrorCode.INVALID_TOPIC_EXCEPTION if topic_name_error(name) else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return {"error_code": code, "name": name, "partitions": []}
    live = b.cache.brokers
    out = []
    for p, info in sorted(parts.items()):
        up = info.leader in live
        out.append({
            "error_code": 0 if up else ErrorCode.LEADER_NOT_AVAILABLE, "partition_index": p,
            "leader_id": info.leader if up else -1, "leader_epoch": info.leader_epoch,
            "replica_nodes": info.replicas, "isr_nodes": [r for r in info.isr if r in live],
            "offline_replicas": [r for r in info.replicas if r not in live],
        })  # fmt: skip
    return {"error_code": 0, "name": name, "is_internal": is_internal(name), "partitions": out}


async def auto_create(b: Services, name: str) -> ErrorCode:
    """Create a topic with the broker's defaults; an existing one (a race) counts as created. Never an
    internal topic (INVALID_TOPIC_EXCEPTION)."""
    if is_internal(name):
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    if b.zookeeper_problem():  # (retriable: the client asks again, and it is created once ZooKeeper is back)
        return ErrorCode.LEADER_NOT_AVAILABLE
    return await create_topic(b, name, b.config.num_partitions, b.config.default_replication_factor, None, {})


async def create_topic(b: Services, name: str, partitions: int, replication_factor: int,
                       assignment: dict[int, list[int]] | None, config: dict[str, str],
                       validate_only: bool = False) -> ErrorCode:  # fmt: skip
    """Assign replicas over the live brokers and write the topic to ZooKeeper."""
    zk = b.zk
    assert zk is not None
    if assignment is None:
        live = sorted(await b.blocking(registry.live_brokers, zk))
        try:
            assignment = assign_replicas(live, partitions, replication_factor, random.randrange(max(len(live), 1)))
        except ValueError:
            raise
    if validate_only:
        return ErrorCode.NONE
    try:
        topic_id = await b.blocking(registry.create_topic, zk, name, assignment, config)
    except registry.TopicExistsError:
        await b.refresh_topic(name)
        return ErrorCode.TOPIC_ALREADY_EXISTS
    await b.take_new_topic(name, assignment, config, topic_id)
    return ErrorCode.NONE
