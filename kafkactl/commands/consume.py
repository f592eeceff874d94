"""`kafkactl consume TOPIC`: read partitions from an offset, as text, a kcat format or JSON lines."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Annotated

import typer

from broker.client import shell
from broker.client.consumer import AsyncConsumer
from broker.client.offsets import BEGINNING, END, parse_offset
from broker.errors import UsageError
from kafkactl import contexts
from kafkactl.render import Output


def consume(
    topic: Annotated[str, typer.Argument(help="Topic to read.")],
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
        typer.Option("--exit", "-e", help="Stop at the end offsets pinned at start (the default unless --follow)."),
    ] = False,
    max_messages: Annotated[int | None, typer.Option("--max-messages", "-c", min=1, help="Stop after N.")] = None,
    output: Annotated[Output, typer.Option("-o", "--output", help="text or json (JSON lines).")] = Output.text,
    fmt: Annotated[
        str | None, typer.Option("--format", help="kcat tokens: %t %p %o %k %s %h %T %K %S (e.g. '%p:%o %k=%s\\n').")
    ] = None,
    key_decoder: Annotated[str, typer.Option("--key-decoder", help="utf8, hex, base64 or json.")] = "utf8",
    value_decoder: Annotated[str, typer.Option("--value-decoder", help="utf8, hex, base64 or json.")] = "utf8",
    bootstrap: contexts.Bootstrap = None,
) -> None:
    """Consume messages; Ctrl-C ends cleanly with a summary on stderr."""
    if follow and exit_at_end:
        raise UsageError("--follow and --exit exclude each other")
    for name, value in (("--key-decoder", key_decoder), ("--value-decoder", value_decoder)):
        if value not in shell.DECODERS:
            raise UsageError(f"{name} {value!r}: expected one of {', '.join(shell.DECODERS)}")
    spec = parse_offset(offset) if offset is not None else (END if follow else BEGINNING)
    render = shell.compile_format(fmt if fmt is not None else "%s\n") if output == Output.text else None
    summary = shell.ConsumeSummary()
    out = sys.stdout

    async def run() -> None:
        consumer = AsyncConsumer(contexts.bootstrap(bootstrap), fetch_max_wait_ms=500)
        await consumer.start()
        try:
            parts = await consumer.partitions_for(topic)
            chosen = sorted(set(partition)) if partition else parts
            missing = [p for p in chosen if p not in parts]
            if missing:
                raise UsageError(f"topic {topic!r} has no partition {missing[0]} (it has {len(parts)})")
            tps = [(topic, p) for p in chosen]
            async for recs in shell.consume_records(consumer, tps, spec, follow=follow, max_messages=max_messages,
                                                    summary=summary):  # fmt: skip
                if render is None:
                    out.write(
                        "".join(
                            json.dumps(shell.record_json(r), ensure_ascii=False, separators=(",", ":")) + "\n"
                            for r in recs
                        )
                    )
                else:
                    out.write("".join(render(r, key_decoder, value_decoder) for r in recs))
                out.flush()
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


def _print_summary(topic: str, summary: shell.ConsumeSummary) -> None:
    last = ", ".join(f"p{p}@{o}" for p, o in sorted(summary.last.items()))
    print(f"consumed {summary.messages} message(s), {summary.bytes} bytes from {topic}"
          f"{': last offsets ' + last if last else ''}", file=sys.stderr)  # fmt: skip
