"""The admin APIs at the versions Kafka 2.8 serves (CreateTopics 7, DeleteTopics 6, DescribeConfigs 4,
AlterConfigs 2, DescribeLogDirs 2, CreatePartitions 3, ElectLeaders 2, most of them flexible) through
confluent-kafka's AdminClient, kafka-python's KafkaAdminClient and aiokafka's AIOKafkaAdminClient, each
picking the highest version both sides speak, against one real broker and the real ZooKeeper.

Every change is checked where it lands: the topic's znodes, the metadata, DescribeConfigs. CreateTopics
v5+ answers carry each new topic's partition count, replication factor and whole config (the values and
their sources), DescribeConfigs permitting; kafkactl's topics have no ids (v7's topic_id is all zero,
DeleteTopics v6 by id alone is UNKNOWN_TOPIC_ID).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewPartitions as AioNewPartitions
from aiokafka.admin import NewTopic as AioNewTopic
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as AioConfigResourceType
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewPartitions, NewTopic
from kafka.admin import ConfigResource as KPConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from broker.client.admin import Admin
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.admin import DEFAULT_CONFIG, DYNAMIC_TOPIC_CONFIG
from broker.security import credentials
from broker.security.acl import Operation, PatternType, ResourceType
from broker.security.scram import make_credential
from tests.integration.clientkit import create_topic, unique
from tests.integration.cluster import BrokerProcess, new_chroot
from tests.integration.helpers import zk_json, zk_session
from tests.integration.wire import open_conn

WEEK_MS = str(7 * 24 * 3600 * 1000)


@pytest.fixture(scope="module")
def b(zk_server, tmp_path_factory) -> Iterator[BrokerProcess]:
    with BrokerProcess(1, new_chroot(zk_server.connect_string), tmp_path_factory.mktemp("admin-clients")) as broker:
        yield broker


def overrides(b: BrokerProcess, topic: str) -> dict[str, str]:
    """The topic's overrides as ZooKeeper holds them ({} for none)."""
    with zk_session(b.zk_connect) as zk:
        if zk.exists(f"/config/topics/{topic}") is None:
            return {}
        return zk_json(zk, f"/config/topics/{topic}")["config"]


def in_zookeeper(b: BrokerProcess, topic: str) -> bool:
    with zk_session(b.zk_connect) as zk:
        return zk.exists(f"/brokers/topics/{topic}") is not None


def partition_count(b: BrokerProcess, topic: str) -> int | None:
    """The topic's partitions as ZooKeeper holds them (None: no such topic)."""
    with zk_session(b.zk_connect) as zk:
        if zk.exists(f"/brokers/topics/{topic}") is None:
            return None
        return len(zk_json(zk, f"/brokers/topics/{topic}")["partitions"])


def wait_for(check, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def listed(b: BrokerProcess) -> dict[str, int]:
    with Admin(b.bootstrap) as admin:
        return admin.list_topics()


# --- confluent-kafka (librdkafka) ------------------------------------------------------------------


def test_confluent_create_validate_describe_alter_partitions_delete(b):
    cf = AdminClient({"bootstrap.servers": b.bootstrap})
    t = unique("cf-admin")
    new = NewTopic(t, num_partitions=3, replication_factor=1, config={"retention.ms": "60000"})
    cf.create_topics([new], validate_only=True, operation_timeout=20)[t].result(timeout=30)
    assert not in_zookeeper(b, t) and t not in listed(b)  # only validated

    cf.create_topics([new], operation_timeout=20)[t].result(timeout=30)
    assert partition_count(b, t) == 3
    assert overrides(b, t) == {"retention.ms": "60000"}
    wait_for(lambda: len(cf.list_topics(t, timeout=10).topics[t].partitions) == 3, "the metadata")

    with pytest.raises(KafkaException) as exc:
        cf.create_topics([new], operation_timeout=20)[t].result(timeout=30)
    assert exc.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    res = ConfigResource("topic", t)
    got = cf.describe_configs([res], request_timeout=20)[res].result(timeout=30)
    assert (got["retention.ms"].value, got["retention.ms"].source) == ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert (got["segment.ms"].source, got["segment.ms"].is_read_only) == (ConfigSource.DEFAULT_CONFIG.value, False)

    # AlterConfigs replaces the whole set of overrides (validate_only changes nothing)
    alter = ConfigResource("topic", t, set_config={"segment.bytes": "1048576"})
    cf.alter_configs([alter], validate_only=True, request_timeout=20)[alter].result(timeout=30)
    assert overrides(b, t) == {"retention.ms": "60000"}
    cf.alter_configs([alter], request_timeout=20)[alter].result(timeout=30)
    assert overrides(b, t) == {"segment.bytes": "1048576"}
    got = cf.describe_configs([res], request_timeout=20)[res].result(timeout=30)
    assert (got["segment.bytes"].value, got["retention.ms"].value) == ("1048576", WEEK_MS)

    cf.create_partitions([NewPartitions(t, 5)], validate_only=True, operation_timeout=20)[t].result(timeout=30)
    assert partition_count(b, t) == 3
    cf.create_partitions([NewPartitions(t, 5)], operation_timeout=20)[t].result(timeout=30)
    assert partition_count(b, t) == 5
    with pytest.raises(KafkaException) as exc:
        cf.create_partitions([NewPartitions(t, 4)], operation_timeout=20)[t].result(timeout=30)
    assert exc.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    wait_for(lambda: listed(b).get(t) == 5, "the new partitions in the metadata")

    cf.delete_topics([t], operation_timeout=20)[t].result(timeout=30)
    wait_for(lambda: not in_zookeeper(b, t), "the topic gone from ZooKeeper")
    with pytest.raises(KafkaException) as exc:
        cf.delete_topics([t], operation_timeout=20)[t].result(timeout=30)
    assert exc.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


# --- kafka-python ------------------------------------------------------------------------------------


def test_kafka_python_create_topics_answers_partitions_replication_and_configs(b):
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=20_000)
    try:
        t = unique("kp-admin")
        spec = {t: {"num_partitions": 2, "replication_factor": 1, "configs": {"retention.bytes": "1000000"}}}
        for validate_only in (True, False):
            (r,) = admin.create_topics(spec, validate_only=validate_only)["topics"]
            assert (r["name"], r["error_code"], r["num_partitions"], r["replication_factor"]) == (t, 0, 2, 1), r
            assert r["topic_id"] in (None, str(uuid.UUID(int=0))), r  # kafkactl's topics have no ids
            configs = {k: (c["value"], c["config_source"], c["read_only"]) for k, c in r["configs"].items()}
            assert configs["retention.bytes"] == ("1000000", "DYNAMIC_TOPIC_CONFIG", False)  # (named by kafka-python)
            assert configs["retention.ms"] == (WEEK_MS, "DEFAULT_CONFIG", False)
            assert in_zookeeper(b, t) == (not validate_only)
        assert overrides(b, t) == {"retention.bytes": "1000000"} and partition_count(b, t) == 2

        (r,) = admin.create_topics(spec, raise_errors=False)["topics"]
        assert (r["error_code"], r["num_partitions"], r.get("configs")) == (ErrorCode.TOPIC_ALREADY_EXISTS, -1, None), r

        res = KPConfigResource(ConfigResourceType.TOPIC, t)
        got = admin.describe_configs([res], config_filter="all")["topic"][t]
        assert got["retention.bytes"]["value"] == "1000000" and got["segment.ms"]["value"] == "604800000"

        admin.alter_configs([KPConfigResource(ConfigResourceType.TOPIC, t, configs={"retention.ms": "1000"})],
                            incremental=False)  # fmt: skip
        # (kafka-python sends the other overrides along: AlterConfigs replaces the whole set)
        assert overrides(b, t) == {"retention.bytes": "1000000", "retention.ms": "1000"}

        admin.create_partitions({t: 4})
        assert partition_count(b, t) == 4
        wait_for(lambda: listed(b).get(t) == 4, "the new partitions in the metadata")

        dirs = admin.describe_log_dirs(topic_partitions={t: [0, 1, 2, 3]})
        assert [d["broker"] for d in dirs] == [1], dirs
        found = {(tt["name"], p["partition_index"]) for d in dirs[0]["log_dirs"] for tt in d["topics"]
                 for p in tt["partitions"]}  # fmt: skip
        assert found == {(t, p) for p in range(4)}, dirs

        r = admin.delete_topics([t])
        assert [(x["name"], x["error_code"]) for x in r["topics"]] == [(t, 0)]
        wait_for(lambda: not in_zookeeper(b, t), "the topic gone from ZooKeeper")
        # by id (DeleteTopics v6): kafkactl's topics have none
        some_id = uuid.uuid4()
        (x,) = admin.delete_topics([some_id], raise_errors=False)["topics"]
        assert (x["name"], x["topic_id"], x["error_code"]) == (None, str(some_id), ErrorCode.UNKNOWN_TOPIC_ID), x
    finally:
        admin.close()


# --- aiokafka -------------------------------------------------------------------------------------------


def test_aiokafka_create_describe_alter_partitions_delete(b):
    t = unique("aio-admin")

    async def run() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=20_000)
        await admin.start()
        try:
            r = await admin.create_topics([AioNewTopic(t, 2, 1, topic_configs={"retention.ms": "120000"})])
            assert [(x[0], x[1]) for x in r.topic_errors] == [(t, 0)], r  # (aiokafka speaks CreateTopics v3)
            assert partition_count(b, t) == 2 and overrides(b, t) == {"retention.ms": "120000"}

            (res,) = await admin.describe_configs([AioConfigResource(AioConfigResourceType.TOPIC, t)])
            (result,) = res.resources
            configs = {c[0]: c[1] for c in result[4]}
            assert (result[0], configs["retention.ms"], configs["segment.ms"]) == (0, "120000", "604800000")

            await admin.alter_configs([AioConfigResource(AioConfigResourceType.TOPIC, t,
                                                         configs={"flush.ms": "5000"})])  # fmt: skip
            assert overrides(b, t) == {"flush.ms": "5000"}

            await admin.create_partitions({t: AioNewPartitions(3)})
            assert partition_count(b, t) == 3

            await admin.delete_topics([t])
            wait_for(lambda: not in_zookeeper(b, t), "the topic gone from ZooKeeper")
        finally:
            await admin.close()

    asyncio.run(run())


# --- the new fields over the wire (kafkactl's own client, at every version) ------------------------------


def create_body(*names: str, partitions: int = 2, validate_only: bool = False) -> dict:
    return {"topics": [{"name": n, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                        "configs": [{"name": "flush.ms", "value": "7000"}]} for n in names],
            "timeout_ms": 10000, "validate_only": validate_only}  # fmt: skip


def test_create_topics_answers_by_version(b):
    with open_conn(b) as conn:
        assert conn.version_for(ApiKey.CREATE_TOPICS) == 7
        t = unique("v7")
        (r,) = conn.request(ApiKey.CREATE_TOPICS, create_body(t))["topics"]
        assert (r["error_code"], r["topic_id"], r["num_partitions"], r["replication_factor"]) == (0, bytes(16), 2, 1)
        assert r["topic_config_error_code"] == 0
        configs = {c["name"]: c for c in r["configs"]}
        assert configs["flush.ms"] == {"name": "flush.ms", "value": "7000", "read_only": False,
                                       "config_source": DYNAMIC_TOPIC_CONFIG, "is_sensitive": False}  # fmt: skip
        assert configs["segment.ms"]["config_source"] == DEFAULT_CONFIG
        assert set(configs) == set(Admin(b.bootstrap).describe_config(t))  # every key DescribeConfigs lists

        # an error: no partitions, replication factor nor configs; v4 answers have no such fields
        (r,) = conn.request(ApiKey.CREATE_TOPICS, create_body(t))["topics"]
        assert (r["error_code"], r["num_partitions"], r["replication_factor"], r["configs"]) == (
            ErrorCode.TOPIC_ALREADY_EXISTS,
            -1,
            -1,
            [],
        )
        (r,) = conn.request(ApiKey.CREATE_TOPICS, create_body(unique("v4"), validate_only=True), version=4)["topics"]
        assert r["error_code"] == 0 and "num_partitions" not in r and "configs" not in r

        # a topic named twice: INVALID_REQUEST for both, nothing created
        twice = unique("twice")
        rs = conn.request(ApiKey.CREATE_TOPICS, create_body(twice, twice))["topics"]
        assert [(x["name"], x["error_code"]) for x in rs] == [(twice, ErrorCode.INVALID_REQUEST)] * 2
        assert not in_zookeeper(b, twice)


def test_delete_topics_by_name_and_by_id(b):
    t = create_topic(b.bootstrap, unique("del"))
    some_id = uuid.uuid4().bytes
    with open_conn(b) as conn:
        assert conn.version_for(ApiKey.DELETE_TOPICS) == 6
        both = {"topics": [{"name": t, "topic_id": some_id}], "timeout_ms": 10000}
        (r,) = conn.request(ApiKey.DELETE_TOPICS, both)["responses"]
        assert (r["name"], r["error_code"]) == (t, ErrorCode.INVALID_REQUEST)
        assert in_zookeeper(b, t)
        by_id = {"topics": [{"name": None, "topic_id": some_id}, {"name": t, "topic_id": bytes(16)}],
                 "timeout_ms": 10000}  # fmt: skip
        r1, r2 = conn.request(ApiKey.DELETE_TOPICS, by_id)["responses"]
        assert (r1["name"], r1["topic_id"], r1["error_code"]) == (None, some_id, ErrorCode.UNKNOWN_TOPIC_ID)
        assert (r2["name"], r2["error_code"], r2["error_message"]) == (t, 0, None)
        wait_for(lambda: not in_zookeeper(b, t), "the topic gone from ZooKeeper")
        # v5: no ids; v3: the names alone
        for version in (5, 3):
            (r,) = conn.request(ApiKey.DELETE_TOPICS, {"topic_names": [t], "timeout_ms": 10000}, version)["responses"]
            assert (r["name"], r["error_code"]) == (t, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


# --- ACLs: the configs in a CreateTopics answer need DescribeConfigs on the topic -----------------------------


@pytest.fixture(scope="module")
def secured(zk_server, tmp_path_factory) -> Iterator[tuple[BrokerProcess, int]]:
    from tests.integration.test_acls import USERS, _start

    chroot = new_chroot(zk_server.connect_string)
    with zk_session(chroot) as zk:
        for user, password in USERS.items():
            credentials.write_user(zk, user, {"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", password)})
    broker, port = _start(1, chroot, tmp_path_factory.mktemp("admin-acl"))
    try:
        yield broker, port
    finally:
        broker.stop(timeout=20)


def test_create_topics_configs_need_describe_configs(secured):
    from tests.integration.test_acls import USERS, _acl, _grant

    b, port = secured
    prefix = unique("bob")
    _grant(b, _acl(ResourceType.TOPIC, prefix, "User:bob", Operation.CREATE, pattern=PatternType.PREFIXED))
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="bob",
                             sasl_plain_password=USERS["bob"], request_timeout_ms=20_000)  # fmt: skip
    try:
        spec = {f"{prefix}-a": {"num_partitions": 2, "replication_factor": 1}}
        (r,) = admin.create_topics(spec)["topics"]
        assert (r["error_code"], r["topic_config_error_code"]) == (0, ErrorCode.TOPIC_AUTHORIZATION_FAILED), r
        assert (r["num_partitions"], r["replication_factor"], r.get("configs")) == (-1, -1, None), r
        assert partition_count(b, f"{prefix}-a") == 2  # created all the same

        _grant(
            b, _acl(ResourceType.TOPIC, prefix, "User:bob", Operation.DESCRIBE_CONFIGS, pattern=PatternType.PREFIXED)
        )
        (r,) = admin.create_topics({f"{prefix}-b": {"num_partitions": 3, "replication_factor": 1}})["topics"]
        assert (r["error_code"], r["topic_config_error_code"], r["num_partitions"]) == (0, 0, 3), r
        assert set(r["configs"]) >= {"retention.ms", "cleanup.policy"}

        (r,) = admin.create_topics({unique("other"): {"num_partitions": 1, "replication_factor": 1}},
                                   raise_errors=False)["topics"]  # fmt: skip
        # refused before creation: Kafka still says bob may not DescribeConfigs it
        denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert (r["error_code"], r["topic_config_error_code"], r["num_partitions"]) == (denied, denied, -1), r
    finally:
        admin.close()
