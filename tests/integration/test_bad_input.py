"""Bad input never costs data (the design's principle): a live broker against malformed and hostile requests.

- A frame that cannot be framed or parsed (fuzzed, truncated, oversized, negative size, unknown API, a
  version not spoken) closes only its own connection, with exactly one `closing connection from` line and
  no traceback; other connections, and the data already written, are untouched.
- Bad record batches (CRC, framing, magic, size) are refused per partition with Kafka's error codes and
  nothing of them is appended; unknown topics and partitions, bad acks and idempotent-producer sequence
  errors get their codes; acks=0 gets no answer.

Every broker here is a real `kafkactl broker start` process on a real ZooKeeper.
"""

from __future__ import annotations

import random
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest

from broker.protocol.api import APIS, ApiKey, api_versions_table
from broker.protocol.framing import read_header_tags, read_request_header
from broker.protocol.primitives import I16, I32, DecodeError, Reader
from tests.integration.cluster import BrokerProcess, new_chroot
from tests.integration.wire import (
    LogTail,
    closed_by_broker,
    closing_lines,
    connect,
    create_topic,
    decode_answer,
    fetch_body,
    fetch_partition,
    fetch_values,
    flip,
    frame,
    latest_offset,
    list_offset_entry,
    list_offsets_body,
    local_port,
    make_batch,
    metadata_body,
    metadata_topic,
    open_conn,
    produce,
    produce_body,
    produce_one,
    raw_frame,
    read_frame,
    read_until_closed,
    set_i32,
    values_of,
    wait_for_closing_lines,
)

CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
MESSAGE_TOO_LARGE = 10
INVALID_REQUIRED_ACKS = 21
UNSUPPORTED_VERSION = 35
OUT_OF_ORDER_SEQUENCE_NUMBER = 45

MAX_REQUEST = 65536
INIT_PID = {"transactional_id": None, "transaction_timeout_ms": 60000}
LIMITS = {"socket.request.max.bytes": str(MAX_REQUEST), "message.max.bytes": "10000",
          "auto.create.topics.enable": "false"}  # fmt: skip


@pytest.fixture(scope="module")
def limits_broker(zk_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for this module with small request and batch limits and no topic auto-creation; it logs
    every closing line (no repeat limit), as the tests look for each connection's line."""
    root = tmp_path_factory.mktemp("limits-broker")
    b = BrokerProcess(1, new_chroot(zk_server.connect_string), root, overrides=LIMITS)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("KAFKACTL_LOG_REPEATS", "0")
            b.start()
        yield b
    finally:
        b.__exit__(None, None, None)


def assert_healthy(b: BrokerProcess) -> None:
    assert b.alive, f"the broker died:\n{b.log_text()[-4000:]}"
    log = b.log_text()
    assert "Traceback" not in log, f"the broker logged a traceback:\n{log[-6000:]}"
    assert "internal error" not in log, f"the broker hit an internal error:\n{log[-6000:]}"


def assert_one_closing_line(b: BrokerProcess, port: int, what: str) -> str:
    lines = wait_for_closing_lines(b, port, 1)
    assert len(lines) == 1, f"{what}: want one 'closing connection' line for port {port}, got {lines}"
    assert " WARNING " in lines[0], lines[0]
    return lines[0]


def send_and_expect_close(b: BrokerProcess, data: bytes, what: str, *, half_close: bool = False) -> str:
    """Send `data` on a new connection; the broker must close it unanswered and log one line for it."""
    s = connect(b.port)
    port = local_port(s)
    try:
        try:
            s.sendall(data)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the broker already closed it: fine, checked below
        assert closed_by_broker(s, 10.0), f"{what}: the broker kept the connection open"
    finally:
        s.close()
    return assert_one_closing_line(b, port, what)


def init_producer_id(conn) -> int:
    answer = conn.request(ApiKey.INIT_PRODUCER_ID, INIT_PID)
    assert answer["error_code"] == 0, answer
    assert answer["producer_id"] >= 0 and answer["producer_epoch"] == 0, answer
    return answer["producer_id"]


def batch_of_size(size: int, value_byte: bytes = b"s") -> bytes:
    """A one-record batch of exactly `size` bytes."""
    n = size - 80
    for _ in range(10):
        batch = make_batch([value_byte * n])
        if len(batch) == size:
            return batch
        n += size - len(batch)
    raise AssertionError(f"no batch of exactly {size} bytes")


# --- unknown API keys, unsupported versions, ApiVersions v3 ---------------------------------------


def test_unknown_api_keys_and_unsupported_versions_close_only_their_connection(limits_broker):
    b = limits_broker
    meta8 = frame(ApiKey.METADATA, 8, 1, metadata_body(["x"]))[4 + 10 + len("bad-input-test") :]
    fetch11 = frame(ApiKey.FETCH, 11, 1, fetch_body("x", 0, 0))[4 + 10 + len("bad-input-test") :]
    produce8 = frame(ApiKey.PRODUCE, 8, 1, produce_body("x", {0: make_batch([b"v"])}))[4 + 10 + len("bad-input-test") :]
    cases = [
        ("unknown API key 4", raw_frame(4, 0, 11, b"")),
        ("unknown API key 7", raw_frame(7, 1, 12, b"\x00" * 8)),
        ("unknown API key 99", raw_frame(99, 0, 13, b"")),
        ("unknown API key 32767", raw_frame(32767, 0, 14, b"")),
        ("unknown API key -1", raw_frame(-1, 0, 15, b"")),
        ("Fetch v3", raw_frame(ApiKey.FETCH, 3, 16, fetch11)),
        ("Fetch v13", raw_frame(ApiKey.FETCH, 13, 17, fetch11)),
        ("Metadata v12", raw_frame(ApiKey.METADATA, 12, 19, meta8)),
        ("Metadata v-1", raw_frame(ApiKey.METADATA, -1, 20, meta8)),
        ("Produce v10", raw_frame(ApiKey.PRODUCE, 10, 21, produce8)),
        ("ListOffsets v7", raw_frame(ApiKey.LIST_OFFSETS, 7, 22, b"\xff\xff\xff\xff\x00\x00\x00\x00\x00")),
        ("CreateTopics v8", raw_frame(ApiKey.CREATE_TOPICS, 8, 23, b"\x00\x00\x00\x00\x00\x00\x75\x30\x00")),
        ("InitProducerId v5", raw_frame(ApiKey.INIT_PRODUCER_ID, 5, 24, b"\xff\xff\x00\x00\x75\x30")),
    ]
    with open_conn(b) as keep:
        before = len(keep.request(ApiKey.METADATA, metadata_body(None))["brokers"])
        for i, (what, data) in enumerate(cases):
            send_and_expect_close(b, data, what)
            if i % 3 == 0:  # the connection opened before keeps working in between
                assert keep.request(ApiKey.API_VERSIONS, {}, version=2)["error_code"] == 0
        assert len(keep.request(ApiKey.METADATA, metadata_body(None))["brokers"]) == before == 1
    assert_healthy(b)


def test_api_versions_v4_gets_a_v0_answer_with_unsupported_version_and_the_list(limits_broker):
    b = limits_broker
    # ApiVersions v3 as a modern client sends it: request header v2 (v1 + empty tagged fields), then a
    # flexible body: compact strings client_software_name, client_software_version, empty tagged fields.
    # At v3 it is answered (header v0, a flexible body); at v4 (Kafka 3.9's, past ours) the same bytes get
    # the v0 answer with UNSUPPORTED_VERSION and the list, so the client retries at a version we speak.
    body = b"\x00" + bytes([len("librdkafka") + 1]) + b"librdkafka" + bytes([len("2.0.2") + 1]) + b"2.0.2" + b"\x00"
    s = connect(b.port)
    port = local_port(s)
    try:
        s.sendall(raw_frame(ApiKey.API_VERSIONS, 4, 77, body))
        data = read_frame(s)
        assert data is not None, "the broker closed the connection instead of answering ApiVersions v4"
        cid, answer = decode_answer(data, ApiKey.API_VERSIONS, 0)  # every byte read as a v0 body
        assert cid == 77
        assert answer["error_code"] == UNSUPPORTED_VERSION
        table = {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]}
        assert answer["api_keys"] == api_versions_table()
        for key, versions in {0: (0, 9), 1: (4, 12), 2: (0, 6), 3: (0, 11), 18: (0, 3), 19: (0, 7), 20: (0, 6),
                              22: (0, 4)}.items():  # fmt: skip
            assert table[key] == versions, (key, table.get(key))
        # the client retries at a version we speak, on the same connection
        s.sendall(raw_frame(ApiKey.API_VERSIONS, 3, 78, body))
        cid, answer = decode_answer(read_frame(s), ApiKey.API_VERSIONS, 3)
        assert (cid, answer["error_code"], answer["api_keys"]) == (78, 0, api_versions_table())
        s.sendall(frame(ApiKey.API_VERSIONS, 2, 81, {}))
        cid, answer = decode_answer(read_frame(s), ApiKey.API_VERSIONS, 2)
        assert (cid, answer["error_code"], answer["api_keys"]) == (81, 0, api_versions_table())
        s.sendall(raw_frame(ApiKey.API_VERSIONS, 127, 79, b""))
        cid, answer = decode_answer(read_frame(s), ApiKey.API_VERSIONS, 0)
        assert (cid, answer["error_code"]) == (79, UNSUPPORTED_VERSION)
        s.sendall(frame(ApiKey.API_VERSIONS, 0, 80, {}))
        cid, answer = decode_answer(read_frame(s), ApiKey.API_VERSIONS, 0)
        assert (cid, answer["error_code"]) == (80, 0)
    finally:
        s.close()
    time.sleep(0.2)
    assert closing_lines(b.log_text(), port) == []
    assert_healthy(b)


def test_produce_versions_advertised_but_not_served_answer_unsupported_version(limits_broker):
    b = limits_broker
    with open_conn(b) as c:
        create_topic(c, "old-produce")
        for version in (0, 1, 2):
            p = produce(c, "old-produce", {0: make_batch([b"old"])}, version=version)[0]
            assert (p["error_code"], p["base_offset"]) == (UNSUPPORTED_VERSION, -1), (version, p)
        assert latest_offset(c, "old-produce", 0) == 0
        assert produce_one(c, "old-produce", 0, make_batch([b"new"]))["error_code"] == 0
        assert fetch_values(c, "old-produce", 0) == [b"new"]
    assert_healthy(b)


# --- framing: sizes, truncation, malformed bodies --------------------------------------------------


def test_frame_size_limits_and_negative_sizes(limits_broker):
    b = limits_broker
    with open_conn(b) as keep:
        create_topic(keep, "framesize", config={"max.message.bytes": "100000"})
        value = b"f" * MAX_REQUEST

        def produce_frame(n: int) -> bytes:
            return frame(ApiKey.PRODUCE, 8, 5, produce_body("framesize", {0: make_batch([value[:n]])}))

        n = MAX_REQUEST - 200
        for _ in range(10):  # a Produce frame of exactly socket.request.max.bytes (size prefix excluded)
            fr = produce_frame(n)
            if len(fr) - 4 == MAX_REQUEST:
                break
            n += MAX_REQUEST - (len(fr) - 4)
        assert len(fr) - 4 == MAX_REQUEST
        over = produce_frame(n + 1)
        assert len(over) - 4 == MAX_REQUEST + 1

        s = connect(b.port)
        try:
            s.sendall(fr)
            cid, answer = decode_answer(read_frame(s), ApiKey.PRODUCE, 8)
        finally:
            s.close()
        [p] = answer["topics"][0]["partitions"]
        assert (cid, p["error_code"], p["base_offset"]) == (5, 0, 0)
        assert latest_offset(keep, "framesize", 0) == 1

        # one byte over the limit: closed after the size, without waiting for (or reading) the body
        send_and_expect_close(b, over, "a Produce frame one byte over socket.request.max.bytes")
        send_and_expect_close(b, I32.pack(MAX_REQUEST + 1), "a bare size one over the limit")
        send_and_expect_close(b, I32.pack(0x7FFFFFFF) + b"\x00" * 100, "size 2^31-1")
        for size in (-1, -8, -(2**31), 0, 1, 7):
            send_and_expect_close(b, I32.pack(size) + b"\x00\x03\x00\x08\x00\x00\x00\x01\xff\xff", f"size {size}")
        assert keep.request(ApiKey.API_VERSIONS, {}, version=2)["error_code"] == 0
        assert latest_offset(keep, "framesize", 0) == 1
        assert fetch_values(keep, "framesize", 0) == [value[:n]]
    assert_healthy(b)


def test_truncated_frames_close_the_connection_and_append_nothing(limits_broker):
    b = limits_broker
    with open_conn(b) as keep:
        create_topic(keep, "truncated")
        assert produce_one(keep, "truncated", 0, make_batch([b"before"]))["error_code"] == 0
        whole = frame(ApiKey.PRODUCE, 8, 3, produce_body("truncated", {0: make_batch([b"lost", b"lost2"])}))
        for cut in (1, 2, 3, 4, 6, 13, 30, len(whole) // 2, len(whole) - 1):
            send_and_expect_close(b, whole[:cut], f"frame cut after {cut} of {len(whole)} bytes", half_close=True)
        # closed outright (not half-closed) mid-frame: the line still comes
        s = connect(b.port)
        port = local_port(s)
        s.sendall(whole[:-7])
        s.close()
        assert_one_closing_line(b, port, "connection closed 7 bytes before the end of its frame")
        # a whole valid frame then a partial one: the first is answered, then the connection closes
        s = connect(b.port)
        port = local_port(s)
        try:
            s.sendall(frame(ApiKey.METADATA, 8, 41, metadata_body(["truncated"])) + whole[:20])
            s.shutdown(socket.SHUT_WR)
            frames, how = read_until_closed(s, 10.0)
        finally:
            s.close()
        assert how == "eof" and len(frames) == 1, (how, frames)
        cid, answer = decode_answer(frames[0], ApiKey.METADATA, 8)
        assert cid == 41 and answer["topics"][0]["error_code"] == 0
        assert_one_closing_line(b, port, "a partial frame after a whole one")
        assert latest_offset(keep, "truncated", 0) == 1
        assert fetch_values(keep, "truncated", 0) == [b"before"]
    assert_healthy(b)


def test_malformed_request_bodies_close_only_their_connection(limits_broker):
    b = limits_broker
    batch = make_batch([b"m"])
    produce_fr = frame(ApiKey.PRODUCE, 8, 9, produce_body("malformed", {0: batch}))
    records_len_at = len(produce_fr) - len(batch) - 4
    assert I32.unpack_from(produce_fr, records_len_at)[0] == len(batch)
    list_fr = frame(ApiKey.LIST_OFFSETS, 5, 9, list_offsets_body("malformed", 0))
    cases = [
        ("Metadata topics count 1000", raw_frame(3, 8, 1, I32.pack(1000) + I16.pack(1) + b"x" + b"\x01\x00\x00")),
        ("Metadata v0 null topics", raw_frame(3, 0, 2, I32.pack(-1))),
        ("string length past the end", raw_frame(3, 1, 3, I32.pack(1) + I16.pack(300) + b"abcde")),
        ("null where a string must be", raw_frame(3, 1, 4, I32.pack(1) + I16.pack(-1))),
        ("topic name not UTF-8", raw_frame(3, 1, 5, I32.pack(1) + I16.pack(2) + b"\xff\xfe")),
        ("bytes after the body", raw_frame(3, 1, 6, I32.pack(0) + b"\x00")),
        ("ApiVersions v2 with a body", raw_frame(18, 2, 7, b"\x00\x01")),
        ("records length past the end", set_i32(produce_fr, records_len_at, len(batch) + 100)),
        ("records length -2", set_i32(produce_fr, records_len_at, -2)),
        ("partitions count 2 with one", set_i32(produce_fr, records_len_at - 8, 2)),
        ("Fetch topics count -5",
         raw_frame(1, 11, 8, I32.pack(-1) + I32.pack(0) * 3 + b"\x00" + I32.pack(0) + I32.pack(-1) + I32.pack(-5))),
        ("client id longer than the frame", I32.pack(12) + struct.pack(">hhih", 3, 1, 10, 500) + b"ab"),
        ("header without a client id", I32.pack(8) + struct.pack(">hhi", 3, 1, 10)),
        ("ListOffsets 3 bytes short", I32.pack(len(list_fr) - 4 - 3) + list_fr[4:-3]),
        ("CreateTopics configs count 2^31-1",
         raw_frame(19, 4, 11, I32.pack(1) + I16.pack(1) + b"t" + I32.pack(1) + I16.pack(1) + I32.pack(0)
                   + I32.pack(0x7FFFFFFF) + b"\x00" * 9)),
        # flexible versions: a header's tagged field, a compact string and a varint that run past the end
        ("flexible header tag past the end", raw_frame(3, 11, 12, b"\x01\x00\x09ab")),
        ("compact string past the end", raw_frame(3, 11, 13, b"\x00\x02" + bytes(16) + b"\x30abc")),
        ("varint of 6 bytes", raw_frame(3, 11, 14, b"\x00" + b"\xff" * 6)),
    ]  # fmt: skip
    with open_conn(b) as keep:
        create_topic(keep, "malformed")
        for i, (what, data) in enumerate(cases):
            send_and_expect_close(b, data, what)
            if i % 4 == 0:
                assert metadata_topic(keep, "malformed")["error_code"] == 0
        # well-formed but empty: a null record set is refused as corrupt, not a reason to hang up
        p = produce(keep, "malformed", {0: None})[0]
        assert (p["error_code"], p["base_offset"]) == (CORRUPT_MESSAGE, -1)
        assert latest_offset(keep, "malformed", 0) == 0
        assert produce_one(keep, "malformed", 0, batch)["error_code"] == 0
        assert fetch_values(keep, "malformed", 0) == [b"m"]
    # librdkafka's all-topics Metadata v11, byte for byte: a null topics array, then the three bytes left of
    # its reserved int32 count. Kafka ignores bytes after a flexible body, and so does kafkactl.
    s = connect(b.port)
    try:
        s.sendall(bytes.fromhex("000000190003000b00000003000772646b61666b610000000000010000"))
        data = read_frame(s)
    finally:
        s.close()
    assert data is not None
    cid, answer = decode_answer(data, ApiKey.METADATA, 11)
    assert cid == 3 and "malformed" in {t["name"] for t in answer["topics"]}
    assert_healthy(b)


# --- bad record batches -----------------------------------------------------------------------------


def test_bad_crc_gets_corrupt_message_and_appends_nothing(limits_broker):
    b = limits_broker
    with open_conn(b) as c:
        create_topic(c, "crc")
        p = produce_one(c, "crc", 0, make_batch([b"g1", b"g2"]))
        assert (p["error_code"], p["base_offset"]) == (0, 0)
        bad = make_batch([b"b1", b"b2", b"b3"])
        for pos in (21, 22, 24, 30, 40, 44, 52, 56, 60, 61, 65, len(bad) - 1):
            p = produce_one(c, "crc", 0, flip(bad, pos, 0x10))
            assert (p["error_code"], p["base_offset"]) == (CORRUPT_MESSAGE, -1), (pos, p)
        wrong_crc = bytearray(bad)
        wrong_crc[17:21] = bytes(x ^ 0xFF for x in wrong_crc[17:21])  # the stored CRC itself
        p = produce_one(c, "crc", 0, bytes(wrong_crc))
        assert (p["error_code"], p["base_offset"]) == (CORRUPT_MESSAGE, -1)
        assert latest_offset(c, "crc", 0) == 2
        assert fetch_values(c, "crc", 0) == [b"g1", b"g2"]
        p = produce_one(c, "crc", 0, bad)  # the same batch unharmed still goes in
        assert (p["error_code"], p["base_offset"]) == (0, 2)
        assert fetch_values(c, "crc", 0) == [b"g1", b"g2", b"b1", b"b2", b"b3"]
    assert_healthy(b)


def test_one_good_and_one_corrupt_partition_in_one_request(limits_broker):
    b = limits_broker
    with open_conn(b) as c:
        create_topic(c, "mixed", partitions=2)
        good, bad = make_batch([b"p0-a", b"p0-b"]), flip(make_batch([b"p1-a"]), 35)
        out = produce(c, "mixed", {0: good, 1: bad})
        assert (out[0]["error_code"], out[0]["base_offset"]) == (0, 0)
        assert (out[1]["error_code"], out[1]["base_offset"]) == (CORRUPT_MESSAGE, -1)
        out = produce(c, "mixed", {0: flip(good, 50), 1: make_batch([b"p1-b"])})  # and the other way round
        assert (out[0]["error_code"], out[0]["base_offset"]) == (CORRUPT_MESSAGE, -1)
        assert (out[1]["error_code"], out[1]["base_offset"]) == (0, 0)
        assert (latest_offset(c, "mixed", 0), latest_offset(c, "mixed", 1)) == (2, 1)
        assert fetch_values(c, "mixed", 0) == [b"p0-a", b"p0-b"]
        assert fetch_values(c, "mixed", 1) == [b"p1-b"]
    assert_healthy(b)


def test_truncated_and_misframed_batches_get_corrupt_message(limits_broker):
    b = limits_broker
    with open_conn(b) as c:
        create_topic(c, "framing")
        assert produce_one(c, "framing", 0, make_batch([b"keep"]))["error_code"] == 0
        good = make_batch([b"t1", b"t2"])
        length = len(good) - 12
        cases = {
            "cut 5 bytes short": good[:-5],
            "cut inside the header": good[:40],
            "only 10 bytes": good[:10],
            "length says 10 more than present": set_i32(good, 8, length + 10),
            "length says 5 less than present": set_i32(good, 8, length - 5),
            "length shorter than a header": set_i32(good, 8, 20),
            "length 0": set_i32(good, 8, 0),
            "length -1": set_i32(good, 8, -1),
            "length -12": set_i32(good, 8, -12),
            "a good batch then a partial one": good + make_batch([b"t3"])[:30],
            "a good batch then a corrupt one": good + flip(make_batch([b"t3"]), 33),
            "a good batch then garbage": good + b"\x00" * 7,
        }
        for what, records in cases.items():
            p = produce_one(c, "framing", 0, records)
            assert (p["error_code"], p["base_offset"]) == (CORRUPT_MESSAGE, -1), (what, p)
            assert latest_offset(c, "framing", 0) == 1, what
        assert fetch_values(c, "framing", 0) == [b"keep"]
    assert_healthy(b)


@pytest.mark.parametrize("magic", [0, 1, 3, 0x7F, 0xFF])
def test_wrong_magic_gets_corrupt_message(limits_broker, magic):
    b = limits_broker
    topic = f"magic-{magic}"
    with open_conn(b) as c:
        create_topic(c, topic)
        bad = bytearray(make_batch([b"mm", b"nn"]))
        bad[16] = magic  # outside the CRC: only the magic check can catch it
        p = produce_one(c, topic, 0, bytes(bad))
        assert (p["error_code"], p["base_offset"]) == (CORRUPT_MESSAGE, -1)
        assert latest_offset(c, topic, 0) == 0
        assert produce_one(c, topic, 0, make_batch([b"ok"]))["error_code"] == 0
        assert fetch_values(c, topic, 0) == [b"ok"]
    assert_healthy(b)


def test_batches_over_the_size_limits_get_message_too_large(limits_broker):
    b = limits_broker  # message.max.bytes=10000
    with open_conn(b) as c:
        create_topic(c, "sized")
        create_topic(c, "sized-small", config={"max.message.bytes": "2000"})
        create_topic(c, "sized-big", config={"max.message.bytes": "100000"})
        for topic, limit in (("sized", 10000), ("sized-small", 2000)):
            for size in (limit + 1, limit + 2000, 60000):
                p = produce_one(c, topic, 0, batch_of_size(size))
                assert (p["error_code"], p["base_offset"]) == (MESSAGE_TOO_LARGE, -1), (topic, size, p)
            assert latest_offset(c, topic, 0) == 0
            at_limit = batch_of_size(limit, b"L")
            p = produce_one(c, topic, 0, at_limit)
            assert (p["error_code"], p["base_offset"]) == (0, 0), (topic, p)
            assert latest_offset(c, topic, 0) == 1
            [value] = fetch_values(c, topic, 0)
            assert value == b"L" * len(value) and len(value) > limit - 100
        p = produce_one(c, "sized-big", 0, batch_of_size(60000))  # a topic may allow more than the broker default
        assert (p["error_code"], p["base_offset"]) == (0, 0)
        # one too-large batch in a request with a good partition: only the good one goes in
        create_topic(c, "sized-two", partitions=2)
        out = produce(c, "sized-two", {0: batch_of_size(10001), 1: make_batch([b"fits"])})
        assert (out[0]["error_code"], out[1]["error_code"], out[1]["base_offset"]) == (MESSAGE_TOO_LARGE, 0, 0)
        assert (latest_offset(c, "sized-two", 0), latest_offset(c, "sized-two", 1)) == (0, 1)
    assert_healthy(b)


# --- unknown topics and partitions ------------------------------------------------------------------


def test_unknown_topic_without_auto_creation(limits_broker):
    b = limits_broker  # auto.create.topics.enable=false
    name = "no-such-topic"
    with open_conn(b) as c:
        for version in (None, 1, 0):
            t = metadata_topic(c, name, version=version)
            assert (t["error_code"], t["partitions"]) == (UNKNOWN_TOPIC_OR_PARTITION, []), (version, t)
        p = produce_one(c, name, 0, make_batch([b"nowhere"]))
        assert (p["error_code"], p["base_offset"]) == (UNKNOWN_TOPIC_OR_PARTITION, -1)
        assert fetch_partition(c, name, 0)["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
        assert list_offset_entry(c, name, 0)["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
        t = metadata_topic(c, name)  # still not there: nothing above created it
        assert (t["error_code"], t["partitions"]) == (UNKNOWN_TOPIC_OR_PARTITION, [])
        all_names = [t["name"] for t in c.request(ApiKey.METADATA, metadata_body(None))["topics"]]
        assert name not in all_names
        assert not (b.log_dir / f"{name}-0").exists()
    assert_healthy(b)


def test_unknown_partition_of_an_existing_topic(limits_broker):
    b = limits_broker
    with open_conn(b) as c:
        create_topic(c, "one-partition")
        for partition in (1, 7, -1, 0x7FFFFFFF):
            p = produce_one(c, "one-partition", partition, make_batch([b"x"]))
            assert (p["error_code"], p["base_offset"]) == (UNKNOWN_TOPIC_OR_PARTITION, -1), (partition, p)
            assert fetch_partition(c, "one-partition", partition)["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
            assert list_offset_entry(c, "one-partition", partition)["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
        t = metadata_topic(c, "one-partition")
        assert t["error_code"] == 0 and [p["partition_index"] for p in t["partitions"]] == [0]
        assert latest_offset(c, "one-partition", 0) == 0
        assert produce_one(c, "one-partition", 0, make_batch([b"p0"]))["error_code"] == 0
        assert fetch_values(c, "one-partition", 0) == [b"p0"]
    assert_healthy(b)


def test_metadata_auto_creates_a_topic_with_the_default_config(shared_broker):
    b = shared_broker  # auto.create.topics.enable defaults to true
    with open_conn(b) as c:
        # a produce does not create a topic, nor does a Metadata v4+ that asks not to
        p = produce_one(c, "auto-not-by-produce", 0, make_batch([b"x"]))
        assert (p["error_code"], p["base_offset"]) == (UNKNOWN_TOPIC_OR_PARTITION, -1)
        for _ in range(2):
            t = metadata_topic(c, "auto-not-by-produce", allow_auto_topic_creation=False)
            assert (t["error_code"], t["partitions"]) == (UNKNOWN_TOPIC_OR_PARTITION, [])

        t = metadata_topic(c, "auto-created")
        assert t["error_code"] in (0, LEADER_NOT_AVAILABLE), t
        t = metadata_topic(c, "auto-created")
        assert t["error_code"] == 0
        assert [(p["partition_index"], p["leader_id"], p["error_code"]) for p in t["partitions"]] == [(0, 1, 0)]
        p = produce_one(c, "auto-created", 0, make_batch([b"a1", b"a2"]))
        assert (p["error_code"], p["base_offset"]) == (0, 0)
        assert fetch_values(c, "auto-created", 0) == [b"a1", b"a2"]
    assert_healthy(b)


# --- producer semantics: idempotence, acks ----------------------------------------------------------


def test_idempotent_producer_duplicates_and_sequence_gaps(limits_broker):
    b = limits_broker
    topic = "idempotent"
    with open_conn(b) as c:
        create_topic(c, topic)
        pid = init_producer_id(c)
        assert init_producer_id(c) != pid  # every producer gets its own id

        def send(values: list[bytes], seq: int, epoch: int = 0) -> dict[str, Any]:
            batch = make_batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
            return produce_one(c, topic, 0, batch)

        first = make_batch([b"i0", b"i1", b"i2"], producer_id=pid, producer_epoch=0, base_sequence=0)
        p = produce_one(c, topic, 0, first)
        assert (p["error_code"], p["base_offset"]) == (0, 0)
        assert latest_offset(c, topic, 0) == 3
        p = produce_one(c, topic, 0, first)  # a retry of the same batch: its first answer again, no append
        assert (p["error_code"], p["base_offset"]) == (0, 0)
        assert latest_offset(c, topic, 0) == 3
        p = send([b"i3", b"i4"], 3)
        assert (p["error_code"], p["base_offset"]) == (0, 3)
        p = produce_one(c, topic, 0, first)  # an older retry, still remembered
        assert (p["error_code"], p["base_offset"]) == (0, 0)
        assert latest_offset(c, topic, 0) == 5
        # a corrupted retry of a stored batch is refused, not acknowledged as a duplicate: the CRC field,
        # a header field and a record byte inside the CRC-covered part
        for pos in (17, 30, 70):
            p = produce_one(c, topic, 0, flip(first, pos))
            assert (p["error_code"], p["base_offset"]) == (CORRUPT_MESSAGE, -1), (pos, p)
        assert latest_offset(c, topic, 0) == 5
        assert fetch_values(c, topic, 0) == [b"i0", b"i1", b"i2", b"i3", b"i4"]
        for seq in (10, 6, 4, 1):  # a gap ahead, or an overlap that is no exact retry
            p = send([b"gap"], seq)
            assert (p["error_code"], p["base_offset"]) == (OUT_OF_ORDER_SEQUENCE_NUMBER, -1), (seq, p)
        assert latest_offset(c, topic, 0) == 5
        # a corrupt batch at the right sequence is refused and does not use the sequence up
        bad = flip(make_batch([b"i5"], producer_id=pid, producer_epoch=0, base_sequence=5), 70)
        p = produce_one(c, topic, 0, bad)
        assert (p["error_code"], p["base_offset"]) == (CORRUPT_MESSAGE, -1)
        p = send([b"i5"], 5)
        assert (p["error_code"], p["base_offset"]) == (0, 5)
        assert fetch_values(c, topic, 0) == [b"i0", b"i1", b"i2", b"i3", b"i4", b"i5"]
    assert_healthy(b)


def test_acks_zero_gets_no_answer_and_is_appended(limits_broker):
    b = limits_broker
    topic = "acks-zero"
    with open_conn(b) as c:
        create_topic(c, topic)
        s = connect(b.port)
        port = local_port(s)
        try:
            fire = frame(ApiKey.PRODUCE, 8, 1, produce_body(topic, {0: make_batch([b"z1", b"z2"])}, acks=0))
            s.sendall(fire + frame(ApiKey.LIST_OFFSETS, 5, 2, list_offsets_body(topic, 0)))
            cid, answer = decode_answer(read_frame(s), ApiKey.LIST_OFFSETS, 5)
            assert cid == 2, f"the first answer is for request {cid}: acks=0 was answered"
            assert answer["topics"][0]["partitions"][0]["offset"] == 2
            s.sendall(frame(ApiKey.PRODUCE, 8, 3, produce_body(topic, {0: make_batch([b"z3"])}, acks=0)))
            s.sendall(frame(ApiKey.API_VERSIONS, 2, 4, {}))
            cid, answer = decode_answer(read_frame(s), ApiKey.API_VERSIONS, 2)
            assert (cid, answer["error_code"]) == (4, 0)
        finally:
            s.close()
        assert fetch_values(c, topic, 0) == [b"z1", b"z2", b"z3"]
        time.sleep(0.2)
        assert closing_lines(b.log_text(), port) == []
        # an acks=0 produce that fails cannot be answered: the connection closes (as Kafka's does), and
        # nothing of the batch is appended
        bad = frame(ApiKey.PRODUCE, 8, 5, produce_body(topic, {0: flip(make_batch([b"zz"]), 40)}, acks=0))
        send_and_expect_close(b, bad, "a failed acks=0 produce")
        assert latest_offset(c, topic, 0) == 3
    assert_healthy(b)


def test_invalid_acks_get_invalid_required_acks(limits_broker):
    b = limits_broker
    topic = "bad-acks"
    with open_conn(b) as c:
        create_topic(c, topic)
        for acks in (2, -2, 5, 32767):
            p = produce(c, topic, {0: make_batch([b"no"])}, acks=acks)[0]
            assert (p["error_code"], p["base_offset"]) == (INVALID_REQUIRED_ACKS, -1), (acks, p)
        assert latest_offset(c, topic, 0) == 0
        for acks in (1, -1):
            assert produce(c, topic, {0: make_batch([b"yes"])}, acks=acks)[0]["error_code"] == 0
        assert fetch_values(c, topic, 0) == [b"yes", b"yes"]
    assert_healthy(b)


# --- idempotent batches whose length field is negative ---------------------------------------------


def test_plain_batch_with_negative_length_is_corrupt(limits_broker):
    b = limits_broker
    with open_conn(b) as c:
        create_topic(c, "neg-plain")
        for length in (-12, -24, -1, -(2**31)):
            p = produce_one(c, "neg-plain", 0, set_i32(make_batch([b"n"]), 8, length))
            assert (p["error_code"], p["base_offset"]) == (CORRUPT_MESSAGE, -1), (length, p)
        assert latest_offset(c, "neg-plain", 0) == 0
    assert_healthy(b)


@pytest.mark.parametrize("length", [-12, -24])
def test_idempotent_batch_with_negative_length_is_corrupt(start_broker, length):
    """An idempotent batch (producer id and sequence set) whose batchLength field is negative."""
    b = start_broker(1)
    topic = "neg-idempotent"
    with open_conn(b) as c:
        create_topic(c, topic)
        pid = init_producer_id(c)
        good = make_batch([b"ok"], producer_id=pid, producer_epoch=0, base_sequence=0)
        assert produce_one(c, topic, 0, good)["error_code"] == 0
    bad = set_i32(make_batch([b"bad"], producer_id=pid, producer_epoch=0, base_sequence=1), 8, length)
    s = connect(b.port, timeout=8.0)
    port = local_port(s)
    try:
        s.sendall(frame(ApiKey.PRODUCE, 8, 9, produce_body(topic, {0: bad})))
        try:
            data = read_frame(s)
        except TimeoutError:
            data = "timeout"
    finally:
        s.close()
    if data == "timeout":
        try:
            with open_conn(b, timeout=3.0):
                responsive = True
        except Exception:
            responsive = False
        log = b.log_text()
        if not responsive:
            b.kill()  # its event loop is stuck: do not wait for a SIGTERM it cannot handle
        pytest.fail(
            f"no answer in 8 s to a Produce of an idempotent batch with batchLength {length}; the broker "
            f"{'still answers others' if responsive else 'answers nobody any more'}. Log:\n{log[-3000:]}"
        )
    if data is None:
        pytest.fail(
            f"the broker closed the connection instead of answering CORRUPT_MESSAGE: "
            f"{closing_lines(b.log_text(), port)}\n{b.log_text()[-4000:]}"
        )
    cid, answer = decode_answer(data, ApiKey.PRODUCE, 8)
    [p] = answer["topics"][0]["partitions"]
    assert (cid, p["error_code"], p["base_offset"]) == (9, CORRUPT_MESSAGE, -1)
    with open_conn(b) as c:
        assert latest_offset(c, topic, 0) == 1
        assert fetch_values(c, topic, 0) == [b"ok"]
    assert_healthy(b)


# --- idle connections: connections.max.idle.ms -----------------------------------------------------


def test_half_sent_and_silent_connections_are_closed_after_connections_max_idle_ms(start_broker):
    """Kafka's connections.max.idle.ms: a connection with nothing received or sent for that long is closed,
    whether it is silent or stopped inside a frame (small, big, or its size); one that keeps asking is not,
    and neither is one whose fetch waits in purgatory for longer than the idle limit."""
    b = start_broker(1, overrides={"connections.max.idle.ms": "1000"})
    meta = frame(ApiKey.METADATA, 1, 1, metadata_body(None))
    big = frame(ApiKey.PRODUCE, 8, 2, produce_body("idle-t", {0: make_batch([b"v" * 200_000])}))
    stalled = {
        "silent": b"",
        "2 of the 4 size bytes": meta[:2],
        "half a Metadata frame": meta[: len(meta) // 2],
        "half a 200 kB Produce frame": big[: len(big) // 2],
    }
    with open_conn(b) as busy:
        create_topic(busy, "idle-t")
        socks = {}
        for what, data in stalled.items():
            s = connect(b.port)
            s.sendall(data)
            socks[what] = s
        waiting = connect(b.port)  # a fetch that waits 2.5 s for data that never comes: not idle meanwhile
        waiting.sendall(frame(ApiKey.FETCH, 11, 3, fetch_body("idle-t", 0, 0, max_wait_ms=2500, min_bytes=1)))
        try:
            for i in range(15):  # a busy client: a request every 0.2 s for 3 s, three times the idle limit
                t = metadata_topic(busy, "idle-t")
                assert t["error_code"] == 0, (i, t)
                time.sleep(0.2)
            answer = read_frame(waiting)
            assert answer is not None, "the broker closed a connection whose fetch was waiting in purgatory"
            cid, body = decode_answer(answer, ApiKey.FETCH, 11)
            assert cid == 3 and body["topics"][0]["partitions"][0]["error_code"] == 0, body
            for what, s in socks.items():
                assert closed_by_broker(s, 10.0), f"{what}: still open after 3 s and 10 s more (idle limit 1 s)"
            p = produce_one(busy, "idle-t", 0, make_batch([b"still here"]))
            assert (p["error_code"], p["base_offset"]) == (0, 0)
        finally:
            for s in (*socks.values(), waiting):
                s.close()
    log = b.log_text()
    half = [line for line in log.splitlines() if "of a request frame and then nothing for" in line]
    assert len(half) == 3 and all("(connections.max.idle.ms=1000)" in line for line in half), half
    assert_healthy(b)


# --- the fuzz ---------------------------------------------------------------------------------------

FUZZ_TS = 1_780_000_000_000  # fixed record timestamps keep the fuzz frames the same run to run
FUZZ_TOPIC = "fuzzz-t"
PRECIOUS = "keep-safe-data"  # never named by a fuzz frame; far (in bytes) from every name that is
FUZZ_CASES_PER_BASE = 60
RANDOM_CASES = 200
PIPELINED_CASES = 80


class Expect(NamedTuple):
    answers: list[tuple[int, int, int]]  # (api key, version, correlation id) of each answer due, in order
    end: str  # clean | bad | acks0 (an acks=0 produce: no answer; closed if it failed) | wait | skip | crash
    why: str


def predict(data: bytes, max_bytes: int) -> Expect:
    """What the broker must do with `data` sent on a fresh connection followed by end of stream.

    Uses the protocol's own decoder to tell well-formed from malformed; the point is not the decoder but
    that the server keeps its word on either: answer (in order, each decodable) or close with one log line.
    """
    answers: list[tuple[int, int, int]] = []
    pos = 0
    try:
        while True:
            left = len(data) - pos
            if left == 0:
                return Expect(answers, "clean", "")
            if left < 4:
                return Expect(answers, "bad", "ends inside a frame size")
            size = I32.unpack_from(data, pos)[0]
            if size < 8 or size > max_bytes:
                return Expect(answers, "bad", f"frame size {size}")
            if left - 4 < size:
                return Expect(answers, "bad", "ends inside a frame")
            r = Reader(data[pos + 4 : pos + 4 + size])
            pos += 4 + size
            try:
                key, version, cid, _ = read_request_header(r)
            except DecodeError:
                return Expect(answers, "bad", "header")
            api = APIS.get(key)
            if api is None:
                return Expect(answers, "bad", f"api key {key}")
            if key == ApiKey.API_VERSIONS and version > api.advertised[1]:
                answers.append((key, 0, cid))
                continue
            if not api.advertised[0] <= version <= api.advertised[1]:
                return Expect(answers, "bad", f"{api.key.name} v{version}")
            try:
                if api.request.flexible(version):
                    read_header_tags(r)
                body = api.request.read(r, version)
            except DecodeError:
                return Expect(answers, "bad", f"{api.key.name} v{version} body")
            if r.remaining() and not api.request.flexible(version):  # (after a flexible body: ignored, as Kafka)
                return Expect(answers, "bad", f"{api.key.name} v{version} trailing bytes")
            if key == ApiKey.CREATE_TOPICS and any(t["num_partitions"] > 1000 for t in body["topics"]):
                return Expect(answers, "skip", "CreateTopics with a huge partition count")  # well-formed, not bad
            destructive = body.get("topic_names") or body.get("topics") or body.get("resources")
            if key in (ApiKey.DELETE_TOPICS, ApiKey.ALTER_CONFIGS) and destructive:
                return Expect(answers, "skip", "a well-formed destructive admin request")
            if key == ApiKey.PRODUCE and body["acks"] == 0:
                return Expect(answers, "acks0", "")
            if key == ApiKey.FETCH and body["min_bytes"] > 0 and body["max_wait_ms"] > 2000:
                return Expect(answers, "wait", "")
            answers.append((key, version, cid))
    except Exception as exc:  # the decoder itself blew up: the broker would log a traceback
        return Expect(answers, "crash", repr(exc))


def length_fields(fr: bytes) -> list[tuple[int, int, int]]:
    """(position, width, value) of what look like string lengths, array counts and record lengths."""
    out = []
    for p in range(4, len(fr) - 1):
        v16 = I16.unpack_from(fr, p)[0]
        if 1 <= v16 <= 64 and p + 2 + v16 <= len(fr) and all(0x20 <= ch < 0x7F for ch in fr[p + 2 : p + 2 + v16]):
            out.append((p, 2, v16))
        if p + 4 <= len(fr):
            v32 = I32.unpack_from(fr, p)[0]
            if 0 <= v32 <= 8:
                out.append((p, 4, v32))
            elif v32 >= 49 and p + 8 < len(fr) and (fr[p + 8] == 2 or (p + 20 < len(fr) and fr[p + 20] == 2)):
                out.append((p, 4, v32))  # a record set's bytes length, or a batch's own length
    return out


def mutate(rng: random.Random, base: bytes, fields: list[tuple[int, int, int]]) -> bytes:
    """A valid frame with a length field, bytes or its size changed (most keep a right size prefix)."""
    data = bytearray(base)
    changes = 0
    if fields and rng.random() < 0.4:
        p, width, v = rng.choice(fields)
        if width == 2:
            new = rng.choice([-1, -2, 0, v - 1, v + 1, v + 50, 0x7FFF, -0x8000])
            struct.pack_into(">h", data, p, max(-0x8000, min(0x7FFF, new)))
        else:
            new = rng.choice([-1, -2, 0, 1, v - 1, v + 1, v + 1000, 2 * v + 7, 0x7FFFFFFF, -(2**31),
                              rng.randrange(-(2**31), 2**31)])  # fmt: skip
            struct.pack_into(">i", data, p, max(-(2**31), min(2**31 - 1, new)))
        changes += 1
    payload = data[4:]
    for _ in range(rng.choice([0, 1, 1, 2]) if changes else rng.choice([1, 1, 1, 2, 3])):
        op = rng.choice(["flip", "flip", "flip", "flip", "byte", "byte", "insert", "delete"])
        if op == "flip":
            p = rng.randrange(len(payload))
            payload[p] ^= 1 << rng.randrange(8)
        elif op == "byte":
            payload[rng.randrange(len(payload))] = rng.choice([0, 0xFF, 0x7F, 0x80, rng.randrange(256)])
        elif op == "insert":
            p = rng.randrange(len(payload) + 1)
            payload[p:p] = rng.randbytes(rng.randint(1, 8))
        elif len(payload) > 8:
            p = rng.randrange(len(payload) - 1)
            del payload[p : p + rng.randint(1, 8)]
    finish = rng.random()
    n = len(payload)
    if finish < 0.75:  # a size that fits what follows: the body decoder and the handlers get to see it
        return I32.pack(n) + bytes(payload)
    if finish < 0.9:  # a size that lies
        size = rng.choice([n - 1, n + 1, n - rng.randint(2, 20), n + rng.randint(2, 500), 0, 7, 8, -1,
                           MAX_REQUEST, MAX_REQUEST + 1, rng.randrange(-(2**31), 2**31)])  # fmt: skip
        return struct.pack(">i", max(-(2**31), min(2**31 - 1, size))) + bytes(payload)
    whole = I32.pack(n) + bytes(payload)  # the connection ends inside the frame
    return whole[: rng.randrange(1, len(whole))]


def random_frame(rng: random.Random, cid: int) -> bytes:
    kind = rng.randrange(4)
    if kind == 0:  # anything at all
        return rng.randbytes(rng.randint(1, 40))
    if kind == 1:  # a right size, random contents
        body = rng.randbytes(rng.randint(0, 60))
        return I32.pack(len(body)) + body
    key = rng.choice([*APIS, 4, 7, 17, 21, 36, 50, 1000, -1])
    version = rng.randint(-1, 12)
    body = bytes(rng.choice((0, 0, 0, 1, 0xFF, rng.randrange(256))) for _ in range(rng.randint(0, 48)))
    fr = raw_frame(key, version, cid, body, client_id=rng.choice([None, "", "x", "bad-input-test"]))
    if kind == 3:  # and a size that may lie
        fr = I32.pack(rng.choice([len(fr) - 4 + rng.randint(-6, 6), rng.randrange(-(2**31), 2**31)])) + fr[4:]
    return fr


def fuzz_bases() -> list[bytes]:
    plain = make_batch([b"f0", b"f1", b"f2"], key=b"k", timestamp=FUZZ_TS)
    idem = make_batch([b"i0", b"i1"], producer_id=4242, producer_epoch=0, base_sequence=0, timestamp=FUZZ_TS)
    create = {
        "topics": [{
            "name": "fuzzz-new", "num_partitions": -1, "replication_factor": -1,
            "assignments": [{"partition_index": 0, "broker_ids": [1]}],
            "configs": [{"name": "retention.ms", "value": "3600000"}],
        }],
        "timeout_ms": 5000, "validate_only": False,
    }  # fmt: skip
    return [
        frame(ApiKey.API_VERSIONS, 2, 101, {}, client_id="fz"),
        frame(ApiKey.METADATA, 8, 102, metadata_body([FUZZ_TOPIC, "fuzzz-meta"]), client_id="fz"),
        frame(ApiKey.METADATA, 1, 103, metadata_body([FUZZ_TOPIC]), client_id="fz"),
        frame(ApiKey.PRODUCE, 8, 104, produce_body(FUZZ_TOPIC, {0: plain}), client_id="fz"),
        frame(ApiKey.PRODUCE, 3, 105, produce_body(FUZZ_TOPIC, {0: idem}), client_id="fz"),
        frame(ApiKey.FETCH, 11, 106, fetch_body(FUZZ_TOPIC, 0, 0), client_id="fz"),
        frame(ApiKey.FETCH, 4, 107, fetch_body(FUZZ_TOPIC, 0, 0, max_wait_ms=300, min_bytes=1), client_id="fz"),
        frame(ApiKey.LIST_OFFSETS, 5, 108, list_offsets_body(FUZZ_TOPIC, 0), client_id="fz"),
        frame(ApiKey.LIST_OFFSETS, 0, 109, list_offsets_body(FUZZ_TOPIC, 0, -2), client_id="fz"),
        frame(ApiKey.CREATE_TOPICS, 4, 110, create, client_id="fz"),
        frame(ApiKey.CREATE_TOPICS, 0, 111, create, client_id="fz"),
        frame(ApiKey.INIT_PRODUCER_ID, 1, 112, INIT_PID, client_id="fz"),
    ]


def fuzz_cases() -> list[bytes]:
    rng = random.Random(0x5EED_BAD)
    bases = fuzz_bases()
    cases: list[bytes] = []

    def add(data: bytes) -> bool:
        if predict(data, MAX_REQUEST).end == "skip":
            return False
        cases.append(data)
        return True

    for base in bases:
        fields = length_fields(base)
        made = 0
        while made < FUZZ_CASES_PER_BASE:
            made += add(mutate(rng, base, fields))
    made = 0
    while made < RANDOM_CASES:
        made += add(random_frame(rng, 500 + made))
    made = 0
    while made < PIPELINED_CASES:  # a good frame, a mutated one, a good one
        a, m, z = rng.choice(bases), rng.choice(bases), rng.choice(bases)
        made += add(a + mutate(rng, m, length_fields(m)) + z)
    return cases


def run_case(b: BrokerProcess, tail: LogTail, data: bytes) -> list[str]:
    """Send one case on a fresh connection, end the stream, and check the broker kept its word."""
    expect = predict(data, MAX_REQUEST)
    problems: list[str] = []
    tail.mark()
    s = connect(b.port)
    port = local_port(s)
    try:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:  # the broker may close (even reset) before all was sent: what it read decides
            pass
        frames, how = read_until_closed(s, 1.0 if expect.end == "wait" else 6.0)
    finally:
        s.close()
    lines = closing_lines(tail.new_text(), port)
    for i, fr in enumerate(frames):
        if i >= len(expect.answers):
            if expect.end not in ("acks0", "wait"):
                problems.append(f"answer #{i + 1} that was not due")
            break
        key, version, cid = expect.answers[i]
        try:
            got_cid, _ = decode_answer(fr, key, version)
        except Exception as exc:
            problems.append(f"answer #{i + 1} ({ApiKey(key).name} v{version}) does not decode: {exc!r}")
            continue
        if got_cid != cid:
            problems.append(f"answer #{i + 1} carries correlation id {got_cid}, not {cid}")
    if expect.end == "crash":
        problems.append(f"the request decoder raises {expect.why}")
    elif expect.end == "clean":
        if how != "eof" or len(frames) != len(expect.answers) or lines:
            problems.append(f"well-formed: want {len(expect.answers)} answer(s) then EOF and no closing line; "
                            f"got {len(frames)} answer(s), {how}, {len(lines)} closing line(s)")  # fmt: skip
    elif expect.end == "bad":
        short = how == "eof" and len(frames) < len(expect.answers)  # (a reset may swallow answers in flight)
        if how == "timeout" or len(frames) > len(expect.answers) or short:
            problems.append(f"malformed ({expect.why}): want {len(expect.answers)} answer(s) then a close; "
                            f"got {len(frames)} answer(s), {how}")  # fmt: skip
        if len(lines) != 1:
            problems.append(f"malformed ({expect.why}): want one closing line, got {len(lines)}: {lines}")
    elif expect.end == "acks0":
        if how == "timeout" or len(lines) > 1:
            problems.append(f"acks=0 produce: got {how}, closing lines {lines}")
    elif expect.end == "wait" and len(lines) > 1:
        problems.append(f"waiting fetch: closing lines {lines}")
    new = tail.new_text()
    if "Traceback" in new or "internal error" in new:
        problems.append(f"the broker logged an error:\n{new[-2500:]}")
    if problems:
        return [f"case {data[:96].hex()}{'…' if len(data) > 96 else ''} ({len(data)} bytes): {p}" for p in problems]
    return []


def test_fuzzed_frames_close_only_their_connection_and_cost_no_data(start_broker, monkeypatch):
    monkeypatch.setenv("KAFKACTL_LOG_REPEATS", "0")  # every case's closing line is looked for
    b = start_broker(1, overrides={"socket.request.max.bytes": str(MAX_REQUEST)})
    cases = fuzz_cases()
    assert len(cases) == 12 * FUZZ_CASES_PER_BASE + RANDOM_CASES + PIPELINED_CASES
    kinds = [predict(c, MAX_REQUEST).end for c in cases]
    assert kinds.count("bad") >= len(cases) // 2 and kinds.count("clean") >= 40, {k: kinds.count(k) for k in kinds}

    keep = open_conn(b)  # opened before the fuzz, used all through it
    try:
        create_topic(keep, FUZZ_TOPIC)
        create_topic(keep, PRECIOUS, partitions=2)
        expected: dict[int, list[bytes]] = {0: [], 1: []}

        def keep_write(tag: str) -> None:
            for partition in (0, 1):
                values = [f"{tag}-{partition}-{j}".encode() for j in range(3)]
                p = produce_one(keep, PRECIOUS, partition, make_batch(values))
                assert (p["error_code"], p["base_offset"]) == (0, len(expected[partition])), (tag, p)
                expected[partition].extend(values)
                assert latest_offset(keep, PRECIOUS, partition) == len(expected[partition])

        keep_write("before")
        tail = LogTail(b)
        problems: list[str] = []
        for i, data in enumerate(cases):
            found = run_case(b, tail, data)
            problems.extend(found)
            if found and not b.alive:
                pytest.fail(f"the broker died on a fuzz case:\n{found[0]}\n{b.log_text()[-4000:]}")
            if found and any("timeout" in f for f in found):
                try:  # a stuck event loop makes every later case time out: stop right here
                    with open_conn(b, timeout=3.0) as probe:
                        probe.request(ApiKey.API_VERSIONS, {}, version=2)
                except Exception:
                    b.kill()
                    pytest.fail(f"the broker stopped answering after fuzz case {i}:\n{found[0]}")
            if i % 10 == 9:  # interleave work on the connection opened before the fuzz
                keep_write(f"during{i}")
                t = metadata_topic(keep, PRECIOUS)
                assert t["error_code"] == 0 and len(t["partitions"]) == 2
        keep_write("after")

        assert b.alive
        assert not problems, f"{len(problems)} problem(s) in {len(cases)} fuzz cases; the first ones:\n" + "\n".join(
            problems[:12]
        )
        for partition in (0, 1):
            assert fetch_values(keep, PRECIOUS, partition) == expected[partition]
    finally:
        keep.close()

    with open_conn(b) as fresh:  # a new connection after the fuzz: metadata, produce, fetch
        t = metadata_topic(fresh, PRECIOUS)
        assert t["error_code"] == 0 and [p["leader_id"] for p in t["partitions"]] == [1, 1]
        p = produce_one(fresh, PRECIOUS, 0, make_batch([b"fresh-1", b"fresh-2"]))
        assert (p["error_code"], p["base_offset"]) == (0, len(expected[0]))
        assert fetch_values(fresh, PRECIOUS, 0) == [*expected[0], b"fresh-1", b"fresh-2"]
        assert fetch_values(fresh, PRECIOUS, 1) == expected[1]
        tail_values = values_of(fetch_partition(fresh, PRECIOUS, 0, len(expected[0]))["records"])
        assert tail_values == [b"fresh-1", b"fresh-2"]
    bad_cases = kinds.count("bad")
    all_lines = [line for line in b.log_text().splitlines() if "closing connection from" in line]
    assert len(all_lines) >= bad_cases, (len(all_lines), bad_cases)
    assert_healthy(b)
