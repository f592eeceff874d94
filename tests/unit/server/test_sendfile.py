"""Fetch answers are zero-copy: the Fetch handler answers with a file region of the segment file, and the
server's Connection writes that region with `os.sendfile` (counted here), never as bytes in user space.

A real Broker object (no ZooKeeper: its metadata cache is filled by hand) with a real log dir, the real
dispatcher and a real loopback TCP connection; only `os.sendfile` is wrapped, to count what goes through it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from broker.protocol.api import APIS, ApiKey
from broker.protocol.framing import encode_request
from broker.protocol.primitives import I32, Reader
from broker.records.batch import Record, build_batch, decode_header, iter_records
from broker.server.handlers import dispatcher
from broker.server.network import Connection, FileRegion

TOPIC = "zero-copy"
FETCH_V = 11


def append_batches(b: Any, n: int, value_size: int) -> list[bytes]:
    plog = b.logs.get_or_create(TOPIC, 0)
    values = [bytes([65 + i % 26]) * value_size for i in range(n)]
    for v in values:
        plog.append(build_batch([Record(0, int(time.time() * 1000), None, v)]))
    return values


def fetch_frame(max_bytes: int = 8 << 20) -> memoryview:
    """A Fetch v11 request of TOPIC-0 from offset 0, without its size prefix (as the dispatcher gets it)."""
    body = {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": TOPIC, "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": max_bytes}]}],
        "forgotten_topics_data": [], "rack_id": "",
    }  # fmt: skip
    parts = encode_request(ApiKey.FETCH, FETCH_V, 7, "t", APIS[ApiKey.FETCH].request, body)
    return memoryview(b"".join(bytes(p) for p in parts)[4:])


def segment_file(b: Any) -> Path:
    [log_file] = sorted(b.logs.get(TOPIC, 0).dir.glob("*.log"))
    return log_file


def values_in(data: bytes) -> list[bytes | None]:
    out: list[bytes | None] = []
    pos = 0
    while pos < len(data):
        h = decode_header(data, pos)
        out.extend(r.value for r in iter_records(data, pos, h))
        pos += h.size
    return out


def test_fetch_handler_answers_with_a_region_of_the_segment_file(broker) -> None:
    values = append_batches(broker, 3, 100)
    parts = asyncio.run(dispatcher(broker)(fetch_frame(), "peer"))
    regions = [p for p in parts if isinstance(p, FileRegion)]
    try:
        assert len(regions) == 1, parts
        [region] = regions
        log_file = segment_file(broker)
        assert os.path.samestat(os.fstat(region.fd), log_file.stat())  # a dup of the segment file's fd
        assert (region.position, region.length) == (0, log_file.stat().st_size)
        # no record byte is in the bytes parts: they hold only the frame around the region
        assert sum(len(p) for p in parts if not isinstance(p, FileRegion)) < 200
        assert values_in(os.pread(region.fd, region.length, region.position)) == values
    finally:
        for r in regions:
            os.close(r.fd)


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    """(server side, client side) of a loopback TCP connection (TCP_CORK needs TCP: no AF_UNIX pair)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)  # before connecting: no autotuning
        client.connect(listener.getsockname())
        server, _ = listener.accept()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)  # so ~600 KiB cannot go in one call
    return server, client


def read_exactly(sock: socket.socket, n: int, into: bytearray) -> None:
    while len(into) < n:
        chunk = sock.recv(n - len(into))
        if not chunk:
            return
        into += chunk


def test_connection_sends_record_data_with_sendfile(broker, monkeypatch: pytest.MonkeyPatch) -> None:
    # ~600 KiB: more than the socket buffers, so sendfile runs several times between waits
    values = append_batches(broker, 40, 15_000)
    log_file = segment_file(broker)
    calls: list[tuple[int, int]] = []  # (inode of the file sent from, bytes sent)
    real_sendfile = os.sendfile

    def counting_sendfile(out_fd: int, in_fd: int, offset: int, count: int) -> int:
        n = real_sendfile(out_fd, in_fd, offset, count)
        calls.append((os.fstat(in_fd).st_ino, n))
        return n

    monkeypatch.setattr(os, "sendfile", counting_sendfile)
    server_sock, client_sock = tcp_pair()
    received = bytearray()
    size = bytearray()

    def client() -> None:
        read_exactly(client_sock, 4, size)
        read_exactly(client_sock, I32.unpack(bytes(size))[0], received)

    reader = threading.Thread(target=client, daemon=True)
    reader.start()

    async def serve() -> list[Any]:
        server_sock.setblocking(False)
        parts = await dispatcher(broker)(fetch_frame(), "peer")
        await Connection(server_sock, "peer", 1 << 20).send(parts)
        return parts

    try:
        parts = asyncio.run(asyncio.wait_for(serve(), 30))
        reader.join(30)
        assert not reader.is_alive(), f"the answer did not arrive whole: {len(received)} bytes"
    finally:
        server_sock.close()
        client_sock.close()
    [region] = [p for p in parts if isinstance(p, FileRegion)]
    assert {ino for ino, _ in calls} == {log_file.stat().st_ino}
    assert sum(n for _, n in calls) == region.length == log_file.stat().st_size
    assert len(calls) > 1  # the socket filled up: the rest went out after waiting for it to drain
    with pytest.raises(OSError):
        os.fstat(region.fd)  # the server closed its dup of the segment fd once sent
    r = Reader(memoryview(bytes(received)))
    assert r.int32() == 7
    answer = APIS[ApiKey.FETCH].response.read(r, FETCH_V)
    [p] = answer["topics"][0]["partitions"]
    assert p["error_code"] == 0 and p["high_watermark"] == 40
    assert values_in(bytes(p["records"])) == values


def test_a_fetch_answer_held_when_the_deferred_write_fails_has_its_descriptor_closed(tmp_path, monkeypatch) -> None:
    """Two pipelined requests answered with file regions while the broker's deferred write fails: the
    connection ends unanswered and every region's descriptor is closed once (none leaks, none twice)."""
    from broker.server.network import Server

    data_file = tmp_path / "segment"
    data_file.write_bytes(b"x" * 64)
    fd = os.open(data_file, os.O_RDONLY)
    dups: list[int] = []
    closed: list[int] = []
    real_close = os.close

    def dispatch(frame: memoryview, peer: str) -> list[Any]:
        dups.append(os.dup(fd))
        return [I32.pack(4 + 16) + frame[4:8].tobytes(), FileRegion(dups[-1], 0, 16)]

    def settle() -> None:  # fails once both answers are held (the one before the first read passes)
        if len(dups) == 2:
            raise OSError(28, "No space left on device")

    def close(n: int) -> None:
        if n in dups:
            closed.append(n)
        real_close(n)

    monkeypatch.setattr(os, "close", close)

    async def run() -> bytes:
        server = Server("127.0.0.1", 0, dispatch, max_request_bytes=1 << 20, settle=settle)
        server.bind()
        client = socket.create_connection(("127.0.0.1", server.port))
        frame = I32.pack(8) + b"\x00\x01\x00\x00\x00\x00\x00\x07"
        client.sendall(frame * 2)
        server.start()
        client.settimeout(10)
        try:
            return await asyncio.to_thread(client.recv, 1024)
        except ConnectionResetError:  # closed with requests unread
            return b""
        finally:
            client.close()
            await server.close()

    try:
        assert asyncio.run(run()) == b""  # closed with no answer: they were not written
    finally:
        real_close(fd)
    assert len(dups) == 2 and sorted(closed) == sorted(dups)
