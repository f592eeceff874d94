"""Client quotas against a real broker and the real ZooKeeper: DescribeClientQuotas (48) and AlterClientQuotas (49)
through kafka-python's protocol classes (neither confluent-kafka's nor kafka-python's admin client offers them),
aiokafka's DescribeClientQuotas request through its admin client, and `kafkactl quota set | delete | list`;
the znodes as kafka-configs.sh writes them (a SCRAM user keeps its credentials beside its quotas, and a
quota change beside them keeps them); a quota written straight into ZooKeeper (as kafka-configs --zookeeper
does) reaching the broker through its notification; and enforcement: a producer and a consumer over their
byte rates are throttled (throttle_time_ms seen by confluent-kafka's throttle callback) while a client
without a quota on the same broker keeps its rate.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    DescribeClientQuotasRequest,
)

from broker.client.admin import Admin
from broker.client.connection import Connection
from broker.daemon import free_port
from broker.protocol.api import ApiKey
from broker.security import acl_store, credentials
from broker.security.acl import (
    CLUSTER_NAME,
    Binding,
    Entry,
    Operation,
    Pattern,
    PatternType,
    Permission,
    ResourceType,
)
from broker.security.scram import make_credential
from tests.integration.clientkit import create_topic, unique
from tests.integration.cluster import BrokerProcess, new_chroot
from tests.integration.helpers import cli, error_line, json_lines, ok, wait_until, zk_json, zk_session


@pytest.fixture(scope="module")
def b(zk_server, tmp_path_factory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("client-quotas")
    with BrokerProcess(1, new_chroot(zk_server.connect_string), root) as broker:
        yield broker


def quota(b: BrokerProcess, *args: object):
    return cli("quota", *args, "-b", b.bootstrap)


def znode(b: BrokerProcess, path: str) -> dict | None:
    with zk_session(b.zk_connect) as zk:
        return zk_json(zk, path) if zk.exists(path) else None


def last_notification(b: BrokerProcess) -> dict:
    with zk_session(b.zk_connect) as zk:
        last = sorted(zk.get_children("/config/changes"))[-1]
        return json.loads(zk.get(f"/config/changes/{last}")[0])


# --- the znodes, as kafka-configs writes them ---------------------------------------------------------------


def test_kafkactl_quota_set_writes_the_znodes_kafka_configs_writes(b):
    user, client = unique("u"), unique("c")
    out = ok(quota(b, "set", "--user", user, "--client-id", client, "producer_byte_rate=1024",
                   "request_percentage=50.5"))  # fmt: skip
    assert out == f"set: user '{user}' / client-id '{client}' producer_byte_rate=1024, request_percentage=50.5\n"
    assert znode(b, f"/config/users/{user}/clients/{client}") == {
        "version": 1, "config": {"producer_byte_rate": "1024", "request_percentage": "50.5"}}  # fmt: skip
    assert last_notification(b) == {"version": 2, "entity_path": f"users/{user}/clients/{client}"}

    ok(quota(b, "set", "--client-default", "consumer_byte_rate=2048"))
    assert znode(b, "/config/clients/<default>") == {"version": 1, "config": {"consumer_byte_rate": "2048"}}
    assert last_notification(b) == {"version": 2, "entity_path": "clients/<default>"}

    ok(quota(b, "set", "--user-default", "--client-default", "producer_byte_rate=4096"))
    assert znode(b, "/config/users/<default>/clients/<default>")["config"] == {"producer_byte_rate": "4096"}

    odd = "a b/c*"  # sanitized as Kafka's Sanitizer does
    ok(quota(b, "set", "--client-id", odd, "producer_byte_rate=100"))
    assert znode(b, "/config/clients/a%20b%2Fc%2A")["config"] == {"producer_byte_rate": "100"}
    assert last_notification(b)["entity_path"] == "clients/a%20b%2Fc%2A"

    # delete: the key goes, the znode stays (with an empty config), as kafka-configs --delete-config leaves it
    ok(quota(b, "delete", "--user", user, "--client-id", client, "request_percentage"))
    assert znode(b, f"/config/users/{user}/clients/{client}")["config"] == {"producer_byte_rate": "1024"}
    ok(quota(b, "delete", "--client-default", "consumer_byte_rate"))
    assert znode(b, "/config/clients/<default>") == {"version": 1, "config": {}}
    for entity in (["--client-default"], ["--user-default", "--client-default"], ["--client-id", odd],
                   ["--user", user, "--client-id", client]):  # fmt: skip
        ok(quota(b, "delete", *entity, "producer_byte_rate", "consumer_byte_rate"))


def test_a_scram_user_keeps_its_credentials_beside_its_quotas(b):
    user = unique("scram")
    with zk_session(b.zk_connect) as zk:
        credentials.write_user(zk, user, {"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", "pw", iterations=4096)})
        secret = zk_json(zk, f"/config/users/{user}")["config"]["SCRAM-SHA-256"]
    ok(quota(b, "set", "--user", user, "producer_byte_rate=5000", "consumer_byte_rate=6000"))
    assert znode(b, f"/config/users/{user}")["config"] == {
        "SCRAM-SHA-256": secret, "producer_byte_rate": "5000", "consumer_byte_rate": "6000"}  # fmt: skip
    ok(quota(b, "delete", "--user", user, "consumer_byte_rate"))
    assert znode(b, f"/config/users/{user}")["config"] == {"SCRAM-SHA-256": secret, "producer_byte_rate": "5000"}
    with zk_session(b.zk_connect) as zk:  # a new password keeps the quota
        credentials.write_user(zk, user, {"SCRAM-SHA-512": make_credential("SCRAM-SHA-512", "pw2", iterations=4096)})
        assert set(credentials.read_user(zk, user)) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert znode(b, f"/config/users/{user}")["config"]["producer_byte_rate"] == "5000"
    # the user's quota is listed, its credentials never are
    (doc,) = json_lines(ok(quota(b, "list", "--user", user, "-o", "json")))
    assert doc == {"user": user, "client_id": None, "quotas": {"producer_byte_rate": 5000}}
    ok(quota(b, "delete", "--user", user, "producer_byte_rate"))
    with zk_session(b.zk_connect) as zk:
        assert set(credentials.read_user(zk, user)) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}


def test_deleting_a_users_credentials_keeps_its_client_quotas(b):
    user, client = unique("scram2"), unique("c")
    with zk_session(b.zk_connect) as zk:
        credentials.write_user(zk, user, {"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", "pw", iterations=4096)})
    ok(quota(b, "set", "--user", user, "--client-id", client, "producer_byte_rate=1000"))
    with zk_session(b.zk_connect) as zk:
        assert credentials.delete_user(zk, user)
        assert credentials.read_user(zk, user) == {}
    assert znode(b, f"/config/users/{user}") == {"version": 1, "config": {}}
    assert znode(b, f"/config/users/{user}/clients/{client}")["config"] == {"producer_byte_rate": "1000"}
    (doc,) = json_lines(ok(quota(b, "list", "--user", user, "-o", "json")))
    assert doc == {"user": user, "client_id": client, "quotas": {"producer_byte_rate": 1000}}


# --- DescribeClientQuotas / AlterClientQuotas through kafka-python's protocol classes --------------------


def _entity(cls, **names):
    return [cls.EntryData.EntityData(entity_type=t.replace("_", "-"), entity_name=n) for t, n in names.items()]


def _send(admin: KafkaAdminClient, request):
    return admin._manager.run(admin._manager.send, request)


@pytest.mark.parametrize("version", [0, 1])
def test_kafka_python_alters_and_describes_client_quotas(b, version):
    user, client = unique("kpu"), unique("kpc")
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, client_id="kp-quota-test")
    try:
        ops = AlterClientQuotasRequest.EntryData.OpData
        req = AlterClientQuotasRequest(entries=[
            AlterClientQuotasRequest.EntryData(entity=_entity(AlterClientQuotasRequest, user=user, client_id=client),
                                               ops=[ops(key="producer_byte_rate", value=300000.0, remove=False)]),
            AlterClientQuotasRequest.EntryData(entity=_entity(AlterClientQuotasRequest, user=user),
                                               ops=[ops(key="consumer_byte_rate", value=7000.0, remove=False),
                                                    ops(key="request_percentage", value=12.5, remove=False)]),
            AlterClientQuotasRequest.EntryData(entity=_entity(AlterClientQuotasRequest, user=user),
                                               ops=[ops(key="no.such.quota", value=1.0, remove=False)]),
            AlterClientQuotasRequest.EntryData(entity=_entity(AlterClientQuotasRequest, user=user, client_id=client),
                                               ops=[ops(key="producer_byte_rate", value=1.5, remove=False)]),
            AlterClientQuotasRequest.EntryData(entity=_entity(AlterClientQuotasRequest, group=user),
                                               ops=[ops(key="producer_byte_rate", value=1.0, remove=False)]),
        ], validate_only=False, version=version)  # fmt: skip
        resp = _send(admin, req)
        codes = [(e.error_code, e.error_message) for e in resp.entries]
        assert codes[:2] == [(0, None), (0, None)]
        assert codes[2] == (42, "Invalid configuration key no.such.quota")
        assert codes[3] == (42, "Configuration producer_byte_rate must be a Long value")
        assert codes[4] == (42, "Unhandled client quota entity type: group")
        assert znode(b, f"/config/users/{user}")["config"] == {"consumer_byte_rate": "7000",
                                                                "request_percentage": "12.5"}  # fmt: skip

        comp = DescribeClientQuotasRequest.ComponentData
        req = DescribeClientQuotasRequest(components=[comp(entity_type="user", match_type=0, match=user)],
                                          strict=False, version=version)  # fmt: skip
        resp = _send(admin, req)
        assert resp.error_code == 0
        got = {tuple((e.entity_type, e.entity_name) for e in entry.entity):
               {v.key: v.value for v in entry.values} for entry in resp.entries}  # fmt: skip
        assert got == {
            (("user", user),): {"consumer_byte_rate": 7000.0, "request_percentage": 12.5},
            (("user", user), ("client-id", client)): {"producer_byte_rate": 300000.0},
        }
        # strict: only entities with exactly the components named
        req = DescribeClientQuotasRequest(components=[comp(entity_type="user", match_type=0, match=user)],
                                          strict=True, version=version)  # fmt: skip
        assert [len(e.entity) for e in _send(admin, req).entries] == [1]
        # validate_only changes nothing
        req = AlterClientQuotasRequest(entries=[AlterClientQuotasRequest.EntryData(
            entity=_entity(AlterClientQuotasRequest, user=user),
            ops=[ops(key="consumer_byte_rate", value=0.0, remove=True)],
        )], validate_only=True, version=version)  # fmt: skip
        assert _send(admin, req).entries[0].error_code == 0
        assert znode(b, f"/config/users/{user}")["config"]["consumer_byte_rate"] == "7000"
        # a bad filter: the whole answer's error
        req = DescribeClientQuotasRequest(components=[comp(entity_type="user", match_type=2, match=None)] * 2,
                                          strict=False, version=version)  # fmt: skip
        resp = _send(admin, req)
        assert (resp.error_code, resp.error_message) == (42, "Duplicate user filter component entity type")
    finally:
        admin.close()


def test_aiokafka_describes_client_quotas(b):
    """aiokafka has DescribeClientQuotas v0's classes (no admin method): its request through its admin client."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.protocol.admin import DescribeClientQuotasRequest as AioDescribe

    client = unique("aio")
    ok(quota(b, "set", "--client-id", client, "consumer_byte_rate=12345"))

    async def describe() -> list:
        admin = AIOKafkaAdminClient(bootstrap_servers=b.bootstrap)
        await admin.start()
        try:
            node = admin._client.get_random_node()
            resp = await admin._send_request_to_node(node, AioDescribe([("client-id", 0, client)], True))
        finally:
            await admin.close()
        assert resp.error_code == 0
        return resp.entries

    assert asyncio.run(describe()) == [([("client-id", client)], [("consumer_byte_rate", 12345.0)])]


def test_kafkactl_quota_list_filters_as_kafka_configs_describe(b):
    user, client = unique("lu"), unique("lc")
    ok(quota(b, "set", "--user", user, "producer_byte_rate=1000"))
    ok(quota(b, "set", "--user", user, "--client-id", client, "consumer_byte_rate=2000"))
    ok(quota(b, "set", "--client-id", client, "request_percentage=25"))
    docs = json_lines(ok(quota(b, "list", "--user", user, "-o", "json")))
    assert docs == [
        {"user": user, "client_id": None, "quotas": {"producer_byte_rate": 1000}},
        {"user": user, "client_id": client, "quotas": {"consumer_byte_rate": 2000}},
    ]
    docs = json_lines(ok(quota(b, "list", "--client-id", client, "-o", "json")))
    assert {(d["user"], d["client_id"]) for d in docs} == {(None, client), (user, client)}
    docs = json_lines(ok(quota(b, "list", "-o", "json")))
    assert {"user": None, "client_id": client, "quotas": {"request_percentage": 25}} in docs
    text = ok(quota(b, "list", "--user", user))
    assert user in text and "1000" in text and "2000" in text
    with Admin(b.bootstrap) as admin:
        assert admin.describe_client_quotas([("client-id", 0, client)], strict=True) == [
            ({"client-id": client}, {"request_percentage": 25.0})]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["set", "producer_byte_rate=1"], "give --user, --user-default, --client-id or --client-default"),
        (["set", "--user", "x", "bogus=1"], "unknown quota 'bogus'"),
        (["set", "--user", "x", "producer_byte_rate=abc"], "not a number"),
        (["set", "--user", "x", "producer_byte_rate=1.5"], "whole number"),
        (["set", "--user", "x", "producer_byte_rate=-5"], "positive"),
        (["set", "--user", "x", "producer_byte_rate"], "expected KEY=VALUE"),
        (["set", "--user", "x", "--user-default", "producer_byte_rate=1"], "not both"),
        (["set", "--user", "", "producer_byte_rate=1"], "must not be empty"),
        (["delete", "--client-id", "x", "nope"], "unknown quota 'nope'"),
    ],
)
def test_bad_quota_input_is_one_error_line(b, args, needle):
    error_line(quota(b, *args), needle)


# --- authorization --------------------------------------------------------------------------------------


def test_quotas_need_describe_configs_and_alter_configs_on_the_cluster(zk_server, tmp_path):
    auth = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin"}
    with BrokerProcess(1, new_chroot(zk_server.connect_string), tmp_path, overrides=auth) as broker:
        error_line(quota(broker, "set", "--client-id", "x", "producer_byte_rate=10"), "CLUSTER_AUTHORIZATION_FAILED")
        error_line(quota(broker, "list"), "CLUSTER_AUTHORIZATION_FAILED")
        with zk_session(broker.zk_connect) as zk:
            assert not zk.exists("/config/clients/x")
        # DescribeConfigs on the cluster lets it list; AlterConfigs lets it change
        _allow(broker, Operation.DESCRIBE_CONFIGS)
        wait_until(lambda: quota(broker, "list").returncode == 0, 20, "DescribeConfigs to be granted")
        error_line(quota(broker, "set", "--client-id", "x", "producer_byte_rate=10"), "CLUSTER_AUTHORIZATION_FAILED")
        _allow(broker, Operation.ALTER_CONFIGS)
        wait_until(lambda: quota(broker, "set", "--client-id", "x", "producer_byte_rate=10").returncode == 0, 20,
                   "AlterConfigs to be granted")  # fmt: skip
        assert znode(broker, "/config/clients/x")["config"] == {"producer_byte_rate": "10"}


def _allow(broker: BrokerProcess, op: Operation) -> None:
    with zk_session(broker.zk_connect) as zk:
        binding = Binding(Pattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL),
                          Entry("User:ANONYMOUS", "*", op, Permission.ALLOW))  # fmt: skip
        acl_store.add(zk, [binding])


# --- enforcement ----------------------------------------------------------------------------------------


def test_a_quota_written_into_zookeeper_reaches_the_broker_through_its_notification(b):
    """kafka-configs --zookeeper writes the znode and a notification; the broker throttles from then on."""
    client, topic = unique("zkq"), create_topic(b.bootstrap, unique("zkq"))
    with zk_session(b.zk_connect) as zk:
        zk.create(f"/config/clients/{client}", b'{"version":1,"config":{"producer_byte_rate":"10000"}}',
                  makepath=True)  # fmt: skip
        zk.create("/config/changes/config_change_", f'{{"version":2,"entity_path":"clients/{client}"}}'.encode(),
                  sequence=True)  # fmt: skip
    throttles: list[int] = []
    p = Producer({"bootstrap.servers": b.bootstrap, "client.id": client, "linger.ms": 5,
                  "throttle_cb": lambda e: throttles.append(e.throttle_time)})  # fmt: skip
    deadline = time.monotonic() + 20
    while not throttles and time.monotonic() < deadline:
        for _ in range(50):
            p.produce(topic, b"x" * 4000)
        p.flush(10)
        p.poll(0.1)
    assert throttles and max(throttles) > 0
    ok(quota(b, "delete", "--client-id", client, "producer_byte_rate"))


def test_a_users_quota_set_through_one_broker_throttles_that_user_on_another(start_broker):
    """Broker 2 learns of a quota set through broker 1 from the notification, and applies a user's quota to that
    user's SASL connections only (the principal User:carol); an anonymous client with the same client id is not
    throttled."""
    b1 = start_broker(1)
    port, sasl_port = free_port(), free_port()
    b2 = start_broker(2, overrides={"listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
                                    "inter.broker.listener.name": "PLAINTEXT"}, port=port)  # fmt: skip
    with zk_session(b1.zk_connect) as zk:
        credentials.write_user(zk, "carol", {"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", "pw", iterations=4096)})
    topic = unique("uq")
    with Admin(b1.bootstrap) as admin:
        admin.create_topic(topic, 2, 1)
        wait_until(lambda: len(admin.describe_topic(topic)) == 2, 20, "the topic's partitions")
        on_2 = next(p.partition for p in admin.describe_topic(topic) if p.leader == 2)
    ok(quota(b1, "set", "--user", "carol", "producer_byte_rate=20000"))

    def throttled(conf: dict[str, object], seconds: float) -> float:
        throttles: list[float] = []
        p = Producer({**conf, "client.id": "shared-id", "linger.ms": 5,
                      "throttle_cb": lambda e: throttles.append(e.throttle_time)})  # fmt: skip
        end = time.monotonic() + seconds
        while not [t for t in throttles if t > 0] and time.monotonic() < end:
            for _ in range(50):
                p.produce(topic, b"q" * 4000, partition=on_2)
            p.flush(15)
            p.poll(0.05)
        return max(throttles or [0.0])

    anonymous = {"bootstrap.servers": b2.bootstrap}
    carol = {"bootstrap.servers": f"127.0.0.1:{sasl_port}", "security.protocol": "SASL_PLAINTEXT",
             "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "carol", "sasl.password": "pw"}  # fmt: skip
    assert throttled(carol, 30) > 0
    assert throttled(anonymous, 3) == 0  # 3 s of 4 KB values: ~600 KB, far over 20 KB/s had it counted


def _produce_for(bootstrap: str, topic: str, client_id: str, seconds: float, throttles: list[float]) -> float:
    """Produce 100-byte values as fast as the broker takes them for `seconds`: the delivered bytes per second
    (small values: the client's own speed bounds the quiet producer, so a run writes some hundreds of MB, not GBs)."""
    delivered = [0]

    def on_delivery(err, msg) -> None:
        if err is None:
            delivered[0] += len(msg.value())

    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "acks": 1,
                  "queue.buffering.max.kbytes": 4096,
                  "throttle_cb": lambda e: throttles.append(e.throttle_time)})  # fmt: skip
    value = b"v" * 100
    start = time.monotonic()
    end = start + seconds
    while time.monotonic() < end:
        try:
            p.produce(topic, value, on_delivery=on_delivery)
        except BufferError:
            p.poll(0.01)
            continue
        p.poll(0)
    elapsed = time.monotonic() - start
    p.purge()  # what is still queued is not counted (it was not delivered in the time)
    p.flush(5)
    return delivered[0] / elapsed


@pytest.mark.slow
def test_a_noisy_producer_is_throttled_while_another_keeps_its_rate(b):
    quota_rate = 200_000
    noisy, quiet = unique("noisy"), unique("quiet")
    t_noisy, t_quiet = create_topic(b.bootstrap, unique("tn")), create_topic(b.bootstrap, unique("tq"))
    ok(quota(b, "set", "--client-id", noisy, f"producer_byte_rate={quota_rate}"))
    alone = _produce_for(b.bootstrap, t_quiet, quiet, 5, [])
    assert alone > 5 * quota_rate, f"the quiet producer alone: {alone:.0f} B/s"

    noisy_throttles: list[float] = []
    quiet_throttles: list[float] = []
    rates: dict[str, float] = {}
    th = threading.Thread(target=lambda: rates.__setitem__("noisy", _produce_for(b.bootstrap, t_noisy, noisy, 15,
                                                                                 noisy_throttles)))  # fmt: skip
    th.start()
    time.sleep(2)  # the noisy one has used its first window's allowance: throttled from here on
    rates["quiet"] = _produce_for(b.bootstrap, t_quiet, quiet, 10, quiet_throttles)
    th.join(60)
    assert not th.is_alive()
    assert noisy_throttles and max(noisy_throttles) > 0, "the noisy producer saw no throttle_time_ms"
    assert not [t for t in quiet_throttles if t > 0], "the quiet producer was throttled"
    # the quota: at most the first windows' burst over it (the rate's span is at least 10 s), with a wide margin
    assert rates["noisy"] < 3.5 * quota_rate, f"noisy: {rates['noisy']:.0f} B/s, quota {quota_rate}"
    assert rates["noisy"] > 0.2 * quota_rate, f"noisy: {rates['noisy']:.0f} B/s, quota {quota_rate}"
    assert rates["quiet"] > 0.4 * alone, f"quiet: {rates['quiet']:.0f} B/s beside the noisy one, {alone:.0f} alone"
    ok(quota(b, "delete", "--client-id", noisy, "producer_byte_rate"))


@pytest.mark.slow
def test_a_client_over_its_request_percentage_is_throttled_and_muted(b):
    """request_percentage=0.05: a twentieth of a percent of one thread, 0.5 ms of handling a second. A client sending
    Metadata requests back to back is throttled past its first window's allowance: each answer's throttle_time_ms
    is waited out before its next request is read (muted), and it gets through far fewer requests than another
    client, which is neither throttled nor slowed."""
    busy = unique("busy")
    create_topic(b.bootstrap, unique("rq"))
    ok(quota(b, "set", "--client-id", busy, "request_percentage=0.05"))
    host, _, port = b.bootstrap.rpartition(":")
    body = {"topics": None, "allow_auto_topic_creation": False}

    def run(conn: Connection, seconds: float, waits: list[tuple[int, float]]) -> tuple[int, int]:
        """(requests answered, the largest throttle) in `seconds`; (throttle, next round trip) noted in `waits`."""
        count, prev, most = 0, 0, 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.monotonic()
            throttle = conn.request(ApiKey.METADATA, body)["throttle_time_ms"]
            if prev >= 20:
                waits.append((prev, time.monotonic() - t0))
            prev, most, count = throttle, max(most, throttle), count + 1
        return count, most

    with Connection(host, int(port), client_id=busy, timeout=30) as conn:
        deadline = time.monotonic() + 20
        while conn.request(ApiKey.METADATA, body)["throttle_time_ms"] == 0:  # the first window's allowance
            assert time.monotonic() < deadline, "no throttle within 20 s of back-to-back Metadata requests"
        waits: list[tuple[int, float]] = []
        busy_count, most = run(conn, 3, waits)
    with Connection(host, int(port), client_id=unique("other"), timeout=30) as other:
        other_count, other_most = run(other, 3, [])
    assert most > 0 and other_most == 0
    assert busy_count < other_count / 3, f"busy: {busy_count} requests in 3 s, another client {other_count}"
    assert waits, "no throttle long enough to time"
    assert all(rt >= 0.8 * t / 1000 - 0.01 for t, rt in waits), f"a throttle not waited out (ms, s): {waits[:5]}"
    ok(quota(b, "delete", "--client-id", busy, "request_percentage"))


@pytest.mark.slow
def test_a_consumer_over_its_byte_rate_is_throttled_and_another_reads_everything(b):
    topic = create_topic(b.bootstrap, unique("fq"))
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20, "batch.size": 20000})  # batches far below the cap
    for _ in range(2000):
        p.produce(topic, b"f" * 1000)
    assert p.flush(30) == 0
    total = 2000 * 1000
    slow, fast = unique("slowreader"), unique("fastreader")
    ok(quota(b, "set", "--client-id", slow, "consumer_byte_rate=50000"))

    def consume(client_id: str, seconds: float, throttles: list[int]) -> int:
        c = Consumer({"bootstrap.servers": b.bootstrap, "client.id": client_id, "group.id": unique("g"),
                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "throttle_cb": lambda e: throttles.append(e.throttle_time)})  # fmt: skip
        c.subscribe([topic])
        got = 0
        end = time.monotonic() + seconds
        try:
            while time.monotonic() < end and got < total:
                for m in c.consume(500, 0.2):
                    if not m.error():
                        got += len(m.value())
        finally:
            c.close()
        return got

    fast_throttles: list[int] = []
    assert consume(fast, 30, fast_throttles) == total
    assert not [t for t in fast_throttles if t > 0]
    slow_throttles: list[int] = []
    got = consume(slow, 8, slow_throttles)
    # 50 KB/s over a span of at least 10 s: about 0.5 MB before the throttle, far from the 2 MB there are; but
    # something (each fetch is capped at what the quota lets through, as Kafka caps it: never starved)
    assert 0 < got < total // 2, f"the throttled consumer read {got} of {total} bytes in 8 s"
    assert slow_throttles and max(slow_throttles) > 0
    ok(quota(b, "delete", "--client-id", slow, "consumer_byte_rate"))
