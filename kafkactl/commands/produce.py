"""`kafkactl produce TOPIC`: messages from stdin or a file, one per line."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from broker.client import properties, shell
from broker.client.admin import Admin
from broker.client.producer import CODECS, AsyncProducer, ProduceStats, parse_acks, producer_settings
from broker.client.security import pop_security
from broker.errors import KafkactlError, UsageError
from kafkactl import completion, contexts, files
from kafkactl.render import Output, json_line

Properties = contexts.security_option(
    "A producer property KEY=VALUE (repeatable; "
    "Kafka's keys, e.g. enable.idempotence=false, retries=5, or security ones such as "
    "security.protocol=SSL); over the options above.",
    "--property",
    "-X",
)


def produce(
    topic: Annotated[str, typer.Argument(help="Topic to write to.", autocompletion=completion.topics)],
    file: Annotated[Path | None, typer.Option("--file", "-f", help="Read this file instead of stdin.")] = None,
    key_separator: Annotated[
        str | None, typer.Option("--key-separator", "-K", help="Split each line into key SEP value.")
    ] = None,
    input_format: Annotated[str, typer.Option("--input", help="text (a line a message) or json.")] = "text",
    partition: Annotated[
        int | None, typer.Option("--partition", "-p", help="Write every message here (over a JSON line's own).")
    ] = None,
    create: Annotated[
        bool, typer.Option("--create", help="Create the topic if needed, with the partitions the input names.")
    ] = False,
    ignore_unknown: Annotated[
        bool, typer.Option("--ignore-unknown-fields", help="With --input json: skip fields it does not know.")
    ] = False,
    header: Annotated[list[str] | None, typer.Option("--header", "-H", help="name=value on every message.")] = None,
    acks: Annotated[str, typer.Option("--acks", help="0, 1 or all.")] = "all",
    compression: Annotated[str, typer.Option("--compression", "-c", help="none, gzip, snappy, lz4, zstd.")] = "none",
    linger_ms: Annotated[float, typer.Option("--linger-ms", min=0, help="Wait this long to fill a batch.")] = 5,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Bytes per partition batch.")] = 16384,
    null_literal: Annotated[
        str | None, typer.Option("--null-literal", help="A key or value equal to this is sent as null.")
    ] = None,
    delivery_timeout_ms: Annotated[
        int, typer.Option("--delivery-timeout-ms", min=1, help="Give up on a message after this long.")
    ] = 120000,
    max_message_bytes: Annotated[
        int,
        typer.Option(
            "--max-message-bytes",
            min=1,
            help="The largest request, and so message, to send "
            "(max.request.size; the topic's max.message.bytes must allow it too).",
        ),
    ] = 1048576,
    prop: Properties = None,
    value_schema: Annotated[
        Path | None,
        typer.Option(
            "--value-schema",
            help="An Avro schema (.avsc): each value is a JSON document, sent as Avro in "
            "Confluent's framing; the schema is registered under --subject first.",
            show_default=False,
        ),
    ] = None,
    subject: Annotated[
        str | None,
        typer.Option(
            "--subject", help="With --value-schema: the subject (default TOPIC-value).", show_default=False
        ),  # fmt: skip
    ] = None,
    schema_registry: contexts.SchemaRegistry = None,
    bootstrap: contexts.Bootstrap = None,
    output: Annotated[
        Output, typer.Option("-o", "--output", help="text (a summary on stderr) or json (the summary on stdout).")
    ] = Output.text,
) -> None:
    """Produce one message per input line (text, optionally KEY<SEP>VALUE, or JSON lines as `consume -o json`
    prints them). A summary goes to stderr; the exit code is 1 if any message was not acknowledged. Ctrl-C (or
    SIGTERM) stops sending: the answers to requests in flight are awaited, the summary counts what the brokers
    acknowledged and says what is unknown, and the exit code is 130 (143); Ctrl-C again quits at once."""
    if input_format not in ("text", "json"):
        raise UsageError(f"--input {input_format!r}: expected text or json")
    if compression not in CODECS:
        raise UsageError(f"--compression {compression!r}: expected one of {', '.join(CODECS)}")
    if key_separator == "":
        raise UsageError("--key-separator cannot be empty")
    ack = parse_acks(acks)
    headers = [shell.parse_header(h) for h in header or []]
    if file is not None:
        try:
            stream = open(file, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            raise files.missing(file) from None
        except OSError as exc:
            raise KafkactlError(f"{file}: {(exc.strerror or str(exc)).lower()}") from None
        total = os.fstat(stream.fileno()).st_size
    else:
        stream, total = sys.stdin.buffer, None
    options = dict(
        input_format=input_format, key_separator=key_separator.encode() if key_separator else None,
        null_literal=null_literal.encode() if null_literal is not None else None, headers=headers,
        partition=partition, ignore_unknown=ignore_unknown,
    )  # fmt: skip
    if subject is not None and value_schema is None:
        raise UsageError("--subject needs --value-schema")
    encoder = None
    if value_schema is not None:
        from broker.schema_registry import wire  # fastavro: only when asked for

        schema_text = files.read_text(value_schema)
        registry = wire.RegistryClient(contexts.schema_registry(schema_registry))
        encoder = wire.AvroEncoder(registry, subject or f"{topic}-value", schema_text)
    props = properties.pairs(prop or [], "--property")
    contexts.command_security(pop_security(props))  # -X security.protocol=SSL ... over the context's
    servers = contexts.bootstrap(bootstrap)
    settings = {"acks": ack, "compression_type": compression, "linger_ms": linger_ms, "batch_size": batch_size,
                "delivery_timeout_ms": delivery_timeout_ms, "max_request_size": max_message_bytes,
                **producer_settings(props)}  # fmt: skip
    summary = shell.ProduceSummary()
    typed = file is None and sys.stdin.isatty()  # someone typing: no bar (its end is not known)
    bar = _Progress(f"producing to {topic}", total, enabled=not typed)
    stop = _Stop(bar, settings.get("request_timeout_ms", 30000) / 1000)

    async def run() -> None:
        stop.arm(asyncio.get_running_loop())
        producer = stop.producer = AsyncProducer(servers, on_notice=bar.notice, **settings)
        try:
            if create:
                await asyncio.to_thread(_create_topic, servers, topic)
            await producer.start([topic])
            with bar.showing(producer):
                messages = shell.stream_messages(stream.fileno(), **options)
                if encoder is not None:
                    messages = wire.avro_values(messages, encoder)
                grow = (lambda n: asyncio.to_thread(_grow_topic, servers, topic, n)) if create else None
                messages = stop.reading(shell.within_partitions(producer, topic, messages, grow, partition))
                await shell.produce_messages(producer, topic, messages, bar.advance, summary)
        except asyncio.CancelledError:
            if not stop.code:
                raise
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
        finally:
            await producer.close()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:  # (before the handlers were set, or after)
        stop.code = stop.code or 130
    finally:
        if file is not None:
            stream.close()
        stats = stop.producer.stats if stop.producer is not None else None
        if output == Output.json:
            json_line(_summary_json(topic, summary, stats, stop.code))
        elif summary.messages or summary.failures or stop.code:
            _print_summary(topic, summary, stats)
    if stop.code:
        raise _interrupted(summary, stats, stop.code, stop.read_all)
    if summary.failures:
        first = summary.failures[0]
        more = f" (and {len(summary.failures) - 1} more)" if len(summary.failures) > 1 else ""
        where = f"line {first[0]}: " if first[0] else ""
        hint = "; raise it with --max-message-bytes" if "max.request.size" in first[1] else ""
        raise KafkactlError(f"{len(summary.failures)} message(s) not acknowledged; {where}{first[1]}{more}{hint}")


def _create_topic(servers: str, topic: str) -> None:
    with Admin(servers) as admin:
        if topic not in admin.list_topics():
            try:
                admin.create_topic(topic, 1)
            except KafkactlError as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise


def _grow_topic(servers: str, topic: str, count: int) -> None:
    with Admin(servers) as admin:
        admin.create_partitions(topic, count)


def _summary_json(topic: str, summary: shell.ProduceSummary, stats: ProduceStats | None, signal_code: int) -> dict:
    spans = {str(p): {"first_offset": a, "last_offset": b} for p, (a, b) in sorted(summary.partitions.items())}
    out = {"topic": topic, "messages": summary.messages, "bytes": summary.bytes, "seconds": round(summary.seconds, 3),
           "failed": len(summary.failures), "partitions": spans}  # fmt: skip
    if stats is not None:
        out.update({"unknown": stats.unknown, "retries": dict(stats.retries), "throttled": stats.throttled,
                    "throttle_ms": stats.throttle_ms,
                    "leader_wait_seconds": round(stats.leader_wait_s, 3)})  # fmt: skip
    if signal_code:
        out["interrupted"] = True
    return out


def _print_summary(topic: str, summary: shell.ProduceSummary, stats: ProduceStats | None) -> None:
    spans = ", ".join(
        f"p{p} {a}..{b}" if a >= 0 else f"p{p} (acks=0: no offsets)" for p, (a, b) in sorted(summary.partitions.items())
    )
    waits = stats.describe() if stats is not None else ""
    print(f"produced {summary.messages} message(s), {summary.bytes} bytes to {topic} in {summary.seconds:.2f}s"
          f"{_rate(summary.messages, summary.seconds)}{': ' + spans if spans else ''}{'; ' + waits if waits else ''}",
          file=sys.stderr)  # fmt: skip


def _rate(messages: int, seconds: float) -> str:
    """` (1,234 msg/s)`, with the precision a small rate needs; nothing for under a second or a message or two
    (a rate of those says nothing)."""
    if seconds < 1 or messages < 3:
        return ""
    rate = messages / seconds
    return f" ({rate:,.0f} msg/s)" if rate >= 100 else f" ({rate:.1f} msg/s)" if rate >= 1 else f" ({rate:.2f} msg/s)"


def _interrupted(summary: shell.ProduceSummary, stats: ProduceStats | None, code: int,
                 read_all: bool) -> KafkactlError:  # fmt: skip
    """The error of an interrupted produce: what the brokers did not acknowledge, and of it what may be in the
    log all the same (a re-run of those lines would duplicate them); its exit code the signal's (130: SIGINT)."""
    failed = len(summary.failures)
    unknown = min(stats.unknown, failed) if stats is not None else 0
    what = "interrupted" if code == 130 else "terminated"
    if not failed:
        text = f"{what}: every message read was acknowledged ({summary.messages})"
    elif unknown:
        text = (f"{what}: {summary.messages} message(s) acknowledged, {failed} not: {failed - unknown} not appended, "
                f"{unknown} unknown (unanswered: they may be in the log, a re-run would duplicate them)")  # fmt: skip
    else:
        text = f"{what}: {summary.messages} message(s) acknowledged, {failed} not (none of them appended)"
    err = KafkactlError(text if read_all else text + "; the input after them was not read")
    err.exit_code = code
    return err


class _Stop:
    """SIGINT (Ctrl-C) and SIGTERM: the producer sends nothing more and the answers to requests in flight are
    awaited (up to request.timeout.ms), so the summary counts exactly what the brokers acknowledged; a second
    signal quits at once."""

    def __init__(self, bar: _Progress, wait_s: float) -> None:
        self.bar, self.wait_s = bar, wait_s
        self.code = 0
        self.producer: AsyncProducer | None = None
        self._task: asyncio.Task | None = None
        self.read_all = False

    def arm(self, loop: asyncio.AbstractEventLoop) -> None:
        self._task = asyncio.current_task()
        for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
            loop.add_signal_handler(sig, self._on_signal, code)

    async def reading(self, messages: AsyncIterator[shell.Message]) -> AsyncIterator[shell.Message]:
        """`messages`, noting when they are all read (then a signal no longer cancels: the answers are awaited)."""
        async for m in messages:
            yield m
        self.read_all = True

    def _on_signal(self, code: int) -> None:
        if self.code:
            acked = self.producer.stats.acked if self.producer is not None else 0
            self.bar.notice(f"interrupted again: quitting now ({acked} message(s) acknowledged so far; the answers to "
                            "the rest are unknown)")  # fmt: skip
            sys.stderr.flush()
            os._exit(code)
        self.code = code
        in_flight = self.producer.stop("interrupted") if self.producer is not None else 0
        if in_flight:
            self.bar.notice(f"interrupted: sending nothing more; waiting up to {self.wait_s:g} s for the answers to "
                            f"{in_flight} message(s) in flight (again to quit at once)")  # fmt: skip
        flushing = self.producer is not None and self.producer.flushing  # (after an input error: counted next)
        if not self.read_all and not flushing and self._task is not None:
            self._task.cancel()


class _Progress:
    """On a terminal (stderr), a line updated four times a second while producing: the input read (a bar when
    its size is known) and the messages acknowledged; nothing in a pipe. Notices print above it."""

    def __init__(self, description: str, total: int | None, *, enabled: bool) -> None:
        self.description, self.total = description, total
        self.enabled = enabled and sys.stderr.isatty()
        self.read = 0
        self._bar: Any = None

    def advance(self, n: int = 1) -> None:
        self.read += n

    def notice(self, text: str) -> None:
        if self._bar is not None:
            self._bar.console.print(f"kafkactl: {text}", markup=False, highlight=False, soft_wrap=True)
        else:
            print(f"kafkactl: {text}", file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def showing(self, producer: AsyncProducer) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

        columns = [TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                   TextColumn("{task.fields[acked]:,} acknowledged"), TimeElapsedColumn()]  # fmt: skip
        with Progress(*columns, console=Console(stderr=True), transient=True, refresh_per_second=4) as bar:
            task = bar.add_task(self.description, total=self.total, acked=0)
            self._bar = bar
            ticker = asyncio.get_running_loop().create_task(self._tick(bar, task, producer))
            try:
                yield
            finally:
                ticker.cancel()
                self._bar = None

    async def _tick(self, bar: Any, task: Any, producer: AsyncProducer) -> None:
        while True:
            bar.update(task, completed=self.read, acked=producer.stats.acked)
            await asyncio.sleep(0.25)
