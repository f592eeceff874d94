"""`kafkactl spark-load` (broker/spark/load.py): exactly-once loads of offset ranges into files.

Against a real ZooKeeper, a real broker process and a real local Spark: the load API in-process with the
test session's shared SparkSession and broker (tests/spark/conftest.py), and the command line as a
subprocess — including kill -9 of the loading process at random points and at each step of the commit,
then a final load, after which every offset must be in the output exactly once.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from broker.client.admin import Admin  # noqa: E402
from broker.client.sync import Producer  # noqa: E402
from broker.errors import UsageError  # noqa: E402
from broker.spark import load  # noqa: E402
from broker.spark.commit import move_file  # noqa: E402
from broker.zk import paths  # noqa: E402
from tests.fixtures import zk_client  # noqa: E402

pytestmark = pytest.mark.timeout(900)

DAY = 86_400_000
TS0 = (int(time.time() * 1000) // DAY - 2) * DAY  # midnight UTC two days ago: within the default retention

Key = tuple[str, int, int]  # topic, partition, offset


# --- helpers -------------------------------------------------------------------------------------


_topics = iter(range(10**6))


def new_topic(bootstrap: str, partitions: int, config: dict[str, str] | None = None) -> str:
    name = f"sl{next(_topics)}-{os.getpid()}"
    with Admin(bootstrap) as admin:
        admin.create_topic(name, partitions, 1, config or {})
    return name


def produce(bootstrap: str, topic: str, n: int, partitions: int, *, tag: str = "a", ts: int = TS0,
            step_ms: int = 1, batch_size: int = 256 * 1024) -> dict[Key, tuple]:  # fmt: skip
    """n keyed messages round-robin over the partitions: {(topic, p, offset): (key, value, ts, headers)}."""
    out: dict[Key, tuple] = {}
    with Producer(bootstrap, linger_ms=10, batch_size=batch_size) as producer:
        futures = []
        for i in range(n):
            key = f"{tag}-k{i}".encode()
            text = 'a,b "quoted"\nsecond line' if i % 97 == 0 else "plain"
            value = json.dumps({"n": i, "tag": tag, "text": text}).encode()
            headers = [("h", str(i).encode())] if i % 10 == 0 else []
            stamp = ts + i * step_ms
            fut = producer.send(topic, value, key, partition=i % partitions, timestamp=stamp, headers=headers)
            futures.append((fut, key, value, stamp, headers))
        for fut, key, value, stamp, headers in futures:
            md = fut.result(60)
            out[(topic, md.partition, md.offset)] = (key, value, stamp, headers)
    return out


def options(bootstrap: str, out: Path, *topics: str, **kw: Any) -> load.LoadOptions:
    return load.LoadOptions(topics=list(topics), output=out, bootstrap=bootstrap, **kw)


# --- reading the output back -----------------------------------------------------------------------


def _range_of(name: str) -> tuple[str, int, int, int]:
    return load.parse_file_name(name)


def data_files(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob("*") if p.is_file() and "_kafkactl" not in p.relative_to(out).parts)


def _bytes(v: Any, value_format: str, fmt: str) -> bytes | None:
    if v is None or (fmt == "csv" and v == ""):
        return None
    if value_format == "raw":
        return base64.b64decode(v) if isinstance(v, str) else bytes(v)
    return v.encode() if isinstance(v, str) else bytes(v)


def _ts_ms(v: Any) -> int:
    if isinstance(v, str):
        return int(datetime.fromisoformat(v).timestamp() * 1000)
    return int(v.timestamp() * 1000) if hasattr(v, "timestamp") else int(v)


def read_output(out: Path, fmt: str, value_format: str = "raw") -> list[dict[str, Any]]:
    """Every row of every data file: topic, partition, offset, key, value (bytes, or a dict for json),
    ts (ms), file — and each row's offset must lie in the closed range its file name carries."""
    import pyarrow.orc as orc
    import pyarrow.parquet as pq

    rows = []
    for f in data_files(out):
        topic, partition, start, last = _range_of(f.name)
        if fmt == "parquet":
            records = pq.read_table(f).to_pylist()
        elif fmt == "orc":
            records = orc.read_table(f).to_pylist()
        elif fmt == "json":
            records = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        else:
            with open(f, newline="") as fh:
                records = list(csv.DictReader(fh))
        for r in records:
            offset = int(r["offset"])
            assert start <= offset <= last, f"{f.name} holds offset {offset}"
            if "partition" in r:
                assert int(r["partition"]) == partition, f.name
            if "topic" in r:
                assert r["topic"] == topic, f.name
            value = r.get("value")
            if value_format == "json":
                if isinstance(value, str):
                    value = json.loads(value)
                value = {k: v for k, v in (value or {}).items() if k != "_corrupt_record" or v is not None}
            else:
                value = _bytes(value, value_format, fmt)
            rows.append({"topic": topic, "partition": partition, "offset": offset, "file": f,
                         "key": _bytes(r.get("key"), "utf8" if value_format == "json" else value_format, fmt),
                         "value": value, "ts": _ts_ms(r["timestamp"]), "headers": r.get("headers")})  # fmt: skip
    return rows


def assert_exactly_once(out: Path, expected: dict[Key, tuple], fmt: str = "parquet", value_format: str = "raw",
                        *, check_values: bool = True) -> list[dict[str, Any]]:  # fmt: skip
    rows = read_output(out, fmt, value_format)
    counts = Counter((r["topic"], r["partition"], r["offset"]) for r in rows)
    dups = {k: c for k, c in counts.items() if c > 1}
    assert not dups, f"{len(dups)} offsets loaded more than once, e.g. {sorted(dups)[:5]}"
    missing = sorted(set(expected) - set(counts))
    assert not missing, f"{len(missing)} offsets missing, e.g. {missing[:5]}"
    extra = sorted(set(counts) - set(expected))
    assert not extra, f"{len(extra)} unexpected offsets, e.g. {extra[:5]}"
    if check_values:
        for r in rows:
            key, value, ts, headers = expected[(r["topic"], r["partition"], r["offset"])]
            assert r["key"] == key
            assert r["value"] == (json.loads(value) if value_format == "json" else value)
            assert r["ts"] == ts
            if fmt in ("parquet", "orc") and headers:
                got = [(h["key"], h["value"]) for h in r["headers"]]
                want = [(k, v if value_format == "raw" else v.decode()) for k, v in headers]  # utf8, json: text
                assert got == want
    return rows


def assert_clean_state(out: Path) -> None:
    state = out / "_kafkactl"
    assert not (state / "pending.json").exists()
    assert list((state / "staging").iterdir()) == []


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[str, dict[str, int]]:
    with Admin(bootstrap) as admin:
        found = admin.list_offsets([(topic, p) for p in range(partitions)], -1)
    return {topic: {str(p): o for (_, p), o in sorted(found.items())}}


# --- the load API, in-process ----------------------------------------------------------------------


def test_first_load_incremental_load_and_noop(spark_broker, spark, tmp_path: Path) -> None:
    b = spark_broker.bootstrap
    topic = new_topic(b, 4)
    expected = produce(b, topic, 20_000, 4)
    out = tmp_path / "out"
    first = load.run(options(b, out, topic), spark=spark)
    assert [(r.partition, r.start, r.end, r.rows) for r in first.ranges] == [(p, 0, 5000, 5000) for p in range(4)]
    assert first.rows == 20_000 and not first.mismatches
    assert sorted(f.name for f in data_files(out)) == [f"{topic}+{p}+0+4999.parquet" for p in range(4)]
    assert_exactly_once(out, expected)
    assert_clean_state(out)
    state = load.read_state(out)
    assert state["offsets"] == end_offsets(b, topic, 4)
    assert state["loads"][-1]["id"] == first.load_id

    expected |= produce(b, topic, 2_000, 4, tag="b", ts=TS0 + DAY)
    second = load.run(options(b, out, topic), spark=spark)
    assert [(r.partition, r.start, r.end, r.rows) for r in second.ranges] == [(p, 5000, 5500, 500) for p in range(4)]
    assert_exactly_once(out, expected)
    assert len(data_files(out)) == 8

    before = load.read_state(out)
    noop = load.run(options(b, out, topic), spark=spark)
    assert noop.noop and noop.ranges == [] and noop.load_id is None
    assert load.read_state(out) == before
    assert len(data_files(out)) == 8

    # new data in one partition only: one range, the others (empty) are no part of the load
    expected |= produce(b, topic, 10, 1, tag="c")
    only = load.run(options(b, out, topic), spark=spark)
    assert [(r.partition, r.start, r.end, r.rows) for r in only.ranges] == [(0, 5500, 5510, 10)]
    assert_exactly_once(out, expected)

    # the whole output is one table to Spark (the _kafkactl dir is hidden from it)
    assert spark.read.parquet(str(out)).count() == 22_010


@pytest.mark.parametrize(
    ("fmt", "value_format", "max_records"),
    [("json", "raw", None), ("json", "utf8", 300), ("csv", "utf8", None), ("csv", "raw", 400),
     ("orc", "raw", None), ("orc", "utf8", None), ("parquet", "utf8", 250), ("parquet", "json", None)],
)  # fmt: skip
def test_formats_round_trip(spark_broker, spark, tmp_path: Path, fmt: str, value_format: str,
                            max_records: int | None) -> None:  # fmt: skip
    b = spark_broker.bootstrap
    topic = new_topic(b, 2)
    expected = produce(b, topic, 1_000, 2)
    out = tmp_path / "out"
    result = load.run(options(b, out, topic, format=fmt, value_format=value_format,
                              max_records_per_file=max_records), spark=spark)  # fmt: skip
    assert result.rows == 1_000 and not result.mismatches
    files = data_files(out)
    assert len(files) == (2 if max_records is None else sum(-(-500 // max_records) for _ in range(2)))
    assert all(f.name.startswith(f"{topic}+") for f in files)
    assert_exactly_once(out, expected, fmt, value_format)
    # and again: the layout is remembered, so the second load needs no --format
    expected |= produce(b, topic, 100, 2, tag="b")
    again = load.run(options(b, out, topic), spark=spark)
    assert again.layout.format == fmt and again.rows == 100
    assert_exactly_once(out, expected, fmt, value_format)


def test_partition_by_keeps_the_range_in_each_file_name(spark_broker, spark, tmp_path: Path) -> None:
    b = spark_broker.bootstrap
    topic = new_topic(b, 2)
    expected = produce(b, topic, 600, 2, ts=TS0, step_ms=DAY // 200)  # 3 days, 200 a day
    out = tmp_path / "out"
    result = load.run(options(b, out, topic, partition_by=["partition", "date"]), spark=spark)
    assert result.rows == 600
    files = data_files(out)
    dirs = {f.parent.relative_to(out).as_posix() for f in files}
    days = [datetime.fromtimestamp((TS0 + d * DAY) / 1000, UTC).strftime("%Y-%m-%d") for d in range(3)]
    assert dirs == {f"partition={p}/date={d}" for p in (0, 1) for d in days}
    assert {f.name for f in files} == {f"{topic}+{p}+0+299.parquet" for p in (0, 1)}
    assert_exactly_once(out, expected)
    df = spark.read.parquet(str(out))
    assert df.count() == 600 and {"partition", "date"} <= set(df.columns)
    expected |= produce(b, topic, 100, 2, tag="b", ts=TS0 + 3 * DAY)
    load.run(options(b, out, topic), spark=spark)
    assert_exactly_once(out, expected)


def test_until_a_time(spark_broker, spark, tmp_path: Path) -> None:
    b = spark_broker.bootstrap
    topic = new_topic(b, 2)
    early = produce(b, topic, 400, 2, ts=TS0)
    late = produce(b, topic, 400, 2, tag="late", ts=TS0 + DAY)
    out = tmp_path / "out"
    first = load.run(options(b, out, topic, until=TS0 + DAY), spark=spark)
    assert [(r.start, r.end) for r in first.ranges] == [(0, 200), (0, 200)]
    assert_exactly_once(out, early)
    rest = load.run(options(b, out, topic), spark=spark)
    assert [(r.start, r.end) for r in rest.ranges] == [(200, 400), (200, 400)]
    assert_exactly_once(out, early | late)


def test_data_loss_fails_or_is_skipped(spark_broker, spark, tmp_path: Path) -> None:
    b = spark_broker.bootstrap
    topic = new_topic(b, 1, {"segment.bytes": "4096"})
    first = produce(b, topic, 100, 1, ts=int(time.time() * 1000))
    out = tmp_path / "out"
    load.run(options(b, out, topic), spark=spark)
    lost = produce(b, topic, 900, 1, tag="b", ts=int(time.time() * 1000), batch_size=1024)  # many segments
    with Admin(b) as admin:  # drop every segment but the active one
        admin.alter_config(topic, {"retention.bytes": "1"})
        deadline = time.monotonic() + 30
        while admin.list_offsets([(topic, 0)], -2)[(topic, 0)] <= 100:
            assert time.monotonic() < deadline, "retention did not run"
            time.sleep(0.2)
        log_start = admin.list_offsets([(topic, 0)], -2)[(topic, 0)]
    before = load.read_state(out)
    with pytest.raises(load.DataLossError, match=rf"offsets 100\.\.{log_start - 1} of {topic}-0 were removed"):
        load.run(options(b, out, topic), spark=spark)
    assert load.read_state(out) == before
    assert_clean_state(out)

    said: list[str] = []
    result = load.run(options(b, out, topic, fail_on_data_loss=False), spark=spark, notify=said.append)
    assert any("data loss" in s and "skipped" in s for s in said)
    assert result.warnings and [(r.start, r.end) for r in result.ranges] == [(log_start, 1000)]
    kept = {k: v for k, v in lost.items() if k[2] >= log_start}
    assert_exactly_once(out, first | kept)


def test_partitions_added_between_loads_are_picked_up(start_broker, spark, tmp_path: Path) -> None:
    bk = start_broker(1)
    b = bk.bootstrap
    topic = new_topic(b, 2)
    expected = produce(b, topic, 400, 2)
    out = tmp_path / "out"
    load.run(options(b, out, topic), spark=spark)
    # no CreatePartitions API: add partitions 2 and 3 as Kafka's tools do in ZooKeeper, restart the broker
    zk = zk_client(bk.zk_connect)
    try:
        zk.set(paths.topic(topic), paths.assignment_json({p: [1] for p in range(4)}))
        for p in (2, 3):
            zk.ensure_path(f"{paths.topic(topic)}/partitions/{p}")
            zk.create(paths.partition_state(topic, p), paths.state_json(1, 0, [1]))
    finally:
        zk.stop()
        zk.close()
    bk.stop()
    bk.start()
    expected |= produce(b, topic, 400, 4, tag="b")
    result = load.run(options(b, out, topic), spark=spark)
    assert [(r.partition, r.start, r.end) for r in result.ranges] == [(0, 200, 300), (1, 200, 300), (2, 0, 100),
                                                                      (3, 0, 100)]  # fmt: skip
    assert_exactly_once(out, expected)
    assert load.read_state(out)["offsets"] == {topic: {"0": 300, "1": 300, "2": 100, "3": 100}}


def test_settings_must_match_earlier_loads(spark_broker, spark, tmp_path: Path) -> None:
    b = spark_broker.bootstrap
    topic = new_topic(b, 1)
    produce(b, topic, 10, 1)
    out = tmp_path / "out"
    load.run(options(b, out, topic, format="orc"), spark=spark)
    produce(b, topic, 10, 1, tag="b")
    before = load.read_state(out)
    for kw in ({"format": "parquet"}, {"value_format": "utf8"}, {"partition_by": ["date"]}):
        with pytest.raises(UsageError, match="earlier loads"):
            load.run(options(b, out, topic, **kw), spark=spark)
    assert load.read_state(out) == before
    with pytest.raises(load.SparkLoadError, match="unknown topic 'nope'"):
        load.run(options(b, out, topic, "nope"), spark=spark)


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_topics_with_a_leading_dot_or_underscore_load_into_files_spark_sees(spark_broker, spark, tmp_path: Path,
                                                                              fmt: str) -> None:  # fmt: skip
    """Spark and Hadoop hide files named .x or _x: a topic's leading '.' or '_' is written %2E / %5F, so
    reading PATH back with Spark gives every row, and parse_file_name gives the topic back."""
    b = spark_broker.bootstrap
    topics = [f"..dots-{fmt}-{os.getpid()}", f"__under-{fmt}-{os.getpid()}", f"_.mixed-{fmt}-{os.getpid()}"]
    expected: dict[Key, tuple] = {}
    with Admin(b) as admin:
        for t in topics:
            admin.create_topic(t, 2, 1)
    for i, t in enumerate(topics):
        expected |= produce(b, t, 20 + i, 2, tag=f"t{i}")
    out = tmp_path / "out"
    load.run(options(b, out, *topics, format=fmt), spark=spark)
    assert spark.read.format(fmt).load(str(out)).count() == len(expected)  # hidden files would count 0
    names = sorted(f.name for f in data_files(out))
    assert names == sorted(
        load.file_name(t, p, 0, (20 + i + (1 - p)) // 2 - 1, fmt) for i, t in enumerate(topics) for p in (0, 1)
    )
    assert all(n.startswith(("%2E", "%5F")) for n in names), names
    assert {load.parse_file_name(n)[0] for n in names} == set(topics)
    assert_exactly_once(out, expected, fmt)

    by_topic = tmp_path / "by-topic"  # --partition-by topic: topic=<name>/ dirs, each file still escaped
    load.run(options(b, by_topic, *topics, format=fmt, partition_by=["topic"]), spark=spark)
    dirs = sorted(p.name for p in by_topic.iterdir() if p.name != "_kafkactl")
    assert dirs == sorted(f"topic={t}" for t in topics)
    assert spark.read.format(fmt).load(str(by_topic)).count() == len(expected)


def test_an_unknown_topic_fails_and_creates_nothing(spark_broker, spark, tmp_path: Path) -> None:
    b = spark_broker.bootstrap
    known = new_topic(b, 1)
    out = tmp_path / "out"
    with pytest.raises(load.SparkLoadError, match="unknown topic 'nope-1'") as caught:
        load.run(options(b, out, "nope-1"), spark=spark)
    assert not out.exists()
    assert str(caught.value) == "unknown topic 'nope-1'; nothing was loaded"
    with pytest.raises(load.SparkLoadError, match="^unknown topics 'nope-1', 'nope-2'; nothing was loaded$"):
        load.run(options(b, out, known, "nope-2", "nope-1"), spark=spark)
    assert not out.exists()
    out.mkdir()
    with pytest.raises(load.SparkLoadError, match="unknown topic 'nope-1'"):
        load.run(options(b, out, known, "nope-1"), spark=spark)
    assert list(out.iterdir()) == []
    run = subprocess.run(spark_load_argv(b, tmp_path / "cli-out", "nope-1"), capture_output=True, text=True,
                         timeout=120, env=cli_env())  # fmt: skip
    assert run.returncode == 1
    assert run.stderr == "kafkactl: error: unknown topic 'nope-1'; nothing was loaded\n", run.stderr
    assert not (tmp_path / "cli-out").exists()
    with Admin(b) as admin:
        assert not {"nope-1", "nope-2"} & set(admin.list_topics())  # and asking created no topic either


def test_a_row_outside_its_split_fails_the_job_and_rolls_back(spark_broker, spark, tmp_path: Path) -> None:
    """The file names rest on input partition i reading split i: the job through the data source checks every
    row. (The Arrow path, where task i reads split i itself, has no other numbering to get wrong.)"""
    b = spark_broker.bootstrap
    topic = new_topic(b, 2)
    produce(b, topic, 100, 2)
    out = load.OutputDir(tmp_path / "out")
    with out.locked():
        plan = load.plan_load(out, options(b, out.path, topic, value_format="utf8"))
        plan.splits = list(reversed(plan.splits))  # what a source numbering its partitions otherwise would do
        out.write_pending(plan)
        with pytest.raises(
            load.SparkLoadError,
            match=r"^the Spark job failed: kafkactl spark-load: row .*@\d+ "
            r"read by input partition \d, outside its planned range$",
        ) as exc:
            load._execute(spark, out, plan, None)
        assert "\n" not in str(exc.value)
    assert not out.pending_path.exists() and not out.staging(plan.load_id).exists()
    assert data_files(out.path) == []


def test_the_arrow_path_writes_what_the_data_source_path_writes(
    spark_broker, spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Parquet load of raw values goes through `broker.spark.arrow_writer`; its files hold the same columns,
    types and rows as the data source path writes, as Spark and pyarrow read them."""
    import pyarrow.parquet as pq

    from broker.spark import arrow_writer

    b = spark_broker.bootstrap
    topic = new_topic(b, 3)
    expected = produce(b, topic, 3_000, 3)
    fast = load.run(options(b, tmp_path / "fast", topic), spark=spark)
    monkeypatch.setattr(arrow_writer, "applies", lambda layout: False)
    slow = load.run(options(b, tmp_path / "slow", topic), spark=spark)
    assert fast.rows == slow.rows == 3_000
    assert_exactly_once(tmp_path / "fast", expected)
    names = [sorted(f.name for f in data_files(tmp_path / d)) for d in ("fast", "slow")]
    assert names[0] == names[1]
    fast_df, slow_df = spark.read.parquet(str(tmp_path / "fast")), spark.read.parquet(str(tmp_path / "slow"))
    assert fast_df.schema.simpleString() == slow_df.schema.simpleString()
    assert fast_df.exceptAll(slow_df).count() == 0 and slow_df.exceptAll(fast_df).count() == 0
    one = sorted(data_files(tmp_path / "fast"))[0]
    assert pq.read_schema(one).remove_metadata() == pq.read_schema(tmp_path / "slow" / one.name).remove_metadata()


def test_spark_errors_become_one_line(spark_broker, spark) -> None:
    from pyspark.errors import PySparkException

    df = (spark.read.format("kafkactl").option("bootstrap.servers", spark_broker.bootstrap)
          .option("subscribe", "no-such-topic").load())  # fmt: skip
    with pytest.raises(PySparkException) as exc:
        df.count()
    assert load.spark_error_line(exc.value) == "topic 'no-such-topic' does not exist"


# --- recovery, without Spark ------------------------------------------------------------------------


def _fake_staged_load(out: load.OutputDir, topic: str, n_per_split: list[int], *, success: bool) -> load.Plan:
    """A pending plan and a staging dir as Spark leaves them (parquet written with pyarrow)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ranges, splits = [], []
    for p, n in enumerate(n_per_split):
        ranges.append(load.RangeResult(topic, p, 10, 10 + n))
        splits.append((topic, p, 10, 10 + n))
    plan = load.Plan("20240101T000000Z-test" + str(len(n_per_split)), load.Layout(), ranges, splits, "x:1",
                     created=1)  # fmt: skip
    out.write_pending(plan)
    staging = out.staging(plan.load_id)
    staging.mkdir(parents=True)
    for i, (t, p, s, e) in enumerate(splits):
        table = pa.table({"topic": [t] * (e - s), "partition": [p] * (e - s), "offset": list(range(s, e))})
        pq.write_table(table, staging / f"part-{i:05d}-0000-1111.c000.snappy.parquet")
        (staging / f".part-{i:05d}-0000-1111.c000.snappy.parquet.crc").write_bytes(b"")
    if success:
        (staging / "_SUCCESS").write_bytes(b"")
    return plan


def test_recovery_rolls_back_a_load_spark_did_not_finish(tmp_path: Path) -> None:
    out = load.OutputDir(tmp_path / "out")
    out.prepare()
    plan = _fake_staged_load(out, "t", [5, 6], success=False)
    (out.state / "staging" / "stray").mkdir()
    rec = out.recover()
    assert rec is not None and rec.action == "rolled-back" and rec.load_id == plan.load_id
    assert data_files(out.path) == [] and load.read_state(out.path)["offsets"] == {}
    assert_clean_state(out.path)
    assert out.recover() is None


@pytest.mark.parametrize("crash", ["none", "manifest", "linked", "moved-some", "moved-all", "committed"])
def test_recovery_rolls_forward_from_every_step(tmp_path: Path, crash: str) -> None:
    out = load.OutputDir(tmp_path / "out")
    out.prepare()
    plan = _fake_staged_load(out, "t", [5, 6, 7], success=True)
    staging = out.staging(plan.load_id)
    if crash != "none":  # replay the first steps of `finish` by hand, as far as the crash let them go
        files = out.manifest(plan)
        if crash == "linked":
            os.link(staging / files[0]["staged"], out.path / files[0]["final"])
        if crash in ("moved-some", "moved-all", "committed"):
            for f in files[: 1 if crash == "moved-some" else None]:
                os.rename(staging / f["staged"], out.path / f["final"])
        if crash == "committed":
            out._commit(plan, [load.RangeResult(r.topic, r.partition, r.start, r.end, r.expected)
                               for r in plan.ranges], len(files))  # fmt: skip
    rec = out.recover()
    assert rec is not None and rec.action == ("cleaned-up" if crash == "committed" else "rolled-forward")
    assert sorted(f.name for f in data_files(out.path)) == ["t+0+10+14.parquet", "t+1+10+15.parquet",
                                                            "t+2+10+16.parquet"]  # fmt: skip
    state = load.read_state(out.path)
    assert state["offsets"] == {"t": {"0": 15, "1": 16, "2": 17}}
    assert [r[4] for r in state["loads"][-1]["ranges"]] == [5, 6, 7]
    assert_clean_state(out.path)
    assert out.recover() is None


def test_move_never_overwrites(tmp_path: Path) -> None:
    src, dst = tmp_path / "a", tmp_path / "b"
    src.write_text("new")
    dst.write_text("old")
    with pytest.raises(load.SparkLoadError, match="exists already"):
        move_file(src, dst)
    assert dst.read_text() == "old" and src.exists()


def test_one_load_per_output_at_a_time(tmp_path: Path) -> None:
    out = load.OutputDir(tmp_path / "out")
    with out.locked():
        with pytest.raises(load.SparkLoadError, match="another spark-load is running"):
            with load.OutputDir(tmp_path / "out").locked():
                pass


# --- the command line, as a subprocess ----------------------------------------------------------------


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKACTL_") or k == "KAFKACTL_HOME"}
    env.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1", **extra)
    return env


def spark_load_argv(bootstrap: str, out: Path, *args: str, master: str = "local[2]") -> list[str]:
    return [sys.executable, "-m", "kafkactl", "spark-load", *args, "--to", str(out), "-b", bootstrap,
            "--master", master]  # fmt: skip


@contextlib.contextmanager
def process_groups() -> Any:
    """Start spark-load subprocesses in sessions of their own; kill whatever is left of each at the end."""
    started: list[subprocess.Popen] = []

    def start(argv: list[str], log: Path, **env: str) -> subprocess.Popen:
        with open(log, "ab") as f:
            p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env=cli_env(**env), start_new_session=True)  # fmt: skip
        started.append(p)
        return p

    try:
        yield start
    finally:
        for p in started:
            if p.poll() is None:
                p.kill()
                p.wait(30)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)  # the JVM and Python workers the killed process left


def _wait_group_gone(pgid: int, timeout: float) -> None:
    """Give a dead spark-load's JVM (it exits when its stdin closes) a moment, then kill what is left."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


@pytest.mark.slow
def test_cli_loads_and_reconciles(spark_broker, tmp_path: Path) -> None:
    b = spark_broker.bootstrap
    topic = new_topic(b, 4)
    expected = produce(b, topic, 4_000, 4)
    out = tmp_path / "out"
    run = subprocess.run(spark_load_argv(b, out, topic, "--format", "json", "--value-format", "utf8"),
                         capture_output=True, text=True, timeout=300, env=cli_env())  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].split("\t") == ["TOPIC", "PARTITION", "PLANNED", "ROWS", "EXPECTED", "CHECK"]
    assert [ln.split("\t") for ln in lines[1:]] == [[topic, str(p), "0..999", "1000", "1000", "ok"] for p in range(4)]
    assert "4000 of 4000 row(s) in 4 file(s)" in run.stderr
    assert len([ln for ln in run.stderr.splitlines() if ln.strip()]) == 1, run.stderr  # Spark's log went to a file
    assert (out / "_kafkactl" / "spark.log").exists()
    assert_exactly_once(out, expected, "json", "utf8")

    expected |= produce(b, topic, 40, 4, tag="b")
    run = subprocess.run(spark_load_argv(b, out, topic, "-o", "json"), capture_output=True, text=True, timeout=300,
                         env=cli_env())  # fmt: skip
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["format"] == "json" and doc["rows"] == doc["expected"] == 40 and not doc["noop"]
    assert [(r["partition"], r["start"], r["end"], r["last"], r["rows"]) for r in doc["ranges"]] == [
        (p, 1000, 1010, 1009, 10) for p in range(4)]  # fmt: skip
    assert_exactly_once(out, expected, "json", "utf8")

    run = subprocess.run(spark_load_argv(b, out, topic), capture_output=True, text=True, timeout=120, env=cli_env())
    assert run.returncode == 0 and run.stdout.startswith("nothing to load"), run.stdout + run.stderr
    # --to was --output, still taken with a warning; but `--output json` (a format everywhere else) is refused
    old = [sys.executable, "-m", "kafkactl", "spark-load", topic, "-b", b, "--master", "local[2]"]
    run = subprocess.run([*old, "--output", str(out)], capture_output=True, text=True, timeout=120, env=cli_env())
    assert run.returncode == 0 and run.stdout.startswith("nothing to load"), run.stdout + run.stderr
    assert run.stderr.strip() == "kafkactl: warning: --output is deprecated: use --to PATH"
    run = subprocess.run([*old, "--output", "json"], capture_output=True, text=True, timeout=120, env=cli_env())
    assert run.returncode == 2 and "is not an output format here" in run.stderr and not Path("json").exists()

    for args, needle in ((["nope"], "unknown topic 'nope'"), ([topic, "--format", "orc"], "earlier loads"),
                         ([topic, "--until", "12"], "--until '12'")):  # fmt: skip
        run = subprocess.run(spark_load_argv(b, out, *args), capture_output=True, text=True, timeout=120,
                             env=cli_env())  # fmt: skip
        assert run.returncode != 0
        err = [ln for ln in run.stderr.splitlines() if ln.strip()]
        assert len(err) == 1 and err[0].startswith("kafkactl: error: ") and needle in err[0], run.stderr

    # Spark that cannot start: one line, and no plan left behind to roll back
    expected |= produce(b, topic, 8, 4, tag="c")
    run = subprocess.run(spark_load_argv(b, out, topic, master="nonsense://x"), capture_output=True, text=True,
                         timeout=120, env=cli_env())  # fmt: skip
    err = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert run.returncode == 1 and len(err) == 1 and "cannot start Spark (master nonsense://x)" in err[0], run.stderr
    assert_clean_state(out)
    run = subprocess.run(spark_load_argv(b, out, topic), capture_output=True, text=True, timeout=300, env=cli_env())
    assert run.returncode == 0 and "rolled back" not in run.stderr, run.stderr
    assert_exactly_once(out, expected, "json", "utf8")


@pytest.mark.slow
def test_cli_data_loss_error_is_one_line(spark_broker, tmp_path: Path) -> None:
    b = spark_broker.bootstrap
    topic = new_topic(b, 1, {"segment.bytes": "2048"})
    produce(b, topic, 20, 1, ts=int(time.time() * 1000))
    out = tmp_path / "out"
    assert subprocess.run(spark_load_argv(b, out, topic), capture_output=True, timeout=300,
                          env=cli_env()).returncode == 0  # fmt: skip
    produce(b, topic, 500, 1, tag="b", ts=int(time.time() * 1000), batch_size=1024)  # many segments
    with Admin(b) as admin:
        admin.alter_config(topic, {"retention.bytes": "1"})
        deadline = time.monotonic() + 30
        while admin.list_offsets([(topic, 0)], -2)[(topic, 0)] <= 20:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    run = subprocess.run(spark_load_argv(b, out, topic), capture_output=True, text=True, timeout=120, env=cli_env())
    assert run.returncode == 1
    assert run.stderr.startswith("kafkactl: error: data loss: offsets 20..") and run.stderr.count("\n") == 1
    run = subprocess.run(spark_load_argv(b, out, topic, "--no-fail-on-data-loss"), capture_output=True, text=True,
                         timeout=300, env=cli_env())  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "warning: data loss: offsets 20.." in run.stderr


FAILPOINTS = ["pending-written", "spark-done", "manifest-written", "moved-one", "moved", "committed"]


@pytest.mark.slow
def test_cli_kill9_at_random_points_then_exactly_once(spark_broker, tmp_path: Path) -> None:
    """kill -9 the loading process, at random moments (mostly while Spark runs) and at each commit step
    (failpoints: the process SIGKILLs itself there); between kills more data arrives; a final load must
    leave every offset in the output exactly once, and the committed offsets at the partitions' ends."""
    rng = random.Random(20240501)
    b = spark_broker.bootstrap
    topic = new_topic(b, 4)
    expected = produce(b, topic, 20_000, 4)
    out = tmp_path / "out"
    log = tmp_path / "runs.log"
    kills = recovered = rounds = 0
    failpoints = FAILPOINTS[:]
    rng.shuffle(failpoints)
    deadline = time.monotonic() + 600
    with process_groups() as start:
        while (kills < 8 or failpoints) and rounds < 16 and time.monotonic() < deadline:
            rounds += 1
            expected |= produce(b, topic, rng.randrange(500, 3000), 4, tag=f"r{rounds}", ts=TS0 + rounds * DAY)
            if failpoints and rng.random() < 0.5:
                point = failpoints.pop()
                with open(log, "a") as f:
                    f.write(f"\n=== round {rounds}: failpoint {point}\n")
                p = start(spark_load_argv(b, out, topic), log, KAFKACTL_SPARK_LOAD_FAILPOINT=point)
                p.wait(300)
            else:
                delay = rng.uniform(2.0, 22.0)  # the JVM starts in ~8 s, the job runs ~10 s more
                with open(log, "a") as f:
                    f.write(f"\n=== round {rounds}: kill -9 after {delay:.2f}s\n")
                p = start(spark_load_argv(b, out, topic), log)
                try:
                    p.wait(delay)
                except subprocess.TimeoutExpired:
                    os.kill(p.pid, signal.SIGKILL)
                    p.wait(30)
            if p.returncode == -signal.SIGKILL:
                kills += 1
            else:
                assert p.returncode == 0, log.read_text()[-3000:]
            _wait_group_gone(p.pid, 10)
        assert kills >= 5, log.read_text()[-3000:]
        final = subprocess.run(spark_load_argv(b, out, topic), capture_output=True, text=True, timeout=300,
                               env=cli_env())  # fmt: skip
    text = log.read_text()
    recovered = text.count("finished the interrupted load") + text.count("rolled back the interrupted load")
    assert final.returncode == 0, final.stderr
    assert recovered >= 3, text[-3000:]
    assert_exactly_once(out, expected)
    assert_clean_state(out)
    assert load.read_state(out)["offsets"] == end_offsets(b, topic, 4)
    names = [f.name for f in data_files(out)]
    assert len(names) == len(set(names))


@pytest.mark.slow
def test_cli_ctrl_c_says_where_the_load_stands_in_one_line(spark_broker, tmp_path: Path) -> None:
    """Ctrl-C while Spark runs the job (SIGINT to the whole process group, as a terminal sends it): exit 130 and
    one line saying the load was rolled back (or where else it stands), no py4j traceback; the next run loads
    every offset exactly once."""
    b = spark_broker.bootstrap
    topic = new_topic(b, 2)
    expected = produce(b, topic, 20_000, 2)
    out = tmp_path / "out"
    log = tmp_path / "run.log"
    with process_groups() as start:
        p = start(spark_load_argv(b, out, topic), log)
        staging = out / "_kafkactl" / "pending.json"
        deadline = time.monotonic() + 120
        while not staging.exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)  # the plan is logged just before Spark's job starts
        time.sleep(1.0)
        os.killpg(p.pid, signal.SIGINT)
        assert p.wait(120) == 130, log.read_text()[-3000:]
        _wait_group_gone(p.pid, 10)
    text = log.read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith("kafkactl: ")]
    assert len(lines) == 1 and lines[0].startswith("kafkactl: interrupted: "), text[-3000:]
    assert any(w in lines[0] for w in ("rolled back", "rolls it back", "finishes it", "committed")), lines[0]
    assert "Traceback" not in text, text[-3000:]
    run = subprocess.run(spark_load_argv(b, out, topic), capture_output=True, text=True, timeout=300, env=cli_env())
    assert run.returncode == 0, run.stderr
    assert_exactly_once(out, expected)
    assert_clean_state(out)
