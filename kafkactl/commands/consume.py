"""`kafkactl consume TOPIC`: read partitions from an offset, as text, a kcat format or JSON lines.

With `--group G` it is a member of a consumer group: coordinated through ZooKeeper (the paper's
rebalance), or by the broker's group coordinator when the cluster has an authorizer. The group decides
the partitions, the committed offsets (or `--reset`) where each starts, and it follows until Ctrl-C,
which commits and leaves the group cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import Callable
from typing import Annotated

import typer

from broker.client import group_mode, properties, shell
from broker.client.aio import set_wait_report
from broker.client.consumer import AsyncConsumer, ConsumeError, ConsumerRecord, describe_partitions
from broker.client.group import GroupConsumer
from broker.client.group_member import check_group_id, describe_assignment, settings_from_properties
from broker.client.kafka_group import KafkaGroupConsumer
from broker.client.offsets import BEGINNING, END, parse_offset
from broker.client.security import pop_security
from broker.errors import UsageError
from broker.protocol.errors import ErrorCode
from kafkactl import completion, contexts
from kafkactl.render import Output

Properties = contexts.security_option(
    "A security setting KEY=VALUE (repeatable), e.g. security.protocol=SSL; and with --group a "
    "consumer property, e.g. zookeeper.session.timeout.ms=6000, auto.commit.interval.ms=5000.",
    "--property",
    "-X",
)

#: --isolation's values → Fetch's isolation_level
_ISOLATION = {"read-uncommitted": 0, "read-committed": 1}


def consume(
    topic: Annotated[str, typer.Argument(help="Topic to read.", autocompletion=completion.topics)],
    partition: Annotated[list[int] | None, typer.Option("--partition", "-p", help="Only these (repeatable).")] = None,
    offset: Annotated[
        str | None,
        typer.Option(
            "--offset",
            help="beginning, end, N, -N, @epoch-ms, ISO date-time, or a duration ago (10m). "
            "Default: beginning, or end with --follow.",
        ),
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep reading new messages until Ctrl-C.")] = False,
    exit_at_end: Annotated[
        bool,
        typer.Option(
            "--exit", "-e", help="Stop at the end offsets pinned at start (the default unless --follow or --group)."
        ),
    ] = False,
    max_messages: Annotated[int | None, typer.Option("--max-messages", "-c", min=1, help="Stop after N.")] = None,
    until: Annotated[
        str | None,
        typer.Option(
            "--until",
            show_default=False,
            help="Stop each partition before this offset or time "
            "(N, @epoch-ms, ISO date-time, a duration ago): with --offset, a window.",
        ),
    ] = None,
    grep: Annotated[
        str | None,
        typer.Option(
            "--grep",
            show_default=False,
            help="Only messages whose key, value or a header value "
            "matches this regular expression (counted by -c too).",
        ),
    ] = None,
    isolation: Annotated[
        str,
        typer.Option(
            "--isolation",
            help="read-uncommitted (every message, as Kafka's console consumer) or read-committed (only "
            "committed transactions' messages, up to the last stable offset).",
        ),
    ] = "read-uncommitted",
    output: Annotated[Output, typer.Option("-o", "--output", help="text or json (JSON lines).")] = Output.text,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="kcat tokens: %t %p %o %k %s %h %T %K %S, and %I: the time in ISO-8601 UTC "
            "(e.g. '%I %p:%o %k=%s\\n').",
        ),
    ] = None,
    key_decoder: Annotated[str, typer.Option("--key-decoder", help="utf8, hex, base64 or json.")] = "utf8",
    value_decoder: Annotated[
        str,
        typer.Option(
            "--value-decoder",
            help="utf8, hex, base64, json, or avro (Confluent's framing; each schema "
            "fetched once from --schema-registry).",
        ),
    ] = "utf8",
    schema_registry: contexts.SchemaRegistry = None,
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            "-g",
            help="Consume as a member of this group (coordinated through ZooKeeper, or by the brokers when the cluster "
            "has an authorizer; follows until Ctrl-C unless --exit or -c).",
            show_default=False,
        ),
    ] = None,
    reset: Annotated[
        str | None,
        typer.Option(
            "--reset",
            help="With --group: earliest or latest, where a partition without a committed "
            "offset starts (auto.offset.reset; default latest).",
            show_default=False,
        ),
    ] = None,
    prop: Properties = None,
    bootstrap: contexts.Bootstrap = None,
    zookeeper: contexts.ZooKeeper = None,
) -> None:
    """Consume messages; Ctrl-C ends cleanly with a summary on stderr."""
    if follow and exit_at_end:
        raise UsageError("--follow and --exit exclude each other")
    for name, value, allowed in (("--key-decoder", key_decoder, shell.DECODERS),
                                 ("--value-decoder", value_decoder, (*shell.DECODERS, "avro"))):  # fmt: skip
        if value not in allowed:
            raise UsageError(f"{name} {value!r}: expected one of {', '.join(allowed)}")
    if isolation not in _ISOLATION:
        raise UsageError(f"--isolation {isolation!r}: expected read-uncommitted or read-committed")
    isolation_level = _ISOLATION[isolation]
    if fmt is not None and output == Output.json:
        raise UsageError("--format shapes text output: give -o text (the default) or drop --format")
    told: set[str] = set()
    set_wait_report(_say)  # partitions waiting for a reachable leader (and --group's), and when they resume

    def say_once(what: str, line: str) -> None:
        if what not in told:
            told.add(what)
            print(f"kafkactl: note: {line}", file=sys.stderr, flush=True)

    def not_json() -> None:
        say_once("json", "some keys or values are not JSON: shown as text")

    def clamped(tp: tuple[str, int], asked: int, end: int) -> None:
        where = f"past its end ({end})" if asked > end else "before its first offset"
        say_once(f"clamped-{tp[1]}", f"partition {tp[1]}: offset {asked} is {where}; reading from "
                                     f"{'the end' if asked > end else 'its start'}")  # fmt: skip

    render = shell.compile_format(fmt if fmt is not None else "%s\n", not_json) if output == Output.text else None
    summary = shell.ConsumeSummary()
    out = sys.stdout

    avro = None
    if value_decoder == "avro":  # values become their JSON text, then shown as such
        from broker.schema_registry import wire  # fastavro: only when asked for

        registry = wire.RegistryClient(contexts.schema_registry(schema_registry))
        avro = wire.AvroDecoder(registry, lambda reason: say_once(reason, reason))
        value_decoder = "utf8"

    def emit(recs: list[ConsumerRecord]) -> None:
        if avro is not None:
            recs = [r._replace(value=avro(r.value)) for r in recs]
        if render is None:
            out.write(
                "".join(
                    json.dumps(shell.record_json(r), ensure_ascii=False, separators=(",", ":")) + "\n" for r in recs
                )
            )
        else:
            out.write("".join(render(r, key_decoder, value_decoder) for r in recs))
        out.flush()

    if group is not None and (until is not None or grep is not None):
        raise UsageError(f"{'--until' if until is not None else '--grep'} cannot be used with --group")
    props = properties.pairs(prop or [], "--property")
    contexts.command_security(pop_security(props))  # -X security.protocol=SSL ... over the context's
    if group is not None:
        if isolation_level:
            props.setdefault("isolation.level", "read_committed")
        _consume_group(topic, group, partition=partition, offset=offset, reset=reset, props=props,
                       follow=not exit_at_end, max_messages=max_messages, emit=emit, summary=summary,
                       bootstrap=bootstrap, zookeeper=zookeeper)  # fmt: skip
        return
    if reset is not None or props:
        raise UsageError(f"{'--reset' if reset is not None else '--property'} needs --group")
    spec = parse_offset(offset) if offset is not None else (END if follow else BEGINNING)
    stop_at = parse_offset(until) if until is not None else None
    if stop_at is not None and (follow or stop_at.kind == "relative"):
        raise UsageError("--until takes an offset or a time, and cannot be used with --follow")
    match = shell.grep_matcher(grep) if grep is not None else None

    reading: list[tuple[str, int]] = []  # the partitions chosen, for the warning's wording

    def warn_offline(tps: list[tuple[str, int]]) -> None:
        has = "has" if len(tps) == 1 else "have"
        rest = "reading the others" if len(tps) < len(reading) else "waiting for a leader"
        print(f"kafkactl: warning: {describe_partitions(tps)} {has} no leader; {rest}", file=sys.stderr, flush=True)

    async def run() -> None:
        consumer = AsyncConsumer(contexts.bootstrap(bootstrap), fetch_max_wait_ms=500, isolation_level=isolation_level)
        await consumer.start()
        try:
            parts = await consumer.partitions_for(topic)
            chosen = sorted(set(partition)) if partition else parts
            missing = [p for p in chosen if p not in parts]
            if missing:
                raise UsageError(f"topic {topic!r} has no partition {missing[0]} (it has {len(parts)})")
            tps = reading[:] = [(topic, p) for p in chosen]
            async for recs in shell.consume_records(consumer, tps, spec, follow=follow, max_messages=max_messages,
                                                    summary=summary, on_offline=warn_offline,
                                                    on_clamped=clamped, until=stop_at, match=match):  # fmt: skip
                emit(recs)
        finally:
            await consumer.close()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass  # Ctrl-C ends a consume cleanly, with its summary
    except BaseException:
        if summary.messages:  # what was printed before the failure is accounted for; the error line follows
            _print_summary(topic, summary)
        raise
    _print_summary(topic, summary)


def _consume_group(topic: str, group: str, *, partition: list[int] | None, offset: str | None, reset: str | None,
                   props: dict[str, str], follow: bool, max_messages: int | None,
                   emit: Callable[[list[ConsumerRecord]], None], summary: shell.ConsumeSummary,
                   bootstrap: str | None, zookeeper: str | None) -> None:  # fmt: skip
    """`consume --group`: a group member until Ctrl-C / SIGTERM (or the ends with --exit, or -c N).

    With an authorizer on the brokers, a member of the broker's group coordinator (KafkaGroupConsumer: the
    authorizer checks Read on the group and the topic as for any client); without one, a member of the
    ZooKeeper-coordinated group (GroupConsumer, the paper's way), once ZooKeeper is checked to be -b's
    cluster's. Every record the group hands out is printed, so what it commits on leaving is exactly what was
    shown.
    """
    check_group_id(group)
    if offset is not None:
        raise UsageError("--offset cannot be used with --group: the group's committed offsets decide where each "
                         "partition starts (--reset earliest|latest where there is none)")  # fmt: skip
    if partition:
        raise UsageError("--partition cannot be used with --group: the group assigns the partitions")
    if reset is not None and reset not in ("earliest", "latest"):
        raise UsageError(f"--reset {reset!r}: expected earliest or latest")
    settings = settings_from_properties(props)
    if reset is not None:
        settings["auto_offset_reset"] = reset
    bs = contexts.bootstrap(bootstrap)

    def assigned(tps: list[tuple[str, int]]) -> None:
        print(f"group {group}: assigned {describe_assignment([topic], tps)}", file=sys.stderr, flush=True)

    async def run() -> None:
        async with AsyncConsumer(bs) as probe:  # an unknown topic is an error, as without --group
            await probe.partitions_for(topic)
            secured = await group_mode.has_authorizer_async(probe.cluster)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGTERM, stop.set)  # SIGTERM leaves as cleanly as Ctrl-C
        consumer: GroupConsumer | KafkaGroupConsumer
        if secured:
            consumer = KafkaGroupConsumer(bs, group, [topic], on_assign=assigned, **settings)
        else:
            consumer = GroupConsumer(bs, contexts.zookeeper(zookeeper), group, [topic], on_assign=assigned,
                                     require_topics=True, **settings)  # fmt: skip
        t0 = time.perf_counter()
        await consumer.start()
        try:
            ends: dict[tuple[str, int], int] = {}  # with --exit: each partition's end when it was assigned
            stuck = 0.0  # with --exit: since when only partitions without a (reachable) leader are left
            while not stop.is_set():
                limit = None if max_messages is None else max_messages - summary.messages
                for tp, recs in (await consumer.getmany(timeout_ms=500, max_records=limit)).items():
                    summary.messages += len(recs)
                    summary.bytes += sum(len(r.value or b"") + len(r.key or b"") for r in recs)
                    summary.last[tp[1]] = recs[-1].offset
                    emit(recs)
                if max_messages is not None and summary.messages >= max_messages:
                    break
                if not follow:
                    owned = consumer.assignment()
                    offline = consumer.leaderless()  # their ends are looked up once they have a leader again
                    new = [tp for tp in owned if tp not in ends and tp not in offline]
                    if new:
                        ends.update(await consumer.end_offsets(new))
                    if all((consumer.position(tp) or 0) >= ends[tp] for tp in owned if tp in ends):
                        if offline:
                            # a leader not elected or reached yet (one killed) is waited for, up to the request timeout
                            fetching = consumer.consumer
                            stuck = stuck or time.monotonic()
                            if (
                                any(not fetching.cluster.offline(tp) for tp in offline)
                                and time.monotonic() - stuck < fetching.config.request_timeout_ms / 1000
                            ):
                                continue  # fmt: skip
                            why = ("LEADER_NOT_AVAILABLE" if all(fetching.cluster.offline(tp) for tp in offline)
                                   else fetching.cluster.why_leaderless(offline))  # fmt: skip
                            raise ConsumeError(f"{describe_partitions(offline)} not read: no leader ({why})",
                                               ErrorCode.LEADER_NOT_AVAILABLE)  # fmt: skip
                        break
                    stuck = 0.0
        finally:
            summary.seconds = time.perf_counter() - t0
            await consumer.close()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass  # Ctrl-C: the consumer committed and left the group; the summary follows
    except BaseException:
        if summary.messages:
            _print_summary(topic, summary)
        raise
    _print_summary(topic, summary)


def _say(line: str) -> None:
    """A note on stderr (partitions waiting for a leader, their return), between the records on stdout."""
    print(f"kafkactl: {line}", file=sys.stderr, flush=True)


def _print_summary(topic: str, summary: shell.ConsumeSummary) -> None:
    last = ", ".join(f"p{p}@{o}" for p, o in sorted(summary.last.items()))
    print(f"consumed {summary.messages} message(s), {summary.bytes} bytes from {topic}"
          f"{': last offsets ' + last if last else ''}", file=sys.stderr)  # fmt: skip
