"""One blocking connection to one broker: version negotiation, then request/response by correlation id.

The connection asks ApiVersions first and speaks, per API, the highest version both sides serve,
so the same client works against kafkactl's broker and Apache Kafka.
"""

from __future__ import annotations

import itertools
import socket
import ssl
from typing import Any

from broker.client.security import ClientSecurity, SaslExchange, SecurityError, closed_hint, tls_failed
from broker.client.security import default as default_security
from broker.errors import KafkactlError, UsageError
from broker.protocol.api import APIS, ApiKey
from broker.protocol.framing import encode_request, read_response_body
from broker.protocol.messages.produce import FAST_MAX_VERSION
from broker.protocol.primitives import I32, Reader


class ProtocolError(KafkactlError):
    """The broker answered something this client cannot read, or closed the connection."""


class TlsLost(ProtocolError, SecurityError):
    """The broker ended the TLS session with an alert (a client certificate it does not accept, ...)."""


def parse_address(text: str, default_port: int = 9092) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        return text.strip(), default_port
    try:
        number = int(port)
    except ValueError:
        raise UsageError(f"address {text!r}: port is not a number") from None
    if not 0 < number < 65536:
        raise UsageError(f"address {text!r}: port {number} is out of range (1-65535)")
    return host.strip("[]"), number


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """`host:port,host:port` → addresses; at least one."""
    out = [parse_address(a) for a in bootstrap.split(",") if a.strip()]
    if not out:
        raise UsageError("no bootstrap server given")
    return out


#: APIs kafkactl's clients speak below what its broker serves: the producer's hand-written codecs (and the C
#: run codec) stop at Produce v8, the last non-flexible version (v9 changes only the encoding)
CLIENT_MAX = {ApiKey.PRODUCE: FAST_MAX_VERSION}


def common_version(api_key: int, theirs_by_key: dict[int, tuple[int, int]], where: str) -> int:
    """The highest version of an API that both kafkactl and the broker at `where` serve."""
    api = APIS[api_key]
    theirs = theirs_by_key.get(api_key)
    if theirs is None:
        raise KafkactlError(f"broker {where} does not serve {ApiKey(api_key).name}")
    v = min(api.served[1], theirs[1], CLIENT_MAX.get(api_key, api.served[1]))
    if v < max(api.served[0], theirs[0]):
        raise KafkactlError(f"no {ApiKey(api_key).name} version in common with {where}")
    return v


def apply_settings(config: Any, overrides: dict[str, Any], what: str) -> Any:
    """Set `overrides` on a client's config dataclass; an unknown name is an error naming it."""
    for key, value in overrides.items():
        if not hasattr(config, key):
            raise KafkactlError(f"unknown {what} setting {key!r}")
        setattr(config, key, value)
    return config


class Connection:
    def __init__(self, host: str, port: int, *, client_id: str = "kafkactl", timeout: float = 30.0,
                 security: ClientSecurity | None = None) -> None:  # fmt: skip
        """Connect (TLS when `security` says so; None: the process default), learn the broker's API
        versions and authenticate (SASL)."""
        sec = security if security is not None else default_security()
        self.host, self.port = host, port
        self.client_id = client_id
        where = f"{host}:{port}"
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise KafkactlError(f"cannot connect to broker {where}: {exc.strerror or exc}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if sec.tls:
            try:
                self.sock = sec.ssl_context().wrap_socket(self.sock, server_hostname=host)
            except (ssl.SSLError, ConnectionResetError, BrokenPipeError, TimeoutError) as exc:
                self.sock.close()
                raise tls_failed(where, exc) from None
            except OSError as exc:
                self.sock.close()
                raise KafkactlError(f"cannot connect to broker {where}: {exc.strerror or exc}") from None
        self._ids = itertools.count(1)
        self.versions: dict[int, tuple[int, int]] = {}
        self.security, self._sent, self._opened = sec, 0, 0  # requests sent in all, and while connecting
        try:
            self._negotiate()
            if sec.sasl:
                self._authenticate(sec)
            self._opened = self._sent
        except BaseException:
            self.sock.close()
            raise

    def _negotiate(self) -> None:
        answer = self.request(ApiKey.API_VERSIONS, {}, version=2)
        if answer["error_code"]:
            answer = self.request(ApiKey.API_VERSIONS, {}, version=0)
        self.versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]}

    def _authenticate(self, sec: ClientSecurity) -> None:
        """SaslHandshake v1, then SaslAuthenticate v1 round trips until the mechanism is done."""
        exchange = SaslExchange(sec, f"{self.host}:{self.port}")
        exchange.check_handshake(self.request(ApiKey.SASL_HANDSHAKE, {"mechanism": sec.mechanism}, version=1))
        token: bytes | None = exchange.first()
        while token is not None:
            answer = self.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": token}, version=1)
            token = exchange.next(exchange.check_authenticate(answer))

    def version_for(self, api_key: int) -> int:
        return common_version(api_key, self.versions, f"{self.host}:{self.port}")

    def send(self, api_key: int, body: dict[str, Any], version: int | None = None) -> tuple[int, int]:
        """Send a request; returns (correlation id, version) for `receive`."""
        v = self.version_for(api_key) if version is None else version
        cid = next(self._ids)
        self._sent += 1
        parts = encode_request(api_key, v, cid, self.client_id, APIS[api_key].request, body)
        try:
            self.sock.sendall(b"".join(bytes(p) for p in parts))
        except OSError as exc:
            raise ProtocolError(f"lost the connection to {self.host}:{self.port}: {exc}") from None
        return cid, v

    def receive(self, api_key: int, cid: int, version: int) -> dict[str, Any]:
        size = I32.unpack(self._read(4))[0]
        frame = self._read(size)
        r = Reader(frame)
        got = r.int32()
        if got != cid:
            raise ProtocolError(f"answer for request {got} while waiting for {cid}")
        return read_response_body(APIS[api_key].response, r, version)

    def request(self, api_key: int, body: dict[str, Any], version: int | None = None) -> dict[str, Any]:
        cid, v = self.send(api_key, body, version)
        return self.receive(api_key, cid, v)

    def _read(self, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            try:
                k = self.sock.recv_into(view[got:])
            except TimeoutError:
                raise ProtocolError(f"no answer from {self.host}:{self.port} in time") from None
            except ssl.SSLError as exc:  # e.g. TLS 1.3: a client certificate refused after the handshake
                raise TlsLost(str(tls_failed(f"{self.host}:{self.port}", exc))) from None
            except OSError as exc:
                raise ProtocolError(f"lost the connection to {self.host}:{self.port}: {exc}") from None
            if k == 0:
                hint = closed_hint(self.security, self._sent <= self._opened + 1)
                raise ProtocolError(f"broker {self.host}:{self.port} closed the connection{hint}")
            got += k
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
