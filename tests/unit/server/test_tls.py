"""The broker's TLS contexts from PEM files (and the one-line errors of bad ones), and a client certificate's
principal as Kafka's DEFAULT mapping writes it (RFC 2253)."""

from __future__ import annotations

import shutil
import ssl
from pathlib import Path

import pytest

from broker.errors import KafkactlError
from broker.security.certs import Pki, make_pki
from broker.server.config import BrokerConfig
from broker.server.tls import principal, rfc2253, server_context


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_of(**keys: str):
    props = {"listeners": "PLAINTEXT://:9092,SSL://:9093", **{k.replace("_", "."): v for k, v in keys.items()}}
    return BrokerConfig.load(None, props).tls("SSL")


def test_server_context(pki: Pki) -> None:
    keystore = str(pki.keystore("broker"))
    ctx = server_context("SSL", tls_of(ssl_keystore_location=keystore))
    assert ctx.verify_mode == ssl.CERT_NONE
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2 and ctx.maximum_version == ssl.TLSVersion.TLSv1_3
    ca = str(pki.ca)
    ctx = server_context("SSL", tls_of(ssl_keystore_location=keystore, ssl_client_auth="required",
                                       ssl_truststore_location=ca, ssl_enabled_protocols="TLSv1.3"))  # fmt: skip
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    ctx = server_context("SSL", tls_of(ssl_keystore_location=keystore, ssl_client_auth="requested",
                                       ssl_truststore_location=str(pki.ca)))  # fmt: skip
    assert ctx.verify_mode == ssl.CERT_OPTIONAL


def test_bad_files_are_one_clear_error(pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(KafkactlError, match=r"listener SSL: ssl.keystore.location=.*nope.pem: cannot read it"):
        server_context("SSL", tls_of(ssl_keystore_location=str(tmp_path / "nope.pem")))
    with pytest.raises(KafkactlError, match="not a PEM certificate chain with its private key"):
        server_context("SSL", tls_of(ssl_keystore_location=str(pki.ca)))  # a certificate without its key
    with pytest.raises(KafkactlError, match="ssl.client.auth=required needs ssl.truststore.location"):
        server_context("SSL", tls_of(ssl_keystore_location=str(pki.keystore("broker")), ssl_client_auth="required"))
    with pytest.raises(KafkactlError, match="ssl.cipher.suites=NOPE: no cipher OpenSSL knows"):
        server_context("SSL", tls_of(ssl_keystore_location=str(pki.keystore("broker")), ssl_cipher_suites="NOPE"))


def test_principal_of_a_real_certificate(pki: Pki) -> None:
    decoded = ssl._ssl._test_decode_cert(str(pki.cert("client")))  # the dict getpeercert() gives
    assert principal(decoded) == "User:CN=client,OU=test,O=kafkactl"
    assert principal(None) is None and principal({}) is None


def test_rfc2253() -> None:
    subject = ((("countryName", "US"),), (("organizationName", "acme, inc"),), (("commonName", " bob"),))
    assert rfc2253(subject) == "CN=\\ bob,O=acme\\, inc,C=US"
    assert rfc2253(((("commonName", "a"), ("userId", "u1")),)) == "CN=a+UID=u1"
    assert rfc2253(((("emailAddress", "a@b.c"),),)) == "1.2.840.113549.1.9.1=#16056140622e63"
    assert rfc2253(((("commonName", "#x;y "),),)) == "CN=\\#x\\;y\\ "
