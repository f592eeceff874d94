"""Raw wire helpers for integration tests: request frames as bytes, raw sockets, record batches, answers.

Well-formed requests go through `broker.client.connection.Connection`; these helpers are for what a
well-behaved client would never send (and for reading what comes back on a raw socket).
"""

from __future__ import annotations

import re
import socket
import struct
import time
from typing import Any

from broker.client.connection import Connection
from broker.protocol.api import APIS, ApiKey
from broker.protocol.framing import encode_request, read_response_body
from broker.protocol.messages.fetch import LATEST
from broker.protocol.primitives import I32, Reader
from broker.records.batch import BATCH_HEADER_SIZE, Record, build_batch, crc_ok, decode_header, iter_records

CLIENT_ID = "bad-input-test"


# --- frames ----------------------------------------------------------------------------------------


def frame(api_key: int, version: int, cid: int, body: dict[str, Any], client_id: str | None = CLIENT_ID) -> bytes:
    """A whole request frame (size prefix included) as one bytes object."""
    parts = encode_request(api_key, version, cid, client_id, APIS[api_key].request, body)
    return b"".join(bytes(p) for p in parts)


def raw_frame(api_key: int, version: int, cid: int, body: bytes, client_id: str | None = CLIENT_ID) -> bytes:
    """A frame with header v1 and an arbitrary body."""
    cid_bytes = b"\xff\xff" if client_id is None else struct.pack(">h", len(client_id)) + client_id.encode()
    payload = struct.pack(">hhi", api_key, version, cid) + cid_bytes + body
    return I32.pack(len(payload)) + payload


def decode_answer(data: bytes, api_key: int, version: int) -> tuple[int, dict[str, Any]]:
    """(correlation id, body) of one response frame (without its size); every byte must be read."""
    r = Reader(data)
    cid = r.int32()
    body = read_response_body(APIS[api_key].response, r, version)
    assert r.remaining() == 0, f"{ApiKey(api_key).name} v{version} answer has {r.remaining()} bytes left over"
    return cid, body


# --- raw sockets -----------------------------------------------------------------------------------


def connect(port: int, timeout: float = 10.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def local_port(s: socket.socket) -> int:
    return s.getsockname()[1]


def recv_exact(s: socket.socket, n: int) -> bytes | None:
    """`n` bytes, or None when the peer closes (or resets) first."""
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = s.recv(n - len(buf))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def read_frame(s: socket.socket) -> bytes | None:
    """The next response frame (without its size), or None when the broker closed the connection."""
    head = recv_exact(s, 4)
    if head is None:
        return None
    size = I32.unpack(head)[0]
    assert 4 <= size <= 64 << 20, f"response frame size {size}"
    data = recv_exact(s, size)
    assert data is not None, f"the broker closed the connection inside a {size}-byte response"
    return data


def read_until_closed(s: socket.socket, timeout: float) -> tuple[list[bytes], str]:
    """Every response frame until the broker ends the connection: (frames, "eof" | "reset" | "timeout")."""
    deadline = time.monotonic() + timeout
    buf = bytearray()
    how = "timeout"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        s.settimeout(left)
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            how = "reset"
            break
        if not chunk:
            how = "eof"
            break
        buf += chunk
    frames = []
    pos = 0
    while len(buf) - pos >= 4:
        size = I32.unpack_from(buf, pos)[0]
        if size < 4 or len(buf) - pos - 4 < size:
            break
        frames.append(bytes(buf[pos + 4 : pos + 4 + size]))
        pos += 4 + size
    assert pos == len(buf) or how != "eof", f"{len(buf) - pos} bytes after the last whole response frame"
    return frames, how


def closed_by_broker(s: socket.socket, timeout: float = 10.0) -> bool:
    """Whether the broker ends the connection (EOF or reset) within `timeout`, sending nothing."""
    frames, how = read_until_closed(s, timeout)
    assert not frames, f"expected no answer, got {len(frames)} frame(s): {frames[0][:40].hex()}"
    return how in ("eof", "reset")


# --- broker log ------------------------------------------------------------------------------------


def closing_lines(log: str, port: int) -> list[str]:
    """The broker's `closing connection from` lines for the client connection from local `port`."""
    pat = re.compile(rf"closing connection from 127\.0\.0\.1:{port}\b")
    return [line for line in log.splitlines() if pat.search(line)]


class LogTail:
    """Reads what a broker's output file gained since the last look."""

    def __init__(self, broker: Any) -> None:
        self.path = broker.output
        self.pos = self.path.stat().st_size

    def mark(self) -> None:
        self.pos = self.path.stat().st_size

    def new_text(self) -> str:
        with open(self.path, "rb") as f:
            f.seek(self.pos)
            return f.read().decode(errors="replace")


def wait_for_closing_lines(broker: Any, port: int, want: int = 1, timeout: float = 5.0) -> list[str]:
    """The closing lines for `port`, waiting a little for the broker to write them."""
    deadline = time.monotonic() + timeout
    while True:
        lines = closing_lines(broker.log_text(), port)
        if len(lines) >= want or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


# --- record batches --------------------------------------------------------------------------------


def make_batch(values: list[bytes], *, key: bytes | None = None, producer_id: int = -1, producer_epoch: int = -1,
               base_sequence: int = -1, timestamp: int | None = None) -> bytes:  # fmt: skip
    ts = int(time.time() * 1000) if timestamp is None else timestamp
    records = [Record(i, ts + i, key, v, (("h", b"x"),) if i == 0 else ()) for i, v in enumerate(values)]
    return build_batch(records, producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence)


def flip(data: bytes, pos: int, mask: int = 0x01) -> bytes:
    b = bytearray(data)
    b[pos] ^= mask
    return bytes(b)


def set_i32(data: bytes, pos: int, value: int) -> bytes:
    b = bytearray(data)
    struct.pack_into(">i", b, pos, value)
    return bytes(b)


def values_of(record_set: Any) -> list[bytes | None]:
    """The values of the whole batches in a fetched record set (a trailing partial batch is skipped)."""
    buf = bytes(record_set or b"")
    out: list[bytes | None] = []
    pos = 0
    while len(buf) - pos >= BATCH_HEADER_SIZE:
        h = decode_header(buf, pos)
        if pos + h.size > len(buf):
            break
        assert h.magic == 2 and crc_ok(buf, pos, h), f"fetched batch at byte {pos} fails its CRC"
        out.extend(r.value for r in iter_records(buf, pos, h))
        pos += h.size
    return out


# --- well-formed requests through the client connection --------------------------------------------


def open_conn(broker: Any, timeout: float = 15.0) -> Connection:
    return Connection("127.0.0.1", broker.port, client_id=CLIENT_ID, timeout=timeout)


def produce_body(topic: str, records: dict[int, Any], acks: int = 1, timeout_ms: int = 10000) -> dict[str, Any]:
    return {
        "transactional_id": None, "acks": acks, "timeout_ms": timeout_ms,
        "topics": [{"name": topic, "partitions": [{"index": p, "records": r} for p, r in records.items()]}],
    }  # fmt: skip


def fetch_body(topic: str, partition: int, offset: int, max_wait_ms: int = 0, min_bytes: int = 0) -> dict[str, Any]:
    return {
        "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": 8 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [
            {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 4 << 20},
        ]}],
        "forgotten_topics_data": [], "rack_id": "",
    }  # fmt: skip


def list_offsets_body(topic: str, partition: int, timestamp: int = LATEST) -> dict[str, Any]:
    return {
        "replica_id": -1, "isolation_level": 0,
        "topics": [{"name": topic, "partitions": [{"partition_index": partition, "timestamp": timestamp}]}],
    }  # fmt: skip


def metadata_body(topics: list[str] | None, allow_auto_topic_creation: bool = True) -> dict[str, Any]:
    return {
        "topics": None if topics is None else [{"name": t} for t in topics],
        "allow_auto_topic_creation": allow_auto_topic_creation,
    }


def create_topic(conn: Connection, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    body = {
        "topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
            "configs": [{"name": k, "value": v} for k, v in (config or {}).items()],
        }],
        "timeout_ms": 10000, "validate_only": False,
    }  # fmt: skip
    answer = conn.request(ApiKey.CREATE_TOPICS, body)
    [t] = answer["topics"]
    assert (t["name"], t["error_code"]) == (name, 0), t


def produce(conn: Connection, topic: str, records: dict[int, Any], acks: int = 1,
            version: int | None = None) -> dict[int, dict[str, Any]]:  # fmt: skip
    """Per partition, the produce answer's partition entry."""
    answer = conn.request(ApiKey.PRODUCE, produce_body(topic, records, acks), version)
    [t] = answer["topics"]
    assert t["name"] == topic
    out = {p["index"]: p for p in t["partitions"]}
    assert sorted(out) == sorted(records), out
    return out


def produce_one(conn: Connection, topic: str, partition: int, batch: bytes, acks: int = 1) -> dict[str, Any]:
    return produce(conn, topic, {partition: batch}, acks)[partition]


def fetch_partition(conn: Connection, topic: str, partition: int, offset: int = 0) -> dict[str, Any]:
    answer = conn.request(ApiKey.FETCH, fetch_body(topic, partition, offset))
    [t] = answer["topics"]
    [p] = t["partitions"]
    assert (t["topic"], p["partition_index"]) == (topic, partition)
    return p


def fetch_values(conn: Connection, topic: str, partition: int, offset: int = 0) -> list[bytes | None]:
    p = fetch_partition(conn, topic, partition, offset)
    assert p["error_code"] == 0, p
    return values_of(p["records"])


def list_offset_entry(conn: Connection, topic: str, partition: int, timestamp: int = LATEST) -> dict[str, Any]:
    answer = conn.request(ApiKey.LIST_OFFSETS, list_offsets_body(topic, partition, timestamp))
    [t] = answer["topics"]
    [p] = t["partitions"]
    assert (t["name"], p["partition_index"]) == (topic, partition)
    return p


def latest_offset(conn: Connection, topic: str, partition: int) -> int:
    p = list_offset_entry(conn, topic, partition)
    assert p["error_code"] == 0, p
    return p["offset"]


def metadata_topic(conn: Connection, topic: str, allow_auto_topic_creation: bool = True,
                   version: int | None = None) -> dict[str, Any]:  # fmt: skip
    answer = conn.request(ApiKey.METADATA, metadata_body([topic], allow_auto_topic_creation), version)
    [t] = answer["topics"]
    assert t["name"] == topic
    return t
