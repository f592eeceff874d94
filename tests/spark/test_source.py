"""The `kafkactl` PySpark data source against a real broker, through a real local[2] Spark session.

What Spark returns is compared with what was produced (keys, values, null keys and values, headers,
timestamps, offsets); offset options, timestamps, patterns, splits, data loss after retention, corrupt
batches and bad options are each checked end to end. `read_range` and `plan_ranges` are also called
directly where the executor's or the planner's own behaviour is the point (warnings, gaps).
"""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from broker.client.admin import Admin
from broker.client.sync import Producer
from broker.log.config import LogConfig
from broker.log.log import PartitionLog
from broker.protocol.messages.fetch import EARLIEST
from broker.records.batch import Record, build_batch
from broker.spark.source import (
    ARROW_SCHEMA,
    SCHEMA,
    SCHEMA_WITHOUT_HEADERS,
    CorruptDataError,
    DataLossError,
    OffsetRange,
    SourceError,
    plan_ranges,
    read_range,
    split_ranges,
)
from tests.integration.clientkit import create_topic, unique
from tests.integration.helpers import wait_until

pytestmark = pytest.mark.slow  # a Spark session and a broker: seconds, not milliseconds

#: an hour ago: record timestamps older than retention.ms (7 days) would let retention remove them at once
T0 = (int(time.time()) - 3600) * 1000

# --- helpers ---------------------------------------------------------------------------------------


def produce(bootstrap: str, topic: str, messages: list[dict[str, Any]], *, one_batch_each: bool = False) -> list[tuple]:
    """Send `messages` (dicts of value, key, headers, partition, timestamp); the rows Spark must give back."""
    out = []
    with Producer(bootstrap, linger_ms=5) as producer:
        futures = []
        for m in messages:
            f = producer.send(topic, m.get("value"), m.get("key"), headers=m.get("headers", ()),
                              partition=m.get("partition", 0), timestamp=m.get("timestamp"))  # fmt: skip
            if one_batch_each:
                f.result(timeout=30)
            futures.append(f)
        for m, f in zip(messages, futures, strict=True):
            md = f.result(timeout=30)
            headers = tuple((k, v) for k, v in m.get("headers", ())) or None
            out.append((m.get("key"), m.get("value"), topic, md.partition, md.offset, md.timestamp, 0, headers))
    return out


def load(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("kafkactl").option("bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _bytes(x: Any) -> bytes | None:
    return None if x is None else bytes(x)


def rows(df: Any) -> list[tuple]:
    """The rows as comparable tuples (timestamp as epoch ms), sorted by topic, partition, offset."""
    cols = ["key", "value", "topic", "partition", "offset", "unix_millis(timestamp) AS ts", "timestampType"]
    if "headers" in df.columns:
        cols.append("headers")
    out = []
    for r in df.selectExpr(*cols).collect():
        headers = None
        if "headers" in df.columns and r["headers"] is not None:
            headers = tuple((h["key"], _bytes(h["value"])) for h in r["headers"])
        out.append((_bytes(r["key"]), _bytes(r["value"]), r["topic"], r["partition"], r["offset"], r["ts"],
                    r["timestampType"], headers)[: len(cols)])  # fmt: skip
    return sorted(out, key=lambda row: (row[2], row[3], row[4]))


def offsets(df: Any) -> dict[tuple[str, int], list[int]]:
    out: dict[tuple[str, int], list[int]] = {}
    for r in df.select("topic", "partition", "offset").collect():
        out.setdefault((r["topic"], r["partition"]), []).append(r["offset"])
    return {tp: sorted(offs) for tp, offs in sorted(out.items())}


def spark_error(action: Any) -> str:
    """The text of the exception a Spark action raises."""
    with pytest.raises(Exception) as info:  # noqa: B017 - Spark wraps Python errors in its own types
        action()
    return str(info.value)


def numbered(topic_partitions: dict[int, int], timestamp: int = T0) -> list[dict[str, Any]]:
    """`n` plain messages per partition, stamped timestamp + 1000 * i."""
    return [{"value": f"p{p}-{i}".encode(), "partition": p, "timestamp": timestamp + 1000 * i}
            for p, n in topic_partitions.items() for i in range(n)]  # fmt: skip


# --- every message exactly once --------------------------------------------------------------------


def test_every_message_comes_out_exactly_once(spark, spark_broker):
    b = spark_broker
    t = create_topic(b.bootstrap, unique("all"), 3)
    messages = []
    for i in range(90):
        headers: tuple = ()
        if i % 3 == 0:
            headers = (("trace", f"id-{i}".encode()), ("empty", b""), ("null", None), ("ключ", b"\x00\xff"))
        elif i % 3 == 1:
            headers = (("dup", b"1"), ("dup", b"2"))
        messages.append({
            "key": None if i % 5 == 0 else f"key-{i}".encode(),
            "value": None if i % 7 == 0 else b"" if i % 11 == 0 else bytes([i % 256]) * (i * 13),
            "headers": headers, "partition": i % 3, "timestamp": T0 + i * 1001,
        })  # fmt: skip
    expected = produce(b.bootstrap, t, messages[:45]) + produce(b.bootstrap, t, messages[45:], one_batch_each=True)
    expected.sort(key=lambda row: (row[2], row[3], row[4]))

    df = load(spark, b.bootstrap, subscribe=t)
    assert df.schema == SCHEMA
    got = rows(df)
    assert got == expected
    assert df.count() == 90
    assert {(r[3], r[4]) for r in got} == {(p, o) for p in range(3) for o in range(30)}


def test_log_append_time_and_no_headers_column(spark, spark_broker):
    b = spark_broker
    t = create_topic(b.bootstrap, unique("lat"), 1, {"message.timestamp.type": "LogAppendTime"})
    produce(b.bootstrap, t, numbered({0: 5}, timestamp=1000))
    got = rows(load(spark, b.bootstrap, subscribe=t))
    assert [r[6] for r in got] == [1] * 5  # timestampType 1: LogAppendTime
    assert all(r[5] > T0 for r in got)  # the broker's clock, not the producer's 1000 + i
    df = load(spark, b.bootstrap, subscribe=t, includeHeaders="false")
    assert df.schema == SCHEMA_WITHOUT_HEADERS and df.count() == 5


# --- offsets and timestamps ------------------------------------------------------------------------


def test_json_offsets_over_several_topics(spark, spark_broker):
    b = spark_broker
    ta = create_topic(b.bootstrap, unique("ja"), 2)
    tb = create_topic(b.bootstrap, unique("jb"), 1)
    produce(b.bootstrap, ta, numbered({0: 10, 1: 10}))
    produce(b.bootstrap, tb, numbered({0: 10}))
    start = json.dumps({ta: {"0": 2, "1": -2}, tb: {"0": 7}})
    end = json.dumps({ta: {"0": 5, "1": -1}, tb: {"0": -1}})
    df = load(spark, b.bootstrap, subscribe=f"{ta},{tb}", startingOffsets=start, endingOffsets=end)
    assert offsets(df) == {(ta, 0): [2, 3, 4], (ta, 1): list(range(10)), (tb, 0): [7, 8, 9]}
    got = rows(df)
    assert [r[1] for r in got if r[2] == ta and r[3] == 0] == [b"p0-2", b"p0-3", b"p0-4"]


def test_json_offsets_must_name_every_partition(spark, spark_broker):
    b = spark_broker
    t = create_topic(b.bootstrap, unique("jm"), 2)
    produce(b.bootstrap, t, numbered({0: 3, 1: 3}))
    text = spark_error(lambda: load(spark, b.bootstrap, subscribe=t, startingOffsets=json.dumps({t: {"0": 1}})).count())
    assert f"startingOffsets must name every assigned partition and no other (missing {t}-1)" in text
    text = spark_error(lambda: load(spark, b.bootstrap, subscribe=t,
                                    endingOffsets=json.dumps({t: {"0": 1, "1": 1, "2": 1}})).count())  # fmt: skip
    assert f"not assigned {t}-2" in text
    # assign names partitions explicitly: JSON offsets for just those
    df = load(spark, b.bootstrap, assign=json.dumps({t: [1]}), startingOffsets=json.dumps({t: {"1": 1}}))
    assert offsets(df) == {(t, 1): [1, 2]}


def test_start_after_end_or_end_past_the_log_is_an_error(spark, spark_broker):
    b = spark_broker
    t = create_topic(b.bootstrap, unique("se"), 1)
    produce(b.bootstrap, t, numbered({0: 5}))
    text = spark_error(lambda: load(spark, b.bootstrap, subscribe=t, startingOffsets=json.dumps({t: {"0": 4}}),
                                    endingOffsets=json.dumps({t: {"0": 2}})).count())  # fmt: skip
    assert f"{t}-0: the planned start 4 is after the planned end 2" in text
    text = spark_error(lambda: load(spark, b.bootstrap, subscribe=t, endingOffsets=json.dumps({t: {"0": 9}})).count())
    assert f"{t}-0: the planned end 9 is past the partition's end 5" in text


def test_timestamps(spark, spark_broker):
    b = spark_broker
    t = create_topic(b.bootstrap, unique("ts"), 2)
    produce(b.bootstrap, t, numbered({0: 10}) + numbered({1: 10}, timestamp=T0 + 500))
    # p0 stamped T0 + 1000i, p1 T0 + 500 + 1000i
    df = load(spark, b.bootstrap, subscribe=t, startingTimestamp=str(T0 + 2500), endingTimestamp=str(T0 + 6000))
    assert offsets(df) == {(t, 0): [3, 4, 5], (t, 1): [2, 3, 4, 5]}
    df = load(spark, b.bootstrap, subscribe=t, startingOffsetsByTimestamp=json.dumps({t: {"0": T0, "1": T0 + 8500}}),
              endingTimestamp=str(T0 + 99_000))  # no record that late: the end is latest  # fmt: skip
    assert offsets(df) == {(t, 0): list(range(10)), (t, 1): [8, 9]}
    # the timestamp takes precedence over startingOffsets
    df = load(spark, b.bootstrap, subscribe=t, startingOffsets=json.dumps({t: {"0": 0, "1": 0}}),
              startingTimestamp=str(T0 + 8000))  # fmt: skip
    assert offsets(df) == {(t, 0): [8, 9], (t, 1): [8, 9]}
    text = spark_error(lambda: load(spark, b.bootstrap, subscribe=t, startingTimestamp=str(T0 + 99_000)).count())
    assert f"has no record stamped at or after {T0 + 99_000}" in text
    df = load(spark, b.bootstrap, subscribe=t, startingTimestamp=str(T0 + 99_000),
              startingOffsetsByTimestampStrategy="latest")  # fmt: skip
    assert df.count() == 0


# --- topics ----------------------------------------------------------------------------------------


def test_subscribe_pattern_matches_whole_names(spark, spark_broker):
    b = spark_broker
    prefix = unique("pat")
    names = [f"{prefix}-a", f"{prefix}-b", f"{prefix}-ab", f"x{prefix}-a"]
    for i, name in enumerate(names):
        create_topic(b.bootstrap, name, 1)
        produce(b.bootstrap, name, numbered({0: i + 1}))
    df = load(spark, b.bootstrap, subscribePattern=re.escape(prefix) + "-[ab]")
    assert offsets(df) == {(names[0], 0): [0], (names[1], 0): [0, 1]}
    assert load(spark, b.bootstrap, subscribePattern=re.escape(prefix) + "-zzz").count() == 0


def test_unknown_topic_is_an_error(spark, spark_broker):
    t = unique("nosuch")
    text = spark_error(lambda: load(spark, spark_broker.bootstrap, subscribe=t).count())
    assert f"topic '{t}' does not exist" in text


# --- splitting -------------------------------------------------------------------------------------


def _input_partitions(df: Any) -> list[tuple[str, int, int, int, int]]:
    """Per Spark input partition in order: (topic, partition, first offset, last offset + 1, rows)."""
    got = df.selectExpr("spark_partition_id() AS pid", "topic", "partition", "offset").groupBy("pid").agg(
        F.min("topic"), F.max("topic"), F.min("partition"), F.max("partition"), F.min("offset"), F.max("offset"),
        F.count("*")).collect()  # fmt: skip
    out = []
    for r in sorted(got, key=lambda r: r["pid"]):
        assert r["min(topic)"] == r["max(topic)"] and r["min(partition)"] == r["max(partition)"], r
        out.append((r["min(topic)"], r["min(partition)"], r["min(offset)"], r["max(offset)"] + 1, r["count(1)"]))
    return out


@pytest.mark.parametrize(("options", "expected_count"), [
    ({"minPartitions": "5"}, 5),
    ({"maxRecordsPerPartition": "7"}, 15 + 5),
    # pieces of 33, 33, 34 and 30 offsets take 8, 8, 8 and 7 parts: Spark's rounding overshoots a little
    ({"minPartitions": "30", "maxRecordsPerPartition": "40"}, 31),
])  # fmt: skip
def test_splits_are_the_planned_ranges_in_order(spark, spark_broker, options, expected_count):
    b = spark_broker
    t = create_topic(b.bootstrap, unique("split"), 2)
    produce(b.bootstrap, t, numbered({0: 100, 1: 30}))
    opts = {"subscribe": t, **options}
    planned = plan_ranges(b.bootstrap, opts)
    assert planned == [OffsetRange(t, 0, 0, 100), OffsetRange(t, 1, 0, 30)]
    splits = split_ranges(planned, int(options.get("minPartitions", 0)) or None,
                          int(options.get("maxRecordsPerPartition", 0)) or None)  # fmt: skip
    assert len(splits) == expected_count
    df = load(spark, b.bootstrap, **opts)
    assert df.rdd.getNumPartitions() == len(splits)
    assert _input_partitions(df) == [(r.topic, r.partition, r.start, r.end, r.size) for r in splits]
    assert offsets(df) == {(t, 0): list(range(100)), (t, 1): list(range(30))}
    if "maxRecordsPerPartition" in options:
        assert max(r.size for r in splits) <= int(options["maxRecordsPerPartition"])


# --- empty ranges ----------------------------------------------------------------------------------


def test_empty_ranges_give_no_rows(spark, spark_broker):
    b = spark_broker
    empty = create_topic(b.bootstrap, unique("empty"), 2)
    assert plan_ranges(b.bootstrap, {"subscribe": empty}) == [OffsetRange(empty, 0, 0, 0), OffsetRange(empty, 1, 0, 0)]
    df = load(spark, b.bootstrap, subscribe=empty)
    assert df.count() == 0 and df.collect() == []
    t = create_topic(b.bootstrap, unique("emptyrange"), 1)
    produce(b.bootstrap, t, numbered({0: 5}))
    same = json.dumps({t: {"0": 3}})
    assert load(spark, b.bootstrap, subscribe=t, startingOffsets=same, endingOffsets=same).count() == 0
    assert list(read_range(b.bootstrap, OffsetRange(t, 0, 3, 3))) == []


# --- data loss -------------------------------------------------------------------------------------


@pytest.fixture
def trimmed(spark_broker) -> str:
    """A topic whose offsets 0-4 retention removed: one message per segment, retention.bytes=0."""
    b = spark_broker
    t = create_topic(b.bootstrap, unique("trim"), 1, {"segment.bytes": "14", "retention.bytes": "0"})
    produce(b.bootstrap, t, numbered({0: 6}), one_batch_each=True)
    with Admin(b.bootstrap) as admin:
        wait_until(lambda: admin.list_offsets([(t, 0)], EARLIEST) == {(t, 0): 5}, 15, "retention moved the log start")
    return t


def test_fail_on_data_loss_true_is_an_error_naming_the_gap(spark, spark_broker, trimmed):
    t = trimmed
    start = json.dumps({t: {"0": 0}})
    text = spark_error(lambda: load(spark, spark_broker.bootstrap, subscribe=t, startingOffsets=start).count())
    assert f"{t}-0: offsets [0, 5) are gone (the log starts at 5" in text and "failOnDataLoss=false" in text
    # earliest means the log start: no data lost
    assert offsets(load(spark, spark_broker.bootstrap, subscribe=t)) == {(t, 0): [5]}


def test_fail_on_data_loss_false_warns_and_skips(spark, spark_broker, trimmed, caplog):
    t = trimmed
    opts = {"subscribe": t, "startingOffsets": json.dumps({t: {"0": 1}}), "failOnDataLoss": "false"}
    df = load(spark, spark_broker.bootstrap, **opts)
    assert rows(df)[0][1:5] == (b"p0-5", t, 0, 5) and df.count() == 1
    with caplog.at_level(logging.WARNING, logger="broker.spark.source"):
        assert plan_ranges(spark_broker.bootstrap, opts) == [OffsetRange(t, 0, 5, 6)]
    assert f"{t}-0: offsets [1, 5) are gone (the log starts at 5); starting at 5 (failOnDataLoss=false)" in caplog.text


def test_data_lost_after_planning_fails_or_is_skipped_by_the_executor(spark_broker, trimmed, caplog):
    """The executor's own check: a range planned before retention struck."""
    b, t = spark_broker, trimmed
    with pytest.raises(DataLossError, match=re.escape(f"reading {t}-0 [2, 6): offsets [2, 5) are gone")):
        list(read_range(b.bootstrap, OffsetRange(t, 0, 2, 6)))
    with caplog.at_level(logging.WARNING, logger="broker.spark.source"):
        batches = list(read_range(b.bootstrap, OffsetRange(t, 0, 2, 6), fail_on_data_loss=False))
    assert [o for batch in batches for o in batch.column("offset").to_pylist()] == [5]
    assert f"reading {t}-0 [2, 6): offsets [2, 5) are gone (the log starts at 5); skipping them" in caplog.text
    with caplog.at_level(logging.WARNING, logger="broker.spark.source"):  # the whole range is gone
        assert list(read_range(b.bootstrap, OffsetRange(t, 0, 1, 4), fail_on_data_loss=False)) == []


# --- gaps, control batches, exact ends -------------------------------------------------------------


def test_offset_gaps_and_control_batches_never_read_past_the_end(spark, start_broker):
    """Offsets 0, 3, 7 (a compacted batch), 8-9 a control batch, then 10, 11: batches a producer may not
    send (the broker refuses them, as Kafka's does) but compaction and transactions leave in Kafka's logs,
    so they are written into the partition's segment while its broker is stopped."""
    b = start_broker(1)
    t = create_topic(b.bootstrap, unique("gaps"), 1)
    assert b.stop() == 0
    plog = PartitionLog(b.log_dir / f"{t}-0", LogConfig())
    try:
        for batch in (
            build_batch([Record(o, T0 + o, None, f"v{o}".encode()) for o in (0, 3, 7)]),
            build_batch([Record(o, T0, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00") for o in (8, 9)],
                        control=True),
            build_batch([Record(o, T0 + o, None, f"v{o}".encode()) for o in (10, 11)]),
        ):  # fmt: skip
            plog.append(batch, assign_offsets=False)  # as a follower copies its leader: offsets kept
        plog.flush()
    finally:
        plog.close()
    b.start()
    assert plan_ranges(b.bootstrap, {"subscribe": t}) == [OffsetRange(t, 0, 0, 12)]

    def read(start: int, end: int) -> list[int]:
        return [o for batch in read_range(b.bootstrap, OffsetRange(t, 0, start, end))
                for o in batch.column("offset").to_pylist()]  # fmt: skip

    assert read(0, 12) == [0, 3, 7, 10, 11]
    assert read(1, 7) == [3]  # stops before 7, though 7 came in the same batch
    assert read(4, 7) == []  # nothing in the range: ends at the gap
    assert read(8, 10) == []  # only the control batch
    assert read(8, 11) == [10]
    assert read(7, 8) == [7]
    df = load(spark, b.bootstrap, subscribe=t, maxRecordsPerPartition="3")
    assert [r[1] for r in rows(df)] == [b"v0", b"v3", b"v7", b"v10", b"v11"]


# --- corrupt data ----------------------------------------------------------------------------------


def test_a_batch_failing_its_crc_fails_the_task(spark, spark_broker):
    b = spark_broker
    t = create_topic(b.bootstrap, unique("crc"), 1)
    produce(b.bootstrap, t, [{"value": b"A" * 100}], one_batch_each=True)
    produce(b.bootstrap, t, [{"value": b"B" * 100}], one_batch_each=True)
    segment = Path(b.log_dir) / f"{t}-0" / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    data[-10] ^= 0x01  # a byte of the second batch's value: covered by its CRC, not by the framing
    segment.write_bytes(bytes(data))
    with pytest.raises(CorruptDataError, match=re.escape(f"reading {t}-0 [0, 2): ") + ".*fails its CRC"):
        list(read_range(b.bootstrap, OffsetRange(t, 0, 0, 2)))
    text = spark_error(lambda: load(spark, b.bootstrap, subscribe=t).collect())
    assert f"reading {t}-0 [0, 2)" in text and "fails its CRC" in text
    assert offsets(load(spark, b.bootstrap, subscribe=t, endingOffsets=json.dumps({t: {"0": 1}}))) == {(t, 0): [0]}


# --- options ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "needle"), [
    ({"subscribe": "t"}, "option bootstrap.servers is required"),
    ({"bootstrap.servers": "127.0.0.1:1", "subscribe": "t", "startingOffsets": "latest"},
     "startingOffsets cannot be latest for a batch read"),
    ({"bootstrap.servers": "127.0.0.1:1", "subscribe": "t", "subscribePattern": "t"},
     "give exactly one of the options subscribe, subscribePattern, assign (got: subscribe, subscribePattern)"),
    ({"bootstrap.servers": "127.0.0.1:1", "subscribe": "t", "minPartitions": "0"},
     "minPartitions: expected a positive whole number, got '0'"),
    ({"bootstrap.servers": "127.0.0.1:1", "subscribe": "t", "startingOfsets": "earliest"},
     "unknown option 'startingofsets'"),
])  # fmt: skip
def test_bad_options_fail_at_load_with_one_clear_error(spark, options, needle):
    reader = spark.read.format("kafkactl")
    for k, v in options.items():
        reader = reader.option(k, v)
    text = spark_error(reader.load)
    assert re.search(r"broker\.spark\.source\.SourceError: .*" + re.escape(needle), text), text


def test_the_schema_is_fixed(spark, spark_broker):
    reader = spark.read.format("kafkactl").schema("value string").option("bootstrap.servers", spark_broker.bootstrap)
    text = spark_error(lambda: reader.option("subscribe", "x").load().count())
    assert "the kafkactl source has a fixed schema" in text


def test_arrow_schema_is_what_spark_expects():
    from pyspark.sql.pandas.types import to_arrow_schema

    assert to_arrow_schema(SCHEMA, timezone="UTC").equals(ARROW_SCHEMA)


def test_an_unreachable_broker_is_one_clear_error(spark):
    text = spark_error(lambda: load(spark, "127.0.0.1:1", subscribe="t").count())
    assert "cannot connect to broker 127.0.0.1:1" in text
    with pytest.raises(SourceError):
        plan_ranges(None, {"subscribe": "t"})
