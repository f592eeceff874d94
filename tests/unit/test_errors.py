"""Kafka's error codes as exception classes (`broker.protocol.errors.KafkaError`), and the clients' errors
carrying the code they failed with."""

from __future__ import annotations

import pickle

import pytest

from broker.client.admin import AdminError, check_code
from broker.client.consumer import ConsumeError
from broker.client.group_member import GroupError
from broker.client.group_mode import GroupAuthorizationError
from broker.client.producer import ProduceError
from broker.errors import KafkactlError
from broker.protocol.errors import ErrorCode, KafkaError, error_class, kafka_error


def test_one_class_per_code_named_after_the_error_with_its_retriability():
    cls = error_class(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert cls.__name__ == "NotLeaderOrFollowerError"
    assert issubclass(cls, KafkaError) and issubclass(cls, KafkactlError)
    assert (cls.code, cls.name, cls.retriable) == (6, "NOT_LEADER_OR_FOLLOWER", True)
    assert error_class(6) is cls  # built once
    assert error_class(ErrorCode.TOPIC_ALREADY_EXISTS).retriable is False
    assert error_class(ErrorCode.NETWORK_EXCEPTION).__name__ == "NetworkError"
    assert error_class(ErrorCode.KAFKA_STORAGE_ERROR).__name__ == "KafkaStorageError"


def test_every_code_of_the_table_has_a_distinct_class():
    names = {error_class(code).__name__ for code in ErrorCode}
    assert len(names) == len(ErrorCode)
    for code in ErrorCode:
        assert error_class(code).retriable == code.retriable


def test_an_instance_says_its_code_and_is_caught_by_its_class():
    with pytest.raises(error_class(ErrorCode.NOT_COORDINATOR)) as caught:
        raise kafka_error(ErrorCode.NOT_COORDINATOR)
    assert str(caught.value) == "NOT_COORDINATOR"
    assert (caught.value.code, caught.value.retriable) == (16, True)
    exc = kafka_error(3, "t-0: no such partition")
    assert str(exc) == "t-0: no such partition" and exc.name == "UNKNOWN_TOPIC_OR_PARTITION"


def test_an_unknown_code_is_a_kafka_error_all_the_same():
    exc = kafka_error(9999)
    assert (exc.code, exc.name, exc.retriable) == (9999, "ERROR_9999", False)
    assert type(exc).__name__ == "KafkaError9999"


def test_the_base_without_a_code_is_an_unknown_server_error():
    exc = KafkaError("something")
    assert (exc.code, exc.name, exc.retriable, str(exc)) == (-1, "UNKNOWN_SERVER_ERROR", False, "something")


def test_the_clients_errors_carry_the_code_and_keep_their_text():
    for exc in (ConsumeError("t-0: NOT_LEADER_OR_FOLLOWER", 6), ProduceError("x: NOT_LEADER_OR_FOLLOWER", 6),
                GroupError("group g: commit refused (NOT_LEADER_OR_FOLLOWER)", 6),
                GroupAuthorizationError("no", 6), AdminError("a", 6)):  # fmt: skip
        assert isinstance(exc, KafkaError)
        assert (exc.code, exc.name, exc.retriable) == (6, "NOT_LEADER_OR_FOLLOWER", True), exc
    assert str(ConsumeError("t-0: NOT_LEADER_OR_FOLLOWER", 6)) == "t-0: NOT_LEADER_OR_FOLLOWER"
    assert ProduceError("lost", unknown=True).code == -1
    assert ConsumeError("closed").retriable is False


def test_an_admin_refusal_carries_the_brokers_code():
    with pytest.raises(AdminError, match=r"^create t: TOPIC_ALREADY_EXISTS \(exists\)$") as caught:
        check_code(ErrorCode.TOPIC_ALREADY_EXISTS, "exists", "create t")
    assert (caught.value.code, caught.value.retriable) == (36, False)


def test_a_per_code_error_pickles():
    exc = pickle.loads(pickle.dumps(ConsumeError("t-0: REQUEST_TIMED_OUT", 7)))
    assert (str(exc), exc.code, exc.retriable) == ("t-0: REQUEST_TIMED_OUT", 7, True)
    exc = pickle.loads(pickle.dumps(kafka_error(ErrorCode.NOT_COORDINATOR, "g: moved")))
    assert type(exc) is error_class(ErrorCode.NOT_COORDINATOR) and str(exc) == "g: moved" and exc.retriable
