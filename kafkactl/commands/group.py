"""`kafkactl group`: list, describe, rewind and delete consumer groups of both kinds."""

from __future__ import annotations

import contextlib
import csv
import sys
from collections.abc import Iterator
from dataclasses import asdict
from enum import StrEnum
from typing import Annotated

import typer
from kazoo.client import KazooClient

from broker.client import group_admin, group_mode
from broker.client.admin import Admin
from broker.client.group_admin import RewindTarget
from broker.client.offsets import parse_duration_ms, parse_offset
from broker.errors import KafkactlError, UsageError
from broker.zk import client as zkclient
from kafkactl import completion, contexts
from kafkactl.render import Output, json_line, table

app = typer.Typer(
    help="Consumer groups: list, describe, rewind committed offsets, delete groups or offsets.", no_args_is_help=True
)

OutputOpt = Annotated[Output, typer.Option("-o", "--output", help="text or json.")]
GroupArg = Annotated[str, typer.Argument(help="Consumer group id.", autocompletion=completion.groups)]


class Export(StrEnum):
    csv = "csv"
    json = "json"


@contextlib.contextmanager
def _session(bootstrap: str | None, zookeeper: str | None) -> Iterator[tuple[KazooClient | None, Admin]]:
    """The broker and ZooKeeper a group command needs.

    With an authorizer on the brokers, no ZooKeeper (None): every group operation goes through the brokers, whose
    authorizer decides (`broker.client.group_mode`). Without one, ZooKeeper as -z, the environment or the context
    name it, else the one the broker itself uses (so `-b` alone is enough, as for every other command), refused
    when it is not the cluster's of -b."""
    bs = contexts.bootstrap(bootstrap)
    with Admin(bs) as admin:
        if group_mode.has_authorizer(admin.cluster):
            yield None, admin
            return
        named = contexts.configured("zookeeper", zookeeper)
        connect = named or admin.zookeeper_connect() or contexts.zookeeper()
        with zkclient.session(connect) as zk:
            admin.cluster.metadata([])
            group_mode.check_zookeeper(zk, connect, bs, admin.cluster.cluster_id)
            yield zk, admin


StateOpt = Annotated[
    list[str] | None,
    typer.Option("--state", help="Only groups in this state (repeatable, or comma-separated; any case): "
                 + ", ".join((*group_admin.GROUP_STATES, group_admin.REBALANCING)) + "."),
]  # fmt: skip


@app.command("list")
def list_(bootstrap: contexts.Bootstrap = None, zookeeper: contexts.ZooKeeper = None,
          state: StateOpt = None, output: OutputOpt = Output.text) -> None:  # fmt: skip
    """Every group in the offset registry or known to a coordinator: kind, state, members (--state: only those
    in the states named, asked of the coordinators with ListGroups' states filter)."""
    states = group_admin.parse_states(state)
    with _session(bootstrap, zookeeper) as (zk, admin):
        groups = group_admin.list_groups(zk, admin, states)
    if output == Output.json:
        for g in groups:
            json_line(g)
        return
    table(["GROUP", "KIND", "STATE", "MEMBERS"], ([g["group"], g["kind"], g["state"], g["members"]] for g in groups))


@app.command("describe")
def describe(group: GroupArg, bootstrap: contexts.Bootstrap = None, zookeeper: contexts.ZooKeeper = None,
             output: OutputOpt = Output.text) -> None:  # fmt: skip
    """Kind and state; per partition the committed offset, log end offset, lag, owner and host."""
    with _session(bootstrap, zookeeper) as (zk, admin):
        info = group_admin.describe(zk, admin, group)
    if output == Output.json:
        json_line(info.as_json())
        return
    print(f"group {info.group} ({info.kind}-coordinated): {info.state}, {len(info.members)} member(s)")
    table(
        ["TOPIC", "PARTITION", "COMMITTED", "LOG-END", "LAG", "OWNER", "HOST"],
        ([p.topic, p.partition, _dash(p.committed), _dash(p.log_end), _dash(p.lag), p.owner or "-", p.host or "-"]
         for p in info.partitions),
    )  # fmt: skip


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _topics(specs: list[str] | None) -> dict[str, list[int] | None]:
    """`T` or `T:0,1,2` (repeatable) → {topic: partitions or None for all}."""
    out: dict[str, list[int] | None] = {}
    for spec in specs or []:
        name, sep, parts = spec.partition(":")
        if not name:
            raise UsageError(f"--topic {spec!r}: expected TOPIC or TOPIC:P[,P...]")
        if not sep:
            out[name] = None
            continue
        try:
            chosen = sorted({int(p) for p in parts.split(",") if p.strip()})
        except ValueError:
            raise UsageError(f"--topic {spec!r}: partitions must be integers, as in {name}:0,1,2") from None
        if not chosen:
            raise UsageError(f"--topic {spec!r}: no partitions after ':'")
        if name not in out:
            out[name] = chosen
        elif out[name] is not None:  # T and T:0 together mean all of T
            out[name] = sorted(set(out[name]) | set(chosen))
    return out


def _target(to_earliest: bool, to_latest: bool, to_offset: int | None, to_datetime: str | None,
            by_duration: str | None, shift_by: str | None) -> RewindTarget:  # fmt: skip
    given = [name for name, v in (("--to-earliest", to_earliest), ("--to-latest", to_latest),
                                  ("--to-offset", to_offset is not None), ("--to-datetime", to_datetime),
                                  ("--by-duration", by_duration), ("--shift-by", shift_by)) if v]  # fmt: skip
    if len(given) != 1:
        raise UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, "
                         f"--by-duration, --shift-by (got {', '.join(given) or 'none'})")  # fmt: skip
    if to_earliest:
        return RewindTarget("earliest")
    if to_latest:
        return RewindTarget("latest")
    if to_offset is not None:
        if to_offset < 0:
            raise UsageError(f"--to-offset {to_offset}: must be 0 or more")
        return RewindTarget("offset", to_offset)
    if to_datetime is not None:
        spec = parse_offset(to_datetime)
        if spec.kind != "timestamp" or parse_duration_ms(to_datetime) is not None or to_datetime.startswith("@"):
            raise UsageError(f"--to-datetime {to_datetime!r}: expected an ISO-8601 date-time, e.g. 2026-11-22T10:00:00")
        return RewindTarget("timestamp", spec.value)
    if by_duration is not None:
        ms = parse_duration_ms(by_duration)
        if ms is None:
            raise UsageError(f"--by-duration {by_duration!r}: expected a duration such as 1h, 30m or 1h30m")
        return RewindTarget("timestamp", max(0, group_admin.now_ms() - ms))
    assert shift_by is not None
    try:
        return RewindTarget("shift", int(shift_by))
    except ValueError:
        raise UsageError(f"--shift-by {shift_by!r}: expected a signed integer such as -100 or +50") from None


@app.command("rewind")
def rewind(
    group: GroupArg,
    topic: Annotated[list[str] | None, typer.Option("--topic", "-t", help="TOPIC or TOPIC:P,P (repeatable).")] = None,
    all_topics: Annotated[bool, typer.Option("--all-topics", help="Every topic the group has committed to.")] = False,
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="Each partition's log start.")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest", help="Each partition's log end.")] = False,
    to_offset: Annotated[int | None, typer.Option("--to-offset", help="Offset N (clamped to the log).")] = None,
    to_datetime: Annotated[str | None, typer.Option("--to-datetime", help="First offset at/after an ISO time.")] = None,
    by_duration: Annotated[str | None, typer.Option("--by-duration", help="First offset at/after now - 1h.")] = None,
    shift_by: Annotated[str | None, typer.Option("--shift-by", help="Move the committed offset by ±N.")] = None,
    execute: Annotated[bool, typer.Option("--execute", help="Apply the plan (default: a dry run).")] = False,
    export: Annotated[Export | None, typer.Option("--export", help="Print the plan as csv or json.")] = None,
    bootstrap: contexts.Bootstrap = None,
    zookeeper: contexts.ZooKeeper = None,
    output: OutputOpt = Output.text,
) -> None:  # fmt: skip
    """Move a group's committed offsets. Shows the plan (GROUP TOPIC PARTITION CURRENT NEW); --execute applies it,
    refused while the group has live members."""
    if all_topics == bool(topic):
        raise UsageError("give --topic (repeatable) or --all-topics")
    target = _target(to_earliest, to_latest, to_offset, to_datetime, by_duration, shift_by)
    with _session(bootstrap, zookeeper) as (zk, admin):
        rows = group_admin.plan_rewind(zk, admin, group, None if all_topics else _topics(topic), target)
        if execute:
            group_admin.apply_rewind(zk, admin, group, rows)
    if export == Export.csv:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(["group", "topic", "partition", "current", "new"])
        w.writerows([r.group, r.topic, r.partition, "" if r.current is None else r.current, r.new] for r in rows)
    elif export == Export.json or output == Output.json:
        for r in rows:
            json_line(asdict(r))
    else:
        table(["GROUP", "TOPIC", "PARTITION", "CURRENT", "NEW"],
              ([r.group, r.topic, r.partition, _dash(r.current), r.new] for r in rows))  # fmt: skip
    done = "rewound" if execute else "dry run: would rewind"
    tail = "" if execute else "; add --execute to apply it"
    print(f"{done} {len(rows)} partition(s) of group {group}{tail}", file=sys.stderr)


@app.command("delete")
def delete(
    group: GroupArg,
    bootstrap: contexts.Bootstrap = None,
    zookeeper: contexts.ZooKeeper = None,
) -> None:
    """Delete a group's registries and committed offsets; refused while it has live members (a broker-coordinated
    group through its coordinator: DeleteGroups)."""
    with _session(bootstrap, zookeeper) as (zk, admin):
        group_admin.delete(zk, admin, group)
    print(f"deleted group {group}")


@app.command("delete-offsets")
def delete_offsets(
    group: GroupArg,
    topic: Annotated[str, typer.Option("--topic", "-t", help="The topic whose committed offsets go.",
                                       autocompletion=completion.topics)],
    partition: Annotated[list[int] | None, typer.Option("--partition", "-p",
                                                        help="A partition (repeatable; default: all).")] = None,
    bootstrap: contexts.Bootstrap = None,
    zookeeper: contexts.ZooKeeper = None,
    output: OutputOpt = Output.text,
) -> None:  # fmt: skip
    """Delete a group's committed offsets of a topic's partitions (a broker-coordinated group's through its
    coordinator: OffsetDelete), so it starts them by auto.offset.reset. Refused for a topic a live member
    subscribes to."""
    with _session(bootstrap, zookeeper) as (zk, admin):
        result = group_admin.delete_offsets(zk, admin, group, topic, partition)
    if output == Output.json:
        for (t, p), error in result.items():
            json_line({"group": group, "topic": t, "partition": p, "deleted": error is None, "error": error})
    else:
        table(["TOPIC", "PARTITION", "STATUS"], ([t, p, error or "deleted"] for (t, p), error in result.items()))
    failed = {tp: e for tp, e in result.items() if e is not None}
    if failed:
        names = ", ".join(f"{t}-{p}" for t, p in failed)
        why = sorted(set(failed.values()))
        hint = " (a live member subscribes to the topic)" if why == ["GROUP_SUBSCRIBED_TO_TOPIC"] else ""
        raise KafkactlError(f"group {group!r} kept its offsets of {names}: {', '.join(why)}{hint}")
