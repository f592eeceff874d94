"""Kafka's ACL model and its matching rules, pure: bindings, filters, and whether a set of ACLs allows an action.

An ACL binding is a resource pattern (type, name, LITERAL or PREFIXED) and an entry (principal, host,
operation, Allow/Deny). The enums carry Kafka's wire numbers (DescribeAcls/CreateAcls/DeleteAcls) and the
names Kafka writes in ZooKeeper (`Topic`, `Read`, `Allow`, ...). The decision is `AclAuthorizer`'s
(Kafka 2.8): a super user is always allowed; with no ACL at all on the resource the answer is
`allow.everyone.if.no.acl.found`; otherwise a matching Deny wins, then a matching Allow is needed.
An ACL matches the resource when it is literal with the same name or the wildcard `*`, or prefixed with a
prefix of the name; it matches the request when its principal is the request's or `User:*`, its host the
request's or `*`, and its operation the one asked or All. An Allow of Read, Write, Delete or Alter also
allows Describe, and an Allow of AlterConfigs allows DescribeConfigs (a Deny implies nothing).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

WILDCARD = "*"  # a literal resource name matching every name of its type; a host matching every host
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one name of the Cluster resource


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def camel(member: IntEnum) -> str:
    """Kafka's display and ZooKeeper name of an enum member: TRANSACTIONAL_ID → TransactionalId."""
    return "".join(w.capitalize() for w in member.name.split("_"))


def parse_enum(cls: type[IntEnum], text: str) -> IntEnum:
    """An enum member from its Kafka name in any case and spelling (`Read`, `READ`, `cluster-action`,
    `ClusterAction`); ValueError otherwise."""
    key = text.replace("-", "").replace("_", "").upper()
    for m in cls:
        if m.name.replace("_", "") == key:
            return m
    raise ValueError(f"unknown {cls.__name__} {text!r}")


#: an Allow of any of these operations also allows the key's operation (Kafka's implied operations)
IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    ),  # fmt: skip
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}


@dataclass(frozen=True, slots=True)
class Pattern:
    """A resource pattern: what an ACL applies to."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this (specific) pattern covers the named resource."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.name == name or self.name == WILDCARD
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.name)
        return False

    def __str__(self) -> str:  # Kafka's ResourcePattern as its log lines show it
        return f"{camel(self.resource_type)}:{self.pattern_type.name}:{self.name}"


@dataclass(frozen=True, slots=True)
class Entry:
    """An access control entry: who, from where, may (or may not) do what."""

    principal: str
    host: str
    operation: Operation
    permission: Permission

    def applies_to(self, principal: str, host: str) -> bool:
        return self.principal in (principal, WILDCARD_PRINCIPAL) and self.host in (host, WILDCARD)


@dataclass(frozen=True, slots=True)
class Binding:
    pattern: Pattern
    entry: Entry


def binding_error(b: Binding) -> str | None:
    """Why a binding cannot be created (Kafka's CreateAcls checks), or None."""
    p, e = b.pattern, b.entry
    if p.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"invalid resource type {p.resource_type.name}"
    if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"invalid pattern type {p.pattern_type.name}: an ACL is LITERAL or PREFIXED"
    if not p.name:
        return "invalid empty resource name"
    if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        return f"the only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if e.operation in (Operation.UNKNOWN, Operation.ANY):
        return f"invalid operation {e.operation.name}"
    if e.permission not in (Permission.ALLOW, Permission.DENY):
        return f"invalid permission type {e.permission.name}"
    kind, sep, name = e.principal.partition(":")
    if not sep or not kind or not name:
        return f"invalid principal {e.principal!r}: expected Type:name (User:alice)"
    if not e.host:
        return "invalid empty host"
    return None


@dataclass(frozen=True, slots=True)
class Filter:
    """Kafka's AclBindingFilter: None (or ANY) fields match everything; MATCH patterns match as an
    authorization would (literal name, wildcard, prefixes of the name)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def unknown(self) -> bool:
        """A filter with an UNKNOWN enum matches nothing and is an invalid request."""
        return any(v == 0 for v in (self.resource_type, self.pattern_type, self.operation, self.permission))

    def matches_pattern(self, p: Pattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != p.resource_type:
            return False
        pt = self.pattern_type
        if pt not in (PatternType.ANY, PatternType.MATCH) and pt != p.pattern_type:
            return False
        if self.name is None:
            return True
        if pt == PatternType.ANY or pt == p.pattern_type:
            return self.name == p.name
        if p.pattern_type == PatternType.LITERAL:  # MATCH
            return self.name == p.name or p.name == WILDCARD
        return p.pattern_type == PatternType.PREFIXED and self.name.startswith(p.name)

    def matches_entry(self, e: Entry) -> bool:
        return (
            (self.principal is None or self.principal == e.principal)
            and (self.host is None or self.host == e.host)
            and (self.operation == Operation.ANY or self.operation == e.operation)
            and (self.permission == Permission.ANY or self.permission == e.permission)
        )

    def matches(self, b: Binding) -> bool:
        return self.matches_pattern(b.pattern) and self.matches_entry(b.entry)


def parse_super_users(text: str | None) -> frozenset[str]:
    """`super.users`: principals separated by `;` (`User:admin;User:broker`)."""
    return frozenset(p.strip() for p in (text or "").split(";") if p.strip())


def decide(acls: Iterable[Binding], principal: str, host: str, operation: Operation,
           resource_type: ResourceType, name: str, *, super_users: frozenset[str] = frozenset(),
           allow_if_no_acl: bool = False) -> bool:  # fmt: skip
    """Whether `principal` at `host` may do `operation` on the resource, under `acls` (Kafka's AclAuthorizer)."""
    if principal in super_users:
        return True
    matching = [b.entry for b in acls if b.pattern.matches_resource(resource_type, name)]
    if not matching:
        return allow_if_no_acl
    mine = [e for e in matching if e.applies_to(principal, host)]
    for e in mine:
        if e.permission == Permission.DENY and e.operation in (operation, Operation.ALL):
            return False
    allowing = IMPLIED_BY.get(operation, frozenset({operation}))
    return any(e.permission == Permission.ALLOW and (e.operation in allowing or e.operation == Operation.ALL)
               for e in mine)  # fmt: skip


def decide_any(acls: Iterable[Binding], principal: str, host: str, operation: Operation,
               resource_type: ResourceType, *, super_users: frozenset[str] = frozenset(),
               allow_if_no_acl: bool = False) -> bool:  # fmt: skip
    """Whether `principal` may do `operation` on some resource of the type (Kafka's authorizeByResourceType,
    which InitProducerId asks for WRITE on any topic): an Allow on a pattern no Deny of the principal covers."""
    if principal in super_users:
        return True
    mine = [b for b in acls if b.pattern.resource_type == resource_type]
    if not mine:
        return allow_if_no_acl
    mine = [b for b in mine if b.entry.applies_to(principal, host)]
    denied = [b.pattern for b in mine
              if b.entry.permission == Permission.DENY and b.entry.operation in (operation, Operation.ALL)]  # fmt: skip
    if any(p.pattern_type == PatternType.LITERAL and p.name == WILDCARD for p in denied):
        return False
    for b in mine:
        if b.entry.permission != Permission.ALLOW or b.entry.operation not in (operation, Operation.ALL):
            continue
        p = b.pattern
        # as Kafka's authorizeByResourceType: a literal Deny cancels only the literal Allow of its own name
        covered = any(p.name.startswith(d.name) if d.pattern_type == PatternType.PREFIXED
                      else d.name == p.name and p.pattern_type == PatternType.LITERAL for d in denied)  # fmt: skip
        if not covered:
            return True
    return False
