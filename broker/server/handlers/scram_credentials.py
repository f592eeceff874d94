"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), KIP-554, as ZooKeeper-mode Kafka 2.8's
AdminManager answers them, over the credentials `kafkactl user` keeps (`broker.security.credentials`).

Describe needs Describe on the cluster (else CLUSTER_AUTHORIZATION_FAILED for the whole answer) and lists,
per user, its mechanisms and iterations: the users named (RESOURCE_NOT_FOUND for one without credentials,
DUPLICATE_RESOURCE for one named twice), or every user with credentials. Alter needs Alter on the cluster
(else CLUSTER_AUTHORIZATION_FAILED for each user) and takes, per user, upsertions (the client sends the salt
and the salted password, never the password) and deletions, written together; a user with any invalid
change (an empty name, an unknown mechanism, iterations outside 4096-16384, a credential changed twice, a
deletion of one it does not have) is refused whole, the others are written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kazoo.exceptions import KazooException

from broker.protocol.errors import ErrorCode
from broker.protocol.framing import RequestHeader
from broker.security import credentials
from broker.security.acl import Operation
from broker.security.acl_authorizer import cluster_allowed
from broker.security.scram import MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential, credential_from_salted

if TYPE_CHECKING:
    from broker.server.services import Services

#: the wire's SCRAM mechanism codes (Kafka's ScramMechanism)
MECHANISM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
_MECHANISMS = {code: name for name, code in MECHANISM_CODES.items()}
_CLUSTER_DENIED = "Cluster authorization failed."


async def handle_describe_user_scram_credentials(b: Services, header: RequestHeader, req: dict[str, Any]
                                                 ) -> dict[str, Any]:  # fmt: skip
    out: dict[str, Any] = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": []}
    names = [u["name"] for u in req["users"] or ()]
    refusal = None
    if not cluster_allowed(b.authorizer, Operation.DESCRIBE, "DescribeUserScramCredentials"):
        refusal = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, _CLUSTER_DENIED)
    elif (problem := _zookeeper_problem(b)) is not None:
        refusal = (ErrorCode.UNKNOWN_SERVER_ERROR, problem)
    if refusal is not None:  # (as Kafka's error answer: the error again for each user named; librdkafka crashes
        # on an answer with the error alone)
        out.update(error_code=refusal[0], error_message=refusal[1])
        out["results"] = [{"user": n, "error_code": refusal[0], "error_message": refusal[1], "credential_infos": []}
                          for n in names]  # fmt: skip
        return out
    if not names:
        try:
            names = list(await b.blocking(credentials.list_users, b.zk))
        except (KazooException, ValueError) as exc:
            out.update(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=_reason(exc))
            return out
    twice = {n for n in names if names.count(n) > 1}
    for name in dict.fromkeys(names):
        result: dict[str, Any] = {"user": name, "error_code": 0, "error_message": None, "credential_infos": []}
        if name in twice:
            result.update(error_code=ErrorCode.DUPLICATE_RESOURCE, error_message="Cannot describe SCRAM credentials "
                          f"for the same user twice in a single request: {name}")  # fmt: skip
        elif not name:
            result.update(
                error_code=ErrorCode.RESOURCE_NOT_FOUND,
                error_message="Cannot describe SCRAM credentials for empty username",
            )
        else:
            try:
                found = await b.blocking(credentials.read_user, b.zk, name)
            except (KazooException, ValueError) as exc:  # (ZooKeeper refused, or a name it cannot hold)
                result.update(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=_reason(exc))
                out["results"].append(result)
                continue
            if not found:
                result.update(
                    error_code=ErrorCode.RESOURCE_NOT_FOUND,
                    error_message=f"Attempt to describe a user credential that does not exist: {name}",
                )
            result["credential_infos"] = [{"mechanism": MECHANISM_CODES[m], "iterations": c.iterations}
                                          for m, c in sorted(found.items())]  # fmt: skip
        out["results"].append(result)
    return out


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


async def handle_alter_user_scram_credentials(b: Services, header: RequestHeader, req: dict[str, Any]
                                              ) -> dict[str, Any]:  # fmt: skip
    changes: dict[str, list[tuple[str, dict[str, Any] | None]]] = {}  # user → (mechanism code, upsertion or None)
    for d in req["deletions"]:
        changes.setdefault(d["name"], []).append((d["mechanism"], None))
    for u in req["upsertions"]:
        changes.setdefault(u["name"], []).append((u["mechanism"], u))
    allowed = cluster_allowed(b.authorizer, Operation.ALTER, "AlterUserScramCredentials")
    results = []
    for name, asked in changes.items():
        result: dict[str, Any] = {"user": name, "error_code": 0, "error_message": None}
        results.append(result)
        try:
            if not allowed:
                raise _Refused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, _CLUSTER_DENIED)
            upserts, deletes = _checked(name, asked)
            if (problem := _zookeeper_problem(b)) is not None:
                raise _Refused(ErrorCode.UNKNOWN_SERVER_ERROR, problem)
            if deletes:
                have = await b.blocking(credentials.read_user, b.zk, name)
                if any(m not in have for m in deletes):
                    raise _Refused(
                        ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
                    )
            await b.blocking(credentials.alter_user, b.zk, name, upserts, deletes)
        except _Refused as exc:
            result.update(error_code=exc.code, error_message=exc.message)
        except (KazooException, ValueError) as exc:  # (ZooKeeper refused, or a name it cannot hold)
            result.update(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=_reason(exc))
    return {"throttle_time_ms": 0, "results": results}


def _checked(name: str, asked: list[tuple[str, dict[str, Any] | None]]
             ) -> tuple[dict[str, ScramCredential], list[str]]:  # fmt: skip
    """A user's upsertions (mechanism → credential) and deletions (mechanisms), or `_Refused` as Kafka refuses."""
    if not name:
        raise _Refused(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    upserts: dict[str, ScramCredential] = {}
    deletes: list[str] = []
    for code, upsertion in asked:
        mechanism = _MECHANISMS.get(code)
        if mechanism is None:
            raise _Refused(ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        if upsertion is None:
            deletes.append(mechanism)
            continue
        iterations = upsertion["iterations"]
        if iterations < MIN_ITERATIONS:
            raise _Refused(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        if iterations > MAX_ITERATIONS:
            raise _Refused(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        upserts[mechanism] = credential_from_salted(mechanism, bytes(upsertion["salt"]),
                                                    bytes(upsertion["salted_password"]), iterations)  # fmt: skip
    codes = [code for code, _ in asked]  # (after each change's own checks, in Kafka's order of refusals)
    if len(set(codes)) < len(codes):
        raise _Refused(ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
    return upserts, deletes


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _zookeeper_problem(b: Services) -> str | None:
    problem = b.zookeeper_problem()
    return problem or ("ZooKeeper is not connected" if b.zk is None else None)
