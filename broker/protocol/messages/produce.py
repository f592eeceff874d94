"""Produce (0), InitProducerId (22) and DescribeProducers (61).

Besides the schemas, the hot paths have their own Produce codec: the producer's
`encode_produce_request` / `read_produce_response` and the broker's `read_produce_request` /
`encode_produce_response`, byte for byte what the schemas write and read (a test holds them to it),
without walking the schema field by field. Runs of pipelined one-partition requests and their
answers have a C codec besides (`RUN_CODEC`, broker/protocol/_produce_run.c), None when it was not
built or `KAFKACTL_PURE_PYTHON` is set: then every request and answer goes through this module.
"""

from __future__ import annotations

import functools
import os
import struct
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from broker.protocol.primitives import I16, I32, DecodeError, Reader, Writer
from broker.protocol.schema import (
    INT16,
    INT32,
    INT64,
    NULLABLE_STRING,
    RECORDS,
    STRING,
    Array,
    F,
    Struct,
)  # fmt: skip

try:
    from broker.protocol import _produce_run as RUN_CODEC
except ImportError:  # pragma: no cover - depends on the build
    RUN_CODEC = None
if os.environ.get("KAFKACTL_PURE_PYTHON"):
    RUN_CODEC = None

PRODUCE_REQUEST = Struct(
    F("transactional_id", NULLABLE_STRING, "3+"),
    F("acks", INT16),
    F("timeout_ms", INT32),
    F("topics", Array(Struct(
        F("name", STRING),
        F("partitions", Array(Struct(F("index", INT32), F("records", RECORDS)))),
    ))),
    flexible_from=9,
)  # fmt: skip

PRODUCE_RESPONSE = Struct(
    F("topics", Array(Struct(
        F("name", STRING),
        F("partitions", Array(Struct(
            F("index", INT32),
            F("error_code", INT16),
            F("base_offset", INT64, default=-1),
            F("log_append_time_ms", INT64, "2+", default=-1),
            F("log_start_offset", INT64, "5+", default=-1),
            F("record_errors", Array(Struct(F("batch_index", INT32), F("message", NULLABLE_STRING))), "8+"),
            F("error_message", NULLABLE_STRING, "8+"),
        ))),
    ))),
    F("throttle_time_ms", INT32, "1+"),
    flexible_from=9,
)  # fmt: skip

#: the highest Produce version of the producer's hand-written codecs and of the C run codec (the broker's
#: hand-written reader and answer speak v9 too)
FAST_MAX_VERSION = 8

INIT_PRODUCER_ID_REQUEST = Struct(
    F("transactional_id", NULLABLE_STRING),
    F("transaction_timeout_ms", INT32),
    F("producer_id", INT64, "3+", default=-1),  # (KIP-360: an existing producer asking for a new epoch)
    F("producer_epoch", INT16, "3+", default=-1),
    flexible_from=2,
)

INIT_PRODUCER_ID_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("producer_id", INT64, default=-1),
    F("producer_epoch", INT16, default=-1),
    flexible_from=2,
)

DESCRIBE_PRODUCERS_REQUEST = Struct(
    F("topics", Array(Struct(F("name", STRING), F("partition_indexes", Array(INT32))))),
    flexible_from=0,
)

DESCRIBE_PRODUCERS_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("topics", Array(Struct(
        F("name", STRING),
        F("partitions", Array(Struct(
            F("partition_index", INT32),
            F("error_code", INT16),
            F("error_message", NULLABLE_STRING),
            F("active_producers", Array(Struct(
                F("producer_id", INT64),
                F("producer_epoch", INT32),
                F("last_sequence", INT32, default=-1),
                F("last_timestamp", INT64, default=-1),
                F("coordinator_epoch", INT32),
                F("current_txn_start_offset", INT64, default=-1),
            ))),
        ))),
    ))),
    flexible_from=0,
)  # fmt: skip


_ACKS_TIMEOUT_COUNT = struct.Struct(">hii")
_ACKS_TIMEOUT = struct.Struct(">hi")
_PARTITION_V9 = struct.Struct(">ihqqq")  # index, error_code, base_offset, log_append_time_ms, log_start_offset
_NULL_STRING = I16.pack(-1)
_INDEX_SIZE = struct.Struct(">ii")
_PARTITION_HEAD = struct.Struct(">ihq")  # index, error_code, base_offset
_I64 = struct.Struct(">q")


def encode_produce_request(version: int, acks: int, timeout_ms: int,
                           topics: Mapping[str, Sequence[tuple[int, Any]]]) -> list[Any]:  # fmt: skip
    """A Produce request body (no transactional id) as parts; each partition's record set is a part by reference."""
    parts: list[Any] = []
    head = bytearray(_NULL_STRING if version >= 3 else b"")
    head += _ACKS_TIMEOUT_COUNT.pack(acks, timeout_ms, len(topics))
    for name, partitions in topics.items():
        encoded = name.encode()
        head += I16.pack(len(encoded))
        head += encoded
        head += I32.pack(len(partitions))
        for index, records in partitions:
            head += _INDEX_SIZE.pack(index, len(records))
            parts.append(bytes(head))
            parts.append(records)
            head = bytearray()
    if head:
        parts.append(bytes(head))
    return parts


@functools.lru_cache(maxsize=1024)
def one_partition_head(version: int, acks: int, timeout_ms: int, topic: str) -> bytes:
    """What precedes the partition index in a request of one topic and one partition."""
    encoded = topic.encode()
    return (_NULL_STRING if version >= 3 else b"") + _ACKS_TIMEOUT_COUNT.pack(acks, timeout_ms, 1) \
        + I16.pack(len(encoded)) + encoded + I32.pack(1)  # fmt: skip


def one_partition_lead(version: int, acks: int, timeout_ms: int, topic: str, partition: int, size: int) -> bytes:
    """A request body of one partition up to its record set of `size` bytes, which follows it."""
    return one_partition_head(version, acks, timeout_ms, topic) + _INDEX_SIZE.pack(partition, size)


def encode_one_partition_request(version: int, acks: int, timeout_ms: int, topic: str, partition: int,
                                 records: Any) -> list[Any]:  # fmt: skip
    """`encode_produce_request` of one partition's record set (the usual request), from a cached head."""
    return [one_partition_head(version, acks, timeout_ms, topic) + _INDEX_SIZE.pack(partition, len(records)),
            records]  # fmt: skip


class PartitionResult(NamedTuple):
    topic: str
    partition: int
    error_code: int
    base_offset: int
    error_message: str | None


_COUNT_NAME_LENGTH = struct.Struct(">ih")
#: by version, what follows the topic name in an answer of one partition: partition count, index, error
#: code, base offset, [log append time], [log start offset], [record error count, error message length],
#: [throttle time]
_ONE_PARTITION_TAIL = [
    struct.Struct(">iihq" + "q" * (v >= 2) + "q" * (v >= 5) + "ih" * (v >= 8) + "i" * (v >= 1)) for v in range(10)
]


def read_produce_response(r: Reader, version: int) -> list[PartitionResult]:
    """The partitions of a Produce answer (log append time, log start and record errors are skipped)."""
    buf = r.buf
    pos, end = r.pos, r.end
    if end - pos >= 6 and version < len(_ONE_PARTITION_TAIL):  # the usual answer, one partition: two unpacks
        topics, name_length = _COUNT_NAME_LENGTH.unpack_from(buf, pos)
        tail = _ONE_PARTITION_TAIL[version]
        if topics == 1 and name_length >= 0 and end - pos == 6 + name_length + tail.size:
            f = tail.unpack_from(buf, pos + 6 + name_length)
            if f[0] == 1 and (version < 8 or (f[-3] == 0 and f[-2] == -1)):
                try:
                    name = str(buf[pos + 6 : pos + 6 + name_length], "utf-8")
                except UnicodeDecodeError as exc:
                    raise DecodeError(f"string at {pos + 6} is not UTF-8") from exc
                r.pos = end
                return [PartitionResult(name, f[1], f[2], f[3], None)]
    out = []
    for _ in range(r.array_length(False)):
        name = r.string()
        for _ in range(r.array_length(False)):
            pos = r._take(14)
            index, code, base = _PARTITION_HEAD.unpack_from(buf, pos)
            if version >= 2:
                r._take(8)
            if version >= 5:
                r._take(8)
            message = None
            if version >= 8:
                for _ in range(r.array_length(False)):
                    r.int32()
                    r.nullable_string()
                message = r.nullable_string()
            out.append(PartitionResult(name, index, code, base, message))
    if version >= 1:
        r.int32()
    return out


def read_produce_request(r: Reader, version: int) -> dict[str, Any]:
    """A Produce request body, as `PRODUCE_REQUEST.read` gives it (record sets are views of the frame)."""
    if version > FAST_MAX_VERSION:
        return _read_flexible_request(r)
    tid = r.nullable_string() if version >= 3 else None
    buf = r.buf
    acks, timeout_ms, count = _ACKS_TIMEOUT_COUNT.unpack_from(buf, r._take(10))
    if count < 0 or count > r.remaining():
        raise DecodeError(f"array of {count} topics in {r.remaining()} bytes")
    topics = []
    for _ in range(count):
        name = r.string()
        partitions = []
        for _ in range(r.array_length(False)):
            index, size = _INDEX_SIZE.unpack_from(buf, r._take(8))
            if size < 0:
                records = None
            else:
                pos = r._take(size)
                records = buf[pos : pos + size]
            partitions.append({"index": index, "records": records})
        topics.append({"name": name, "partitions": partitions})
    body = {"transactional_id": tid} if version >= 3 else {}
    body.update(acks=acks, timeout_ms=timeout_ms, topics=topics)
    return body


def _read_flexible_request(r: Reader) -> dict[str, Any]:
    """`read_produce_request` of v9: compact strings, arrays and record sets, and tagged fields (skipped)."""
    tid = r.compact_nullable_string()
    buf = r.buf
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, r._take(6))
    topics = []
    for _ in range(r.array_length(False)):
        name = r.compact_string()
        partitions = []
        for _ in range(r.array_length(False)):
            index = I32.unpack_from(buf, r._take(4))[0]
            partitions.append({"index": index, "records": r.compact_nullable_bytes()})
            _skip_tags(r)
        _skip_tags(r)
        topics.append({"name": name, "partitions": partitions})
    _skip_tags(r)
    return {"transactional_id": tid, "acks": acks, "timeout_ms": timeout_ms, "topics": topics}


def _skip_tags(r: Reader) -> None:
    for _ in range(r.uvarint()):
        r.uvarint()
        r.skip(r.uvarint())


def encode_produce_response(correlation_id: int, answer: dict[str, Any], version: int) -> list[bytes]:
    """A whole Produce answer frame (size prefix included), as `encode_response` writes it."""
    if version > FAST_MAX_VERSION:
        return _encode_flexible_response(correlation_id, answer)
    out = bytearray(8)
    topics = answer["topics"]
    out += I32.pack(len(topics))
    for t in topics:
        encoded = t["name"].encode()
        out += I16.pack(len(encoded))
        out += encoded
        partitions = t["partitions"]
        out += I32.pack(len(partitions))
        for p in partitions:
            out += _PARTITION_HEAD.pack(p["index"], p["error_code"], p.get("base_offset", -1))
            if version >= 2:
                out += _I64.pack(p.get("log_append_time_ms", -1))
            if version >= 5:
                out += _I64.pack(p.get("log_start_offset", -1))
            if version >= 8:
                errors = p.get("record_errors") or ()
                out += I32.pack(len(errors))
                for e in errors:
                    out += I32.pack(e["batch_index"])
                    _write_nullable_string(out, e.get("message"))
                _write_nullable_string(out, p.get("error_message"))
    if version >= 1:
        out += I32.pack(answer.get("throttle_time_ms", 0))
    struct.pack_into(">ii", out, 0, len(out) - 4, correlation_id)
    return [bytes(out)]


def _encode_flexible_response(correlation_id: int, answer: dict[str, Any]) -> list[bytes]:
    """`encode_produce_response` of v9: response header v1, compact forms, no tagged field set."""
    w = Writer()
    w.flex = True
    w.buf += bytes(8)  # size and correlation id, filled in below
    w.buf.append(0)  # the header's tagged fields
    topics = answer["topics"]
    w.array_length(len(topics))
    for t in topics:
        w.compact_string(t["name"])
        partitions = t["partitions"]
        w.array_length(len(partitions))
        for p in partitions:
            w.buf += _PARTITION_V9.pack(p["index"], p["error_code"], p.get("base_offset", -1),
                                        p.get("log_append_time_ms", -1), p.get("log_start_offset", -1))  # fmt: skip
            errors = p.get("record_errors") or ()
            w.array_length(len(errors))
            for e in errors:
                w.buf += I32.pack(e["batch_index"])
                w.compact_nullable_string(e.get("message"))
                w.buf.append(0)
            w.compact_nullable_string(p.get("error_message"))
            w.buf.append(0)
        w.buf.append(0)
    w.buf += I32.pack(answer.get("throttle_time_ms", 0))
    w.buf.append(0)
    out = w.buf
    struct.pack_into(">ii", out, 0, len(out) - 4, correlation_id)
    return [bytes(out)]


def _write_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += _NULL_STRING
        return
    encoded = value.encode()
    out += I16.pack(len(encoded))
    out += encoded
