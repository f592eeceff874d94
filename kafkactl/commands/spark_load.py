"""`kafkactl spark-load TOPIC... --to PATH`: load closed offset ranges into files with Spark, exactly once."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated

import typer
from typer.exceptions import Exit

from broker.client import properties
from broker.client.offsets import parse_offset
from broker.errors import KafkactlError, UsageError
from kafkactl import completion, contexts
from kafkactl.render import Output, Status, json_line, progress, table


def _until(text: str | None) -> int | None:
    """`latest` (None) or an epoch-ms time from the shared offset grammar (@ms, ISO-8601, a duration ago)."""
    if text is None:
        return None
    spec = parse_offset(text)
    if spec.kind == "end":
        return None
    if spec.kind != "timestamp":
        raise UsageError(f"--until {text!r}: expected latest, @epoch-ms, an ISO-8601 date-time or a duration ago")
    return spec.value


def _columns(items: list[str] | None) -> list[str] | None:
    if items is None:
        return None
    return [c.strip() for item in items for c in item.split(",") if c.strip()]


def spark_load(
    topics: Annotated[
        list[str], typer.Argument(help="Topics to load.", show_default=False, autocompletion=completion.topics)
    ],
    to: Annotated[
        Path | None,
        typer.Option(
            "--to",
            help="Directory of the files (and of the commit log, in PATH/_kafkactl).",
            metavar="PATH",
            show_default=False,
        ),
    ] = None,
    old_output: Annotated[
        Path | None, typer.Option("--output", hidden=True, help="Deprecated spelling of --to.", show_default=False)
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format", help="parquet, json, csv or orc (default: as earlier loads, else parquet).", show_default=False
        ),
    ] = None,
    master: Annotated[
        str,
        typer.Option(
            "--master", help="Spark master: local[*], local[N], spark://host:port.", envvar="KAFKACTL_SPARK_MASTER"
        ),
    ] = "local[*]",
    conf: Annotated[
        list[str] | None,
        typer.Option(
            "--conf",
            metavar="KEY=VALUE",
            show_default=False,
            help="A Spark setting, as spark-submit's --conf (repeatable), e.g. spark.executor.memory=2g.",
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(
            "--until",
            help="latest, or a time (@epoch-ms, ISO-8601, 10m ago): load what came before it.",
            show_default=False,
        ),
    ] = None,
    value_format: Annotated[
        str | None,
        typer.Option(
            "--value-format",
            help="raw (binary), utf8 (strings), json (value parsed) or avro (Confluent-framed Avro into typed "
            "columns, the latest <topic>-value schema of --schema-registry); default: as earlier loads, else raw.",
            show_default=False,
        ),
    ] = None,
    partition_by: Annotated[
        list[str] | None,
        typer.Option(
            "--partition-by",
            help="Directory columns: topic, partition, timestampType, date, hour (repeatable or comma-separated).",
            show_default=False,
        ),
    ] = None,
    fail_on_data_loss: Annotated[
        bool,
        typer.Option(
            "--fail-on-data-loss/--no-fail-on-data-loss",
            help="Stop when offsets to load were removed by retention (else warn and skip them).",
        ),
    ] = True,
    skip_offline: Annotated[
        bool,
        typer.Option("--skip-offline", help="Load the partitions that have a leader; warn of those that do not."),
    ] = False,
    max_records_per_file: Annotated[
        int | None,
        typer.Option("--max-records-per-file", min=1, help="Split ranges so no file holds more.", show_default=False),
    ] = None,
    min_partitions: Annotated[
        int | None,
        typer.Option("--min-partitions", min=1, help="Split ranges into at least this many files.", show_default=False),
    ] = None,
    audit: Annotated[
        bool,
        typer.Option(
            "--audit",
            help="Publish per-window counts of the audited messages each committed load "
            "holds to the cluster's kafkactl-audit topic (kafkactl audit reads them).",
        ),
    ] = False,
    audit_window_ms: Annotated[
        int, typer.Option("--audit-window-ms", min=1, help="The audit's window (the producers' audit.window.ms).")
    ] = 60000,
    schema_registry: contexts.SchemaRegistry = None,
    bootstrap: contexts.Bootstrap = None,
    out_format: Annotated[Output, typer.Option("-o", "--output-format", help="text or json.")] = Output.text,
) -> None:
    """Load each partition's new offsets (from the last committed load to the end, or to --until) into files
    named TOPIC+PARTITION+FIRST+LAST, exactly once: the plan is logged before Spark runs, the offsets are
    committed only after the files are in place, and an interrupted load is finished or rolled back first.
    A topic's leading . or _ is written %2E or %5F in file names (Spark hides names starting with either).
    A topic the cluster does not have fails the load before anything is written under PATH."""
    try:
        from broker.spark import load  # pyspark and pyarrow: the optional `spark` extra, imported only here
    except ImportError as exc:
        raise KafkactlError(f"spark-load needs pyspark and pyarrow: pip install 'kafkactl[spark]' ({exc})") from None
    opts = load.LoadOptions(
        topics=list(topics), output=_destination(to, old_output), bootstrap=contexts.bootstrap(bootstrap), format=fmt,
        value_format=value_format, partition_by=_columns(partition_by), until=_until(until),
        fail_on_data_loss=fail_on_data_loss, skip_offline=skip_offline, min_partitions=min_partitions,
        max_records_per_file=max_records_per_file, audit=audit, audit_window_ms=audit_window_ms,
        schema_registry=contexts.schema_registry(schema_registry),
    )  # fmt: skip
    load.resolve_layout(opts, None)  # usage errors before touching anything
    spark_conf = properties.pairs(conf or [], "--conf")

    def notify(message: str) -> None:
        print(message, file=sys.stderr)

    before = load.committed_ids(opts.output)
    _quiet_py4j()
    sigint = _SigintSeen()
    # On a terminal, a spinner says what runs while nothing else shows (checking the topics, planning, starting
    # Spark's JVM: easily 15 s and more), then the job's own bar, then the commit.
    status = Status(f"spark-load: checking the topics, planning the load, starting Spark ({master})")

    @contextlib.contextmanager
    def staged(description: str, total: int) -> Iterator[Callable[[int], None]]:
        with status.paused():
            with progress(description, total) as advance:
                yield advance
            status.update("spark-load: committing the load")

    try:
        with status:
            result = load.run(opts, master=master, notify=notify, progress=staged, conf=spark_conf)
    except (KeyboardInterrupt, Exception) as exc:
        # Ctrl-C: one line saying where the load stands, not Spark's noise. (It may surface as a Spark error: the
        # terminal's SIGINT reaches Spark's processes too, and the job can fail before Python sees it.)
        if not isinstance(exc, KeyboardInterrupt) and not sigint.seen():
            raise
        print(f"kafkactl: interrupted: {load.interrupted_state(opts.output, before)}", file=sys.stderr, flush=True)
        raise Exit(130) from None
    finally:
        sigint.close()
    if out_format == Output.json:
        json_line(result.to_json())
        return
    if result.noop:
        before = " before --until" if opts.until is not None else ""
        print(f"nothing to load: {', '.join(sorted(set(topics)))} holds no offsets{before} after the committed ones")
        return
    rows = [
        (r.topic, r.partition, f"{r.start}..{r.last}", r.rows, r.expected,
         "ok" if r.rows == r.expected else f"{r.rows - r.expected:+d}")
        for r in result.ranges
    ]  # fmt: skip
    expected = sum(r.expected for r in result.ranges)
    title = (f"load {result.load_id} → {result.output} ({result.layout.format}): {result.rows} of {expected} "
             f"row(s) in {result.files} file(s), {result.seconds:.1f}s")  # fmt: skip
    table(["TOPIC", "PARTITION", "PLANNED", "ROWS", "EXPECTED", "CHECK"], rows, title=title)
    if not sys.stdout.isatty():
        print(title, file=sys.stderr)
    if result.mismatches:
        notify(f"warning: {len(result.mismatches)} range(s) hold fewer or more rows than offsets "
               "(compacted or transactional gaps, or data lost with --no-fail-on-data-loss)")  # fmt: skip


class _SigintSeen:
    """Whether a SIGINT arrived, whoever's handler took it (pyspark replaces the handler when it starts): the
    interpreter writes each signal's number to the wakeup fd before any Python handler runs."""

    def __init__(self) -> None:
        self._r, w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(w, False)
        self._w = w
        try:
            self._old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except ValueError:  # not the main thread
            self._old = None

    def seen(self) -> bool:
        try:
            return bytes([signal.SIGINT]) in os.read(self._r, 4096)
        except BlockingIOError:
            return False

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            if self._old is not None:
                signal.set_wakeup_fd(self._old)
        os.close(self._r)
        os.close(self._w)


def _quiet_py4j() -> None:
    """py4j's threads log a traceback each when the JVM goes away under them (Ctrl-C): the load's own line
    says what happened (`--debug` shows them)."""
    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        logging.getLogger("py4j").setLevel(logging.CRITICAL + 1)
        threading.excepthook = lambda args: None
        for handler in logging.getLogger().handlers:  # (py4j also logs through the root logger)
            handler.addFilter(lambda record: not any(p in record.pathname for p in ("/py4j/", "/pyspark/")))


def _destination(to: Path | None, old_output: Path | None) -> Path:
    """--to, or the deprecated --output (refused when it names an output format: elsewhere -o/--output is
    the format, and `--output json` would have written into ./json)."""
    if to is not None and old_output is not None:
        raise UsageError("give --to PATH (--output is its deprecated spelling), not both")
    if old_output is not None:
        if str(old_output) in ("json", "text"):
            raise UsageError(f"spark-load writes files to --to PATH; --output {old_output} is not an output format "
                             "here (the summary's format is -o/--output-format)")  # fmt: skip
        print("kafkactl: warning: --output is deprecated: use --to PATH", file=sys.stderr)
        return old_output
    if to is None:
        raise UsageError("missing option --to PATH (where the files go)")
    return to
