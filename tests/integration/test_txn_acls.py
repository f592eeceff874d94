"""The transaction APIs under the authorizer, as Kafka's KafkaApis checks them: a principal without Write on
its TransactionalId cannot start a transactional producer (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), with it
(and Write on the topic) it commits; AddPartitionsToTxn needs Write on each topic, AddOffsetsToTxn Read on
the group. On the brokers of test_acls (alice logs in with SCRAM; the PLAINTEXT listener is a super user)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from broker.client.admin import Admin
from broker.security.acl import Operation, PatternType, ResourceType
from tests.integration.test_acls import _acl, _grant, _sasl, secured  # noqa: F401 (secured: the fixture)


def _committed_values(bootstrap: str, topic: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})  # fmt: skip
    c.assign([TopicPartition(topic, 0, 0)])
    out = [m.value() for m in c.consume(100, 5) if m.error() is None]
    c.close()
    return out


def test_a_transactional_producer_needs_write_on_its_transactional_id(secured) -> None:  # noqa: F811
    b, port = secured[0][0]
    topic, txn_id = f"tx-{uuid.uuid4().hex[:8]}", f"txa-{uuid.uuid4().hex[:8]}"
    with Admin(b.bootstrap) as admin:
        admin.create_topic(topic, 1, 2)
    _grant(b, _acl(ResourceType.TOPIC, topic, "User:alice", Operation.WRITE))
    refused = Producer({**_sasl(port, "alice"), "transactional.id": txn_id})
    with pytest.raises(KafkaException) as info:
        refused.init_transactions(15)
    assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in str(info.value) or "authoriz" in str(info.value).lower()

    _grant(b, _acl(ResourceType.TRANSACTIONAL_ID, "txa-", "User:alice", Operation.WRITE, pattern=PatternType.PREFIXED))
    p = Producer({**_sasl(port, "alice"), "transactional.id": txn_id})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"allowed", partition=0)
    p.commit_transaction(30)
    assert _committed_values(b.bootstrap, topic) == [b"allowed"]

    # AddOffsetsToTxn needs Read on the group: none for this one
    p.begin_transaction()
    with pytest.raises(KafkaException) as info:
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], _group_metadata(b.bootstrap, "no-read-group"), 15)
    assert "GROUP_AUTHORIZATION_FAILED" in str(info.value) or "authoriz" in str(info.value).lower()


def _group_metadata(bootstrap: str, group: str):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return c.consumer_group_metadata()
    finally:
        c.close()
