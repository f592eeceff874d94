"""IncrementalAlterConfigs (44): single keys of a topic's or a broker's dynamic config changed, the others kept.

As ZooKeeper-mode Kafka 2.8 (AdminManager.incrementalAlterConfigs): per resource, the overrides in
ZooKeeper are read, every operation applied (broker.server.config_ops), the result checked whole and
written back, so a resource changes wholly or not at all. The write is conditional on the znode's
version: another writer in between (AlterConfigs, `topic reassign --throttle`, a second client) makes it
read and decide again instead of losing that change. `validate_only` checks everything and writes nothing.
The read-modify-write is `registry.update_config`, which `topic reassign --throttle` uses too. ZooKeeper
failing during it (ConnectionLoss, SessionExpired, any kazoo error) is that resource's UNKNOWN_SERVER_ERROR,
as a ZooKeeper already unreachable before it is; the client's connection stays open.

- Topics (type 2): every topic-level key (`BrokerConfig.TOPIC_DEFAULTS`); the brokers take the new
  overrides from their watches of `/config/topics/<t>`, this one at once.
- Brokers (type 4): kafkactl's only dynamic broker keys are the replication throttle rates
  (`leader.replication.throttled.rate`, `follower.replication.throttled.rate` in `/config/brokers/<id>`,
  which `topic reassign --throttle` sets too). Any other key of the broker's config is refused as Kafka
  refuses a key that is not dynamically updatable; the resource must name this broker (there is no
  cluster-wide default kafkactl would read).

Authorization as Kafka's KafkaApis: AlterConfigs on the topic (TOPIC_AUTHORIZATION_FAILED) or on the
cluster for a broker (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from broker.protocol.errors import ErrorCode
from broker.protocol.framing import RequestHeader
from broker.protocol.messages.admin import BROKER_RESOURCE, TOPIC_RESOURCE
from broker.security.acl import Operation, ResourceType
from broker.security.acl_authorizer import allowed, cluster_allowed
from broker.server.config import BrokerConfig, topic_config_error
from broker.server.config_ops import (
    DYNAMIC_BROKER_KEYS,
    TOPIC_LIST_KEYS,
    ConfigOpError,
    Op,
    apply_ops,
    check_ops,
    resource_label,
    unknown_keys,
)
from broker.topics import topic_name_error
from broker.zk import paths, registry

if TYPE_CHECKING:
    from broker.server.services import Services

log = logging.getLogger(__name__)


async def handle_incremental_alter_configs(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    out = []
    for res in req["resources"]:
        rtype, rname = res["resource_type"], res["resource_name"]
        item: dict[str, Any] = {"error_code": 0, "error_message": None, "resource_type": rtype, "resource_name": rname}
        out.append(item)
        ops = [Op(c["name"], c["config_operation"], c["value"]) for c in res["configs"]]
        try:
            _authorize(b, rtype, rname)
            if rtype == TOPIC_RESOURCE:
                await _alter_topic(b, rname, ops, req["validate_only"])
            elif rtype == BROKER_RESOURCE:
                await _alter_broker(b, rname, ops, req["validate_only"])
            else:
                why = f"AlterConfigs is only supported for topics and brokers, but resource type is {rtype}"
                raise ConfigOpError(ErrorCode.INVALID_REQUEST, why)
        except ConfigOpError as exc:
            item["error_code"], item["error_message"] = exc.code, exc.message
        except (KazooException, KazooTimeoutError) as exc:  # (ConnectionLoss, SessionExpired, ...) this resource's
            why = str(exc) or type(exc).__name__
            item["error_code"] = ErrorCode.UNKNOWN_SERVER_ERROR
            item["error_message"] = f"broker {b.id} could not change it in ZooKeeper ({why}); try again"
    return {"throttle_time_ms": 0, "responses": out}


def _authorize(b: Services, rtype: int, rname: str) -> None:
    if rtype == TOPIC_RESOURCE:
        if not allowed(b.authorizer, Operation.ALTER_CONFIGS, ResourceType.TOPIC, rname, "IncrementalAlterConfigs"):
            raise ConfigOpError(
                ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"ALTER_CONFIGS on topic {rname!r} is not allowed"
            )
    elif rtype == BROKER_RESOURCE and not cluster_allowed(b.authorizer, Operation.ALTER_CONFIGS,
                                                          "IncrementalAlterConfigs"):  # fmt: skip
        raise ConfigOpError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "ALTER_CONFIGS on the cluster is not allowed")


async def _alter_topic(b: Services, topic: str, ops: list[Op], validate_only: bool) -> None:
    why = topic_name_error(topic)
    if why:
        raise ConfigOpError(ErrorCode.INVALID_TOPIC_EXCEPTION, why)
    check_ops(ops)
    _zookeeper_up(b)
    defaults = b.config.topic_defaults()

    def change(current: dict[str, str] | None) -> dict[str, str] | None:
        new = apply_ops(current or {}, ops, defaults, TOPIC_LIST_KEYS)
        if current is None:
            raise ConfigOpError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{topic}' does not exist.")
        unknown = unknown_keys(new, BrokerConfig.TOPIC_DEFAULTS)
        if unknown:
            raise ConfigOpError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {unknown[0]}")
        why = topic_config_error(new, defaults)
        if why:
            label = resource_label(TOPIC_RESOURCE, topic)
            raise ConfigOpError(ErrorCode.INVALID_REQUEST, f"Invalid config value for resource {label}: {why}")
        return None if validate_only else new

    written = await _update(b, paths.topic_config(topic), change, topic)
    if written is not None:
        log.info("updated topic %s with new configuration %s (IncrementalAlterConfigs)", topic, written)
        b.apply_config(topic, written)


async def _alter_broker(b: Services, name: str, ops: list[Op], validate_only: bool) -> None:
    if name != str(b.id):
        why = (f"kafkactl keeps no cluster-wide broker config: name a broker ({b.id} here)" if name == ""
               else f"Unexpected broker id, expected {b.id} or empty string, but received {name}")  # fmt: skip
        raise ConfigOpError(ErrorCode.INVALID_REQUEST, why)
    check_ops(ops)
    label = resource_label(BROKER_RESOURCE, name)
    fixed = sorted(o.name for o in ops if o.name not in DYNAMIC_BROKER_KEYS and o.name in b.config.props)
    if fixed:
        why = f"Cannot update these configs dynamically: Set({', '.join(fixed)})"
        why = f"Invalid config value for resource {label}: {why}"
        raise ConfigOpError(ErrorCode.INVALID_REQUEST, why)
    _zookeeper_up(b)

    def change(found: dict[str, str] | None) -> dict[str, str] | None:
        current = found or {}
        new = apply_ops(current, ops, dict.fromkeys(DYNAMIC_BROKER_KEYS, ""), frozenset(), "broker")
        unknown = [k for k in unknown_keys(new, DYNAMIC_BROKER_KEYS) if k not in current]
        if unknown:
            raise ConfigOpError(ErrorCode.INVALID_CONFIG, f"Unknown broker config name: {unknown[0]}")
        for key in sorted(DYNAMIC_BROKER_KEYS & new.keys()):
            why = _rate_error(key, new[key])
            if why:
                raise ConfigOpError(ErrorCode.INVALID_REQUEST, f"Invalid config value for resource {label}: {why}")
        return None if validate_only else new

    written = await _update(b, paths.broker_config(b.id), change)
    if written is not None:
        log.info("updated the dynamic config of broker %s: %s (IncrementalAlterConfigs)", b.id, written)


async def _update(b: Services, path: str, change: Callable[[dict[str, str] | None], dict[str, str] | None],
                  topic: str | None = None) -> dict[str, str] | None:  # fmt: skip
    """`registry.update_config` off the event loop: the conditional read-modify-write, again on a lost race."""
    try:
        return await b.blocking(functools.partial(registry.update_config, b.zk, path, change, topic=topic))
    except registry.ConfigChangingError:
        what = f"topic {topic!r}" if topic is not None else f"broker {b.id}"
        raise ConfigOpError(ErrorCode.REQUEST_TIMED_OUT, f"the config of {what} kept changing: try again") from None


def _rate_error(key: str, value: str) -> str | None:
    """Kafka's check of a throttle rate (a LONG, at least 0)."""
    try:
        rate = int(value.strip())
    except ValueError:
        return f"Invalid value {value} for configuration {key}: Not a number of type LONG"
    return f"Invalid value {value} for configuration {key}: Value must be at least 0" if rate < 0 else None


def _zookeeper_up(b: Services) -> None:
    why = b.zookeeper_problem()
    if why:
        raise ConfigOpError(ErrorCode.UNKNOWN_SERVER_ERROR, why)
