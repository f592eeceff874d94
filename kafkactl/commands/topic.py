"""`kafkactl topic`: create, list, describe, alter and delete topics through a broker; elect leaders and
reassign partitions through ZooKeeper.

Kafka's internal topics (`__consumer_offsets`, `__transaction_state`, `__cluster_metadata`) are never
created or deleted, whatever broker answers: refused with one line before anything is sent, as Kafka's
`kafka-topics --delete` refuses them.
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from broker.client.admin import Admin, PartitionDescription
from broker.errors import KafkactlError, UsageError
from broker.replication import preferred, reassignment
from broker.server.config import parse_override
from broker.topics import internal_topic_error, parse_topic_specs
from broker.zk import client as zkclient
from kafkactl import completion, contexts, files
from kafkactl.render import Output, json_line, table

app = typer.Typer(help="Create, list, describe, alter, delete and reassign topics.", no_args_is_help=True)

OutputOpt = Annotated[Output, typer.Option("-o", "--output", help="text or json.")]
ConfigOpt = Annotated[list[str] | None, typer.Option("--config", help="key=value topic override (repeatable).")]


def _not_internal(name: str, action: str) -> None:
    why = internal_topic_error(name, action)
    if why:
        raise KafkactlError(why)


def _say(output: Output, text: str, **fields: object) -> None:
    """A command's outcome: its line of text, or the same as one JSON object."""
    if output == Output.json:
        json_line(fields)
    else:
        print(text)


def _configs(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, value = parse_override(item, "--config")
        out[key] = value
    return out


@app.command("create")
def create(
    name: Annotated[str | None, typer.Argument(help="Topic name (or --from-file).", show_default=False)] = None,
    partitions: Annotated[
        int | None,
        typer.Option(
            "--partitions", "-p", help="Partitions (default: the broker's num.partitions).", show_default=False
        ),
    ] = None,
    replication_factor: Annotated[
        int | None,
        typer.Option(
            "--replication-factor",
            "-r",
            help="Replicas per partition (default: the broker's default.replication.factor).",
            show_default=False,
        ),
    ] = None,
    config: ConfigOpt = None,
    if_not_exists: Annotated[bool, typer.Option("--if-not-exists", help="No error when it exists already.")] = False,
    from_file: Annotated[
        Path | None,
        typer.Option(
            "--from-file",
            show_default=False,
            help="Create every topic of a JSON file: "
            '{"topics": [{"name", "partitions", "replication_factor", "config"}]}; - for stdin.',
        ),
    ] = None,
    bootstrap: contexts.Bootstrap = None,
    output: OutputOpt = Output.text,
) -> None:
    """Create a topic; partitions are spread over the live brokers round-robin."""
    if from_file is not None:
        if name is not None or partitions is not None or replication_factor is not None or config:
            raise UsageError("--from-file takes every topic's settings from the file: give no name or options")
        _create_from_file(from_file, if_not_exists, bootstrap, output)
        return
    if name is None:
        raise UsageError("give a topic name, or --from-file FILE")
    _not_internal(name, "created")
    partitions = -1 if partitions is None else partitions  # -1: the broker's default, as CreateTopics says it
    replication_factor = -1 if replication_factor is None else replication_factor
    if partitions == 0 or partitions < -1:
        raise UsageError(f"--partitions {partitions}: must be at least 1")
    if replication_factor == 0 or replication_factor < -1:
        raise UsageError(f"--replication-factor {replication_factor}: must be at least 1")
    with Admin(contexts.bootstrap(bootstrap)) as admin:
        if if_not_exists and name in admin.list_topics():
            _say(output, f"topic {name} exists already", topic=name, created=False)
            return
        admin.create_topic(name, partitions, replication_factor, _configs(config))
        count = admin.list_topics().get(name, partitions)
    _say(output, f"created topic {name} with {count} partition(s)", topic=name, created=True, partitions=count)


def _create_from_file(path: Path, if_not_exists: bool, bootstrap: str | None, output: Output) -> None:
    """Every topic of a file, each reported; all are checked first, and a failure does not stop the others."""
    text = files.read_text(path)
    try:
        specs = parse_topic_specs(text)
    except ValueError as exc:
        raise UsageError(f"{path}: {exc}") from None
    failed = []
    with Admin(contexts.bootstrap(bootstrap)) as admin:
        existing = admin.list_topics()
        for spec in specs:
            if spec.name in existing and if_not_exists:
                _say(output, f"topic {spec.name} exists already", topic=spec.name, created=False)
                continue
            try:
                admin.create_topic(spec.name, spec.partitions, spec.replication_factor, spec.config)
            except KafkactlError as exc:
                failed.append(spec.name)
                _say(output, f"topic {spec.name}: {exc}", topic=spec.name, created=False, error=str(exc))
                continue
            count = admin.list_topics().get(spec.name, spec.partitions)
            _say(output, f"created topic {spec.name} with {count} partition(s)", topic=spec.name, created=True,
                 partitions=count)  # fmt: skip
    if failed:
        raise KafkactlError(f"{len(failed)} of {len(specs)} topic(s) not created: {', '.join(failed)}")


@app.command("list")
def list_(bootstrap: contexts.Bootstrap = None, output: OutputOpt = Output.text) -> None:
    """Every topic, with its partition count."""
    with Admin(contexts.bootstrap(bootstrap)) as admin:
        topics = admin.list_topics()
    if output == Output.json:
        for name, n in topics.items():
            json_line({"topic": name, "partitions": n})
        return
    table(["TOPIC", "PARTITIONS"], topics.items())


@app.command("describe")
def describe(
    name: Annotated[
        str | None,
        typer.Argument(
            autocompletion=completion.topics,
            help="Topic name (default: every topic).",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    under_replicated: Annotated[
        bool, typer.Option("--under-replicated", help="Only partitions with fewer in-sync replicas than replicas.")
    ] = False,
    offline: Annotated[bool, typer.Option("--offline", help="Only partitions without a leader.")] = False,
    bootstrap: contexts.Bootstrap = None,
    output: OutputOpt = Output.text,
) -> None:
    """Per partition: leader, replicas, ISR, log start and end offsets, size; and the topic's overrides.

    --under-replicated and --offline (Kafka's --under-replicated-partitions and --unavailable-partitions)
    keep only such partitions, and a topic with none of them is left out."""
    filtered = under_replicated or offline
    head = ["PARTITION", "LEADER", "REPLICAS", "ISR", "LOG START", "LOG END", "SIZE", "ERROR"]
    rows: list[tuple] = []  # of every topic, when no name is given (one table, with a TOPIC column)
    with Admin(contexts.bootstrap(bootstrap)) as admin:
        names = [name] if name is not None else list(admin.list_topics())
        for topic in names:
            parts = [p for p in admin.describe_topic(topic) if not filtered
                     or (under_replicated and p.under_replicated) or (offline and p.offline)]  # fmt: skip
            if filtered and not parts:
                continue
            config = admin.describe_config(topic)
            overrides = {k: v for k, (v, over) in config.items() if over}
            if output == Output.json:
                json_line({"topic": topic, "partitions": [asdict(p) for p in parts], "config": overrides})
            elif name is None:
                rows += [(topic, *_row(p)) for p in parts]
            else:
                extra = ", ".join(f"{k}={v}" for k, v in sorted(overrides.items()))
                if extra and not sys.stdout.isatty():  # (a pipe gets no table title: the overrides go first)
                    print(f"# {name} overrides: {extra}")
                table(head, [_row(p) for p in parts], title=f"{name}" + (f" ({extra})" if extra else ""))
    if name is None and output != Output.json:
        table(["TOPIC", *head], rows)


def _row(p: PartitionDescription) -> tuple:
    return (p.partition, p.leader, ",".join(map(str, p.replicas)), ",".join(map(str, p.isr)),
            _n(p.log_start_offset), _n(p.log_end_offset), _n(p.size), p.error or "")  # fmt: skip


def _n(value: int | None) -> str:
    return "" if value is None else str(value)


@app.command("alter")
def alter(
    name: Annotated[str, typer.Argument(autocompletion=completion.topics, help="Topic name.")],
    config: ConfigOpt = None,
    delete_config: Annotated[
        list[str] | None, typer.Option("--delete-config", help="Remove an override (repeatable).")
    ] = None,
    partitions: Annotated[
        int | None, typer.Option("--partitions", "-p", min=1, help="Raise the partition count to this (never lowered).")
    ] = None,
    bootstrap: contexts.Bootstrap = None,
    output: OutputOpt = Output.text,
) -> None:
    """Set or remove per-topic configuration overrides (the others stay), or add partitions.

    New partitions get the topic's replication factor, spread over the live brokers; keyed messages map to
    partitions by count, so a key's later messages may go to another partition than its earlier ones."""
    sets = _configs(config)
    if not sets and not delete_config and partitions is None:
        raise UsageError("nothing to change: give --partitions N, --config key=value or --delete-config key")
    if partitions is not None:
        _not_internal(name, "altered")
    result: dict[str, object] = {"topic": name}
    with Admin(contexts.bootstrap(bootstrap)) as admin:
        if partitions is not None:
            admin.create_partitions(name, partitions)
            result["partitions"] = partitions
            if output == Output.text:
                print(f"topic {name}: {partitions} partitions")
        if sets or delete_config:
            now = admin.alter_config(name, sets, list(delete_config or []))
            result["config"] = now
            if output == Output.text:
                print(f"topic {name}: " + (", ".join(f"{k}={v}" for k, v in sorted(now.items())) or "no overrides"))
    if output == Output.json:
        json_line(result)


@app.command("delete")
def delete(
    name: Annotated[str, typer.Argument(autocompletion=completion.topics, help="Topic name.")],
    execute: Annotated[bool, typer.Option("--execute", help="Really delete (otherwise: show what would go).")] = False,
    bootstrap: contexts.Bootstrap = None,
    output: OutputOpt = Output.text,
) -> None:
    """Delete a topic and all its data. Shows the plan unless --execute."""
    _not_internal(name, "deleted")
    with Admin(contexts.bootstrap(bootstrap)) as admin:
        parts = admin.describe_topic(name)
        if not execute:
            msgs = sum((p.log_end_offset or 0) - (p.log_start_offset or 0) for p in parts)
            size = sum(p.size or 0 for p in parts)
            _say(output, f"would delete topic {name}: {len(parts)} partition(s), {msgs} message offset(s), {size} "
                 "bytes; run again with --execute", topic=name, deleted=False, partitions=len(parts), messages=msgs,
                 bytes=size)  # fmt: skip
            return
        admin.delete_topic(name)
    _say(output, f"deleted topic {name}", topic=name, deleted=True)


@app.command("delete-records")
def delete_records(
    name: Annotated[str, typer.Argument(autocompletion=completion.topics, help="Topic name.")],
    before: Annotated[
        int,
        typer.Option(
            "--before", help="Delete every record below this offset; -1: up to the high watermark.", show_default=False
        ),
    ],
    partition: Annotated[
        list[int] | None,
        typer.Option(
            "--partition", "-P", help="Only this partition (repeatable; default: every partition).", show_default=False
        ),
    ] = None,
    bootstrap: contexts.Bootstrap = None,
    output: OutputOpt = Output.text,
) -> None:
    """Delete a topic's records below an offset (DeleteRecords): each partition's log start offset (its low
    watermark) moves up there, whole segments below it are deleted, and consumers from the earliest offset
    start there. One row per partition: its new low watermark, or why it failed.

    An offset past a partition's high watermark is refused for that partition (OFFSET_OUT_OF_RANGE) while the
    others are cut: exit code 1 naming how many partitions failed."""
    if before < -1:
        raise UsageError(f"--before must be an offset (0 or more) or -1 for the high watermark, not {before}")
    bad = [p for p in partition or [] if p < 0]
    if bad:
        raise UsageError(f"--partition must be 0 or more, not {bad[0]}")
    with Admin(contexts.bootstrap(bootstrap)) as admin:
        done, failed = admin.delete_records(name, before, partition)
    results = sorted([(p, low, None) for p, low in done.items()] + [(p, None, why) for p, why in failed.items()])
    if output == Output.json:
        for p, low, why in results:
            json_line({"topic": name, "partition": p, "low_watermark": low, "error": why})
    else:
        table(["PARTITION", "LOW WATERMARK", "RESULT"],
              [(p, _n(low), "deleted" if why is None else f"failed: {why}") for p, low, why in results],
              title=f"{name}: records before {'the high watermark' if before == -1 else before}")  # fmt: skip
    if failed:
        first = ", ".join(f"partition {p}: {why}" for p, why in sorted(failed.items())[:3])
        more = "" if len(failed) <= 3 else f", and {len(failed) - 3} more"
        raise KafkactlError(f"{len(failed)} of {len(results)} partitions of topic {name!r} failed ({first}{more})")


@app.command("elect-leaders")
def elect_leaders(
    names: Annotated[
        list[str] | None,
        typer.Argument(autocompletion=completion.topics, help="Topics (default: every topic).", show_default=False),
    ] = None,
    zookeeper: contexts.ZooKeeper = None,
    output: OutputOpt = Output.text,
) -> None:
    """Move each partition's leadership back to its preferred replica (the first of its assignment), where
    that replica is live and in sync, as Kafka's preferred replica election through ZooKeeper does.

    One row per partition: the leader it moved from and to, or why it did not move (already on its
    preferred replica; the preferred replica down or not in sync). Exit code 1 when a partition could not
    be moved."""
    with zkclient.session(contexts.zookeeper(zookeeper)) as zk:
        outcomes = preferred.elect(zk, names or None)
    if output == Output.json:
        for o in outcomes:
            json_line({"topic": o.topic, "partition": o.partition, "leader": o.after, "preferred": o.preferred,
                       "previous_leader": o.before, "moved": o.result == preferred.MOVED,
                       "result": o.result})  # fmt: skip
    else:
        table(["TOPIC", "PARTITION", "FROM", "TO", "RESULT"],
              [(o.topic, o.partition, _leader(o.before), _leader(o.after) if o.result == preferred.MOVED else "",
                o.result) for o in outcomes])  # fmt: skip
        moved = sum(o.result == preferred.MOVED for o in outcomes)
        already = sum(o.result == preferred.ALREADY for o in outcomes)
        print(f"{moved} partition(s) moved to their preferred replica, {already} already on it, "
              f"{len(outcomes) - moved - already} left elsewhere", file=sys.stderr)  # fmt: skip
    left = [f"{o.topic}-{o.partition}" for o in outcomes if o.off_preferred]
    if left:
        raise KafkactlError(f"{len(left)} partition(s) not on their preferred replica (down or not in sync): "
                            + ", ".join(left[:10]))  # fmt: skip


def _leader(broker_id: int) -> str:
    return "none" if broker_id < 0 else str(broker_id)


@app.command("reassign")
def reassign(
    plan: Annotated[
        Path | None,
        typer.Argument(help="A reassignment plan (kafka-reassign-partitions' JSON); - for stdin.", show_default=False),
    ] = None,
    execute: Annotated[bool, typer.Option("--execute", help="Start the moves (default: a dry run).")] = False,
    verify: Annotated[
        bool, typer.Option("--verify", help="Show each move's status; once all are done, remove the throttle.")
    ] = False,
    throttle: Annotated[
        int | None,
        typer.Option(
            "--throttle", min=1, help="With --execute: cap the copying at this many bytes/s.", show_default=False
        ),
    ] = None,
    generate: Annotated[
        bool, typer.Option("--generate", help="Print a plan spreading --topic over --brokers (nothing moves).")
    ] = False,
    topics: Annotated[
        list[str] | None,
        typer.Option(
            "--topic", "-t", help="With --generate: a topic to move (repeatable, or a,b).", show_default=False
        ),
    ] = None,
    brokers: Annotated[
        str | None,
        typer.Option("--brokers", help="With --generate: the broker ids to spread over (1,2,3).", show_default=False),
    ] = None,
    rollback_file: Annotated[
        Path | None,
        typer.Option(
            "--rollback-file",
            help="With --execute: write the rollback plan to this new file (default: to stdout).",
            show_default=False,
        ),
    ] = None,
    zookeeper: contexts.ZooKeeper = None,
    output: OutputOpt = Output.text,
) -> None:
    """Move partitions' replicas to other brokers, as kafka-reassign-partitions does through ZooKeeper.

    The plan is Kafka's JSON, {"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3]}]}.
    Without --execute nothing changes: each move is shown beside the partition's current replicas. With
    --execute the controller copies each partition to its new replicas, moves its leadership if the leader
    leaves, then drops the old replicas (their brokers delete their copies). --verify exits 0 once every move
    is done (and removes the throttle), 1 while some are in progress or failed.

    --execute prints the rollback plan (the moved partitions' current replicas, a plan this command takes
    back) on stdout, so `--execute > rollback.json` saves it, and the moves on stderr (with -o json: left
    out); with --rollback-file F the plan goes to F (written before anything moves) and the moves to stdout."""
    if sum((execute, verify, generate)) > 1:
        raise UsageError("give one of --execute, --verify and --generate")
    if throttle is not None and not execute:
        raise UsageError("--throttle goes with --execute")
    if rollback_file is not None and not execute:
        raise UsageError("--rollback-file goes with --execute")
    if rollback_file is not None and rollback_file.exists():
        raise UsageError(f"{rollback_file}: exists already (a rollback plan is never overwritten: give a new file)")
    if not generate and (topics or brokers):
        raise UsageError("--topic and --brokers go with --generate")
    if not generate and plan is None:
        raise UsageError("give a plan file (or - for stdin), or --generate")
    moves = reassignment.parse_plan(files.read_text(plan)) if plan is not None and not generate else {}
    with zkclient.session(contexts.zookeeper(zookeeper)) as zk:
        if generate:
            _generate(zk, topics, brokers)
            return
        if verify:
            _verify(zk, moves, output)
            return
        checked = reassignment.check_plan(zk, moves)
        moving = [m for m in checked if m.current != m.target]
        rollback = reassignment.plan_json({(m.topic, m.partition): m.current for m in moving}) if moving else None
        if execute and rollback is not None and rollback_file is not None:
            _write_new(rollback_file, rollback + "\n")  # before anything moves: no move without its way back
        started = reassignment.execute(zk, checked, throttle) if execute else []
    plan_on_stdout = execute and rollback_file is None and bool(started)  # stdout is the plan's alone then
    rows = [(m.topic, m.partition, _ids(m.current), _ids(m.target), "no" if m.current == m.target else "yes")
            for m in checked]  # fmt: skip
    if output == Output.json and not plan_on_stdout:
        for row in reassignment.describe_moves(checked):
            json_line(row)
    elif output == Output.text:
        table(["TOPIC", "PARTITION", "CURRENT", "TARGET", "MOVES"], rows, stderr=plan_on_stdout)
    if not execute:
        print(f"dry run: {len(moving)} partition(s) would move; nothing was changed (add --execute)", file=sys.stderr)
    elif not started:
        print("nothing to move: every partition is on its target replicas already", file=sys.stderr)
    else:
        where = f"the rollback plan is in {rollback_file}" if rollback_file else "the rollback plan is on stdout"
        print(
            f"started moving {len(started)} partition(s)"
            + (f", throttled at {throttle} B/s" if throttle else "")
            + f"; follow with --verify; {where} (`topic reassign PLAN --execute` takes it)",
            file=sys.stderr,
        )
        if plan_on_stdout:
            print(rollback, flush=True)


def _write_new(path: Path, text: str) -> None:
    """Write a file that must not exist yet (a rollback plan is never overwritten)."""
    try:
        with open(path, "x") as f:
            f.write(text)
    except FileExistsError:
        raise UsageError(f"{path}: exists already (a rollback plan is never overwritten: give a new file)") from None
    except OSError as exc:
        raise KafkactlError(f"cannot write the rollback plan to {path}: {exc.strerror or exc}") from None


def _ids(replicas: list[int]) -> str:
    return ",".join(map(str, replicas))


def _generate(zk, topics: list[str] | None, brokers: str | None) -> None:  # noqa: ANN001 (a kazoo client)
    names = [t for item in topics or [] for t in item.split(",") if t]
    if not names or not brokers:
        raise UsageError("--generate needs --topic and --brokers")
    try:
        ids = sorted({int(b) for b in brokers.split(",") if b.strip()})
    except ValueError:
        raise UsageError(f"--brokers takes broker ids separated by commas, not {brokers!r}") from None
    print(reassignment.plan_json(reassignment.propose(zk, names, ids)))


def _verify(zk, moves: dict[tuple[str, int], list[int]], output: Output) -> None:  # noqa: ANN001
    status = reassignment.status(zk, moves)
    if output == Output.json:
        for (t, p), state in sorted(status.items()):
            json_line({"topic": t, "partition": p, "target": moves[(t, p)], "status": state})
    else:
        table(["TOPIC", "PARTITION", "TARGET", "STATUS"],
              [(t, p, _ids(moves[(t, p)]), state) for (t, p), state in sorted(status.items())])  # fmt: skip
    left = {tp: state for tp, state in status.items() if state != "completed"}
    if any(state == "in progress" for state in left.values()):
        raise KafkactlError(f"{len(left)} of {len(status)} partition move(s) not completed yet")
    if reassignment.remove_throttle(zk, moves):
        print("throttle removed", file=sys.stderr)
    if left:
        raise KafkactlError(f"{len(left)} partition move(s) failed: " + ", ".join(f"{t}-{p}" for t, p in sorted(left)))
