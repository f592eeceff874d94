"""kafkactl's group operations cannot go around the authorizer (issue 26): with ACLs on, `consume --group`,
`group describe` and `group rewind` go through the broker's group coordinator, so each needs what Kafka checks:
Read on the group (and the topic) to consume or rewind, Describe on the group to describe (its members and
committed offsets). Each refusal is the one confluent-kafka gets as the same user; allowed cases read every
message and commit. No ZooKeeper registry of the group is made (the ZooKeeper-coordinated path is not taken).

One broker with the authorizer on: a PLAINTEXT listener whose anonymous principal is a super user (the tests'
administrator) and a SASL_PLAINTEXT listener where alice and bob log in with SCRAM-SHA-256. alice has Read on
group `billing`, bob only Describe on it; nobody has an ACL on `othergroup`; both may read topic T.
"""

from __future__ import annotations

import time
import uuid

import pytest

from broker.client.admin import Admin
from broker.daemon import free_port
from broker.security import credentials
from broker.security.acl import Binding, Entry, Operation, Pattern, PatternType, Permission, ResourceType
from broker.security.scram import make_credential
from broker.zk import paths
from tests.integration.cluster import BrokerProcess, new_chroot
from tests.integration.helpers import cli, error_line, json_lines, ok, zk_session

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
AUTH = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:ANONYMOUS",
        "allow.everyone.if.no.acl.found": "false"}  # fmt: skip
MESSAGES = 5


class Secured:
    def __init__(self, b: BrokerProcess, sasl_port: int, chroot: str) -> None:
        self.b, self.sasl_port, self.chroot = b, sasl_port, chroot
        self.topic = ""
        self.private = ""  # a topic nobody but the administrator may read

    @property
    def sasl(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    def xs(self, user: str) -> list[str]:
        pairs = ["security.protocol=SASL_PLAINTEXT", "sasl.mechanism=SCRAM-SHA-256", f"sasl.username={user}",
                 f"sasl.password={USERS[user]}"]  # fmt: skip
        return [arg for pair in pairs for arg in ("-X", pair)]

    def confluent(self, user: str) -> dict[str, str]:
        return {"bootstrap.servers": self.sasl, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": USERS[user]}  # fmt: skip


def _acl(rtype: ResourceType, name: str, user: str, op: Operation) -> Binding:
    return Binding(Pattern(rtype, name, PatternType.LITERAL), Entry(f"User:{user}", "*", op, Permission.ALLOW))


@pytest.fixture(scope="module")
def secured(zk_server, tmp_path_factory):
    chroot = new_chroot(zk_server.connect_string)
    with zk_session(chroot) as zk:
        for user, password in USERS.items():
            credentials.write_user(zk, user, {"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", password)})
    port, sasl_port = free_port(), free_port()
    overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
                 "inter.broker.listener.name": "PLAINTEXT", **AUTH}  # fmt: skip
    b = BrokerProcess(1, chroot, tmp_path_factory.mktemp("group-acl"), port=port, overrides=overrides).start()
    try:
        s = Secured(b, sasl_port, chroot)
        s.topic = f"t-{uuid.uuid4().hex[:8]}"
        with Admin(b.bootstrap) as admin:
            admin.create_topic(s.topic, 2, 1)
            s.private = f"private-{uuid.uuid4().hex[:8]}"
            admin.create_topic(s.private, 1, 1)
            admin.create_acls([
                _acl(ResourceType.TOPIC, s.topic, "alice", Operation.READ),
                _acl(ResourceType.TOPIC, s.topic, "bob", Operation.READ),
                _acl(ResourceType.GROUP, "billing", "alice", Operation.READ),
                _acl(ResourceType.GROUP, "billing", "bob", Operation.DESCRIBE),
            ])  # fmt: skip
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": b.bootstrap})
        for i in range(MESSAGES):
            p.produce(s.topic, value=f"v{i}".encode(), partition=i % 2)
        assert p.flush(15) == 0
        yield s
    finally:
        b.stop(timeout=20)


def _committed(s: Secured, group: str) -> dict[int, int]:
    """The group's committed offsets of T, as the administrator sees them through confluent-kafka."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": s.b.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(s.topic, p) for p in (0, 1)], timeout=15)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got if tp.offset >= 0}


def _confluent_consume(s: Secured, user: str, group: str, timeout: float = 20.0,
                       topic: str | None = None) -> tuple[int, str | None]:  # fmt: skip
    """(messages read, the first error's name) of a confluent-kafka group member as `user`."""
    from confluent_kafka import Consumer, KafkaError

    errors: list[str] = []
    c = Consumer({**s.confluent(user), "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "error_cb": lambda e: errors.append(e.name())})  # fmt: skip
    c.subscribe([topic or s.topic])
    n = 0
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and n < MESSAGES and not errors:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() != KafkaError._PARTITION_EOF:
                    errors.append(m.error().name())
                continue
            n += 1
    finally:
        c.close()
    return n, (errors[0] if errors else None)


def _confluent_admin(s: Secured, user: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient(s.confluent(user))


def _confluent_offsets(s: Secured, user: str, group: str):
    """confluent-kafka's list_consumer_group_offsets of the group, as `user` (its OffsetFetch: Describe on the
    group): the error name, None when allowed."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = _confluent_admin(s, user)
    return _admin_error(admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group])


def _admin_error(future) -> str | None:
    """The error name a confluent-kafka admin future fails with (None: it succeeded)."""
    from confluent_kafka import KafkaException

    try:
        result = future.result(timeout=20)
    except KafkaException as exc:
        return exc.args[0].name()
    for tp in getattr(result, "topic_partitions", None) or []:  # per-partition errors of an offsets result
        if tp.error is not None:
            return tp.error.name()
    return None


def _no_zookeeper_registry(s: Secured, group: str) -> None:
    with zk_session(s.chroot) as zk:
        assert zk.exists(paths.group_ids(group)) is None, "kafkactl coordinated through ZooKeeper"


def _consume(s: Secured, user: str, group: str, topic: str | None = None):
    return cli("consume", topic or s.topic, "--group", group, "--reset", "earliest", "--exit", "-o", "json",
               "-b", s.sasl, "-z", s.chroot, *s.xs(user))  # fmt: skip


def test_consume_group_needs_read_on_the_group(secured: Secured) -> None:
    s = secured
    # alice: no ACL on othergroup; bob: Describe only on billing. Refused as confluent-kafka is, nothing read.
    for user, group in (("alice", "othergroup"), ("bob", "billing")):
        r = _consume(s, user, group)
        error_line(r, f"not authorized to read group {group!r} (GROUP_AUTHORIZATION_FAILED)")
        assert r.stdout == "" and "assigned" not in r.stderr
        read, error = _confluent_consume(s, user, group)
        assert (read, error) == (0, "GROUP_AUTHORIZATION_FAILED"), (user, group)
    # alice may read billing but not the private topic: refused as confluent-kafka is
    r = _consume(s, "alice", "billing", s.private)
    error_line(r, "TOPIC_AUTHORIZATION_FAILED")
    assert r.stdout == "" and "assigned" not in r.stderr
    assert _confluent_consume(s, "alice", "billing", topic=s.private) == (0, "TOPIC_AUTHORIZATION_FAILED")
    assert _committed(s, "othergroup") == {}
    assert _committed(s, "billing") == {}
    # alice on billing: every message, committed; the broker coordinated it
    got = json_lines(ok(_consume(s, "alice", "billing")))
    assert sorted(m["value"] for m in got) == sorted(f"v{i}" for i in range(MESSAGES))
    assert sum(_committed(s, "billing").values()) == MESSAGES
    _no_zookeeper_registry(s, "billing")


def test_group_describe_needs_describe_on_the_group(secured: Secured) -> None:
    s = secured
    ok(_consume(s, "alice", "billing"))  # (committed offsets to describe, if the other test did not run)
    for user in ("alice", "bob"):  # Read implies Describe; bob has Describe
        [info] = json_lines(ok(cli(*s.xs(user), "group", "describe", "billing", "-b", s.sasl, "-z", s.chroot,
                                   "-o", "json")))  # fmt: skip
        assert info["kind"] == "broker" and sum(p["committed"] for p in info["partitions"]) == MESSAGES, info
        assert _confluent_offsets(s, user, "billing") is None
    r = cli(*s.xs("alice"), "group", "describe", "othergroup", "-b", s.sasl, "-z", s.chroot)
    error_line(r, "not authorized to describe group 'othergroup' (GROUP_AUTHORIZATION_FAILED)")
    assert _confluent_offsets(s, "alice", "othergroup") == "GROUP_AUTHORIZATION_FAILED"


def test_group_rewind_needs_read_on_the_group(secured: Secured) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    s = secured
    ok(_consume(s, "alice", "billing"))
    assert sum(_committed(s, "billing").values()) == MESSAGES
    rewind = ["group", "rewind", "billing", "--topic", s.topic, "--to-earliest", "--execute", "-b", s.sasl,
              "-z", s.chroot]  # fmt: skip
    # bob may describe billing but not read it: refused, offsets unchanged, as confluent-kafka's AdminClient
    r = cli(*s.xs("bob"), *rewind)
    error_line(r, "not authorized to read group 'billing' (GROUP_AUTHORIZATION_FAILED)")
    request = [ConsumerGroupTopicPartitions("billing", [TopicPartition(s.topic, p, 0) for p in (0, 1)])]
    bob = _confluent_admin(s, "bob")  # (kept referenced until its answer: a dropped client never answers)
    assert _admin_error(bob.alter_consumer_group_offsets(request)["billing"]) == "GROUP_AUTHORIZATION_FAILED"
    assert sum(_committed(s, "billing").values()) == MESSAGES
    # no ACL at all on othergroup: refused already at describing it, as confluent-kafka is at altering it
    r = cli(*s.xs("alice"), "group", "rewind", "othergroup", "--topic", s.topic, "--to-earliest", "--execute",
            "-b", s.sasl, "-z", s.chroot)  # fmt: skip
    error_line(r, "group 'othergroup'", "(GROUP_AUTHORIZATION_FAILED)")
    request = [ConsumerGroupTopicPartitions("othergroup", [TopicPartition(s.topic, 0, 0)])]
    alice = _confluent_admin(s, "alice")
    assert _admin_error(alice.alter_consumer_group_offsets(request)["othergroup"]) == "GROUP_AUTHORIZATION_FAILED"
    assert _committed(s, "othergroup") == {}
    # alice reads billing: the rewind is written, and the group reads everything again
    ok(cli(*s.xs("alice"), *rewind))
    assert _committed(s, "billing") == {0: 0, 1: 0}
    got = json_lines(ok(_consume(s, "alice", "billing")))
    assert len(got) == MESSAGES
    _no_zookeeper_registry(s, "billing")
