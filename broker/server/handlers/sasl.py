"""SaslHandshake and SaslAuthenticate, and what a connection may ask before it has authenticated.

On a SASL listener a connection may send only ApiVersions, SaslHandshake and SaslAuthenticate (or, after
a v0 handshake, bare SASL tokens) until it has authenticated; anything else closes it, as Kafka does.
A failed authentication is answered with SASL_AUTHENTICATION_FAILED (a v0 exchange's connection is simply
closed) and logged with the reason; the connection ends at its next request. Re-authentication (KIP-368)
is not offered: `session_lifetime_ms` is 0.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import RequestHeader
from broker.protocol.primitives import I32
from broker.security import credentials
from broker.security.sasl import SUPPORTED, AuthenticationFailed, new_exchange
from broker.security.session import Session, current
from broker.server.network import BadRequest

if TYPE_CHECKING:
    from broker.server.services import Services

log = logging.getLogger(__name__)

_LOGINS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sasl-login")

#: what a connection may ask before it has authenticated
BEFORE_AUTHENTICATION = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


def check_unauthenticated(session: Session, api_key: int) -> None:
    """Refuse (close the connection on) a request a connection may not make before authenticating."""
    if session.failed:
        raise BadRequest(f"request after a failed authentication of {session.host}")
    if api_key not in BEFORE_AUTHENTICATION:
        try:
            name = ApiKey(api_key).name
        except ValueError:
            name = f"API key {api_key}"
        raise BadRequest(f"unexpected {name} request before SASL authentication")


async def handle_sasl_handshake(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    session = current()
    offered = [m for m in b.config.sasl_mechanisms(session.listener) if m in SUPPORTED]
    if not session.sasl or session.authenticated or session.mechanism is not None:
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": offered}
    mechanism = req["mechanism"]
    if mechanism not in offered:
        log.info("client at %s asked for SASL mechanism %r; offered: %s", session.host, mechanism, ",".join(offered))
        session.failed = True  # as Kafka, the connection ends after this answer (at its next request here)
        return {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": offered}
    zk = b.zk

    def lookup(user: str) -> dict:
        if zk is None:
            raise AuthenticationFailed("ZooKeeper is not connected: credentials cannot be read")
        return credentials.read_user(zk, user)

    session.mechanism = mechanism
    session.exchange = new_exchange(mechanism, b.config.jaas_config(session.listener, mechanism), lookup)
    session.raw_tokens = header.api_version == 0
    return {"error_code": ErrorCode.NONE, "mechanisms": offered}


async def _step(b: Services, session: Session, token: bytes) -> bytes:
    """One token of the exchange; raises AuthenticationFailed (then the session has failed)."""
    exchange = session.exchange
    try:
        # ZooKeeper reads and PBKDF2, off the event loop and on threads of their own: logins (a flood of
        # them included) never hold up the broker's other blocking work
        answer = await asyncio.get_running_loop().run_in_executor(_LOGINS, exchange.step, token)
    except AuthenticationFailed as exc:
        session.failed, session.exchange = True, None
        log.warning("failed authentication with %s (%s: %s)", session.host, session.mechanism, exc)
        raise
    except Exception as exc:  # ZooKeeper gone, a bug: the login fails, the broker stays up
        session.failed, session.exchange = True, None
        log.warning("authentication of %s failed: %s", session.host, exc)
        raise AuthenticationFailed(str(exc)) from None
    if exchange.done:
        session.authenticated, session.principal = True, f"User:{exchange.username}"
        session.exchange, session.raw_tokens = None, False
        log.debug("%s authenticated as %s with %s", session.host, session.principal, session.mechanism)
    return answer


async def handle_sasl_authenticate(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    session = current()
    if session.exchange is None or session.raw_tokens:
        why = "SaslAuthenticate before a SaslHandshake v1, or after the exchange ended"
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "error_message": why, "auth_bytes": b"",
                "session_lifetime_ms": 0}  # fmt: skip
    try:
        answer = await _step(b, session, bytes(req["auth_bytes"] or b""))
    except AuthenticationFailed:
        message = (f"Authentication failed during authentication due to invalid credentials with SASL "
                   f"mechanism {session.mechanism}")  # fmt: skip
        return {"error_code": ErrorCode.SASL_AUTHENTICATION_FAILED, "error_message": message, "auth_bytes": b"",
                "session_lifetime_ms": 0}  # fmt: skip
    return {"error_code": ErrorCode.NONE, "error_message": None, "auth_bytes": answer, "session_lifetime_ms": 0}


async def raw_token(b: Services, session: Session, frame: memoryview) -> list[Any]:
    """A bare SASL token after a v0 handshake; its answer is a bare size-prefixed token too."""
    try:
        answer = await _step(b, session, bytes(frame))
    except AuthenticationFailed as exc:
        raise BadRequest(f"SASL authentication failed: {exc}") from None
    return [I32.pack(len(answer)) + answer]
