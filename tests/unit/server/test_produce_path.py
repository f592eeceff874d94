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
import random
import socket
import threading
import time
from typing import Any

import pytest

from broker.protocol.api import APIS, ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import encode_request
from broker.protocol.messages.produce import RUN_CODEC
from broker.protocol.primitives import I32, Reader
from broker.records.batch import Record, build_batch
from broker.records.compression import Codec
from broker.server.handlers import dispatcher
from broker.server.handlers.produce_run import run_dispatcher
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
    assert broker.logs.get(TOPIC, 0).log_end_offset == 0  # the cached topic waits for the lookup too
    cid, parts = read_answer(b"".join(asyncio.run(answer))[4:])  # no ZooKeeper here: the lookup finds nothing
    assert [(p["error_code"], p["base_offset"]) for p in parts] == [(0, 0), (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)]
    assert stored_values(broker) == [b"v"]


def test_acks_all_below_min_insync_is_refused_on_the_hot_path(broker) -> None:
    broker.cache.configs[TOPIC] = {"min.insync.replicas": "2"}
    answer = dispatcher(broker)(memoryview(produce_frame(7, {TOPIC: batch(b"v")}, acks=-1)[4:]), "peer")
    _, [p] = read_answer(b"".join(answer)[4:])
    assert p["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS
    assert broker.logs.get(TOPIC, 0).log_end_offset == 0


RUNS = pytest.mark.parametrize("runs", [False, pytest.param(True, marks=pytest.mark.skipif(
    RUN_CODEC is None, reason="runs need the C run codec"))], ids=["one-by-one", "runs"])  # fmt: skip


def serve_pipelined(b: Any, frames: list[bytes], expect: int, monkeypatch: pytest.MonkeyPatch, *,
                    runs: bool = False) -> tuple[list[bytes], list[int], list[int]]:  # fmt: skip
    """Send `frames` in one write before the server reads, then read `expect` answers (or to the end);
    with `runs` the server offers them to the Produce run dispatch first, as a broker's does.

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
        server = Server("127.0.0.1", 0, dispatcher(b), max_request_bytes=1 << 20, settle=b.write_deferred,
                        run=run_dispatcher(b) if runs else None)  # fmt: skip
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


@RUNS
def test_pipelined_produces_are_written_together_and_before_their_answers(broker, monkeypatch, runs) -> None:
    batches = [batch(b"v%d" % i) for i in range(20)]
    answers, file_sizes, writes = serve_pipelined(broker, [produce_frame(i, {TOPIC: r}) for i, r in enumerate(batches)],
                                                  20, monkeypatch, runs=runs)  # fmt: skip
    assert [read_answer(a)[0] for a in answers] == list(range(20))
    assert [read_answer(a)[1][0]["base_offset"] for a in answers] == list(range(20))
    assert stored_values(broker) == [b"v%d" % i for i in range(20)]
    assert len(writes) < 20 and sum(writes) == sum(len(r) for r in batches)  # several appends per write
    # every send of answers found the batches it answers in the file already (32 answers go at most at once)
    answered = 0
    for size in file_sizes:
        answered = min(answered + 32, 20)
        assert size >= sum(len(r) for r in batches[:answered])


@RUNS
def test_pipelined_acks_0_produces_are_written_without_answers(broker, monkeypatch, runs) -> None:
    frames = [produce_frame(i, {TOPIC: batch(b"z%d" % i)}, acks=0) for i in range(12)]
    answers, _, writes = serve_pipelined(broker, frames, 0, monkeypatch, runs=runs)
    assert answers == [] and stored_values(broker) == [b"z%d" % i for i in range(12)]
    assert broker.logs.get(TOPIC, 0).segments[0].deferred_bytes == 0


@RUNS
def test_a_duplicate_in_the_same_read_is_answered_with_the_first_offset(broker, monkeypatch, runs) -> None:
    first, second = batch(b"a", producer_id=9, sequence=0), batch(b"b", producer_id=9, sequence=1)
    frames = [produce_frame(0, {TOPIC: first}), produce_frame(1, {TOPIC: first}), produce_frame(2, {TOPIC: second}),
              produce_frame(3, {TOPIC: batch(b"c", producer_id=9, sequence=5)})]  # fmt: skip
    answers, _, _ = serve_pipelined(broker, frames, 4, monkeypatch, runs=runs)
    parts = [read_answer(a)[1][0] for a in answers]
    assert [(p["error_code"], p["base_offset"]) for p in parts] == [
        (0, 0), (0, 0), (0, 1), (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)]  # fmt: skip
    assert stored_values(broker) == [b"a", b"b"]


@RUNS
def test_a_malformed_frame_still_answers_the_requests_before_it(broker, monkeypatch, runs) -> None:
    good = [produce_frame(i, {TOPIC: batch(b"g%d" % i)}) for i in range(3)]
    bad = I32.pack(10) + b"\x00\x00\x00\x08" + b"\x00" * 6  # Produce v8 whose body ends in its header
    answers, file_sizes, _ = serve_pipelined(broker, [*good, bad, *good], 10, monkeypatch, runs=runs)
    assert [read_answer(a)[0] for a in answers] == [0, 1, 2]  # then the connection closed
    assert stored_values(broker) == [b"g0", b"g1", b"g2"]
    assert file_sizes and file_sizes[-1] == broker.logs.get(TOPIC, 0).segments[0].size


def test_a_failed_write_sends_no_answer_and_cuts_the_log_back(broker, monkeypatch) -> None:
    plog = broker.logs.get_or_create(TOPIC, 0)
    plog.append(batch(b"kept", producer_id=9, sequence=0))
    plog.producer_states.record(9, 0, 0, 0, 0)
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
    assert broker.logs.is_offline((TOPIC, 0))  # and its retries are answered KAFKA_STORAGE_ERROR
    # the sequences are what the file holds: a retry of a lost batch is appended, one of the kept batch is not
    states = plog.producer_states
    assert states.check(9, 0, 1, 1) == (ErrorCode.NONE, -1) and states.check(9, 0, 0, 0) == (ErrorCode.NONE, 0)


@RUNS
def test_a_failed_fsync_keeps_the_sequences_of_what_was_written(broker, monkeypatch, runs) -> None:
    """flush.messages=1 and the second fsync fails: the connection ends there unanswered and the log dir goes
    offline (retries: KAFKA_STORAGE_ERROR); what was written is in the file, so once the dir is back its
    retries are answered as duplicates at their offsets, and the rest is appended once."""
    broker.apply_config(TOPIC, {"flush.messages": "1"})  # (its log is open: the broker leads it)
    plog = broker.leader_log_now(TOPIC, 0)[1]
    fsyncs, real_fsync = [], os.fsync

    def fsync(fd: int) -> None:
        if fd == plog.active.fd:
            fsyncs.append(fd)
            if len(fsyncs) == 2:
                raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    values = [b"f%d" % i for i in range(4)]
    frames = [produce_frame(i, {TOPIC: batch(v, producer_id=9, sequence=i)}) for i, v in enumerate(values)]
    answers, _, _ = serve_pipelined(broker, frames, 4, monkeypatch, runs=runs)
    # one by one the second request's fsync fails; with runs, that of the run of the last three
    written = 4 if runs else 2
    assert len(fsyncs) == 2 and [read_answer(a)[0] for a in answers] == list(range(len(answers)))
    assert len(answers) <= 1 and stored_values(broker) == values[:written]
    # the log dir is offline now: the client's retries are answered KAFKA_STORAGE_ERROR and not appended
    refused, _, _ = serve_pipelined(broker, frames, 4, monkeypatch, runs=runs)
    assert [p["error_code"] for a in refused for p in read_answer(a)[1]] == [ErrorCode.KAFKA_STORAGE_ERROR] * 4
    assert stored_values(broker) == values[:written]
    broker.logs.offline_dirs.clear()  # as after a restart, with the sequences the file holds
    again, _, _ = serve_pipelined(broker, frames, 4, monkeypatch, runs=runs)  # the client retries them all
    assert [(p["error_code"], p["base_offset"]) for a in again for p in read_answer(a)[1]] == [(0, i) for i in range(4)]
    assert stored_values(broker) == values  # each once


def _frame(version: int, correlation_id: int, client_id: str | None, acks: int,
           records: dict[str, bytes | None]) -> bytes:  # fmt: skip
    topics = [{"name": t, "partitions": [{"index": 0, "records": r}]} for t, r in records.items()]
    body = {"transactional_id": None, "acks": acks, "timeout_ms": 30_000, "topics": topics}
    parts = encode_request(ApiKey.PRODUCE, version, correlation_id, client_id, APIS[ApiKey.PRODUCE].request, body)
    return b"".join(bytes(p) for p in parts)


def _mixed_frames(seed: int) -> tuple[list[bytes], int]:
    """Pipelined Produce requests, most of them runs' and the rest each a reason for a run to stop or be
    declined; returns them with the count of answers due."""
    rng = random.Random(seed)
    frames: list[bytes] = []
    answered = sequence = epoch = 0
    sent: list[bytes] = []  # the idempotent producer's batches
    now = int(time.time() * 1000)
    for cid in range(rng.randrange(40, 160)):
        kind = rng.choices(["run", "run-other", "corrupt", "idempotent", "two-batches", "two-topics", "log-append",
                            "too-big", "isr", "uncached", "null", "compressed", "duplicate", "gap", "new-epoch"],
                           [30, 6, 2, 12, 2, 2, 2, 2, 2, 1, 1, 3, 2, 1, 1])[0]  # fmt: skip
        version, acks = rng.choice([3, 5, 7, 8, 8, 8]), rng.choice([1, 1, 1, -1, 0])
        client = rng.choice([None, "", "t", "a-longer-client-id"])
        n = rng.randrange(1, 4)
        recs = [Record(i, now + rng.randrange(-5, 5), rng.choice([None, b"k%d" % i]), b"v%d-%d" % (cid, i),
                       rng.choice([(), (("h", b"x"), ("n", None))])) for i in range(n)]  # fmt: skip
        topic = "run-other" if kind == "run-other" else TOPIC
        data: bytes | None = build_batch(recs, codec=Codec.GZIP if kind == "compressed" else Codec.NONE)
        if kind == "corrupt":
            data = data[:-1] + bytes([data[-1] ^ 1])
        elif kind == "idempotent" or kind == "new-epoch":
            if kind == "new-epoch":  # the producer starts over: epoch + 1, sequence 0
                epoch, sequence = epoch + 1, 0
            data = build_batch(recs, producer_id=7, producer_epoch=epoch, base_sequence=sequence)
            sent.append(data)
            sequence += n
        elif kind == "duplicate" and sent:  # a retry of one of the last batches: answered, not appended again
            data = rng.choice(sent[-3:])
        elif kind == "gap":  # sequences skipped: OUT_OF_ORDER_SEQUENCE_NUMBER
            data = build_batch(recs, producer_id=7, producer_epoch=epoch, base_sequence=sequence + 3)
        elif kind == "two-batches":  # refused (one batch a partition, as Kafka): an acks=0 error closes
            data = data + build_batch(recs)
            acks = acks or 1
        elif kind in ("log-append", "too-big", "isr", "uncached"):
            topic = {"log-append": "appendtime", "too-big": "small", "isr": "isr", "uncached": "elsewhere"}[kind]
            if kind == "too-big":
                data = build_batch([Record(0, now, None, b"x" * 400)])
        elif kind == "null":
            data = None
        records = {topic: data}
        if kind == "two-topics":
            records["run-other"] = build_batch(recs)
        if kind in ("corrupt", "too-big", "isr", "uncached", "null", "gap"):
            acks = rng.choice([1, -1])  # an error with acks=0 would close the connection
        frames.append(_frame(version, cid, client, acks, records))
        answered += acks != 0
    return frames, answered


#: TOPIC's settings in the small-segments twin: a roll every few requests, an index entry every batch or
#: two, and index files of 6 offset and 3 time entries (a roll when they fill)
SMALL_SEGMENTS = {"segment.bytes": "1000", "index.interval.bytes": "100", "segment.index.bytes": "48"}


def _twin_broker(path: Any, topic_config: dict[str, str] | None = None) -> Any:
    from broker.server.broker import Broker
    from broker.server.config import BrokerConfig

    b = Broker(BrokerConfig.load(overrides={"log.dirs": str(path), "broker.id": "1"}))
    b.logs.startup()
    b.cache.configs.update({"appendtime": {"message.timestamp.type": "LogAppendTime"},
                            "small": {"max.message.bytes": "300"}, "isr": {"min.insync.replicas": "2"}})  # fmt: skip
    if topic_config:
        b.cache.configs[TOPIC] = topic_config
    for topic in (TOPIC, "run-other", "appendtime", "small", "isr"):  # leading each: its log opened with its config
        b.cache.set_topic(topic, {0: [1]}, {0: {"leader": 1, "leader_epoch": 3, "isr": [1]}})
        b.replicas.apply((topic, 0), b.cache.partition(topic, 0))
    return b


@pytest.mark.parametrize("segments", ["default", "small"])
@pytest.mark.parametrize("seed", range(6))
def test_runs_answer_and_store_byte_for_byte_what_one_by_one_does(tmp_path, monkeypatch, seed, segments) -> None:
    """The same pipelined mix served request by request and through the run dispatch: equal answer
    bytes, equal segment files and index entries (LogAppendTime's batches differ only in their clock);
    with small segments the rolls (by size and by full indexes) fall where they fall one by one."""
    frames, expect = _mixed_frames(seed)
    got = {}
    for runs in (False, True):
        b = _twin_broker(tmp_path / f"runs-{runs}", SMALL_SEGMENTS if segments == "small" else None)
        try:
            answers, _, _ = serve_pipelined(b, frames, expect, monkeypatch, runs=runs)
            logs = {}
            for topic in (TOPIC, "run-other", "appendtime", "small", "isr"):
                plog = b.logs.get(topic, 0)
                if plog is None:
                    continue
                seg = plog.active
                stored = [(r.offset, r.key, r.value, r.headers) for r in plog.read_records(0)]
                if topic == "appendtime":  # its timestamps are the broker's clock
                    logs[topic] = (stored, seg.index.keys, seg.index.values, seg.size)
                    continue
                files = sorted((f.name, f.read_bytes()) for f in plog.dir.glob("*.log"))
                indexes = [(s.base_offset, s.index.keys, s.index.values, s.time_index.keys, s.time_index.values,
                            s.first_timestamp, s.max_timestamp) for s in plog.segments.values()]  # fmt: skip
                logs[topic] = (files, stored, indexes)
            # the LogAppendTime answers carry the broker's clock (bytes 38-46: after the base offset)
            answers = [a[:38] + b"<clock>" + a[46:] if a[10:20] == b"appendtime" else a for a in answers]
            got[runs] = (answers, logs)
        finally:
            b.logs.shutdown()
    assert len(got[False][0]) == expect
    assert got[True][0] == got[False][0]
    assert got[True][1] == got[False][1]
    assert got[True][1][TOPIC][1]  # the mix stored something
    if segments == "small":
        assert len(got[True][1][TOPIC][0]) > 3  # and rolled a few times


def test_a_run_of_many_small_batches_takes_index_entries_where_one_by_one_does(tmp_path, monkeypatch) -> None:
    """Several hundred pipelined one-record requests: the index entries (every 4096 bytes) and the
    answers agree with the one-by-one path's, across the runs' boundaries. The batches are 256 bytes,
    so 16 of them end exactly at the 4096-byte interval (no entry yet: Kafka's rule is "more than")."""
    batches = [batch((b"%05d" % i).ljust(186, b".")) for i in range(700)]
    assert {len(b) for b in batches} == {256}
    frames = [_frame(8, i, "t", 1, {TOPIC: b}) for i, b in enumerate(batches)]
    got = {}
    for runs in (False, True):
        b = _twin_broker(tmp_path / f"many-{runs}")
        try:
            answers, _, _ = serve_pipelined(b, frames, 700, monkeypatch, runs=runs)
            seg = b.logs.get(TOPIC, 0).active
            got[runs] = (answers, seg.index.keys, seg.index.values, seg.time_index.keys, seg.size)
        finally:
            b.logs.shutdown()
    assert len(got[True][1]) > 10
    assert got[True] == got[False]


def test_a_log_set_aside_as_stray_takes_its_producers_with_it(broker) -> None:
    """The topic was deleted and made again while the broker was down: its old log is set aside, and a retry
    of a batch that old log held is no duplicate in the new one (it would be lost)."""
    broker.logs.get_or_create(TOPIC, 0, topic_id=1).producer_states.record(9, 0, 0, 0, 0)
    fresh = broker.logs.get_or_create(TOPIC, 0, topic_id=2)  # another topic of that name
    assert fresh.producer_states.entries == {} and fresh.producer_states.check(9, 0, 0, 0) == (ErrorCode.NONE, -1)
