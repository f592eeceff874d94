"""DescribeUserScramCredentials and AlterUserScramCredentials (broker/server/handlers/scram_credentials.py) on
test_group_store's in-memory ZooKeeper: what Kafka refuses, refused the same way; a salted password written as
a credential the password logs in with; the same through confluent-kafka: tests/integration/test_acls.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from broker.protocol.errors import ErrorCode
from broker.security import credentials
from broker.security.scram import salted_password
from broker.server.handlers import scram_credentials as h
from tests.unit.coordinator.test_group_store import FakeZk


class Zk(FakeZk):
    """The in-memory ZooKeeper with what `broker.security.credentials` also calls."""

    def ensure_path(self, path: str, acl: Any = None) -> None:
        self.put(f"{path}/_", b"")
        self.delete(f"{path}/_")

    def create(self, path: str, data: bytes = b"", makepath: bool = False, acl: Any = None,
               sequence: bool = False) -> str:  # fmt: skip
        if sequence:
            path = f"{path}{len(self.nodes):010d}"
        return super().create(path, data, makepath=makepath)


class Deny:
    def allows(self, *args: Any, **kwargs: Any) -> bool:
        return False


def services(zk: FakeZk, authorizer: Any = None) -> SimpleNamespace:
    async def blocking(fn: Any, *args: Any) -> Any:
        return fn(*args)

    return SimpleNamespace(zk=zk, authorizer=authorizer, blocking=blocking, zookeeper_problem=lambda: None)


def upsertion(name: str, password: str, mechanism: int = 1, iterations: int = 4096) -> dict[str, Any]:
    salt = b"0123456789abcdef"
    algo = "SCRAM-SHA-256" if mechanism == 1 else "SCRAM-SHA-512"
    return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": salt,
            "salted_password": salted_password(algo, password, salt, iterations)}  # fmt: skip


def alter(b: SimpleNamespace, deletions: list[dict[str, Any]], upsertions: list[dict[str, Any]]) -> dict[str, tuple]:
    answer = asyncio.run(h.handle_alter_user_scram_credentials(b, None, {"deletions": deletions,  # type: ignore[arg-type]
                                                                         "upsertions": upsertions}))  # fmt: skip
    return {r["user"]: (r["error_code"], r["error_message"]) for r in answer["results"]}


def describe(b: SimpleNamespace, users: list[str] | None) -> dict[str, Any]:
    req = {"users": None if users is None else [{"name": u} for u in users]}
    return asyncio.run(h.handle_describe_user_scram_credentials(b, None, req))  # type: ignore[arg-type]


def test_an_upsertion_is_a_credential_its_password_logs_in_with_and_describe_lists_it() -> None:
    zk = Zk()
    b = services(zk)
    assert alter(b, [], [upsertion("carol", "s3cret"), upsertion("carol", "other", 2, 8192)]) == {"carol": (0, None)}
    stored = credentials.read_user(zk, "carol")  # type: ignore[arg-type]
    assert stored["SCRAM-SHA-256"].check_password("SCRAM-SHA-256", "s3cret")
    assert not stored["SCRAM-SHA-256"].check_password("SCRAM-SHA-256", "other")
    answer = describe(b, None)
    assert answer["error_code"] == 0
    assert [(r["user"], r["credential_infos"]) for r in answer["results"]] == [
        ("carol", [{"mechanism": 1, "iterations": 4096}, {"mechanism": 2, "iterations": 8192}])]  # fmt: skip
    assert alter(b, [{"name": "carol", "mechanism": 2}], []) == {"carol": (0, None)}
    assert sorted(credentials.read_user(zk, "carol")) == ["SCRAM-SHA-256"]  # type: ignore[arg-type]


def test_what_kafka_refuses_is_refused_per_user_and_the_others_are_written() -> None:
    zk = Zk()
    b = services(zk)
    got = alter(b, [{"name": "dave", "mechanism": 1}, {"name": "erin", "mechanism": 3}],
                [upsertion("dave", "x"), upsertion("", "x"), upsertion("frank", "x", iterations=100),
                 upsertion("gina", "x", iterations=20000), upsertion("hank", "x")])  # fmt: skip
    assert {u: code for u, (code, _) in got.items()} == {
        "dave": ErrorCode.DUPLICATE_RESOURCE, "erin": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
        "": ErrorCode.UNACCEPTABLE_CREDENTIAL, "frank": ErrorCode.UNACCEPTABLE_CREDENTIAL,
        "gina": ErrorCode.UNACCEPTABLE_CREDENTIAL, "hank": 0}  # fmt: skip
    assert got["frank"][1] == "Too few iterations" and got["gina"][1] == "Too many iterations"
    assert list(credentials.list_users(zk)) == ["hank"]  # type: ignore[arg-type]
    assert alter(b, [{"name": "hank", "mechanism": 2}], [])["hank"][0] == ErrorCode.RESOURCE_NOT_FOUND
    answer = describe(b, ["hank", "ivy", "hank"])
    assert {r["user"]: r["error_code"] for r in answer["results"]} == {
        "hank": ErrorCode.DUPLICATE_RESOURCE, "ivy": ErrorCode.RESOURCE_NOT_FOUND}  # fmt: skip


def test_without_the_cluster_operation_nothing_is_described_or_written() -> None:
    zk = Zk()
    b = services(zk, Deny())
    assert alter(b, [], [upsertion("carol", "x")]) == {"carol": (ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                                 "Cluster authorization failed.")}  # fmt: skip
    assert credentials.list_users(zk) == {}  # type: ignore[arg-type]
    answer = describe(b, ["carol"])
    assert answer["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert [(r["user"], r["error_code"]) for r in answer["results"]] == [
        ("carol", ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]  # fmt: skip


def test_a_zookeeper_that_fails_is_an_error_for_its_user_not_a_closed_connection() -> None:
    zk = Zk()
    b = services(zk)
    zk.failing = True  # (ConnectionLoss on every call)
    assert alter(b, [], [upsertion("carol", "x")])["carol"][0] == ErrorCode.UNKNOWN_SERVER_ERROR
    assert [r["error_code"] for r in describe(b, ["carol"])["results"]] == [ErrorCode.UNKNOWN_SERVER_ERROR]
    assert describe(b, None)["error_code"] == ErrorCode.UNKNOWN_SERVER_ERROR
