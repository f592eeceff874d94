"""DescribeClientQuotas (48) and AlterClientQuotas (49), as ZooKeeper-mode Kafka 2.8's AdminManager answers them.

Describe: a filter of components (entity type `user` or `client-id`, each at most once; match an exact name,
the default entity, or any), `strict` leaving out entities with components the filter does not name. The
answer lists each matching entity that has quotas. Alter: per entry, set or remove quota keys
(`producer_byte_rate`, `consumer_byte_rate` — longs — and `request_percentage`); any other key, an entity of
another type or a type named twice is INVALID_REQUEST for that entry; `validate_only` writes nothing.

Authorization as Kafka's KafkaApis: DescribeConfigs on the cluster to describe (the whole answer
CLUSTER_AUTHORIZATION_FAILED), AlterConfigs on the cluster to alter (each entry).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.protocol.errors import ErrorCode
from broker.protocol.framing import RequestHeader
from broker.protocol.messages.quotas import MATCH_ANY, MATCH_DEFAULT, MATCH_EXACT
from broker.quota import store as quota_store
from broker.quota.store import CLIENT_ID, QUOTA_KEYS, USER, Entity
from broker.security.acl import Operation
from broker.security.acl_authorizer import cluster_allowed
from broker.zk import paths

if TYPE_CHECKING:
    from broker.server.services import Services


#: the message of Kafka's ClusterAuthorizationException
_CLUSTER_DENIED = "Cluster authorization failed."


class _Invalid(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _zookeeper(b: Services) -> Any:
    problem = b.zookeeper_problem()
    if problem or b.zk is None:
        raise _Invalid(ErrorCode.UNKNOWN_SERVER_ERROR, problem or "ZooKeeper is not connected")
    return b.zk


# -- DescribeClientQuotas -------------------------------------------------------------------------------


async def handle_describe_client_quotas(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "entries": None}
    if not cluster_allowed(b.authorizer, Operation.DESCRIBE_CONFIGS, "DescribeClientQuotas"):
        out["error_code"], out["error_message"] = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, _CLUSTER_DENIED
        return out
    try:
        components = _filter(req["components"])
        zk = _zookeeper(b)
        quotas = await b.blocking(quota_store.read_all, zk)
    except _Invalid as exc:
        out["error_code"], out["error_message"] = exc.code, exc.message
        return out
    found = describe(quotas, components, req["strict"])
    out["entries"] = [
        {"entity": e.wire(), "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
        for e, values in found
    ]
    return out


def _filter(components: list[dict[str, Any]]) -> dict[str, str | None]:
    """entity type → the name to match (`paths.DEFAULT_ENTITY` for the default, None for any)."""
    out: dict[str, str | None] = {}
    for c in components:
        kind, match_type, match = c["entity_type"], c["match_type"], c["match"]
        if kind not in (USER, CLIENT_ID):
            if not kind:
                raise _Invalid(ErrorCode.INVALID_REQUEST, "Unexpected empty filter component entity type")
            raise _Invalid(ErrorCode.UNSUPPORTED_VERSION, f"Custom entity type '{kind}' not supported")
        if kind in out:
            which = "user" if kind == USER else "client"
            raise _Invalid(ErrorCode.INVALID_REQUEST, f"Duplicate {which} filter component entity type")
        if match_type == MATCH_EXACT:
            if match is None:
                raise _Invalid(ErrorCode.INVALID_REQUEST, f"Unexpected null match for an exact {kind} component")
            out[kind] = match
        elif match_type == MATCH_DEFAULT:
            out[kind] = paths.DEFAULT_ENTITY
        elif match_type == MATCH_ANY:
            out[kind] = None
        else:
            raise _Invalid(ErrorCode.INVALID_REQUEST, f"Unexpected match type: {match_type}")
    return out


def describe(quotas: dict[Entity, dict[str, float]], components: dict[str, str | None],
             strict: bool) -> list[tuple[Entity, dict[str, float]]]:  # fmt: skip
    """The entities a filter matches (AdminManager.handleDescribeClientQuotas's `matches`), in a stable order."""

    def matches(kind: str, name: str | None) -> bool:
        if kind in components:
            want = components[kind]
            return name is not None and (want is None or name == want)
        return name is None or not strict

    out = [
        (e, values)
        for e, values in quotas.items()
        if values and matches(USER, e.user) and matches(CLIENT_ID, e.client_id)
    ]
    return sorted(out, key=lambda item: (item[0].user or "", item[0].client_id or ""))


# -- AlterClientQuotas ----------------------------------------------------------------------------------


async def handle_alter_client_quotas(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    allowed = cluster_allowed(b.authorizer, Operation.ALTER_CONFIGS, "AlterClientQuotas")
    results = []
    for entry in req["entries"]:
        result: dict[str, Any] = {"error_code": 0, "error_message": None, "entity": entry["entity"]}
        results.append(result)
        try:
            if not allowed:
                raise _Invalid(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, _CLUSTER_DENIED)
            entity = entity_of(entry["entity"])
            changes = changes_of(entry["ops"])
            if req["validate_only"]:
                continue
            zk = _zookeeper(b)
            await b.blocking(quota_store.alter, zk, entity, changes)
        except _Invalid as exc:
            result["error_code"], result["error_message"] = exc.code, exc.message
    return {"throttle_time_ms": 0, "entries": results}


def entity_of(parts: list[dict[str, Any]]) -> Entity:
    """An AlterClientQuotas entity (a null name: the default), checked as AdminManager.entityToSanitizedUserClientId."""
    if not parts:
        raise _Invalid(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
    user = client = None
    for part in parts:
        kind, name = part["entity_type"], part["entity_name"]
        if kind not in (USER, CLIENT_ID):
            raise _Invalid(ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {kind}")
        if (user if kind == USER else client) is not None:
            raise _Invalid(ErrorCode.INVALID_REQUEST, f"Duplicate {kind} entity in request")
        if name == "":
            raise _Invalid(ErrorCode.INVALID_REQUEST, f"Invalid empty {kind} name (null names the default)")
        value = paths.DEFAULT_ENTITY if name is None else name
        if kind == USER:
            user = value
        else:
            client = value
    return Entity(user, client)


def changes_of(ops: list[dict[str, Any]]) -> dict[str, float | None]:
    """key → new value (None: remove); an unknown key, or a fraction for a long key, is INVALID_REQUEST."""
    out: dict[str, float | None] = {}
    for op in ops:
        key, value = op["key"], op["value"]
        if key not in QUOTA_KEYS:
            raise _Invalid(ErrorCode.INVALID_REQUEST, f"Invalid configuration key {key}")
        if key in out:
            raise _Invalid(ErrorCode.INVALID_REQUEST, f"Duplicate quota key {key} in request")
        if op["remove"]:
            out[key] = None
            continue
        if value != value or value in (float("inf"), float("-inf")):
            raise _Invalid(ErrorCode.INVALID_REQUEST, f"Configuration {key} must be a number")
        if QUOTA_KEYS[key] and abs(int(value + 1e-6) - value) > 1e-6:
            raise _Invalid(ErrorCode.INVALID_REQUEST, f"Configuration {key} must be a Long value")
        out[key] = value
    return out
