"""The ZooKeeper form of ACLs and their change notifications, as Kafka writes them (broker/security/acl_store.py)."""

from __future__ import annotations

import json

import pytest

from broker.security.acl import Entry, Operation, Pattern, PatternType, Permission, ResourceType
from broker.security.acl_store import AclStoreError, decode_acls, decode_change, encode_acls, encode_change, node


def test_a_pattern_node_holds_kafkas_json():
    entries = [Entry("User:alice", "*", Operation.READ, Permission.ALLOW),
               Entry("User:bob", "10.0.0.1", Operation.IDEMPOTENT_WRITE, Permission.DENY)]  # fmt: skip
    obj = json.loads(encode_acls(entries))
    assert obj == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"},
        {"principal": "User:bob", "permissionType": "Deny", "operation": "IdempotentWrite", "host": "10.0.0.1"},
    ]}  # fmt: skip
    assert decode_acls(encode_acls(entries)) == frozenset(entries)


def test_what_kafka_wrote_is_read():
    data = (
        b'{"version":1,"acls":[{"principal":"User:x","permissionType":"Allow","operation":"DescribeConfigs",'
        b'"host":"*"},{"principal":"User:y","permissionType":"Allow","operation":"Frobnicate","host":"*"}]}'
    )
    assert decode_acls(data) == {
        Entry("User:x", "*", Operation.DESCRIBE_CONFIGS, Permission.ALLOW)
    }  # the unknown one skipped


def test_nodes_are_where_kafka_keeps_them():
    assert node(Pattern(ResourceType.TOPIC, "t1")) == "/kafka-acl/Topic/t1"
    assert node(Pattern(ResourceType.CLUSTER, "kafka-cluster")) == "/kafka-acl/Cluster/kafka-cluster"
    assert node(Pattern(ResourceType.TRANSACTIONAL_ID, "tx", PatternType.PREFIXED)) == (
        "/kafka-acl-extended/prefixed/TransactionalId/tx"
    )
    with pytest.raises(AclStoreError):
        node(Pattern(ResourceType.GROUP, "a/b"))


def test_change_notifications():
    lit = Pattern(ResourceType.GROUP, "g:1")
    assert encode_change(lit) == b"Group:g:1"
    assert decode_change(b"Group:g:1", prefixed=False) == lit
    assert decode_change(b"TOPIC:t", prefixed=False) == Pattern(ResourceType.TOPIC, "t")  # Java's enum name
    pre = Pattern(ResourceType.TOPIC, "pay", PatternType.PREFIXED)
    assert json.loads(encode_change(pre)) == {"version": 1, "resourceType": "TOPIC", "name": "pay",
                                              "patternType": "PREFIXED"}  # fmt: skip
    assert decode_change(encode_change(pre), prefixed=True) == pre
    with pytest.raises(ValueError):
        decode_change(b"nonsense", prefixed=False)
