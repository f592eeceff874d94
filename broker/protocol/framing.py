"""Frames and headers: a request is `int32 size` + header + body; a response `int32 size` + header + body.

Request header v1: api_key int16, api_version int16, correlation_id int32, client_id nullable
string. Response header v0: correlation_id int32. A flexible version of an API (KIP-482) uses request
header v2 (v1 then a tagged-field section; client_id stays a plain nullable string) and response
header v1 (v0 then a tagged-field section), except ApiVersions, whose answer keeps header v0.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from broker.protocol.primitives import I32, Reader, Writer, part_length
from broker.protocol.schema import Struct

_TAGS_ONLY = Struct()  # a header's tagged-field section, read and written flexible


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


_HEADER_FIXED = struct.Struct(">hhi")


def read_request_header(r: Reader) -> RequestHeader:
    """The header's v1 fields; `read_header_tags` follows for a flexible request."""
    api_key, version, correlation_id = _HEADER_FIXED.unpack_from(r.buf, r._take(8))
    return RequestHeader(api_key, version, correlation_id, r.nullable_string())


def read_header_tags(r: Reader) -> None:
    """Pass over a flexible header's tagged fields (none is defined for requests kafkactl reads); the
    reader then reads the body in the flexible forms."""
    r.flex = True
    _TAGS_ONLY.read(r, 0)


def encode_request(
    api_key: int, version: int, correlation_id: int, client_id: str | None, schema: Struct, body: dict[str, Any]
) -> list[Any]:
    """A whole request frame as parts (size prefix included)."""
    w = Writer()
    w.int16(api_key)
    w.int16(version)
    w.int32(correlation_id)
    w.nullable_string(client_id)
    if schema.flexible(version):
        w.flex = True
        _TAGS_ONLY.write(w, {}, 0)
    schema.write(w, body, version)
    return framed(w.finish())


def encode_response(correlation_id: int, schema: Struct, body: dict[str, Any], version: int) -> list[Any]:
    """A whole response frame as parts (size prefix included)."""
    w = Writer()
    w.int32(correlation_id)
    if schema.flexible(version):
        w.flex = True
        if schema.header_flexible:
            _TAGS_ONLY.write(w, {}, 0)
    schema.write(w, body, version)
    return framed(w.finish())


def read_response_body(schema: Struct, r: Reader, version: int) -> dict[str, Any]:
    """A response's body, read after its correlation id (a client's side of `encode_response`)."""
    if schema.flexible(version):
        r.flex = True
        if schema.header_flexible:
            _TAGS_ONLY.read(r, 0)
    return schema.read(r, version)


def framed(parts: list[Any]) -> list[Any]:
    """Prefix the parts with their total size; the first part absorbs the prefix."""
    size = sum(part_length(p) for p in parts)
    if parts and isinstance(parts[0], bytes):
        return [I32.pack(size) + parts[0], *parts[1:]]
    return [I32.pack(size), *parts]
