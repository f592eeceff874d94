"""`kafkactl acl add|remove|list`: the brokers' ACLs through CreateAcls/DeleteAcls/DescribeAcls, with
kafka-acls.sh's options (`--allow-principal User:alice --operation Read --topic t`, `--producer`,
`--consumer`, `--resource-pattern-type prefixed`). `remove --dry-run` prints what would go and removes nothing.
"""

from __future__ import annotations

from itertools import product
from typing import Annotated

import typer

from broker.client.admin import Admin, describe_binding
from broker.errors import UsageError
from broker.security.acl import (
    CLUSTER_NAME,
    WILDCARD,
    Binding,
    Entry,
    Filter,
    Operation,
    Pattern,
    PatternType,
    Permission,
    ResourceType,
    binding_error,
    camel,
    parse_enum,
)
from kafkactl import contexts
from kafkactl.render import Output, json_line, table

app = typer.Typer(help="ACLs: who may do what on which topic, group, cluster or transactional id.",
                  no_args_is_help=True)  # fmt: skip

#: the operations kafka-acls.sh accepts per resource type
VALID_OPS: dict[ResourceType, frozenset[Operation]] = {
    ResourceType.TOPIC: frozenset(
        {
            Operation.READ,
            Operation.WRITE,
            Operation.CREATE,
            Operation.DESCRIBE,
            Operation.DELETE,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
            Operation.ALTER,
            Operation.ALL,
        }
    ),  # fmt: skip
    ResourceType.GROUP: frozenset({Operation.READ, Operation.DESCRIBE, Operation.DELETE, Operation.ALL}),
    ResourceType.CLUSTER: frozenset(
        {
            Operation.CREATE,
            Operation.CLUSTER_ACTION,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
            Operation.IDEMPOTENT_WRITE,
            Operation.ALTER,
            Operation.DESCRIBE,
            Operation.ALL,
        }
    ),  # fmt: skip
    ResourceType.TRANSACTIONAL_ID: frozenset({Operation.DESCRIBE, Operation.WRITE, Operation.ALL}),
}


def _many(flag: str, help_: str) -> typer.models.OptionInfo:
    return typer.Option(flag, help=help_, show_default=False)


Names = list[str] | None
Topic = Annotated[Names, _many("--topic", "A topic (repeatable; * for every topic).")]
Group = Annotated[Names, _many("--group", "A consumer group (repeatable; * for every one).")]
Cluster = Annotated[bool, typer.Option("--cluster", help="The cluster resource (kafka-cluster).")]
TransactionalId = Annotated[Names, _many("--transactional-id", "A transactional id (repeatable).")]
PatternOpt = Annotated[
    str | None,
    _many("--resource-pattern-type", "literal or prefixed; to list or remove also any or match (default: "
          "literal to add and remove, any to list)."),
]  # fmt: skip
OperationOpt = Annotated[
    Names,
    _many("--operation", "Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
          "AlterConfigs, IdempotentWrite or All (repeatable)."),
]  # fmt: skip
AllowPrincipal = Annotated[Names, _many("--allow-principal", "User:NAME allowed (repeatable; User:* for everyone).")]
DenyPrincipal = Annotated[Names, _many("--deny-principal", "User:NAME denied (repeatable).")]
AllowHost = Annotated[Names, _many("--allow-host", "Host (IP) the allowed may come from (repeatable; default *).")]
DenyHost = Annotated[Names, _many("--deny-host", "Host (IP) the denied are denied from (repeatable; default *).")]


def _pattern_type(text: str | None, default: PatternType, *, filters: bool) -> PatternType:
    if text is None:
        return default
    allowed = ("literal", "prefixed", "any", "match") if filters else ("literal", "prefixed")
    if text.lower() not in allowed:
        raise UsageError(f"--resource-pattern-type {text!r}: expected {', '.join(allowed)}")
    return PatternType[text.upper()]


def _operations(given: list[str] | None) -> list[Operation]:
    out = []
    for text in given or []:
        try:
            op = Operation(parse_enum(Operation, text))
        except ValueError:
            op = Operation.UNKNOWN
        if op in (Operation.UNKNOWN, Operation.ANY):
            names = ", ".join(camel(o) for o in Operation if o not in (Operation.UNKNOWN, Operation.ANY))
            raise UsageError(f"--operation {text!r}: expected one of {names}")
        out.append(op)
    return list(dict.fromkeys(out))


def _principal(text: str, option: str) -> str:
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise UsageError(f"{option} {text!r}: expected Type:name (User:alice, User:*)")
    return text


def _resources(topic: list[str] | None, group: list[str] | None, cluster: bool,
               transactional_id: list[str] | None) -> list[tuple[ResourceType, str]]:  # fmt: skip
    out = [(ResourceType.TOPIC, t) for t in topic or []] + [(ResourceType.GROUP, g) for g in group or []]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in transactional_id or []]
    if cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    for rtype, name in out:
        if not name:
            raise UsageError(f"--{camel(rtype).lower()}: the name must not be empty")
    return out


@app.command("add")
def add(
    allow_principal: AllowPrincipal = None,
    deny_principal: DenyPrincipal = None,
    allow_host: AllowHost = None,
    deny_host: DenyHost = None,
    operation: OperationOpt = None,
    topic: Topic = None,
    group: Group = None,
    cluster: Cluster = False,
    transactional_id: TransactionalId = None,
    pattern_type: PatternOpt = None,
    producer: Annotated[
        bool,
        typer.Option(
            "--producer",
            help="What a producer needs: Write, Describe and "
            "Create on the topics (with --idempotent, IdempotentWrite on the "
            "cluster).",
        ),
    ] = False,  # fmt: skip
    idempotent: Annotated[bool, typer.Option("--idempotent", help="With --producer: an idempotent one.")] = False,
    consumer: Annotated[
        bool,
        typer.Option(
            "--consumer", help="What a consumer needs: Read and Describe on the topics, Read on the group (--group)."
        ),
    ] = False,  # fmt: skip
    bootstrap: contexts.Bootstrap = None,
) -> None:
    """Add ACLs: every allowed principal × host × operation on every resource (and the same for the denied)."""
    ptype = _pattern_type(pattern_type, PatternType.LITERAL, filters=False)
    resources = _resources(topic, group, cluster, transactional_id)
    ops = _operations(operation)
    allows = [_principal(p, "--allow-principal") for p in allow_principal or []]
    denies = [_principal(p, "--deny-principal") for p in deny_principal or []]
    if not allows and not denies:
        raise UsageError("give --allow-principal or --deny-principal")
    wanted: list[tuple[ResourceType, str, Operation]] = []
    if producer or consumer:
        if ops:
            raise UsageError("--producer and --consumer choose the operations: give no --operation")
        topics = [n for t, n in resources if t == ResourceType.TOPIC]
        if not topics:
            raise UsageError("--producer and --consumer need --topic")
        if producer:
            wanted += [(ResourceType.TOPIC, t, o) for t in topics
                       for o in (Operation.WRITE, Operation.DESCRIBE, Operation.CREATE)]  # fmt: skip
            if idempotent:
                wanted.append((ResourceType.CLUSTER, CLUSTER_NAME, Operation.IDEMPOTENT_WRITE))
            ids = [n for t, n in resources if t == ResourceType.TRANSACTIONAL_ID]
            wanted += [
                (ResourceType.TRANSACTIONAL_ID, n, o) for n in ids for o in (Operation.WRITE, Operation.DESCRIBE)
            ]
        if consumer:
            groups = [n for t, n in resources if t == ResourceType.GROUP]
            if not groups:
                raise UsageError("--consumer needs --group")
            wanted += [(ResourceType.TOPIC, t, o) for t in topics for o in (Operation.READ, Operation.DESCRIBE)]
            wanted += [(ResourceType.GROUP, g, Operation.READ) for g in groups]
    else:
        if not resources:
            raise UsageError("give a resource: --topic, --group, --cluster or --transactional-id")
        if not ops:
            raise UsageError("give --operation (or --producer/--consumer)")
        for (rtype, name), op in product(resources, ops):
            if op not in VALID_OPS[rtype]:
                valid = ", ".join(sorted(camel(o) for o in VALID_OPS[rtype]))
                raise UsageError(f"--operation {camel(op)} does not apply to a {camel(rtype)} (valid: {valid})")
            wanted.append((rtype, name, op))
    bindings = []
    for (rtype, name, op), (principals, hosts, perm) in product(
        dict.fromkeys(wanted), ((allows, allow_host, Permission.ALLOW), (denies, deny_host, Permission.DENY))
    ):
        for principal, host in product(principals, hosts or [WILDCARD]):
            pattern_type_here = PatternType.LITERAL if rtype == ResourceType.CLUSTER else ptype
            b = Binding(Pattern(rtype, name, pattern_type_here), Entry(principal, host, op, perm))
            why = binding_error(b)
            if why:
                raise UsageError(why)
            bindings.append(b)
    with Admin(contexts.bootstrap(bootstrap)) as admin:
        admin.create_acls(bindings)
    for b in bindings:
        print(f"added: {describe_binding(b)}")


def _filters(topic: list[str] | None, group: list[str] | None, cluster: bool, transactional_id: list[str] | None,
             ptype: PatternType, principals: list[str], hosts: list[str], ops: list[Operation],
             permission: Permission = Permission.ANY) -> list[Filter]:  # fmt: skip
    resources: list[tuple[ResourceType, str | None]] = list(_resources(topic, group, cluster, transactional_id))
    out = []
    for (rtype, name), principal, host, op in product(
        resources or [(ResourceType.ANY, None)], principals or [None], hosts or [None], ops or [Operation.ANY]
    ):
        out.append(Filter(rtype, name, ptype, principal, host, op, permission))
    return out


@app.command("remove")
def remove(
    principal: Annotated[
        list[str] | None,
        typer.Option("--principal", help="Only this principal's ACLs (repeatable).", show_default=False),
    ] = None,  # fmt: skip
    host: Annotated[
        list[str] | None, typer.Option("--host", help="Only ACLs of this host (repeatable).", show_default=False)
    ] = None,  # fmt: skip
    operation: OperationOpt = None,
    topic: Topic = None,
    group: Group = None,
    cluster: Cluster = False,
    transactional_id: TransactionalId = None,
    pattern_type: PatternOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would be removed; remove nothing.")] = False,
    bootstrap: contexts.Bootstrap = None,
) -> None:
    """Remove the ACLs of the given resources (all their ACLs, or those of --principal/--host/--operation)."""
    ptype = _pattern_type(pattern_type, PatternType.LITERAL, filters=True)
    if not (topic or group or cluster or transactional_id):
        raise UsageError("give the resource whose ACLs go: --topic, --group, --cluster or --transactional-id")
    principals = [_principal(p, "--principal") for p in principal or []]
    filters = _filters(topic, group, cluster, transactional_id, ptype, principals, host or [], _operations(operation))
    with Admin(contexts.bootstrap(bootstrap)) as admin:
        if dry_run:
            found = list(dict.fromkeys(b for f in filters for b in admin.describe_acls(f)))
        else:
            found = list(dict.fromkeys(admin.delete_acls(filters)))
    verb = "would remove" if dry_run else "removed"
    for b in found:
        print(f"{verb}: {describe_binding(b)}")
    if not found:
        print("no ACL matched" + (" (nothing removed)" if not dry_run else ""))


@app.command("list")
def list_(
    principal: Annotated[
        str | None, typer.Option("--principal", help="Only this principal's ACLs.", show_default=False)
    ] = None,  # fmt: skip
    topic: Topic = None,
    group: Group = None,
    cluster: Cluster = False,
    transactional_id: TransactionalId = None,
    pattern_type: PatternOpt = None,
    json: Annotated[bool, typer.Option("--json", hidden=True, help="The same as -o json (older spelling).")] = False,
    bootstrap: contexts.Bootstrap = None,
    output: Annotated[Output, typer.Option("-o", "--output", help="text, or json (one object per ACL).")] = Output.text,
) -> None:
    """List ACLs (all, or those of the given resources; `--resource-pattern-type match` lists every ACL that
    applies to them, wildcards and prefixes too)."""
    ptype = _pattern_type(pattern_type, PatternType.ANY, filters=True)
    principals = [_principal(principal, "--principal")] if principal else []
    filters = _filters(topic, group, cluster, transactional_id, ptype, principals, [], [])
    with Admin(contexts.bootstrap(bootstrap)) as admin:
        found = list(dict.fromkeys(b for f in filters for b in admin.describe_acls(f)))
    found.sort(key=lambda b: (b.pattern.resource_type, b.pattern.name, b.pattern.pattern_type, b.entry.principal,
                              b.entry.host, b.entry.operation, b.entry.permission))  # fmt: skip
    if json or output == Output.json:
        for b in found:
            json_line({"resource_type": camel(b.pattern.resource_type), "pattern_type": b.pattern.pattern_type.name,
                       "name": b.pattern.name, "principal": b.entry.principal, "host": b.entry.host,
                       "operation": camel(b.entry.operation), "permission": camel(b.entry.permission)})  # fmt: skip
        return
    table(("RESOURCE", "PATTERN", "NAME", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"),
          [(camel(b.pattern.resource_type), b.pattern.pattern_type.name, b.pattern.name, b.entry.principal,
            b.entry.host, camel(b.entry.operation), camel(b.entry.permission)) for b in found])  # fmt: skip
