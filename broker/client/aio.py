"""The asyncio core of kafkactl's clients: pipelined connections and the cluster's metadata.

`AsyncConnection` keeps many requests in flight on one socket; answers come back in request order
(Kafka's guarantee per connection), so a FIFO of pending futures matches them, checked by
correlation id. `AsyncCluster` knows the brokers and each partition's leader, refreshes on demand
(errors, leader changes) and holds one connection per broker.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import re
import ssl
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from broker.client.connection import ProtocolError, TlsLost, common_version, parse_bootstrap
from broker.client.security import ClientSecurity, SaslExchange, SecurityError, closed_hint, tls_failed
from broker.client.security import default as default_security
from broker.errors import KafkactlError
from broker.protocol.api import APIS, ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import encode_request, read_response_body
from broker.protocol.messages.produce import RUN_CODEC, read_produce_response
from broker.protocol.primitives import I32, DecodeError, Reader

_CANNOT_CONNECT = re.compile(r"^cannot connect to broker \S+: ")
_REQUEST_HEAD = struct.Struct(">ihhi")  # frame size, api key, api version, correlation id
_READ_CHUNK = 256 * 1024  # the receive buffer; a bigger answer gets a buffer of its own
_MIN_READ = 64 * 1024  # a receive into less room than this first moves the partial frame to the front

#: called with (decoded answer, None) or (None, the connection's error) instead of a future
AnswerSink = Callable[[Any, BaseException | None], None]

#: a run's answers: (index of the first request answered, base offsets of a run of no-error answers or None,
#: the decoded answer of one request or None, None or the connection's error for every request left)
RunSink = Callable[[int, "list[int] | None", Any, BaseException | None], None]

_scan_answers = RUN_CODEC.scan_answers if RUN_CODEC is not None else None  # else each answer is decoded alone


class PendingRun:
    """`count` pipelined one-partition Produce requests with consecutive correlation ids, answered
    through one sink: the answers that say "no error" are read a run at a time (`scan_answers`)."""

    __slots__ = ("cid", "left", "index", "version", "topic", "partition", "sink")

    def __init__(self, cid: int, count: int, version: int, topic: bytes, partition: int, sink: RunSink) -> None:
        self.cid, self.left, self.index = cid, count, 0
        self.version, self.topic, self.partition, self.sink = version, topic, partition, sink


class AsyncConnection:
    """One broker connection with pipelined requests."""

    def __init__(self, host: str, port: int, client_id: str, timeout: float) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self.timeout = timeout
        self.versions: dict[int, tuple[int, int]] = {}
        self._chosen: dict[int, int] = {}  # api key → the version version_for chose
        self._ids = itertools.count(1)
        self._pending: collections.deque[tuple[int, int, Any, int, asyncio.Future]] = collections.deque()
        self._wire: _Wire | None = None  # the socket, once connected
        self._out: list[Any] = []  # frames written this loop tick, sent together by _flush
        self._flush_handle: asyncio.Handle | None = None
        cid_bytes = client_id.encode()
        self.client_id_field = struct.pack(">h", len(cid_bytes)) + cid_bytes  # as a request header holds it
        self.closed = False
        self.security: ClientSecurity = default_security()
        self._opened_cid = 0  # the last correlation id `open` used (ApiVersions, SASL)

    @classmethod
    async def open(cls, host: str, port: int, *, client_id: str = "kafkactl", timeout: float = 30.0,
                   security: ClientSecurity | None = None) -> AsyncConnection:  # fmt: skip
        """Connect (TLS when `security` says so; None: the process default), learn the broker's API versions
        and authenticate (SASL) before handing the connection out."""
        sec = security if security is not None else default_security()
        conn = cls(host, port, client_id, timeout)
        conn.security = sec
        loop = asyncio.get_running_loop()
        where = f"{host}:{port}"
        tls = {"ssl": sec.ssl_context(), "server_hostname": host, "ssl_handshake_timeout": timeout} if sec.tls else {}
        try:
            _, conn._wire = await asyncio.wait_for(loop.create_connection(lambda: _Wire(conn), host, port, **tls),
                                                   timeout)  # fmt: skip
        except ssl.SSLError as exc:
            raise tls_failed(where, exc) from None
        except (OSError, TimeoutError) as exc:
            if sec.tls and isinstance(exc, ConnectionResetError | BrokenPipeError):  # hung up on during the handshake
                raise tls_failed(where, exc) from None
            raise KafkactlError(f"cannot connect to broker {where}: {getattr(exc, 'strerror', None) or exc}") from None
        try:
            answer = await conn.request(ApiKey.API_VERSIONS, {}, version=2)
            if answer["error_code"]:
                answer = await conn.request(ApiKey.API_VERSIONS, {}, version=0)
            conn.versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]}
            conn._chosen.clear()
            if sec.sasl:
                await conn._authenticate(sec)
            conn._opened_cid = next(conn._ids)  # (an id skipped: the next request's is this one + 1)
        except BaseException:
            conn._fail(ProtocolError(f"connection to {where} given up"))
            raise
        return conn

    async def _authenticate(self, sec: ClientSecurity) -> None:
        """SaslHandshake v1, then SaslAuthenticate v1 round trips until the mechanism is done."""
        exchange = SaslExchange(sec, f"{self.host}:{self.port}")
        exchange.check_handshake(await self.request(ApiKey.SASL_HANDSHAKE, {"mechanism": sec.mechanism}, version=1))
        token: bytes | None = exchange.first()
        while token is not None:
            answer = await self.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": token}, version=1)
            # (SCRAM's PBKDF2 takes milliseconds at the iterations the broker picks: off this event loop)
            token = await asyncio.to_thread(exchange.next, exchange.check_authenticate(answer))

    def version_for(self, api_key: int) -> int:
        v = self._chosen.get(api_key)
        if v is None:
            v = self._chosen[api_key] = common_version(api_key, self.versions, f"{self.host}:{self.port}")
        return v

    def send(self, api_key: int, body: dict[str, Any], version: int | None = None, *,
             expect_response: bool = True) -> asyncio.Future | None:  # fmt: skip
        """Write a request (this loop tick); returns the future of its decoded answer (None when none is due)."""
        if self.closed or self._wire is None:
            raise ProtocolError(f"connection to {self.host}:{self.port} is closed")
        v = self.version_for(api_key) if version is None else version
        cid = next(self._ids) & 0x7FFFFFFF
        parts = encode_request(api_key, v, cid, self.client_id, APIS[api_key].request, body)
        decode = partial(read_response_body, APIS[api_key].response)
        return self._enqueue(parts, api_key, cid, decode, v, expect_response)

    def send_encoded(self, api_key: int, version: int, body: list[Any], decode: Callable[[Reader, int], Any], *,
                     expect_response: bool = True,
                     on_answer: AnswerSink | None = None) -> asyncio.Future | None:  # fmt: skip
        """`send` of a body a hot path encoded itself; `decode(reader, version)` reads the answer. With
        `on_answer`, no future is made: the read loop calls `on_answer(answer, None)` (or `(None, error)`)."""
        cid, head = self.request_head(api_key, version, sum(map(len, body)))  # a client's parts are bytes
        if on_answer is not None or not expect_response:
            self.send_frame([head, *body], cid, api_key, version, decode, on_answer)
            return None
        return self._enqueue([head, *body], api_key, cid, decode, version, expect_response)

    def request_head(self, api_key: int, version: int, body_size: int) -> tuple[int, bytes]:
        """A correlation id, and the head of a request frame with a body of `body_size` bytes (size, API key,
        version, that id, client id), for a hot path that frames a request itself (`send_frame`)."""
        if self.closed or self._wire is None:
            raise ProtocolError(f"connection to {self.host}:{self.port} is closed")
        cid = next(self._ids) & 0x7FFFFFFF
        client = self.client_id_field
        return cid, _REQUEST_HEAD.pack(8 + len(client) + body_size, api_key, version, cid) + client

    def send_frame(self, parts: list[Any], cid: int, api_key: int, version: int, decode: Callable[[Reader, int], Any],
                   on_answer: AnswerSink | None) -> None:  # fmt: skip
        """Queue a request framed with `request_head` (before any other request is sent) for this tick's
        write; `on_answer` as in `send_encoded`, None when no answer is due."""
        if on_answer is not None:
            self._pending.append((cid, api_key, decode, version, on_answer))
        self._out += parts
        if self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)

    def send_run(self, data: bytes, first_cid: int, count: int, version: int, topic: str, partition: int,
                 sink: RunSink) -> None:  # fmt: skip
        """Queue `count` one-partition Produce requests framed together in `data` (ids from `first_cid`,
        taken with `take_ids`) for this tick's write; their answers go to `sink` (see `RunSink`)."""
        if self.closed or self._wire is None:
            raise ProtocolError(f"connection to {self.host}:{self.port} is closed")
        self._pending.append(PendingRun(first_cid, count, version, topic.encode(), partition, sink))
        self._out.append(data)
        if self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)

    def take_ids(self, count: int) -> int:
        """`count` consecutive correlation ids for `send_run`; returns the first (they wrap at 2**31)."""
        if self.closed or self._wire is None:
            raise ProtocolError(f"connection to {self.host}:{self.port} is closed")
        first = next(self._ids)
        if count > 1:
            self._ids = itertools.count(first + count)
        return first & 0x7FFFFFFF

    def _enqueue(self, parts: list[Any], api_key: int, cid: int, decode: Callable[[Reader, int], Any], version: int,
                 expect_response: bool) -> asyncio.Future | None:  # fmt: skip
        """Queue a frame for this tick's single write: pipelined requests cost one syscall, not one each.
        The parts are sent by reference, so a caller must not change them before the tick ends."""
        fut = None
        loop = asyncio.get_running_loop()
        if expect_response:
            fut = loop.create_future()
            self._pending.append((cid, api_key, decode, version, fut))
        self._out += parts
        if self._flush_handle is None:
            self._flush_handle = loop.call_soon(self._flush)
        return fut

    def _flush(self) -> None:
        self._flush_handle = None
        out, self._out = self._out, []
        if out and self._wire is not None and not self.closed:
            self._wire.transport.write(b"".join(out))

    def _flush_now(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush()

    async def request(self, api_key: int, body: dict[str, Any], version: int | None = None, *,
                      timeout: float | None = None) -> dict[str, Any]:  # fmt: skip
        """The answer to one request; no answer within `timeout` (default the connection's) fails the connection."""
        fut = self.send(api_key, body, version)
        assert fut is not None
        limit = self.timeout if timeout is None else timeout
        try:
            return await asyncio.wait_for(asyncio.shield(fut), limit)
        except TimeoutError:
            self._fail(ProtocolError(f"no answer from {self.host}:{self.port} within {limit:g}s"))
            raise ProtocolError(f"no answer from {self.host}:{self.port} within {limit:g}s") from None

    async def drain(self) -> None:
        """Wait until the socket buffer has room (back-pressure for pipelined senders) or the connection is gone."""
        if self._wire is not None:
            self._flush_now()
            await self._wire.drain()

    def _answer(self, frame: memoryview) -> None:
        """Match one answer frame to the oldest pending request, decode it and hand it over. A frame that
        does not match or decode raises with its request still pending, so `_fail` answers it too."""
        if not self._pending:
            raise ProtocolError(f"unexpected answer from {self.host}:{self.port}")
        head = self._pending[0]
        run = head if head.__class__ is PendingRun else None
        if run is not None:  # one answer of a run that is not a plain "no error"
            cid, api_key, decode, version = run.cid, ApiKey.PRODUCE, read_produce_response, run.version
        else:
            cid, api_key, decode, version, sink = head
        if len(frame) < 4:
            raise ProtocolError(f"an answer of {len(frame)} bytes from {self.host}:{self.port}")
        got = I32.unpack_from(frame)[0]
        if got != cid:
            raise ProtocolError(f"answer {got} from {self.host}:{self.port} while waiting for {cid}")
        try:
            body = decode(Reader(frame, 4), version)
        except DecodeError as exc:
            raise ProtocolError(f"unreadable {ApiKey(api_key).name} answer: {exc}") from None
        if run is not None:
            index = run.index
            run.cid, run.left, run.index = (cid + 1) & 0x7FFFFFFF, run.left - 1, index + 1
            if not run.left:
                self._pending.popleft()
            run.sink(index, None, body, None)
            return
        self._pending.popleft()
        if isinstance(sink, asyncio.Future):
            if not sink.done():
                sink.set_result(body)
        else:
            sink(body, None)

    def _fail(self, exc: Exception) -> None:
        self.closed = True
        while self._pending:
            entry = self._pending.popleft()
            if entry.__class__ is PendingRun:
                with contextlib.suppress(Exception):
                    entry.sink(entry.index, None, None, exc)
                continue
            *_, sink = entry
            if not isinstance(sink, asyncio.Future):
                with contextlib.suppress(Exception):  # one broken consumer of answers must not keep the rest waiting
                    sink(None, exc)
            elif not sink.done():
                sink.set_exception(exc)
                sink.exception()  # whoever awaits it still gets the error; nobody waiting is no warning
        if self._wire is not None:
            self._wire.transport.close()

    async def close(self, flush_s: float = 2.0) -> None:
        """Close after what was sent goes out, or at once after `flush_s` (a peer that does not read)."""
        self._flush_now()  # what was sent before close still goes out
        self.closed = True
        if self._wire is not None:
            self._wire.transport.close()
            try:
                await asyncio.wait_for(asyncio.shield(self._wire.lost), flush_s)
            except TimeoutError:
                self._wire.transport.abort()
            except Exception:
                pass


class _Wire(asyncio.BufferedProtocol):
    """The socket under an AsyncConnection. Answers are received straight into a reused buffer and
    every whole frame there is handed out (copied out: the buffer is reused), and the plain answers
    of a run are read in place; a frame too big for the buffer is received straight into a buffer of
    its own, which is handed out as it is. Writes are the transport's, with its flow control."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set by connection_made
        self.buf = bytearray(_READ_CHUNK)
        self.start = self.end = 0  # the received bytes not handed out yet: buf[start:end]
        self.big: bytearray | None = None  # a frame bigger than buf, and how much of it is here
        self.big_got = 0
        self.paused = False
        self.waiters: list[asyncio.Future] = []
        self.lost: asyncio.Future = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.big is not None:
            return memoryview(self.big)[self.big_got :]
        if self.start and len(self.buf) - self.end < _MIN_READ:  # little room after the partial frame: to the front
            left = self.end - self.start
            self.buf[:left] = memoryview(self.buf)[self.start : self.end]
            self.start, self.end = 0, left
        return memoryview(self.buf)[self.end :]

    def buffer_updated(self, nbytes: int) -> None:
        conn = self.conn
        try:
            if self.big is not None:
                self.big_got += nbytes
                if self.big_got == len(self.big):
                    frame, self.big = self.big, None
                    conn._answer(memoryview(frame)[4:])
                return
            self.end += nbytes
            self._hand_out()
        except ProtocolError as exc:
            conn._fail(exc)
        except Exception as exc:  # a bug in a decoder or an answer's consumer: nobody may wait forever
            conn._fail(ProtocolError(f"reading answers from {conn.host}:{conn.port} failed: {exc!r}"))
            raise

    def _hand_out(self) -> None:
        conn, buf, pos, end = self.conn, self.buf, self.start, self.end
        pending = conn._pending
        while end - pos >= 4:
            head = pending[0] if pending else None
            if head.__class__ is PendingRun and _scan_answers is not None:
                pos, offsets = _scan_answers(buf, pos, end, head.cid, head.left, head.version, head.topic,
                                             head.partition)  # fmt: skip
                if offsets:
                    k = len(offsets)
                    index = head.index
                    head.cid, head.left, head.index = (head.cid + k) & 0x7FFFFFFF, head.left - k, index + k
                    if not head.left:
                        pending.popleft()
                    head.sink(index, offsets, None, None)
                    continue
            size = I32.unpack_from(buf, pos)[0]
            if size < 0:
                raise ProtocolError(f"an answer of size {size} from {conn.host}:{conn.port}")
            frame_end = pos + 4 + size
            if frame_end > end:
                if 4 + size > len(buf):  # the rest of it straight into its own buffer
                    big = bytearray(4 + size)
                    big[: end - pos] = memoryview(buf)[pos:end]
                    self.big, self.big_got = big, end - pos
                    pos = end
                break
            conn._answer(memoryview(bytes(memoryview(buf)[pos + 4 : frame_end])))  # a copy: buf is reused
            pos = frame_end
        if pos == end:
            self.start = self.end = 0
        else:
            self.start = pos

    def eof_received(self) -> bool:
        return False  # the transport closes: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        conn = self.conn
        if isinstance(exc, ssl.SSLError):  # e.g. TLS 1.3: a client certificate refused after the handshake
            conn._fail(TlsLost(str(tls_failed(f"{conn.host}:{conn.port}", exc))))
        else:
            early = False  # while connecting or at the first request after: maybe a listener that wants TLS or SASL
            if conn._pending:
                head = conn._pending[0]
                early = (head.cid if head.__class__ is PendingRun else head[0]) <= conn._opened_cid + 1
            hint = closed_hint(conn.security, early)
            conn._fail(ProtocolError(f"broker {conn.host}:{conn.port} closed the connection{hint}"))
        self.resume_writing()  # nothing left to wait for: the next write finds the connection closed
        if not self.lost.done():
            self.lost.set_result(None)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        for w in self.waiters:
            if not w.done():
                w.set_result(None)
        self.waiters.clear()

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark again, or the connection is
        gone: what was written is lost either way, and the next request on it fails on its own."""
        if self.paused and not self.lost.done():
            fut = asyncio.get_running_loop().create_future()
            self.waiters.append(fut)
            await fut


@dataclass
class PartitionMeta:
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    error: int = 0
    offline_replicas: list[int] = field(default_factory=list)

    @property
    def offline(self) -> bool:
        """No leader because every replica's broker is down (not a leader election still under way):
        nothing to wait for until one of those brokers is back."""
        return self.leader < 0 and bool(self.replicas) and set(self.replicas) <= set(self.offline_replicas)


@dataclass
class TopicMeta:
    error: int
    partitions: dict[int, PartitionMeta] = field(default_factory=dict)


def describe_tps(tps: list[tuple[str, int]]) -> str:
    """`orders[2,5]` (topic by topic, joined by `, `): partitions in a one-line note."""
    by_topic: dict[str, list[int]] = collections.defaultdict(list)
    for t, p in sorted(set(tps)):
        by_topic[t].append(p)
    return ", ".join(f"{t}[{','.join(map(str, ps))}]" for t, ps in by_topic.items())


@dataclass
class Unreachable:
    """A broker a client could not reach (connection refused, reset, no answer in time), and when to try it again."""

    error: str
    since: float
    next_try: float
    delay: float = 0.25

    def backoff(self, now: float, cap: float = 2.0) -> None:
        self.delay = min(self.delay * 2, cap)
        self.next_try = now + self.delay


_default_wait_report: list[Callable[[str], None] | None] = [None]


def set_wait_report(report: Callable[[str], None] | None) -> None:
    """The process default for `LeaderWaits.report` (the CLI sets one that writes a note on stderr)."""
    _default_wait_report[0] = report


class LeaderWaits:
    """Partitions a client waits on for a reachable leader, told once when they start waiting and once when
    they have one again (`report` gets each line; None: the process default, `set_wait_report`, if any).
    `doing` names what resumes ("reading", "sending")."""

    def __init__(self, report: Callable[[str], None] | None = None, doing: str = "reading") -> None:
        self.report = report
        self.doing = doing
        self._since: dict[tuple[str, int], float] = {}

    @property
    def waiting(self) -> list[tuple[str, int]]:
        return sorted(self._since)

    def start(self, tps: list[tuple[str, int]], why: str) -> None:
        """`tps` wait (because `why`, e.g. "broker 2 unreachable"); only the ones not yet waiting are told."""
        now = time.monotonic()
        new = [tp for tp in dict.fromkeys(tps) if tp not in self._since]
        for tp in new:
            self._since[tp] = now
        report = self.report or _default_wait_report[0]
        if new and report is not None:
            report(f"waiting for a leader of {describe_tps(new)} ({why}) …")

    def settle(self, cluster: AsyncCluster) -> None:
        """Tell which waiting partitions have a reachable leader again."""
        back = [tp for tp in self._since if cluster.reachable_leader(*tp) >= 0]
        if not back:
            return
        now = time.monotonic()
        waited = max(now - self._since.pop(tp) for tp in back)
        report = self.report or _default_wait_report[0]
        if report is not None:
            nodes = sorted({cluster.leader(*tp) for tp in back})
            led = f"broker{'s' if len(nodes) > 1 else ''} {', '.join(map(str, nodes))}"
            report(f"{describe_tps(back)}: a leader again ({led}) after {waited:.1f}s; {self.doing} on")

    def waited_s(self, tps: list[tuple[str, int]]) -> float:
        """How long the longest waiting of `tps` has waited (0: none waits)."""
        now = time.monotonic()
        return max((now - self._since[tp] for tp in tps if tp in self._since), default=0.0)


class AsyncCluster:
    """Brokers, topic partitions and leaders, and one connection per broker."""

    def __init__(self, bootstrap: str, *, client_id: str = "kafkactl", timeout: float = 30.0,
                 security: ClientSecurity | None = None) -> None:  # fmt: skip
        self.bootstrap = parse_bootstrap(bootstrap)
        self.client_id, self.timeout = client_id, timeout
        self.security = security if security is not None else default_security()  # (fixed when it is made)
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, TopicMeta] = {}
        self.cluster_id: str | None = None
        self._conns: dict[int, AsyncConnection] = {}
        self._bootstrap_conn: AsyncConnection | None = None
        self._refreshing: asyncio.Future | None = None
        self.last_refresh = 0.0
        #: brokers found unreachable (`mark_unreachable`): the partitions they lead count as leaderless (see
        #: `reachable_leader`) until a probe connects again or the metadata names another leader
        self.unreachable: dict[int, Unreachable] = {}
        self._probes: dict[int, asyncio.Task] = {}
        self.waits = LeaderWaits()

    async def any_connection(self) -> AsyncConnection:
        """A connection to any broker: an open one, or a new one to the first bootstrap server that answers."""
        for conn in list(self._conns.values()):
            if not conn.closed:
                return conn
        if self._bootstrap_conn is not None and not self._bootstrap_conn.closed:
            return self._bootstrap_conn
        errors = []
        for host, port in self.bootstrap:
            try:
                self._bootstrap_conn = await AsyncConnection.open(host, port, client_id=self.client_id,
                                                                  timeout=self.timeout,
                                                                  security=self.security)  # fmt: skip
                return self._bootstrap_conn
            except SecurityError:
                raise  # a wrong password or an untrusted certificate is so on every broker: said as it is
            except KafkactlError as exc:
                errors.append(str(exc))
        raise KafkactlError(f"no bootstrap server answered ({'; '.join(errors)})")

    async def refresh(self, topics: list[str] | None = None, *, allow_create: bool = False) -> dict[str, Any]:
        """Fetch metadata (for `topics`, or all of them) and remember it."""
        conn = await self.any_connection()
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": allow_create}  # fmt: skip
        try:
            answer = await conn.request(ApiKey.METADATA, body)
        except ProtocolError:
            await conn.close()
            conn = await self.any_connection()
            answer = await conn.request(ApiKey.METADATA, body)
        self.brokers = {b["node_id"]: (b["host"], b["port"]) for b in answer["brokers"]}
        self.cluster_id = answer.get("cluster_id")
        for t in answer["topics"]:
            meta = TopicMeta(t["error_code"])
            for p in t["partitions"]:
                meta.partitions[p["partition_index"]] = PartitionMeta(
                    p["leader_id"],
                    p.get("leader_epoch", -1),
                    p["replica_nodes"],
                    p["isr_nodes"],
                    p["error_code"],
                    p.get("offline_replicas") or [],
                )
            self.topics[t["name"]] = meta
        self.last_refresh = time.monotonic()
        self._probe_due()
        self.waits.settle(self)
        return answer

    async def topic(self, name: str, *, allow_create: bool = False, wait_s: float = 10.0) -> TopicMeta:
        """A topic's metadata, waiting out a just-created topic's missing leaders (not those of partitions
        whose brokers are all down: those are `offline` at once, and callers read or write the others)."""
        deadline = time.monotonic() + wait_s
        while True:
            meta = self.topics.get(name)
            if meta is not None and meta.error == 0 and meta.partitions and all(
                p.leader >= 0 for p in meta.partitions.values()
            ):  # fmt: skip
                return meta
            await self.refresh([name], allow_create=allow_create)
            meta = self.topics[name]
            unknown = meta.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and not allow_create
            fatal = meta.error not in (0, ErrorCode.LEADER_NOT_AVAILABLE) and not ErrorCode(meta.error).retriable
            if unknown or fatal:
                raise KafkactlError(f"topic {name!r}: {ErrorCode(meta.error).name}")
            if meta.error in (0, ErrorCode.LEADER_NOT_AVAILABLE) and meta.partitions and all(
                p.leader >= 0 or p.offline for p in meta.partitions.values()
            ):  # fmt: skip
                return meta
            if time.monotonic() > deadline:
                if meta.error:
                    raise KafkactlError(f"topic {name!r}: {ErrorCode(meta.error).name}")
                return meta
            await asyncio.sleep(0.1)

    def leader(self, topic: str, partition: int) -> int:
        meta = self.topics.get(topic)
        p = meta.partitions.get(partition) if meta else None
        return -1 if p is None else p.leader

    def reachable_leader(self, topic: str, partition: int) -> int:
        """The partition's leader, or -1 when there is none or its broker was found unreachable."""
        node = self.leader(topic, partition)
        return -1 if node in self.unreachable else node

    def leaderless(self, tps: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """Those of `tps` with no leader in the metadata held (their brokers down, or an election under way),
        or whose leader was found unreachable (`mark_unreachable`) and is not back yet."""
        return [tp for tp in tps if self.reachable_leader(*tp) < 0]

    def offline(self, tp: tuple[str, int]) -> bool:
        """No leader because every replica's broker is down (nothing to wait for: see PartitionMeta.offline)."""
        meta = self.topics.get(tp[0])
        p = meta.partitions.get(tp[1]) if meta else None
        return p is not None and p.offline

    def why_leaderless(self, tps: list[tuple[str, int]]) -> str:
        """Why `tps` have no reachable leader, in a few words: `broker 2 unreachable: Connect call failed`."""
        reasons: list[str] = []
        for tp in tps:
            node = self.leader(*tp)
            down = self.unreachable.get(node)
            why = (f"broker {node} unreachable: {down.error}" if down is not None
                   else "every replica's broker is down" if self.offline(tp) else "no leader elected yet")  # fmt: skip
            if why not in reasons:
                reasons.append(why)
        return "; ".join(reasons)

    def mark_unreachable(self, node_id: int, error: BaseException | str,
                         tps: list[tuple[str, int]] | None = None) -> None:  # fmt: skip
        """Note that `node_id` could not be reached (`error`): the partitions it leads are leaderless to
        `reachable_leader` until a probe (retried with backoff at each metadata refresh) connects again or
        the metadata names another leader. `tps`: the partitions that now wait on it (told once, see `waits`)."""
        text = _CANNOT_CONNECT.sub("", str(error))  # "cannot connect to broker H:P: why" → "why"
        if node_id not in self.unreachable:
            now = time.monotonic()
            self.unreachable[node_id] = Unreachable(text, now, now + 0.25)
        if tps:
            self.waits.start(tps, self.why_leaderless(tps))

    def _probe_due(self) -> None:
        """Try each unreachable broker whose backoff is over again, in the background (a refresh never waits on it)."""
        now = time.monotonic()
        for node, down in list(self.unreachable.items()):
            task = self._probes.get(node)
            if down.next_try <= now and (task is None or task.done()):
                down.backoff(now)
                self._probes[node] = asyncio.get_running_loop().create_task(self._probe(node))

    async def _probe(self, node_id: int) -> None:
        with contextlib.suppress(KafkactlError, OSError):
            await self.connection(node_id)  # clears the mark when it connects

    def open_connection(self, node_id: int) -> AsyncConnection | None:
        """The open connection to `node_id`, or None when `connection` would have to connect."""
        conn = self._conns.get(node_id)
        return conn if conn is not None and not conn.closed else None

    async def connection(self, node_id: int) -> AsyncConnection:
        conn = self._conns.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        if node_id not in self.brokers:
            await self.refresh([])
        if node_id not in self.brokers:
            raise KafkactlError(f"broker {node_id} is not in the cluster's metadata")
        host, port = self.brokers[node_id]
        conn = self._conns[node_id] = await AsyncConnection.open(host, port, client_id=self.client_id,
                                                                 timeout=self.timeout,
                                                                 security=self.security)  # fmt: skip
        if self.unreachable.pop(node_id, None) is not None:
            self.waits.settle(self)
        return conn

    async def close(self) -> None:
        for task in self._probes.values():
            task.cancel()
        for task in self._probes.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._probes.clear()
        for conn in list(self._conns.values()):
            await conn.close()
        if self._bootstrap_conn is not None:
            await self._bootstrap_conn.close()
        self._conns.clear()
