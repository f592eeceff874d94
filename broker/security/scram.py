"""SCRAM-SHA-256/512 (RFC 5802, RFC 7677) as Kafka speaks it, both sides, and Kafka's stored credential.

The exchange, all UTF-8 text:

    client-first   n,,n=<user>,r=<client nonce>[,<extension>=<value>...]
    server-first   r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final   c=biws,r=<nonce>,p=<base64 ClientProof>
    server-final   v=<base64 ServerSignature>   or   e=<error>

SaltedPassword = PBKDF2-HMAC(hash, password, salt, iterations); ClientKey = HMAC(SaltedPassword, "Client Key");
StoredKey = H(ClientKey); ServerKey = HMAC(SaltedPassword, "Server Key"); AuthMessage = client-first-bare +
"," + server-first + "," + client-final without its proof; ClientProof = ClientKey XOR HMAC(StoredKey,
AuthMessage); ServerSignature = HMAC(ServerKey, AuthMessage).

Kafka keeps, per user and mechanism, `salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>` (the
value under the mechanism's name in `/config/users/<user>`): enough to check a proof, never the password.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

#: mechanism → hash name; Kafka's minimum iteration count is 4096
MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384  # Kafka's ceiling too: a credential that costs more per login is refused


class ScramError(Exception):
    """A SCRAM message that is malformed, or a proof or signature that does not check."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise ScramError(f"{what} is not base64") from None


def _hash(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ScramError(f"unknown SCRAM mechanism {mechanism!r} (known: {', '.join(MECHANISMS)})") from None


def _hmac(name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, name).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(_hash(mechanism), password.encode(), salt, iterations)


@dataclass(frozen=True)
class ScramCredential:
    """What a broker keeps of a user's password for one mechanism."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def encode(self) -> str:
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},server_key={_b64(self.server_key)},"
                f"iterations={self.iterations}")  # fmt: skip

    @classmethod
    def decode(cls, text: str) -> ScramCredential:
        fields = dict(item.partition("=")[::2] for item in text.split(","))
        try:
            return cls(_unb64(fields["salt"], "salt"), _unb64(fields["stored_key"], "stored_key"),
                       _unb64(fields["server_key"], "server_key"), int(fields["iterations"]))  # fmt: skip
        except (KeyError, ValueError) as exc:
            raise ScramError(f"not a SCRAM credential: {exc}") from None

    def check_password(self, mechanism: str, password: str) -> bool:
        """Whether `password` is the one this credential was made from (how PLAIN logins are checked)."""
        name = _hash(mechanism)
        salted = salted_password(mechanism, password, self.salt, self.iterations)
        stored = hashlib.new(name, _hmac(name, salted, b"Client Key")).digest()
        return hmac.compare_digest(stored, self.stored_key)


def make_credential(mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:  # fmt: skip
    """A fresh credential for `password` (a random salt unless one is given)."""
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ScramError(f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, not {iterations}")
    salt = salt if salt is not None else secrets.token_bytes(32)
    return credential_from_salted(mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations)


def credential_from_salted(mechanism: str, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """The credential of a salted password (what AlterUserScramCredentials carries: the client salts it, so
    the password never reaches the broker)."""
    name = _hash(mechanism)
    client_key = _hmac(name, salted, b"Client Key")
    return ScramCredential(salt, hashlib.new(name, client_key).digest(), _hmac(name, salted, b"Server Key"),
                           iterations)  # fmt: skip


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _unescape(name: str) -> str:
    if "=" in name.replace("=3D", "").replace("=2C", ""):
        raise ScramError("invalid escape in the user name")
    return name.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: str, what: str) -> list[tuple[str, str]]:
    out = []
    for item in message.split(","):
        key, sep, value = item.partition("=")
        if not sep or len(key) != 1 and what != "client-first":
            raise ScramError(f"malformed {what} message")
        out.append((key, value))
    return out


def _nonce() -> str:
    return _b64(secrets.token_bytes(24)).rstrip("=").replace("+", "-").replace("/", "_")


class ScramClient:
    """The client side of one SCRAM exchange."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None) -> None:
        self._name = _hash(mechanism)
        self.mechanism, self.password = mechanism, password
        self._nonce = nonce or _nonce()
        self._first_bare = f"n={_escape(username)},r={self._nonce}"
        self._server_signature = b""

    def first_message(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final_message(self, server_first: bytes | memoryview) -> bytes:
        text = bytes(server_first).decode("utf-8", "replace")
        if text.startswith("e="):
            raise ScramError(f"the server refused: {text[2:]}")
        attrs = dict(_attributes(text, "server-first"))
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s"), attrs.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce) or salt is None:
            raise ScramError("the server's first message does not carry our nonce, or no salt")
        if not iterations.isdigit() or not MIN_ITERATIONS <= int(iterations) <= MAX_ITERATIONS:
            raise ScramError(f"the server asked for {iterations!r} iterations")
        without_proof = f"c=biws,r={nonce}"
        auth = f"{self._first_bare},{text},{without_proof}".encode()
        salted = salted_password(self.mechanism, self.password, _unb64(salt, "salt"), int(iterations))
        client_key = _hmac(self._name, salted, b"Client Key")
        stored_key = hashlib.new(self._name, client_key).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, _hmac(self._name, stored_key, auth), strict=True))
        self._server_signature = _hmac(self._name, _hmac(self._name, salted, b"Server Key"), auth)
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify_server_final(self, server_final: bytes | memoryview) -> None:
        text = bytes(server_final).decode("utf-8", "replace")
        if text.startswith("e="):
            raise ScramError(f"the server refused: {text[2:]}")
        if not text.startswith("v=") or not hmac.compare_digest(_unb64(text[2:], "v"), self._server_signature):
            raise ScramError("the server's signature does not check: it does not know the password")


class ScramServer:
    """The server side of one SCRAM exchange: `lookup(user)` gives the user's credential or None.

    `step` takes each client message and gives the answer; `done` and `username` once the proof checked."""

    def __init__(self, mechanism: str, lookup: object, nonce: str | None = None) -> None:
        self._name = _hash(mechanism)
        self.mechanism = mechanism
        self._lookup = lookup
        self._nonce = nonce or _nonce()
        self.username: str | None = None
        self.done = False
        self._state = 0
        self._credential: ScramCredential | None = None
        self._first_bare = self._server_first = self._channel = ""

    def step(self, message: bytes) -> bytes:
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("the SCRAM message is not UTF-8") from None
        if self._state == 0:
            return self._first(text)
        if self._state == 1:
            return self._final(text)
        raise ScramError("the exchange is over")

    def _first(self, text: str) -> bytes:
        gs2, sep, bare = text.partition(",")
        authzid, sep2, bare = bare.partition(",")
        if not sep or not sep2 or gs2 not in ("n", "y") or authzid and not authzid.startswith("a="):
            raise ScramError("malformed client-first message (channel binding is not supported)")
        attrs = _attributes(bare, "client-first")
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise ScramError("malformed client-first message")
        user = _unescape(attrs[0][1])
        if authzid and _unescape(authzid[2:]) != user:
            raise ScramError("an authorization id other than the user is not supported")
        credential = self._lookup(user)  # type: ignore[operator]
        if credential is None:
            raise ScramError(f"unknown user {user!r} for {self.mechanism}")
        self.username, self._credential = user, credential
        self._first_bare = bare
        self._channel = _b64(f"{gs2},{authzid},".encode())  # what client-final's c= must carry
        nonce = attrs[1][1] + self._nonce
        self._server_first = f"r={nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._state = 1
        return self._server_first.encode()

    def _final(self, text: str) -> bytes:
        without_proof, sep, proof_text = text.rpartition(",p=")
        attrs = dict(_attributes(without_proof, "client-final")) if sep else {}
        # the nonce must end with the one we sent, as Kafka checks it (librdkafka repeats its own part before it)
        ours = self._server_first[2:].split(",")[0]
        if not sep or attrs.get("c") != self._channel or not attrs.get("r", "").endswith(ours):
            raise ScramError("malformed client-final message, or not our nonce")
        assert self._credential is not None
        auth = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        proof = _unb64(proof_text, "proof")
        signature = _hmac(self._name, self._credential.stored_key, auth)
        if len(proof) != len(signature):
            raise ScramError("the proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._name, client_key).digest(), self._credential.stored_key):
            raise ScramError("invalid credentials")
        self._state, self.done = 2, True
        return f"v={_b64(_hmac(self._name, self._credential.server_key, auth))}".encode()
