"""The socket server's pieces that a live broker hardly shows: the host of an IPv4 client of a dual-stack
listener, TLS output a read produced going out before the next wait, TLS flushes one at a time (records never
interleaved), the server context refusing renegotiation, and close_notify when the broker ends a connection.

Real loopback sockets and a real `Server` on an asyncio loop (plain asyncio.run, no plugin); the `tls` of a
`TlsConnection` is replaced by a stand-in where a test needs TLS output at a given moment.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from typing import Any

import pytest

from broker.protocol.primitives import I32
from broker.security.certs import Pki
from broker.server.config import TlsSettings
from broker.server.network import Server, TlsConnection, client_host
from broker.server.tls import server_context


def _settings(pki: Pki) -> TlsSettings:
    return TlsSettings(str(pki.keystore("broker")), None, None, "none", ("TLSv1.2", "TLSv1.3"), None, "https")


def run(coro: Any, timeout: float = 20.0) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.mark.parametrize(
    ("given", "host"),
    [
        ("::ffff:10.0.0.5", "10.0.0.5"),
        ("::FFFF:192.168.1.20", "192.168.1.20"),
        ("10.0.0.5", "10.0.0.5"),
        ("::1", "::1"),
        ("2001:db8::5", "2001:db8::5"),
        ("fe80::1%eth0", "fe80::1%eth0"),
        ("::10.0.0.5", "::10.0.0.5"),  # (IPv4-compatible, deprecated: not a mapped address)
        ("", ""),
        ("not:an:address", "not:an:address"),
    ],
)
def test_client_host_gives_an_ipv4_client_of_a_dual_stack_listener_by_its_ipv4_address(given: str, host: str) -> None:
    assert client_host(given) == host


def test_a_dual_stack_listener_names_an_ipv4_client_by_its_ipv4_address() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    seen: list[str] = []

    async def main() -> None:
        server = Server("::", 0, lambda frame, peer: None, max_request_bytes=1 << 20)
        try:
            server.bind()
        except Exception as exc:  # (a host without IPv6 sockets)
            pytest.skip(f"cannot listen on [::]: {exc}")
        original = server._serve

        async def serve(sock: socket.socket, peer: str, ip: str = "") -> None:
            seen.extend([peer, ip])
            await original(sock, peer, ip)

        server._serve = serve  # type: ignore[method-assign]
        server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            for _ in range(200):
                if seen:
                    break
                await asyncio.sleep(0.01)
            writer.close()
        finally:
            await server.close()

    run(main())
    peer, ip = seen
    assert ip == "127.0.0.1" and peer.startswith("127.0.0.1:")


def test_the_server_context_refuses_renegotiation(pki: Pki) -> None:
    ctx = server_context("SSL", _settings(pki))
    assert ctx.options & ssl.OP_NO_RENEGOTIATION


class _Tls:
    """Stands in for the `SSLObject`: its first read writes TLS output (a session ticket, a key update's answer)
    and wants more input, as OpenSSL's does; later reads give the bytes received as they are."""

    def __init__(self, conn: TlsConnection, output: bytes) -> None:
        self.conn, self.output = conn, output

    def read(self, n: int, buffer: memoryview) -> int:
        if self.output:
            self.conn._out.write(self.output)
            self.output = b""
            raise ssl.SSLWantReadError
        data = self.conn._in.read(n)
        if not data:
            raise ssl.SSLWantReadError
        buffer[: len(data)] = data
        return len(data)


def _pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    return a, b


def test_tls_output_of_a_read_leaves_before_the_read_waits_for_more() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = _pair()
        with ours, theirs:
            conn = TlsConnection(ours, "peer", 1 << 20, None, ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
            conn.tls = _Tls(conn, b"the-broker's-tls-answer")  # type: ignore[assignment]
            buf = bytearray(64)
            reading = loop.create_task(conn._tls_recv_into(memoryview(buf)))
            # the client waits for that answer before it sends anything more: it must come without more input
            got = await asyncio.wait_for(loop.sock_recv(theirs, 100), 3)
            assert got == b"the-broker's-tls-answer"
            await loop.sock_sendall(theirs, b"request")
            assert await asyncio.wait_for(reading, 3) == 7 and bytes(buf[:7]) == b"request"

    run(main())


def test_concurrent_tls_flushes_send_whole_outputs_in_order() -> None:
    """The reader's flush and a writer task's (while an acks=all answer waits) at once: the bytes of each
    flush leave together, in the order they were written, and both flushes end."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = _pair()
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
        theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        with ours, theirs:
            conn = TlsConnection(ours, "peer", 1 << 20, None, ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
            first, second, third = b"a" * (1 << 20), b"b" * (1 << 19), b"c" * 1000
            conn._out.write(first)
            one = loop.create_task(conn._flush())
            await asyncio.sleep(0)  # (it has sent what the socket took and waits for room)
            conn._out.write(second)
            two = loop.create_task(conn._flush())
            await asyncio.sleep(0)
            conn._out.write(third)
            three = loop.create_task(conn._flush())
            want = len(first) + len(second) + len(third)
            got = bytearray()
            while len(got) < want:
                chunk = await asyncio.wait_for(loop.sock_recv(theirs, 65536), 3)
                assert chunk, "the socket closed"
                got += chunk
            await asyncio.wait_for(asyncio.gather(one, two, three), 3)
            assert bytes(got) == first + second + third

    run(main())


# --- close_notify --------------------------------------------------------------------------------


def _echo_id(frame: memoryview, peer: str) -> list[Any]:
    """A dispatcher answering every request with a frame of its correlation id alone."""
    return [I32.pack(4) + bytes(frame[4:8])]


def _client(pki: Pki, port: int) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    # ragged EOFs raise: a close without close_notify is then told apart from one with it
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1", suppress_ragged_eofs=False)


def _ask(s: ssl.SSLSocket, cid: int) -> bytes:
    s.sendall(I32.pack(8) + b"\x00\x12\x00\x00" + I32.pack(cid))
    got = b""
    while len(got) < 8:
        chunk = s.recv(8 - len(got))
        assert chunk, "closed"
        got += chunk
    return got


def _serving(pki: Pki, client: Any) -> Any:
    """Run a TLS `Server` with the `_echo_id` dispatcher and `client(port, server, loop)` in a thread."""

    async def main() -> Any:
        ctx = server_context("SSL", _settings(pki))
        server = Server("127.0.0.1", 0, _echo_id, max_request_bytes=1 << 20, listener=("SSL", "SSL"), context=ctx)
        server.start()
        loop = asyncio.get_running_loop()
        try:
            return await asyncio.to_thread(client, server.port, server, loop)
        finally:
            await server.close()

    return run(main(), 30)


def test_the_broker_closing_a_tls_connection_sends_close_notify(pki: Pki) -> None:
    def client(port: int, server: Server, loop: asyncio.AbstractEventLoop) -> bytes:
        with _client(pki, port) as s:
            assert _ask(s, 5) == I32.pack(4) + I32.pack(5)
            asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)  # (as the broker's shutdown does)
            return s.recv(10)  # b"" after a close_notify; SSLEOFError without one

    assert _serving(pki, client) == b""


def test_a_client_closing_its_tls_connection_gets_close_notify_back(pki: Pki) -> None:
    def client(port: int, server: Server, loop: asyncio.AbstractEventLoop) -> bool:
        with _client(pki, port) as s:
            assert _ask(s, 6) == I32.pack(4) + I32.pack(6)
            plain = s.unwrap()  # sends the client's close_notify and waits for the broker's
            plain.close()
            return True

    assert _serving(pki, client)


def test_close_notify_never_waits_nor_raises(pki: Pki) -> None:
    """Before its handshake and on a socket already gone, `close_notify` does nothing and says nothing."""

    async def main() -> None:
        ours, theirs = _pair()
        ctx = server_context("SSL", _settings(pki))
        conn = TlsConnection(ours, "peer", 1 << 20, None, ctx)
        conn.close_notify()  # (no handshake yet)
        conn._secure = True  # as if it had been: the unwrap fails, the socket is closed at the other end
        theirs.close()
        conn.close_notify()
        ours.close()
        conn.close_notify()

    run(main())


def test_the_reader_never_waits_behind_a_writer_stuck_on_a_busy_client() -> None:
    """A writer's flush waits for a client that is sending, not reading; a read that writes TLS output then
    leaves it to that flush (which sends it after its own) and goes on reading."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = _pair()
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
        theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        with ours, theirs:
            conn = TlsConnection(ours, "peer", 1 << 20, None, ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
            answer = b"a" * (1 << 20)
            conn._out.write(answer)
            writing = loop.create_task(conn._flush())
            await asyncio.sleep(0.05)
            assert not writing.done()  # (the client reads nothing yet)
            conn.tls = _Tls(conn, b"ticket")  # type: ignore[assignment]
            buf = bytearray(64)
            reading = loop.create_task(conn._tls_recv_into(memoryview(buf)))
            await loop.sock_sendall(theirs, b"request")
            assert await asyncio.wait_for(reading, 3) == 7 and bytes(buf[:7]) == b"request"
            got = bytearray()
            while len(got) < len(answer) + 6:
                chunk = await asyncio.wait_for(loop.sock_recv(theirs, 65536), 3)
                assert chunk, "the socket closed"
                got += chunk
            await asyncio.wait_for(writing, 3)
            assert bytes(got) == answer + b"ticket"

    run(main())
