"""Znode paths and JSON shapes, as ZooKeeper-mode Kafka writes and reads them (docs/formats.md "ZooKeeper")."""

from __future__ import annotations

import base64
import json
import time

import pytest

from broker.zk import paths


def test_paths() -> None:
    assert paths.broker(3) == "/brokers/ids/3"
    assert paths.topic("t") == "/brokers/topics/t"
    assert paths.partition_state("t", 2) == "/brokers/topics/t/partitions/2/state"
    assert paths.topic_config("t") == "/config/topics/t"
    assert paths.delete_topic("t") == "/admin/delete_topics/t"
    assert (paths.CONTROLLER, paths.CONTROLLER_EPOCH, paths.CLUSTER_ID) == (
        "/controller", "/controller_epoch", "/cluster/id"
    )  # fmt: skip
    assert paths.PRODUCER_ID_BLOCK == "/latest_producer_id_block"
    assert paths.ISR_CHANGE == "/isr_change_notification"
    assert set(paths.ROOTS) == {"/brokers/ids", "/brokers/topics", "/config/topics", "/admin/delete_topics",
                                "/isr_change_notification", "/cluster", "/consumers", "/config/changes",
                                "/kafkactl/state_changes"}  # fmt: skip
    assert paths.state_change_prefix(1234) == "/kafkactl/state_changes/change_1234_"
    assert paths.state_change_seq("change_1234_0000000007") == 7
    assert paths.state_change_seq("isr_change_0000000007") is None
    assert paths.highest_state_change(["change_1_0000000000", "change_2_0000000003", "other"]) == 3
    assert paths.highest_state_change([]) == -1
    assert paths.parse_pruned_through(b"42") == 42 and paths.parse_pruned_through(b"") == -1


def test_dumps_is_compact_json() -> None:
    assert paths.dumps({"a": [1, 2], "b": None}) == b'{"a":[1,2],"b":null}'
    assert paths.loads(b'{"a":1}') == {"a": 1}
    assert paths.loads(None) is None
    assert paths.loads(b"") is None


def test_now_ms_is_a_decimal_string_of_epoch_ms() -> None:
    before = int(time.time() * 1000)
    got = paths.now_ms()
    after = int(time.time() * 1000)
    assert isinstance(got, str) and got.isdigit()
    assert before <= int(got) <= after


def test_broker_json() -> None:
    before = int(time.time() * 1000)
    obj = json.loads(paths.broker_json("h1", 9092))
    assert set(obj) == {"version", "host", "port", "jmx_port", "timestamp", "endpoints",
                        "listener_security_protocol_map", "rack", "features"}  # fmt: skip
    assert obj["version"] == 5
    assert obj["host"] == "h1" and obj["port"] == 9092
    assert obj["jmx_port"] == -1
    assert isinstance(obj["timestamp"], str) and int(obj["timestamp"]) >= before
    assert obj["endpoints"] == ["PLAINTEXT://h1:9092"]
    assert obj["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
    assert obj["rack"] is None
    assert obj["features"] == {}
    assert json.loads(paths.broker_json("h", 1, rack="r1"))["rack"] == "r1"
    assert b" " not in paths.broker_json("h", 1)


def test_parse_broker_round_trip() -> None:
    assert paths.parse_broker(paths.broker_json("h1", 9093)) == ("h1", 9093, None)
    assert paths.parse_broker(paths.broker_json("h1", 9093, "rackA")) == ("h1", 9093, "rackA")


def test_parse_broker_from_kafka() -> None:
    # what a ZooKeeper-mode Kafka 3.x broker writes
    data = (b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT","SSL":"SSL"},'
            b'"endpoints":["SSL://secure:9093","PLAINTEXT://kafka-0.local:9092"],"jmx_port":-1,'
            b'"port":9092,"host":"kafka-0.local","version":5,"timestamp":"1700000000000","rack":"eu-1a"}')  # fmt: skip
    assert paths.parse_broker(data) == ("kafka-0.local", 9092, "eu-1a")


def test_parse_broker_ipv6_and_empty_host() -> None:
    assert paths.parse_broker(b'{"endpoints":["PLAINTEXT://[::1]:9092"]}') == ("::1", 9092, None)
    assert paths.parse_broker(b'{"endpoints":["PLAINTEXT://:9092"]}') == ("127.0.0.1", 9092, None)


def test_parse_broker_falls_back_to_host_and_port() -> None:
    assert paths.parse_broker(b'{"host":"old","port":1234}') == ("old", 1234, None)
    assert paths.parse_broker(b'{"endpoints":["SSL://s:1"],"host":"h","port":2,"rack":"r"}') == ("h", 2, "r")
    assert paths.parse_broker(b'{"endpoints":[],"host":null,"port":3}') == ("127.0.0.1", 3, None)
    assert paths.parse_broker(b"{}") == ("127.0.0.1", -1, None)


def test_assignment_json() -> None:
    data = paths.assignment_json({10: [1, 2], 2: [2, 3], 0: [3, 1]})
    obj = json.loads(data)
    assert obj == {"version": 2, "partitions": {"0": [3, 1], "2": [2, 3], "10": [1, 2]},
                   "adding_replicas": {}, "removing_replicas": {}}  # fmt: skip
    assert list(obj["partitions"]) == ["0", "2", "10"]  # numeric order
    assert paths.parse_assignment(data) == {0: [3, 1], 2: [2, 3], 10: [1, 2]}


def test_parse_assignment_from_kafka() -> None:
    data = b'{"version":2,"partitions":{"1":[2,0],"0":[0,1]},"adding_replicas":{},"removing_replicas":{}}'
    assert paths.parse_assignment(data) == {0: [0, 1], 1: [2, 0]}
    assert paths.parse_assignment(b'{"version":1,"partitions":{"0":[5]}}') == {0: [5]}
    assert paths.parse_assignment(b"") == {}
    assert paths.parse_assignment(b'{"version":2}') == {}


def test_state_json() -> None:
    assert json.loads(paths.state_json(1, 0, [1, 2])) == {
        "version": 1, "leader": 1, "leader_epoch": 0, "controller_epoch": 1, "isr": [1, 2]
    }  # fmt: skip
    assert json.loads(paths.state_json(-1, 7, [], controller_epoch=4)) == {
        "version": 1, "leader": -1, "leader_epoch": 7, "controller_epoch": 4, "isr": []
    }  # fmt: skip


@pytest.mark.parametrize("config", [{}, {"retention.ms": "1000"}, {"segment.bytes": "1", "cleanup.policy": "delete"}])
def test_config_json_round_trip(config: dict[str, str]) -> None:
    data = paths.config_json(config)
    assert json.loads(data) == {"version": 1, "config": config}
    assert paths.parse_config(data) == config


def test_parse_config_edge_cases() -> None:
    assert paths.parse_config(None) == {}
    assert paths.parse_config(b"") == {}
    assert paths.parse_config(b'{"version":1}') == {}
    assert paths.parse_config(b'{"version":1,"config":{"retention.ms":1000}}') == {"retention.ms": "1000"}


def test_controller_json() -> None:
    obj = json.loads(paths.controller_json(3))
    assert set(obj) == {"version", "brokerid", "timestamp"}
    assert obj["version"] == 1 and obj["brokerid"] == 3
    assert isinstance(obj["timestamp"], str) and obj["timestamp"].isdigit()


def test_cluster_id() -> None:
    ids = {paths.new_cluster_id() for _ in range(50)}
    assert len(ids) == 50
    for cid in ids:
        assert len(cid) == 22 and "=" not in cid
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16
    assert json.loads(paths.cluster_id_json("abc")) == {"version": "1", "id": "abc"}


def test_producer_block_json() -> None:
    assert json.loads(paths.producer_block_json(2, 1000, 1999)) == {
        "version": 1, "broker": 2, "block_start": "1000", "block_end": "1999"
    }  # fmt: skip


def test_state_change_notifications_round_trip_named_and_carried_partitions() -> None:
    carried = [paths.CarriedState("t", 1, 5, 3, paths.state_dict(2, 4, [2, 1], 7))]
    named, back = paths.parse_state_changes(paths.state_changes_json([("t", 0), ("u", 2)], carried))
    assert named == {("t", 0), ("u", 2)} and back == carried
    assert paths.parse_partitions(paths.state_changes_json([("t", 0)], carried)) == {("t", 0), ("t", 1)}
    old = paths.partitions_json([("t", 0)])  # (a notification of the first version names its partitions only)
    assert paths.parse_state_changes(old) == ({("t", 0)}, [])


@pytest.mark.parametrize("data", [b"{", b"[1]", b'{"partitions": [1]}', b'{"partitions": [{"topic": "t"}]}',
                                  b'{"partitions": [{"topic": "t", "partition": "x"}]}'])  # fmt: skip
def test_a_malformed_state_change_notification_is_an_error_of_the_parsing_kinds(data: bytes) -> None:
    """(The broker catches these kinds and reads every state instead.)"""
    with pytest.raises((ValueError, KeyError, TypeError, AttributeError)):
        paths.parse_state_changes(data)


def test_a_carried_state_without_a_proper_id_or_version_is_only_named() -> None:
    entry = {"topic": "t", "partition": 0, "state": {"leader": 1}}
    for extra in ({"topic_id": True, "zk_version": 1}, {"topic_id": 5, "zk_version": -1}, {"topic_id": 5}):
        data = paths.dumps({"version": 2, "partitions": [{**entry, **extra}]})
        assert paths.parse_state_changes(data) == ({("t", 0)}, [])
