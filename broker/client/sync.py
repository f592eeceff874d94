"""The small synchronous facade over the asyncio clients, for scripts and notebooks.

Each facade runs its async client on a private event loop in a daemon thread; calls block until the
loop has done the work. `Producer.send` returns a `concurrent.futures.Future` of the RecordMetadata.

    with Producer("localhost:9092", acks="all") as p:
        p.send("orders", b"hello", key=b"k").result()
    with Consumer("localhost:9092") as c:
        c.assign([("orders", 0)]); c.seek_to_beginning()
        for record in c.poll(timeout_ms=1000): ...
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any

from broker.client.consumer import AsyncConsumer, ConsumerRecord
from broker.client.producer import AsyncProducer, RecordMetadata

TopicPartition = tuple[str, int]


class _Loop:
    """An event loop of its own in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="kafkactl-client", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def submit(self, coro: Coroutine) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class Producer:
    def __init__(self, bootstrap: str, **config: Any) -> None:
        self._loop = _Loop()
        try:
            self._producer = self._loop.run(self._start(bootstrap, config))
        except BaseException:
            self._loop.stop()
            raise

    @staticmethod
    async def _start(bootstrap: str, config: dict[str, Any]) -> AsyncProducer:
        return await AsyncProducer(bootstrap, **config).start()

    def send(self, topic: str, value: bytes | None, key: bytes | None = None, **kwargs: Any
             ) -> concurrent.futures.Future[RecordMetadata]:  # fmt: skip
        """Queue a message; the future resolves once the broker acknowledged it (or fails)."""

        async def go() -> RecordMetadata:
            delivery = await self._producer.send(topic, value, key, **kwargs)
            return await delivery

        return self._loop.submit(go())

    def flush(self) -> None:
        self._loop.run(self._producer.flush())

    def close(self) -> None:
        try:
            self._loop.run(self._producer.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Consumer:
    def __init__(self, bootstrap: str, **config: Any) -> None:
        self._loop = _Loop()
        try:
            self._consumer = self._loop.run(self._start(bootstrap, config))
        except BaseException:
            self._loop.stop()
            raise

    @staticmethod
    async def _start(bootstrap: str, config: dict[str, Any]) -> AsyncConsumer:
        return await AsyncConsumer(bootstrap, **config).start()

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._loop.run(self._consumer.assign(partitions))

    def seek(self, tp: TopicPartition, offset: int) -> None:
        async def go() -> None:
            self._consumer.seek(tp, offset)

        self._loop.run(go())

    def seek_to_beginning(self, tps: list[TopicPartition] | None = None) -> None:
        self._loop.run(self._consumer.seek_to_beginning(tps))

    def seek_to_end(self, tps: list[TopicPartition] | None = None) -> None:
        self._loop.run(self._consumer.seek_to_end(tps))

    def seek_to_timestamp(self, timestamp: int, tps: list[TopicPartition] | None = None) -> None:
        self._loop.run(self._consumer.seek_to_timestamp(timestamp, tps))

    def position(self, tp: TopicPartition) -> int | None:
        return self._consumer.position(tp)

    def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return self._loop.run(self._consumer.end_offsets(tps))

    def poll(self, timeout_ms: float = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records in offset order per partition, at most `max_records`, waiting up to `timeout_ms`."""
        got = self._loop.run(self._consumer.getmany(timeout_ms, max_records))
        return [r for recs in got.values() for r in recs]

    def close(self) -> None:
        try:
            self._loop.run(self._consumer.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
