"""ACLs against live brokers with the authorizer on: a principal without an ACL is refused with Kafka's error and
served nothing (kafkactl, confluent-kafka, kafka-python, aiokafka), a grant lets it in, ACL changes reach
another broker through ZooKeeper's change notifications, and the ACL APIs answer Kafka's admin clients and
`kafkactl acl`.

The brokers have a PLAINTEXT listener whose anonymous principal is a super user (the inter-broker principal
must be, as in Kafka; tests use it as the administrator) and a SASL_PLAINTEXT listener where alice and bob log
in with SCRAM; `allow.everyone.if.no.acl.found` is false.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest

from broker.client.admin import Admin, AdminError
from broker.daemon import free_port
from broker.protocol.errors import ErrorCode
from broker.security import credentials
from broker.security.acl import Binding, Entry, Filter, Operation, Pattern, PatternType, Permission, ResourceType
from broker.security.scram import make_credential
from broker.zk import paths
from tests.integration.cluster import BrokerProcess, new_chroot
from tests.integration.helpers import cli, error_line, json_lines, ok, wait_until, zk_session

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
AUTH = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:ANONYMOUS",
        "allow.everyone.if.no.acl.found": "false"}  # fmt: skip


def _start(broker_id: int, chroot: str, root, overrides: dict[str, str] | None = None) -> tuple[BrokerProcess, int]:
    port, sasl_port = free_port(), free_port()
    listeners = {"listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
                 "inter.broker.listener.name": "PLAINTEXT"}  # fmt: skip
    b = BrokerProcess(broker_id, chroot, root, port=port, overrides={**listeners, **AUTH, **(overrides or {})})
    return b.start(), sasl_port


@pytest.fixture(scope="module")
def secured(zk_server, tmp_path_factory):
    """Brokers 1 and 2 of one cluster with the authorizer on: [(broker, SASL port)], and the chroot."""
    chroot = new_chroot(zk_server.connect_string)
    with zk_session(chroot) as zk:
        for user, password in USERS.items():
            credentials.write_user(zk, user, {"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", password)})
    root = tmp_path_factory.mktemp("acl")
    started = []
    try:
        for i in (1, 2):
            started.append(_start(i, chroot, root))
        # the reading tests' groups (g-...) are theirs; other groups are not
        prefixed = PatternType.PREFIXED
        _grant(started[0][0], *(_acl(ResourceType.GROUP, "g-", f"User:{u}", Operation.READ, pattern=prefixed)
                                for u in USERS))  # fmt: skip
        yield started, chroot
    finally:
        for b, _ in started:
            b.stop(timeout=20)


def _topic(secured, partitions: int = 1) -> str:
    """A new topic with three records in it, written by the administrator."""
    b = secured[0][0][0]
    name = f"t-{uuid.uuid4().hex[:8]}"
    with Admin(b.bootstrap) as admin:
        admin.create_topic(name, partitions, 2)
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(3):
        p.produce(name, value=f"v{i}".encode(), partition=0)
    assert p.flush(15) == 0
    return name


def _grant(b: BrokerProcess, *bindings: Binding) -> None:
    """Create the ACLs through `b` and wait until every broker of its cluster holds them (the others learn
    them from ZooKeeper's change notifications a moment later: a request to them in between is refused)."""
    with Admin(b.bootstrap) as admin:
        admin.create_acls(list(bindings))
        admin.cluster.metadata([])
        addresses = [f"{host}:{port}" for host, port in admin.cluster.brokers.values()]

    def everywhere() -> bool:
        for address in addresses:
            with Admin(address) as one:
                for bd in bindings:
                    e, pt = bd.entry, bd.pattern
                    f = Filter(pt.resource_type, pt.name, pt.pattern_type, e.principal, e.host, e.operation,
                               e.permission)  # fmt: skip
                    if bd not in one.describe_acls(f):
                        return False
        return True

    wait_until(everywhere, 10, "the ACLs on every broker")


def _acl(rtype: ResourceType, name: str, principal: str, op: Operation, perm: Permission = Permission.ALLOW,
         pattern: PatternType = PatternType.LITERAL) -> Binding:  # fmt: skip
    return Binding(Pattern(rtype, name, pattern), Entry(principal, "*", op, perm))


def _sasl(port: int, user: str) -> dict[str, str]:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": USERS[user]}  # fmt: skip


def _end_offset(b: BrokerProcess, topic: str) -> int:
    with Admin(b.bootstrap) as admin:
        return admin.list_offsets([(topic, 0)], -1)[(topic, 0)]


def _confluent_consume(port: int, user: str, topic: str, want: int, timeout: float = 20.0):
    """(values, the first error code) reading the topic from the start in a group of its own, as `user`."""
    from confluent_kafka import Consumer, KafkaError

    c = Consumer({**_sasl(port, user), "group.id": f"g-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})  # fmt: skip
    c.subscribe([topic])
    values, error = [], None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and len(values) < want and error is None:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() != KafkaError._PARTITION_EOF:
                    error = m.error().code()
                continue
            values.append(m.value())
    finally:
        c.close()
    return values, error


def test_a_consumer_without_read_is_refused_and_gets_nothing_then_a_grant_lets_it_read(secured):
    from confluent_kafka import KafkaError

    b, port = secured[0][0]
    topic = _topic(secured)
    values, error = _confluent_consume(port, "bob", topic, 3, timeout=10)
    assert values == []
    assert error == KafkaError.TOPIC_AUTHORIZATION_FAILED
    denial = (
        f"Principal = User:bob is Denied Operation = Describe from host = 127.0.0.1 on resource = Topic:LITERAL:{topic}"
    )
    logs = lambda: "".join(x.log_text() for x, _ in secured[0])  # noqa: E731 (any broker may have answered)
    wait_until(lambda: denial in logs(), 10, "the denial's log line")
    _grant(b, _acl(ResourceType.TOPIC, topic, "User:bob", Operation.READ))
    values, error = _confluent_consume(port, "bob", topic, 3)
    assert (values, error) == ([b"v0", b"v1", b"v2"], None)


def test_kafka_python_and_aiokafka_are_refused_a_topic_without_read(secured):
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import TopicAuthorizationFailedError

    b, port = secured[0][0]
    topic = _topic(secured)
    _grant(b, _acl(ResourceType.TOPIC, topic, "User:alice", Operation.DESCRIBE))  # metadata, but no Read
    kp = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SASL_PLAINTEXT",
                       sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
                       sasl_plain_password=USERS["alice"], enable_auto_commit=False,
                       consumer_timeout_ms=5000)  # fmt: skip
    try:
        kp.assign([TopicPartition(topic, 0)])
        kp.seek(TopicPartition(topic, 0), 0)
        with pytest.raises(TopicAuthorizationFailedError):
            got = []
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                for recs in kp.poll(timeout_ms=500).values():
                    got += recs
            assert got == []  # (not reached: the poll raises first)
    finally:
        kp.close()

    async def aio() -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka import TopicPartition as ATP
        from aiokafka.errors import TopicAuthorizationFailedError as AioDenied

        c = AIOKafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
                             sasl_plain_password=USERS["alice"], enable_auto_commit=False)  # fmt: skip
        await c.start()
        try:
            c.assign([ATP(topic, 0)])
            c.seek(ATP(topic, 0), 0)
            with pytest.raises(AioDenied):
                got = await asyncio.wait_for(c.getmany(timeout_ms=5000), 15)
                assert not any(got.values())
                await asyncio.wait_for(c.getone(), 10)
        finally:
            await c.stop()

    asyncio.run(aio())


def test_kafkactl_consume_is_refused_a_topic_without_read(secured):
    b, port = secured[0][0]
    topic = _topic(secured)
    sec = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-256", "-X", "sasl.username=bob",
           "-X", f"sasl.password={USERS['bob']}"]  # fmt: skip
    r = cli(*sec, "consume", topic, "-b", f"127.0.0.1:{port}", "--offset", "beginning", "--exit", timeout=60)
    assert r.returncode != 0
    assert "TOPIC_AUTHORIZATION_FAILED" in error_line(r)
    assert "v0" not in r.stdout


def test_a_producer_without_write_stores_nothing(secured):
    from confluent_kafka import KafkaError, Producer

    b, port = secured[0][0]
    topic = f"w-{uuid.uuid4().hex[:8]}"
    with Admin(b.bootstrap) as admin:
        admin.create_topic(topic, 1, 1)
    _grant(b, _acl(ResourceType.TOPIC, topic, "User:bob", Operation.DESCRIBE))
    errors = []
    p = Producer({**_sasl(port, "bob"), "retries": 0, "message.timeout.ms": 10000})
    for i in range(5):
        p.produce(topic, value=b"x%d" % i, partition=0, on_delivery=lambda err, msg: errors.append(err))
    p.flush(20)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 5
    assert _end_offset(b, topic) == 0
    _grant(b, _acl(ResourceType.TOPIC, topic, "User:bob", Operation.WRITE))

    def delivered() -> bool:  # (a new producer each try: librdkafka holds a refused topic as failed for good)
        errors.clear()
        q = Producer({**_sasl(port, "bob"), "message.timeout.ms": 5000})
        for i in range(5):
            q.produce(topic, value=b"y%d" % i, partition=0, on_delivery=lambda err, msg: errors.append(err))
        q.flush(10)
        return errors == [None] * 5

    wait_until(delivered, 20, "bob's records to be taken once allowed", interval=0.5)
    assert _end_offset(b, topic) == 5


def test_a_group_without_read_is_refused(secured):
    from confluent_kafka import Consumer, KafkaError

    b, port = secured[0][0]
    topic = _topic(secured)
    group = f"denied-{uuid.uuid4().hex[:6]}"
    _grant(b, _acl(ResourceType.TOPIC, topic, "User:bob", Operation.READ))
    c = Consumer({**_sasl(port, "bob"), "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    error, values = None, []
    deadline = time.monotonic() + 15
    try:
        while time.monotonic() < deadline and error is None:
            m = c.poll(0.5)
            if m is not None and m.error():
                error = m.error().code()
            elif m is not None:
                values.append(m.value())
    finally:
        c.close()
    assert error == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert values == []
    _grant(b, _acl(ResourceType.GROUP, group, "User:bob", Operation.READ))
    c = Consumer({**_sasl(port, "bob"), "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and len(values) < 3:
            m = c.poll(0.5)
            if m is not None and not m.error():
                values.append(m.value())
        c.commit(asynchronous=False)
    finally:
        c.close()
    assert values == [b"v0", b"v1", b"v2"]


def test_acl_changes_reach_the_other_broker(secured):
    (b1, _), (b2, port2) = secured[0]
    chroot = secured[1]
    name = f"pfx-{uuid.uuid4().hex[:6]}"
    binding = _acl(ResourceType.TOPIC, name, "User:alice", Operation.WRITE, pattern=PatternType.PREFIXED)
    _grant(b1, binding)
    with zk_session(chroot) as zk:
        stored = json.loads(zk.get(paths.acl_resource("Topic", name, prefixed=True))[0])
        assert stored == {"version": 1, "acls": [{"principal": "User:alice", "permissionType": "Allow",
                                                  "operation": "Write", "host": "*"}]}  # fmt: skip
        changes = zk.get_children(paths.ACL_EXTENDED_CHANGES)
        assert any(json.loads(zk.get(f"{paths.ACL_EXTENDED_CHANGES}/{c}")[0])["name"] == name for c in changes)
    f = Filter(ResourceType.TOPIC, name + "-x", PatternType.MATCH)

    def seen_by_2() -> bool:
        with Admin(b2.bootstrap) as admin:
            return admin.describe_acls(f) == [binding]

    wait_until(seen_by_2, 10, "broker 2 to learn the ACL")
    with Admin(b1.bootstrap) as admin:
        assert admin.delete_acls([Filter(ResourceType.TOPIC, name, PatternType.PREFIXED)]) == [binding]

    def gone_from_2() -> bool:
        with Admin(b2.bootstrap) as admin:
            return admin.describe_acls(f) == []

    wait_until(gone_from_2, 10, "broker 2 to drop the ACL")


def test_confluent_admin_client_creates_describes_and_deletes_acls(secured):
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
    )
    from confluent_kafka.admin import (
        ResourceType as CRT,
    )

    b = secured[0][0][0]
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    name = f"c-{uuid.uuid4().hex[:6]}"
    acl = AclBinding(CRT.TOPIC, name, ResourcePatternType.LITERAL, "User:carol", "*", AclOperation.READ,
                     AclPermissionType.ALLOW)  # fmt: skip
    for fut in admin.create_acls([acl]).values():
        assert fut.result(15) is None
    flt = AclBindingFilter(CRT.TOPIC, name, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                           AclPermissionType.ANY)  # fmt: skip
    assert admin.describe_acls(flt).result(15) == [acl]
    deleted = [r for fut in admin.delete_acls([flt]).values() for r in fut.result(15)]
    assert deleted == [acl]
    assert admin.describe_acls(flt).result(15) == []
    bad = AclBinding(CRT.BROKER, "not-the-cluster", ResourcePatternType.LITERAL, "User:carol", "*",
                     AclOperation.ALTER, AclPermissionType.ALLOW)  # fmt: skip
    with pytest.raises(Exception, match="INVALID_REQUEST|kafka-cluster"):
        for fut in admin.create_acls([bad]).values():
            fut.result(15)


def test_kafka_python_admin_client_creates_describes_and_deletes_acls(secured):
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import (
        ResourceType as KRT,
    )

    b = secured[0][0][0]
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    name = f"k-{uuid.uuid4().hex[:6]}"
    try:
        acl = ACL("User:dave", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
                  ResourcePattern(KRT.TOPIC, name, ACLResourcePatternType.PREFIXED))  # fmt: skip
        result = admin.create_acls([acl])
        assert result["failed"] == [] and len(result["succeeded"]) == 1
        flt = ACLFilter("User:dave", None, ACLOperation.ANY, ACLPermissionType.ANY,
                        ResourcePatternFilter(KRT.TOPIC, name, ACLResourcePatternType.ANY))  # fmt: skip
        found, error = admin.describe_acls(flt)
        assert [(a.principal, a.operation, a.resource_pattern.pattern_type) for a in found] == [
            ("User:dave", ACLOperation.WRITE, ACLResourcePatternType.PREFIXED)
        ]
        deleted = admin.delete_acls([flt])
        assert [len(matches) for _, matches, _ in deleted] == [1]
        assert admin.describe_acls(flt)[0] == []
    finally:
        admin.close()


def test_kafkactl_acl_add_list_remove(secured):
    b = secured[0][0][0]
    name = f"cli-{uuid.uuid4().hex[:6]}"
    out = ok(cli("acl", "add", "--allow-principal", "User:erin", "--consumer", "--topic", name, "--group", "g1",
                 "-b", b.bootstrap))  # fmt: skip
    assert out.count("added:") == 3
    rows = json_lines(ok(cli("acl", "list", "--topic", name, "--json", "-b", b.bootstrap)))
    assert sorted(r["operation"] for r in rows) == ["Describe", "Read"]
    assert json_lines(ok(cli("acl", "list", "--topic", name, "-o", "json", "-b", b.bootstrap))) == rows
    assert {r["principal"] for r in rows} == {"User:erin"}
    out = ok(cli("acl", "remove", "--topic", name, "--operation", "Read", "--dry-run", "-b", b.bootstrap))
    assert "would remove: User:erin has Allow permission for operations: Read" in out
    assert len(json_lines(ok(cli("acl", "list", "--topic", name, "--json", "-b", b.bootstrap)))) == 2
    out = ok(cli("acl", "remove", "--topic", name, "-b", b.bootstrap))
    assert out.count("removed:") == 2
    assert json_lines(ok(cli("acl", "list", "--topic", name, "--json", "-b", b.bootstrap))) == []
    r = cli("acl", "add", "--allow-principal", "User:erin", "--operation", "Frobnicate", "--topic", name,
            "-b", b.bootstrap)  # fmt: skip
    assert "--operation 'Frobnicate'" in error_line(r)
    r = cli("acl", "add", "--allow-principal", "erin", "--operation", "Read", "--topic", name, "-b", b.bootstrap)
    assert "expected Type:name" in error_line(r)
    r = cli("acl", "list", "--resource-pattern-type", "fuzzy", "-b", b.bootstrap)
    assert "--resource-pattern-type 'fuzzy'" in error_line(r)
    ok(cli("acl", "remove", "--group", "g1", "-b", b.bootstrap))


def test_a_principal_without_alter_on_the_cluster_cannot_change_acls(secured):
    b, port = secured[0][0]
    sec = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-256", "-X",
           "sasl.username=bob", "-X", f"sasl.password={USERS['bob']}"]  # fmt: skip
    r = cli(*sec, "acl", "add", "--allow-principal", "User:bob", "--operation", "All", "--topic", "*",
            "-b", f"127.0.0.1:{port}")  # fmt: skip
    assert "CLUSTER_AUTHORIZATION_FAILED" in error_line(r)
    r = cli(*sec, "acl", "list", "-b", f"127.0.0.1:{port}")
    assert "CLUSTER_AUTHORIZATION_FAILED" in error_line(r)


def test_admin_refusals_name_what_was_refused(secured):
    """As Kafka's clients word them: `Topic authorization failed for T`, `Cluster authorization failed`."""
    b, port = secured[0][0]
    sec = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-256", "-X",
           "sasl.username=bob", "-X", f"sasl.password={USERS['bob']}", "-b", f"127.0.0.1:{port}"]  # fmt: skip
    topic = _topic(secured)
    line = error_line(cli(*sec, "topic", "delete", topic, "--execute"))
    assert f"Topic authorization failed for {topic} (TOPIC_AUTHORIZATION_FAILED)" in line
    line = error_line(cli(*sec, "topic", "create", f"{topic}-new", "-p", "1", "-r", "1"))
    assert f"cannot create topic '{topic}-new': Topic authorization failed for {topic}-new" in line
    line = error_line(cli(*sec, "acl", "list"))
    assert line.startswith("kafkactl: error: cannot list ACLs: Cluster authorization failed (CLUSTER_AUTHORIZATION")


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(broker):
    with Admin(broker.bootstrap) as admin:
        with pytest.raises(AdminError, match="SECURITY_DISABLED"):
            admin.describe_acls(Filter())
        with pytest.raises(AdminError, match="SECURITY_DISABLED"):
            admin.create_acls([_acl(ResourceType.TOPIC, "t", "User:x", Operation.READ)])
    assert ErrorCode.SECURITY_DISABLED == 54


def test_deleting_a_group_or_its_offsets_needs_delete_on_the_group_and_read_on_the_topic(secured):
    """As Kafka's KafkaApis: DeleteGroups needs Delete on each group, OffsetDelete Delete on the group and Read
    on each topic (a topic without it: TOPIC_AUTHORIZATION_FAILED for its partitions, nothing deleted)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import GroupAuthorizationFailedError, NoError, TopicAuthorizationFailedError
    from kafka.structs import OffsetAndMetadata

    b, port = secured[0][0]
    topic = _topic(secured, partitions=2)
    group = f"del-{uuid.uuid4().hex[:6]}"
    admin_consumer = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=group, enable_auto_commit=False)
    try:  # (the administrator commits: the group is Empty, with offsets)
        admin_consumer.commit({TopicPartition(topic, p): OffsetAndMetadata(2, "", -1) for p in (0, 1)})
    finally:
        admin_consumer.close(autocommit=False)

    def committed() -> dict[int, int]:
        """The group's committed offsets, as the administrator sees them."""
        su = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=20_000)
        try:
            return {tp.partition: o.offset for tp, o in su.list_group_offsets({group: None})[group].items()}
        finally:
            su.close()

    kp = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SASL_PLAINTEXT",
                          sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
                          sasl_plain_password=USERS["alice"], request_timeout_ms=20_000)  # fmt: skip
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            kp.delete_group_offsets(group, [TopicPartition(topic, 0)])
        _grant(b, _acl(ResourceType.GROUP, group, "User:alice", Operation.DELETE))
        assert list(kp.delete_group_offsets(group, [TopicPartition(topic, 0)]).values()) == [
            TopicAuthorizationFailedError
        ]
        assert committed() == {0: 2, 1: 2}
        _grant(b, _acl(ResourceType.TOPIC, topic, "User:alice", Operation.READ))
        assert list(kp.delete_group_offsets(group, [TopicPartition(topic, 0)]).values()) == [NoError]
        assert committed() == {1: 2}
    finally:
        kp.close()

    cf = AdminClient(_sasl(port, "bob"))
    (f,) = cf.delete_consumer_groups([group], request_timeout=30).values()
    with pytest.raises(KafkaException) as info:
        f.result(30)
    assert info.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert committed() == {1: 2}
    _grant(b, _acl(ResourceType.GROUP, group, "User:bob", Operation.DELETE))
    (f,) = cf.delete_consumer_groups([group], request_timeout=30).values()
    assert f.result(30) is None
    assert committed() == {}


def _operations(found) -> set[str]:
    return {op.name for op in found or ()}


def test_authorized_operations_are_what_the_principal_may_do(secured):
    """KIP-430, through confluent-kafka's AdminClient: DescribeTopics (Metadata), DescribeCluster and
    DescribeConsumerGroups with include_authorized_operations answer the operations the principal may do on
    each resource (Read implies Describe); the super user may do every operation the resource supports."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    (b, sasl_port), _ = secured[0][0], secured[1]
    topic = _topic(secured)
    _grant(b, _acl(ResourceType.TOPIC, topic, "User:alice", Operation.READ))
    group = f"g-{uuid.uuid4().hex[:6]}"  # (alice may Read every g- group: the fixture's grant)
    alice = AdminClient(_sasl(sasl_port, "alice"))
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for client, topic_ops, cluster_ops, group_ops in (
        (alice, {"READ", "DESCRIBE"}, set(), {"READ", "DESCRIBE"}),
        (admin, {"READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"},
         {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER", "DESCRIBE"},
         {"READ", "DESCRIBE", "DELETE"}),
    ):  # fmt: skip
        (described,) = client.describe_topics(TopicCollection([topic]), include_authorized_operations=True).values()
        assert _operations(described.result(20).authorized_operations) == topic_ops
        cluster = client.describe_cluster(include_authorized_operations=True).result(20)
        assert _operations(cluster.authorized_operations) == cluster_ops
        (g,) = client.describe_consumer_groups([group], include_authorized_operations=True).values()
        assert _operations(g.result(20).authorized_operations) == group_ops


def test_without_an_authorizer_every_supported_operation_is_authorized(broker):
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    with Admin(broker.bootstrap) as admin:
        admin.create_topic("kip430", 1, 1)
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    (described,) = client.describe_topics(TopicCollection(["kip430"]), include_authorized_operations=True).values()
    assert len(described.result(20).authorized_operations) == 8
    assert len(client.describe_cluster(include_authorized_operations=True).result(20).authorized_operations) == 7
    (g,) = client.describe_consumer_groups(["kip430-g"], include_authorized_operations=True).values()
    assert _operations(g.result(20).authorized_operations) == {"READ", "DESCRIBE", "DELETE"}


def test_scram_credentials_through_the_admin_api_log_users_in(secured):
    """KIP-554 through confluent-kafka's AdminClient: the administrator adds a user (the client salts the
    password), describes it (mechanisms and iterations, never secrets), and the user logs in over SASL with it;
    its deletion refuses the next login; a principal without Alter on the cluster is refused, and each invalid
    change is refused as Kafka refuses it."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    (b, sasl_port), _ = secured[0][0], secured[1]
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    user = f"carol{uuid.uuid4().hex[:6]}"
    sha256 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(user, sha256, b"carol-secret")])[user].result(20)
    (described,) = admin.describe_user_scram_credentials([user]).values()
    assert [(i.mechanism, i.iterations) for i in described.result(20).scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)]  # fmt: skip
    everyone = admin.describe_user_scram_credentials().result(20)
    assert user in everyone and {"alice", "bob"} <= set(everyone)

    def login(password: str) -> bool:
        c = AdminClient({**_sasl(sasl_port, "alice"), "sasl.username": user, "sasl.password": password})
        try:
            c.list_topics(timeout=5)
            return True
        except KafkaException:
            return False

    assert login("carol-secret") and not login("wrong")

    def refused(op) -> int:  # noqa: ANN001 - a future of the admin client
        with pytest.raises(KafkaException) as exc:
            op.result(20)
        return exc.value.args[0].code()

    low = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 100)
    assert refused(admin.alter_user_scram_credentials([UserScramCredentialUpsertion(user, low, b"x")])[user]) == 93
    deletion = UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)
    admin.alter_user_scram_credentials([deletion])[user].result(20)
    assert not login("carol-secret")
    assert refused(admin.alter_user_scram_credentials([deletion])[user]) == 91  # RESOURCE_NOT_FOUND
    (gone,) = admin.describe_user_scram_credentials([user]).values()
    assert refused(gone) == 91
    alice = AdminClient(_sasl(sasl_port, "alice"))
    again = UserScramCredentialUpsertion(user, sha256, b"by-alice")
    assert refused(alice.alter_user_scram_credentials([again])[user]) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert not login("by-alice")
    # (a refused DescribeUserScramCredentials is not asked through confluent-kafka 2.16: its client aborts on
    # an answer with a top-level error, Kafka's as well as this one's)
