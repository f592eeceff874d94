"""kcat, confluent-kafka, kafka-python and aiokafka, unmodified, over SSL, SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512) and SASL_SSL against a live broker: every key, value, header and offset that goes in comes back;
a wrong password and a broker certificate the client does not trust are refused, and nothing is stored."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from aiokafka.helpers import create_ssl_context
from confluent_kafka import Consumer as CfConsumer
from confluent_kafka import Producer as CfProducer
from confluent_kafka import TopicPartition as CfTopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from broker.daemon import free_port
from broker.protocol.api import ApiKey
from broker.security import credentials
from broker.security.certs import Pki
from broker.security.scram import make_credential
from broker.server.broker_logging import REPEATS_ENV
from tests.integration.cluster import BrokerProcess, new_chroot
from tests.integration.helpers import connect, wait_until, zk_session
from tests.integration.wire import create_topic, latest_offset

KCAT = "/usr/bin/kcat"
USER, PASSWORD = "alice", "alice-secret"
PARTITIONS, PER_PARTITION = 2, 10
DEADLINE = 30.0

#: mode → (listener, security.protocol, SASL mechanism or None)
MODES = {
    "SSL": ("SSL", "SSL", None),
    "SASL_PLAINTEXT-PLAIN": ("SASL_PLAINTEXT", "SASL_PLAINTEXT", "PLAIN"),
    "SASL_PLAINTEXT-SCRAM-SHA-256": ("SASL_PLAINTEXT", "SASL_PLAINTEXT", "SCRAM-SHA-256"),
    "SASL_PLAINTEXT-SCRAM-SHA-512": ("SASL_PLAINTEXT", "SASL_PLAINTEXT", "SCRAM-SHA-512"),
    "SASL_SSL-SCRAM-SHA-512": ("SASL_SSL", "SASL_SSL", "SCRAM-SHA-512"),
    "SASL_SSL-PLAIN": ("SASL_SSL", "SASL_SSL", "PLAIN"),
}
CLIENTS = ["kcat", "confluent-kafka", "kafka-python", "aiokafka"]


class SecureBroker:
    def __init__(self, proc: BrokerProcess, ports: dict[str, int], pki: Pki) -> None:
        self.proc, self.ports, self.pki = proc, ports, pki

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


@pytest.fixture(scope="module")
def secure_broker(zk_server, pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    """One broker with a PLAINTEXT, an SSL, a SASL_PLAINTEXT and a SASL_SSL listener; alice has SCRAM
    credentials for both mechanisms (and PLAIN checks against them)."""
    chroot = new_chroot(zk_server.connect_string)
    with zk_session(chroot) as zk:
        creds = {m: make_credential(m, PASSWORD) for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}
        credentials.write_user(zk, USER, creds)
    ports = {name: free_port() for name in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}
    overrides = {
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.keystore("broker")),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
    }
    # every refused login logged (the tests look for each; the broker's default keeps 10 lines a minute of one kind)
    with BrokerProcess(1, chroot, tmp_path_factory.mktemp("secure"), port=ports["PLAINTEXT"],
                       overrides=overrides, env={REPEATS_ENV: "0"}) as b:  # fmt: skip
        yield SecureBroker(b, ports, pki)


def messages() -> list[tuple[int, bytes, bytes, list[tuple[str, bytes]]]]:
    """(partition, key, value, headers) for every message a test sends."""
    return [(p, f"k{p}-{i}".encode(), f"value {p}/{i} {uuid.uuid4().hex}".encode(), [("h", f"{i}".encode())])
            for p in range(PARTITIONS) for i in range(PER_PARTITION)]  # fmt: skip


def fresh_topic(b: SecureBroker) -> str:
    topic = f"secure-{uuid.uuid4().hex[:10]}"
    with connect(b.bootstrap("PLAINTEXT")) as conn:
        create_topic(conn, topic, PARTITIONS)
    return topic


def stored(b: SecureBroker, topic: str) -> list[int]:
    """Each partition's log end offset, asked on the plaintext listener."""
    with connect(b.bootstrap("PLAINTEXT")) as conn:
        return [latest_offset(conn, topic, p) for p in range(PARTITIONS)]


# --- each client's settings --------------------------------------------------------------------------


def librdkafka_conf(b: SecureBroker, mode: str, password: str = PASSWORD, ca: str | None = None) -> dict[str, str]:
    listener, protocol, mechanism = MODES[mode]
    conf = {"bootstrap.servers": b.bootstrap(listener), "security.protocol": protocol}
    if "SSL" in protocol:
        conf["ssl.ca.location"] = ca or str(b.pki.ca)
    if mechanism:
        conf.update({"sasl.mechanisms": mechanism, "sasl.username": USER, "sasl.password": password})
    return conf


def python_conf(b: SecureBroker, mode: str, password: str = PASSWORD, ca: str | None = None,
                aio: bool = False) -> dict[str, Any]:  # fmt: skip
    listener, protocol, mechanism = MODES[mode]
    conf: dict[str, Any] = {"bootstrap_servers": b.bootstrap(listener), "security_protocol": protocol}
    if "SSL" in protocol:
        if aio:
            conf["ssl_context"] = create_ssl_context(cafile=ca or str(b.pki.ca))
        else:
            conf.update({"ssl_cafile": ca or str(b.pki.ca), "ssl_check_hostname": True})
    if mechanism:
        conf.update({"sasl_mechanism": mechanism, "sasl_plain_username": USER, "sasl_plain_password": password})
    return conf


# --- produce and consume with each client ---------------------------------------------------------------


def via_kcat(b: SecureBroker, mode: str, topic: str, msgs: list, **kw: Any) -> list[tuple]:
    conf = librdkafka_conf(b, mode, **kw)
    props = [a for k, v in conf.items() if k != "bootstrap.servers" for a in ("-X", f"{k}={v}")]
    base = [KCAT, "-b", conf["bootstrap.servers"], *props, "-X", "message.timeout.ms=4000"]
    for p, key, value, headers in msgs:
        argv = [*base, "-P", "-t", topic, "-p", str(p), "-K", "\t"]
        for name, v in headers:
            argv += ["-H", f"{name}={v.decode()}"]
        done = subprocess.run(argv, input=key + b"\t" + value + b"\n", capture_output=True, timeout=DEADLINE)
        if done.returncode != 0 or b"ERROR" in done.stderr:
            raise RuntimeError(done.stderr.decode(errors="replace"))
    out = subprocess.run([*base, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-J", "-X", "fetch.wait.max.ms=100"],
                         capture_output=True, timeout=DEADLINE)  # fmt: skip
    got = []
    for line in out.stdout.decode().splitlines():
        j = json.loads(line)
        h = j.get("headers") or []
        headers = [(h[i], h[i + 1].encode()) for i in range(0, len(h), 2)]
        got.append((j["partition"], j["offset"], j["key"].encode(), j["payload"].encode(), headers))
    return got


def via_confluent(b: SecureBroker, mode: str, topic: str, msgs: list, **kw: Any) -> list[tuple]:
    conf = librdkafka_conf(b, mode, **kw)
    errors: list[str] = []
    producer = CfProducer({**conf, "message.timeout.ms": 4000, "error_cb": lambda e: errors.append(str(e))})
    failed: list[str] = []
    for p, key, value, headers in msgs:
        producer.produce(topic, value=value, key=key, partition=p, headers=headers,
                         on_delivery=lambda err, m: err and failed.append(str(err)))  # fmt: skip
    left = producer.flush(DEADLINE)
    if left or failed:
        raise RuntimeError(f"{left} unsent; {failed[:1]} {errors[:2]}")
    consumer = CfConsumer({**conf, "group.id": f"unused-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                           "auto.offset.reset": "earliest"})  # fmt: skip
    got = []
    try:
        consumer.assign([CfTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + DEADLINE
        while len(got) < len(msgs) and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and not m.error():
                got.append((m.partition(), m.offset(), m.key(), m.value(), list(m.headers() or [])))
    finally:
        consumer.close()
    return got


def via_kafka_python(b: SecureBroker, mode: str, topic: str, msgs: list, **kw: Any) -> list[tuple]:
    conf = python_conf(b, mode, **kw)
    producer = KafkaProducer(**conf, request_timeout_ms=10_000, max_block_ms=4_000, bootstrap_timeout_ms=4_000)
    try:
        futures = [producer.send(topic, value=v, key=k, partition=p, headers=h) for p, k, v, h in msgs]
        producer.flush(DEADLINE)
        for f in futures:
            f.get(timeout=DEADLINE)
    finally:
        producer.close(5)
    consumer = KafkaConsumer(**conf, group_id=None, enable_auto_commit=False, auto_offset_reset="earliest",
                             fetch_max_wait_ms=100)  # fmt: skip
    got = []
    try:
        tps = [KpTopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + DEADLINE
        while len(got) < len(msgs) and time.monotonic() < deadline:
            for tp, batch in consumer.poll(timeout_ms=200).items():
                got += [(tp.partition, r.offset, r.key, r.value, list(r.headers)) for r in batch]
    finally:
        consumer.close(autocommit=False)
    return got


def via_aiokafka(b: SecureBroker, mode: str, topic: str, msgs: list, **kw: Any) -> list[tuple]:
    conf = python_conf(b, mode, aio=True, **kw)

    async def run() -> list[tuple]:
        producer = AIOKafkaProducer(**conf, request_timeout_ms=10_000)
        await producer.start()
        try:
            for p, k, v, h in msgs:
                await producer.send_and_wait(topic, value=v, key=k, partition=p, headers=h)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**conf, group_id=None, enable_auto_commit=False, auto_offset_reset="earliest",
                                    fetch_max_wait_ms=100)  # fmt: skip
        await consumer.start()
        got = []
        try:
            tps = [AioTopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            deadline = time.monotonic() + DEADLINE - 5
            while len(got) < len(msgs) and time.monotonic() < deadline:
                for tp, batch in (await consumer.getmany(timeout_ms=200)).items():
                    got += [(tp.partition, r.offset, r.key, r.value, list(r.headers)) for r in batch]
        finally:
            await consumer.stop()
        return got

    return asyncio.run(asyncio.wait_for(run(), DEADLINE))


VIA = {"kcat": via_kcat, "confluent-kafka": via_confluent, "kafka-python": via_kafka_python, "aiokafka": via_aiokafka}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("client", CLIENTS)
def test_round_trip(secure_broker: SecureBroker, client: str, mode: str) -> None:
    topic = fresh_topic(secure_broker)
    msgs = messages()
    got = VIA[client](secure_broker, mode, topic, msgs)
    want = []
    for p in range(PARTITIONS):
        mine = [m for m in msgs if m[0] == p]
        want += [(p, i, k, v, [(n, hv) for n, hv in h]) for i, (_, k, v, h) in enumerate(mine)]
    assert sorted(got) == sorted(want)
    assert stored(secure_broker, topic) == [PER_PARTITION] * PARTITIONS


@pytest.mark.parametrize("mode", ["SASL_PLAINTEXT-SCRAM-SHA-256", "SASL_SSL-PLAIN"])
@pytest.mark.parametrize("client", CLIENTS)
def test_wrong_password_is_refused_and_nothing_stored(secure_broker: SecureBroker, client: str, mode: str) -> None:
    topic = fresh_topic(secure_broker)
    with pytest.raises(Exception) as caught:  # noqa: PT011 (each client raises its own kind)
        VIA[client](secure_broker, mode, topic, messages()[:2], password="not-the-password")
    if client in ("kcat", "confluent-kafka"):  # (the Python clients say only that no broker could be reached)
        assert "Authentication failed" in str(caught.value), caught.value
    assert stored(secure_broker, topic) == [0] * PARTITIONS
    said = f"failed authentication with 127.0.0.1 ({MODES[mode][2]}"  # (logged as the broker closes the connection)
    wait_until(lambda: said in secure_broker.proc.log_text(), 15, f"the broker's log line {said!r}")


@pytest.mark.parametrize("client", CLIENTS)
def test_untrusted_broker_certificate_is_refused(secure_broker: SecureBroker, client: str) -> None:
    topic = fresh_topic(secure_broker)
    with pytest.raises(Exception):  # noqa: B017, PT011 (each client raises its own kind)
        VIA[client](secure_broker, "SSL", topic, messages()[:2], ca=str(secure_broker.pki.directory / "other-ca.pem"))
    assert stored(secure_broker, topic) == [0] * PARTITIONS


def test_api_versions_on_every_listener_lists_sasl(secure_broker: SecureBroker) -> None:
    with connect(secure_broker.bootstrap("PLAINTEXT")) as conn:
        keys = set(conn.versions)
    assert {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE} <= keys
