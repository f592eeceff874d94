"""Avro values in Confluent's wire format, and the registry client that resolves their schema ids.

A value is one byte 0 (the magic), the schema's registry id as a 4-byte big-endian integer, then the
record in Avro's binary encoding (fastavro's schemaless writer and reader). Schemas are fetched once
per id and cached, as the paper's consumers resolve them.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import struct
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import fastavro

from broker.errors import KafkactlError, UsageError

MAGIC = 0
_HEAD = struct.Struct(">bI")
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryClient:
    """The few calls kafkactl makes of a schema registry (Confluent's REST API), with schemas cached by id."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._schemas: dict[int, Any] = {}

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE})  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("message")
            except (ValueError, AttributeError):
                message = None
            raise KafkactlError(f"schema registry {self.url}: {message or exc}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise KafkactlError(f"cannot reach the schema registry at {self.url}: {reason}") from None

    def register(self, subject: str, schema: str) -> int:
        """Register `schema` under `subject` (a compatible new version, or the id it has); returns its id."""
        return int(self._call("POST", f"/subjects/{urllib.parse.quote(subject, safe='')}/versions",
                              {"schema": schema})["id"])  # fmt: skip

    def latest(self, subject: str) -> str:
        """The text of the latest schema registered under `subject`."""
        return self._call("GET", f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/latest")["schema"]

    def schema(self, schema_id: int) -> Any:
        """The parsed schema of an id, fetched once."""
        parsed = self._schemas.get(schema_id)
        if parsed is None:
            text = self._call("GET", f"/schemas/ids/{schema_id}")["schema"]
            parsed = self._schemas[schema_id] = fastavro.parse_schema(json.loads(text))
        return parsed


def parse(text: str) -> Any:
    """A schema's text parsed for fastavro; KafkactlError naming what is wrong."""
    try:
        return fastavro.parse_schema(json.loads(text))
    except Exception as exc:  # JSON or schema errors of several kinds
        raise KafkactlError(f"not an Avro schema: {exc}") from None


def encode(schema_id: int, parsed: Any, datum: Any) -> bytes:
    """`datum` (JSON-like: dicts, lists, numbers, strings) as a Confluent-framed Avro value."""
    out = io.BytesIO()
    out.write(_HEAD.pack(MAGIC, schema_id))
    fastavro.schemaless_writer(out, parsed, datum, strict_allow_default=True)
    return out.getvalue()


def schema_id_of(value: bytes | None) -> int | None:
    """The schema id of a Confluent-framed value, or None when it is not one."""
    if value is None or len(value) < 5 or value[0] != MAGIC:
        return None
    return _HEAD.unpack_from(value)[1]


def decode(value: bytes, parsed: Any) -> Any:
    """The datum of a Confluent-framed value."""
    return fastavro.schemaless_reader(io.BytesIO(memoryview(value)[5:]), parsed, None)


def to_json(datum: Any) -> str:
    """A decoded datum as compact JSON text: bytes as Avro's JSON encoding writes them (one code point a
    byte), dates and times in ISO 8601, decimals and UUIDs as strings."""
    return json.dumps(datum, default=_json_default, ensure_ascii=False, separators=(",", ":"))


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("latin-1")
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


class AvroEncoder:
    """JSON documents to Confluent-framed Avro values of one schema, registered once under a subject."""

    def __init__(self, registry: RegistryClient, subject: str, schema_text: str) -> None:
        self.parsed = parse(schema_text)
        self.schema_id = registry.register(subject, schema_text)

    def encode(self, text: bytes, line: int = 0) -> bytes:
        """One JSON document (a message's value as given) as an Avro value; UsageError naming the line when it
        is not JSON or does not fit the schema."""
        where = f"line {line}: " if line else ""
        try:
            datum = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise UsageError(f"{where}the value is not JSON ({exc}); --value-schema encodes JSON documents") from None
        try:
            return encode(self.schema_id, self.parsed, datum)
        except Exception as exc:  # fastavro's ValueError, TypeError, KeyError, ... for a datum that does not fit
            raise UsageError(f"{where}the value does not fit the schema: {exc}") from None


async def avro_values(messages: AsyncIterator[Any], encoder: AvroEncoder) -> AsyncIterator[Any]:
    """The messages with their (non-null) values encoded by `encoder`."""
    async for m in messages:
        if m.value is not None:
            m.value = encoder.encode(m.value, m.line)
        yield m


class AvroDecoder:
    """Confluent-framed Avro values to JSON text, each schema fetched once; values that are not framed, or
    whose schema cannot be had, are given back as they are and `on_skip(reason)` is called."""

    def __init__(self, registry: RegistryClient, on_skip: Callable[[str], None] | None = None) -> None:
        self.registry = registry
        self.on_skip = on_skip or (lambda reason: None)
        self._missing: set[int] = set()

    def __call__(self, value: bytes | None) -> bytes | None:
        schema_id = schema_id_of(value)
        if value is None:
            return None
        if schema_id is None:
            self.on_skip("some values are not Avro in Confluent's framing: shown as they are")
            return value
        if schema_id in self._missing:
            return value
        try:
            parsed = self.registry.schema(schema_id)
        except KafkactlError as exc:
            if "not found" not in str(exc):
                raise  # the registry is unreachable: one clear error, not a stream of raw values
            self._missing.add(schema_id)
            self.on_skip(f"schema {schema_id} is not in the registry: its values are shown as they are")
            return value
        try:
            return to_json(decode(value, parsed)).encode()
        except Exception:  # a value cut short or not written with its schema
            self.on_skip("some values do not decode with their schema: shown as they are")
            return value
