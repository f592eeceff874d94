"""Avro values as Spark rows: a union's value goes to the branch it was written with, records by name."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest

fastavro = pytest.importorskip("fastavro")
pytest.importorskip("pyspark")

from broker.spark.avro import expanded, spark_type, to_row  # noqa: E402

SCHEMA = {"type": "record", "name": "R", "namespace": "n", "fields": [
    {"name": "u", "type": ["null", {"type": "record", "name": "A", "fields": [{"name": "a", "type": "int"}]},
                           {"type": "record", "name": "B", "fields": [{"name": "b", "type": "string"}]},
                           {"type": "long", "logicalType": "timestamp-millis"}, "string"]}]}  # fmt: skip
T = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def roundtrip(value: object) -> object:
    parsed = fastavro.parse_schema(SCHEMA)
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, {"u": value})
    buf.seek(0)
    datum = fastavro.schemaless_reader(buf, parsed, parsed, return_record_name=True, return_record_name_override=True)
    return to_row(datum, expanded(json.dumps(SCHEMA)))["u"]


@pytest.mark.parametrize(("value", "member"), [({"a": 1}, 0), ({"b": "x"}, 1), (T, 2), ("s", 3)])
def test_a_union_value_lands_in_its_own_branch(value: object, member: int) -> None:
    row = roundtrip(value)
    assert [k for k, v in row.items() if v is not None] == [f"member{member}"]
    assert row[f"member{member}"] == value


def test_null_stays_null_and_the_struct_has_a_member_per_branch() -> None:
    assert roundtrip(None) is None
    t = spark_type(expanded(json.dumps(SCHEMA)))
    assert [f.name for f in t["u"].dataType.fields] == ["member0", "member1", "member2", "member3"]
