"""The operations of IncrementalAlterConfigs (KIP-339) applied to a config's overrides, as Kafka 2.8 does.

Pure functions (no ZooKeeper, no broker): the handler reads a resource's overrides, applies every
operation of the request here, checks the result and writes it back in one step, so a resource changes
wholly or not at all. Errors carry Kafka's error code and words (`ConfigOpError`):

- a key named twice, or a value missing (null) for SET/APPEND/SUBTRACT: INVALID_REQUEST;
- APPEND/SUBTRACT on a key that is not a list: INVALID_REQUEST ("Config value append is not allowed…");
- a key the resource does not know: INVALID_CONFIG ("Unknown topic config name: …");
- a bad value: INVALID_REQUEST ("Invalid config value for resource ConfigResource(…): …").

APPEND adds the items not already in the list (Kafka 2.8 would repeat them: `delete,delete`), SUBTRACT
removes every item named; both start from the default when the key has no override.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from broker.protocol.errors import ErrorCode
from broker.protocol.messages.admin import BROKER_RESOURCE, TOPIC_RESOURCE
from broker.protocol.messages.configs import OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT, OPERATIONS

#: the list-typed (Kafka's ConfigDef.Type.LIST) topic keys
TOPIC_LIST_KEYS = frozenset({
    "cleanup.policy", "leader.replication.throttled.replicas", "follower.replication.throttled.replicas",
})  # fmt: skip

#: the broker keys kafkactl changes at run time (`/config/brokers/<id>`): the replication throttle rates
DYNAMIC_BROKER_KEYS = frozenset({"leader.replication.throttled.rate", "follower.replication.throttled.rate"})

_KIND = {TOPIC_RESOURCE: "TOPIC", BROKER_RESOURCE: "BROKER"}


class ConfigOpError(Exception):
    """A resource's change refused: the error code and message to answer."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Op(NamedTuple):
    """One entry of a resource's `configs`: key, operation id, value (None for DELETE)."""

    name: str
    operation: int
    value: str | None


def resource_label(rtype: int, rname: str) -> str:
    """Kafka's `ConfigResource.toString()`, which its messages quote."""
    return f"ConfigResource(type={_KIND.get(rtype, rtype)}, name='{rname}')"


def check_ops(ops: Iterable[Op]) -> list[Op]:
    """The request's own mistakes, before anything is read: unknown operations, repeated keys, nulls."""
    ops = list(ops)
    bad = sorted({o.operation for o in ops if o.operation not in OPERATIONS})
    if bad:
        raise ConfigOpError(ErrorCode.INVALID_REQUEST, f"Unknown config operation: {', '.join(map(str, bad))}")
    seen: dict[str, int] = {}
    for o in ops:
        seen[o.name] = seen.get(o.name, 0) + 1
    twice = [name for name, n in seen.items() if n > 1]
    if twice:
        raise ConfigOpError(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys : {','.join(twice)}")
    nulls = [f"{OPERATIONS[o.operation]}:{o.name}" for o in ops if o.value is None and o.operation != OP_DELETE]
    if nulls:
        raise ConfigOpError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {','.join(nulls)}")
    return ops


def apply_ops(current: Mapping[str, str], ops: Iterable[Op], defaults: Mapping[str, str],
              list_keys: frozenset[str], kind: str = "topic") -> dict[str, str]:  # fmt: skip
    """The overrides after `ops`, in order, on `current` (not changed). `defaults` are the values a key
    without an override has (APPEND and SUBTRACT start from them); `list_keys` the keys that take them."""
    out = dict(current)
    for o in check_ops(ops):
        if o.operation == OP_SET:
            out[o.name] = o.value  # type: ignore[assignment]  (check_ops: never None here)
        elif o.operation == OP_DELETE:
            out.pop(o.name, None)
        else:
            verb = "append" if o.operation == OP_APPEND else "subtract"
            if o.name not in defaults:
                raise ConfigOpError(ErrorCode.INVALID_CONFIG, f"Unknown {kind} config name: {o.name}")
            if o.name not in list_keys:
                raise ConfigOpError(
                    ErrorCode.INVALID_REQUEST, f"Config value {verb} is not allowed for config key: {o.name}"
                )
            items = _items(out.get(o.name, defaults[o.name]))
            given = _items(o.value or "")
            if o.operation == OP_APPEND:
                items += [i for i in given if i not in items]
            else:
                assert o.operation == OP_SUBTRACT
                items = [i for i in items if i not in given]
            out[o.name] = ",".join(items)
    return out


def _items(value: str) -> list[str]:
    """A list value's items (comma-separated, blanks dropped), repeats kept once."""
    out: list[str] = []
    for item in (i.strip() for i in value.split(",")):
        if item and item not in out:
            out.append(item)
    return out


def unknown_keys(config: Mapping[str, str], known: Iterable[str]) -> list[str]:
    """The keys of `config` not in `known`, sorted."""
    known = set(known)
    return sorted(k for k in config if k not in known)
