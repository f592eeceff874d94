"""CreateTopics, DeleteTopics, DescribeConfigs, AlterConfigs and DescribeLogDirs.

Topic changes are written to ZooKeeper; every broker learns them from its watches (and the one that
wrote them at once). AlterConfigs replaces a topic's whole set of overrides, as Kafka's does.

Names are checked before they reach ZooKeeper: an illegal one is INVALID_TOPIC_EXCEPTION (Kafka's
`Topic.validate`) where a topic is named to be created or configured, and UNKNOWN_TOPIC_OR_PARTITION
in DeleteTopics (no such topic can exist). Kafka's internal topics (`broker.topics.INTERNAL_TOPICS`)
are never created nor deleted by a request: INVALID_TOPIC_EXCEPTION, the error Kafka gives a client
writing to one ("Cannot append to internal topic").

With an authorizer (as Kafka): CreateTopics needs Create on the cluster or the topic, DeleteTopics Delete and
CreatePartitions Alter on the topic (TOPIC_AUTHORIZATION_FAILED); DescribeConfigs and AlterConfigs need
DescribeConfigs/AlterConfigs on the topic (TOPIC_) or, for a broker, the cluster (CLUSTER_AUTHORIZATION_FAILED);
DescribeLogDirs needs Describe on the cluster (an empty answer otherwise).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from broker.protocol.errors import ErrorCode
from broker.protocol.framing import RequestHeader
from broker.protocol.messages.admin import (
    BROKER_RESOURCE,
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    STATIC_BROKER_CONFIG,
    TOPIC_RESOURCE,
)
from broker.security.acl import Operation, ResourceType
from broker.security.acl_authorizer import allowed, cluster_allowed
from broker.server import topic_configs
from broker.server.config import is_sensitive, topic_config_error
from broker.server.config_ops import DYNAMIC_BROKER_KEYS
from broker.server.handlers.metadata import create_topic
from broker.topics import MAX_PARTITIONS, assign_replicas, internal_topic_error, leader_index, topic_name_error
from broker.zk import registry

if TYPE_CHECKING:
    from broker.server.services import Services


async def handle_create_topics(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    """Each topic created (or only checked), as Kafka 2.8: from v5 a topic created or validated is answered
    with its partition count, replication factor and whole config (the values, their sources) when the
    principal may also DescribeConfigs on it (else topic_config_error_code TOPIC_AUTHORIZATION_FAILED);
    v7's topic_id stays all zero (kafkactl's topics have no ids). A topic named twice: INVALID_REQUEST."""
    out = []
    on_cluster = cluster_allowed(b.authorizer, Operation.CREATE, log_denial=False)
    counts = Counter(t["name"] for t in req["topics"])
    for t in req["topics"]:
        name = t["name"]
        result: dict[str, Any] = {"name": name, "error_code": 0, "error_message": None}
        out.append(result)
        if not allowed(b.authorizer, Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name, log_denial=False):
            # (as Kafka: said of a topic refused before creation too; a creation that fails clears it)
            result["topic_config_error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        if counts[name] > 1:
            result["error_code"] = ErrorCode.INVALID_REQUEST
            result["error_message"] = "Found multiple entries for this topic."  # (Kafka's words)
            continue
        if not on_cluster and not _topic_allowed(b, Operation.CREATE, name, "CreateTopics"):
            code, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Create on the topic or the cluster is not allowed"
            result["error_code"], result["error_message"] = code, message
            continue
        code, message, created = await _create_one(b, t, req.get("validate_only", False))
        result["error_code"], result["error_message"] = code, message
        if code or created is None:
            result.pop("topic_config_error_code", None)
            continue
        if "topic_config_error_code" in result:  # no DescribeConfigs on the topic: no partitions nor configs
            continue
        partitions, rf, config = created
        result["num_partitions"], result["replication_factor"] = partitions, rf
        result["configs"] = [
            {"name": k, "value": None if is_sensitive(k) else value, "read_only": False, "config_source": source,
             "is_sensitive": is_sensitive(k)}
            for k, (value, source) in sorted(_topic_config(b, config).items())
        ]  # fmt: skip
    return {"topics": out}


def _topic_config(b: Services, overrides: dict[str, str]) -> dict[str, tuple[str, int]]:
    """key → (value, config_source) of a topic with these overrides: each topic key (DescribeConfigs' view)."""
    values = b.config.topic_defaults() | overrides
    return {k: (v, DYNAMIC_TOPIC_CONFIG if k in overrides
                else STATIC_BROKER_CONFIG if b.config.topic_default_is_static(k) else DEFAULT_CONFIG)
            for k, v in values.items()}  # fmt: skip


#: Kafka's ConfigEntry types (DescribeConfigs v3's config_type) by ConfigDef type name
TOPIC_CONFIG_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7}


def _topic_synonyms(b: Services, key: str, overrides: dict[str, str]) -> list[dict[str, Any]]:
    """A topic key's synonyms as Kafka 2.8 lists them (include_synonyms): the topic's override, then the broker
    keys behind its default, each set in the broker's config (STATIC_BROKER_CONFIG) or with a default."""
    out = [{"name": key, "value": overrides[key], "source": DYNAMIC_TOPIC_CONFIG}] if key in overrides else []
    for name, value, static in b.config.topic_default_synonyms(key):
        out.append({"name": name, "value": value, "source": STATIC_BROKER_CONFIG if static else DEFAULT_CONFIG})
    return out


def _topic_allowed(b: Services, operation: Operation, topic: str, request: str) -> bool:
    return allowed(b.authorizer, operation, ResourceType.TOPIC, topic, request)


#: a CreateTopics refusal (error, message, nothing created) or success (0, None, (partitions, rf, overrides))
Created = tuple[ErrorCode, str | None, tuple[int, int, dict[str, str]] | None]


async def _create_one(b: Services, t: dict[str, Any], validate_only: bool) -> Created:
    name = t["name"]
    why = topic_name_error(name) or internal_topic_error(name, "created")
    if why:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, why, None
    config = {c["name"]: c["value"] for c in t["configs"] if c["value"] is not None}
    why = topic_config_error(config, b.config.topic_defaults())
    if why:
        return ErrorCode.INVALID_CONFIG, why, None
    why = b.zookeeper_problem()
    if why:
        return ErrorCode.UNKNOWN_SERVER_ERROR, why, None
    assignment = None
    if t["assignments"]:
        if t["num_partitions"] != -1 or t["replication_factor"] != -1:
            return ErrorCode.INVALID_REQUEST, "give either an assignment or partitions and replication factor", None
        assignment = {a["partition_index"]: list(a["broker_ids"]) for a in t["assignments"]}
        why = await _assignment_error(b, assignment)
        if why:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, why, None
    partitions = b.config.num_partitions if t["num_partitions"] == -1 else t["num_partitions"]
    rf = b.config.default_replication_factor if t["replication_factor"] == -1 else t["replication_factor"]
    if not 1 <= partitions <= MAX_PARTITIONS:
        return ErrorCode.INVALID_PARTITIONS, f"number of partitions must be between 1 and {MAX_PARTITIONS}", None
    if rf < 1:
        return ErrorCode.INVALID_REPLICATION_FACTOR, f"replication factor must be at least 1, not {rf}", None
    if name in b.cache.topics:
        return ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists", None
    try:
        code = await create_topic(b, name, partitions, rf, assignment, config, validate_only)
    except ValueError as exc:
        return ErrorCode.INVALID_REPLICATION_FACTOR, str(exc), None
    if code == ErrorCode.TOPIC_ALREADY_EXISTS:
        return code, f"topic {name!r} already exists", None
    if code:
        return code, None, None
    if assignment is not None:
        partitions, rf = len(assignment), len(assignment[0])
    return code, None, (partitions, rf, config)


async def handle_create_partitions(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    results = []
    for t in req["topics"]:
        if not _topic_allowed(b, Operation.ALTER, t["name"], "CreatePartitions"):
            results.append({"name": t["name"], "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            "error_message": "Alter on the topic is not allowed"})  # fmt: skip
            continue
        code, message = await _add_partitions(b, t, req["validate_only"])
        results.append({"name": t["name"], "error_code": code, "error_message": message})
    return {"throttle_time_ms": 0, "results": results}


async def _add_partitions(b: Services, t: dict[str, Any], validate_only: bool) -> tuple[ErrorCode, str | None]:
    """Raise a topic's partition count to `count` (Kafka never lowers it); new replicas spread round-robin over
    the live brokers with the topic's replication factor, or as `assignments` names them."""
    name, count = t["name"], t["count"]
    if topic_name_error(name):  # (no such topic can exist; as a znode path it could name another node)
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, topic_name_error(name)
    if internal_topic_error(name, "altered"):
        return ErrorCode.INVALID_TOPIC_EXCEPTION, internal_topic_error(name, "altered")
    if b.zookeeper_problem():
        return ErrorCode.UNKNOWN_SERVER_ERROR, b.zookeeper_problem()
    for _ in range(3):  # (another change of the assignment in between: decide again on the new one)
        found = await b.blocking(registry.assignment_version, b.zk, name)
        if found is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"
        code, message, added = await _new_partitions(b, name, count, t["assignments"], *found)
        if code or added is None or validate_only:
            return code, message
        if await b.blocking(registry.add_partitions, b.zk, name, added, found[1]):
            await b.refresh_topic(name)
            return ErrorCode.NONE, None
    return ErrorCode.REQUEST_TIMED_OUT, f"topic {name!r} kept changing: try again"


async def _new_partitions(b: Services, name: str, count: int, assignments: list[dict[str, Any]] | None,
                          current: dict[int, list[int]], version: int,
                          ) -> tuple[ErrorCode, str | None, dict[int, list[int]] | None]:  # fmt: skip
    """The replicas of the partitions that raise `name` to `count`, or the error to answer."""
    if count <= len(current):
        why = f"topic {name!r} has {len(current)} partitions; {count} would not add any (a count is never lowered)"
        return ErrorCode.INVALID_PARTITIONS, why, None
    if count > MAX_PARTITIONS:
        return ErrorCode.INVALID_PARTITIONS, f"number of partitions must be at most {MAX_PARTITIONS}", None
    new = range(len(current), count)
    if assignments is not None:
        if len(assignments) != len(new):
            why = f"{len(new)} new partitions but {len(assignments)} assignments"
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, why, None
        added = {p: list(a["broker_ids"]) for p, a in zip(new, assignments, strict=True)}
        why = await _assignment_error(b, {**current, **added})
        if why:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, why, None
        return ErrorCode.NONE, None, added
    live = sorted(await b.blocking(registry.live_brokers, b.zk))
    rf = min(len(r) for r in current.values()) if current else 1  # (a partition being moved lists more)
    try:
        # as Kafka: the layout goes on from partition 0's leader, the new partitions numbered after the others
        start = leader_index(live, current[0][0]) if current.get(0) else None
        added = assign_replicas(live, len(new), rf, start, start_partition=len(current))
    except ValueError as exc:
        return ErrorCode.INVALID_REPLICATION_FACTOR, str(exc), None
    return ErrorCode.NONE, None, added


async def _assignment_error(b: Services, assignment: dict[int, list[int]]) -> str | None:
    """Why an explicit replica assignment cannot be used (as Kafka: every broker in it must be registered)."""
    if sorted(assignment) != list(range(len(assignment))) or any(
        not r or len(set(r)) != len(r) for r in assignment.values()
    ):
        return "partitions must be 0..N-1, each with distinct brokers"
    live = await b.blocking(registry.live_brokers, b.zk)
    unknown = sorted({i for r in assignment.values() for i in r} - set(live))
    if unknown:
        return f"unknown broker(s) in the replica assignment: {', '.join(map(str, unknown))}"
    return None


NO_TOPIC_ID = bytes(16)


async def handle_delete_topics(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    """Each topic deleted, as Kafka 2.8. v6 names a topic by name or by id: kafkactl's topics have no ids, so
    an id alone is UNKNOWN_TOPIC_ID (its name null in the answer), and a name with an id refuses the whole
    request with INVALID_REQUEST, as Kafka does. v5+ carries an error message where there are words for it.
    With delete.topic.enable false: TOPIC_DELETION_DISABLED, INVALID_REQUEST below v3 (which lack that code)."""
    version = header.api_version
    if version >= 6:
        asked = [(t["name"], bytes(t["topic_id"])) for t in req["topics"]]
    else:
        asked = [(name, NO_TOPIC_ID) for name in req["topic_names"]]
    if any(name is not None and topic_id != NO_TOPIC_ID for name, topic_id in asked):
        message = "Topic name and topic ID can not both be specified."
        return {"responses": [{"name": name, "topic_id": topic_id, "error_code": ErrorCode.INVALID_REQUEST,
                               "error_message": message} for name, topic_id in asked]}  # fmt: skip
    out = []
    for name, topic_id in asked:
        code, message = await _delete_one(b, name, topic_id, version)
        out.append({"name": name, "topic_id": topic_id, "error_code": code, "error_message": message})
    return {"responses": out}


async def _delete_one(b: Services, name: str | None, topic_id: bytes, version: int) -> tuple[ErrorCode, str | None]:
    if name is None:
        if topic_id != NO_TOPIC_ID:
            return ErrorCode.UNKNOWN_TOPIC_ID, None
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    if not _topic_allowed(b, Operation.DELETE, name, "DeleteTopics"):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
    if not b.config.delete_topic_enable:
        disabled = ErrorCode.TOPIC_DELETION_DISABLED if version >= 3 else ErrorCode.INVALID_REQUEST
        return disabled, "topic deletion is disabled (delete.topic.enable=false)"
    why = internal_topic_error(name, "deleted")
    if why:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, why
    if topic_name_error(name):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    why = b.zookeeper_problem()
    if why:
        return ErrorCode.UNKNOWN_SERVER_ERROR, why
    try:
        await b.blocking(registry.delete_topic, b.zk, name)
    except registry.UnknownTopicError:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    b.forget_topic(name)
    return ErrorCode.NONE, None


async def handle_describe_configs(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    results = []
    for res in req["resources"]:
        rtype, rname, keys = res["resource_type"], res["resource_name"], res["configuration_keys"]
        out: dict[str, Any] = {"error_code": 0, "resource_type": rtype, "resource_name": rname, "configs": []}
        results.append(out)
        refused = _config_refusal(b, Operation.DESCRIBE_CONFIGS, rtype, rname, "DescribeConfigs")
        if refused:
            out["error_code"], out["error_message"] = refused
            continue
        if rtype == TOPIC_RESOURCE:
            why = topic_name_error(rname)
            if why:
                out["error_code"], out["error_message"] = ErrorCode.INVALID_TOPIC_EXCEPTION, why
                continue
            if rname not in b.cache.topics and not await b.refresh_topic(rname):
                out["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                out["error_message"] = f"topic {rname!r} does not exist"
                continue
            overrides = b.cache.configs.get(rname, {})
            described = _topic_config(b, overrides)
            values = {k: value for k, (value, _) in described.items()}
            sources = {k: source for k, (_, source) in described.items()}
            wanted = req.get("include_synonyms")
            synonyms = {k: _topic_synonyms(b, k, overrides) for k in values} if wanted else {}
            types = {k: TOPIC_CONFIG_TYPES.get(key.type, 0) for k, key in topic_configs.KEYS.items()}
        elif rtype == BROKER_RESOURCE and rname in ("", str(b.id)):
            synonyms, types = {}, {}  # (the broker's keys: neither, as before)
            values = dict(b.config.props)
            sources = {k: STATIC_BROKER_CONFIG if k in b.config.explicit else DEFAULT_CONFIG for k in values}
            dynamic = await _dynamic_broker_config(b) if rname else {}
            values |= dynamic
            sources |= dict.fromkeys(dynamic, DYNAMIC_BROKER_CONFIG)
        else:
            out["error_code"] = ErrorCode.INVALID_REQUEST
            out["error_message"] = f"resource type {rtype} {rname!r} is not described here"
            continue
        for key in sorted(values):
            if keys is not None and key not in keys:
                continue
            secret = is_sensitive(key)  # (as Kafka: a password's value is never shown)
            fixed = rtype == BROKER_RESOURCE and key not in DYNAMIC_BROKER_KEYS  # (IncrementalAlterConfigs' keys)
            out["configs"].append({
                "name": key, "value": None if secret else values[key], "read_only": fixed,
                "is_default": sources[key] == DEFAULT_CONFIG, "config_source": sources[key],
                "is_sensitive": secret, "synonyms": synonyms.get(key, []), "config_type": types.get(key, 0),
                "documentation": None,
            })  # fmt: skip
    return {"results": results}


async def _dynamic_broker_config(b: Services) -> dict[str, str]:
    """This broker's dynamic config (`/config/brokers/<id>`: the throttle rates), {} when ZooKeeper cannot
    say (the static values are still described)."""
    if b.zookeeper_problem():
        return {}
    try:
        return await b.blocking(registry.broker_config, b.zk, b.id)
    except Exception:  # (a connection lost meanwhile: describe what is known)
        return {}


def _config_refusal(b: Services, operation: Operation, rtype: int, rname: str,
                    request: str) -> tuple[ErrorCode, str] | None:  # fmt: skip
    """The authorization error of a config resource: a topic's (Describe/AlterConfigs on the topic) or a
    broker's (on the cluster), or None."""
    if rtype == TOPIC_RESOURCE and not _topic_allowed(b, operation, rname, request):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"{operation.name} on topic {rname!r} is not allowed"
    if rtype == BROKER_RESOURCE and not cluster_allowed(b.authorizer, operation, request):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"{operation.name} on the cluster is not allowed"
    return None


async def handle_alter_configs(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    out = []
    for res in req["resources"]:
        rtype, rname = res["resource_type"], res["resource_name"]
        item: dict[str, Any] = {"error_code": 0, "error_message": None, "resource_type": rtype, "resource_name": rname}
        out.append(item)
        refused = _config_refusal(b, Operation.ALTER_CONFIGS, rtype, rname, "AlterConfigs")
        if refused:
            item["error_code"], item["error_message"] = refused
            continue
        if rtype != TOPIC_RESOURCE:
            item["error_code"], item["error_message"] = ErrorCode.INVALID_REQUEST, "only topic configs can be altered"
            continue
        why = topic_name_error(rname)
        if why:
            item["error_code"], item["error_message"] = ErrorCode.INVALID_TOPIC_EXCEPTION, why
            continue
        config = {c["name"]: c["value"] for c in res["configs"] if c["value"] is not None}
        why = topic_config_error(config, b.config.topic_defaults())
        if why:
            item["error_code"], item["error_message"] = ErrorCode.INVALID_CONFIG, why
            continue
        if req["validate_only"]:
            continue
        why = b.zookeeper_problem()
        if why:
            item["error_code"], item["error_message"] = ErrorCode.UNKNOWN_SERVER_ERROR, why
            continue
        try:
            await b.blocking(registry.set_topic_config, b.zk, rname, config)
        except registry.UnknownTopicError as exc:
            item["error_code"], item["error_message"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(exc)
            continue
        b.apply_config(rname, config)
    return {"responses": out}


async def handle_describe_log_dirs(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    wanted = None if req["topics"] is None else {(t["topic"], p) for t in req["topics"] for p in t["partitions"]}
    results: list[dict[str, Any]] = []
    if not cluster_allowed(b.authorizer, Operation.DESCRIBE, "DescribeLogDirs"):
        return {"results": results}  # (as Kafka: nothing, the version has no error code to say why)
    for d in b.logs.log_dirs:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp in b.logs.partitions_in(d):
            if wanted is not None and tp not in wanted:
                continue
            plog = b.logs.logs[tp]
            by_topic.setdefault(tp[0], []).append(
                {"partition_index": tp[1], "partition_size": plog.size_bytes, "offset_lag": 0, "is_future_key": False}
            )
        results.append({
            "error_code": 0, "log_dir": str(d),
            "topics": [{"name": t, "partitions": ps} for t, ps in sorted(by_topic.items())],
        })  # fmt: skip
    return {"results": results}
