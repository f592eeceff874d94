"""PLAIN on the broker: against the listener's JAAS users, else against the users' SCRAM credentials."""

import pytest

from broker.security.sasl import AuthenticationFailed, jaas_options, new_exchange
from broker.security.scram import make_credential

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="a \\"quoted\\" secret";')  # fmt: skip


def _no_lookup(user: str) -> dict:
    raise AssertionError("JAAS users are checked without ZooKeeper")


def test_jaas_options_unquote() -> None:
    assert jaas_options(JAAS)["user_alice"] == 'a "quoted" secret'
    assert jaas_options(None) == {}


def test_plain_against_jaas_users() -> None:
    good = new_exchange("PLAIN", JAAS, _no_lookup)
    assert good.step(b'\0alice\0a "quoted" secret') == b"" and good.done and good.username == "alice"
    assert new_exchange("PLAIN", JAAS, _no_lookup).step(b"admin\0admin\0admin-secret") == b""  # authzid = user
    for token in (b"\0alice\0wrong", b"\0nobody\0admin-secret", b"bob\0alice\0x", b"\0\0", b"no-nuls", b"\0a\0b\0c"):
        with pytest.raises(AuthenticationFailed):
            new_exchange("PLAIN", JAAS, _no_lookup).step(token)


def test_plain_against_scram_credentials() -> None:
    creds = {"carol": {"SCRAM-SHA-512": make_credential("SCRAM-SHA-512", "c-pw")}}
    lookup = lambda user: creds.get(user, {})  # noqa: E731
    ex = new_exchange("PLAIN", 'ScramLoginModule required username="x" password="y";', lookup)
    assert ex.step(b"\0carol\0c-pw") == b"" and ex.username == "carol"
    for token in (b"\0carol\0C-PW", b"\0dave\0c-pw"):
        with pytest.raises(AuthenticationFailed):
            new_exchange("PLAIN", None, lookup).step(token)
