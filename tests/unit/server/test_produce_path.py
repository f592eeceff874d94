"""The Produce hot path: answered without a coroutine when its topics are cached, through the async
handler otherwise, and the appends of pipelined requests written together before their answers leave.

A real Broker object (no ZooKeeper: its metadata cache is filled by hand) with a real log dir, the real
dispatcher, and for the pipelining tests the real Server on a loopback TCP connection.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import os
import socket
import threading
import time
from typing import Any

import pytest

from broker.protocol.api import APIS, ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import encode_request
from broker.protocol.primitives import I32, Reader
from broker.records.batch import Record, build_batch
from broker.server.handlers import dispatcher
from broker.server.network import Connection, Server

TOPIC = "hot"
PRODUCE_V = 8


def batch(value: bytes, *, producer_id: int = -1, sequence: int = -1) -> bytes:
    return build_batch([Record(0, int(time.time() * 1000), None, value)], producer_id=producer_id,
                       producer_epoch=0 if producer_id >= 0 else -1, base_sequence=sequence)  # fmt: skip


def produce_frame(correlation_id: int, records: dict[str, bytes], acks: int = 1) -> bytes:
    """A whole Produce request frame (size prefix included), partition 0 of each topic."""
    topics = [{"name": t, "partitions": [{"index": 0, "records": r}]} for t, r in records.items()]
    body = {"transactional_id": None, "acks": acks, "timeout_ms": 30_000, "topics": topics}
    parts = encode_request(ApiKey.PRODUCE, PRODUCE_V, correlation_id, "t", APIS[ApiKey.PRODUCE].request, body)
    return b"".join(bytes(p) for p in parts)


def read_answer(frame: bytes) -> tuple[int, list[dict[str, Any]]]:
    """(correlation id, the partitions of every topic) of a Produce answer frame without its size."""
    r = Reader(memoryview(frame))
    cid = r.int32()
    answer = APIS[ApiKey.PRODUCE].response.read(r, PRODUCE_V)
    return cid, [p for t in answer["topics"] for p in t["partitions"]]


def stored_values(b: Any) -> list[bytes | None]:
    return [r.value for r in b.logs.get(TOPIC, 0).read_records(0)]


def test_a_cached_topic_is_answered_without_a_coroutine(broker) -> None:
    answer = dispatcher(broker)(memoryview(produce_frame(5, {TOPIC: batch(b"v")})[4:]), "peer")
    assert type(answer) is list  # the frame itself, not an awaitable
    cid, [p] = read_answer(b"".join(answer)[4:])
    assert (cid, p["error_code"], p["base_offset"]) == (5, 0, 0)
    assert stored_values(broker) == [b"v"]


def test_an_uncached_topic_goes_through_the_async_handler_and_nothing_is_appended_first(broker) -> None:
    frame = memoryview(produce_frame(6, {TOPIC: batch(b"v"), "elsewhere": batch(b"w")})[4:])
    answer = dispatcher(broker)(frame, "peer")
    assert inspect.iscoroutine(answer)
    assert broker.logs.get(TOPIC, 0) is None  # the cached topic waits for the lookup too: not even opened yet
    cid, parts = read_answer(b"".join(asyncio.run(answer))[4:])  # no ZooKeeper here: the lookup finds nothing
    assert [(p["error_code"], p["base_offset"]) for p in parts] == [(0, 0), (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)]
    assert stored_values(broker) == [b"v"]


def test_acks_all_below_min_insync_is_refused_on_the_hot_path(broker) -> None:
    broker.cache.configs[TOPIC] = {"min.insync.replicas": "2"}
    answer = dispatcher(broker)(memoryview(produce_frame(7, {TOPIC: batch(b"v")}, acks=-1)[4:]), "peer")
    _, [p] = read_answer(b"".join(answer)[4:])
    assert p["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS
    assert broker.logs.get(TOPIC, 0).log_end_offset == 0


def serve_pipelined(b: Any, frames: list[bytes], expect: int, monkeypatch: pytest.MonkeyPatch) -> tuple[list[bytes], list[int], list[int]]:  # noqa: E501
    """Send `frames` in one write before the server reads, then read `expect` answers (or to the end).

    Returns (answer frames, the log file's size at each send of answers, bytes of each writev).
    """
    file_sizes: list[int] = []
    writes: list[int] = []
    real_send_now, real_send, real_writev = Connection.send_now, Connection.send, os.writev
    log_file = next(b.logs.get_or_create(TOPIC, 0).dir.glob("*.log"))

    def send_now(self: Connection, parts: list[Any]) -> list[Any]:
        file_sizes.append(log_file.stat().st_size)
        return real_send_now(self, parts)

    async def send(self: Connection, parts: list[Any]) -> None:
        file_sizes.append(log_file.stat().st_size)
        await real_send(self, parts)

    def writev(fd: int, buffers: list[Any]) -> int:
        n = real_writev(fd, buffers)
        writes.append(n)
        return n

    monkeypatch.setattr(Connection, "send_now", send_now)
    monkeypatch.setattr(Connection, "send", send)
    monkeypatch.setattr(os, "writev", writev)
    answers: list[bytes] = []

    async def run() -> None:
        server = Server("127.0.0.1", 0, dispatcher(b), max_request_bytes=1 << 20, settle=b.write_deferred)
        server.bind()
        client = socket.create_connection(("127.0.0.1", server.port))
        client.sendall(b"".join(frames))  # all of it waits in the server's receive buffer: one recv takes it
        client.settimeout(30)

        def read() -> None:
            buf = b""
            while len(answers) < expect:
                chunk = client.recv(1 << 16)
                if not chunk:
                    return
                buf += chunk
                while len(buf) >= 4 and len(buf) - 4 >= I32.unpack_from(buf)[0]:
                    size = I32.unpack_from(buf)[0]
                    answers.append(buf[4 : 4 + size])
                    buf = buf[4 + size :]

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        server.start()
        try:
            await asyncio.wait_for(asyncio.to_thread(reader.join), 30)
        finally:
            client.close()
            await server.close()

    asyncio.run(run())
    monkeypatch.undo()
    return answers, file_sizes, writes


def test_pipelined_produces_are_written_together_and_before_their_answers(broker, monkeypatch) -> None:
    batches = [batch(b"v%d" % i) for i in range(20)]
    answers, file_sizes, writes = serve_pipelined(broker, [produce_frame(i, {TOPIC: r}) for i, r in enumerate(batches)],
                                                  20, monkeypatch)  # fmt: skip
    assert [read_answer(a)[0] for a in answers] == list(range(20))
    assert [read_answer(a)[1][0]["base_offset"] for a in answers] == list(range(20))
    assert stored_values(broker) == [b"v%d" % i for i in range(20)]
    assert len(writes) < 20 and sum(writes) == sum(len(r) for r in batches)  # several appends per write
    # every send of answers found the batches it answers in the file already (8 answers go at most at once)
    answered = 0
    for size in file_sizes:
        answered = min(answered + 8, 20)
        assert size >= sum(len(r) for r in batches[:answered])


def test_pipelined_acks_0_produces_are_written_without_answers(broker, monkeypatch) -> None:
    frames = [produce_frame(i, {TOPIC: batch(b"z%d" % i)}, acks=0) for i in range(12)]
    answers, _, writes = serve_pipelined(broker, frames, 0, monkeypatch)
    assert answers == [] and stored_values(broker) == [b"z%d" % i for i in range(12)]
    assert broker.logs.get(TOPIC, 0).segments[0].deferred_bytes == 0


def test_a_duplicate_in_the_same_read_is_answered_with_the_first_offset(broker, monkeypatch) -> None:
    first, second = batch(b"a", producer_id=9, sequence=0), batch(b"b", producer_id=9, sequence=1)
    frames = [produce_frame(0, {TOPIC: first}), produce_frame(1, {TOPIC: first}), produce_frame(2, {TOPIC: second}),
              produce_frame(3, {TOPIC: batch(b"c", producer_id=9, sequence=5)})]  # fmt: skip
    answers, _, _ = serve_pipelined(broker, frames, 4, monkeypatch)
    parts = [read_answer(a)[1][0] for a in answers]
    assert [(p["error_code"], p["base_offset"]) for p in parts] == [
        (0, 0), (0, 0), (0, 1), (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)]  # fmt: skip
    assert stored_values(broker) == [b"a", b"b"]


def test_a_malformed_frame_still_answers_the_requests_before_it(broker, monkeypatch) -> None:
    good = [produce_frame(i, {TOPIC: batch(b"g%d" % i)}) for i in range(3)]
    bad = I32.pack(10) + b"\x00\x00\x00\x08" + b"\x00" * 6  # Produce v8 whose body ends in its header
    answers, file_sizes, _ = serve_pipelined(broker, [*good, bad, *good], 10, monkeypatch)
    assert [read_answer(a)[0] for a in answers] == [0, 1, 2]  # then the connection closed
    assert stored_values(broker) == [b"g0", b"g1", b"g2"]
    assert file_sizes and file_sizes[-1] == broker.logs.get(TOPIC, 0).segments[0].size


def test_a_failed_write_sends_no_answer_and_cuts_the_log_back(broker, monkeypatch) -> None:
    plog = broker.logs.get_or_create(TOPIC, 0)
    plog.append(batch(b"kept"))
    broker.producer_states[(TOPIC, 0)].record(9, 0, 0, 0, 0)
    real_writev = os.writev

    def no_space(fd: int, buffers: list[Any]) -> int:
        if fd == plog.active.fd:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_writev(fd, buffers)

    monkeypatch.setattr(os, "writev", no_space)
    frames = [produce_frame(i, {TOPIC: batch(b"lost%d" % i, producer_id=9, sequence=1 + i)}) for i in range(3)]
    answers, _, _ = serve_pipelined(broker, frames, 3, monkeypatch)
    assert answers == []  # the connection ended unanswered: the client retries
    assert plog.log_end_offset == 1 and stored_values(broker) == [b"kept"]
    assert (TOPIC, 0) not in broker.producer_states  # a retry must not pass for a duplicate of a lost batch
