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

With an authorizer (as Kafka): a topic the principal may not Describe is left out of an all-topics answer
and is TOPIC_AUTHORIZATION_FAILED when named; auto-creation needs Create on the cluster or on the topic,
else TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from broker.audit.counts import AUDIT_TOPIC
from broker.audit.topic import audit_replication_factor
from broker.protocol.api import api_versions_table
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import RequestHeader
from broker.security.acl import Operation, ResourceType
from broker.security.acl_authorizer import allowed, authorized_operations, cluster_allowed
from broker.security.session import current
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
    a = b.authorizer
    if requested is None or (version == 0 and not requested):  # all topics: those it may not describe left out
        names = [t for t in sorted(b.cache.topics) if allowed(a, Operation.DESCRIBE, ResourceType.TOPIC, t,
                                                              log_denial=False)]  # fmt: skip
        requested_names: set[str] = set()
    else:
        names = [t["name"] for t in requested if t["name"] is not None]
        requested_names = set(names)
    allow_create = b.config.auto_create_topics and (version < 4 or req["allow_auto_topic_creation"])
    topics = []
    lookups = LOOKUPS_PER_REQUEST
    for name in names:
        if requested_names and not allowed(a, Operation.DESCRIBE, ResourceType.TOPIC, name, "Metadata"):
            topics.append(_unauthorized(name))  # (not even whether it exists)
            continue
        if lookups > 0 and name not in b.cache.topics and name in requested_names and topic_name_error(name) is None:
            lookups -= 1
            if not await b.refresh_topic(name) and allow_create and not is_internal(name):
                if not _may_create_topic(b, name):
                    topics.append(_unauthorized(name))
                    continue
                if _may_create():
                    await auto_create(b, name)
        topics.append(_topic(b, name))
    if requested:  # v10+: a topic named by its id alone; kafkactl's topics have no ids, so none is known
        topics += [{"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": "", "topic_id": t["topic_id"], "partitions": []}
                   for t in requested if t["name"] is None]  # fmt: skip
    if req.get("include_topic_authorized_operations"):  # (KIP-430, v8+: each topic it may describe, as Kafka)
        for t in topics:
            if t["error_code"] not in (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.UNKNOWN_TOPIC_ID):
                t["topic_authorized_operations"] = authorized_operations(a, ResourceType.TOPIC, t["name"])
    brokers = listener_brokers(b)
    out = {"brokers": brokers, "cluster_id": b.cache.cluster_id, "controller_id": b.cache.controller_id,
           "topics": topics}  # fmt: skip
    if req.get("include_cluster_authorized_operations"):  # (v8-10)
        out["cluster_authorized_operations"] = _cluster_operations(b)
    return out


def _cluster_operations(b: Services) -> int:
    """What the principal may do on the cluster (KIP-430), or 0 unless it may describe it (as Kafka)."""
    a = b.authorizer
    return authorized_operations(a, ResourceType.CLUSTER) if cluster_allowed(a, Operation.DESCRIBE) else 0


async def handle_describe_cluster(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    """The live brokers at the request's listener, the cluster id and the controller (Kafka 2.8's answer), and
    when asked what the principal may do on the cluster (KIP-430)."""
    brokers = [{"broker_id": x["node_id"], "host": x["host"], "port": x["port"], "rack": x["rack"]}
               for x in listener_brokers(b)]  # fmt: skip
    out = {"error_code": 0, "cluster_id": b.cache.cluster_id or "", "controller_id": b.cache.controller_id,
           "brokers": brokers}  # fmt: skip
    if req.get("include_cluster_authorized_operations"):
        out["cluster_authorized_operations"] = _cluster_operations(b)
    return out


def _unauthorized(name: str) -> dict[str, Any]:
    return {"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name, "is_internal": is_internal(name),
            "partitions": []}  # fmt: skip


def _may_create_topic(b: Services, name: str) -> bool:
    """Create on the cluster or on the topic (Kafka's rule for CreateTopics and auto-creation)."""
    a = b.authorizer
    return cluster_allowed(a, Operation.CREATE, log_denial=False) or allowed(
        a, Operation.CREATE, ResourceType.TOPIC, name, "Metadata"
    )


def listener_brokers(b: Services) -> list[dict[str, Any]]:
    """The live brokers, each at its endpoint for the listener the request came in on; as Kafka, a broker
    without that listener is left out (one whose endpoints are unknown is listed at its address)."""
    listener = current().listener
    out = []
    for i, (host, port, rack) in sorted(b.cache.brokers.items()):
        if i in b.cache.endpoints:
            found = b.cache.endpoint(i, listener)
            if found is None:
                continue
            host, port = found
        out.append({"node_id": i, "host": host, "port": port, "rack": rack})
    return out


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
    rf = b.config.default_replication_factor
    if name == AUDIT_TOPIC:  # replicated as Kafka's internal topics are: min(3, live brokers)
        rf = audit_replication_factor(len(b.cache.brokers))
    return await create_topic(b, name, b.config.num_partitions, rf, None, {})


async def create_topic(b: Services, name: str, partitions: int, replication_factor: int,
                       assignment: dict[int, list[int]] | None, config: dict[str, str],
                       validate_only: bool = False) -> ErrorCode:  # fmt: skip
    """Assign replicas over the live brokers and write the topic to ZooKeeper."""
    zk = b.zk
    assert zk is not None
    if assignment is None:
        live = sorted(await b.blocking(registry.live_brokers, zk))
        try:
            assignment = assign_replicas(live, partitions, replication_factor)  # a random start and shift, as Kafka
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
