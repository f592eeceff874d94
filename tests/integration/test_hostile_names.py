"""Arbitrary topic names and group ids at every API of a live broker (issue 15, item 1): each request is
answered (an illegal name with INVALID_TOPIC_EXCEPTION / UNKNOWN_TOPIC_OR_PARTITION, a group id with an
error or a result), the connection stays usable, the broker logs no traceback, and nothing is created
outside its log dir or outside ZooKeeper-mode Kafka's znode tree."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.topics import topic_name_error
from broker.zk import paths
from tests.integration.helpers import zk_session
from tests.integration.wire import fetch_body, list_offsets_body, make_batch, metadata_body, open_conn, produce_body

#: names an attacker would try first, then anything hypothesis makes up
NASTY = ["..", ".", "../x", "x/../y", "/", "a/b", "\x00", "a\x00b", "%2F", "con", "~", "$(id)", " ", "é", "a" * 300,
         "__consumer_offsets", "zookeeper", "..%2F..", "\\..\\x", "\u202e", "\ud7ff", "controller"]  # fmt: skip
NAMES = st.one_of(st.sampled_from(NASTY), st.text(min_size=0, max_size=60))


def requests_for(name: str) -> list[tuple[ApiKey, dict]]:
    """One request of each API that takes a topic name or a group id, naming `name`."""
    batch = make_batch([b"v"])
    return [
        (ApiKey.METADATA, metadata_body([name], allow_auto_topic_creation=True)),
        (ApiKey.PRODUCE, produce_body(name, {0: batch})),
        (ApiKey.FETCH, fetch_body(name, 0, 0)),
        (ApiKey.LIST_OFFSETS, list_offsets_body(name, 0)),
        (ApiKey.CREATE_TOPICS, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                                            "assignments": [], "configs": []}], "timeout_ms": 5000,
                                "validate_only": False}),
        (ApiKey.CREATE_PARTITIONS, {"topics": [{"name": name, "count": 2, "assignments": None}], "timeout_ms": 5000,
                                    "validate_only": False}),
        (ApiKey.DESCRIBE_CONFIGS, {"resources": [{"resource_type": 2, "resource_name": name,
                                                  "configuration_keys": None}], "include_synonyms": False,
                                   "include_documentation": False}),
        (ApiKey.ALTER_CONFIGS, {"resources": [{"resource_type": 2, "resource_name": name, "configs": []}],
                                "validate_only": False}),
        (ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [
            {"resource_type": 2, "resource_name": name,
             "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1000"}]},
            {"resource_type": 4, "resource_name": name,
             "configs": [{"name": "follower.replication.throttled.rate", "config_operation": 0, "value": "1"}]},
        ], "validate_only": False}),
        (ApiKey.OFFSET_FOR_LEADER_EPOCH, {"replica_id": -1, "topics": [{"topic": name, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}),
        (ApiKey.ELECT_LEADERS, {"election_type": 0, "topic_partitions": [{"topic": name, "partitions": [0]}],
                                "timeout_ms": 1000}),
        (ApiKey.DELETE_TOPICS, {"topic_names": [name], "topics": [{"name": name}], "timeout_ms": 5000}),
        (ApiKey.DELETE_RECORDS, {"topics": [{"name": name, "partitions": [{"partition_index": 0, "offset": -1}]}],
                                 "timeout_ms": 1000}),
        (ApiKey.FIND_COORDINATOR, {"key": name, "key_type": 0}),
        (ApiKey.OFFSET_FETCH, {"group_id": name, "topics": None, "require_stable": False}),
        (ApiKey.OFFSET_COMMIT, {"group_id": name, "generation_id": -1, "member_id": "", "group_instance_id": None,
                                "retention_time_ms": -1, "topics": [{"name": name, "partitions": [
                                    {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                                     "committed_metadata": None}]}]}),
        (ApiKey.DESCRIBE_GROUPS, {"groups": [name], "include_authorized_operations": False}),
        (ApiKey.OFFSET_DELETE, {"group_id": name, "topics": [{"name": name, "partitions": [{"partition_index": 0}]}]}),
        (ApiKey.DELETE_GROUPS, {"groups_names": [name]}),
        (ApiKey.JOIN_GROUP, {"group_id": name, "session_timeout_ms": 6000, "rebalance_timeout_ms": 1000,
                             "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                             "protocols": [{"name": "range", "metadata": b""}]}),
    ]  # fmt: skip


def test_arbitrary_names_at_every_api_are_answered_and_create_nothing_outside(start_broker, zk_chroot, tmp_path):
    b = start_broker(1, overrides={"group.initial.rebalance.delay.ms": "0"})
    before = {p.name for p in tmp_path.iterdir()}
    conn = open_conn(b)
    answered = 0

    @settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(NAMES)
    def each(name: str) -> None:
        nonlocal answered
        for api, body in requests_for(name):
            answer = conn.request(api, body)  # raises if the broker closed the connection or sent garbage
            assert isinstance(answer, dict)
            answered += 1
        if topic_name_error(name):  # an illegal name never becomes a topic
            md = conn.request(ApiKey.METADATA, metadata_body([name], allow_auto_topic_creation=True))
            assert md["topics"][0]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION

    try:
        each()
    finally:
        conn.close()
    assert answered >= 40 * 16
    log = b.log_text()
    assert "Traceback" not in log and "internal error" not in log, log[-3000:]
    assert {p.name for p in tmp_path.iterdir()} == before  # nothing new beside the broker's own files
    for entry in Path(b.log_dir).iterdir():  # each partition dir is a legal topic's
        if entry.is_dir():
            topic, _, part = entry.name.rpartition("-")
            assert topic_name_error(topic) is None and part.isdigit(), entry
    with zk_session(zk_chroot) as zk:  # every znode under the roots Kafka's layout has, topics legal
        top = set(zk.get_children("/"))
        allowed = {r.strip("/").split("/")[0] for r in paths.ROOTS} | {
            "controller",
            "controller_epoch",
            "admin",
            "latest_producer_id_block",
            "config",
        }
        acl_roots = (paths.ACL, paths.ACL_EXTENDED, paths.ACL_CHANGES, paths.ACL_EXTENDED_CHANGES)
        allowed |= {a.strip("/") for a in acl_roots}  # (made at start, as Kafka does)
        assert top <= allowed, top - allowed
        assert all(topic_name_error(t) is None for t in zk.get_children(paths.TOPICS))
    assert b.proc is not None and b.proc.poll() is None  # still up
