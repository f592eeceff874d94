"""`kafkactl produce` refused by ACLs names the topic, as Kafka's clients do (`Topic authorization failed`), not
the InitProducerId its idempotent producer is refused first; and the broker grants InitProducerId as Kafka 2.8
does: IdempotentWrite on the cluster, or Write on any topic (confluent-kafka's idempotent producer)."""

from __future__ import annotations

import uuid

from broker.client.admin import Admin
from broker.security import credentials
from broker.security.acl import Operation, ResourceType
from broker.security.scram import make_credential
from tests.integration.helpers import cli, error_line, wait_until, zk_session
from tests.integration.test_acls import _acl, _end_offset, _grant, secured  # noqa: F401 - the fixture

PASSWORD = "carol-secret"


def _carol(secured) -> str:  # noqa: F811
    """A user of its own for this test (others' grants to alice and bob would change what InitProducerId answers)."""
    user = f"carol{uuid.uuid4().hex[:6]}"
    with zk_session(secured[1]) as zk:
        credentials.write_user(zk, user, {"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", PASSWORD)})
    return user


def _as(user: str, port: int) -> list[str]:
    return ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-256", "-X",
            f"sasl.username={user}", "-X", f"sasl.password={PASSWORD}", "-b", f"127.0.0.1:{port}"]  # fmt: skip


def test_a_produce_without_acls_names_the_refused_topic(secured):  # noqa: F811
    b, port = secured[0][0]
    user = _carol(secured)
    topic, other = f"pa-{uuid.uuid4().hex[:8]}", f"pb-{uuid.uuid4().hex[:8]}"
    with Admin(b.bootstrap) as admin:
        admin.create_topic(topic, 1, 1)
        admin.create_topic(other, 1, 1)

    def refused() -> str:
        r = cli(*_as(user, port), "produce", topic, input_text="a\nb\n", timeout=60)
        if "SASL" in r.stderr or "authentication" in r.stderr.lower():
            return ""  # (the user's credentials not on the broker yet)
        return error_line(r, f"Topic authorization failed for {topic} (TOPIC_AUTHORIZATION_FAILED)")

    line = wait_until(refused, 20, "carol's credentials on the broker", interval=0.5)
    assert "no Describe or Write on it" in line
    _grant(b, _acl(ResourceType.TOPIC, topic, f"User:{user}", Operation.DESCRIBE))
    line = refused()
    assert "no Write on it" in line and "InitProducerId was refused with CLUSTER_AUTHORIZATION_FAILED" in line
    # Write on another topic: the idempotent producer gets its id (as Kafka 2.8), then Produce itself is refused
    _grant(b, _acl(ResourceType.TOPIC, other, f"User:{user}", Operation.WRITE))
    r = cli(*_as(user, port), "produce", topic, input_text="a\nb\n", timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert f"{topic}-0: TOPIC_AUTHORIZATION_FAILED" in r.stderr.splitlines()[-1], r.stderr
    assert _end_offset(b, topic) == 0


def test_an_idempotent_confluent_producer_with_write_on_a_topic_gets_its_producer_id(secured):  # noqa: F811
    from confluent_kafka import Producer

    b, port = secured[0][0]
    user = _carol(secured)
    topic = f"pi-{uuid.uuid4().hex[:8]}"
    with Admin(b.bootstrap) as admin:
        admin.create_topic(topic, 1, 1)
    _grant(b, _acl(ResourceType.TOPIC, topic, f"User:{user}", Operation.WRITE),
           _acl(ResourceType.TOPIC, topic, f"User:{user}", Operation.DESCRIBE))  # fmt: skip

    def delivered() -> bool:
        errors: list = []
        p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
                      "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": PASSWORD,
                      "enable.idempotence": True, "message.timeout.ms": 5000})  # fmt: skip
        for i in range(3):
            p.produce(topic, value=b"i%d" % i, partition=0, on_delivery=lambda err, msg: errors.append(err))
        p.flush(10)
        return errors == [None] * 3

    wait_until(delivered, 30, "the idempotent producer's records", interval=0.5)
    assert _end_offset(b, topic) >= 3
