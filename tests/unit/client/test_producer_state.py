"""The producer's bookkeeping on paths a live broker seldom shows: a request that cannot go out, a
flush while a batch is being split, a run of requests whose answers are not all plain. Pure logic:
the connection is a stand-in, nothing is sent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker.client.aio import AsyncConnection, PendingRun, _Wire
from broker.client.connection import ProtocolError
from broker.client.producer import AsyncProducer, _Batch
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.produce import RUN_CODEC, PartitionResult, encode_produce_response
from broker.records.batch import decode_header
from broker.records.compression import Codec

TP = ("t", 0)


class ClosedConnection:
    """A connection that closed between being handed out and being written to."""

    def version_for(self, api_key: int) -> int:
        return 8

    def request_head(self, api_key: int, version: int, body_size: int) -> tuple[int, bytes]:
        raise ProtocolError("connection to 127.0.0.1:9 is closed")


class RecordingConnection:
    """A connection that keeps what it is given (request frames) without sending anything."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.request_head = AsyncConnection.request_head.__get__(self)
        self.closed, self._wire, self.client_id_field = False, object(), b"\x00\x01x"
        self._ids = iter(range(1, 100))

    def version_for(self, api_key: int) -> int:
        return 8

    def send_frame(self, parts, cid, api_key, version, decode, on_answer) -> None:  # noqa: ANN001
        self.frames.append(b"".join(parts))

    def send_encoded(self, api_key, version, body, decode, *, expect_response=True, on_answer=None) -> None:  # noqa: ANN001
        self.frames.append(b"".join(bytes(p) for p in body))


class ClosingTransport:
    """A transport that only notes it was closed."""

    closed = False

    def close(self) -> None:
        self.closed = True


def _batch(producer: AsyncProducer, values: list[bytes]) -> _Batch:
    b = _Batch(TP, Codec.NONE, 1e18, 0.0)
    for v in values:
        b.builder.append(1_700_000_000_000, None, v)
    producer.unfinished[b] = None
    return b


def test_a_request_that_cannot_go_keeps_its_sequence_numbers_for_the_retry() -> None:
    async def main() -> tuple[int, int, int]:
        producer = AsyncProducer("127.0.0.1:9", acks="all")
        producer.producer_id, producer.producer_epoch = 7, 0
        producer.sequences[TP] = 100
        b = _batch(producer, [b"a", b"b", b"c"])
        assert not producer._send_request(0, ClosedConnection(), [b])  # type: ignore[arg-type]
        assert b in producer.retrying and b.data is None
        before = producer.sequences[TP]
        conn = RecordingConnection()
        assert producer._send_request(0, conn, [b])  # type: ignore[arg-type]
        assert conn.frames[0].endswith(bytes(b.data))  # the request carries the batch kept for retries
        return before, decode_header(bytes(b.data)).base_sequence, producer.sequences[TP]

    before, sent_sequence, after = asyncio.run(main())
    assert before == 100  # the failed attempt took no sequence numbers
    assert sent_sequence == 100  # the retry carries the ones the broker expects next
    assert after == 103


def test_flush_while_a_batch_is_split_returns_when_its_halves_are_answered() -> None:
    async def main() -> list[int]:
        producer = AsyncProducer("127.0.0.1:9", acks=1)
        b = _batch(producer, [b"1", b"2", b"3", b"4"])
        producer._split(b)  # the broker found it too large: two halves replace it, first in line
        halves = list(producer.ready[TP])
        flushing = asyncio.ensure_future(producer.flush())
        await asyncio.sleep(0)
        assert not flushing.done()
        producer._complete(halves[0], 10)
        producer._complete(halves[1], 12)
        await asyncio.wait_for(flushing, 2)
        return b.result()

    assert asyncio.run(main()) == [10, 11, 12, 13]


def test_a_runs_answers_complete_retry_and_count_each_batch_once() -> None:
    """Answers to a run of seven one-batch requests: three plain ones, an error, one more plain one, then
    the connection ends. The answered complete, the others wait to be retried, and every count adds up."""

    async def main() -> tuple[AsyncProducer, list[_Batch]]:
        producer = AsyncProducer("127.0.0.1:9", acks=1, retries=5)
        run = [_batch(producer, [b"%d" % i]) for i in range(7)]
        for b in run:
            b.size = 21
        producer.buffered = 7 * 21
        producer.in_flight[0], producer.tp_in_flight[TP] = 7, 7
        producer._on_run_answers(0, run, 0, [100, 101, 102], None, None)
        not_leader = [PartitionResult("t", 0, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, None)]
        producer._on_run_answers(0, run, 3, None, not_leader, None)
        producer._on_run_answers(0, run, 4, [104], None, None)
        producer._on_run_answers(0, run, 5, None, None, ProtocolError("broker 127.0.0.1:9 closed the connection"))
        return producer, run

    producer, run = asyncio.run(main())
    assert [b.outcome for b in (run[0], run[1], run[2], run[4])] == [100, 101, 102, 104]
    waiting = [run[3], run[5], run[6]]
    assert not any(b.done() for b in waiting)
    assert producer.retrying == waiting and [b.attempts for b in waiting] == [1, 1, 1]
    assert list(producer.unfinished) == waiting
    assert (producer.in_flight[0], producer.tp_in_flight[TP], producer.buffered) == (0, 0, 3 * 21)


NEEDS_RUNS = pytest.mark.skipif(RUN_CODEC is None, reason="the C run codec is not built here (or is switched off)")


@NEEDS_RUNS
def test_the_wire_hands_a_run_its_answers_a_run_at_a_time_and_the_rest_one_by_one() -> None:
    """Five answers to a run, split across reads mid-frame, the third an error; then a second run the
    connection leaves with one answer of three: the rest get the connection's error."""
    calls: list[tuple] = []

    def sink(index: int, offsets: list[int] | None, answer: Any, exc: BaseException | None) -> None:
        calls.append((index, offsets, answer and [(p.error_code, p.base_offset) for p in answer],
                      type(exc).__name__ if exc else None))  # fmt: skip

    def answer(cid: int, code: int, base: int) -> bytes:
        body = {"topics": [{"name": "t", "partitions": [{"index": 0, "error_code": code, "base_offset": base}]}]}
        return b"".join(encode_produce_response(cid, body, 8))

    async def main() -> None:
        conn = AsyncConnection("127.0.0.1", 9, "c", 5.0)
        conn._wire = wire = _Wire(conn)
        wire.connection_made(ClosingTransport())  # type: ignore[arg-type]
        conn._pending.append(PendingRun(10, 5, 8, b"t", 0, sink))
        conn._pending.append(PendingRun(15, 3, 8, b"t", 0, sink))
        data = answer(10, 0, 7) + answer(11, 0, 8) + answer(12, 6, -1) + answer(13, 0, 9) + answer(14, 0, 10)
        data += answer(15, 0, 11)
        for piece in (data[:60], data[60:150], data[150:]):  # as the transport hands bytes in
            while piece:
                into = wire.get_buffer(-1)
                n = min(len(into), len(piece))
                into[:n] = piece[:n]
                wire.buffer_updated(n)
                piece = piece[n:]
        wire.connection_lost(None)

    asyncio.run(main())
    assert calls[0] == (0, [7], None, None)  # the first read held one whole answer
    assert calls[1:] == [(1, [8], None, None), (2, None, [(6, -1)], None), (3, [9, 10], None, None),
                         (0, [11], None, None), (1, None, None, "ProtocolError")]  # fmt: skip


class RunConnection(RecordingConnection):
    """A stand-in that also takes runs of requests (kept, not sent)."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[tuple[bytes, int, int]] = []
        self.take_ids = AsyncConnection.take_ids.__get__(self)

    def send_run(self, data, first_cid, count, version, topic, partition, sink) -> None:  # noqa: ANN001
        self.runs.append((data, first_cid, count))


def _frame_batches(data: bytes) -> list[bytes]:
    """The record set of each request frame in `data` (one-partition Produce v8, client id "x")."""
    out, pos = [], 0
    while pos < len(data):
        size = int.from_bytes(data[pos : pos + 4], "big")
        frame = data[pos + 4 : pos + 4 + size]
        # request header with client id "x", null transactional id, acks, timeout, topic "t", partition, size
        out.append(frame[8 + 3 + 2 + 2 + 4 + 4 + 2 + 1 + 4 + 4 + 4 :])
        pos += 4 + size
    return out


@NEEDS_RUNS
def test_an_idempotent_run_takes_chained_sequences_and_a_retry_resends_the_same_ones() -> None:

    async def main() -> tuple[AsyncProducer, list[_Batch], RunConnection, RecordingConnection]:
        producer = AsyncProducer("127.0.0.1:9", acks="all")
        producer.producer_id, producer.producer_epoch = 7, 2
        producer.sequences[TP] = 2**31 - 2
        run = [_batch(producer, [b"a", b"b"]), _batch(producer, [b"c"]), _batch(producer, [b"d", b"e", b"f"])]
        closed = ClosedConnection()
        closed.take_ids = lambda n: closed.request_head(0, 8, 0)  # type: ignore[attr-defined]
        assert not producer._send_batch_run(0, closed, TP, run)  # type: ignore[arg-type]
        assert producer.sequences[TP] == 2**31 - 2 and [b.sequence for b in run] == [-1, -1, -1]
        producer.retrying.clear()
        conn = RunConnection()
        assert producer._send_batch_run(0, conn, TP, run)  # type: ignore[arg-type]
        producer._on_run_answers(0, run, 0, [40], None, None)
        producer._on_run_answers(0, run, 1, None, None, ProtocolError("broker 127.0.0.1:9 closed the connection"))
        again = RecordingConnection()
        for b in run[1:]:
            assert producer._send_request(0, again, [b])  # type: ignore[arg-type]
        return producer, run, conn, again

    producer, run, conn, again = asyncio.run(main())
    [(data, first_cid, count)] = conn.runs
    heads = [decode_header(b) for b in _frame_batches(data)]
    assert count == 3 and [h.base_sequence for h in heads] == [2**31 - 2, 0, 1]  # wrapping past 2**31-1
    assert {(h.producer_id, h.producer_epoch) for h in heads} == {(7, 2)}
    assert [b.sequence for b in run] == [2**31 - 2, 0, 1]
    assert producer.sequences[TP] == 4
    resent = [decode_header(f[-len(b.data) :]) for f, b in zip(again.frames, run[1:], strict=True)]
    assert [h.base_sequence for h in resent] == [0, 1]  # the retries carry the sequences first sent
    assert run[0].outcome == 40 and [b.attempts for b in run[1:]] == [2, 2]


def test_the_wire_hands_out_every_frame_whole_whatever_the_pieces_it_is_received_in() -> None:
    """Small answers around two bigger than the receive buffer, received in pieces of every size: each
    frame is handed out whole and in order, the big ones in buffers of their own."""
    import random

    frames = [bytes([i]) * n for i, n in enumerate([10, 300_000, 7, 70_000, 5, 600_000, 3] * 3)]
    data = b"".join(len(f).to_bytes(4, "big") + f for f in frames)

    async def receive(rng: random.Random, got: list[tuple[bytes, type]]) -> None:
        conn = AsyncConnection("127.0.0.1", 9, "c", 5.0)
        conn._answer = lambda frame: got.append((bytes(frame), type(frame.obj)))  # type: ignore[method-assign]
        wire = _Wire(conn)
        wire.connection_made(ClosingTransport())  # type: ignore[arg-type]
        pos = 0
        while pos < len(data):
            into = wire.get_buffer(-1)
            n = min(len(into), len(data) - pos, rng.choice([1, 3, 100, 4096, 65536, 1 << 20]))
            into[:n] = data[pos : pos + n]
            wire.buffer_updated(n)
            pos += n

    for seed in range(5):
        got: list[tuple[bytes, type]] = []
        asyncio.run(receive(random.Random(seed), got))
        assert [f for f, _ in got] == frames, seed
        assert [t for f, t in got if len(f) > 256 * 1024] == [bytearray] * 6  # their own buffers, not copies
