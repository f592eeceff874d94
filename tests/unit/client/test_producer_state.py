"""The producer's bookkeeping on paths a live broker seldom shows: a request that cannot go out, and a
flush while a batch is being split. Pure logic: the connection is a stand-in, nothing is sent."""

from __future__ import annotations

import asyncio

from broker.client.aio import AsyncConnection
from broker.client.connection import ProtocolError
from broker.client.producer import AsyncProducer, _Batch
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
        self.closed, self._writer, self._client_id = False, object(), b"\x00\x01x"
        self._ids = iter(range(1, 100))

    def version_for(self, api_key: int) -> int:
        return 8

    def send_frame(self, parts, cid, api_key, version, decode, on_answer) -> None:  # noqa: ANN001
        self.frames.append(b"".join(parts))


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
