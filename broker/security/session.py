"""Who is on a connection: the listener it came in on, its principal, and its SASL exchange if one is under way.

The socket server makes one `Session` per connection and sets `current_session` for the task that serves
it, so request handlers (authentication, the authorizer) read it without it travelling through every call.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any

ANONYMOUS = "User:ANONYMOUS"

#: Kafka's security protocols: (TLS on the socket, SASL before any other request)
PROTOCOLS: dict[str, tuple[bool, bool]] = {
    "PLAINTEXT": (False, False),
    "SSL": (True, False),
    "SASL_PLAINTEXT": (False, True),
    "SASL_SSL": (True, True),
}


@dataclass(slots=True)
class Session:
    """One connection's security state."""

    listener: str = "PLAINTEXT"  # the listener's name (`listeners=NAME://host:port`)
    protocol: str = "PLAINTEXT"  # its security protocol (`listener.security.protocol.map`)
    host: str = ""  # the client's IP address, as ACLs name hosts
    principal: str = ANONYMOUS  # "User:<name>" once authenticated; a TLS client certificate's DN on SSL
    authenticated: bool = True  # False on a SASL listener until SaslAuthenticate succeeds
    mechanism: str | None = None  # the SASL mechanism SaslHandshake chose
    exchange: Any = None  # the mechanism's server side while its tokens go back and forth
    raw_tokens: bool = False  # after SaslHandshake v0: the next frames are bare SASL tokens
    failed: bool = False  # authentication failed: the connection ends at its next request
    client_id: str | None = None  # the last request's client id, noted while client quotas are configured
    mute_until: float = 0.0  # a client quota's throttle: nothing is read from the connection until then (loop time)

    @property
    def sasl(self) -> bool:
        return PROTOCOLS.get(self.protocol, (False, False))[1]


#: the session of the connection whose request is being handled (set by the socket server for each connection)
current_session: contextvars.ContextVar[Session | None] = contextvars.ContextVar("current_session", default=None)

_PLAIN = Session()  # outside any connection (a handler called directly): plaintext and anonymous


def current() -> Session:
    """The session of the request being handled."""
    return current_session.get() or _PLAIN
