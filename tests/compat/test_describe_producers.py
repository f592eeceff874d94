"""DescribeProducers (61, KIP-664) as kafka-python's admin client calls it: the idempotent producers
confluent-kafka and kafka-python wrote with, each with its epoch and last sequence, on the leader of each
partition; a plain producer is not listed, and a partition this broker does not lead is refused."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Producer
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient
from kafka.errors import UnknownTopicOrPartitionError
from kafka.structs import TopicPartition

from broker.client.admin import Admin


def test_kafka_python_describes_the_idempotent_producers_of_each_partition(shared_broker) -> None:
    topic = f"producers-{uuid.uuid4().hex[:8]}"
    with Admin(shared_broker.bootstrap) as admin:
        admin.create_topic(topic, 2, 1)
    before_ms = int(time.time() * 1000)
    cf = Producer({"bootstrap.servers": shared_broker.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    for i in range(7):  # one request each (flushed one by one): sequences 0..6 on partition 0
        cf.produce(topic, f"cf-{i}".encode(), partition=0)
        cf.flush(10)
    kp = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, enable_idempotence=True, acks="all")
    for i in range(3):
        kp.send(topic, f"kp-{i}".encode(), partition=1).get(timeout=10)
    kp.close()
    plain = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, enable_idempotence=False, acks=1)
    plain.send(topic, b"plain", partition=1).get(timeout=10)
    plain.close()

    client = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        got = client.describe_producers([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        [on0] = got[TopicPartition(topic, 0)].active_producers
        [on1] = got[TopicPartition(topic, 1)].active_producers  # the plain producer is not there
        assert on0.producer_id != on1.producer_id and min(on0.producer_id, on1.producer_id) >= 0
        assert (on0.producer_epoch, on0.last_sequence) == (0, 6)
        assert (on1.producer_epoch, on1.last_sequence) == (0, 2)
        for p in (on0, on1):
            assert before_ms - 1000 <= p.last_timestamp <= int(time.time() * 1000) + 1000
            assert (p.coordinator_epoch, p.current_transaction_start_offset) == (-1, -1)
        try:
            client.describe_producers([TopicPartition(topic, 9)])
            raise AssertionError("a partition the topic does not have was described")
        except UnknownTopicOrPartitionError:
            pass
    finally:
        client.close()
    cf.flush(5)
