"""`ClientSecurity.from_properties`: librdkafka's names read and checked, one clear error per bad value; the
SASL exchange's tokens (PLAIN's, and SCRAM's against the broker's own server side)."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest

from broker.client import security
from broker.client.security import ClientSecurity, SaslExchange, SecurityError, pop_security
from broker.errors import KafkactlError, UsageError
from broker.security.scram import ScramServer, make_credential


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A self-signed certificate and its key (PEM), made with openssl."""
    d = tmp_path_factory.mktemp("pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-keyout", d / "key.pem", "-out", d / "cert.pem"], check=True, capture_output=True)  # fmt: skip
    return {"cert": d / "cert.pem", "key": d / "key.pem"}


def test_the_default_is_plaintext_and_unknown_keys_are_not_its_business():
    sec = ClientSecurity.from_properties({"linger.ms": "5", "bootstrap.servers": "x:1"})
    assert sec == ClientSecurity() and not sec.tls and not sec.sasl
    assert sec.to_properties() == {}


def test_librdkafka_names_are_read_case_insensitively(pem: dict[str, Path]):
    sec = ClientSecurity.from_properties({
        "security.protocol": "sasl_ssl", "sasl.mechanism": "scram-sha-512", "sasl.username": "alice",
        "sasl.password": "s3cret", "ssl.ca.location": str(pem["cert"]),
        "ssl.endpoint.identification.algorithm": "none",
    })  # fmt: skip
    assert (sec.protocol, sec.mechanism, sec.username, sec.password) == ("SASL_SSL", "SCRAM-SHA-512", "alice", "s3cret")
    assert sec.tls and sec.sasl and sec.endpoint_identification == "none"
    assert "s3cret" not in repr(sec)
    assert ClientSecurity.from_properties(sec.to_properties()) == sec  # what executors are given reads back
    assert "sasl.password" not in sec.to_properties(secrets=False)
    assert ClientSecurity.from_properties({"ssl.endpoint.identification.algorithm": ""}).endpoint_identification == (
        "none"
    )


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"security.protocol": "TLS"}, "security.protocol='TLS': expected one of PLAINTEXT, SSL, SASL_PLAINTEXT"),
        ({"sasl.mechanism": "GSSAPI"}, "sasl.mechanism='GSSAPI': expected one of PLAIN, SCRAM-SHA-256"),
        ({"ssl.endpoint.identification.algorithm": "dns"}, "ssl.endpoint.identification.algorithm='dns'"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "a"}, "needs sasl.username and sasl.password"),
        ({"security.protocol": "SASL_SSL"}, "needs sasl.username and sasl.password"),
        ({"ssl.ca.location": "/nonexistent/ca.pem"}, "ssl.ca.location: cannot read /nonexistent/ca.pem"),
        ({"ssl.certificate.location": "/nonexistent/c.pem"}, "ssl.certificate.location: cannot read /nonexistent"),
    ],
)
def test_a_bad_value_is_one_usage_error_naming_its_key(props: dict[str, str], message: str):
    with pytest.raises(UsageError) as err:
        ClientSecurity.from_properties(props)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_key_without_its_certificate_is_refused(pem: dict[str, Path]):
    with pytest.raises(UsageError, match="ssl.key.location needs ssl.certificate.location"):
        ClientSecurity.from_properties({"ssl.key.location": str(pem["key"])})


def test_the_ssl_context_is_made_once_and_trusts_the_ca_given(pem: dict[str, Path]):
    sec = ClientSecurity.from_properties({"security.protocol": "SSL", "ssl.ca.location": str(pem["cert"]),
                                          "ssl.certificate.location": str(pem["cert"]),
                                          "ssl.key.location": str(pem["key"])})  # fmt: skip
    ctx = sec.ssl_context()
    assert ctx is sec.ssl_context() and ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert any(c["subject"] == ((("commonName", "localhost"),),) for c in ctx.get_ca_certs())
    unchecked = ClientSecurity.from_properties({"security.protocol": "SSL", "ssl.ca.location": str(pem["cert"]),
                                                "ssl.endpoint.identification.algorithm": "none"})  # fmt: skip
    assert not unchecked.ssl_context().check_hostname


def test_a_file_that_is_not_pem_names_the_file(tmp_path: Path, pem: dict[str, Path]):
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(UsageError, match=f"ssl.ca.location: cannot load {junk}"):
        ClientSecurity.from_properties({"security.protocol": "SSL", "ssl.ca.location": str(junk)}).ssl_context()
    with pytest.raises(UsageError, match=f"ssl.certificate.location: cannot load {junk}"):
        ClientSecurity.from_properties({"ssl.certificate.location": str(junk)}).ssl_context()


def test_pop_security_takes_only_the_security_keys():
    props = {"linger.ms": "5", "security.protocol": "SSL", "sasl.username": "u", "acks": "all"}
    assert pop_security(props) == {"security.protocol": "SSL", "sasl.username": "u"}
    assert props == {"linger.ms": "5", "acks": "all"}


def test_the_process_default_and_merging():
    before = security.default()
    try:
        sec = ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "a",
                                              "sasl.password": "b"})  # fmt: skip
        security.set_default(sec)
        assert security.default() is sec
        assert sec.merged({"sasl.password": "c"}).password == "c"
        assert sec.merged({"sasl.password": "c"}).username == "a"
    finally:
        security.set_default(before)


def test_plain_sends_one_token():
    sec = ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "alice",
                                          "sasl.password": "pw"})  # fmt: skip
    exchange = SaslExchange(sec, "h:1")
    assert exchange.first() == b"\0alice\0pw"
    assert exchange.next(b"") is None


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_against_the_brokers_side(mechanism: str):
    credential = make_credential(mechanism, "alice-secret", 4096)
    sec = ClientSecurity.from_properties({"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
                                          "sasl.username": "alice", "sasl.password": "alice-secret"})  # fmt: skip
    server = ScramServer(mechanism, lambda user: credential if user == "alice" else None)
    exchange = SaslExchange(sec, "h:1")
    token = exchange.first()
    while token is not None:
        token = exchange.next(server.step(token))
    assert server.done and server.username == "alice"


def test_a_refusal_is_one_line_naming_user_host_and_error():
    sec = ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "alice",
                                          "sasl.password": "wrong"})  # fmt: skip
    exchange = SaslExchange(sec, "127.0.0.1:9093")
    with pytest.raises(SecurityError) as err:
        exchange.check_authenticate({"error_code": 58, "error_message": "Invalid username or password"})
    assert str(err.value) == ("authentication failed for user 'alice' at 127.0.0.1:9093 "
                              "(SASL_AUTHENTICATION_FAILED: Invalid username or password)")  # fmt: skip
    with pytest.raises(SecurityError, match="UNSUPPORTED_SASL_MECHANISM: the broker offers PLAIN, not"):
        exchange.check_handshake({"error_code": 33, "mechanisms": ["PLAIN"]})


def test_a_forged_scram_server_signature_is_refused():
    sec = ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                                          "sasl.username": "alice", "sasl.password": "pw"})  # fmt: skip
    credential = make_credential("SCRAM-SHA-256", "pw", 4096)
    server = ScramServer("SCRAM-SHA-256", lambda user: credential)
    exchange = SaslExchange(sec, "h:1")
    final = exchange.next(server.step(exchange.first()))
    assert final is not None
    server.step(final)
    with pytest.raises(SecurityError, match="authentication failed for user 'alice' at h:1 \\(SCRAM: "):
        exchange.next(b"v=" + b"QUFBQQ==")


def test_a_broker_connects_to_the_others_as_its_inter_broker_listener_says(pem: dict[str, Path]):
    from broker.client.security import inter_broker_security
    from broker.server.config import BrokerConfig

    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="adm\\"in";'
    config = BrokerConfig.load(None, {
        "listeners": "PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL", "ssl.keystore.location": str(pem["cert"]),
        "listener.name.internal.ssl.truststore.location": str(pem["cert"]),
        "ssl.endpoint.identification.algorithm": "", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config": jaas,
    })  # fmt: skip
    sec = inter_broker_security(config)
    assert (sec.protocol, sec.mechanism, sec.username, sec.password) == ("SASL_SSL", "SCRAM-SHA-512", "admin", 'adm"in')
    assert sec.ca_location == sec.certificate_location == str(pem["cert"]) and sec.endpoint_identification == "none"
    assert inter_broker_security(BrokerConfig.load(None, {})) == ClientSecurity()
    no_jaas = BrokerConfig.load(None, {"listeners": "SASL_PLAINTEXT://127.0.0.1:9092",
                                       "security.inter.broker.protocol": "SASL_PLAINTEXT"})  # fmt: skip
    with pytest.raises(KafkactlError, match='needs username="..." password="..." in listener.name.sasl_plaintext'):
        inter_broker_security(no_jaas)
