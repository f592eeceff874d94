"""How kafkactl's clients reach a secured broker: TLS on the socket and SASL before any other request.

Settings go by librdkafka's names (`security.protocol`, `ssl.ca.location`, `sasl.mechanism`, ...), so the
same properties work for kcat, confluent-kafka and kafkactl. `ClientSecurity` holds them, checked; the
process-wide default (`default()`, set once by the CLI from its context and `-X` keys) is what every
connection opened with `security=None` uses. After connecting (and ApiVersions) a SASL client sends
SaslHandshake v1 naming its mechanism, then the mechanism's tokens in SaslAuthenticate v1 requests:
PLAIN's one token is `\\0username\\0password` (RFC 4616); SCRAM's are RFC 5802's client-first and
client-final messages, the server's last answer checked before the connection is used.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import ssl
from dataclasses import dataclass
from typing import Any

from broker.errors import KafkactlError, UsageError
from broker.protocol.errors import ErrorCode, error_name
from broker.security.session import PROTOCOLS

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

#: librdkafka's name of each setting → ClientSecurity's field
KEYS = {
    "security.protocol": "protocol",
    "ssl.ca.location": "ca_location",
    "ssl.certificate.location": "certificate_location",
    "ssl.key.location": "key_location",
    "ssl.key.password": "key_password",
    "ssl.endpoint.identification.algorithm": "endpoint_identification",
    "sasl.mechanism": "mechanism",
    "sasl.username": "username",
    "sasl.password": "password",
}
#: settings never shown (`kafkactl config`, repr)
SECRETS = frozenset({"ssl.key.password", "sasl.password"})


@dataclass(frozen=True)
class ClientSecurity:
    """One client's security settings (librdkafka's, under Python names); PLAINTEXT by default."""

    protocol: str = "PLAINTEXT"  # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    ca_location: str | None = None  # PEM file (or directory) of the CAs trusted; None: the system's
    certificate_location: str | None = None  # the client's certificate (PEM), for brokers with ssl.client.auth
    key_location: str | None = None  # its private key (PEM); None: in the certificate's file
    key_password: str | None = dataclasses.field(default=None, repr=False)
    endpoint_identification: str = "https"  # https: the broker's certificate must name its host; none: not checked
    mechanism: str = "PLAIN"  # PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)

    @property
    def tls(self) -> bool:
        return PROTOCOLS[self.protocol][0]

    @property
    def sasl(self) -> bool:
        return PROTOCOLS[self.protocol][1]

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> ClientSecurity:
        """The security settings among `props` (other keys are left alone); a bad value is a UsageError
        naming its key, a file that cannot be read one naming the file."""
        values: dict[str, Any] = {}
        for key, field in KEYS.items():
            text = props.get(key)
            if text is None:
                continue
            text = text.strip()
            if field == "protocol":
                text = text.upper()
                if text not in PROTOCOLS:
                    raise UsageError(f"security.protocol={text!r}: expected one of {', '.join(PROTOCOLS)}")
            elif field == "mechanism":
                text = text.upper()
                if text not in MECHANISMS:
                    raise UsageError(f"sasl.mechanism={text!r}: expected one of {', '.join(MECHANISMS)}")
            elif field == "endpoint_identification":
                text = text.lower() or "none"
                if text not in ("https", "none"):
                    raise UsageError(f"ssl.endpoint.identification.algorithm={text!r}: expected https or none")
            elif field.endswith("_location"):
                if not text:
                    continue
                _check_readable(key, text)
            values[field] = text
        sec = cls(**values)
        if sec.sasl and (not sec.username or sec.password is None):
            raise UsageError(f"security.protocol={sec.protocol} needs sasl.username and sasl.password")
        if sec.key_location and not sec.certificate_location:
            raise UsageError("ssl.key.location needs ssl.certificate.location")
        return sec

    def to_properties(self, *, secrets: bool = True) -> dict[str, str]:
        """The settings that differ from the defaults, by librdkafka's names (what `from_properties` reads
        back; without the password and key password unless `secrets`)."""
        plain = ClientSecurity()
        out = {}
        for key, field in KEYS.items():
            value = getattr(self, field)
            if value != getattr(plain, field) and (secrets or key not in SECRETS):
                out[key] = value
        return out

    def merged(self, props: dict[str, str]) -> ClientSecurity:
        """These settings with those of `props` on top."""
        return ClientSecurity.from_properties({**self.to_properties(), **props})

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context of these settings (made once)."""
        return _ssl_context(self)


def _check_readable(key: str, path: str) -> None:
    if os.path.isdir(path) and key == "ssl.ca.location":
        return
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as exc:
        raise UsageError(f"{key}: cannot read {path}: {exc.strerror or exc}") from None


@functools.lru_cache(maxsize=16)
def _ssl_context(sec: ClientSecurity) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    try:
        if sec.ca_location:
            if os.path.isdir(sec.ca_location):
                ctx.load_verify_locations(capath=sec.ca_location)
            else:
                ctx.load_verify_locations(cafile=sec.ca_location)
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"ssl.ca.location: cannot load {sec.ca_location}: {_reason(exc)}") from None
    if sec.certificate_location:
        try:
            ctx.load_cert_chain(sec.certificate_location, sec.key_location or None, password=sec.key_password)
        except (OSError, ssl.SSLError) as exc:
            files = " and ".join(f for f in (sec.certificate_location, sec.key_location) if f)
            raise UsageError(f"ssl.certificate.location: cannot load {files}: {_reason(exc)}") from None
    ctx.check_hostname = sec.endpoint_identification == "https"
    return ctx


def _reason(exc: BaseException) -> str:
    """An ssl error's own words (`certificate verify failed: self-signed certificate`), not its repr."""
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        return f"certificate verify failed: {exc.verify_message}"
    if isinstance(exc, ssl.SSLEOFError | ConnectionResetError | BrokenPipeError) or "UNEXPECTED_EOF" in str(
        getattr(exc, "reason", "")
    ):
        return "the broker hung up during the handshake (not a TLS listener?)"
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason).replace("_", " ").lower()
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


class SecurityError(KafkactlError):
    """A broker that refused this client's credentials, or whose certificate this client refused."""


def tls_failed(where: str, exc: BaseException) -> SecurityError:
    """The one error of a TLS handshake that failed (an untrusted, expired or misnamed certificate, ...)."""
    return SecurityError(f"TLS handshake with {where} failed: {_reason(exc)}")


def closed_hint(sec: ClientSecurity, early: bool) -> str:
    """What to add to "the broker closed the connection" when it did so `early` (while connecting, or at
    the first request after) to a client without TLS or SASL: likely a listener that expects them."""
    if early and sec.protocol == "PLAINTEXT":
        return " (an SSL or SASL listener? this client's security.protocol is PLAINTEXT)"
    return ""


def pop_security(props: dict[str, str]) -> dict[str, str]:
    """Take the security settings out of `props` (a producer's or consumer's `-X` keys) and return them."""
    return {key: props.pop(key) for key in list(props) if key in KEYS}


_default = ClientSecurity()


def default() -> ClientSecurity:
    """The settings of connections opened without any (the CLI sets them from its context and `-X`)."""
    return _default


def set_default(sec: ClientSecurity) -> None:
    global _default
    _default = sec


def inter_broker_security(config: Any) -> ClientSecurity:
    """How a broker (a `BrokerConfig`) connects to the others: its inter-broker listener's protocol, TLS with
    its truststore as CA and its keystore as client certificate, SASL with
    `sasl.mechanism.inter.broker.protocol` and the `username`/`password` of that listener's JAAS config."""
    from broker.security.sasl import jaas_options

    listener = config.inter_broker_listener
    protocol = listener.protocol
    values: dict[str, Any] = {"protocol": protocol}
    if PROTOCOLS[protocol][0]:
        tls = config.tls(listener.name)
        values.update(ca_location=tls.truststore, certificate_location=tls.keystore, key_password=tls.key_password,
                      endpoint_identification=(tls.endpoint_identification or "none").lower())  # fmt: skip
    if PROTOCOLS[protocol][1]:
        mechanism = (config.props.get("sasl.mechanism.inter.broker.protocol") or "PLAIN").strip().upper()
        if mechanism not in MECHANISMS:
            raise KafkactlError(f"sasl.mechanism.inter.broker.protocol={mechanism}: expected one of "
                                f"{', '.join(MECHANISMS)}")  # fmt: skip
        options = jaas_options(config.jaas_config(listener.name, mechanism))
        if "username" not in options or "password" not in options:
            raise KafkactlError(f"the inter-broker listener {listener.name} ({protocol}, {mechanism}) needs "
                                f'username="..." password="..." in listener.name.{listener.name.lower()}.'
                                f"{mechanism.lower()}.sasl.jaas.config or sasl.jaas.config")  # fmt: skip
        values.update(mechanism=mechanism, username=options["username"], password=options["password"])
    return ClientSecurity(**values)


# -- SASL -------------------------------------------------------------------------------------------------


class SaslExchange:
    """The client side of one SASL authentication: `first()` is the first token, `next(answer)` the token
    after the broker's answer, None once the exchange is over (raising KafkactlError if it failed)."""

    def __init__(self, sec: ClientSecurity, where: str) -> None:
        self.sec, self.where = sec, where
        self._scram: Any = None
        self._final_sent = False

    def first(self) -> bytes:
        sec = self.sec
        if sec.mechanism == "PLAIN":
            return b"\0" + (sec.username or "").encode() + b"\0" + (sec.password or "").encode()
        from broker.security.scram import ScramClient  # the lead's SCRAM math

        self._scram = ScramClient(sec.mechanism, sec.username or "", sec.password or "")
        return self._scram.first_message()

    def next(self, answer: bytes) -> bytes | None:
        scram = self._scram
        if scram is None:
            return None
        from broker.security.scram import ScramError

        try:
            if not self._final_sent:
                self._final_sent = True
                return scram.final_message(answer)
            scram.verify_server_final(answer)
        except ScramError as exc:
            raise self.failed(f"SCRAM: {exc}") from None
        self._scram = None
        return None

    def failed(self, message: str) -> SecurityError:
        return SecurityError(f"authentication failed for user {self.sec.username!r} at {self.where} ({message})")

    def check_handshake(self, answer: dict[str, Any]) -> None:
        """A SaslHandshake answer: the broker must offer the mechanism asked for."""
        code = answer["error_code"]
        if code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
            offered = ", ".join(answer.get("mechanisms") or []) or "none"
            raise self.failed(f"{error_name(code)}: the broker offers {offered}, not {self.sec.mechanism}")
        if code:
            raise self.failed(f"{error_name(code)}: this listener does not take SASL (a PLAINTEXT or SSL one?)")

    def check_authenticate(self, answer: dict[str, Any]) -> bytes:
        """A SaslAuthenticate answer's token, or the error that it refused."""
        if answer["error_code"]:
            message = answer.get("error_message") or "no reason given"
            raise self.failed(f"{error_name(answer['error_code'])}: {message}")
        return bytes(answer.get("auth_bytes") or b"")  # (a decoded answer's bytes may be a memoryview)
