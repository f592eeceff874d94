"""`kafkactl bench`: re-runnable benchmarks of kafkactl's parts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from broker.bench import broker as broker_bench
from broker.bench import client as client_bench
from broker.bench import log as log_bench
from broker.bench import mirror as mirror_bench
from broker.bench import tls as tls_bench
from broker.errors import UsageError
from kafkactl import contexts
from kafkactl.render import Output, json_line, progress, table

app = typer.Typer(help="Benchmarks anyone can re-run.", no_args_is_help=True)

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}  # fmt: skip


def parse_size(text: str) -> int:
    """'1GiB', '16k', '4096' → bytes."""
    s = text.strip().lower()
    num = s.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = s[len(num) :]
    if not num or unit not in _UNITS:
        raise UsageError(f"invalid size {text!r} (e.g. 4096, 16KiB, 1GiB)")
    return int(float(num) * _UNITS[unit])


Bootstrap = Annotated[str | None, typer.Option(
    "-b", "--bootstrap-server", show_default=False,
    help="Measure this cluster (default: the one the root -b, KAFKACTL_BOOTSTRAP_SERVER or the context names; "
         "with none named, a scratch broker).",
)]  # fmt: skip


Dir = Annotated[Path | None, typer.Option("--dir", help="Where scratch files go.", exists=True, file_okay=False)]


@app.command("log")
def log(
    size: Annotated[str, typer.Option("--size", help="Bytes to append (e.g. 1GiB).")] = "1GiB",
    batch_size: Annotated[str, typer.Option("--batch-size", help="Bytes per batch.")] = "16KiB",
    read_size: Annotated[str, typer.Option("--read-size", help="Bytes per slice read.")] = "1MiB",
    directory: Annotated[
        Path | None, typer.Option("--dir", help="Where the temporary log goes.", exists=True, file_okay=False)
    ] = None,
    fsync: Annotated[bool, typer.Option("--fsync", help="fsync before stopping the append clock.")] = False,
    repeat: Annotated[int, typer.Option("--repeat", min=1, help="Runs; the median is reported.")] = 1,
    output: Annotated[Output, typer.Option("-o", "--output", help="text or json.")] = Output.text,
) -> None:
    """Append batches to a partition log with CRC validation, then read them back as sendfile slices."""
    total, batch, read = parse_size(size), parse_size(batch_size), parse_size(read_size)
    if batch < 200 or total < batch:
        raise UsageError("--batch-size must be at least 200 bytes and --size at least one batch")
    results = []
    for i in range(repeat):
        with progress(f"run {i + 1}/{repeat}: appending", total // batch) as advance:
            results.append(log_bench.run(total, batch, read, directory, fsync, advance))
    result = log_bench.median(results)
    if output == Output.json:
        json_line(result)
    else:
        table(["metric", "value"], result.items(), title="kafkactl bench log")


@app.command("broker")
def broker(
    messages: Annotated[int, typer.Option("--messages", min=1, help="Messages per produce run.")] = 5_000_000,
    size: Annotated[int, typer.Option("--size", min=1, help="Bytes per produced message.")] = 200,
    fetch_messages: Annotated[
        int, typer.Option("--fetch-messages", min=1, help="Messages read per fetch run.")
    ] = 1_000_000,
    fetch_size: Annotated[int, typer.Option("--fetch-size", min=1, help="Bytes per fetched message.")] = 1024,
    repeat: Annotated[int, typer.Option("--repeat", min=1, help="Runs of each; the median is reported.")] = 3,
    bootstrap: Bootstrap = None,
    directory: Dir = None,
    output: Annotated[Output, typer.Option("-o", "--output", help="text or json.")] = Output.text,
) -> None:
    """Produce (acks=1) and fetch throughput of one broker, with kcat as the load generator."""
    bootstrap = contexts.configured("bootstrap-server", bootstrap)
    with progress("kcat runs", 2 * repeat) as advance:
        result = broker_bench.run(messages, size, fetch_messages, fetch_size, repeat, bootstrap, directory, advance)
    if output == Output.json:
        json_line(result)
    else:
        table(["metric", "value"], result.items(), title="kafkactl bench broker")


def _client_bench(kind: str, messages: int, size: int, batch: int, acks: str, compression: str, rate: int,
                  bootstrap: str | None, directory: Path | None, output: Output,
                  replication_factor: int = 1, audit: bool = False) -> None:  # fmt: skip
    from broker.client.producer import CODECS, parse_acks

    if compression not in CODECS:
        raise UsageError(f"--compression {compression!r}: expected one of {', '.join(CODECS)}")
    bootstrap = contexts.configured("bootstrap-server", bootstrap)  # (none named: a scratch broker)
    total = messages * (2 if kind == "consume" else 1)
    with progress(f"bench {kind}", total) as advance:
        result = client_bench.run(kind, messages, size, batch, parse_acks(acks), compression, rate, bootstrap,
                                  directory, advance, replication_factor, audit)  # fmt: skip
    if output == Output.json:
        json_line(result)
    else:
        table(["metric", "value"], result.items(), title=f"kafkactl bench {kind}")


Messages = Annotated[int, typer.Option("--messages", min=1, help="Messages to send.")]
Size = Annotated[int, typer.Option("--size", min=20, help="Bytes per message.")]
Batch = Annotated[int, typer.Option("--batch", min=1, help="Messages per produce request (the paper: 1 or 50).")]
Acks = Annotated[str, typer.Option("--acks", help="0, 1 or all.")]
Compression = Annotated[str, typer.Option("--compression", help="none, gzip, snappy, lz4, zstd.")]
Out = Annotated[Output, typer.Option("-o", "--output", help="text or json.")]
Replicas = Annotated[int, typer.Option("-r", "--replication-factor", min=1,
                                       help="Replicas of the bench topic (above 1: a cluster, with -b).")]  # fmt: skip


Audit = Annotated[bool, typer.Option("--audit", help="The producer stamps and counts every message "
                                     "(audit.enabled), to measure what the audit costs.")]  # fmt: skip


@app.command("produce")
def produce(messages: Messages = 10_000_000, size: Size = 200, batch: Batch = 50, acks: Acks = "1",
            compression: Compression = "none", bootstrap: Bootstrap = None, directory: Dir = None,
            output: Out = Output.text, replication_factor: Replicas = 1, audit: Audit = False) -> None:  # fmt: skip
    """kafkactl's producer: msg/s, MB/s and bytes on disk per message (the paper's producer test)."""
    _client_bench("produce", messages, size, batch, acks, compression, 0, bootstrap, directory, output,
                  replication_factor, audit)  # fmt: skip


@app.command("consume")
def consume(messages: Messages = 10_000_000, size: Size = 200, batch: Batch = 50, bootstrap: Bootstrap = None,
            directory: Dir = None, output: Out = Output.text) -> None:  # fmt: skip
    """kafkactl's consumer reading back what the producer wrote (the paper's consumer test)."""
    _client_bench("consume", messages, size, batch, "1", "none", 0, bootstrap, directory, output)


@app.command("e2e")
def e2e(messages: Annotated[int, typer.Option("--messages", min=1, help="Messages to send.")] = 100_000,
        size: Size = 200, rate: Annotated[int, typer.Option("--rate", min=1, help="Messages per second.")] = 10_000,
        bootstrap: Bootstrap = None, directory: Dir = None, output: Out = Output.text, acks: Acks = "1",
        replication_factor: Replicas = 1) -> None:  # fmt: skip
    """End-to-end latency at a fixed rate: producer here, consumer in another process."""
    _client_bench("e2e", messages, size, 1, acks, "none", rate, bootstrap, directory, output, replication_factor)


@app.command("mirror")
def mirror(
    messages: Annotated[int, typer.Option("--messages", min=1, help="Messages in the source topic.")] = 2_000_000,
    size: Size = 200,
    partitions: Annotated[int, typer.Option("--partitions", min=1, help="Partitions of the source topic.")] = 4,
    repeat: Annotated[int, typer.Option("--repeat", min=1, help="Mirror runs; the median is reported.")] = 3,
    batch_bytes: Annotated[
        int,
        typer.Option(
            "--batch-bytes", min=256, help="batch.size of the source's producer (kcat): the mirror's work is per batch."
        ),
    ] = 16384,  # fmt: skip
    directory: Dir = None,
    output: Out = Output.text,
) -> None:
    """`kafkactl mirror` between two scratch clusters: msg/s from start to the last acknowledged message."""
    with progress("mirror runs", repeat) as advance:
        result = mirror_bench.run(messages, size, partitions, repeat, batch_bytes, directory, advance)
    if output == Output.json:
        json_line(result)
    else:
        table(["metric", "value"], result.items(), title="kafkactl bench mirror")


@app.command("tls")
def tls(
    messages: Annotated[int, typer.Option("--messages", min=1, help="Messages per produce run.")] = 1_000_000,
    size: Size = 200,
    repeat: Annotated[int, typer.Option("--repeat", min=1, help="Runs of each; the median is reported.")] = 3,
    directory: Dir = None,
    output: Out = Output.text,
) -> None:
    """What TLS and SASL cost: kcat's produce and fetch msg/s over PLAINTEXT, SSL and SASL_SSL in one run."""
    with progress("kcat runs", 3 * repeat) as advance:
        result = tls_bench.run(messages, size, repeat, directory, advance)
    if output == Output.json:
        json_line(result)
    else:
        table(["metric", "value"], result.items(), title="kafkactl bench tls")
