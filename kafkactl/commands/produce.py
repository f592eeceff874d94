"""`kafkactl produce TOPIC`: messages from stdin or a file, one per line."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from broker.client import properties, shell
from broker.client.admin import Admin
from broker.client.producer import CODECS, AsyncProducer, parse_acks, producer_settings
from broker.client.security import pop_security
from broker.errors import KafkactlError, UsageError
from kafkactl import completion, contexts
from kafkactl.render import Output, json_line, progress


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
    prop: Annotated[
        list[str] | None,
        typer.Option(
            "--property",
            "-X",
            show_default=False,
            help="A producer property KEY=VALUE (repeatable; "
            "Kafka's keys, e.g. enable.idempotence=false, retries=5, or security ones such as "
            "security.protocol=SSL); over the options above.",
        ),
    ] = None,
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
    prints them). A summary goes to stderr; the exit code is 1 if any message was not acknowledged."""
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
        except OSError as exc:
            raise KafkactlError(f"cannot read {file}: {exc.strerror}") from None
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
        from broker.schema import wire  # fastavro: only when asked for

        try:
            schema_text = value_schema.read_text()
        except OSError as exc:
            raise KafkactlError(f"cannot read {value_schema}: {exc.strerror}") from None
        registry = wire.RegistryClient(contexts.schema_registry(schema_registry))
        encoder = wire.AvroEncoder(registry, subject or f"{topic}-value", schema_text)
    props = properties.pairs(prop or [], "--property")
    contexts.command_security(pop_security(props))  # -X security.protocol=SSL ... over the context's
    servers = contexts.bootstrap(bootstrap)
    settings = {"acks": ack, "compression_type": compression, "linger_ms": linger_ms, "batch_size": batch_size,
                "delivery_timeout_ms": delivery_timeout_ms, "max_request_size": max_message_bytes,
                **producer_settings(props)}  # fmt: skip
    summary = shell.ProduceSummary()

    async def run() -> None:
        if create:
            await asyncio.to_thread(_create_topic, servers, topic)
        producer = AsyncProducer(servers, **settings)
        await producer.start()
        try:
            typed = file is None and sys.stdin.isatty()  # someone typing: no bar (its end is not known)
            with progress(f"producing to {topic}", total, unit="bytes", enabled=not typed) as advance:
                messages = shell.stream_messages(stream.fileno(), **options)
                if encoder is not None:
                    messages = wire.avro_values(messages, encoder)
                grow = (lambda n: asyncio.to_thread(_grow_topic, servers, topic, n)) if create else None
                messages = shell.within_partitions(producer, topic, messages, grow, partition)
                await shell.produce_messages(producer, topic, messages, advance, summary)
        finally:
            await producer.close()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        summary.failures.append((0, "interrupted"))
    finally:
        if file is not None:
            stream.close()
        if output == Output.json:
            json_line(_summary_json(topic, summary))
        elif summary.messages or summary.failures:
            _print_summary(topic, summary)
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


def _summary_json(topic: str, summary: shell.ProduceSummary) -> dict:
    spans = {str(p): {"first_offset": a, "last_offset": b} for p, (a, b) in sorted(summary.partitions.items())}
    return {"topic": topic, "messages": summary.messages, "bytes": summary.bytes, "seconds": round(summary.seconds, 3),
            "failed": len(summary.failures), "partitions": spans}  # fmt: skip


def _print_summary(topic: str, summary: shell.ProduceSummary) -> None:
    spans = ", ".join(
        f"p{p} {a}..{b}" if a >= 0 else f"p{p} (acks=0: no offsets)" for p, (a, b) in sorted(summary.partitions.items())
    )
    rate = summary.messages / summary.seconds if summary.seconds else 0
    print(f"produced {summary.messages} message(s), {summary.bytes} bytes to {topic} in {summary.seconds:.2f}s "
          f"({rate:,.0f} msg/s){': ' + spans if spans else ''}", file=sys.stderr)  # fmt: skip
