"""IncrementalAlterConfigs (44) against one real broker and the real ZooKeeper: through confluent-kafka's
AdminClient (incremental_alter_configs), kafka-python's KafkaAdminClient (alter_configs, incremental), and
`kafkactl config set | delete | describe` and `topic alter`.

Each change is checked where it lands (the topic's `/config/topics/<t>` znode, DescribeConfigs) and, for
segment.bytes, in what the broker then does (it rolls segments at the new size). A refused change (unknown
key, bad value, APPEND on a key that is not a list, unknown topic) leaves the znode as it was, and so does
validate_only.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kafka.admin import AlterConfigOp, ConfigResourceType, KafkaAdminClient
from kafka.admin import ConfigResource as KPConfigResource

from broker.client.admin import Admin
from broker.client.sync import Producer
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.security import credentials
from broker.security.acl import Operation, ResourceType
from broker.security.scram import make_credential
from broker.server.config import topic_config_error
from tests.integration.clientkit import create_topic, unique
from tests.integration.cluster import BrokerProcess, new_chroot
from tests.integration.helpers import cli, error_line, json_lines, ok, tsv, zk_json, zk_session
from tests.integration.wire import open_conn

THROTTLED = "leader.replication.throttled.replicas"


@pytest.fixture(scope="module")
def b(zk_server, tmp_path_factory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("incremental-alter-configs")
    with BrokerProcess(1, new_chroot(zk_server.connect_string), root) as broker:
        yield broker


def overrides(b: BrokerProcess, topic: str) -> dict[str, str]:
    """The topic's overrides as ZooKeeper holds them."""
    with zk_session(b.zk_connect) as zk:
        return zk_json(zk, f"/config/topics/{topic}")["config"]


def described(b: BrokerProcess, topic: str) -> dict[str, str]:
    """Every key's value as DescribeConfigs answers it."""
    with Admin(b.bootstrap) as admin:
        return {k: v for k, (v, _) in admin.describe_config(topic).items()}


def config(b: BrokerProcess, *args: object):
    return cli("config", *args, "-b", b.bootstrap)


# --- kafkactl config set | delete | describe -------------------------------------------------------


def test_config_set_and_delete_change_only_the_keys_named(b):
    t = create_topic(b.bootstrap, unique("cfg"), config={"retention.ms": "1000"})
    out = ok(config(b, "set", "--topic", t, "segment.bytes=1048576", "flush.ms=5000"))
    assert out == f"topic {t}: flush.ms=5000, retention.ms=1000, segment.bytes=1048576\n"
    assert overrides(b, t) == {"retention.ms": "1000", "segment.bytes": "1048576", "flush.ms": "5000"}
    assert described(b, t)["segment.bytes"] == "1048576"

    out = ok(config(b, "delete", "--topic", t, "retention.ms", "flush.ms"))
    assert out == f"topic {t}: segment.bytes=1048576\n"
    assert overrides(b, t) == {"segment.bytes": "1048576"}
    assert described(b, t)["retention.ms"] == str(7 * 24 * 3600 * 1000)  # the default again

    (doc,) = json_lines(ok(config(b, "set", "--topic", t, "retention.ms=60000", "-o", "json")))
    assert doc == {"topic": t, "validate_only": False, "changed": {"retention.ms": "60000"},
                   "config": {"retention.ms": "60000", "segment.bytes": "1048576"}}  # fmt: skip


def test_config_describe_shows_every_key_and_where_it_comes_from(b):
    t = create_topic(b.bootstrap, unique("cfg"), config={"retention.ms": "1000"})
    rows = {r[0]: r[1:] for r in tsv(ok(config(b, "describe", "--topic", t)))[1:]}
    assert rows["retention.ms"] == ["1000", "topic"]
    assert rows["cleanup.policy"] == ["delete", "default"]
    assert [d["name"] for d in json_lines(ok(config(b, "describe", "--topic", t, "--overrides", "-o", "json")))] == [
        "retention.ms"
    ]
    broker_rows = {r[0]: r[1:] for r in tsv(ok(config(b, "describe", "--broker", "1")))[1:]}
    assert broker_rows["broker.id"] == ["1", "static"]


def test_config_set_append_and_subtract_on_a_list_key(b):
    t = create_topic(b.bootstrap, unique("cfg"))
    ok(config(b, "set", "--topic", t, "--append", f"{THROTTLED}=0:1,1:1"))
    assert overrides(b, t) == {THROTTLED: "0:1,1:1"}
    ok(config(b, "set", "--topic", t, "--append", f"{THROTTLED}=1:1,2:1"))  # (an item already there: once)
    assert overrides(b, t) == {THROTTLED: "0:1,1:1,2:1"}
    ok(config(b, "set", "--topic", t, "--subtract", f"{THROTTLED}=0:1,2:1"))
    assert overrides(b, t) == {THROTTLED: "1:1"}
    line = error_line(config(b, "set", "--topic", t, "--append", "retention.ms=5"), "INVALID_REQUEST")
    assert "Config value append is not allowed for config key: retention.ms" in line
    assert overrides(b, t) == {THROTTLED: "1:1"}


def test_config_refusals_are_one_line_and_change_nothing(b):
    t = create_topic(b.bootstrap, unique("cfg"), config={"retention.ms": "1000"})
    error_line(config(b, "set", "--topic", t, "retention.ms=5", "no.such.key=1"), "INVALID_CONFIG",
               "Unknown topic config name: no.such.key")  # fmt: skip
    error_line(config(b, "set", "--topic", t, "retention.ms=5", "segment.bytes=lots"), "INVALID_REQUEST",
               f"ConfigResource(type=TOPIC, name='{t}')", "segment.bytes")  # fmt: skip
    error_line(config(b, "delete", "--topic", t, "segment.bytes"), "no override of 'segment.bytes'")
    assert overrides(b, t) == {"retention.ms": "1000"}

    out = ok(config(b, "set", "--topic", t, "retention.ms=5", "--validate-only"))
    assert "nothing changed" in out
    assert overrides(b, t) == {"retention.ms": "1000"}

    error_line(config(b, "set", "--topic", "no-such-topic", "retention.ms=5"), "UNKNOWN_TOPIC_OR_PARTITION",
               "no-such-topic")  # fmt: skip
    error_line(config(b, "set", "retention.ms=5"), "--topic TOPIC or --broker ID")
    error_line(config(b, "set", "--topic", t, "retention.ms"), "KEY=VALUE")
    error_line(config(b, "set", "--topic", t, "--append", "--subtract", "cleanup.policy=x"), "not both")


def test_topic_alter_goes_through_the_incremental_api(b):
    t = create_topic(b.bootstrap, unique("cfg"), config={"retention.ms": "1000"})
    out = ok(cli("topic", "alter", t, "--config", "segment.bytes=1048576", "--delete-config", "retention.ms",
                 "-b", b.bootstrap))  # fmt: skip
    assert out == f"topic {t}: segment.bytes=1048576\n"
    assert overrides(b, t) == {"segment.bytes": "1048576"}


def test_a_new_segment_bytes_takes_effect(b):
    t = create_topic(b.bootstrap, unique("cfg"))
    ok(config(b, "set", "--topic", t, "segment.bytes=2000"))
    with Producer(b.bootstrap, linger_ms=0) as producer:
        for _ in range(30):
            producer.send(t, b"x" * 200, partition=0).result(timeout=30)
    segments = sorted((b.log_dir / f"{t}-0").glob("*.log"))
    assert len(segments) >= 3, segments  # (6000 bytes and more at 2000 a segment)


# --- the broker resource -------------------------------------------------------------------------


def test_a_brokers_throttle_rate_is_its_only_dynamic_config(b):
    ok(config(b, "set", "--broker", "1", "follower.replication.throttled.rate=1048576"))
    with zk_session(b.zk_connect) as zk:
        assert zk_json(zk, "/config/brokers/1")["config"] == {"follower.replication.throttled.rate": "1048576"}
        rows = {r[0]: r[1:] for r in tsv(ok(config(b, "describe", "--broker", "1", "--overrides")))[1:]}
        assert rows == {"follower.replication.throttled.rate": ["1048576", "broker"]}  # (DYNAMIC_BROKER_CONFIG)
        line = error_line(config(b, "set", "--broker", "1", "num.partitions=3"), "INVALID_REQUEST")
        assert "Cannot update these configs dynamically: Set(num.partitions)" in line
        error_line(config(b, "set", "--broker", "1", "follower.replication.throttled.rate=-5"), "at least 0")
        error_line(config(b, "set", "--broker", "7", "follower.replication.throttled.rate=5"), "broker 7")
        ok(config(b, "delete", "--broker", "1", "follower.replication.throttled.rate"))
        assert zk_json(zk, "/config/brokers/1")["config"] == {}


# --- confluent-kafka ------------------------------------------------------------------------------


def _confluent(b: BrokerProcess, topic: str, *entries: tuple[str, AlterConfigOpType, str | None],
               validate_only: bool = False) -> None:  # fmt: skip
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    ops = [ConfigEntry(k, v, incremental_operation=op) for k, op, v in entries]
    futures = admin.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=ops)],
                                              validate_only=validate_only, request_timeout=15)  # fmt: skip
    for f in futures.values():
        f.result(timeout=20)


def _confluent_refused(b: BrokerProcess, topic: str, *entries: tuple[str, AlterConfigOpType, str | None]) -> KafkaError:
    with pytest.raises(KafkaException) as exc:
        _confluent(b, topic, *entries)
    return exc.value.args[0]


def test_confluent_incremental_alter_configs(b):
    t = create_topic(b.bootstrap, unique("cfg"), config={"retention.ms": "1000", "flush.ms": "7000"})
    _confluent(b, t, ("segment.bytes", AlterConfigOpType.SET, "1048576"), ("flush.ms", AlterConfigOpType.DELETE, None))
    assert overrides(b, t) == {"retention.ms": "1000", "segment.bytes": "1048576"}

    _confluent(b, t, ("retention.ms", AlterConfigOpType.SET, "5"), validate_only=True)
    assert overrides(b, t)["retention.ms"] == "1000"

    err = _confluent_refused(
        b, t, ("retention.ms", AlterConfigOpType.SET, "5"), ("no.such.key", AlterConfigOpType.SET, "1")
    )
    assert err.code() == KafkaError.INVALID_CONFIG and "Unknown topic config name: no.such.key" in err.str()
    err = _confluent_refused(b, t, ("retention.ms", AlterConfigOpType.SET, "soon"))
    assert err.code() == KafkaError.INVALID_REQUEST and "retention.ms" in err.str()
    err = _confluent_refused(b, t, ("retention.ms", AlterConfigOpType.APPEND, "5"))
    assert err.code() == KafkaError.INVALID_REQUEST and "append is not allowed" in err.str()
    assert overrides(b, t) == {"retention.ms": "1000", "segment.bytes": "1048576"}

    err = _confluent_refused(b, unique("nosuch"), ("retention.ms", AlterConfigOpType.SET, "5"))
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_confluent_append_and_subtract_on_cleanup_policy(b):
    t = create_topic(b.bootstrap, unique("cfg"))
    _confluent(b, t, ("cleanup.policy", AlterConfigOpType.APPEND, "delete"))  # (already the default's item)
    assert overrides(b, t) == {"cleanup.policy": "delete"}
    if topic_config_error({"cleanup.policy": "delete,compact"}) is None:  # (once compaction is in)
        _confluent(b, t, ("cleanup.policy", AlterConfigOpType.APPEND, "compact"))
        assert overrides(b, t) == {"cleanup.policy": "delete,compact"}
        _confluent(b, t, ("cleanup.policy", AlterConfigOpType.SUBTRACT, "delete"))
        assert overrides(b, t) == {"cleanup.policy": "compact"}
        assert described(b, t)["cleanup.policy"] == "compact"
    else:
        err = _confluent_refused(b, t, ("cleanup.policy", AlterConfigOpType.APPEND, "compact"))
        assert err.code() == KafkaError.INVALID_REQUEST and "cleanup.policy" in err.str()
        assert overrides(b, t) == {"cleanup.policy": "delete"}


# --- kafka-python ---------------------------------------------------------------------------------


def test_kafka_python_alter_configs_incremental(b):
    t = create_topic(b.bootstrap, unique("cfg"), config={"retention.ms": "1000"})
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:

        def alter(configs: dict, validate_only: bool = False) -> str:
            res = KPConfigResource(ConfigResourceType.TOPIC, t, configs=configs)
            answer = admin.alter_configs([res], validate_only=validate_only, raise_on_unknown=False, incremental=True)
            return answer["topic"][t]

        assert alter({THROTTLED: (AlterConfigOp.APPEND, "0:1"), "retention.ms": (AlterConfigOp.DELETE, None)}) == "OK"
        assert overrides(b, t) == {THROTTLED: "0:1"}
        assert alter({THROTTLED: (AlterConfigOp.SUBTRACT, "0:1")}) == "OK"
        assert overrides(b, t) == {THROTTLED: ""}
        assert alter({"segment.bytes": "1048576"}, validate_only=True) == "OK"
        assert overrides(b, t) == {THROTTLED: ""}
        assert "Unknown topic config name" in alter({"no.such.key": "1"})
        assert overrides(b, t) == {THROTTLED: ""}
    finally:
        admin.close()


def test_the_refusal_codes_are_kafkas(b):
    """The same refusals through the raw API, by code."""
    t = create_topic(b.bootstrap, unique("cfg"))

    def one(configs: list[dict], name: str = t, rtype: int = 2) -> tuple[int, str | None]:
        with open_conn(b) as conn:
            res = {"resource_type": rtype, "resource_name": name, "configs": configs}
            r = conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [res], "validate_only": False})
        return r["responses"][0]["error_code"], r["responses"][0]["error_message"]

    assert one([{"name": "retention.ms", "config_operation": 0, "value": None}])[0] == ErrorCode.INVALID_REQUEST
    dup = [{"name": "retention.ms", "config_operation": 0, "value": "1"}] * 2
    assert one(dup) == (ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys : retention.ms")
    assert one([{"name": "retention.ms", "config_operation": 9, "value": "1"}])[0] == ErrorCode.INVALID_REQUEST
    assert one([{"name": "x", "config_operation": 0, "value": "1"}], rtype=3)[0] == ErrorCode.INVALID_REQUEST
    assert one([{"name": "retention.ms", "config_operation": 0, "value": "1"}], name="bad/name")[0] == (
        ErrorCode.INVALID_TOPIC_EXCEPTION
    )
    assert overrides(b, t) == {}
    rate = [{"name": "follower.replication.throttled.rate", "config_operation": 0, "value": "5"}]
    code, message = one(rate, name="7", rtype=4)
    assert (code, message) == (
        ErrorCode.INVALID_REQUEST,
        "Unexpected broker id, expected 1 or empty string, but received 7",
    )
    assert one(rate, name="", rtype=4)[0] == ErrorCode.INVALID_REQUEST
    rate_append = [{"name": "follower.replication.throttled.rate", "config_operation": 2, "value": "5"}]
    assert one(rate_append, name="1", rtype=4)[0] == ErrorCode.INVALID_REQUEST
    assert one([{"name": "no.such", "config_operation": 0, "value": "5"}], name="1", rtype=4)[0] == (
        ErrorCode.INVALID_CONFIG
    )


# --- ACLs ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def secured(zk_server, tmp_path_factory) -> Iterator[tuple[BrokerProcess, int]]:
    """One broker with the authorizer on (test_acls' setup): (broker, its SASL port where bob logs in)."""
    from tests.integration.test_acls import USERS, _start

    chroot = new_chroot(zk_server.connect_string)
    with zk_session(chroot) as zk:
        for user, password in USERS.items():
            credentials.write_user(zk, user, {"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", password)})
    b, port = _start(1, chroot, tmp_path_factory.mktemp("iac-acl"))
    try:
        yield b, port
    finally:
        b.stop(timeout=20)


def test_altering_configs_needs_alter_configs_on_the_topic_or_the_cluster(secured):
    from tests.integration.test_acls import USERS, _acl, _grant, _sasl

    b, port = secured
    t = create_topic(b.bootstrap, unique("acl"), config={"retention.ms": "1000"})
    bob = AdminClient(_sasl(port, "bob"))

    def alter() -> None:
        res = ConfigResource("topic", t, incremental_configs=[
            ConfigEntry("retention.ms", "5000", incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
        for f in bob.incremental_alter_configs([res], request_timeout=15).values():
            f.result(timeout=20)

    with pytest.raises(KafkaException) as exc:
        alter()
    assert exc.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert overrides(b, t) == {"retention.ms": "1000"}

    _grant(b, _acl(ResourceType.TOPIC, t, "User:bob", Operation.ALTER_CONFIGS))
    alter()
    assert overrides(b, t) == {"retention.ms": "5000"}

    sec = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-256", "-X",
           "sasl.username=bob", "-X", f"sasl.password={USERS['bob']}"]  # fmt: skip
    r = cli(*sec, "config", "set", "--broker", "1", "follower.replication.throttled.rate=5", "-b", f"127.0.0.1:{port}")
    error_line(r, "CLUSTER_AUTHORIZATION_FAILED")


def test_concurrent_changes_of_different_keys_all_land(b):
    """Ten clients each set one key at once: the conditional write keeps every one (AlterConfigs' whole-map
    replace, and the old read-modify-write of `topic alter`, would keep only some)."""
    t = create_topic(b.bootstrap, unique("cfg"))
    keys = {"segment.bytes": "1048576", "segment.ms": "600000", "retention.ms": "60000", "retention.bytes": "1000000",
            "flush.messages": "1000", "flush.ms": "1000", "index.interval.bytes": "8192",
            "segment.index.bytes": "1048576", "max.message.bytes": "100000", "min.insync.replicas": "1"}  # fmt: skip
    barrier = threading.Barrier(len(keys))

    def set_one(key: str) -> int:
        with open_conn(b) as conn:
            conn.request(ApiKey.METADATA, {"topics": [], "allow_auto_topic_creation": False})  # (connected first)
            barrier.wait(timeout=20)
            res = {"resource_type": 2, "resource_name": t,
                   "configs": [{"name": key, "config_operation": 0, "value": keys[key]}]}  # fmt: skip
            r = conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [res], "validate_only": False})
            return r["responses"][0]["error_code"]

    with ThreadPoolExecutor(len(keys)) as pool:
        assert list(pool.map(set_one, keys)) == [0] * len(keys)
    assert overrides(b, t) == keys
    assert {k: described(b, t)[k] for k in keys} == keys


def test_a_zookeeper_lost_mid_request_is_that_resources_error_and_the_connection_stays(private_zk, tmp_path):
    """ZooKeeper stops answering (SIGSTOP) after the handler found the session up: the read in its loop ends in
    ConnectionLoss, which is that resource's UNKNOWN_SERVER_ERROR naming ZooKeeper; the client's connection
    is not closed, and serves the next request."""
    overrides = {"zookeeper.session.timeout.ms": "6000"}  # (kazoo gives up on a silent server after 2/3 of it)
    with BrokerProcess(1, new_chroot(private_zk.connect_string), tmp_path, overrides=overrides) as b:
        rate = [{"name": "follower.replication.throttled.rate", "config_operation": 0, "value": "5"}]
        res = {"resource_type": 4, "resource_name": "1", "configs": rate}
        with open_conn(b, timeout=30) as conn:
            conn.request(ApiKey.METADATA, {"topics": [], "allow_auto_topic_creation": False})
            os.kill(private_zk.pid, signal.SIGSTOP)
            try:
                r = conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [res], "validate_only": False})
            finally:
                os.kill(private_zk.pid, signal.SIGCONT)
            (answer,) = r["responses"]
            assert answer["error_code"] == ErrorCode.UNKNOWN_SERVER_ERROR, answer
            assert "ZooKeeper" in answer["error_message"], answer
            assert conn.request(ApiKey.METADATA, {"topics": [], "allow_auto_topic_creation": False})["brokers"]
