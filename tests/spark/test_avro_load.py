"""`spark-load --value-format avro`: Confluent-framed Avro values, written by confluent-kafka's AvroSerializer
with two versions of a schema, land in typed Parquet columns of the latest schema (older values resolved
to it), every offset exactly once."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.integration.test_schema_registry import Registry
from tests.spark.test_load import cli_env, new_topic, spark_load_argv

pytest.importorskip("confluent_kafka.schema_registry.avro")

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroSerializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "item", "type": "string"},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "attrs", "type": {"type": "map", "values": "int"}, "default": {}},
    {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
        {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}}, "default": []},
]}  # fmt: skip
V2 = {**V1, "fields": [*V1["fields"], {"name": "channel", "type": "string", "default": "web"}]}
T0 = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def order(i: int, v2: bool) -> dict:
    o = {"id": i, "item": f"item-{i}", "status": "PAID" if i % 2 else "NEW", "price": decimal.Decimal(f"{i}.25"),
         "at": T0 + dt.timedelta(seconds=i), "note": None if i % 3 else f"note {i}", "attrs": {"n": i},
         "lines": [{"sku": f"s{j}", "qty": j} for j in range(i % 3)]}  # fmt: skip
    if v2:
        o["channel"] = "app"
    return o


def test_avro_values_load_into_typed_columns_of_the_latest_schema(spark_broker, zk_chroot, tmp_path: Path) -> None:
    registry = Registry(zk_chroot, tmp_path / "home").start()
    try:
        b = spark_broker.bootstrap
        topic = new_topic(b, 2)
        client = SchemaRegistryClient({"url": registry.url})
        producer = Producer({"bootstrap.servers": b})
        for version, schema, ids in ((1, V1, range(0, 6)), (2, V2, range(6, 10))):
            ser = AvroSerializer(client, json.dumps(schema))
            for i in ids:
                producer.produce(
                    topic,
                    key=str(i).encode(),
                    partition=i % 2,
                    value=ser(order(i, version == 2), SerializationContext(topic, MessageField.VALUE)),
                )
            producer.flush(10)
        del producer  # (librdkafka would log its connection's end when the broker stops)
        assert client.get_versions(f"{topic}-value") == [1, 2]

        out = tmp_path / "out"
        run = subprocess.run(spark_load_argv(b, out, topic, "--value-format", "avro", "--schema-registry",
                                             registry.url), capture_output=True, text=True, timeout=300,
                             env=cli_env())  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert "10 of 10 row(s)" in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
        table = pq.read_table([p for p in out.rglob("*.parquet")])
        rows = sorted(table.to_pylist(), key=lambda r: r["value"]["id"])
        assert [(r["key"], r["partition"], r["value"]["id"]) for r in rows] == [(str(i), i % 2, i) for i in range(10)]
        value_type = table.schema.field("value").type
        assert [value_type.field(i).name for i in range(value_type.num_fields)] == [f["name"] for f in V2["fields"]]
        assert str(value_type.field("price").type) == "decimal128(9, 2)"
        assert str(value_type.field("at").type).startswith("timestamp")
        for r in rows:
            i, v = r["value"]["id"], r["value"]
            want = order(i, True) if i >= 6 else {**order(i, False), "channel": "web"}  # v1 values get the default
            assert v["price"] == want["price"] and v["at"].replace(tzinfo=dt.UTC) == want["at"]
            assert v["attrs"] == [("n", i)] or v["attrs"] == {"n": i}
            assert {k: v[k] for k in ("item", "status", "note", "lines", "channel")} == {
                k: want[k] for k in ("item", "status", "note", "lines", "channel")}  # fmt: skip

        # a topic with no schema registered is one line, before anything is written
        bare = new_topic(b, 1)
        plain = Producer({"bootstrap.servers": b})
        plain.produce(bare, value=b"not avro")
        plain.flush(10)
        del plain
        run = subprocess.run(spark_load_argv(b, tmp_path / "out2", bare, "--value-format", "avro",
                                             "--schema-registry", registry.url),
                             capture_output=True, text=True, timeout=300, env=cli_env())  # fmt: skip
        assert run.returncode == 1 and run.stderr.startswith(f"kafkactl: error: --value-format avro: no schema for "
                                                             f"{bare}"), run.stderr  # fmt: skip
        # a value that is not Avro fails the load in one line, and nothing of it is committed
        stray = Producer({"bootstrap.servers": b})
        stray.produce(topic, value=b"plain text", partition=0)
        stray.flush(10)
        del stray
        run = subprocess.run(spark_load_argv(b, out, topic, "--schema-registry", registry.url),
                             capture_output=True, text=True, timeout=300, env=cli_env())  # fmt: skip
        assert run.returncode == 1 and "not Avro in Confluent's framing" in run.stderr, run.stderr
        assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr, run.stderr
        assert len(pq.read_table([p for p in out.rglob("*.parquet")])) == 10
    finally:
        registry.stop()
