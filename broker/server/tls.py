"""TLS on the broker's listeners: a listener's server `ssl.SSLContext` from PEM files, and a client certificate's
principal.

The keystore is one PEM file holding the broker's certificate chain and its private key (`ssl.keystore.location`,
the key encrypted under `ssl.key.password` or not at all); the truststore a PEM bundle of the CAs client
certificates must chain to (`ssl.truststore.location`), used when `ssl.client.auth` is `requested` or
`required`. A client that presents a certificate is `User:<its subject DN>`, the DN written as RFC 2253 writes
it (the last RDN first, `CN=alice,OU=eng,O=acme`), which is what Kafka's DEFAULT principal mapping gives.
"""

from __future__ import annotations

import ssl
from typing import Any

from broker.errors import KafkactlError
from broker.server.config import TlsSettings

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}

#: the attribute keywords RFC 2253 names (Python's long names → them); others are written by OID, as Java does
_KEYWORDS = {
    "commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
    "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET", "domainComponent": "DC",
    "userId": "UID",
}  # fmt: skip
_OIDS = {"emailAddress": ("1.2.840.113549.1.9.1", 0x16)}  # (OID, the DER tag of its string: IA5String)


def server_context(listener: str, tls: TlsSettings) -> ssl.SSLContext:
    """The server context of a TLS listener; a missing or bad file is one clear error naming the key."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.options |= getattr(ssl, "OP_NO_RENEGOTIATION", 0)  # (TLS 1.2: a client's renegotiation is refused)
    versions = sorted(_VERSIONS[p] for p in tls.protocols)
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    where = f"listener {listener}: ssl.keystore.location={tls.keystore}"
    try:  # (a callback, never None: OpenSSL would prompt on the terminal for an encrypted key's password)
        ctx.load_cert_chain(tls.keystore or "", password=lambda: (tls.key_password or "").encode())
    except OSError as exc:
        if not isinstance(exc, ssl.SSLError):
            raise KafkactlError(f"{where}: cannot read it: {exc.strerror}") from None
        raise KafkactlError(f"{where}: not a PEM certificate chain with its private key, or the key does not open "
                            f"with ssl.key.password ({exc.reason or exc})") from None  # fmt: skip
    if tls.client_auth != "none":
        if not tls.truststore:
            raise KafkactlError(f"listener {listener}: ssl.client.auth={tls.client_auth} needs ssl.truststore.location "
                                "(a PEM bundle of the CAs client certificates are signed by)")  # fmt: skip
        try:
            ctx.load_verify_locations(cafile=tls.truststore)
        except (OSError, ssl.SSLError) as exc:
            raise KafkactlError(f"listener {listener}: ssl.truststore.location={tls.truststore}: "
                                f"{getattr(exc, 'strerror', None) or exc}") from None  # fmt: skip
        ctx.verify_mode = ssl.CERT_REQUIRED if tls.client_auth == "required" else ssl.CERT_OPTIONAL
    if tls.ciphers:
        try:
            ctx.set_ciphers(":".join(c.strip() for c in tls.ciphers.split(",") if c.strip()))
        except ssl.SSLError:
            raise KafkactlError(f"listener {listener}: ssl.cipher.suites={tls.ciphers}: no cipher OpenSSL knows "
                                "(give OpenSSL names, e.g. ECDHE-RSA-AES128-GCM-SHA256)") from None  # fmt: skip
    return ctx


def principal(cert: dict[str, Any] | None) -> str | None:
    """`User:<subject DN>` of a verified peer certificate (`SSLObject.getpeercert()`), or None without one."""
    if not cert or not cert.get("subject"):
        return None
    return "User:" + rfc2253(cert["subject"])


def rfc2253(subject: tuple) -> str:
    """A subject (Python's tuple of RDNs, each a tuple of (name, value)) as RFC 2253 writes it: the RDNs last
    first, joined by `,`; the attributes of one RDN joined by `+`."""
    return ",".join("+".join(_attribute(name, value) for name, value in rdn) for rdn in reversed(subject))


def _attribute(name: str, value: str) -> str:
    if name in _KEYWORDS:
        return f"{_KEYWORDS[name]}={_escape(value)}"
    if name in _OIDS:  # OID=#<hex of the value's DER encoding>
        oid, tag = _OIDS[name]
        data = value.encode()
        return f"{oid}=#{bytes([tag, *_der_length(len(data))]).hex()}{data.hex()}"
    return f"{name}={_escape(value)}"


def _der_length(n: int) -> list[int]:
    if n < 0x80:
        return [n]
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return [0x80 | len(raw), *raw]


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out
