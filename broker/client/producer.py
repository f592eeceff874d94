"""kafkactl's producer: per-partition batches, a sender task, retries, idempotence, back-pressure.

`send` appends a record to its partition's open batch (a `BatchBuilder`) and returns a `Delivery`
to await. A batch is sent when it reaches `batch.size` bytes (or `max_batch_messages`), when it has
waited `linger.ms`, or on `flush()`. The sender groups ready batches by leader, one batch per
partition per Produce request, with at most `max.in.flight.requests.per.connection` requests
unanswered per broker. Retriable errors (leader moved, broker gone) refresh metadata and resend
the same batch — with idempotence (the default) the broker drops what it already has, so a retry
never duplicates. `buffer.memory` bounds unsent bytes; `send` waits up to `max.block.ms` for room.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from broker.audit.counts import AUDIT_TOPIC, DEFAULT_WINDOW_MS, HOST_HEADER, WindowCounts, hostname, window_of
from broker.audit.counts import records as audit_records
from broker.client.aio import AsyncCluster, AsyncConnection
from broker.client.connection import ProtocolError, apply_settings
from broker.client.partitioner import StickyPartitioner, partition_for_key
from broker.client.properties import typed
from broker.client.security import ClientSecurity
from broker.errors import KafkactlError, UsageError
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages.produce import (
    RUN_CODEC,
    PartitionResult,
    encode_one_partition_request,
    encode_produce_request,
    one_partition_head,
    one_partition_lead,
    read_produce_response,
)
from broker.records.batch import decode_records
from broker.records.builder import BatchBuilder
from broker.records.compression import Codec
from broker.records.crc import crc32c

_build_requests = RUN_CODEC.build_requests if RUN_CODEC is not None else None  # else a request is framed at a time

_I32 = struct.Struct(">i")

CODECS = {"none": Codec.NONE, "gzip": Codec.GZIP, "snappy": Codec.SNAPPY, "lz4": Codec.LZ4, "zstd": Codec.ZSTD}


class ProduceError(KafkaError):
    """A message was not acknowledged; `code` is the broker's error (or -1 for a client-side failure).
    `unknown`: it may have been appended all the same (an attempt went unanswered), so a resend may duplicate it."""

    def __init__(self, message: str, code: int = -1, *, unknown: bool = False) -> None:
        super().__init__(message, code)
        self.unknown = unknown


#: answers after which a batch may be in the log although it was not acknowledged
_MAYBE_APPENDED = frozenset({ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND})


@dataclass
class ProduceStats:
    """What a producer waited for, counted (not one line each): retries by cause, the brokers' throttles
    (throttle_time_ms of Produce answers), the time partitions waited for a leader, and the records acknowledged.
    A listener (`on_notice`) hears of each cause the first time it happens."""

    acked: int = 0
    failed: int = 0  # records not acknowledged (of them `unknown`: maybe appended all the same)
    unknown: int = 0
    retries: dict[str, int] = dataclasses.field(default_factory=dict)  # cause (an error name) → batches retried
    throttled: int = 0
    throttle_ms: int = 0
    leader_wait_s: float = 0.0

    def describe(self) -> str:
        """`3 retries after NOT_ENOUGH_REPLICAS, throttled 12 times (41.2 s)`, or "" when nothing waited."""
        parts = [f"{n} {'retry' if n == 1 else 'retries'} after {cause}" for cause, n in self.retries.items()]
        if self.leader_wait_s >= 0.05:
            parts.append(f"waited {self.leader_wait_s:.1f} s for a leader")
        if self.throttled:
            times = "time" if self.throttled == 1 else "times"
            parts.append(f"throttled {self.throttled} {times} ({self.throttle_ms / 1000:.1f} s)")
        return ", ".join(parts)


class _Answer(list):
    """A Produce answer's partitions, with its throttle_time_ms."""

    __slots__ = ("throttle_ms",)


def _read_answer(r: Any, version: int) -> _Answer:
    """`read_produce_response`, keeping the answer's throttle time (its last int32; before v9's empty tag
    section): a broker over a client's quota answers at once and then reads nothing for that long (KIP-219)."""
    end = r.end - (1 if version >= 9 else 0)
    throttle = _I32.unpack_from(r.buf, end - 4)[0] if version >= 1 and end - r.pos >= 4 else 0
    out = _Answer(read_produce_response(r, version))
    out.throttle_ms = throttle if throttle > 0 and (version < 9 or r.buf[r.end - 1] == 0) else 0
    return out


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int  # -1 with acks=0
    timestamp: int


@dataclass
class ProducerConfig:
    """Kafka's producer keys (docs/configuration.md), under Python names."""

    acks: int = -1  # 0, 1, -1 (all)
    batch_size: int = 16384
    linger_ms: float = 5
    buffer_memory: int = 33554432
    max_block_ms: int = 60000
    max_request_size: int = 1048576
    compression_type: str = "none"
    retries: int = 2147483647
    retry_backoff_ms: int = 100
    delivery_timeout_ms: int = 120000
    request_timeout_ms: int = 30000
    max_in_flight: int = 5
    enable_idempotence: bool | None = None  # None: on when acks=all, as Kafka's default
    max_batch_messages: int = 0  # 0: no count limit (batch.size alone); kafkactl bench sets it
    client_id: str = "kafkactl-producer"
    #: the paper's audit (broker.audit.counts): stamp each message, count them per window, publish the counts
    audit_enabled: bool = False
    audit_window_ms: int = DEFAULT_WINDOW_MS
    audit_topic: str = AUDIT_TOPIC
    #: TLS and SASL (broker.client.security); None: the process default
    security: ClientSecurity | None = None


#: Kafka's producer keys whose names are not their setting's name with '.' → '_'
_PRODUCER_KEYS = {"max.in.flight.requests.per.connection": "max_in_flight"}
_PRODUCER_DEFAULTS = dataclasses.asdict(ProducerConfig())


def producer_settings(props: dict[str, str]) -> dict[str, Any]:
    """Typed keyword settings of `AsyncProducer` from Kafka-named producer properties (`linger.ms=20`,
    `max.request.size=3000000`); an unknown key or a bad value is a UsageError naming it."""
    out: dict[str, Any] = {}
    for key, text in props.items():
        name = _PRODUCER_KEYS.get(key, key.replace(".", "_"))
        if name not in _PRODUCER_DEFAULTS or name in ("max_batch_messages", "security"):
            raise UsageError(f"unknown producer property {key!r}")
        if name == "acks":
            out[name] = parse_acks(text)
        elif name == "compression_type" and text not in CODECS:
            raise UsageError(f"{key}: expected one of {', '.join(CODECS)}, not {text!r}")
        else:
            out[name] = typed(key, text, _PRODUCER_DEFAULTS[name])
    return out


def parse_acks(value: str | int) -> int:
    text = str(value).strip().lower()
    if text in ("all", "-1"):
        return -1
    if text in ("0", "1"):
        return int(text)
    raise UsageError(f"acks={value!r}: expected 0, 1 or all")


_PENDING: Any = object()  # a batch's outcome before its answer
_IN_RUN: Any = memoryview(b"")  # a batch's `data` once sent in a run with its sequence: rebuilt for a retry


class _Batch:
    """Records of one partition that go (and are answered) together. Its outcome is a base offset, a
    list of per-record outcomes (a split batch) or an exception; a future is made only for those who
    wait on it."""

    __slots__ = ("topic", "partition", "tp", "builder", "_future", "outcome", "created", "sequence", "attempts", "data",
                 "deadline", "size", "retry_at", "parent", "results", "waiting", "last_error", "resending",
                 "maybe_appended")  # fmt: skip

    def __init__(self, tp: tuple[str, int], codec: Codec, deadline: float, now: float) -> None:
        self.topic, self.partition = self.tp = tp
        self.builder = BatchBuilder(codec)
        self._future: asyncio.Future | None = None
        self.outcome: Any = _PENDING
        self.created = now
        self.sequence = -1
        self.attempts = 0
        self.data: bytes | None = None
        self.deadline = deadline
        self.size = 0
        self.retry_at = 0.0
        self.parent: tuple[_Batch, int] | None = None  # a record split out of (batch, delta)
        self.results: list[Any] | None = None  # a split batch: each record's offset or error
        self.waiting = 0  # a split batch: records whose outcome is not known yet
        self.last_error: str | None = None  # why its last attempt failed, for the message if it expires
        self.resending = False  # an idempotent batch being retried: its partition goes in sequence order
        self.maybe_appended = False  # an attempt went unanswered (or timed out after the append): fate unknown

    @property
    def future(self) -> asyncio.Future:
        """A future of the outcome (made on first use)."""
        if self._future is None:
            self._future = asyncio.get_running_loop().create_future()
            if self.outcome is not _PENDING:
                self._settle(self._future)
        return self._future

    def done(self) -> bool:
        return self.outcome is not _PENDING

    def resolve(self, outcome: Any) -> None:
        """Set the outcome (a base offset, a split batch's list, or an exception) once."""
        if self.outcome is _PENDING:
            self.outcome = outcome
            if self._future is not None:
                self._settle(self._future)

    def _settle(self, fut: asyncio.Future) -> None:
        if fut.done():
            return
        if isinstance(self.outcome, BaseException):
            fut.set_exception(self.outcome)
            fut.exception()  # retrieved: the error lives on in each Delivery, not as a loop warning
        else:
            fut.set_result(self.outcome)

    def result(self) -> Any:
        """The outcome of a done batch (raising its error)."""
        if self.outcome is _PENDING:
            raise asyncio.InvalidStateError("the batch is not answered yet")
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


class Delivery:
    """The outcome of one `send`: await it for its RecordMetadata (or the ProduceError)."""

    __slots__ = ("batch", "delta", "timestamp")

    def __init__(self, batch: _Batch, delta: int, timestamp: int) -> None:
        self.batch, self.delta, self.timestamp = batch, delta, timestamp

    def __await__(self):
        if not self.batch.done():
            yield from asyncio.shield(self.batch.future).__await__()
        return self._metadata(self.batch.result())

    def _metadata(self, outcome: int | list) -> RecordMetadata:
        b = self.batch
        if isinstance(outcome, list):  # the batch was split record by record: this record's own outcome
            mine = outcome[self.delta]
            if isinstance(mine, BaseException):
                raise mine
            offset = mine
        else:
            offset = outcome + self.delta if outcome >= 0 else -1
        return RecordMetadata(b.topic, b.partition, offset, self.timestamp)

    def done(self) -> bool:
        return self.batch.done()

    def result(self) -> RecordMetadata:
        return self._metadata(self.batch.result())

    def exception(self) -> BaseException | None:
        outcome = self.batch.outcome
        if outcome is _PENDING:
            raise asyncio.InvalidStateError("the message is not answered yet")
        if isinstance(outcome, list):
            mine = outcome[self.delta]
            return mine if isinstance(mine, BaseException) else None
        return outcome if isinstance(outcome, BaseException) else None


class Deliveries(Sequence[Delivery]):
    """The outcomes of one `send_many`, in order: index it for each Delivery, or await it for all their
    RecordMetadata (raising the first error). Deliveries are made only when asked for."""

    __slots__ = ("spans", "timestamp", "count")

    def __init__(self, timestamp: int) -> None:
        self.spans: list[tuple[_Batch, int, int]] = []  # (batch, first offset delta, records)
        self.timestamp = timestamp
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> Delivery:  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.count))]  # type: ignore[return-value]
        i = index + self.count if index < 0 else index
        if not 0 <= i < self.count:
            raise IndexError(index)
        for batch, first, n in self.spans:
            if i < n:
                return Delivery(batch, first + i, self.timestamp)
            i -= n
        raise IndexError(index)  # pragma: no cover - the spans add up to count

    def __await__(self):
        out: list[RecordMetadata] = []
        for batch, first, n in self.spans:
            if not batch.done():
                yield from asyncio.shield(batch.future).__await__()
            out += [Delivery(batch, first + d, self.timestamp).result() for d in range(n)]
        return out


class AsyncProducer:
    def __init__(self, bootstrap: str, config: ProducerConfig | None = None, *,
                 on_notice: Callable[[str], None] | None = None, **overrides: Any) -> None:  # fmt: skip
        """`on_notice(text)`: told once of each cause of waiting (a retriable error, a missing leader, a throttle),
        the first time it happens; `stats` counts them all."""
        cfg = config or ProducerConfig()
        apply_settings(cfg, overrides, "producer")
        cfg.acks = parse_acks(cfg.acks)
        if cfg.compression_type not in CODECS:
            raise KafkactlError(f"compression.type={cfg.compression_type!r}: expected one of {', '.join(CODECS)}")
        if cfg.enable_idempotence is None:
            cfg.enable_idempotence = cfg.acks == -1
        elif cfg.enable_idempotence and cfg.acks != -1:
            raise KafkactlError("enable.idempotence needs acks=all")
        self.config = cfg
        self.codec = CODECS[cfg.compression_type]
        self.cluster = AsyncCluster(bootstrap, client_id=cfg.client_id, timeout=cfg.request_timeout_ms / 1000,
                                    security=cfg.security)  # fmt: skip
        self.sticky = StickyPartitioner()
        self.open: dict[tuple[str, int], _Batch] = {}
        #: sealed batches waiting to go, per partition in order (one per partition per request)
        self.ready: dict[tuple[str, int], collections.deque[_Batch]] = {}
        self.retrying: list[_Batch] = []
        self.in_flight: dict[int, int] = collections.defaultdict(int)
        self.tp_in_flight: dict[tuple[str, int], int] = {}  # requests in flight per partition
        self.splitting: dict[tuple[str, int], int] = {}  # split batches not done yet, per partition
        # idempotent batches being retried, per partition (and those of them waiting out their backoff): until
        # they are answered the partition goes one request at a time, lowest sequence first, so that a new
        # leader gets its sequences in order (else it refuses the later ones, OUT_OF_ORDER_SEQUENCE_NUMBER)
        self.resending: dict[tuple[str, int], int] = {}
        self._new_identity = False  # a batch failed with its fate unknown: a new producer id before sending more
        self.progress_at: dict[int, float] = {}  # per broker: its last answer (or first request in flight)
        self.backing_off: dict[tuple[str, int], int] = {}
        self.unfinished: dict[_Batch, None] = {}  # batches not answered yet, in the order they were made
        self.buffered = 0
        self.producer_id, self.producer_epoch = -1, -1
        self.sequences: dict[tuple[str, int], int] = collections.defaultdict(int)
        self._wake = asyncio.Event()
        self._send_order = asyncio.Lock()  # sends that must wait (metadata, buffer.memory) go through it in turn
        self._waiting_sends = 0
        self._room = asyncio.Event()
        self._sender: asyncio.Task | None = None
        self._flushing = 0
        self._closed = False
        self._refresh_needed = False
        self._refreshing: asyncio.Task | None = None
        self._acks0_drain: set[AsyncConnection] = set()  # connections written to at acks=0 this round
        self.audit = WindowCounts(cfg.audit_window_ms) if cfg.audit_enabled else None
        self._audit_stamp = ((HOST_HEADER, hostname().encode()),)
        self._audit_sends: set[asyncio.Task] = set()
        self.stats = ProduceStats()
        self._on_notice = on_notice
        self._noticed: set[str] = set()
        self.throttled_until: dict[int, float] = {}  # per broker: when its last throttle ends (sends wait)
        self._leaderless_since: float | None = None  # since when queued data has waited for a missing leader
        self._stopping = False  # `stop`: nothing more is sent, only answers awaited
        #: whether queued batches of one partition may go as a run of requests framed together in C (their
        #: answers are read in bulk, without their throttle times: not for a producer that reports throttles)
        self._runs = _build_requests is not None and self.codec == Codec.NONE and cfg.acks != 0 and on_notice is None

    async def start(self, topics: Sequence[str] = ()) -> AsyncProducer:
        """Connect and, idempotent, take a producer id. `topics`: those it will write to, named in an
        authorization error (an idempotent producer without Write on any topic is refused its id first)."""
        await self.cluster.refresh(list(topics))
        if self.config.enable_idempotence:
            conn = await self.cluster.any_connection()
            answer = await conn.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None,
                                                                   "transaction_timeout_ms": 60000})  # fmt: skip
            code = answer["error_code"]
            if code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and topics:
                self._refused_topics(topics)
            if code:
                raise ProduceError(f"InitProducerId: {ErrorCode(code).name}", code)
            self.producer_id, self.producer_epoch = answer["producer_id"], answer["producer_epoch"]
        self._sender = asyncio.get_running_loop().create_task(self._send_loop())
        return self

    def _refused_topics(self, topics: Sequence[str]) -> None:
        """InitProducerId was refused (CLUSTER_AUTHORIZATION_FAILED): Kafka grants an idempotent producer its id
        with IdempotentWrite on the cluster or Write on any topic, so this principal may write to none of
        `topics` — said of the topic, as Kafka's clients say it (TOPIC_AUTHORIZATION_FAILED)."""
        code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        for topic in topics:
            meta = self.cluster.topics.get(topic)
            if meta is not None and meta.error == code:  # not even Describe
                raise ProduceError(f"Topic authorization failed for {topic} (TOPIC_AUTHORIZATION_FAILED): no Describe "
                                   "or Write on it", code)  # fmt: skip
        raise ProduceError(f"Topic authorization failed for {topics[0]} (TOPIC_AUTHORIZATION_FAILED): no Write on it "
                           "(nor on any topic, nor IdempotentWrite on the cluster: InitProducerId was refused with "
                           "CLUSTER_AUTHORIZATION_FAILED)", code)  # fmt: skip

    async def __aenter__(self) -> AsyncProducer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def partitions(self, topic: str) -> int:
        meta = self.cluster.topics.get(topic)
        if meta is None or meta.error or not meta.partitions:
            meta = await self.cluster.topic(topic, allow_create=True)
        return len(meta.partitions)

    async def send(self, topic: str, value: bytes | None, key: bytes | None = None, *,
                   headers: tuple[tuple[str, bytes | None], ...] | list = (), partition: int | None = None,
                   timestamp: int | None = None) -> Delivery:  # fmt: skip
        """Queue one message; await the returned Delivery for its offset. Waits (up to `max.block.ms`)
        only for the topic's metadata or for room in `buffer.memory`. Sends keep the order they were
        made in: while one waits, later ones queue behind it."""
        if not self._waiting_sends:
            delivery = self.send_nowait(topic, value, key, headers=headers, partition=partition,
                                        timestamp=timestamp)  # fmt: skip
            if delivery is not None:
                return delivery
        self._waiting_sends += 1
        try:
            async with self._send_order:  # FIFO: the waiting sends go in the order they came
                if self._closed or self._stopping:
                    raise ProduceError("the producer is closed" if self._closed else "the producer is stopped")
                await self.partitions(topic)
                size = 20 + (len(key) if key else 0) + (len(value) if value else 0)
                if self.buffered + size > self.config.buffer_memory:
                    await self.wait_for_room(size)
                delivery = self.send_nowait(topic, value, key, headers=headers, partition=partition,
                                            timestamp=timestamp, force=True)  # fmt: skip
        finally:
            self._waiting_sends -= 1
        assert delivery is not None
        return delivery

    def send_nowait(self, topic: str, value: bytes | None, key: bytes | None = None, *,
                    headers: tuple[tuple[str, bytes | None], ...] | list = (), partition: int | None = None,
                    timestamp: int | None = None, force: bool = False) -> Delivery | None:  # fmt: skip
        """`send` without waiting: None when it would have to wait (unknown topic, `buffer.memory` full)."""
        partition = self._partition_for(topic, key, partition)
        if partition < 0:
            return None
        cfg = self.config
        size = 20 + (len(key) if key else 0) + (len(value) if value else 0)
        if size > cfg.max_request_size:
            raise ProduceError(f"message of {size} bytes is over max.request.size ({cfg.max_request_size})",
                               ErrorCode.MESSAGE_TOO_LARGE)  # fmt: skip
        if self.buffered + size > cfg.buffer_memory and not force:
            return None
        ts = int(time.time() * 1000) if timestamp is None else timestamp
        tp = (topic, partition)
        audit = self.audit is not None and topic != cfg.audit_topic
        batch = self._audit_batch(tp, ts) if audit else self.open.get(tp) or self._open_batch(tp)
        builder = batch.builder
        delta = builder.append(ts, key, value, (*headers, *self._audit_stamp) if audit and not builder.count
                               else headers)  # fmt: skip
        if audit:
            self.audit.add(topic, ts)
        batch.size += size
        self.buffered += size
        if len(builder.buf) + 61 >= cfg.batch_size or (cfg.max_batch_messages and delta + 1 >= cfg.max_batch_messages):
            self._seal(tp, batch)
        return Delivery(batch, delta, ts)

    def send_many(self, topic: str, values: Sequence[bytes | None], key: bytes | None = None, *,
                  headers: tuple[tuple[str, bytes | None], ...] | list = (), partition: int | None = None,
                  timestamp: int | None = None) -> Deliveries | None:  # fmt: skip
        """A message set in one call, as the paper's producer sends one: `values`, each with `key` and
        `headers`, go in order to one partition, in as few batches as `batch.size` allows. None (and
        nothing queued) when it would have to wait, as `send_nowait`."""
        partition = self._partition_for(topic, key, partition)
        if partition < 0:
            return None
        cfg = self.config
        if not values:
            return Deliveries(-1)
        fixed = 20 + (len(key) if key else 0)
        lengths = [len(v) if v else 0 for v in values] if None in values else list(map(len, values))
        biggest = fixed + max(lengths)
        if biggest > cfg.max_request_size:
            raise ProduceError(f"message of {biggest} bytes is over max.request.size ({cfg.max_request_size})",
                               ErrorCode.MESSAGE_TOO_LARGE)  # fmt: skip
        total = fixed * len(values) + sum(lengths)
        if self.buffered + total > cfg.buffer_memory:
            return None
        ts = int(time.time() * 1000) if timestamp is None else timestamp
        audit = self.audit is not None and topic != cfg.audit_topic
        tp = (topic, partition)
        max_count = cfg.max_batch_messages or 1 << 30
        deliveries = Deliveries(ts)
        done = 0
        while done < len(values):
            batch = self._audit_batch(tp, ts) if audit else self.open.get(tp) or self._open_batch(tp)
            builder = batch.builder
            first = builder.count
            if audit and not first:  # the batch's first record carries the stamp
                builder.append(ts, key, values[done], (*headers, *self._audit_stamp))
                added = 1
                if len(builder) < cfg.batch_size and builder.count < max_count:
                    added += builder.append_many(ts, key, values, done + 1, headers, cfg.batch_size, max_count)
            else:
                added = builder.append_many(ts, key, values, done, headers, cfg.batch_size, max_count)
            batch.size += fixed * added + sum(lengths[done : done + added])
            deliveries.spans.append((batch, first, added))
            done += added
            if len(builder.buf) + 61 >= cfg.batch_size or builder.count >= max_count:
                self._seal(tp, batch)
        self.buffered += total
        deliveries.count = done
        if audit:
            self.audit.add(topic, ts, done)
        return deliveries

    def _partition_for(self, topic: str, key: bytes | None, partition: int | None) -> int:
        """The partition a send goes to (as given, by key, or sticky); -1 while the topic is not known."""
        if self._closed or self._stopping:
            raise ProduceError("the producer is closed" if self._closed else "the producer is stopped")
        meta = self.cluster.topics.get(topic)
        if meta is None or meta.error or not meta.partitions:
            return -1
        n = len(meta.partitions)
        if partition is None:
            if key is not None:
                return partition_for_key(key, n)
            p = self.sticky.partition(topic, n)
            if meta.partitions[p].leader < 0:  # as Kafka's: keyless messages go where a leader takes them
                p = self.sticky.move(topic, [q for q, pm in meta.partitions.items() if pm.leader >= 0], p)
            return p
        if not 0 <= partition < n:
            raise ProduceError(f"topic {topic!r} has no partition {partition} (it has {n})",
                               ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)  # fmt: skip
        return partition

    def _audit_batch(self, tp: tuple[str, int], ts: int) -> _Batch:
        """The open batch of `tp` for an audited message stamped `ts`: a new one when the open one holds
        another window's messages (an audited batch counts as a whole, in the window of its base timestamp)."""
        batch = self.open.get(tp)
        if batch is not None and batch.builder.count:
            wms = self.config.audit_window_ms
            if window_of(batch.builder.base_ts, wms) != window_of(ts, wms):
                self._seal(tp, batch)
                batch = None
        return batch or self._open_batch(tp)

    def _open_batch(self, tp: tuple[str, int]) -> _Batch:
        now = time.monotonic()
        batch = self.open[tp] = _Batch(tp, self.codec, now + self.config.delivery_timeout_ms / 1000, now)
        self.unfinished[batch] = None
        if len(self.open) == 1:
            self._wake.set()  # the sender sleeps until the first linger deadline
        return batch

    def _queue(self, b: _Batch, front: bool = False) -> None:
        tp = b.tp
        queue = self.ready.get(tp)
        if queue is None:
            queue = self.ready[tp] = collections.deque()
        if front:
            queue.appendleft(b)
        else:
            queue.append(b)

    def _seal(self, tp: tuple[str, int], batch: _Batch) -> None:
        del self.open[tp]
        if batch.builder.count:
            self._queue(batch)
            self._wake.set()
        else:  # opened by a send that then failed (a value that is not bytes): nothing to wait for
            self._finish(batch)
        if batch.partition == self.sticky.current.get(batch.topic):
            meta = self.cluster.topics.get(batch.topic)
            self.sticky.batch_done(batch.topic, batch.partition, len(meta.partitions) if meta else 1)

    async def wait_for_room(self, size: int) -> None:
        """Wait (up to `max.block.ms`) until `size` more bytes fit in `buffer.memory`; unsent batches go now."""
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        while self.buffered + size > self.config.buffer_memory and self.buffered > 0:
            if self._stopping:
                raise ProduceError("the producer is stopped")
            self._room.clear()
            for tp, b in list(self.open.items()):  # unsent data blocks us: send it now
                self._seal(tp, b)
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProduceError(f"buffer.memory full for {self.config.max_block_ms} ms (max.block.ms)")
            try:
                await asyncio.wait_for(self._room.wait(), left)
            except TimeoutError:
                pass

    @property
    def flushing(self) -> bool:
        """Whether a `flush` is waiting for answers (after `stop`, only for those of requests in flight)."""
        return self._flushing > 0

    async def flush(self) -> None:
        """Send everything queued and wait for every answer (errors stay with their deliveries)."""
        self._flushing += 1
        try:
            if self.audit is not None:  # the counts of closed windows go too
                self._publish_audit(self.audit.take(int(time.time() * 1000)))
                await self._audit_published()
            for tp, b in list(self.open.items()):
                self._seal(tp, b)
            # newest first: usually answered last, so the others are done by then and need no future; the
            # halves of a split batch are skipped, their parent is done when they are
            for b in reversed(list(self.unfinished)):
                if b.parent is None and not b.done():
                    await asyncio.wait([b.future])
        finally:
            self._flushing -= 1

    async def close(self) -> None:
        if self._closed:
            return
        try:
            if self._sender is not None:
                if self.audit is not None:  # every count, the open windows' too
                    self._publish_audit(self.audit.take())
                await self.flush()
        finally:
            self._closed = True
            if self._refreshing is not None:
                self._refreshing.cancel()
                try:
                    await self._refreshing
                except (asyncio.CancelledError, Exception):
                    pass
            if self._sender is not None:
                self._sender.cancel()
                try:
                    await self._sender
                except (asyncio.CancelledError, Exception):
                    pass
            await self.cluster.close()

    # -- audit ---------------------------------------------------------------------------------------

    def _publish_audit(self, counts: dict[tuple[str, int], int]) -> None:
        """Send `counts` to the audit topic (in the background: its metadata may have to be fetched first)."""
        if not counts:
            return
        recs = audit_records("produced", counts, self.config.audit_window_ms, client=self.config.client_id)
        task = asyncio.get_running_loop().create_task(self._send_audit(recs))
        self._audit_sends.add(task)
        task.add_done_callback(self._audit_sends.discard)

    async def _send_audit(self, recs: list) -> None:
        for rec in recs:
            await self.send(self.config.audit_topic, rec.encode(), key=rec.topic.encode())

    async def _audit_published(self) -> None:
        """Wait until the audit counts handed to the sender are queued (their answers come with the flush)."""
        while self._audit_sends:
            await asyncio.gather(*list(self._audit_sends), return_exceptions=True)

    # -- sender --------------------------------------------------------------------------------------

    async def _send_loop(self) -> None:
        """The sender; should it ever fail, every queued message fails with it rather than wait forever."""
        try:
            await self._send_rounds()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = ProduceError(f"the producer's sender failed: {type(exc).__name__}: {exc}")
            self._closed = True
            for b in list(self.unfinished):
                if b.results is None:  # a split batch ends when its halves do
                    self._fail(b, error)
            raise

    async def _send_rounds(self) -> None:
        linger = self.config.linger_ms / 1000
        while True:
            self._wake.clear()  # before looking: a wake-up during this round is kept for the wait below
            self._expire_stuck()
            if self._new_identity and not any(self.in_flight.values()):
                await self._renew_identity()
            now = time.monotonic()
            next_due = None
            if self.audit is not None and self.audit.oldest is not None:
                now_ms = int(time.time() * 1000)
                if self.audit.due(now_ms):
                    self._publish_audit(self.audit.take(now_ms))
                if self.audit.oldest is not None:  # wake up when the oldest window closes
                    next_due = now + (self.audit.oldest + self.audit.window_ms - now_ms) / 1000
            for tp, b in list(self.open.items()):  # lingered long enough: ready
                due = b.created + linger
                if due <= now:
                    self._seal(tp, b)
                elif next_due is None or due < next_due:
                    next_due = due
            if self.retrying:
                due, still = [], []
                for b in self.retrying:
                    if b.retry_at <= now:
                        due.append(b)
                    else:
                        still.append(b)
                        next_due = b.retry_at if next_due is None else min(next_due, b.retry_at)
                due.sort(key=lambda b: b.created, reverse=True)  # retries go first, in the order they were made
                for b in due:
                    self._queue(b, front=True)
                    if b.resending:
                        self.backing_off[b.tp] -= 1
                for tp in {b.tp for b in due if b.resending}:  # lowest sequence first
                    queue = self.ready[tp]
                    self.ready[tp] = collections.deque(sorted(queue, key=lambda b: (b.sequence < 0, b.sequence)))
                self.retrying = still
            if self._refresh_needed and (self._refreshing is None or self._refreshing.done()):
                self._refresh_needed = False
                waiting = {t for t, _ in self.ready} | {b.topic for b in self.retrying}  # (leaders moved)
                self._refreshing = asyncio.get_running_loop().create_task(self._refresh(sorted(waiting)))
            sent_any = await self._send_ready() if self.ready else False
            if not self.ready and self._leaderless_since is not None:
                self._leaderless([], time.monotonic())
            if sent_any:
                continue
            timeout = None if next_due is None else max(0.0, next_due - time.monotonic())
            if self.ready:  # blocked by in-flight limits: wait for an answer
                timeout = 0.05 if timeout is None else min(timeout, 0.05)
            elif any(self.in_flight.values()):  # (to notice a broker that stopped answering)
                timeout = 0.5 if timeout is None else min(timeout, 0.5)
            if self._wake.is_set():
                continue
            # a timer that sets the wake-up event costs less than wait_for's task per round
            timer = None if timeout is None else asyncio.get_running_loop().call_later(timeout, self._wake.set)
            try:
                await self._wake.wait()
            finally:
                if timer is not None:
                    timer.cancel()

    async def _refresh(self, topics: list[str]) -> None:
        """Metadata, asked for aside: its answer may wait behind a broker's acks=all answers (a broker answers a
        connection's requests in order), and the healthy partitions' batches go on meanwhile."""
        try:
            await self.cluster.refresh(topics)
        except KafkactlError:
            pass
        finally:
            self._wake.set()

    async def _send_ready(self) -> bool:
        """Send what the in-flight limits allow (one batch per partition per request); True if anything went out."""
        now = time.monotonic()
        for tp, queue in list(self.ready.items()):
            while queue and now > queue[0].deadline:
                b = queue.popleft()
                if b.last_error is None and self.cluster.leader(*tp) < 0:
                    b.last_error = "no leader (LEADER_NOT_AVAILABLE)"
                why = f" (last error: {b.last_error})" if b.last_error else ""
                self._fail(b, ProduceError(f"{b.topic}-{b.partition}: not delivered within delivery.timeout.ms{why}"))
            if not queue:
                del self.ready[tp]
        if self._new_identity or self._stopping:  # (nothing more goes out under the old producer id)
            return False
        sent = False
        if len(self.ready) == 1:  # one partition (bench, keyed runs): its batches go one request each, in a row
            sent = self._send_run(*next(iter(self.ready.items())))
        leaderless: list[tuple[str, int]] = []
        throttled = self.throttled_until
        while self.ready:
            by_node: dict[int, list[_Batch]] = {}
            for tp, queue in list(self.ready.items()):
                node = self.cluster.leader(*tp)
                if node < 0:  # its broker is down: metadata is asked again every retry.backoff.ms until it is back
                    leaderless.append(tp)
                    if now - self.cluster.last_refresh >= self.config.retry_backoff_ms / 1000:
                        self._refresh_needed = True
                    continue
                if self.in_flight[node] >= self.config.max_in_flight:
                    continue  # the batch joins a later request to this broker
                if throttled and throttled.get(node, 0.0) > now:
                    continue  # the broker throttles this client: it reads nothing before then
                if self.splitting.get(tp) and self.tp_in_flight.get(tp):
                    continue  # a split batch's pieces go one request at a time, so that order is kept
                if self.resending.get(tp) and (self.tp_in_flight.get(tp) or self.backing_off.get(tp)):
                    continue  # retried sequences first, one request at a time
                by_node.setdefault(node, []).append(queue.popleft())
                if not queue:
                    del self.ready[tp]
            if not by_node:
                break
            leaderless.clear()  # (looked at again on the next pass)
            for node, batches in by_node.items():
                conn = self.cluster.open_connection(node)
                if conn is None:  # not connected yet: connect (the only wait on this path)
                    try:
                        conn = await self.cluster.connection(node)
                    except KafkactlError as exc:
                        for b in batches:
                            self._retry(b, exc, refresh=True)
                        continue
                    if self._stopping:  # stopped while connecting: these are not sent
                        for b in batches:
                            self._fail(b, ProduceError(f"{b.topic}-{b.partition}: not sent (stopped)"),
                                       not_appended=True)  # fmt: skip
                        continue
                sent = self._send_request(node, conn, batches) or sent
            await self._drain_acks0()
        await self._drain_acks0()
        if leaderless or self._leaderless_since is not None:
            self._leaderless(sorted(set(leaderless)), time.monotonic())
        return sent

    async def _drain_acks0(self) -> None:
        """acks=0 back-pressure: wait until every connection written to this round has room again."""
        while self._acks0_drain:
            await self._acks0_drain.pop().drain()

    def _send_run(self, tp: tuple[str, int], queue: collections.deque[_Batch]) -> bool:
        """Send `tp`'s queued batches, a request each, while its leader is connected and the in-flight
        limits allow; True if any went out. What cannot go is left to the general loop."""
        node = self.cluster.leader(*tp)
        conn = self.cluster.open_connection(node) if node >= 0 else None
        if conn is None or (self.splitting.get(tp) and self.tp_in_flight.get(tp)) or self.resending.get(tp):
            return False
        if self.throttled_until and self.throttled_until.get(node, 0.0) > time.monotonic():
            return False
        limit = self.config.max_in_flight
        in_flight = self.in_flight
        sent = False
        room = limit - in_flight[node]
        if self._runs and room > 1 and len(queue) > 1 and not self.splitting.get(tp):
            run = []
            while queue and len(run) < room and queue[0].data is None and queue[0].parent is None:
                run.append(queue.popleft())
            if run:
                sent = self._send_batch_run(node, conn, tp, run)
        while queue and in_flight[node] < limit and self._send_request(node, conn, [queue.popleft()]):
            sent = True
            if self.splitting.get(tp):
                break  # a split batch's pieces go one request at a time
        if not queue:
            del self.ready[tp]
        return sent

    def _send_batch_run(self, node: int, conn: AsyncConnection, tp: tuple[str, int], run: list[_Batch]) -> bool:
        """`run`'s batches (new and uncompressed), a request each, framed together in C; their answers
        come back a run at a time (`_on_run_answers`). An idempotent producer's batches take their
        sequence numbers once the connection took the ids, and keep them for a retry (`_IN_RUN`)."""
        cfg = self.config
        try:
            version = conn.version_for(ApiKey.PRODUCE)
            cid = conn.take_ids(len(run))  # raises when the connection is closed: no sequence is taken then
            first_sequence = self.sequences[tp] if self.producer_id >= 0 else -1
            data = _build_requests(version, cid, conn.client_id_field,
                                   one_partition_head(version, cfg.acks, cfg.request_timeout_ms, tp[0]), tp[1],
                                   [b.builder for b in run], self.producer_id, self.producer_epoch, first_sequence,
                                   crc32c)  # fmt: skip
            if first_sequence >= 0:  # taken only once the requests are built
                sequence = first_sequence
                for b in run:
                    b.sequence, b.data = sequence, _IN_RUN
                    sequence = (sequence + b.builder.count) % (2**31)
                self.sequences[tp] = sequence
            sink = functools.partial(self._on_run_answers, node, run)
            conn.send_run(data, cid, len(run), version, tp[0], tp[1], sink)
        except (ProtocolError, KafkactlError) as exc:
            for b in run:  # not sent: no attempt counted, as `_send_request`
                self._retry(b, exc, refresh=True)
            return False
        if not self.in_flight[node]:
            self.progress_at[node] = time.monotonic()
        self.in_flight[node] += len(run)
        self.tp_in_flight[tp] = self.tp_in_flight.get(tp, 0) + len(run)
        return True

    def _on_run_answers(self, node: int, run: list[_Batch], index: int, offsets: list[int] | None, answer: Any,
                        exc: BaseException | None) -> None:  # fmt: skip
        """Answers to a run of requests (see `RunSink`): base offsets of no-error answers from `index` on are
        the usual case, done here in bulk; any other answer, or the connection's end, goes to `_on_answer`."""
        if offsets is None:
            for b in run[index : index + 1] if exc is None else run[index:]:
                b.attempts += 1  # (counted here, not when sent: a run's batches are not touched on the way out)
                self._on_answer(node, [b], answer, exc)
            return
        k = len(offsets)
        self.in_flight[node] -= k
        self.progress_at[node] = time.monotonic()
        tp = run[index].tp
        self.tp_in_flight[tp] -= k
        self._wake.set()
        unfinished = self.unfinished
        freed = 0
        stats = self.stats
        for b, offset in zip(run[index : index + k], offsets, strict=True):  # `_complete` of each, inlined
            if b.outcome is _PENDING:
                stats.acked += b.builder.count
                b.outcome = offset
                if b._future is not None:
                    b._settle(b._future)
            unfinished.pop(b, None)  # (gone already if the sender failed it)
            freed += b.size
            b.size = 0
            b.builder = None  # type: ignore[assignment]
        self.buffered -= freed
        self._room.set()

    def _send_request(self, node: int, conn: AsyncConnection, batches: list[_Batch]) -> bool:
        """One Produce request of `batches` to `node`; False (and the batches retried) when it could not go."""
        cfg = self.config
        acks0 = cfg.acks == 0
        sink = None if acks0 else functools.partial(self._on_answer, node, batches)
        try:
            version = conn.version_for(ApiKey.PRODUCE)
            first = batches[0]
            if len(batches) == 1 and first.data is None and not self.codec:
                # the usual request, one new batch: built right behind the request's head, one buffer
                size = len(first.builder)
                lead = one_partition_lead(version, cfg.acks, cfg.request_timeout_ms, first.topic, first.partition,
                                          size)  # fmt: skip
                cid, head = conn.request_head(ApiKey.PRODUCE, version, len(lead) + size)  # raises when closed
                self._assign_sequence(first)  # only now: a batch that did not go keeps its sequences for the retry
                frame = first.builder.build(producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                                            base_sequence=first.sequence, lead=head + lead)  # fmt: skip
                first.data = memoryview(frame)[len(frame) - size :]  # kept for a retry
                first.attempts += 1
                conn.send_frame([frame], cid, ApiKey.PRODUCE, version, _read_answer, sink)
            else:
                for b in batches:
                    if b.data is None or b.data is _IN_RUN:  # new, or sent in a run: (re)built with its sequence
                        if b.data is None:
                            self._assign_sequence(b)
                        b.data = b.builder.build(producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                                                 base_sequence=b.sequence)  # fmt: skip
                    b.attempts += 1
                if len(batches) == 1:
                    body = encode_one_partition_request(version, cfg.acks, cfg.request_timeout_ms, first.topic,
                                                        first.partition, first.data)  # fmt: skip
                else:
                    topics: dict[str, list[tuple[int, Any]]] = {}
                    for b in batches:
                        topics.setdefault(b.topic, []).append((b.partition, b.data))
                    body = encode_produce_request(version, cfg.acks, cfg.request_timeout_ms, topics)
                conn.send_encoded(ApiKey.PRODUCE, version, body, _read_answer, expect_response=not acks0,
                                  on_answer=sink)  # fmt: skip
        except (ProtocolError, KafkactlError) as exc:
            for b in batches:
                self._retry(b, exc, refresh=True)
            return False
        if acks0:
            for b in batches:
                self._complete(b, -1)
            self._acks0_drain.add(conn)  # back-pressure: the sender waits for the socket once this round is out
            return True
        if not self.in_flight[node]:
            self.progress_at[node] = time.monotonic()
        self.in_flight[node] += 1
        for b in batches:
            tp = b.tp
            self.tp_in_flight[tp] = self.tp_in_flight.get(tp, 0) + 1
        return True

    def _assign_sequence(self, b: _Batch) -> None:
        """The batch's first sequence number (idempotence), taken when it is first built; -1 without."""
        b.sequence = -1
        if self.producer_id >= 0:
            tp = b.tp
            b.sequence = self.sequences[tp]
            self.sequences[tp] = (b.sequence + b.builder.count) % (2**31)

    def _on_answer(self, node: int, batches: list[_Batch], answer: list[PartitionResult] | None,
                   exc: BaseException | None) -> None:  # fmt: skip
        """A Produce answer (or the connection's failure): complete, retry, split or fail each batch."""
        self.in_flight[node] -= 1
        self.progress_at[node] = time.monotonic()
        for b in batches:
            self.tp_in_flight[b.tp] -= 1
        self._wake.set()
        if exc is not None or answer is None:
            for b in batches:
                b.maybe_appended = True  # sent, never answered
                self._retry(b, exc or ProduceError("no answer"), refresh=True)
            return
        throttle = getattr(answer, "throttle_ms", 0)
        if throttle:
            self._throttled(node, throttle)
        if len(batches) == 1 and len(answer) == 1:  # the usual request, one partition
            b, p = batches[0], answer[0]
            if p.error_code == 0 and p.partition == b.partition and p.topic == b.topic:
                self._complete(b, p.base_offset)
                return
        results = {(p.topic, p.partition): p for p in answer}
        for b in batches:
            p = results.get(b.tp)
            if p is None:
                self._fail(b, ProduceError(f"{b.topic}-{b.partition}: no answer for this partition"))
                continue
            code = p.error_code
            if code == 0 or code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                self._complete(b, p.base_offset)
                continue
            too_large = code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE)
            if too_large and b.builder.count > 1 and not self._stopping:  # (stopped: nothing more is sent)
                self._split(b)  # as Kafka's client: resend in smaller batches, so only the big record fails
                continue
            err = ErrorCode(code) if code in ErrorCode._value2member_map_ else None
            message = f"{b.topic}-{b.partition}: {err.name if err else code}"
            if p.error_message:
                message += f" ({p.error_message})"
            if err in _MAYBE_APPENDED:
                b.maybe_appended = True
            if err is not None and (err.retriable or err == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER):
                self._retry(b, ProduceError(message, code), refresh=err != ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
            else:
                self._fail(b, ProduceError(message, code), not_appended=True)

    def _retry(self, b: _Batch, exc: BaseException, *, refresh: bool) -> None:
        b.last_error = str(exc).removeprefix(f"{b.topic}-{b.partition}: ")
        if not self._stopping and time.monotonic() > b.deadline:  # as the ready queue's expiry says it
            self._fail(b, ProduceError(f"{b.topic}-{b.partition}: not delivered within delivery.timeout.ms "
                                       f"(last error: {b.last_error})", getattr(exc, "code", -1)))  # fmt: skip
            return
        if self._stopping or b.attempts > self.config.retries:
            self._fail(b, exc if isinstance(exc, ProduceError) else ProduceError(str(exc)))
            return
        code = getattr(exc, "code", -1)
        cause = ErrorCode(code).name if code in ErrorCode._value2member_map_ and code > 0 else "an unreachable broker"
        self.stats.retries[cause] = self.stats.retries.get(cause, 0) + 1
        if cause not in self._noticed:
            cfg = self.config
            self._notice(cause, f"{b.topic}-{b.partition}: {b.last_error}: retrying every {cfg.retry_backoff_ms} ms "
                                f"for up to {cfg.delivery_timeout_ms / 1000:g} s (delivery.timeout.ms)")  # fmt: skip
        if refresh:
            self._refresh_needed = True
        b.retry_at = time.monotonic() + self.config.retry_backoff_ms / 1000
        if b.sequence >= 0:
            if not b.resending:
                b.resending = True
                self.resending[b.tp] = self.resending.get(b.tp, 0) + 1
            self.backing_off[b.tp] = self.backing_off.get(b.tp, 0) + 1
        self.retrying.append(b)
        self._wake.set()

    def _notice(self, cause: str, text: str) -> None:
        """Tell the listener of `cause` once."""
        self._noticed.add(cause)
        if self._on_notice is not None:
            self._on_notice(text)

    def _throttled(self, node: int, throttle_ms: int) -> None:
        """Broker `node` throttled this client (a quota): nothing more goes to it for that long, as it reads
        nothing more meanwhile (KIP-219); counted, and told once."""
        self.stats.throttled += 1
        self.stats.throttle_ms += throttle_ms
        self.throttled_until[node] = max(self.throttled_until.get(node, 0.0), time.monotonic() + throttle_ms / 1000)
        if "throttle" not in self._noticed:
            self._notice("throttle", f"broker {node} throttled this client for {throttle_ms} ms (a client quota): "
                                     "sends to it wait out each throttle")  # fmt: skip

    def _leaderless(self, tps: list[tuple[str, int]], now: float) -> None:
        """Queued partitions without a leader (`tps`, maybe none): the time waited is counted, the first wait told."""
        if not tps:
            if self._leaderless_since is not None:
                self.stats.leader_wait_s += now - self._leaderless_since
                self._leaderless_since = None
            return
        if self._leaderless_since is None:
            self._leaderless_since = now
        if "leader" not in self._noticed:
            names = ", ".join(f"{t}-{p}" for t, p in tps[:3]) + (f" and {len(tps) - 3} more" if len(tps) > 3 else "")
            self._notice("leader", f"{names}: no leader (its broker is down, or an election is under way): waiting "
                                   f"for one for up to {self.config.delivery_timeout_ms / 1000:g} s "
                                   "(delivery.timeout.ms); other partitions go on")  # fmt: skip

    def stop(self, reason: str = "interrupted") -> int:
        """Send nothing more: every message not in a request in flight fails now (`unknown` if an earlier attempt
        of it went unanswered), later sends fail, and answers to requests in flight are still taken (then
        `flush` ends within request.timeout.ms). Returns the records still in flight."""
        self._stopping = True
        waiting = [*self.open.values(), *(b for q in self.ready.values() for b in q), *self.retrying]
        self.open.clear()
        self.ready.clear()
        self.retrying = []
        for b in waiting:  # (the others are in requests in flight, or split batches that end when their halves do)
            if not b.done():
                self._fail(b, ProduceError(f"{b.topic}-{b.partition}: not sent ({reason})"), not_appended=True)
        self._room.set()
        self._wake.set()
        return sum(b.builder.count for b in self.unfinished if b.results is None and b.builder is not None)

    def _split(self, b: _Batch) -> None:
        """Replace a batch the broker found too large by its two halves, sent first, one request at a
        time; a half still too large is halved again, so only an oversized record itself fails, in
        about log2(n) rounds, and the partition's order is kept."""
        records = decode_records(b.builder.build(), 0)
        b.results = [None] * len(records)
        b.waiting = len(records)
        tp = b.tp
        self.splitting[tp] = self.splitting.get(tp, 0) + 1
        if b.sequence >= 0:
            self._rewind(b)
        middle = len(records) // 2
        stamp = [h for h in records[0].headers if h[0] == HOST_HEADER]  # an audited batch's: each half has it
        children = []
        for first, part in ((0, records[:middle]), (middle, records[middle:])):
            child = _Batch(b.tp, self.codec, b.deadline, time.monotonic())
            for i, r in enumerate(part):
                headers = (*r.headers, *stamp) if i == 0 and first and stamp else r.headers
                child.builder.append(r.timestamp, r.key, r.value, headers)
            child.parent = (b, first)
            self.unfinished[child] = None
            children.append(child)
        for child in reversed(children):
            self._queue(child, front=True)
        self._wake.set()

    def _child_done(self, child: _Batch, outcome: Any, count: int) -> None:
        """Record a split-off batch's outcome (a base offset, an error, or its own halves' results) for
        each of its `count` records in its parent; the parent is done when all of its records are."""
        parent, first = child.parent  # type: ignore[misc]
        assert parent.results is not None
        for i in range(count):
            if isinstance(outcome, list):
                parent.results[first + i] = outcome[i]
            else:
                parent.results[first + i] = outcome if isinstance(outcome, BaseException) else outcome + i
        parent.waiting -= count
        if parent.waiting == 0:
            self.splitting[parent.tp] -= 1
            if parent.parent is not None:
                self._child_done(parent, parent.results, len(parent.results))
            else:
                parent.resolve(parent.results)
            self._finish(parent)

    def _complete(self, b: _Batch, base_offset: int) -> None:
        self.stats.acked += b.builder.count
        if b.parent is not None:
            self._child_done(b, base_offset, b.builder.count)
        else:
            b.resolve(base_offset)
        self._finish(b)

    def _fail(self, b: _Batch, exc: BaseException, *, not_appended: bool = False) -> None:
        """`b` failed; `not_appended`: the broker said so (an error answer), else it may have been appended."""
        if b.maybe_appended and not getattr(exc, "unknown", False):  # (said in the error: a resend may duplicate)
            exc = ProduceError(f"{exc} (unanswered before: it may have been appended)", getattr(exc, "code", -1),
                               unknown=True)  # fmt: skip
        if b.builder is not None:
            self.stats.failed += b.builder.count
            if getattr(exc, "unknown", False):
                self.stats.unknown += b.builder.count
        if b.parent is not None:
            self._child_done(b, exc, b.builder.count)
        else:
            b.resolve(exc)
        if b.sequence >= 0:
            if not_appended or not b.attempts:
                self._rewind(b)
            else:
                self._new_identity = True
        self._finish(b)

    def _expire_stuck(self) -> None:
        """A broker with requests in flight that answered nothing for request.timeout.ms (paused, or cut off):
        its connection is failed, so its requests are retried, with fresh metadata, as Kafka's client does."""
        now = time.monotonic()
        limit = self.config.request_timeout_ms / 1000
        for node, n in self.in_flight.items():
            if n and now - self.progress_at.get(node, now) > limit:
                self.progress_at[node] = now
                conn = self.cluster.open_connection(node)
                if conn is not None:
                    conn._fail(ProtocolError(f"no answer from broker {node} within request.timeout.ms"))

    async def _renew_identity(self) -> None:
        """After an idempotent batch failed without knowing whether the broker appended it (it expired after
        an attempt): a new producer id, and the queued batches take sequences under it. Reusing the failed
        batch's sequences instead could make a later batch pass for a duplicate of it, acknowledged but never
        stored; a sequence after them would be out of order for good (as Kafka's producer bumps its epoch)."""
        try:
            conn = await self.cluster.any_connection()
            answer = await conn.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None,
                                                                   "transaction_timeout_ms": 60000})  # fmt: skip
        except KafkactlError:
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)  # (the send loop asks again)
            return
        if answer["error_code"]:
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
            return
        self._new_identity = False
        self.producer_id, self.producer_epoch = answer["producer_id"], answer["producer_epoch"]
        self.sequences.clear()
        for b in self.unfinished:
            if b.sequence >= 0:
                b.sequence, b.data = -1, None

    def _rewind(self, b: _Batch) -> None:
        """`b`'s sequences were never appended: later batches of its partition take them over."""
        tp = b.tp
        self.sequences[tp] = b.sequence
        b.sequence = -1
        for x in self.unfinished:
            if x is not b and (x.topic, x.partition) == tp and x.data is not None:
                x.data = None  # rebuilt with new sequences when (re)sent, in order

    def _finish(self, b: _Batch) -> None:
        if b.resending:
            b.resending = False
            self.resending[b.tp] -= 1
        self.unfinished.pop(b, None)
        self.buffered -= b.size
        b.size = 0
        b.builder = None  # type: ignore[assignment]
        b.data = None
        self._room.set()
