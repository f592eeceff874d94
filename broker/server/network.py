"""The broker's socket server: one asyncio loop, raw non-blocking sockets, one request at a time per connection.

Each connection reads a frame (int32 size + request), hands it to the dispatcher and writes the
answer before reading the next, so answers keep request order as Kafka's do. Answers are lists of
parts: all-bytes answers go out joined with one `send`, others with `sendmsg` for the bytes and
`sendfile` for the `FileRegion`s (segment file slices). A frame that cannot be framed or parsed
closes only its own connection, with one log line.

The hot path does not await: a frame already received is cut without a coroutine, a dispatcher may
answer synchronously (it returns an awaitable only when the request must wait), and the held answers
are sent with a plain `send` unless the socket is full. Handlers may leave work for `settle` (the
broker's deferred log appends): the server calls it before any answer leaves and before it waits for
anything, so every answer goes out after the work it reports, and none is pending while others run.

Idle connections are closed, as Kafka's `connections.max.idle.ms` closes them: one with no bytes
received or sent for that long (a silent client, or one that sent part of a frame and then nothing, or
one that stopped reading its answers), unless a request of it is being handled (a fetch waiting in
purgatory is not idle). A task checks every connection's last activity a few times per period.

A `Server` serves one listener. Each connection gets a `broker.security.session.Session` (the listener,
its protocol, the client's address), set as `current_session` in the connection's task, so handlers read
it without it travelling through every call. On a TLS listener a `TlsConnection` runs the bytes through
an `ssl.SSLObject` over memory buffers (asyncio's socket calls refuse an `SSLSocket`), after a handshake
bounded by `HANDSHAKE_TIMEOUT_S` and by the idle check; its answers are encrypted copies (file regions
read with `pread`: `sendfile` cannot encrypt), its flushes one at a time, and an orderly end sends close_notify.
A connection whose session must still authenticate (SASL) is never offered to the fast produce path: its
requests go through the dispatcher until it has, and its frames may not exceed `UNAUTHENTICATED_MAX_BYTES`
(a bigger size is refused before any memory is taken for it). The session's host is the client's address, an
IPv4 client of a dual-stack listener's by its IPv4 address (`client_host`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import errno
import functools
import ipaddress
import logging
import os
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from broker.errors import KafkactlError
from broker.protocol.api import ApiKey
from broker.protocol.primitives import I32
from broker.security.session import Session, current_session
from broker.server import tls as tlsmod
from broker.server.broker_logging import describe_exception
from broker.server.limits import BytePool, ConnectionLimits

log = logging.getLogger(__name__)

_CORK = getattr(socket, "TCP_CORK", None)
_REUSE = 4 << 20
_CHUNK = 64 * 1024
_HOLD = 32  # answers held back at most while more pipelined requests wait
_HEADER = struct.Struct(">hhi")  # a request header's api key, version and correlation id
HANDSHAKE_TIMEOUT_S = 10.0  # a TLS client that has not finished its handshake by then is closed
_TLS_CHUNK = 256 * 1024  # plaintext encrypted (and file bytes read) at a time on a TLS connection
#: the largest frame a connection may send before it has authenticated (SASL), as Kafka's 512 KiB: a client that
#: never logs in cannot make the broker hold socket.request.max.bytes for it
UNAUTHENTICATED_MAX_BYTES = 512 * 1024


def _nothing() -> None:
    pass


def client_host(ip: str) -> str:
    """A client's address as sessions (ACLs' hosts) and the per-IP connection limit name it: an IPv4 client of a
    dual-stack (`::`) listener comes as `::ffff:10.0.0.5`, which is `10.0.0.5`; any other address as given."""
    if ":" not in ip:
        return ip
    try:
        mapped = ipaddress.ip_address(ip).ipv4_mapped  # type: ignore[union-attr]
    except (ValueError, AttributeError):  # (not an address, or an IPv4 one)
        return ip
    return str(mapped) if mapped is not None else ip


class FileRegion(NamedTuple):
    """A slice of a file to send with `sendfile`; the server closes `fd` (a dup) once it is sent."""

    fd: int
    position: int
    length: int


class BadRequest(Exception):
    """A request that ends its connection (the message goes to the log)."""


class Later:
    """A dispatcher's answer that waits without holding up the connection's next requests (an acks=all
    produce, appended already, waiting for the followers): the requests after it are read and handled
    meanwhile, and the answers still leave in request order."""

    __slots__ = ("waiting",)

    def __init__(self, waiting: Awaitable[list[Any] | None]) -> None:
        self.waiting = waiting


#: the "host:port" of the client whose request is being handled (set once per connection task)
current_peer: contextvars.ContextVar[str] = contextvars.ContextVar("current_peer", default="")

#: (receive buffer, start, end) → (position after the requests it answered, how many, their answer frames or
#: None) for a run of requests handled together, or the count of requests to hand to `Dispatch` one by one
RunDispatch = Callable[[bytearray, int, int], "tuple[int, int, bytes | None] | int"]

#: (frame, peer) → the answer's parts, None when no answer is due (acks=0), or an awaitable of either
#: when the request has to wait (a coroutine function is a valid dispatcher: it always answers later)
Dispatch = Callable[[memoryview, str], "list[Any] | None | Awaitable[list[Any] | None]"]


class _FreeBuffers:
    """Receive buffers of `_CHUNK` bytes not in use, kept for the next connection that has bytes to read.

    An idle connection holds no receive buffer (thousands of idle clients would otherwise hold 64 KiB each):
    it takes one when its socket becomes readable and gives it back once no partial frame remains. At most
    `limit` are kept; the others are freed, so the memory of connections gone idle or closed is returned.
    """

    __slots__ = ("free", "limit")

    def __init__(self, limit: int) -> None:
        self.free: list[bytearray] = []
        self.limit = limit

    def take(self) -> bytearray:
        return self.free.pop() if self.free else bytearray(_CHUNK)

    def give(self, buf: bytearray) -> None:
        if len(self.free) < self.limit:
            self.free.append(buf)


_BUFFERS = _FreeBuffers(128)  # (8 MiB kept at most)


def _wake(fut: asyncio.Future) -> None:
    """A reader's or writer's callback: the waiting future done (once; the fd may be reported again meanwhile)."""
    if not fut.done():
        fut.set_result(None)


class Connection:
    """One client socket: buffered frame reads, vectored and zero-copy writes. While nothing of a frame is
    pending it holds no receive buffer (`_FreeBuffers`)."""

    __slots__ = ("sock", "peer", "max_request_bytes", "before_authentication", "loop", "_buf", "_view", "_start",
                 "_end", "_frame", "pool", "_held", "_big", "active", "busy", "expired", "_recv_into")  # fmt: skip

    def __init__(self, sock: socket.socket, peer: str, max_request_bytes: int, pool: BytePool | None = None) -> None:
        self.sock = sock
        self.peer = peer
        self.max_request_bytes = max_request_bytes  # UNAUTHENTICATED_MAX_BYTES at most until SASL authentication
        self.before_authentication = False  # (the frame size limit is then the pre-authentication one)
        self.loop = asyncio.get_running_loop()
        #: received bytes not yet framed (pipelined small requests arrive together); None while none are
        self._buf: bytearray | None = None
        self._view: memoryview | None = None
        self._start = self._end = 0  # the unframed bytes are _buf[_start:_end] (both 0 while _buf is None)
        self._frame = bytearray(0)  # reused for big frames up to _REUSE bytes: a fresh 1 MiB buffer costs page faults
        self.pool = pool  # the broker's budget for big frames being received
        self._held = 0  # bytes of it the current big frame holds (given back when the next frame is read)
        self._big = (0, 0)  # (received, size) of the big frame being received into its own buffer
        self.active = self.loop.time()  # when bytes last came or went (or a request was answered)
        self.busy = False  # a request of this connection is being handled (it is not idle meanwhile)
        self.expired: float | None = None  # set (idle seconds) when the idle check ends this connection
        #: receive into a buffer: the socket's own call here (no extra coroutine), TLS's in `TlsConnection`
        self._recv_into: Callable[[memoryview], Awaitable[int]] = functools.partial(self.loop.sock_recv_into, sock)

    def drop_buffer(self) -> None:
        """Give the receive buffer back if no unframed byte is in it. Only where the buffer may be reused anyway
        (before a wait: deferred work that may refer to it is settled by then)."""
        if self._buf is not None and self._start == self._end:
            _BUFFERS.give(self._buf)
            self._buf = self._view = None
            self._start = self._end = 0

    async def _readable(self) -> None:
        """Wait until the socket has bytes (or its end) to read."""
        fut = self.loop.create_future()
        fd = self.sock.fileno()
        self.loop.add_reader(fd, _wake, fut)
        try:
            await fut
        finally:
            self.loop.remove_reader(fd)

    def partial(self) -> tuple[int, int]:
        """(bytes received, size) of a request frame begun but not whole yet; (0, 0) when none is."""
        if self._big[1]:
            return self._big
        have = self._end - self._start
        if have <= 0:
            return 0, 0
        if have < 4:
            return have, 0
        return have, 4 + I32.unpack_from(self._buf, self._start)[0]

    def frame_ready(self) -> bool:
        """Whether a whole next frame is already received (its answer can then go out with this one's)."""
        have = self._end - self._start
        return have >= 4 and have - 4 >= I32.unpack_from(self._buf, self._start)[0]

    def next_frame(self) -> memoryview | None:
        """The next frame if it is already whole in the buffer and of a valid size, else None (then
        `read_frame` receives it, or raises for its size)."""
        pos = self._start
        have = self._end - pos - 4
        if have < 0:
            return None
        size = I32.unpack_from(self._buf, pos)[0]
        if size > have or size < 8 or size > self.max_request_bytes:
            return None
        self._start = pos + 4 + size
        return memoryview(self._buf[pos + 4 : pos + 4 + size])  # a copy: the buffer is reused

    def take_run(self, run: RunDispatch) -> tuple[int, bytes | None] | int:
        """Offer the received bytes to `run`: (how many requests it answered, their answer frames or None),
        those requests then consumed; or the count of the next requests that must go one by one."""
        if self._end - self._start <= 4:
            return 0
        got = run(self._buf, self._start, self._end)
        if got.__class__ is int:
            return got  # type: ignore[return-value]
        self._start, answered, answers = got  # type: ignore[misc]
        return answered, answers

    def release_memory(self) -> None:
        """Give the big frame's bytes back to the broker's budget."""
        if self._held and self.pool is not None:
            self.pool.release(self._held)
        self._held = 0

    async def _recv(self) -> bool:
        """Receive more into the buffer (moving what is left to its front first); False at end of stream."""
        if self._start == self._end:  # nothing of a frame here: wait holding no buffer
            self.drop_buffer()
            await self._readable()
            self._buf = _BUFFERS.take()
            self._view = memoryview(self._buf)
        elif self._start:
            left = self._end - self._start
            self._buf[:left] = self._view[self._start : self._end]  # type: ignore[index]
            self._start, self._end = 0, left
        n = await self._recv_into(self._view[self._end :])  # type: ignore[index]
        self._end += n
        self.active = self.loop.time()
        return n > 0

    async def read_frame(self) -> memoryview | None:
        """The next request frame (without its size), or None at a clean end of stream.

        Small frames are cut from what one recv brought; a big frame is received straight into its own
        buffer after the part already here, so its bytes are copied once, once the broker's budget for
        big frames has room for it (`queued.max.request.bytes`).
        """
        self.release_memory()  # the frame before this one has been handled
        while self._end - self._start < 4:
            if not await self._recv():
                left = self._end - self._start
                if left:
                    raise BadRequest(f"connection closed inside a frame size ({left} of 4 bytes)")
                return None
        pos = self._start
        size = I32.unpack_from(self._buf, pos)[0]
        if size < 8 or size > self.max_request_bytes:  # 8: the smallest request header
            if size >= 8 and self.before_authentication:  # (refused before any memory is taken for it)
                raise BadRequest(f"frame size {size} before SASL authentication: over the {self.max_request_bytes} "
                                 "bytes a client may send until it has authenticated")  # fmt: skip
            raise BadRequest(f"frame size {size} is outside [8, socket.request.max.bytes={self.max_request_bytes}]")
        have = self._end - pos - 4
        if have >= size:
            self._start = pos + 4 + size
            return memoryview(self._buf[pos + 4 : pos + 4 + size])  # a copy: the buffer is reused
        if size <= _CHUNK - 4:
            while self._end - self._start - 4 < size:
                if not await self._recv():
                    got = self._end - self._start - 4
                    raise BadRequest(f"connection closed inside a frame ({got} of {size} bytes)")
            return await self.read_frame()
        if self.pool is not None:
            self._big = (4 + have, 4 + size)
            self._held = await self.pool.acquire(4 + size)
        # One request is handled at a time per connection and nothing keeps a view of its frame after its
        # answer (appends copy the records into the log), so the next big frame may reuse the buffer.
        if size > _REUSE:
            view = memoryview(bytearray(size))
        else:
            if len(self._frame) < size:
                self._frame = bytearray(max(size, min(2 * len(self._frame), _REUSE)))
            view = memoryview(self._frame)[:size]
        view[:have] = self._view[pos + 4 : self._end]
        self._start = self._end = 0
        got = have
        while got < size:
            self._big = (4 + got, 4 + size)  # for the idle check's log line (left as it is if the wait ends it)
            n = await self._recv_into(view[got:])
            self.active = self.loop.time()
            if n == 0:
                raise BadRequest(f"connection closed inside a frame ({got} of {size} bytes)")
            got += n
        self._big = (0, 0)
        return view

    async def _writable(self) -> None:
        fut = self.loop.create_future()
        fd = self.sock.fileno()
        self.loop.add_writer(fd, _wake, fut)
        try:
            await fut
        finally:
            self.loop.remove_writer(fd)
        self.active = self.loop.time()

    def send_now(self, parts: list[Any]) -> list[Any]:
        """Send what goes without waiting; returns the parts left for `send` (empty when all went).

        An answer of bytes only (every Produce answer) is joined and written with one `send`; any
        other answer is left whole to `send`.
        """
        for p in parts:
            if p.__class__ is not bytes:
                return parts
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        try:
            sent = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            return [data]
        return [] if sent == len(data) else [data[sent:]]

    async def send(self, parts: list[Any]) -> None:
        """Write an answer: runs of bytes with sendmsg, file regions with sendfile."""
        corked = _CORK is not None and any(isinstance(p, FileRegion) for p in parts)
        if corked:
            self.sock.setsockopt(socket.IPPROTO_TCP, _CORK, 1)
        try:
            pending: list[Any] = []
            for part in parts:
                if isinstance(part, FileRegion):
                    if pending:
                        await self._sendmsg(pending)
                        pending = []
                    await self._sendfile(part)
                else:
                    pending.append(part)
            if pending:
                await self._sendmsg(pending)
        finally:
            for part in parts:
                if isinstance(part, FileRegion):
                    os.close(part.fd)
            if corked:
                try:
                    self.sock.setsockopt(socket.IPPROTO_TCP, _CORK, 0)
                except OSError:
                    pass

    async def _sendmsg(self, buffers: list[Any]) -> None:
        views = [b if b.__class__ is bytes else memoryview(b).cast("B") for b in buffers]
        while views:
            try:
                sent = self.sock.sendmsg(views[:512])
            except (BlockingIOError, InterruptedError):
                await self._writable()
                continue
            while sent and views:
                n = len(views[0])
                if sent >= n:
                    sent -= n
                    views.pop(0)
                else:
                    views[0] = views[0][sent:]
                    sent = 0

    async def _sendfile(self, region: FileRegion) -> None:
        pos, left = region.position, region.length
        out = self.sock.fileno()
        while left > 0:
            try:
                n = os.sendfile(out, region.fd, pos, left)
            except (BlockingIOError, InterruptedError):
                await self._writable()
                continue
            if n == 0:  # the file is shorter than promised (truncated under us): the frame cannot be finished
                raise BadRequest(f"segment file ended {left} bytes early while sending a fetch answer")
            pos += n
            left -= n


class TlsConnection(Connection):
    """A client of a TLS listener: its bytes go through an `ssl.SSLObject` over two memory BIOs; every answer
    goes out through `send`, encrypted, file regions read with `pread` (no `sendfile` under TLS).

    The reader (TLS's own answers: session tickets, a key update's) and the writer task of a waiting (`Later`)
    answer both write the TLS output: `_flush` sends it under a lock, so records leave whole and in order. An
    orderly end sends close_notify (`close_notify`), best-effort and without waiting."""

    __slots__ = ("_in", "_out", "tls", "_sending", "_torn", "_secure")

    def __init__(self, sock: socket.socket, peer: str, max_request_bytes: int, pool: BytePool | None,
                 context: ssl.SSLContext) -> None:  # fmt: skip
        super().__init__(sock, peer, max_request_bytes, pool)
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self._in, self._out, server_side=True)
        self._recv_into = self._tls_recv_into
        self._sending = asyncio.Lock()  # one flush at a time: two `sock_sendall`s would interleave their records
        self._torn = False  # a flush was interrupted: part of a record may be on the wire (no close_notify then)
        self._secure = False  # the handshake is over

    async def handshake(self) -> str | None:
        """Run the TLS handshake; the client certificate's principal (None without one). A failure (an
        untrusted certificate, bytes that are not TLS) raises BadRequest, after the alert went out."""
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._fill():
                    raise BadRequest("TLS handshake failed: the client closed the connection") from None
            except ssl.SSLError as exc:
                with contextlib.suppress(OSError):
                    await self._flush()  # the alert, so the client learns why
                why = getattr(exc, "verify_message", None)  # (the client certificate's fault: expired, unknown CA)
                raise BadRequest(f"TLS handshake failed: {exc.reason or exc}{f' ({why})' if why else ''}") from None
        await self._flush()
        self._secure = True
        return tlsmod.principal(self.tls.getpeercert())

    async def _readable(self) -> None:
        if self._in.pending or self.tls.pending():  # (bytes the handshake or a read took already, not decrypted yet)
            return
        await super()._readable()

    async def _fill(self) -> bool:
        """Move what the socket has into the TLS input; False at end of stream."""
        data = await self.loop.sock_recv(self.sock, _CHUNK)
        if not data:
            self._in.write_eof()
            return False
        self._in.write(data)
        self.active = self.loop.time()
        return True

    async def _flush(self) -> None:
        """Send the TLS output there is, and what is written meanwhile, until none is left; one flush at a time."""
        if not self._out.pending:
            return
        async with self._sending:
            while self._out.pending:  # (read under the lock: what an earlier flush took has gone first)
                data = self._out.read()
                self._torn = True
                await self.loop.sock_sendall(self.sock, data)
                self._torn = False
                self.active = self.loop.time()

    async def _flush_own(self) -> None:
        """The reader's flush of what a read wrote: left to a flush under way (it sends it before it ends), so
        the reader never waits behind a writer waiting for a client that is busy sending to us."""
        if not self._sending.locked():
            await self._flush()

    def close_notify(self) -> None:
        """Say goodbye the TLS way before the socket closes: close_notify, sent if the socket takes it at once;
        never waits for the client's, never raises. Not before the handshake ended, nor after a torn flush."""
        if not self._secure or self._torn or self._sending.locked():
            return
        with contextlib.suppress(ssl.SSLError, ValueError, OSError):  # (SSLWantReadError: the client's not come)
            self.tls.unwrap()
        if self._out.pending:
            with contextlib.suppress(OSError):
                self.sock.send(self._out.read())

    async def _tls_recv_into(self, view: memoryview) -> int:
        """Decrypted bytes into `view`: how many (0 at the end of the stream, a close_notify or not)."""
        while True:
            try:
                n = self.tls.read(len(view), view)
            except ssl.SSLWantReadError:
                if self._out.pending:  # what the read wrote (a session ticket, a key update's answer) goes first
                    await self._flush_own()
                if not await self._fill():
                    return 0
                continue
            except ssl.SSLZeroReturnError:
                return 0
            except ssl.SSLError as exc:
                raise BadRequest(f"TLS error: {exc.reason or exc}") from None
            if self._out.pending:  # (TLS's own messages, a key update's answer)
                await self._flush_own()
            return n

    def send_now(self, parts: list[Any]) -> list[Any]:
        return parts  # everything is encrypted by `send`

    async def send(self, parts: list[Any]) -> None:
        """Encrypt an answer a chunk at a time and write it; file regions are read into memory first."""
        try:
            for part in parts:
                if isinstance(part, FileRegion):
                    await self._send_region(part)
                    continue
                view = memoryview(part).cast("B") if part.__class__ is not bytes else memoryview(part)
                for at in range(0, len(view), _TLS_CHUNK):
                    self.tls.write(view[at : at + _TLS_CHUNK])
                    if self._out.pending >= _TLS_CHUNK:
                        await self._flush()
            await self._flush()
        finally:
            for part in parts:
                if isinstance(part, FileRegion):
                    os.close(part.fd)

    async def _send_region(self, region: FileRegion) -> None:
        pos, left = region.position, region.length
        while left > 0:
            data = os.pread(region.fd, min(left, _TLS_CHUNK), pos)
            if not data:  # the file is shorter than promised (truncated under us)
                raise BadRequest(f"segment file ended {left} bytes early while sending a fetch answer")
            self.tls.write(data)
            await self._flush()
            pos += len(data)
            left -= len(data)


def _log_idle(conn: Connection, max_idle_ms: int) -> None:
    idle = int((conn.expired or 0) * 1000)
    got, size = conn.partial()
    if got:
        of = f"{got} of {size} bytes" if size else f"{got} of the 4 size bytes"
        log.warning("closing connection from %s: %s of a request frame and then nothing for %d ms "
                    "(connections.max.idle.ms=%d)", conn.peer, of, idle, max_idle_ms)  # fmt: skip
    else:
        log.info("closing connection from %s: idle for %d ms (connections.max.idle.ms=%d)", conn.peer, idle,
                 max_idle_ms)  # fmt: skip


async def _muted(conn: Connection, session: Session) -> None:
    """Read nothing from a throttled connection until its throttle ends (Kafka 2.0+, KIP-219: the answer first,
    then the channel muted). The connection counts as busy meanwhile, not idle."""
    delay = session.mute_until - conn.loop.time()
    session.mute_until = 0.0
    if delay > 0:
        conn.busy = True
        try:
            await asyncio.sleep(delay)
        finally:
            conn.busy = False
            conn.active = conn.loop.time()


def describe_request(frame: memoryview | None) -> str:
    """A request in a few words for a log line: API, version, correlation id, size and its first bytes."""
    if frame is None:
        return "unknown (a run of produce requests)"
    head = bytes(frame[:16]).hex()
    if len(frame) < 8:
        return f"of {len(frame)} bytes: {head}"
    key, version, cid = _HEADER.unpack_from(frame)
    try:
        name = ApiKey(key).name
    except ValueError:
        name = f"API key {key}"
    more = "…" if len(frame) > 16 else ""
    return f"{name} v{version}, correlation id {cid}, {len(frame)} bytes: {head}{more}"


class Server:
    """Accepts the connections of one listener and serves each on its own task until it closes or misbehaves.

    `listener`: its name and security protocol (a `Session` of each connection says them); `context`: the
    TLS server context of a TLS listener, else None."""

    def __init__(self, host: str, port: int, dispatch: Dispatch, *, max_request_bytes: int,
                 listener: tuple[str, str] = ("PLAINTEXT", "PLAINTEXT"), context: ssl.SSLContext | None = None,
                 send_buffer: int = -1, receive_buffer: int = -1,
                 settle: Callable[[], None] | None = None, run: RunDispatch | None = None,
                 max_idle_ms: int = -1, max_connections: int = 1 << 62, max_connections_per_ip: int = -1,
                 max_queued_bytes: int = -1) -> None:  # fmt: skip
        self.host, self.port = host, port
        self.listener, self.protocol = listener
        self.context = context
        self.dispatch = dispatch
        self.run = run
        self.settle = settle or _nothing
        self.max_request_bytes = max_request_bytes
        self.send_buffer, self.receive_buffer = send_buffer, receive_buffer
        self.sock: socket.socket | None = None
        self.tasks: set[asyncio.Task] = set()
        self.connections: dict[Connection, asyncio.Task] = {}
        self._accept_task: asyncio.Task | None = None
        self.max_idle_ms = max_idle_ms
        self._idle_task: asyncio.Task | None = None
        self.limits = ConnectionLimits(max_connections, max_connections_per_ip)
        self.pool = BytePool(max_queued_bytes) if max_queued_bytes > 0 else None

    def bind(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            reason = "in use" if exc.errno == errno.EADDRINUSE else exc.strerror
            raise KafkactlError(f"cannot listen on {self.host}:{self.port}: {reason}") from None
        sock.listen(512)
        sock.setblocking(False)
        self.sock = sock
        self.port = sock.getsockname()[1]

    def start(self) -> None:
        if self.sock is None:
            self.bind()
        self._accept_task = asyncio.get_running_loop().create_task(self._accept_loop())
        self.expire_idle(self.max_idle_ms)

    def expire_idle(self, max_idle_ms: int) -> None:
        """Close connections idle for `max_idle_ms` from now on (-1: never), as `connections.max.idle.ms`."""
        self.max_idle_ms = max_idle_ms
        if self._idle_task is not None:
            self._idle_task.cancel()
            self._idle_task = None
        if max_idle_ms > 0:
            self._idle_task = asyncio.get_running_loop().create_task(self._idle_loop(max_idle_ms / 1000))

    async def _idle_loop(self, limit: float) -> None:
        loop = asyncio.get_running_loop()
        every = min(max(limit / 8, 0.01), 5.0)  # closed between `limit` and `limit + every` after the last activity
        while True:
            await asyncio.sleep(every)
            now = loop.time()
            for conn, task in list(self.connections.items()):
                if not conn.busy and conn.expired is None and now - conn.active >= limit:
                    conn.expired = now - conn.active
                    task.cancel()

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self.sock is not None
        while True:
            try:
                client, addr = await loop.sock_accept(self.sock)
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    log.warning("cannot accept: %s", exc.strerror)
                    await asyncio.sleep(0.1)
                    continue
                raise
            ip = client_host(addr[0])
            if not self.limits.admit(ip):  # over max.connections (per ip): the newest goes, at once
                client.close()
                continue
            try:
                client.setblocking(False)
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.send_buffer > 0:
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
                if self.receive_buffer > 0:
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)
            except OSError:  # (the client went away already)
                self.limits.release(ip)
                client.close()
                continue
            peer = f"{ip}:{addr[1]}"
            task = loop.create_task(self._serve(client, peer, ip))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            task.add_done_callback(lambda _t, ip=ip: self.limits.release(ip))

    async def _serve(self, sock: socket.socket, peer: str, ip: str = "") -> None:
        session = Session(listener=self.listener, protocol=self.protocol, host=ip)
        session.authenticated = not session.sasl
        if self.context is None:
            conn = Connection(sock, peer, self.max_request_bytes, self.pool)
        else:
            conn = TlsConnection(sock, peer, self.max_request_bytes, self.pool, self.context)
        current_peer.set(peer)
        current_session.set(session)
        task = asyncio.current_task()
        assert task is not None
        self.connections[conn] = task
        dispatch, settle = self.dispatch, self.settle
        run = self.run if session.authenticated else None  # a SASL client: not before it has authenticated
        authenticating = not session.authenticated
        if authenticating:  # small frames only until then, refused before any memory is taken for them
            conn.max_request_bytes = min(self.max_request_bytes, UNAUTHENTICATED_MAX_BYTES)
            conn.before_authentication = True
        out: list[Any] = []
        held = 0
        # while a `Later` answer waits, every answer goes through `queue` (a task or parts, in request order)
        # and `writer` sends them as they are ready
        queue: collections.deque[Any] = collections.deque()
        writer: asyncio.Task | None = None

        async def write_queue() -> None:
            try:
                while queue:
                    head = queue[0]
                    parts = (await head) if head.__class__ is not list else head
                    queue.popleft()
                    if parts:
                        settle()
                        await conn.send(parts)
            except (OSError, asyncio.CancelledError):
                raise
            except Exception as exc:  # a handler bug: the connection ends (its answers cannot go out of order)
                log.error("closing connection from %s after an internal error: %s", peer, describe_exception(exc))
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        def wait_in_turn(later: Later, before: list[Any], running: asyncio.Task | None) -> asyncio.Task:
            """Queue `later` behind the answers `before` it; the writer task that sends the queue in order."""
            settle()  # (its append is written before anyone waits for it)
            if before:
                queue.append(before)
            queue.append(conn.loop.create_task(later.waiting))
            return running if running is not None and not running.done() else conn.loop.create_task(write_queue())

        singles = 0  # requests the run dispatch declined: they go to `dispatch` one by one
        frame: memoryview | None = None  # the request being handled (its first bytes name it in a log line)
        try:
            if conn.__class__ is TlsConnection:
                await self._handshake(conn, session)  # type: ignore[arg-type]
            while True:
                if session.mute_until:  # a client quota's throttle: its answer went out, now nothing is read
                    await _muted(conn, session)
                got: Any = conn.take_run(run) if run is not None and not singles else 0
                if got.__class__ is not int:  # a run of requests, appended; their answers in one buffer
                    answered, answers = got
                    if answers.__class__ is Later:  # (acks=all: once the followers have the run)
                        writer = wait_in_turn(answers, out, writer)
                        out, held = [], 0
                        continue
                    if answers is not None:
                        out.append(answers)
                        held += answered
                else:
                    singles = max(singles, got) - 1 if singles or got else 0
                    frame = conn.next_frame()
                    if frame is None:
                        settle()  # before waiting (also: a big frame's reused buffer is refilled only then)
                        frame = await conn.read_frame()
                        if frame is None:
                            return
                    answer = dispatch(frame, peer)
                    if answer.__class__ is Later:
                        writer = wait_in_turn(answer, out, writer)
                        out, held = [], 0
                        continue
                    if answer is not None and answer.__class__ is not list:
                        settle()
                        conn.drop_buffer()  # (a fetch may wait long in purgatory: no receive buffer meanwhile)
                        conn.busy = True
                        try:
                            answer = await answer
                        finally:
                            conn.busy = False
                            conn.active = conn.loop.time()
                    if authenticating and session.authenticated:  # (SaslAuthenticate succeeded: the fast path)
                        run, authenticating = self.run, False
                        conn.max_request_bytes, conn.before_authentication = self.max_request_bytes, False
                    if answer is not None:
                        out += answer
                        held += 1
                # answers to pipelined requests leave together, a few at a time: the client works on
                # the first ones while the broker handles the rest
                if out and (held >= _HOLD or session.mute_until or not conn.frame_ready()):
                    if writer is not None and not writer.done():  # behind a waiting answer: in turn
                        queue.append(out)
                        out, held = [], 0
                        continue
                    settle()
                    parts, out, held = out, [], 0  # `send` closes their file regions, sent or not
                    rest = conn.send_now(parts)
                    if rest:
                        await conn.send(rest)
        except BadRequest as exc:
            if out or writer is not None:  # the requests before the bad one still get their answers
                with contextlib.suppress(OSError, BadRequest):
                    settle()
                    parts, out = out, []
                    if writer is not None and not writer.done():
                        queue.append(parts)
                        await writer
                    else:
                        await conn.send(parts)
            log.warning("closing connection from %s: %s", peer, exc)
        except (ConnectionError, BrokenPipeError, TimeoutError):
            pass
        except OSError as exc:
            log.info("connection from %s ended: %s", peer, exc)
        except asyncio.CancelledError:
            if conn.expired is None:
                raise
            _log_idle(conn, int(self.max_idle_ms))
        except Exception as exc:  # a handler bug: this connection ends, the broker stays up; one line, no traceback
            log.error("closing connection from %s after an internal error: %s (request %s)", peer,
                      describe_exception(exc), describe_request(frame))  # fmt: skip
            log.debug("traceback of the internal error", exc_info=True)
        finally:
            if writer is not None and not writer.done():
                writer.cancel()
            for item in queue:  # answers that never went out: their tasks stop, their file regions close
                if item.__class__ is not list:
                    item.cancel()
                else:
                    out += item
            with contextlib.suppress(OSError):  # a handler failed after others deferred work: do it
                settle()
            for part in out:  # answers never handed to `send` (the deferred write failed): their regions' fds
                if isinstance(part, FileRegion):
                    os.close(part.fd)
            self.connections.pop(conn, None)
            conn.release_memory()
            conn.drop_buffer()
            if conn.__class__ is TlsConnection:
                conn.close_notify()  # type: ignore[attr-defined]
            sock.close()

    async def _handshake(self, conn: TlsConnection, session: Session) -> None:
        """The TLS handshake, within HANDSHAKE_TIMEOUT_S; a client certificate names the session's principal."""
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                found = await conn.handshake()
        except TimeoutError:
            raise BadRequest(f"TLS handshake not finished within {HANDSHAKE_TIMEOUT_S:g} s") from None
        if found is not None:
            session.principal = found

    async def close(self) -> None:
        """Stop accepting and end every connection."""
        if self._idle_task is not None:
            self._idle_task.cancel()
        if self._accept_task is not None:
            self._accept_task.cancel()
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
