"""TLS listeners on a live broker: raw Kafka frames over Python's `ssl`, kcat over SSL, client certificates
(required, from another CA, expired, none), plaintext bytes on a TLS port, Metadata answering the endpoints of
the listener asked on, and a fetch of several MB (the copy path that replaces sendfile under TLS)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.daemon import free_port
from broker.protocol.api import ApiKey
from broker.security.certs import Pki
from tests.integration.cluster import BrokerProcess, new_chroot
from tests.integration.helpers import zk_session
from tests.integration.wire import (
    closed_by_broker,
    decode_answer,
    fetch_body,
    frame,
    make_batch,
    metadata_body,
    produce_body,
    read_frame,
    values_of,
)


class TlsBroker:
    def __init__(self, proc: BrokerProcess, ssl_port: int, mtls_port: int) -> None:
        self.proc, self.ssl_port, self.mtls_port = proc, ssl_port, mtls_port

    @property
    def port(self) -> int:
        return self.proc.port


@pytest.fixture(scope="module")
def tls_broker(zk_server, pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    """A broker with three listeners: PLAINTEXT, SSL (no client certificate asked) and MTLS (an SSL listener
    of another name whose `listener.name.mtls.` overrides require a client certificate)."""
    port, ssl_port, mtls_port = free_port(), free_port(), free_port()
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl_port},MTLS://127.0.0.1:{mtls_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
        "ssl.keystore.location": str(pki.keystore("broker")),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.truststore.location": str(pki.ca),
        "listener.name.mtls.ssl.key.password": "not-shown",  # (the key is not encrypted: unused, but secret)
        "connections.max.idle.ms": "4000",
        "num.partitions": "1",
    }
    chroot = new_chroot(zk_server.connect_string)
    with BrokerProcess(1, chroot, tmp_path_factory.mktemp("tls"), port=port, overrides=overrides) as b:
        yield TlsBroker(b, ssl_port, mtls_port)


def tls_socket(port: int, pki: Pki, cert: str | None = None, timeout: float = 15.0) -> ssl.SSLSocket:
    """A TLS connection that checks the broker's certificate against the CA (by its IP address SAN)."""
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        ctx.load_cert_chain(str(pki.cert(cert)), str(pki.key(cert)))
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def ask(s: socket.socket, api: int, version: int, body: dict, cid: int = 7) -> dict:
    s.sendall(frame(api, version, cid, body))
    data = read_frame(s)
    assert data is not None, "the broker closed the connection"
    got, answer = decode_answer(data, api, version)
    assert got == cid
    return answer


def brokers_seen(s: socket.socket) -> list[tuple[int, str, int]]:
    answer = ask(s, ApiKey.METADATA, 1, metadata_body([]))
    return [(b["node_id"], b["host"], b["port"]) for b in answer["brokers"]]


def refused(port: int, pki: Pki, cert: str | None) -> str:
    """How a TLS client with `cert` is refused: the handshake or its first request fails, nothing is answered."""
    try:
        s = tls_socket(port, pki, cert)
    except (ssl.SSLError, ConnectionError) as exc:
        return f"handshake: {exc}"
    with s:
        try:
            s.sendall(frame(ApiKey.API_VERSIONS, 0, 1, {}))
            data = read_frame(s)
        except (ssl.SSLError, ConnectionError) as exc:
            return f"first request: {exc}"
        assert data is None, "the broker answered a client it should have refused"
        return "closed"


def test_registration_has_every_listener(tls_broker: TlsBroker) -> None:
    with zk_session(tls_broker.proc.zk_connect) as zk:
        reg = json.loads(zk.get("/brokers/ids/1")[0])
    assert reg["version"] == 5
    assert reg["endpoints"] == [f"PLAINTEXT://127.0.0.1:{tls_broker.port}", f"SSL://127.0.0.1:{tls_broker.ssl_port}",
                                f"MTLS://127.0.0.1:{tls_broker.mtls_port}"]  # fmt: skip
    assert reg["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL", "MTLS": "SSL"}
    assert (reg["host"], reg["port"]) == ("127.0.0.1", tls_broker.port)
    line = [ln for ln in tls_broker.proc.log_text().splitlines() if "serving on" in ln][0]
    assert (f"127.0.0.1:{tls_broker.port} (PLAINTEXT), 127.0.0.1:{tls_broker.ssl_port} (SSL), "
            f"127.0.0.1:{tls_broker.mtls_port} (MTLS)") in line  # fmt: skip


def test_metadata_answers_the_endpoints_of_the_listener_asked_on(tls_broker: TlsBroker, pki: Pki) -> None:
    with tls_socket(tls_broker.ssl_port, pki) as s:
        assert ask(s, ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
        assert brokers_seen(s) == [(1, "127.0.0.1", tls_broker.ssl_port)]
        assert s.version() in ("TLSv1.2", "TLSv1.3")
    with tls_socket(tls_broker.mtls_port, pki, cert="client") as s:
        assert brokers_seen(s) == [(1, "127.0.0.1", tls_broker.mtls_port)]
    with socket.create_connection(("127.0.0.1", tls_broker.port), timeout=15) as s:
        assert brokers_seen(s) == [(1, "127.0.0.1", tls_broker.port)]


def test_a_fetch_of_several_megabytes_over_tls_returns_every_byte(tls_broker: TlsBroker, pki: Pki) -> None:
    """Produce 6 MB over TLS, fetch them back over TLS (file regions read and encrypted, not sendfile)."""
    topic = "tls-big"
    rng = os.urandom
    chunks = [[rng(100_000) for _ in range(9)] for _ in range(7)]  # 7 batches of 900 kB
    with tls_socket(tls_broker.ssl_port, pki) as s:
        ask(s, ApiKey.METADATA, 4, metadata_body([topic]))  # auto-created
        deadline = time.monotonic() + 15
        for values in chunks:
            while True:
                body = produce_body(topic, {0: make_batch(values)})
                [t] = ask(s, ApiKey.PRODUCE, 7, body)["topics"]
                code = t["partitions"][0]["error_code"]
                if code == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)  # (the new topic's leader not known yet)
            assert code == 0
        want = [v for values in chunks for v in values]
        got: list[bytes | None] = []
        while len(got) < len(want):
            body = fetch_body(topic, 0, len(got))
            body["max_bytes"] = body["topics"][0]["partitions"][0]["partition_max_bytes"] = 8 << 20
            [t] = ask(s, ApiKey.FETCH, 11, body)["topics"]
            [p] = t["partitions"]
            assert p["error_code"] == 0
            more = values_of(p["records"])
            assert more, f"nothing fetched at offset {len(got)}"
            got += more
    assert len(got) == len(want) and got == want


@pytest.mark.parametrize(
    ("cert", "logged"),
    [
        (None, "PEER_DID_NOT_RETURN_A_CERTIFICATE"),
        ("stranger", "CERTIFICATE_VERIFY_FAILED (unable to get local issuer certificate)"),
        ("expired", "CERTIFICATE_VERIFY_FAILED (certificate has expired)"),
    ],
)
def test_required_client_certificate_refuses_others(tls_broker: TlsBroker, pki: Pki, cert: str | None,
                                                    logged: str) -> None:  # fmt: skip
    refused(tls_broker.mtls_port, pki, cert)
    with tls_socket(tls_broker.mtls_port, pki, cert="client") as s:  # the broker goes on serving the others
        assert brokers_seen(s) == [(1, "127.0.0.1", tls_broker.mtls_port)]
    want = f"TLS handshake failed: {logged}"
    deadline = time.monotonic() + 5
    while want not in tls_broker.proc.log_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert want in tls_broker.proc.log_text()


def test_a_client_that_does_not_trust_the_broker_is_not_served(tls_broker: TlsBroker, pki: Pki) -> None:
    ctx = ssl.create_default_context(cafile=str(pki.cert("other-ca")))
    with socket.create_connection(("127.0.0.1", tls_broker.ssl_port), timeout=15) as raw:
        with pytest.raises(ssl.SSLCertVerificationError):
            ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    with tls_socket(tls_broker.ssl_port, pki) as s:
        assert brokers_seen(s) == [(1, "127.0.0.1", tls_broker.ssl_port)]


def test_plaintext_bytes_on_the_tls_port_close_only_that_connection(tls_broker: TlsBroker, pki: Pki) -> None:
    with tls_socket(tls_broker.ssl_port, pki) as other:  # opened before, still served after
        with socket.create_connection(("127.0.0.1", tls_broker.ssl_port), timeout=15) as s:
            s.sendall(frame(ApiKey.API_VERSIONS, 0, 1, {}))
            assert closed_by_broker(s)
        assert brokers_seen(other) == [(1, "127.0.0.1", tls_broker.ssl_port)]
    lines = [ln for ln in tls_broker.proc.log_text().splitlines() if "TLS handshake failed" in ln]
    assert lines and "Traceback" not in tls_broker.proc.log_text()


def test_a_client_that_closes_gets_close_notify_back(tls_broker: TlsBroker, pki: Pki) -> None:
    """An orderly end of a TLS connection is a TLS one: the client's close_notify is answered by the broker's
    (`unwrap` raises when the socket closes without it)."""
    with tls_socket(tls_broker.ssl_port, pki) as s:
        assert brokers_seen(s) == [(1, "127.0.0.1", tls_broker.ssl_port)]
        s.unwrap().close()
    assert "Traceback" not in tls_broker.proc.log_text()


def test_a_client_that_never_finishes_its_handshake_is_closed(tls_broker: TlsBroker) -> None:
    with socket.create_connection(("127.0.0.1", tls_broker.ssl_port), timeout=15) as s:
        s.sendall(b"\x16\x03\x01\x00\x50")  # the start of a ClientHello, and then nothing
        started = time.monotonic()
        assert closed_by_broker(s, timeout=15)
        assert time.monotonic() - started < 12  # connections.max.idle.ms=4000 (or the 10 s handshake bound)


def test_kcat_over_ssl_produces_and_consumes(tls_broker: TlsBroker, pki: Pki, tmp_path: Path) -> None:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        pytest.skip("kcat is not installed")
    topic = "tls-kcat"
    common = [kcat, "-b", f"127.0.0.1:{tls_broker.ssl_port}", "-X", "security.protocol=ssl",
              "-X", f"ssl.ca.location={pki.ca}", "-t", topic]  # fmt: skip
    lines = [f"message-{i}" for i in range(200)]
    subprocess.run([*common, "-P"], input="\n".join(lines) + "\n", text=True, check=True, timeout=60)
    out = subprocess.run([*common, "-C", "-o", "beginning", "-e", "-q"], capture_output=True, text=True,
                         check=True, timeout=60)  # fmt: skip
    assert out.stdout.splitlines() == lines
    # and with a client certificate on the listener that requires one
    mtls = [kcat, "-b", f"127.0.0.1:{tls_broker.mtls_port}", "-X", "security.protocol=ssl",
            "-X", f"ssl.ca.location={pki.ca}", "-X", f"ssl.certificate.location={pki.cert('client')}",
            "-X", f"ssl.key.location={pki.key('client')}", "-t", topic]  # fmt: skip
    out = subprocess.run([*mtls, "-C", "-o", "beginning", "-e", "-q"], capture_output=True, text=True,
                         check=True, timeout=60)  # fmt: skip
    assert out.stdout.splitlines() == lines


def test_describe_configs_never_shows_a_password(tls_broker: TlsBroker) -> None:
    body = {"resources": [{"resource_type": 4, "resource_name": "1", "configuration_keys": None}],
            "include_synonyms": False}  # fmt: skip
    with socket.create_connection(("127.0.0.1", tls_broker.port), timeout=15) as s:
        [res] = ask(s, ApiKey.DESCRIBE_CONFIGS, 1, body)["results"]
    configs = {c["name"]: c for c in res["configs"]}
    secret = configs["listener.name.mtls.ssl.key.password"]
    assert (secret["value"], secret["is_sensitive"]) == (None, True)
    assert configs["listener.name.mtls.ssl.client.auth"]["value"] == "required"
    assert "not-shown" not in json.dumps(res)


def test_two_brokers_replicate_over_mutual_tls(zk_server, pki: Pki, tmp_path: Path) -> None:
    """`inter.broker.listener.name=SSL` with client certificates required: each follower fetches over TLS with
    the broker's own certificate, so a replicated topic takes acks=all writes and both stay in sync. Broker 2
    also has a listener broker 1 lacks: a Metadata asked there lists broker 2 only (as Kafka)."""
    from broker.client.connection import Connection
    from tests.integration.helpers import wait_until

    chroot = new_chroot(zk_server.connect_string)
    brokers, ssl_ports = [], {}
    try:
        for broker_id in (1, 2):
            port, ssl_ports[broker_id], extra = free_port(), free_port(), free_port()
            listeners = f"PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl_ports[broker_id]}"
            overrides = {
                "listeners": listeners + (f",EXTRA://127.0.0.1:{extra}" if broker_id == 2 else ""),
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,EXTRA:PLAINTEXT",
                "inter.broker.listener.name": "SSL", "ssl.client.auth": "required",
                "ssl.keystore.location": str(pki.keystore("broker")), "ssl.truststore.location": str(pki.ca),
            }  # fmt: skip
            brokers.append(BrokerProcess(broker_id, chroot, tmp_path / f"b{broker_id}", port=port,
                                         overrides=overrides).start())  # fmt: skip
        topic = "over-tls"
        with Connection("127.0.0.1", brokers[0].port, timeout=15) as conn:
            body = {"topics": [{"name": topic, "num_partitions": 2, "replication_factor": 2, "assignments": [],
                                "configs": []}], "timeout_ms": 10000, "validate_only": False}  # fmt: skip
            [t] = conn.request(ApiKey.CREATE_TOPICS, body)["topics"]
            assert t["error_code"] == 0, t

            def leaders() -> dict[int, int] | None:
                [t] = conn.request(ApiKey.METADATA, metadata_body([topic]))["topics"]
                got = {p["partition_index"]: p["leader_id"] for p in t["partitions"]}
                return got if len(got) == 2 and all(x in (1, 2) for x in got.values()) else None

            lead = wait_until(leaders, 15, "leaders of both partitions")
        values = {p: [f"p{p}-{i}".encode() for i in range(50)] for p in (0, 1)}
        for p, leader in lead.items():
            with Connection("127.0.0.1", brokers[leader - 1].port, timeout=15) as conn:

                def stored(p: int = p, conn: Connection = conn) -> bool:  # (until the follower has joined)
                    answer = conn.request(ApiKey.PRODUCE, produce_body(topic, {p: make_batch(values[p])}, acks=-1))
                    return answer["topics"][0]["partitions"][0]["error_code"] == 0

                wait_until(stored, 20, f"an acks=all produce to {topic}-{p}")
        with Connection("127.0.0.1", brokers[0].port, timeout=15) as conn:

            def in_sync() -> bool:
                [t] = conn.request(ApiKey.METADATA, metadata_body([topic]))["topics"]
                return all(sorted(p["isr_nodes"]) == [1, 2] for p in t["partitions"])

            wait_until(in_sync, 30, "both brokers in sync over TLS")  # (a follower joins once it has it all)
        with socket.create_connection(("127.0.0.1", brokers[1].port), timeout=15) as s:
            assert [b[0] for b in brokers_seen(s)] == [1, 2]
        extra_port = int(brokers[1].overrides["listeners"].rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", extra_port), timeout=15) as s:
            assert brokers_seen(s) == [(2, "127.0.0.1", extra_port)]  # broker 1 has no EXTRA listener
        with tls_socket(ssl_ports[1], pki, cert="client") as s:
            assert brokers_seen(s) == [(1, "127.0.0.1", ssl_ports[1]), (2, "127.0.0.1", ssl_ports[2])]
        for b in brokers:
            assert "TLS handshake failed" not in b.log_text() and "Traceback" not in b.log_text()
    finally:
        for b in brokers:
            b.stop()
