"""SASL on the wire, raw: SaslHandshake v0 and v1, PLAIN and SCRAM, what an unauthenticated connection may
ask, wrong credentials, and a fuzz test of the handshake path (the broker never authenticates garbage,
never falls over, and serves an honest client afterwards)."""

from __future__ import annotations

import socket
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.daemon import free_port
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.primitives import I32
from broker.security import credentials
from broker.security.scram import ScramClient, make_credential
from tests.integration.helpers import zk_session
from tests.integration.wire import (
    closed_by_broker,
    decode_answer,
    frame,
    local_port,
    make_batch,
    metadata_body,
    produce_body,
    read_frame,
    recv_exact,
    wait_for_closing_lines,
)

USERS = {"alice": "alice-secret", "bob": "bob-secret"}


@pytest.fixture(scope="module")
def sasl_broker(zk_server, tmp_path_factory):
    """A broker with a PLAINTEXT and a SASL_PLAINTEXT listener; alice and bob have SCRAM credentials (both
    mechanisms), and PLAIN checks against those (no JAAS users): (broker, SASL port)."""
    from tests.integration.cluster import BrokerProcess, new_chroot

    chroot = new_chroot(zk_server.connect_string)
    with zk_session(chroot) as zk:
        for user, password in USERS.items():
            credentials.write_user(
                zk, user, {m: make_credential(m, password) for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}
            )
    port, sasl_port = free_port(), free_port()
    overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"}
    with BrokerProcess(1, chroot, tmp_path_factory.mktemp("sasl"), port=port, overrides=overrides) as b:
        yield b, sasl_port


def _ask(s: socket.socket, api: int, version: int, body: dict, cid: int = 1) -> dict | None:
    s.sendall(frame(api, version, cid, body))
    data = read_frame(s)
    if data is None:
        return None
    got, answer = decode_answer(data, api, version)
    assert got == cid
    return answer


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _scram_v1(s: socket.socket, mechanism: str, user: str, password: str) -> dict:
    """A whole SCRAM exchange over SaslAuthenticate; the last answer."""
    assert _ask(s, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})["error_code"] == 0
    client = ScramClient(mechanism, user, password)
    first = _ask(s, ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": client.first_message()}, 2)
    if first["error_code"]:
        return first
    final = _ask(s, ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": client.final_message(first["auth_bytes"])}, 3)
    if not final["error_code"]:
        client.verify_server_final(final["auth_bytes"])
    return final


def _authenticated(s: socket.socket) -> bool:
    """Whether the connection may now ask for metadata."""
    answer = _ask(s, ApiKey.METADATA, 1, metadata_body(None), 9)
    return answer is not None and bool(answer["brokers"])


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_over_sasl_authenticate(sasl_broker, mechanism: str) -> None:
    b, port = sasl_broker
    with _connect(port) as s:
        assert _scram_v1(s, mechanism, "alice", USERS["alice"])["error_code"] == 0
        assert _authenticated(s)
    with _connect(port) as s:
        answer = _scram_v1(s, mechanism, "alice", "wrong")
        assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert mechanism in answer["error_message"]
        assert _ask(s, ApiKey.METADATA, 1, metadata_body(None), 9) is None  # the connection is over
    with _connect(port) as s:
        assert _scram_v1(s, mechanism, "nobody", "x")["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_plain_checks_against_the_scram_credentials(sasl_broker) -> None:
    b, port = sasl_broker
    for password, ok in ((USERS["bob"], True), ("bob", False), ("", False)):
        with _connect(port) as s:
            assert _ask(s, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
            token = b"\0bob\0" + password.encode()
            answer = _ask(s, ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": token}, 2)
            assert (answer["error_code"] == 0) is ok, answer
            if ok:
                assert _authenticated(s)


def test_handshake_v0_then_bare_tokens(sasl_broker) -> None:
    b, port = sasl_broker
    with _connect(port) as s:
        answer = _ask(s, ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "SCRAM-SHA-256"})
        assert answer["error_code"] == 0 and "SCRAM-SHA-256" in answer["mechanisms"]
        client = ScramClient("SCRAM-SHA-256", "alice", USERS["alice"])
        token = client.first_message()
        s.sendall(I32.pack(len(token)) + token)
        server_first = read_frame(s)
        token = client.final_message(server_first)
        s.sendall(I32.pack(len(token)) + token)
        client.verify_server_final(read_frame(s))
        assert _authenticated(s)
    with _connect(port) as s:  # a wrong password over bare tokens: the connection is simply closed
        assert _ask(s, ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == 0
        token = b"\0alice\0not-her-password"
        s.sendall(I32.pack(len(token)) + token)
        assert closed_by_broker(s)


def test_nothing_but_the_handshake_before_authenticating(sasl_broker) -> None:
    b, port = sasl_broker
    with _connect(port) as s:  # ApiVersions is allowed, and lists the SASL APIs
        versions = _ask(s, ApiKey.API_VERSIONS, 1, {})
        keys = {k["api_key"] for k in versions["api_keys"]}
        assert {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE} <= keys
        s.sendall(frame(ApiKey.METADATA, 1, 2, metadata_body(None)))
        assert closed_by_broker(s)
    with _connect(port) as s:  # an unknown mechanism is refused with the list of those offered
        answer = _ask(s, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert answer["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert answer["mechanisms"] == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        s.sendall(frame(ApiKey.SASL_HANDSHAKE, 1, 3, {"mechanism": "PLAIN"}))  # and the connection is over
        assert closed_by_broker(s)
    with _connect(port) as s:  # SaslAuthenticate before a handshake
        answer = _ask(s, ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0a\0b"})
        assert answer["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
    # the plaintext listener has no SASL: a handshake there is an illegal state, and no login is needed
    with _connect(b.port) as s:
        assert _ask(s, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
        assert _authenticated(s)


def _exchange_garbage(port: int, version: int, mechanism: str, tokens: list[bytes]) -> bool:
    """Send a handshake then `tokens` (wrapped or bare); True if the connection ended up authenticated."""
    with _connect(port) as s:
        s.settimeout(5)
        answer = _ask(s, ApiKey.SASL_HANDSHAKE, version, {"mechanism": mechanism})
        if answer is None or answer["error_code"]:
            return False
        for i, token in enumerate(tokens):
            try:
                if version == 1:
                    got = _ask(s, ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": token}, 2 + i)
                    if got is None or got["error_code"]:
                        return False
                else:
                    s.sendall(I32.pack(len(token)) + token)
                    head = recv_exact(s, 4)
                    if head is None:
                        return False
                    recv_exact(s, I32.unpack(head)[0])
            except (ConnectionError, TimeoutError):
                return False
        try:
            return _authenticated(s)
        except (ConnectionError, TimeoutError, AssertionError):
            return False


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    version=st.sampled_from([0, 1]),
    mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]),
    tokens=st.lists(
        st.one_of(
            st.binary(min_size=8, max_size=200),
            st.builds(
                lambda u, p: b"\0" + u + b"\0" + p, st.sampled_from([b"alice", b"bob", b"x"]), st.binary(max_size=20)
            ),
            st.builds(lambda n: b"n,,n=alice,r=" + n, st.binary(min_size=1, max_size=30)),
            st.builds(lambda p: b"c=biws,r=abc,p=" + p, st.binary(max_size=60)),
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_fuzz_the_handshake_path(sasl_broker, version: int, mechanism: str, tokens: list[bytes]) -> None:
    b, port = sasl_broker
    assert not _exchange_garbage(port, version, mechanism, tokens)
    assert b.proc is not None and b.proc.poll() is None


def test_after_the_fuzz_an_honest_client_still_gets_in(sasl_broker) -> None:
    b, port = sasl_broker
    with _connect(port) as s:
        assert _scram_v1(s, "SCRAM-SHA-512", "bob", USERS["bob"])["error_code"] == 0
        assert _authenticated(s)
    assert "Traceback" not in b.log_text()


def test_a_big_frame_before_authenticating_is_refused_at_once(start_broker) -> None:
    """A client that has not logged in may not announce more than 512 KiB: the broker would otherwise keep a
    slot of queued.max.request.bytes and a buffer of that size for a client that only sent a size. (A broker of
    its own: the module's has logged so many closings that its repeat limiter may hold this one back.)"""
    plain, port = free_port(), free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{port}"
    b = start_broker(1, {"listeners": listeners}, port=plain)
    with _connect(port) as s:
        me = local_port(s)
        s.sendall(I32.pack(100 * 1024 * 1024))  # socket.request.max.bytes, and nothing after it
        started = time.monotonic()
        assert closed_by_broker(s, timeout=5)
        assert time.monotonic() - started < 3
    [line] = wait_for_closing_lines(b, me)
    assert "frame size 104857600 before SASL authentication" in line and "524288" in line
    with _connect(port) as s:  # just over the limit, after a handshake: refused as well
        me = local_port(s)
        assert _ask(s, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        s.sendall(I32.pack(512 * 1024 + 1))
        assert closed_by_broker(s, timeout=5)
    assert wait_for_closing_lines(b, me)


def test_after_authenticating_a_big_frame_is_served(sasl_broker) -> None:
    b, port = sasl_broker
    with _connect(port) as s:
        assert _scram_v1(s, "SCRAM-SHA-256", "alice", USERS["alice"])["error_code"] == 0
        body = produce_body("sasl-big-frame", {0: make_batch([b"x" * (700 * 1024)])})
        request = frame(ApiKey.PRODUCE, 7, 11, body)
        assert len(request) > 600 * 1024
        s.sendall(request)
        data = read_frame(s)
        assert data is not None, "the broker closed an authenticated client's big request"
        assert decode_answer(data, ApiKey.PRODUCE, 7)[0] == 11
