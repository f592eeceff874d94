"""Issue 17 (TLS, SASL, ACLs) from a user's side, against real processes only.

1. Three brokers that replicate over a SASL_SSL inter-broker listener (SCRAM-SHA-512, the broker user a super
   user), the ACL authorizer on, clients on the same SASL_SSL listener: alice, granted produce and consume with
   `kafkactl acl add` by an admin super user, writes acks=all with an idempotent confluent-kafka producer while
   the leader of a partition is killed with kill -9; `kafkactl consume` over SASL_SSL (a context) then reads every
   message exactly once, in order per partition. bob, without an ACL, gets TOPIC_AUTHORIZATION_FAILED and
   nothing, before and after the kill.
2. Hostile user names (`,` `=` `%` a space `*` non-ASCII; `/` on its own) through `kafkactl user add|list`, a
   SCRAM-SHA-256 login of each with kcat and confluent-kafka, ACLs for their principals on a 249-character
   topic of dots, underscores and dashes and on a prefixed pattern, round-tripped through
   `kafkactl acl list --json`; illegal input is one error line and a non-zero exit.
3. The TAB key in bash and zsh completes `kafkactl acl`, `kafkactl user` and `kafkactl acl add --op`.
"""

from __future__ import annotations

import collections
import json
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from broker.daemon import free_port
from broker.security.certs import Pki
from tests.cli_runner import run_cli
from tests.integration.cluster import BrokerProcess, new_chroot
from tests.integration.helpers import cli, cli_env, error_line, json_lines, ok, wait_until
from tests.integration.test_replication import states
from tests.integration.test_shell_completion import shell_env
from tests.integration.test_shell_completion import start as start_shell

KCAT = "/usr/bin/kcat"
AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
              "allow.everyone.if.no.acl.found": "false"}  # fmt: skip


def kafkactl(
    xdg: Path, *args: object, input_text: str | None = None, timeout: float = 90
) -> subprocess.CompletedProcess:
    """`kafkactl ARGS` with its own config dir (contexts) and no KAFKACTL_* variables."""
    return run_cli(list(args), cli_env(XDG_CONFIG_HOME=str(xdg)), input=input_text, timeout=timeout)


def xs(settings: dict[str, str]) -> list[str]:
    """`-X KEY=VALUE` for each setting."""
    return [arg for key, value in settings.items() for arg in ("-X", f"{key}={value}")]


def together(*calls: tuple) -> list:
    """Run `(fn, *args)` calls at the same time (independent CLI and kcat processes); their results in order."""
    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(lambda call: call[0](*call[1:]), calls))


def add_user(zk: str, name: str, password: str, *mechanism: str) -> str:
    args = [a for m in mechanism for a in ("-m", m)]
    return ok(cli("user", "add", name, "--password-stdin", *args, "-z", zk, input_text=password + "\n")).strip()


# --- 1. a SASL_SSL cluster with ACLs through a leader's kill -9 -------------------------------------------------

SASL_USERS = {"broker": "broker-secret", "admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
CHAOS_TOPIC = "payments"
PER_CHUNK, KILL_AFTER, AFTER_MOVE = 50, 8, 8  # chunks before the kill, and after the leader moved


def sasl_ssl(pki: Pki, user: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
    """librdkafka's (and kafkactl's) client settings for `user` on the SASL_SSL listener."""
    return {"security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca), "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": SASL_USERS[user]}  # fmt: skip


def confluent(settings: dict[str, str]) -> dict[str, str]:
    out = dict(settings)
    out["sasl.mechanisms"] = out.pop("sasl.mechanism")
    return out


def bob_is_refused(xdg: Path, pki: Pki, bootstrap: str) -> None:
    """bob, with no ACL: `kafkactl consume` is one TOPIC_AUTHORIZATION_FAILED line, and a confluent-kafka
    producer gets TOPIC_AUTHORIZATION_FAILED for every message."""
    from confluent_kafka import KafkaError, Producer

    r = kafkactl(xdg, "consume", CHAOS_TOPIC, "-b", bootstrap, "--exit", *xs(sasl_ssl(pki, "bob")), timeout=60)
    assert "TOPIC_AUTHORIZATION_FAILED" in error_line(r)
    assert r.returncode == 1 and r.stdout == ""
    errors: list = []
    p = Producer({"bootstrap.servers": bootstrap, **confluent(sasl_ssl(pki, "bob")), "retries": 0,
                  "message.timeout.ms": 10000})  # fmt: skip
    for i in range(3):
        p.produce(CHAOS_TOPIC, key=b"bob", value=b"bob-%d" % i, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(20) == 0
    assert [e.code() if e else None for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_acls_hold_and_acks_all_writes_survive_a_leaders_kill_on_a_sasl_ssl_cluster(start_broker, zk_chroot, pki,
                                                                                     tmp_path):  # fmt: skip
    from confluent_kafka import Producer

    for user, password in SASL_USERS.items():
        add_user(zk_chroot, user, password)
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
            f'password="{SASL_USERS["broker"]}";')  # fmt: skip
    brokers = []
    for broker_id in (1, 2, 3):
        port = free_port()
        overrides = {
            "listeners": f"SASL_SSL://127.0.0.1:{port}", "inter.broker.listener.name": "SASL_SSL",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas,
            "ssl.keystore.location": str(pki.keystore("broker")), "ssl.truststore.location": str(pki.ca),
            "super.users": "User:broker;User:admin", **AUTHORIZER,
            "zookeeper.session.timeout.ms": "3000", "replica.lag.time.max.ms": "2000",
        }  # fmt: skip
        brokers.append(start_broker(broker_id, overrides=overrides, port=port))
    by_id = {b.broker_id: b for b in brokers}
    everyone = ",".join(b.bootstrap for b in brokers)
    admin = xs(sasl_ssl(pki, "admin"))
    ok(kafkactl(tmp_path, *admin, "topic", "create", CHAOS_TOPIC, "-p", 3, "-r", 3, "--config",
                "min.insync.replicas=2", "-b", everyone))  # fmt: skip
    out = ok(kafkactl(tmp_path, *admin, "acl", "add", "--allow-principal", "User:alice", "--producer",
                      "--idempotent", "--topic", CHAOS_TOPIC, "-b", everyone))  # fmt: skip
    out += ok(kafkactl(tmp_path, *admin, "acl", "add", "--allow-principal", "User:alice", "--operation", "Read",
                       "--topic", CHAOS_TOPIC, "-b", everyone))  # fmt: skip
    assert out.count("added:") == 5, out  # Write, Describe, Create, IdempotentWrite on the cluster, Read
    rows = json_lines(ok(kafkactl(tmp_path, *admin, "acl", "list", "--principal", "User:alice", "--json",
                                  "-b", everyone)))  # fmt: skip
    assert sorted((r["resource_type"], r["name"], r["operation"]) for r in rows) == [
        ("Cluster", "kafka-cluster", "IdempotentWrite"), ("Topic", CHAOS_TOPIC, "Create"),
        ("Topic", CHAOS_TOPIC, "Describe"), ("Topic", CHAOS_TOPIC, "Read"), ("Topic", CHAOS_TOPIC, "Write"),
    ]  # fmt: skip
    wait_until(lambda: all(len(st["isr"]) == 3 for st in states(zk_chroot, CHAOS_TOPIC).values()), 20,
               "every replica in sync over SASL_SSL")  # fmt: skip
    bob_is_refused(tmp_path, pki, everyone)

    delivered: list[tuple[int, int, bytes, bytes]] = []
    failed: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            failed.append(f"{msg.key()!r}: {err}")
        else:
            delivered.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    producer = Producer({"bootstrap.servers": everyone, **confluent(sasl_ssl(pki, "alice")), "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 60000})  # fmt: skip
    leader0 = states(zk_chroot, CHAOS_TOPIC)[0]["leader"]
    victim = by_id[leader0]
    sent: list[tuple[bytes, bytes]] = []
    chunk, moved_at, deadline = 0, None, time.monotonic() + 45
    while moved_at is None or chunk < moved_at + AFTER_MOVE:  # before the kill, while leaderless, after the move
        if chunk == KILL_AFTER:
            victim.kill()  # kill -9 of partition 0's leader, with writes in flight
        for i in range(PER_CHUNK):
            n = chunk * PER_CHUNK + i
            key, value = b"k%03d" % (n % 97), b"m%05d" % n  # 97 keys over 3 partitions: each key stays in order
            producer.produce(CHAOS_TOPIC, key=key, value=value, on_delivery=on_delivery)
            sent.append((key, value))
        producer.poll(0.1)
        chunk += 1
        if chunk > KILL_AFTER and moved_at is None and states(zk_chroot, CHAOS_TOPIC)[0]["leader"] not in (leader0, -1):
            moved_at = chunk
        assert time.monotonic() < deadline, "partition 0 never got a new leader"
    assert producer.flush(90) == 0, "messages left unanswered"
    assert failed == [], failed[:5]
    assert len(delivered) == len(sent)
    after = states(zk_chroot, CHAOS_TOPIC)
    assert after[0]["leader"] not in (leader0, -1), after  # partition 0 moved (the controller saw the kill)
    assert all(st["leader"] != leader0 for st in after.values()), after

    survivors = [b for b in brokers if b is not victim]
    bootstrap = ",".join(b.bootstrap for b in survivors)
    ok(kafkactl(tmp_path, "config", "add", "alice", "-b", bootstrap, *xs(sasl_ssl(pki, "alice")), "--use"))
    r = kafkactl(tmp_path, "consume", CHAOS_TOPIC, "--exit", "--format", "%p %o %k %s\\n", timeout=120)
    read = [line.split(" ") for line in ok(r).splitlines() if line]
    got = [(int(p), int(o), k.encode(), v.encode()) for p, o, k, v in read]
    values = [v for _, _, _, v in got]
    assert len(got) == len(sent) and sorted(values) == sorted(v for _, v in sent), (
        f"read {len(got)} of {len(sent)}; twice: {[v for v, c in collections.Counter(values).items() if c > 1][:5]}"
    )  # every message that went in, exactly once (the idempotent producer's retries are not stored twice)
    assert sorted(got) == sorted(delivered)  # at the partition, offset and key its acknowledgement gave
    for partition in range(3):
        mine = [(o, k, v) for p, o, k, v in got if p == partition]
        assert [o for o, _, _ in mine] == list(range(len(mine))), f"partition {partition}: offsets not 0..n-1"
        order = {v: i for i, (_, v) in enumerate(sent)}
        assert [order[v] for _, _, v in mine] == sorted(order[v] for _, _, v in mine), f"partition {partition}"
        assert all(b"bob" not in k for _, k, _ in mine)
    bob_is_refused(tmp_path, pki, bootstrap)  # still nothing for bob on the brokers that took over
    logs = "".join(b.log_text() for b in brokers)
    assert "Principal = User:bob is Denied Operation = " in logs
    assert "Principal = User:broker is Denied" not in logs  # the followers' fetches were never refused
    print(f"\n{len(sent)} acks=all messages; broker {leader0} killed after {KILL_AFTER * PER_CHUNK}, partition 0 "
          f"led by broker {after[0]['leader']} after {moved_at * PER_CHUNK}")  # fmt: skip


# --- 2. hostile user names, topic names and prefixes ------------------------------------------------------------

#: user name → password; `,` and `=` are escaped in SCRAM's n=..., `%` and `*` percent-encoded in the znode name
HOSTILE = {
    "ops,team=blue": "pw-comma-equals",
    "100%": "pw-percent",
    "pct%2Fliteral": "pw-encoded-lookalike",
    "john smith": "pw space",
    "star*": "pw-star",
    "Zoë-Ωμέγα-名前": "pw-ünïcode",
}
LONG_TOPIC = ("hostile.topic_name-" * 14)[:249]
PREFIX = "team.a_b-"


class Secured:
    def __init__(self, broker: BrokerProcess, sasl_port: int, chroot: str) -> None:
        self.broker, self.sasl_port, self.chroot = broker, sasl_port, chroot

    @property
    def admin(self) -> str:  # the PLAINTEXT listener: User:ANONYMOUS, a super user
        return self.broker.bootstrap

    @property
    def sasl(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"


@pytest.fixture(scope="module")
def secured(zk_server, tmp_path_factory) -> Secured:
    """One broker with the authorizer on: PLAINTEXT for the administrator (User:ANONYMOUS is a super user) and
    SASL_PLAINTEXT for the users."""
    chroot = new_chroot(zk_server.connect_string)
    port, sasl_port = free_port(), free_port()
    overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
                 "inter.broker.listener.name": "PLAINTEXT", "super.users": "User:ANONYMOUS", **AUTHORIZER}  # fmt: skip
    with BrokerProcess(1, chroot, tmp_path_factory.mktemp("hostile"), port=port, overrides=overrides) as b:
        yield Secured(b, sasl_port, chroot)


def scram256(s: Secured, user: str, password: str) -> dict[str, str]:
    return {"bootstrap.servers": s.sasl, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-256",
            "sasl.username": user, "sasl.password": password}  # fmt: skip


def confluent_produce(s: Secured, user: str, topic: str, records: list[tuple[bytes, bytes]]) -> list:
    """Each record's delivery error (None when stored), produced as `user` to partition 0."""
    from confluent_kafka import Producer

    errors: list = []
    p = Producer({**scram256(s, user, HOSTILE.get(user, "")), "message.timeout.ms": 10000, "retries": 0})
    for key, value in records:
        p.produce(topic, key=key, value=value, partition=0, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(20) == 0
    return [e.code() if e else None for e in errors]


def kcat(s: Secured, user: str, *args: str, input_text: str | None = None) -> subprocess.CompletedProcess:
    sec = [a for k, v in scram256(s, user, HOSTILE[user]).items() for a in ("-X", f"{k}={v}")]
    return subprocess.run([KCAT, *sec, *args], capture_output=True, text=True, timeout=60, input=input_text,
                          stdin=subprocess.DEVNULL if input_text is None else None)  # fmt: skip


def kcat_read(s: Secured, user: str, topic: str) -> list[tuple[int, str, str]]:
    """(offset, key, value) of every message of partition 0, read by kcat as `user` (fails on any error)."""
    r = kcat(s, user, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-J", "-q")
    assert r.returncode == 0, f"kcat as {user!r}: {r.stderr}"
    docs = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    return [(d["offset"], d["key"], d["payload"]) for d in docs]


def acl_rows(s: Secured, *args: str) -> list[dict]:
    return json_lines(ok(cli("acl", "list", *args, "--json", "-b", s.admin)))


def acl_row(name: str, pattern: str, principal: str, operation: str) -> dict:
    return {"resource_type": "Topic", "pattern_type": pattern, "name": name, "principal": principal, "host": "*",
            "operation": operation, "permission": "Allow"}  # fmt: skip


def test_hostile_user_names_log_in_and_their_acls_round_trip(secured: Secured):
    s = secured
    added = together(*((add_user, s.chroot, user, password, "SCRAM-SHA-256") for user, password in HOSTILE.items()))
    assert added == [f"user {user} added (SCRAM-SHA-256, 4096 iterations)" for user in HOSTILE]
    listed = json_lines(ok(cli("user", "list", "-o", "json", "-z", s.chroot)))
    assert sorted(d["user"] for d in listed) == sorted(HOSTILE)  # each name back exactly, none twice
    assert all(d["mechanisms"] == {"SCRAM-SHA-256": {"iterations": 4096}} for d in listed)

    assert len(LONG_TOPIC) == 249
    inside, outside = PREFIX + "orders", "team.a_c-orders"
    only_star = "only.star_topic"
    for r in together(*((cli, "topic", "create", t, "-p", 1, "-b", s.admin) for t in (LONG_TOPIC, inside, outside,
                                                                                     only_star))):  # fmt: skip
        ok(r)
    principals = [f"User:{u}" for u in HOSTILE]
    grant = [a for p in principals for a in ("--allow-principal", p)]
    ops = ["--operation", "Read", "--operation", "Write", "--operation", "Describe"]
    out = "".join(ok(r) for r in together(
        (cli, "acl", "add", *grant, *ops, "--topic", LONG_TOPIC, "-b", s.admin),
        (cli, "acl", "add", *grant, *ops, "--topic", PREFIX, "--resource-pattern-type", "prefixed", "-b", s.admin),
        (cli, "acl", "add", "--allow-principal", "User:star*", *ops, "--topic", only_star, "-b", s.admin),
    ))  # fmt: skip
    assert out.count("added:") == 2 * 3 * len(HOSTILE) + 3

    def expected(name: str, pattern: str, who: list[str]) -> list[dict]:
        return [acl_row(name, pattern, p, op) for p in who for op in ("Read", "Write", "Describe")]

    key = lambda r: json.dumps(r, sort_keys=True)  # noqa: E731
    by_long, by_prefix, literal_prefix, matching, *by_principal = together(
        (acl_rows, s, "--topic", LONG_TOPIC),
        (acl_rows, s, "--topic", PREFIX, "--resource-pattern-type", "prefixed"),
        (acl_rows, s, "--topic", PREFIX, "--resource-pattern-type", "literal"),
        (acl_rows, s, "--topic", inside, "--resource-pattern-type", "match"),
        *((acl_rows, s, "--principal", p) for p in principals),
    )  # fmt: skip
    assert sorted(by_long, key=key) == sorted(expected(LONG_TOPIC, "LITERAL", principals), key=key)
    assert sorted(by_prefix, key=key) == sorted(expected(PREFIX, "PREFIXED", principals), key=key)
    assert literal_prefix == []
    assert sorted(matching, key=key) == sorted(expected(PREFIX, "PREFIXED", principals), key=key)
    for p, mine in zip(principals, by_principal, strict=True):  # each principal, as a filter: exactly its own ACLs
        want_rows = expected(LONG_TOPIC, "LITERAL", [p]) + expected(PREFIX, "PREFIXED", [p])
        if p == "User:star*":
            want_rows += expected(only_star, "LITERAL", [p])
        assert sorted(mine, key=key) == sorted(want_rows, key=key), p

    # each user logs in with SCRAM-SHA-256: confluent-kafka writes, kcat reads everything back
    users = list(HOSTILE)
    for user in users:
        assert confluent_produce(s, user, LONG_TOPIC, [(user.encode(), f"from {user}".encode())]) == [None]
    want = [(i, u, f"from {u}") for i, u in enumerate(users)]
    assert together(*((kcat_read, s, user, LONG_TOPIC) for user in users)) == [want] * len(users)
    # under the prefix: kcat writes (key:value), confluent-kafka's consumer is not needed; kcat reads back
    for user in users:
        r = kcat(s, user, "-P", "-t", inside, "-p", "0", "-K", "\t", input_text=f"{user}\tprefixed {user}\n")
        assert r.returncode == 0, (user, r.stderr)
    assert kcat_read(s, users[0], inside) == [(i, u, f"prefixed {u}") for i, u in enumerate(users)]
    # a name that only looks like the prefix is not covered: refused, nothing stored
    from confluent_kafka import KafkaError

    assert confluent_produce(s, users[0], outside, [(b"k", b"never")]) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    r = kcat(s, users[0], "-C", "-t", outside, "-p", "0", "-o", "beginning", "-e", "-J", "-q")
    assert r.returncode != 0 and r.stdout.strip() == "" and "authoriz" in r.stderr.lower(), r
    assert json_lines(ok(cli("consume", outside, "--exit", "-o", "json", "-b", s.admin))) == []
    # User:star* is one user, not a wildcard: a user with no ACL of its own gets nothing on a star*-only topic
    assert confluent_produce(s, "star*", only_star, [(b"s", b"star was here")]) == [None]
    assert confluent_produce(s, "john smith", only_star, [(b"j", b"no")]) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert kcat_read(s, "star*", only_star) == [(0, "s", "star was here")]

    # removing one principal's ACLs: a dry run first (nothing goes), then for real (that user is refused)
    victim = "User:ops,team=blue"
    out = ok(cli("acl", "remove", "--topic", LONG_TOPIC, "--principal", victim, "--dry-run", "-b", s.admin))
    assert out.count("would remove: ") == 3 and all(victim in ln for ln in out.splitlines()), out
    assert len(acl_rows(s, "--topic", LONG_TOPIC)) == 3 * len(HOSTILE)
    out = ok(cli("acl", "remove", "--topic", LONG_TOPIC, "--principal", victim, "-b", s.admin))
    assert out.count("removed: ") == 3
    assert sorted(acl_rows(s, "--topic", LONG_TOPIC), key=key) == sorted(
        expected(LONG_TOPIC, "LITERAL", [p for p in principals if p != victim]), key=key)  # fmt: skip
    r = kcat(s, "ops,team=blue", "-C", "-t", LONG_TOPIC, "-p", "0", "-o", "beginning", "-e", "-J", "-q")
    assert r.returncode != 0 and r.stdout.strip() == "", r
    assert kcat_read(s, "100%", LONG_TOPIC) == want  # the others still read all of it

    # kafkactl's own SCRAM client with a hostile name: the right password reads it all, a wrong one is one line
    user = "Zoë-Ωμέγα-名前"

    def as_user(password: str) -> list[str]:
        return ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-256",
                "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]  # fmt: skip

    right, wrong = together(
        (cli, *as_user(HOSTILE[user]), "consume", LONG_TOPIC, "--exit", "-o", "json", "-b", s.sasl),
        (cli, *as_user("wrong"), "consume", LONG_TOPIC, "--exit", "-o", "json", "-b", s.sasl),
    )  # fmt: skip
    assert [(m["offset"], m["key"], m["value"]) for m in json_lines(ok(right))] == want
    error_line(wrong, f"authentication failed for user '{user}' at {s.sasl} (SASL_AUTHENTICATION_FAILED")
    assert wrong.returncode == 1 and wrong.stdout == ""


def test_illegal_input_is_one_error_line_and_changes_nothing(secured: Secured):
    s = secured
    before_users, before_acls = together((cli, "user", "list", "-o", "json", "-z", s.chroot), (acl_rows, s))
    adding = ("acl", "add", "--allow-principal")
    results = together(
        (cli, "user", "add", "", "--password", "x", "-z", s.chroot),
        (cli, *adding, "User:ops,team=blue", "--operation", "nonsense", "--topic", LONG_TOPIC, "-b", s.admin),
        (cli, *adding, "ops,team=blue", "--operation", "Read", "--topic", LONG_TOPIC, "-b", s.admin),
        (cli, *adding, "User:", "--operation", "Read", "--topic", LONG_TOPIC, "-b", s.admin),
        (cli, "acl", "list", "--principal", "star*", "-b", s.admin),
        (cli, *adding, "User:x", "--operation", "Read", "--topic", "", "-b", s.admin),
    )  # fmt: skip
    expected = [
        ["user name", "must not be empty"],
        ["--operation 'nonsense'", "expected one of All, Read, Write"],
        ["--allow-principal 'ops,team=blue'", "expected Type:name"],
        ["--allow-principal 'User:'", "expected Type:name"],
        ["--principal 'star*'", "expected Type:name"],
        ["--topic: the name must not be empty"],
    ]
    for r, needles in zip(results, expected, strict=True):
        error_line(r, *needles)
        assert r.returncode != 0 and r.stdout == "", r
    after_users, after_acls = together((cli, "user", "list", "-o", "json", "-z", s.chroot), (acl_rows, s))
    assert json_lines(ok(after_users)) == json_lines(ok(before_users))
    assert after_acls == before_acls


def test_a_user_name_with_a_slash_logs_in(secured: Secured):
    s = secured
    user, password = "svc/etl", "pw-slash"
    HOSTILE_SLASH = {user: password}
    add_user(s.chroot, user, password, "SCRAM-SHA-256")
    assert user in [d["user"] for d in json_lines(ok(cli("user", "list", "-o", "json", "-z", s.chroot)))]
    topic = "slash.user_topic"
    ok(cli("topic", "create", topic, "-p", 1, "-b", s.admin))
    ok(cli("acl", "add", "--allow-principal", f"User:{user}", "--operation", "Write", "--operation", "Read",
           "--topic", topic, "-b", s.admin))  # fmt: skip
    assert [r["principal"] for r in acl_rows(s, "--topic", topic)] == [f"User:{user}"] * 2
    from confluent_kafka import Producer

    errors: list = []
    p = Producer({**scram256(s, user, HOSTILE_SLASH[user]), "message.timeout.ms": 10000})
    p.produce(topic, key=b"k", value=b"slash", partition=0, on_delivery=lambda err, msg: errors.append(err))
    p.flush(20)
    assert errors == [None]


# --- 3. the TAB key ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_tab_completes_acl_and_user_subcommands_and_options(shell):
    if shutil.which(shell) is None:
        pytest.fail(f"{shell} is not installed (scripts/setup.sh installs it with the test extra)")
    term = start_shell(shell, shell_env("127.0.0.1:1"))  # (no broker: these completions need none)
    try:
        every = lambda *words: "(?s)" + "".join(rf"(?=.*\b{w}\b)" for w in words)  # noqa: E731
        term.type("kafkactl acl \t\t")
        shown = term.read_until(every("add", "list", "remove"))
        assert "Traceback" not in shown
        term.type("\x15kafkactl user \t\t")
        shown = term.read_until(every("add", "delete", "list"))
        assert "Traceback" not in shown and "remove" not in shown
        term.type("\x15kafkactl acl add --op\t")
        term.read_until(r"--operation ")
        term.type("\x15kafkactl acl ad\t")  # one match: completed in place
        term.read_until(r"kafkactl acl add ")
    finally:
        term.close()


@pytest.mark.parametrize(("line", "want"), [
    ("kafkactl acl ", ["add", "remove", "list"]),
    ("kafkactl user ", ["add", "delete", "list"]),
    ("kafkactl acl add --op", ["--operation"]),
    ("kafkactl acl list --out", ["--output"]),
])  # fmt: skip
def test_the_completion_protocol_offers_exactly_these_words(line, want):
    words = line.split(" ")
    env = {**shell_env("127.0.0.1:1"), "COMP_WORDS": line, "COMP_CWORD": str(len(words) - 1),
           "_KAFKACTL_COMPLETE": "complete_bash"}  # fmt: skip
    r = subprocess.run([sys.executable, "-m", "kafkactl"], capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 0 and r.stderr == "", r
    assert r.stdout.split() == want
