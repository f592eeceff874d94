"""The broker's side of SASL: which mechanisms a listener offers, and each mechanism's server exchange.

PLAIN's token is `[authzid] NUL user NUL password`. Its users are those of the listener's JAAS config
(`listener.name.<listener>.plain.sasl.jaas.config`, else `sasl.jaas.config`: `PlainLoginModule required
user_alice="alice-secret";`), as in Kafka; with no `user_` entries there, a PLAIN password is checked
against the user's SCRAM credentials in ZooKeeper instead, so `kafkactl user add` serves both mechanisms
and no password is kept in clear anywhere. SCRAM-SHA-256/512 check the credentials in ZooKeeper
(`broker.security.credentials`), read at each login.
"""

from __future__ import annotations

import hmac
import re
import secrets
from collections.abc import Callable
from typing import Any

from broker.security.scram import MECHANISMS, ScramCredential, ScramError, ScramServer, make_credential

SUPPORTED = ("PLAIN", *MECHANISMS)

#: user name → that user's SCRAM credentials by mechanism (a blocking ZooKeeper read)
CredentialLookup = Callable[[str], dict[str, ScramCredential]]

#: checked against for an unknown user, so that refusing one takes as long as refusing a wrong password
_DUMMY = {"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", secrets.token_hex(16))}

_JAAS_OPTION = re.compile(r'([A-Za-z0-9_.\-]+)\s*=\s*"((?:[^"\\]|\\.)*)"')


class AuthenticationFailed(Exception):
    """Credentials that do not check (the message says why, for the broker's log; the client hears less)."""


def jaas_options(text: str | None) -> dict[str, str]:
    """The `key="value"` options of a JAAS login module line (`... required username="a" password="b";`)."""
    return {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _JAAS_OPTION.findall(text or "")}


class PlainExchange:
    """PLAIN: one token, checked against the listener's JAAS users or else the SCRAM credentials."""

    def __init__(self, jaas_users: dict[str, str], lookup: CredentialLookup) -> None:
        self.jaas_users, self.lookup = jaas_users, lookup
        self.username: str | None = None
        self.done = False

    def step(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("malformed PLAIN token")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("PLAIN token is not UTF-8") from None
        if not user or authzid and authzid != user:
            raise AuthenticationFailed("empty user, or an authorization id other than the user")
        if self.jaas_users:
            expected = self.jaas_users.get(user)
            ok = expected is not None and hmac.compare_digest(expected.encode(), password.encode())
        else:
            known = self.lookup(user)
            # an unknown user costs the same PBKDF2 as a known one: the time taken does not say who exists
            ok = any(c.check_password(m, password) for m, c in (known or _DUMMY).items()) and bool(known)
        if not ok:
            raise AuthenticationFailed(f"invalid credentials for user {user!r}")
        self.username, self.done = user, True
        return b""


class ScramExchange:
    """SCRAM-SHA-256/512 over `broker.security.scram.ScramServer`."""

    def __init__(self, mechanism: str, lookup: CredentialLookup) -> None:
        self.server = ScramServer(mechanism, lambda user: lookup(user).get(mechanism))

    @property
    def done(self) -> bool:
        return self.server.done

    @property
    def username(self) -> str | None:
        return self.server.username

    def step(self, token: bytes) -> bytes:
        try:
            return self.server.step(token)
        except ScramError as exc:
            raise AuthenticationFailed(str(exc)) from None


def new_exchange(mechanism: str, jaas: str | None, lookup: CredentialLookup) -> Any:
    """The server side of `mechanism` for one connection, given the listener's JAAS config for it."""
    if mechanism == "PLAIN":
        options = jaas_options(jaas)
        users = {k[5:]: v for k, v in options.items() if k.startswith("user_")}
        return PlainExchange(users, lookup)
    return ScramExchange(mechanism, lookup)
