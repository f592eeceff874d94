"""`kafkactl topic create | list | describe | alter | delete` against one real broker and ZooKeeper.

One broker serves the whole module (`shared_broker`); every test uses topic names of its own.
"""

from __future__ import annotations

import pytest

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.admin import TOPIC_RESOURCE
from tests.integration import wire
from tests.integration.helpers import (
    cli,
    error_line,
    json_lines,
    kcat_produce,
    log_files_size,
    ok,
    partition_dirs,
    tsv,
    wait_until,
    zk_json,
    zk_session,
)


@pytest.fixture(scope="module")
def b(shared_broker):
    return shared_broker


def topic(b, *args: object):
    return cli("topic", *args, "-b", b.bootstrap)


def describe_json(b, name: str) -> dict:
    (doc,) = json_lines(ok(topic(b, "describe", name, "-o", "json")))
    return doc


def listed(b) -> dict[str, int]:
    rows = json_lines(ok(topic(b, "list", "-o", "json")))
    for row in rows:
        assert set(row) == {"topic", "partitions"}, row
    return {r["topic"]: r["partitions"] for r in rows}


# --- create and list -------------------------------------------------------------------------------


def test_create_then_list_in_text_and_json(b):
    assert ok(topic(b, "create", "orders", "-p", "3")) == "created topic orders with 3 partition(s)\n"
    assert ok(topic(b, "create", "single", "-p", "1", "-r", "1")) == "created topic single with 1 partition(s)\n"

    assert listed(b)["orders"] == 3
    assert listed(b)["single"] == 1
    rows = tsv(ok(topic(b, "list")))
    assert rows[0] == ["TOPIC", "PARTITIONS"]
    assert ["orders", "3"] in rows[1:]
    assert ["single", "1"] in rows[1:]
    names = [r[0] for r in rows[1:]]
    assert names == sorted(names)
    assert len(names) == len(set(names))


def test_topic_znodes_after_create(b):
    ok(topic(b, "create", "t", "-p", "4", "--config", "retention.ms=1000"))
    with zk_session(b.zk_connect) as zk:
        assert zk_json(zk, "/brokers/topics/t") == {
            "version": 2, "partitions": {"0": [1], "1": [1], "2": [1], "3": [1]},
            "adding_replicas": {}, "removing_replicas": {},
        }  # fmt: skip
        assert sorted(zk.get_children("/brokers/topics/t/partitions"), key=int) == ["0", "1", "2", "3"]
        for p in range(4):
            state = zk_json(zk, f"/brokers/topics/t/partitions/{p}/state")
            assert set(state) == {"version", "leader", "leader_epoch", "controller_epoch", "isr"}, state
            assert (state["version"], state["leader"], state["leader_epoch"], state["isr"]) == (1, 1, 0, [1])
            assert isinstance(state["controller_epoch"], int)
            _, stat = zk.get(f"/brokers/topics/t/partitions/{p}/state")
            assert stat.ephemeralOwner == 0
        assert zk_json(zk, "/config/topics/t") == {"version": 1, "config": {"retention.ms": "1000"}}
        _, stat = zk.get("/brokers/topics/t")
        assert stat.ephemeralOwner == 0
    assert describe_json(b, "t")["config"] == {"retention.ms": "1000"}


def test_create_an_existing_topic_fails_unless_if_not_exists(b):
    ok(topic(b, "create", "twice", "-p", "2"))
    error_line(topic(b, "create", "twice", "-p", "5"), "twice", "already exists")
    assert ok(topic(b, "create", "twice", "-p", "5", "--if-not-exists")) == "topic twice exists already\n"
    assert listed(b)["twice"] == 2


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("a/b", "ASCII letters, digits, '.', '_' and '-'"),
        (".", "cannot be '.'"),
        ("..", "cannot be '..'"),
        ("x" * 250, "the limit is 249"),
        ("ä", "ASCII letters, digits, '.', '_' and '-'"),
    ],
    ids=["slash", "dot", "dotdot", "250-chars", "umlaut"],
)
def test_illegal_topic_names_are_refused_with_the_rule(b, name, rule):
    error_line(topic(b, "create", name, "-p", "1"), "INVALID_TOPIC_EXCEPTION", rule)
    with zk_session(b.zk_connect) as zk:
        assert name not in zk.get_children("/brokers/topics")


def test_a_name_of_249_legal_characters_is_fine(b):
    name = "L" * 200 + "._-" + "9" * 46
    assert len(name) == 249
    ok(topic(b, "create", name, "-p", "1"))
    assert listed(b)[name] == 1


def test_replication_factor_larger_than_the_live_brokers_is_refused(b):
    error_line(topic(b, "create", "toowide", "-p", "1", "-r", "2"), "INVALID_REPLICATION_FACTOR",
               "replication factor 2", "1 live broker")  # fmt: skip
    assert "toowide" not in listed(b)
    with zk_session(b.zk_connect) as zk:
        assert zk.exists("/brokers/topics/toowide") is None


@pytest.mark.parametrize("flag", ["-p", "-r"])
def test_zero_partitions_or_replicas_is_a_usage_error(b, flag):
    r = topic(b, "create", "zero", flag, "0")
    error_line(r, f"{flag.replace('-p', '--partitions').replace('-r', '--replication-factor')} 0")
    assert r.returncode == 2


def test_unknown_topic_config_key_is_refused(b):
    error_line(topic(b, "create", "badcfg", "-p", "1", "--config", "no.such.key=1"), "no.such.key")
    assert "badcfg" not in listed(b)


# --- describe --------------------------------------------------------------------------------------


def test_describe_after_producing_shows_offsets_and_sizes(b):
    ok(topic(b, "create", "described", "-p", "3", "--config", "retention.ms=86400000"))
    counts = {0: 5, 1: 0, 2: 7}
    for p, n in counts.items():
        if n:
            kcat_produce(b.bootstrap, "described", p, [f"message {p}/{i}" for i in range(n)])

    doc = describe_json(b, "described")
    assert doc["topic"] == "described"
    assert doc["config"] == {"retention.ms": "86400000"}
    assert [p["partition"] for p in doc["partitions"]] == [0, 1, 2]
    for p in doc["partitions"]:
        i = p["partition"]
        size = log_files_size(b.log_dir / f"described-{i}")
        assert (size > 0) == (counts[i] > 0)
        assert p == {
            "partition": i, "leader": 1, "replicas": [1], "isr": [1], "log_start_offset": 0,
            "log_end_offset": counts[i], "size": size, "error": None, "offline_replicas": [],
        }  # fmt: skip

    out = ok(topic(b, "describe", "described"))
    assert out.splitlines()[0] == "# described overrides: retention.ms=86400000"  # (a terminal has it in the title)
    rows = tsv(out)[1:]
    assert rows[0] == ["PARTITION", "LEADER", "REPLICAS", "ISR", "LOG START", "LOG END", "SIZE", "ERROR"]
    assert [r[:7] for r in rows[1:]] == [
        [str(i), "1", "1", "1", "0", str(counts[i]), str(log_files_size(b.log_dir / f"described-{i}"))]
        for i in range(3)
    ]
    assert all(r[7:] in ([], [""]) for r in rows[1:]), rows


def test_unknown_topic_is_an_error_line_for_describe_alter_and_delete(b):
    for args in (("describe", "nosuch"), ("describe", "nosuch", "-o", "json"), ("delete", "nosuch"),
                 ("delete", "nosuch", "--execute"), ("alter", "nosuch", "--config", "retention.ms=1")):  # fmt: skip
        r = topic(b, *args)
        error_line(r, "nosuch", "UNKNOWN_TOPIC_OR_PARTITION")
        assert r.stdout == ""
    assert "nosuch" not in listed(b)  # describing does not create it


# --- alter -----------------------------------------------------------------------------------------


def test_alter_sets_keeps_and_deletes_overrides(b):
    ok(topic(b, "create", "altered", "-p", "1"))
    with zk_session(b.zk_connect) as zk:
        assert zk_json(zk, "/config/topics/altered") == {"version": 1, "config": {}}
        assert describe_json(b, "altered")["config"] == {}

        assert ok(topic(b, "alter", "altered", "--config", "retention.ms=5000")) == "topic altered: retention.ms=5000\n"
        assert describe_json(b, "altered")["config"] == {"retention.ms": "5000"}
        assert zk_json(zk, "/config/topics/altered") == {"version": 1, "config": {"retention.ms": "5000"}}

        ok(topic(b, "alter", "altered", "--config", "segment.bytes=1048576"))  # the others stay
        both = {"retention.ms": "5000", "segment.bytes": "1048576"}
        assert describe_json(b, "altered")["config"] == both
        assert zk_json(zk, "/config/topics/altered") == {"version": 1, "config": both}

        out = ok(topic(b, "alter", "altered", "--delete-config", "retention.ms"))
        assert out == "topic altered: segment.bytes=1048576\n"
        assert describe_json(b, "altered")["config"] == {"segment.bytes": "1048576"}
        assert zk_json(zk, "/config/topics/altered") == {"version": 1, "config": {"segment.bytes": "1048576"}}

        error_line(topic(b, "alter", "altered", "--delete-config", "retention.ms"), "retention.ms")
        error_line(topic(b, "alter", "altered", "--config", "no.such.key=1"), "no.such.key")
        r = topic(b, "alter", "altered")
        error_line(r, "nothing to change")
        assert r.returncode == 2
        assert zk_json(zk, "/config/topics/altered") == {"version": 1, "config": {"segment.bytes": "1048576"}}

        ok(topic(b, "alter", "altered", "--delete-config", "segment.bytes"))
        assert describe_json(b, "altered")["config"] == {}
        assert zk_json(zk, "/config/topics/altered") == {"version": 1, "config": {}}


# --- delete ----------------------------------------------------------------------------------------


def test_delete_shows_a_plan_then_executes(b):
    ok(topic(b, "create", "doomed", "-p", "2", "--config", "retention.ms=60000"))
    kcat_produce(b.bootstrap, "doomed", 0, ["one", "two", "three"])
    assert partition_dirs(b.log_dir, "doomed") == ["doomed-0", "doomed-1"]
    size = log_files_size(b.log_dir / "doomed-0")
    assert size > 0

    out = ok(topic(b, "delete", "doomed"))
    assert out == f"would delete topic doomed: 2 partition(s), 3 message offset(s), {size} bytes; " \
                  "run again with --execute\n"  # fmt: skip
    assert listed(b)["doomed"] == 2
    assert partition_dirs(b.log_dir, "doomed") == ["doomed-0", "doomed-1"]
    with zk_session(b.zk_connect) as zk:
        assert zk.exists("/brokers/topics/doomed") is not None

    assert ok(topic(b, "delete", "doomed", "--execute")) == "deleted topic doomed\n"
    assert "doomed" not in listed(b)
    with zk_session(b.zk_connect) as zk:
        assert zk.exists("/brokers/topics/doomed") is None
        assert zk.exists("/config/topics/doomed") is None
        assert zk.exists("/admin/delete_topics/doomed") is None
    wait_until(lambda: partition_dirs(b.log_dir, "doomed") == [], 10, "partition dirs of doomed removed")
    error_line(topic(b, "describe", "doomed"), "UNKNOWN_TOPIC_OR_PARTITION")

    # the name is free again, and the new topic starts empty, without the old override
    ok(topic(b, "create", "doomed", "-p", "1"))
    doc = describe_json(b, "doomed")
    assert [(p["log_start_offset"], p["log_end_offset"], p["size"]) for p in doc["partitions"]] == [(0, 0, 0)]
    assert doc["config"] == {}


# --- admin edge cases, through the wire ------------------------------------------------------------


def create_request(name: str, *, partitions: int = -1, assignment: dict[int, list[int]] | None = None,
                   validate_only: bool = False) -> dict:  # fmt: skip
    return {
        "topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": -1 if assignment else 1, "configs": [],
            "assignments": [{"partition_index": p, "broker_ids": r} for p, r in sorted((assignment or {}).items())],
        }],
        "timeout_ms": 10000, "validate_only": validate_only,
    }  # fmt: skip


def delete_body(name: str) -> dict:
    """A DeleteTopics body for any version: v0-5 name topics in topic_names, v6 in topics."""
    return {"topic_names": [name], "topics": [{"name": name}], "timeout_ms": 10000}


def create_answer(b, body: dict) -> dict:
    with wire.open_conn(b) as conn:
        (t,) = conn.request(ApiKey.CREATE_TOPICS, body)["topics"]
    return t


def assert_not_created(b, name: str) -> None:
    with zk_session(b.zk_connect) as zk:
        assert zk.exists(f"/brokers/topics/{name}") is None
        assert zk.exists(f"/config/topics/{name}") is None
    assert name not in listed(b)
    assert partition_dirs(b.log_dir, name) == []


def test_delete_topic_enable_false_refuses_with_topic_deletion_disabled(start_broker):
    b = start_broker(1, overrides={"delete.topic.enable": "false"})
    ok(topic(b, "create", "keeper", "-p", "2"))
    kcat_produce(b.bootstrap, "keeper", 0, ["stays"])
    with wire.open_conn(b) as conn:
        answer = conn.request(ApiKey.DELETE_TOPICS, delete_body("keeper"))
    [r] = answer["responses"]
    assert (r["name"], r["error_code"]) == ("keeper", ErrorCode.TOPIC_DELETION_DISABLED)
    error_line(topic(b, "delete", "keeper", "--execute"), "TOPIC_DELETION_DISABLED")
    with zk_session(b.zk_connect) as zk:
        assert zk.exists("/brokers/topics/keeper") is not None
        assert zk.exists("/admin/delete_topics/keeper") is None
    assert listed(b)["keeper"] == 2
    assert partition_dirs(b.log_dir, "keeper") == ["keeper-0", "keeper-1"]
    assert describe_json(b, "keeper")["partitions"][0]["log_end_offset"] == 1


def test_create_topics_validate_only_creates_nothing(b):
    t = create_answer(b, create_request("dry-run", partitions=3, validate_only=True))
    assert (t["name"], t["error_code"]) == ("dry-run", 0), t
    t = create_answer(b, create_request("dry-run", assignment={0: [1]}, validate_only=True))
    assert t["error_code"] == 0, t
    assert_not_created(b, "dry-run")
    # a request that would fail still fails when only validated
    t = create_answer(b, create_request("dry-run", partitions=0, validate_only=True))
    assert t["error_code"] == ErrorCode.INVALID_PARTITIONS, t
    t = create_answer(b, create_request("dry-run", assignment={0: [9]}, validate_only=True))
    assert t["error_code"] == ErrorCode.INVALID_REPLICA_ASSIGNMENT, t
    assert_not_created(b, "dry-run")


def test_an_assignment_naming_an_unknown_broker_is_refused(b):
    t = create_answer(b, create_request("ghost-replica", assignment={0: [1], 1: [9]}))
    assert t["error_code"] == ErrorCode.INVALID_REPLICA_ASSIGNMENT, t
    assert "9" in (t["error_message"] or ""), t
    assert_not_created(b, "ghost-replica")
    # the same request naming only the live broker is fine
    t = create_answer(b, create_request("ghost-replica", assignment={0: [1], 1: [1]}))
    assert t["error_code"] == 0, t
    assert listed(b)["ghost-replica"] == 2


@pytest.mark.parametrize("name", ["a/../b", "../x", "", "a" * 300, "x y"])
def test_illegal_names_in_delete_describe_and_alter_are_answered_not_looked_up(b, name):
    """Kafka's answers (Topic.validate before anything else): DeleteTopics UNKNOWN_TOPIC_OR_PARTITION,
    DescribeConfigs and AlterConfigs INVALID_TOPIC_EXCEPTION; the connection stays usable."""
    resource = {"resource_type": TOPIC_RESOURCE, "resource_name": name}
    with wire.open_conn(b) as conn:
        [r] = conn.request(ApiKey.DELETE_TOPICS, delete_body(name))["responses"]
        assert (r["name"], r["error_code"]) == (name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        describe = {"resources": [{**resource, "configuration_keys": None}]}
        [r] = conn.request(ApiKey.DESCRIBE_CONFIGS, describe)["results"]
        assert r["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION, r
        configs = [{"name": "retention.ms", "value": "1"}]
        alter = {"resources": [{**resource, "configs": configs}], "validate_only": False}
        [r] = conn.request(ApiKey.ALTER_CONFIGS, alter)["responses"]
        assert r["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION, r
        assert conn.request(ApiKey.METADATA, {"topics": [], "allow_auto_topic_creation": False})["brokers"]
    assert "Traceback" not in b.log_text() and "internal error" not in b.log_text()


# --- Kafka's internal topics --------------------------------------------------------------------------


def cf_admin(b):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": b.bootstrap})


def kp_admin(b):
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=20_000)


@pytest.mark.parametrize("name", ["__consumer_offsets", "__transaction_state"])
def test_internal_topics_are_never_created(b, name):
    """Not by CreateTopics (INVALID_TOPIC_EXCEPTION, as Kafka refuses a client's write to an internal
    topic), not by Metadata's auto-creation, not by confluent-kafka's or kafka-python's admin, not by the CLI."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic as CfNewTopic
    from kafka.admin import NewTopic as KpNewTopic
    from kafka.errors import InvalidTopicError

    t = create_answer(b, create_request(name, partitions=1))
    assert t["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION, t
    assert t["error_message"] == f"topic {name} is a Kafka internal topic and is not allowed to be created"
    with wire.open_conn(b) as conn:
        for version in (1, 4, 8):
            md = conn.request(ApiKey.METADATA, wire.metadata_body([name], allow_auto_topic_creation=True), version)
            [mt] = md["topics"]
            assert mt["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, (version, mt)

    cf = cf_admin(b)  # kept referenced: a dropped AdminClient fails its futures with _DESTROY
    futures = cf.create_topics([CfNewTopic(name, num_partitions=1, replication_factor=1)], operation_timeout=20,
                               request_timeout=20)  # fmt: skip
    with pytest.raises(KafkaException) as caught:
        futures[name].result(timeout=30)
    assert caught.value.args[0].code() == KafkaError.TOPIC_EXCEPTION, caught.value
    admin = kp_admin(b)
    try:
        with pytest.raises(InvalidTopicError):
            admin.create_topics([KpNewTopic(name, num_partitions=1, replication_factor=1)], timeout_ms=20_000)
    finally:
        admin.close()

    r = topic(b, "create", name, "-p", "1")
    error_line(r, f"topic {name} is a Kafka internal topic and is not allowed to be created")
    assert r.returncode == 1
    assert_not_created(b, name)


def test_an_internal_topic_in_zookeeper_is_marked_internal_and_never_deleted(start_broker):
    """A ZooKeeper shared with a Kafka cluster holds the real __consumer_offsets: Metadata marks it
    is_internal as Kafka does, and no DeleteTopics (raw, confluent-kafka, kafka-python) nor the CLI removes it."""
    from confluent_kafka import KafkaError, KafkaException
    from kafka.errors import InvalidTopicError

    from broker.zk import registry

    b = start_broker(1)
    name = "__consumer_offsets"
    with zk_session(b.zk_connect) as zk:
        registry.create_topic(zk, name, {0: [1], 1: [1]}, {})
    wait_until(lambda: name in listed(b), 15, "the broker to learn the topic")
    with wire.open_conn(b) as conn:
        [mt] = conn.request(ApiKey.METADATA, wire.metadata_body([name], allow_auto_topic_creation=False))["topics"]
        assert (mt["error_code"], mt["is_internal"], len(mt["partitions"])) == (0, True, 2), mt
        [r] = conn.request(ApiKey.DELETE_TOPICS, delete_body(name))["responses"]
        assert (r["name"], r["error_code"]) == (name, ErrorCode.INVALID_TOPIC_EXCEPTION)
    cf = cf_admin(b)
    with pytest.raises(KafkaException) as caught:
        cf.delete_topics([name], operation_timeout=20, request_timeout=20)[name].result(timeout=30)
    assert caught.value.args[0].code() == KafkaError.TOPIC_EXCEPTION, caught.value
    admin = kp_admin(b)
    try:
        with pytest.raises(InvalidTopicError):
            admin.delete_topics([name], timeout_ms=20_000)
    finally:
        admin.close()
    for args in (("delete", name), ("delete", name, "--execute")):
        r = topic(b, *args)
        error_line(r, f"topic {name} is a Kafka internal topic and is not allowed to be deleted")
        assert r.returncode == 1
    with zk_session(b.zk_connect) as zk:
        assert zk.exists(f"/brokers/topics/{name}") is not None
        assert zk.exists(f"/admin/delete_topics/{name}") is None
    assert listed(b)[name] == 2
    assert "Traceback" not in b.log_text()
