"""IncrementalAlterConfigs' operations on a config's overrides (broker.server.config_ops), as Kafka 2.8."""

from __future__ import annotations

import pytest

from broker.protocol.errors import ErrorCode
from broker.protocol.messages.admin import BROKER_RESOURCE, TOPIC_RESOURCE
from broker.protocol.messages.configs import OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT
from broker.server.config_ops import TOPIC_LIST_KEYS, ConfigOpError, Op, apply_ops, resource_label

DEFAULTS = {"cleanup.policy": "delete", "retention.ms": "604800000", "leader.replication.throttled.replicas": ""}


def run(current: dict[str, str], *ops: Op) -> dict[str, str]:
    return apply_ops(current, ops, DEFAULTS, TOPIC_LIST_KEYS)


def refused(current: dict[str, str], *ops: Op) -> ConfigOpError:
    with pytest.raises(ConfigOpError) as exc:
        run(current, *ops)
    return exc.value


def test_set_and_delete_touch_only_their_keys():
    current = {"retention.ms": "1000", "segment.bytes": "2048"}
    assert run(current, Op("retention.ms", OP_SET, "5000")) == {"retention.ms": "5000", "segment.bytes": "2048"}
    assert run(current, Op("retention.ms", OP_DELETE, None)) == {"segment.bytes": "2048"}
    assert run(current, Op("flush.ms", OP_DELETE, None)) == current  # (no override: nothing to remove)
    assert current == {"retention.ms": "1000", "segment.bytes": "2048"}  # (the input is not changed)


def test_append_starts_from_the_default_and_keeps_items_once():
    assert run({}, Op("cleanup.policy", OP_APPEND, "compact")) == {"cleanup.policy": "delete,compact"}
    assert run({"cleanup.policy": "compact"}, Op("cleanup.policy", OP_APPEND, "compact,delete")) == {
        "cleanup.policy": "compact,delete"
    }
    key = "leader.replication.throttled.replicas"
    assert run({}, Op(key, OP_APPEND, "0:1")) == {key: "0:1"}
    assert run({key: "0:1"}, Op(key, OP_APPEND, "1:2, 0:1")) == {key: "0:1,1:2"}


def test_subtract_removes_every_named_item():
    assert run({"cleanup.policy": "compact,delete"}, Op("cleanup.policy", OP_SUBTRACT, "delete")) == {
        "cleanup.policy": "compact"
    }
    assert run({}, Op("cleanup.policy", OP_SUBTRACT, "delete")) == {"cleanup.policy": ""}
    key = "leader.replication.throttled.replicas"
    assert run({key: "0:1,1:2"}, Op(key, OP_SUBTRACT, "0:1,5:5")) == {key: "1:2"}


def test_append_or_subtract_on_a_key_that_is_not_a_list_is_an_invalid_request():
    e = refused({}, Op("retention.ms", OP_APPEND, "1"))
    assert (e.code, e.message) == (
        ErrorCode.INVALID_REQUEST,
        "Config value append is not allowed for config key: retention.ms",
    )
    e = refused({}, Op("retention.ms", OP_SUBTRACT, "1"))
    assert e.message == "Config value subtract is not allowed for config key: retention.ms"


def test_append_to_an_unknown_key_is_an_invalid_config():
    e = refused({}, Op("no.such.key", OP_APPEND, "x"))
    assert (e.code, e.message) == (ErrorCode.INVALID_CONFIG, "Unknown topic config name: no.such.key")


def test_the_requests_own_mistakes():
    e = refused({}, Op("retention.ms", OP_SET, "1"), Op("retention.ms", OP_DELETE, None))
    assert (e.code, e.message) == (ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys : retention.ms")
    e = refused({}, Op("retention.ms", OP_SET, None))
    assert (e.code, e.message) == (ErrorCode.INVALID_REQUEST, "Null value not supported for : SET:retention.ms")
    e = refused({}, Op("retention.ms", 7, "1"))
    assert (e.code, e.message) == (ErrorCode.INVALID_REQUEST, "Unknown config operation: 7")


def test_a_refused_operation_leaves_nothing_half_done():
    current = {"retention.ms": "1000"}
    refused(current, Op("retention.ms", OP_SET, "2000"), Op("retention.ms", OP_APPEND, "1"))
    refused(current, Op("segment.bytes", OP_SET, "1"), Op("retention.ms", OP_APPEND, "1"))
    assert current == {"retention.ms": "1000"}


def test_the_resource_as_kafka_names_it():
    assert resource_label(TOPIC_RESOURCE, "t") == "ConfigResource(type=TOPIC, name='t')"
    assert resource_label(BROKER_RESOURCE, "1") == "ConfigResource(type=BROKER, name='1')"
