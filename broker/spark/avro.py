"""`spark-load --value-format avro`: Confluent-framed Avro values decoded into typed Spark columns.

The load's plan fixes one reader schema, the latest registered for the topics' `<topic>-value` subject.
Executors fetch each writer schema by the id in the value (once per worker process), and fastavro
resolves writer to reader, so values written with older compatible schemas load into the same columns.
Avro types map to Spark's as Spark's own Avro source maps them:

    null, boolean, int, long, float, double, bytes, string   NullType ... BinaryType, StringType
    record                                                   struct (fields nullable only from unions with null)
    enum                                                     string
    array, map                                               array, map<string, ...>
    fixed                                                    binary
    ["null", T]                                              T, nullable
    a union of several non-null types                        struct<member0, member1, ...>, one set
    logical date, timestamp-millis/-micros, decimal, uuid    date, timestamp, decimal(p, s), string
    logical time-millis / time-micros                        int / long (since midnight)

A value that is not Avro in Confluent's framing, or does not decode, fails the load (and nothing of it is
committed): a load is exactly what the topic holds, never a silent gap.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import uuid
from typing import Any

from broker.errors import UsageError

_FAST: dict[tuple[str, Any], Any] = {}  # (registry, id or reader text) -> parsed schema, per Python worker


def _types() -> Any:
    from pyspark.sql import types as T

    return T


def spark_type(schema: Any) -> Any:
    """The Spark type of an Avro schema (parsed JSON, named types expanded)."""
    T = _types()
    return _spark(schema, T, set())


def _spark(s: Any, T: Any, seen: set[str]) -> Any:
    if isinstance(s, list):
        branches = [b for b in s if b != "null"]
        if len(branches) == 1:
            return _spark(branches[0], T, seen)
        return T.StructType([T.StructField(f"member{i}", _spark(b, T, seen), True) for i, b in enumerate(branches)])
    if isinstance(s, str):
        return {"null": T.NullType(), "boolean": T.BooleanType(), "int": T.IntegerType(), "long": T.LongType(),
                "float": T.FloatType(), "double": T.DoubleType(), "bytes": T.BinaryType(),
                "string": T.StringType()}.get(s) or _unknown(s)  # fmt: skip
    t, logical = s.get("type"), s.get("logicalType")
    if isinstance(t, dict | list):
        return _spark(t, T, seen)
    if logical == "date" and t == "int":
        return T.DateType()
    if logical in ("timestamp-millis", "timestamp-micros") and t == "long":
        return T.TimestampType()
    if logical == "decimal" and t in ("bytes", "fixed"):
        return T.DecimalType(int(s["precision"]), int(s.get("scale", 0)))
    if t in ("record", "error"):
        name = s.get("name", "")
        if name in seen:
            raise UsageError(f"--value-format avro: record {name} is recursive, which Spark columns cannot hold")
        fields = []
        for f in s.get("fields", []):
            ft = f["type"]
            nullable = isinstance(ft, list) and "null" in ft
            fields.append(T.StructField(f["name"], _spark(ft, T, seen | {name}), nullable))
        return T.StructType(fields)
    if t == "enum":
        return T.StringType()
    if t == "array":
        items = s["items"]
        return T.ArrayType(_spark(items, T, seen), isinstance(items, list) and "null" in items)
    if t == "map":
        values = s["values"]
        return T.MapType(T.StringType(), _spark(values, T, seen), isinstance(values, list) and "null" in values)
    if t == "fixed":
        return T.BinaryType()
    if t in ("null", "boolean", "int", "long", "float", "double", "bytes", "string"):
        return _spark(t, T, seen)
    return _unknown(t)


def _unknown(t: Any) -> Any:
    raise UsageError(f"--value-format avro: no Spark type for Avro type {t!r}")


def to_row(datum: Any, s: Any) -> Any:
    """A decoded datum in the shape `spark_type(s)` describes (dicts for structs)."""
    if datum is None:
        return None
    if isinstance(s, list):
        branches = [b for b in s if b != "null"]
        if len(branches) == 1:
            return to_row(datum, branches[0])
        i = _branch(datum, branches)
        if isinstance(datum, tuple):
            datum = datum[1]  # (record name, record)
        return {f"member{j}": (to_row(datum, b) if j == i else None) for j, b in enumerate(branches)}
    if isinstance(s, str):
        return datum
    t, logical = s.get("type"), s.get("logicalType")
    if isinstance(t, dict | list):
        return to_row(datum, t)
    if t in ("record", "error"):
        return {f["name"]: to_row(datum.get(f["name"]), f["type"]) for f in s.get("fields", [])}
    if t == "array":
        return [to_row(x, s["items"]) for x in datum]
    if t == "map":
        return {k: to_row(v, s["values"]) for k, v in datum.items()}
    if isinstance(datum, uuid.UUID):
        return str(datum)
    if logical in ("time-millis", "time-micros") and isinstance(datum, dt.time):
        micros = ((datum.hour * 60 + datum.minute) * 60 + datum.second) * 1_000_000 + datum.microsecond
        return micros // 1000 if logical == "time-millis" else micros
    return datum


def _branch(datum: Any, branches: list[Any]) -> int:
    """Which branch of a union a decoded datum came from: a record by its name (fastavro tells it, see
    `_decoder`), anything else by its Python type, logical types included. ValueError when none fits."""
    if isinstance(datum, tuple) and len(datum) == 2 and isinstance(datum[0], str):
        name = datum[0]
        for i, b in enumerate(branches):
            if isinstance(b, dict) and b.get("type") in ("record", "error") and name in (
                    b.get("name"), b.get("name", "").rsplit(".", 1)[-1], _qualified(b)):  # fmt: skip
                return i
    for i, b in enumerate(branches):
        t = b if isinstance(b, str) else b.get("type")
        logical = None if isinstance(b, str) else b.get("logicalType")
        if isinstance(datum, bool):
            fits = t == "boolean"
        elif isinstance(datum, dt.datetime):
            fits = logical in ("timestamp-millis", "timestamp-micros", "local-timestamp-millis",
                               "local-timestamp-micros")  # fmt: skip
        elif isinstance(datum, dt.date):
            fits = logical == "date"
        elif isinstance(datum, dt.time):
            fits = logical in ("time-millis", "time-micros")
        elif isinstance(datum, decimal.Decimal):
            fits = logical == "decimal"
        elif isinstance(datum, uuid.UUID):
            fits = logical == "uuid"
        elif isinstance(datum, int):
            fits = t in ("int", "long") and logical is None
        elif isinstance(datum, float):
            fits = t in ("float", "double")
        elif isinstance(datum, str):
            fits = (t == "string" and logical is None) or (t == "enum" and datum in b.get("symbols", []))
        elif isinstance(datum, bytes):
            fits = t in ("bytes", "fixed") and logical is None
        elif isinstance(datum, dict):
            fits = t in ("map", "record", "error")
        elif isinstance(datum, list):
            fits = t == "array"
        else:
            fits = False
        if fits:
            return i
    raise ValueError(f"kafkactl spark-load: a {type(datum).__name__} value fits no branch of its union")


def _qualified(s: dict) -> str:
    ns = s.get("namespace")
    return f"{ns}.{s['name']}" if ns and "." not in s.get("name", "") else s.get("name", "")


def expanded(text: str) -> Any:
    """A schema's JSON with every named type written out where it is used."""
    import fastavro

    return fastavro.parse_schema(json.loads(text), expand=True, _write_hint=False)


def value_column(value: Any, registry: str, reader_text: str) -> Any:
    """The Spark column decoding `value` (binary) with `reader_text` as the reader schema."""
    from pyspark.sql import functions as F

    reader = expanded(reader_text)
    return F.udf(_decoder(registry, reader_text, reader), spark_type(reader), useArrow=False)(value)


def _decoder(registry: str, reader_text: str, reader: Any) -> Any:
    def decode(value):  # noqa: ANN001, ANN202 - no hints: Spark would read them as a pandas UDF's
        import fastavro

        from broker.schema_registry.wire import RegistryClient, schema_id_of

        if value is None:
            return None
        value = bytes(value)
        schema_id = schema_id_of(value)
        if schema_id is None:
            raise ValueError("kafkactl spark-load: a value is not Avro in Confluent's framing (magic byte 0, "
                             "schema id)")  # fmt: skip
        writer = _FAST.get((registry, schema_id))
        if writer is None:
            writer = _FAST[(registry, schema_id)] = RegistryClient(registry).schema(schema_id)
        parsed_reader = _FAST.get((registry, reader_text))
        if parsed_reader is None:
            parsed_reader = _FAST[(registry, reader_text)] = fastavro.parse_schema(json.loads(reader_text))
        datum = fastavro.schemaless_reader(
            io.BytesIO(value[5:]), writer, parsed_reader, return_record_name=True, return_record_name_override=True
        )  # a union's record comes named
        return to_row(datum, reader)

    return decode
