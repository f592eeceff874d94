"""Spark-load throughput against Spark's own JSON-lines reader, in one run on one Spark session.

    .venv/bin/python benchmarks/spark_load.py [--messages 10000000] [--partitions 8] [--master local[2]]

A scratch ZooKeeper and broker; `--messages` 200-byte messages produced into one topic of
`--partitions` partitions with kcat; the same messages written to a JSON-lines file (value, topic,
partition, offset, timestamp: the columns a load writes, minus key and headers, which are null and
empty here). First, untimed, both paths run once on `--warmup` other messages: the JVM compiles the
Arrow, Parquet and JSON code on first use, and whichever path ran first would pay for it alone. Then,
timed: `broker.spark.load.run` into Parquet (plan, read through the `kafkactl` data source, write,
commit) and `spark.read.json(file, schema)` into Parquet. Prints rows/s of both and their ratio, as
text and as one JSON line. `--warmup 0` times a cold first load.

Then, cold, as a user running either once meets it: each reader in a process of its own, timed from its
start to its exit, JVM start included: `kafkactl spark-load` into a new output, and a Python process that
starts a SparkSession with the same settings and runs the same `spark.read.json(...).write.parquet(...)`
(`--cold-runs` of each, alternating; medians). `--cold-runs 0` skips them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from broker.bench.broker import kcat_path, scratch_broker
from broker.client.admin import Admin
from broker.spark import load


def produce(bootstrap: str, topic: str, messages: int, workdir: Path) -> Path:
    """kcat-produce `messages` distinct 200-byte values; returns the file of values (one per line)."""
    values = workdir / "values.txt"
    alphabet = string.ascii_letters + string.digits
    block = "".join(random.choice(alphabet) for _ in range(4096))
    with values.open("w") as f:
        for i in range(messages):
            head = f"{i:012d}"
            start = i % (4096 - 200)
            f.write(head + block[start : start + 200 - len(head)] + "\n")
    argv = [kcat_path(), "-P", "-b", bootstrap, "-t", topic, "-l", str(values), "-X", "linger.ms=20",
            "-X", "batch.num.messages=10000", "-X", "queue.buffering.max.kbytes=1048576"]  # fmt: skip
    subprocess.run(argv, check=True, timeout=1800)
    return values


def export_json(bootstrap: str, topic: str, path: Path) -> int:
    """The topic's messages as JSON lines (what Spark's file reader gets to read), via kcat."""
    fmt = '{"value":"%s","topic":"%t","partition":%p,"offset":%o,"timestamp":%T}\\n'
    with path.open("wb") as out:
        subprocess.run([kcat_path(), "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", "-f", fmt],
                       stdout=out, check=True, timeout=1800)  # fmt: skip
    with path.open("rb") as f:
        return sum(1 for _ in f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=10_000_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--workdir", type=Path, default=None, help="kept afterwards when given")
    ap.add_argument(
        "--warmup",
        type=int,
        default=200_000,
        help="messages both paths first run on, untimed, so neither is timed on a cold JVM",
    )
    ap.add_argument("--cold-runs", type=int, default=3, help="fresh-process runs of each reader (0: none)")
    args = ap.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="spark-load-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    topic = "bench"
    try:
        with scratch_broker(workdir) as bootstrap:
            with Admin(bootstrap) as admin:
                admin.create_topic(topic, args.partitions)
            t0 = time.perf_counter()
            produce(bootstrap, topic, args.messages, workdir)
            produced_s = time.perf_counter() - t0
            jsonl = workdir / "messages.jsonl"
            exported = export_json(bootstrap, topic, jsonl)
            if exported != args.messages:
                raise SystemExit(f"exported {exported} of {args.messages} messages")
            if args.warmup:
                warm = workdir / "warmup"
                warm.mkdir(exist_ok=True)
                with Admin(bootstrap) as admin:
                    admin.create_topic("warmup", args.partitions)
                produce(bootstrap, "warmup", args.warmup, warm)
                export_json(bootstrap, "warmup", warm / "messages.jsonl")
            schema = "value string, topic string, partition int, offset long, timestamp long"
            with load.spark_session(args.master, workdir / "spark.log") as spark:
                spark.range(1).count()  # warm the session up before timing
                if args.warmup:  # the JIT compiles Arrow, Parquet and JSON code on first use: both paths once
                    load.run(load.LoadOptions(topics=["warmup"], output=warm / "loaded", bootstrap=bootstrap,
                                              format="parquet"), spark=spark)  # fmt: skip
                    spark.read.schema(schema).json(str(warm / "messages.jsonl")).write.mode("overwrite").parquet(
                        str(warm / "fromjson"))  # fmt: skip
                out = workdir / "loaded"
                t0 = time.perf_counter()
                result = load.run(load.LoadOptions(topics=[topic], output=out, bootstrap=bootstrap,
                                                   format="parquet"), spark=spark)  # fmt: skip
                load_s = time.perf_counter() - t0
                if result.rows != args.messages:
                    raise SystemExit(f"spark-load wrote {result.rows} rows of {args.messages}")
                t0 = time.perf_counter()
                spark.read.schema(schema).json(str(jsonl)).write.mode("overwrite").parquet(str(workdir / "fromjson"))
                json_s = time.perf_counter() - t0
            cold = cold_runs(bootstrap, topic, jsonl, schema, args, workdir) if args.cold_runs else {}
        report = {
            "messages": args.messages, "partitions": args.partitions, "master": args.master, "warmup": args.warmup,
            "produce_s": round(produced_s, 2),
            "spark_load_s": round(load_s, 2), "spark_load_rows_per_s": round(args.messages / load_s),
            "json_reader_s": round(json_s, 2), "json_reader_rows_per_s": round(args.messages / json_s),
            "ratio_spark_load_to_json": round(json_s / load_s, 3),
            "jsonl_bytes": jsonl.stat().st_size, "python": sys.version.split()[0], **cold,
        }  # fmt: skip
        print(f"spark-load : {report['spark_load_rows_per_s']:>12,} rows/s ({load_s:.1f} s)")
        print(f"json reader: {report['json_reader_rows_per_s']:>12,} rows/s ({json_s:.1f} s)")
        print(f"spark-load is {report['ratio_spark_load_to_json']:.2f}x the JSON reader's speed")
        if cold:
            print(
                f"cold, each in a fresh process: spark-load {cold['cold_spark_load_s']:.1f} s, json reader "
                f"{cold['cold_json_reader_s']:.1f} s: {cold['cold_ratio_spark_load_to_json']:.2f}x"
            )
        print(json.dumps(report))
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


JSON_READER = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master(sys.argv[1]).appName("json reader").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").config("spark.sql.session.timeZone", "UTC").getOrCreate())
spark.read.schema(sys.argv[2]).json(sys.argv[3]).write.mode("overwrite").parquet(sys.argv[4])
spark.stop()
"""


def cold_runs(bootstrap: str, topic: str, jsonl: Path, schema: str, args: argparse.Namespace,
              workdir: Path) -> dict:  # fmt: skip
    """Each reader in a fresh process, alternating, `args.cold_runs` times: the medians and their ratio."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    loads, reads = [], []
    for i in range(args.cold_runs):
        out = workdir / f"cold-load-{i}"
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kafkactl", "spark-load", topic, "--to", str(out), "-b", bootstrap,
                        "--master", args.master], check=True, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=3600)  # fmt: skip
        loads.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", JSON_READER, args.master, schema, str(jsonl),
                        str(workdir / f"cold-json-{i}")], check=True, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=3600)  # fmt: skip
        reads.append(time.perf_counter() - t0)
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(workdir / f"cold-json-{i}", ignore_errors=True)
    load_s, read_s = sorted(loads)[len(loads) // 2], sorted(reads)[len(reads) // 2]
    return {"cold_runs": args.cold_runs, "cold_spark_load_s": round(load_s, 2),
            "cold_json_reader_s": round(read_s, 2), "cold_spark_load_all_s": [round(x, 2) for x in loads],
            "cold_json_reader_all_s": [round(x, 2) for x in reads],
            "cold_ratio_spark_load_to_json": round(read_s / load_s, 3)}  # fmt: skip


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    main()
