"""The broker's authorizer: Kafka's `AclAuthorizer` over the ACLs in ZooKeeper, asked by every request handler.

`authorizer.class.name` turns it on (`kafka.security.authorizer.AclAuthorizer`, or the older
`kafka.security.auth.SimpleAclAuthorizer`); empty, there is none and everything is allowed. The ACLs are
cached in memory (`acl_store.AclWatcher` keeps them current), and so are the decisions, per principal,
host, operation and resource, until the next ACL change: the produce hot path asks once per run.
Each denial is logged as Kafka logs it, one line per refused resource, at INFO on the `broker.authorizer`
logger, which logs INFO even when the broker's log level is higher.

Brokers talk to each other as a principal too (the inter-broker listener's): it must be in `super.users`,
as in Kafka, or the followers' fetches are refused CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from broker.errors import KafkactlError
from broker.security.acl import (
    CLUSTER_NAME,
    Binding,
    Operation,
    Pattern,
    ResourceType,
    camel,
    decide,
    decide_any,
    parse_super_users,
)
from broker.security.acl_store import Acls, AclWatcher
from broker.security.session import current

if TYPE_CHECKING:
    from kazoo.client import KazooClient

log = logging.getLogger("broker.authorizer")

#: `authorizer.class.name` values that turn the ACL authorizer on
CLASS_NAMES = frozenset({"kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer"})

_MAX_DECISIONS = 100_000  # cached decisions at most (then the cache starts over)


class Authorizer:
    """Decides requests from the cached ACLs; `start` loads them and follows their changes."""

    def __init__(self, super_users: frozenset[str] = frozenset(), allow_if_no_acl: bool = False) -> None:
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self.acls: Acls = {}
        self._by_type: dict[ResourceType, list[Binding]] = {}
        self._decisions: dict[tuple[str, str, Operation, ResourceType, str], bool] = {}
        self._watcher: AclWatcher | None = None

    @classmethod
    def from_props(cls, props: dict[str, str]) -> Authorizer | None:
        """The authorizer `authorizer.class.name` asks for, or None."""
        name = (props.get("authorizer.class.name") or "").strip()
        if not name:
            return None
        if name not in CLASS_NAMES:
            raise KafkactlError(f"authorizer.class.name={name!r}: expected one of {', '.join(sorted(CLASS_NAMES))}")
        flag = (props.get("allow.everyone.if.no.acl.found") or "false").strip().lower()
        if flag not in ("true", "false"):
            raise KafkactlError(f"allow.everyone.if.no.acl.found={flag!r}: expected true or false")
        log.setLevel(logging.INFO)  # denials are logged even when the rest logs WARNING (Kafka's authorizer log)
        return cls(parse_super_users(props.get("super.users")), flag == "true")

    def start(self, zk: KazooClient) -> None:
        self._watcher = AclWatcher(zk, self.set_acls)
        self._watcher.start()

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()

    def reload(self, patterns: Iterable[Pattern]) -> None:
        """Read these patterns from ZooKeeper again now (blocking): the ACLs this broker just changed."""
        if self._watcher is not None:
            self._watcher.reload(patterns)

    def set_acls(self, acls: Acls) -> None:
        """Take a new set of ACLs (from any thread): decisions made on the old ones are forgotten."""
        by_type: dict[ResourceType, list[Binding]] = {}
        for p, entries in acls.items():
            by_type.setdefault(p.resource_type, []).extend(Binding(p, e) for e in entries)
        self.acls, self._by_type = acls, by_type
        self._decisions = {}

    def allows(self, operation: Operation, resource_type: ResourceType, name: str, request: str = "",
               *, log_denial: bool = True) -> bool:  # fmt: skip
        """Whether the current request's principal may do `operation` on the resource; a denial is logged."""
        s = current()
        key = (s.principal, s.host, operation, resource_type, name)
        decisions = self._decisions
        allowed = decisions.get(key)
        if allowed is None:
            allowed = decide(self._by_type.get(resource_type, ()), s.principal, s.host, operation, resource_type,
                             name, super_users=self.super_users, allow_if_no_acl=self.allow_if_no_acl)  # fmt: skip
            if len(decisions) >= _MAX_DECISIONS:
                decisions.clear()
            decisions[key] = allowed
        if not allowed and log_denial:
            log.info("Principal = %s is Denied Operation = %s from host = %s on resource = %s%s", s.principal,
                     camel(operation), s.host, Pattern(resource_type, name),
                     f" for request = {request}" if request else "")  # fmt: skip
        return allowed

    def allows_any(self, operation: Operation, resource_type: ResourceType, request: str = "") -> bool:
        """Whether the current principal may do `operation` on some resource of the type (not cached: rare)."""
        s = current()
        ok = decide_any(self._by_type.get(resource_type, ()), s.principal, s.host, operation, resource_type,
                        super_users=self.super_users, allow_if_no_acl=self.allow_if_no_acl)  # fmt: skip
        if not ok:
            log.info("Principal = %s is Denied Operation = %s from host = %s on any resource of type %s%s",
                     s.principal, camel(operation), s.host, camel(resource_type),
                     f" for request = {request}" if request else "")  # fmt: skip
        return ok


def allowed(a: Authorizer | None, operation: Operation, resource_type: ResourceType, name: str, request: str = "",
            *, log_denial: bool = True) -> bool:  # fmt: skip
    """`Authorizer.allows`, or True with no authorizer."""
    return a is None or a.allows(operation, resource_type, name, request, log_denial=log_denial)


#: the operations an ACL can grant on each resource type (Kafka's AclEntry.supportedOperations)
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE, Operation.DELETE,
                         Operation.ALTER, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                           Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
    ResourceType.DELEGATION_TOKEN: (Operation.DESCRIBE,),
}  # fmt: skip


def authorized_operations(a: Authorizer | None, resource_type: ResourceType, name: str = CLUSTER_NAME) -> int:
    """KIP-430's bit field of what the current principal may do on a resource (bit n: operation code n), as
    Metadata, DescribeGroups and DescribeCluster answer it when asked: every supported operation without an
    authorizer; no denial is logged (asking is not attempting)."""
    bits = 0
    for op in SUPPORTED_OPERATIONS[resource_type]:
        if allowed(a, op, resource_type, name, log_denial=False):
            bits |= 1 << op
    return bits


def cluster_allowed(a: Authorizer | None, operation: Operation, request: str = "", *, log_denial: bool = True) -> bool:
    """Whether the current principal may do `operation` on the cluster."""
    return a is None or a.allows(operation, ResourceType.CLUSTER, CLUSTER_NAME, request, log_denial=log_denial)
