"""Frames and headers: a request is `int32 size` + header v1 + body; a response `int32 size` + header v0 + body.

Request header v1: api_key int16, api_version int16, correlation_id int32, client_id nullable
string. Response header v0: correlation_id int32. (The flexible header versions, with tagged
fields, belong to API versions kafkactl does not speak.)
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from broker.protocol.primitives import I32, Reader, Writer, part_length


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


_HEADER_FIXED = struct.Struct(">hhi")


def read_request_header(r: Reader) -> RequestHeader:
    api_key, version, correlation_id = _HEADER_FIXED.unpack_from(r.buf, r._take(8))
    return RequestHeader(api_key, version, correlation_id, r.nullable_string())


def encode_request(
    api_key: int, version: int, correlation_id: int, client_id: str | None, schema: Any, body: dict[str, Any]
) -> list[Any]:
    """A whole request frame as parts (size prefix included)."""
    w = Writer()
    w.int16(api_key)
    w.int16(version)
    w.int32(correlation_id)
    w.nullable_string(client_id)
    schema.write(w, body, version)
    return framed(w.finish())


def encode_response(correlation_id: int, schema: Any, body: dict[str, Any], version: int) -> list[Any]:
    """A whole response frame as parts (size prefix included)."""
    w = Writer()
    w.int32(correlation_id)
    schema.write(w, body, version)
    return framed(w.finish())


def framed(parts: list[Any]) -> list[Any]:
    """Prefix the parts with their total size; the first part absorbs the prefix."""
    size = sum(part_length(p) for p in parts)
    if parts and isinstance(parts[0], bytes):
        return [I32.pack(size) + parts[0], *parts[1:]]
    return [I32.pack(size), *parts]
