"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31): the ACLs in ZooKeeper, over the wire.

As Kafka: describing needs Describe on the cluster, creating and deleting Alter on it
(CLUSTER_AUTHORIZATION_FAILED otherwise); without an authorizer every answer is SECURITY_DISABLED.
A v0 request knows literal patterns only (the schemas default them). DescribeAcls answers from the
broker's cache; CreateAcls and DeleteAcls write ZooKeeper and the broker's cache follows the change
notification, as every other broker's does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kazoo.exceptions import KazooException

from broker.errors import KafkactlError
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import RequestHeader
from broker.security import acl_store
from broker.security.acl import (
    Binding,
    Entry,
    Filter,
    Operation,
    Pattern,
    PatternType,
    Permission,
    ResourceType,
    binding_error,
)
from broker.security.acl_authorizer import cluster_allowed

if TYPE_CHECKING:
    from broker.server.services import Services

_DISABLED = "no authorizer is configured on the broker (authorizer.class.name)"


def _enum(cls: type, value: int) -> Any:
    try:
        return cls(value)
    except ValueError:
        return cls(0)  # UNKNOWN


def _filter(f: dict[str, Any]) -> Filter:
    return Filter(_enum(ResourceType, f["resource_type_filter"]), f["resource_name_filter"],
                  _enum(PatternType, f["pattern_type_filter"]), f["principal_filter"], f["host_filter"],
                  _enum(Operation, f["operation"]), _enum(Permission, f["permission_type"]))  # fmt: skip


def _refusal(b: Services, operation: Operation, request: str) -> tuple[ErrorCode, str] | None:
    if b.authorizer is None:
        return ErrorCode.SECURITY_DISABLED, _DISABLED
    if not cluster_allowed(b.authorizer, operation, request):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"{operation.name} on the cluster is not allowed"
    return None


async def handle_describe_acls(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "resources": []}
    refused = _refusal(b, Operation.DESCRIBE, "DescribeAcls")
    if refused:
        out["error_code"], out["error_message"] = refused
        return out
    f = _filter(req)
    if f.unknown():
        out["error_code"], out["error_message"] = ErrorCode.INVALID_REQUEST, "the filter has an UNKNOWN field"
        return out
    assert b.authorizer is not None
    by_pattern: dict[Pattern, list[Entry]] = {}
    for found in acl_store.describe(b.authorizer.acls, f):
        by_pattern.setdefault(found.pattern, []).append(found.entry)
    for p, entries in sorted(by_pattern.items(), key=lambda kv: (kv[0].resource_type, kv[0].name, kv[0].pattern_type)):
        if header.api_version == 0 and p.pattern_type != PatternType.LITERAL:
            continue  # a v0 client cannot be told a pattern type
        out["resources"].append({
            "resource_type": p.resource_type, "resource_name": p.name, "pattern_type": p.pattern_type,
            "acls": [{"principal": e.principal, "host": e.host, "operation": e.operation,
                      "permission_type": e.permission} for e in entries],
        })  # fmt: skip
    return out


async def handle_create_acls(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    creations = req["creations"]
    refused = _refusal(b, Operation.ALTER, "CreateAcls")
    if refused:
        return {"throttle_time_ms": 0, "results": [{"error_code": refused[0], "error_message": refused[1]}
                                                   for _ in creations]}  # fmt: skip
    results: list[dict[str, Any]] = []
    valid: list[tuple[int, Binding]] = []
    for c in creations:
        binding = Binding(
            Pattern(_enum(ResourceType, c["resource_type"]), c["resource_name"],
                    _enum(PatternType, c["resource_pattern_type"])),
            Entry(c["principal"], c["host"], _enum(Operation, c["operation"]), _enum(Permission, c["permission_type"])),
        )  # fmt: skip
        why = binding_error(binding)
        results.append({"error_code": ErrorCode.INVALID_REQUEST if why else 0, "error_message": why})
        if not why:
            valid.append((len(results) - 1, binding))
    why = b.zookeeper_problem()
    for i, binding in valid:
        if why is None:
            try:
                await b.blocking(acl_store.add, b.zk, [binding])
                await b.blocking(b.authorizer.reload, [binding.pattern])
                continue
            except KafkactlError as exc:  # (a name no znode can have)
                results[i] = {"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(exc)}
                continue
            except KazooException as exc:
                why = f"ZooKeeper: {type(exc).__name__}"
        results[i] = {"error_code": ErrorCode.UNKNOWN_SERVER_ERROR, "error_message": why}
    return {"throttle_time_ms": 0, "results": results}


async def handle_delete_acls(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    filters = [_filter(f) for f in req["filters"]]
    refused = _refusal(b, Operation.ALTER, "DeleteAcls") or (
        (ErrorCode.UNKNOWN_SERVER_ERROR, b.zookeeper_problem()) if b.zookeeper_problem() else None
    )
    if refused:
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": refused[0], "error_message": refused[1], "matching_acls": []} for _ in filters]}  # fmt: skip
    usable = [f for f in filters if not f.unknown() and not (header.api_version == 0
                                                              and f.pattern_type != PatternType.LITERAL)]  # fmt: skip
    try:
        removed = await b.blocking(acl_store.remove, b.zk, usable)
        await b.blocking(b.authorizer.reload, {m.pattern for ms in removed for m in ms})
    except (KafkactlError, KazooException) as exc:
        why = str(exc) or type(exc).__name__
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": ErrorCode.UNKNOWN_SERVER_ERROR, "error_message": why, "matching_acls": []}
            for _ in filters]}  # fmt: skip
    by_filter = dict(zip(usable, removed, strict=True))
    out = []
    for f in filters:
        if f.unknown():
            out.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": "the filter has an UNKNOWN field",
                        "matching_acls": []})  # fmt: skip
            continue
        out.append({"error_code": 0, "error_message": None, "matching_acls": [{
            "error_code": 0, "error_message": None, "resource_type": m.pattern.resource_type,
            "resource_name": m.pattern.name, "pattern_type": m.pattern.pattern_type, "principal": m.entry.principal,
            "host": m.entry.host, "operation": m.entry.operation, "permission_type": m.entry.permission,
        } for m in by_filter.get(f, [])]})  # fmt: skip
    return {"throttle_time_ms": 0, "filter_results": out}
