"""kafkactl's own clients over TLS and SASL against a live broker: `produce`, `consume` and `topic list` over
SSL (with a client certificate), SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and SASL_SSL, with the
settings from a context, from the root `-X` and from the command's `-X`; a wrong password, an untrusted
broker and an expired client certificate each refused with one error line and nothing served."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from broker.daemon import free_port
from broker.security.certs import Pki, make_pki
from tests.cli_runner import run_cli
from tests.integration.helpers import cli_env, error_line, json_lines, ok

USERS = {"alice": "alice-secret"}


class Secured:
    """The module's broker: one port per security protocol."""

    def __init__(self, pki: Pki, ports: dict[str, int], root: Path, chroot: str) -> None:
        self.pki, self.ports, self.root, self.chroot = pki, ports, root, chroot

    def address(self, protocol: str) -> str:
        return f"127.0.0.1:{self.ports[protocol]}"


@pytest.fixture(scope="module")
def secured(zk_server, tmp_path_factory) -> Secured:
    """A broker with PLAINTEXT (between brokers), SSL (client certificates required), SASL_PLAINTEXT and
    SASL_SSL listeners; alice's SCRAM credentials added with `kafkactl user add` (PLAIN checks them too)."""
    from tests.integration.cluster import BrokerProcess, new_chroot

    root = tmp_path_factory.mktemp("cli-security")
    pki = make_pki(root / "pki")
    chroot = new_chroot(zk_server.connect_string)
    for user, password in USERS.items():
        ok(kafkactl(root, "user", "add", user, "--password-stdin", "-z", chroot, input_text=password + "\n"))
    ports = {p: free_port() for p in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}
    overrides = {
        "listeners": ",".join(f"{p}://127.0.0.1:{port}" for p, port in ports.items()),
        "ssl.keystore.location": str(pki.keystore("broker")), "ssl.truststore.location": str(pki.ca),
        "listener.name.ssl.ssl.client.auth": "required",
    }  # fmt: skip
    with BrokerProcess(1, chroot, root, port=ports["PLAINTEXT"], overrides=overrides):
        yield Secured(pki, ports, root, chroot)


def kafkactl(xdg: Path, *args: object, input_text: str | None = None) -> subprocess.CompletedProcess:
    """`kafkactl ARGS` with its own config dir (contexts) and no KAFKACTL_* variables."""
    return run_cli(list(args), cli_env(XDG_CONFIG_HOME=str(xdg)), input=input_text, timeout=90)


def settings(s: Secured, protocol: str, mechanism: str | None = None, password: str = "alice-secret") -> list[str]:
    """The librdkafka-named settings of a client of `protocol`, as KEY=VALUE."""
    out = [f"security.protocol={protocol}"]
    if "SSL" in protocol:
        out.append(f"ssl.ca.location={s.pki.ca}")
    if protocol == "SSL":
        out += [f"ssl.certificate.location={s.pki.cert('client')}", f"ssl.key.location={s.pki.key('client')}"]
    if mechanism is not None:
        out += [f"sasl.mechanism={mechanism}", "sasl.username=alice", f"sasl.password={password}"]
    return out


def xs(pairs: list[str]) -> list[str]:
    return [arg for pair in pairs for arg in ("-X", pair)]


CASES = [
    ("SSL", None),
    ("SASL_PLAINTEXT", "PLAIN"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
    ("SASL_SSL", "SCRAM-SHA-256"),
    ("SASL_SSL", "PLAIN"),
]


@pytest.mark.parametrize(("protocol", "mechanism"), CASES, ids=[f"{p}-{m or 'cert'}" for p, m in CASES])
def test_produce_consume_and_list_topics(secured: Secured, tmp_path: Path, protocol: str, mechanism: str | None):
    s, topic = secured, f"t-{protocol}-{mechanism or 'cert'}".lower()
    pairs = settings(s, protocol, mechanism)
    bootstrap = s.address(protocol)
    messages = [f"{protocol} message {i}" for i in range(200)]
    # produce: the command's own -X
    r = kafkactl(tmp_path, "produce", topic, "--create", "-b", bootstrap, *xs(pairs), input_text="\n".join(messages))
    ok(r)
    # consume: a context holding the settings
    ok(kafkactl(tmp_path, "config", "add", "secure", "-b", bootstrap, *xs(pairs), "--use"))
    got = json_lines(ok(kafkactl(tmp_path, "consume", topic, "-o", "json", "--exit")))
    assert sorted(m["value"] for m in got) == sorted(messages)
    # topic list: the root -X over a context that has none
    ok(kafkactl(tmp_path, "config", "add", "bare", "-b", bootstrap, "--use"))
    listed = json_lines(ok(kafkactl(tmp_path, *xs(pairs), "topic", "list", "-o", "json")))
    assert topic in [t["topic"] for t in listed]
    # and without the settings, the broker serves nothing to this client
    r = kafkactl(tmp_path, "consume", topic, "-o", "json", "--exit")
    error_line(r, "closed the connection (an SSL or SASL listener? this client's security.protocol is PLAINTEXT)")
    assert r.returncode == 1 and r.stdout == ""


def test_a_wrong_password_is_one_line_and_nothing_is_served(secured: Secured, tmp_path: Path):
    s = secured
    bootstrap = s.address("SASL_PLAINTEXT")
    ok(kafkactl(tmp_path, "produce", "pw", "--create", "-b", bootstrap, *xs(settings(s, "SASL_PLAINTEXT", "PLAIN")),
                input_text="kept\n"))  # fmt: skip
    for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        wrong = xs(settings(s, "SASL_PLAINTEXT", mechanism, password="guess"))
        r = kafkactl(tmp_path, *wrong, "topic", "list", "-b", bootstrap)
        line = error_line(r, f"authentication failed for user 'alice' at {bootstrap} (SASL_AUTHENTICATION_FAILED: ")
        assert r.returncode == 1 and r.stdout == "" and "guess" not in line
        r = kafkactl(tmp_path, "produce", "pw", "-b", bootstrap, *wrong, input_text="never stored\n")
        error_line(r, "authentication failed for user 'alice'")
        r = kafkactl(tmp_path, "consume", "pw", "-b", bootstrap, "--exit", *wrong)
        error_line(r, "authentication failed for user 'alice'")
        assert r.stdout == ""
    r = kafkactl(tmp_path, "consume", "pw", "-b", bootstrap, "-o", "json", "--exit",
                 *xs(settings(s, "SASL_PLAINTEXT", "SCRAM-SHA-256")))  # fmt: skip
    assert [m["value"] for m in json_lines(ok(r))] == ["kept"]


def test_an_untrusted_broker_and_an_expired_client_certificate_are_refused(secured: Secured, tmp_path: Path):
    s = secured
    for protocol in ("SSL", "SASL_SSL"):
        address = s.address(protocol)
        mechanism = "PLAIN" if protocol == "SASL_SSL" else None
        pairs = [p for p in settings(s, protocol, mechanism) if not p.startswith("ssl.ca.location")]
        pairs.append(f"ssl.ca.location={s.pki.directory / 'other-ca.pem'}")
        r = kafkactl(tmp_path, *xs(pairs), "topic", "list", "-b", address)
        error_line(r, f"TLS handshake with {address} failed: certificate verify failed: ")
        assert r.returncode == 1 and r.stdout == ""
    address = s.address("SSL")
    for cert in ("expired", "stranger"):
        pairs = ["security.protocol=SSL", f"ssl.ca.location={s.pki.ca}",
                 f"ssl.certificate.location={s.pki.cert(cert)}", f"ssl.key.location={s.pki.key(cert)}"]  # fmt: skip
        r = kafkactl(tmp_path, *xs(pairs), "topic", "list", "-b", address)
        error_line(r, f"TLS handshake with {address} failed: ")
        assert r.returncode == 1 and r.stdout == ""
    r = kafkactl(tmp_path, "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={s.pki.ca}", "topic", "list",
                 "-b", address)  # fmt: skip
    error_line(r, f"TLS handshake with {address} failed: ")  # no client certificate at all
    assert json.loads(json.dumps(r.stdout)) == ""


def test_brokers_replicate_over_their_sasl_ssl_listener(zk_server, tmp_path: Path):
    """Two brokers whose inter-broker listener is SASL_SSL (SCRAM-SHA-512, the JAAS config's admin): every
    follower catches up, so a replicated topic takes acks=all writes and lists both brokers in sync."""
    from tests.integration.cluster import BrokerProcess, new_chroot
    from tests.integration.helpers import wait_until

    pki = make_pki(tmp_path / "pki")
    chroot = new_chroot(zk_server.connect_string)
    ok(kafkactl(tmp_path, "user", "add", "admin", "--password-stdin", "-z", chroot, input_text="admin-secret\n"))
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="admin-secret";'
    brokers = []
    try:
        for broker_id in (1, 2):
            port, internal = free_port(), free_port()
            overrides = {
                "listeners": f"PLAINTEXT://127.0.0.1:{port},INTERNAL://127.0.0.1:{internal}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
                "inter.broker.listener.name": "INTERNAL", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                "listener.name.internal.scram-sha-512.sasl.jaas.config": jaas,
                "ssl.keystore.location": str(pki.keystore("broker")), "ssl.truststore.location": str(pki.ca),
            }  # fmt: skip
            brokers.append(BrokerProcess(broker_id, chroot, tmp_path / f"b{broker_id}", port=port,
                                         overrides=overrides).start())  # fmt: skip
        bootstrap = brokers[0].bootstrap
        ok(kafkactl(tmp_path, "topic", "create", "replicated", "-p", "2", "-r", "2", "-b", bootstrap))
        values = [f"m{i}" for i in range(100)]
        ok(kafkactl(tmp_path, "produce", "replicated", "-b", bootstrap, "--acks", "all", input_text="\n".join(values)))

        def in_sync() -> bool:
            r = kafkactl(tmp_path, "topic", "describe", "replicated", "-b", bootstrap, "-o", "json")
            (doc,) = json_lines(ok(r))
            return all(sorted(p["isr"]) == [1, 2] for p in doc["partitions"])

        wait_until(in_sync, 30, "both brokers in sync over SASL_SSL")
        got = json_lines(ok(kafkactl(tmp_path, "consume", "replicated", "-b", bootstrap, "-o", "json", "--exit")))
        assert sorted(m["value"] for m in got) == sorted(values)
        assert "replica fetcher" not in brokers[1].log_text() + brokers[0].log_text()  # never refused, no retries
    finally:
        for b in brokers:
            b.stop()


def test_a_group_consumer_and_group_commands_over_sasl_ssl(secured: Secured, tmp_path: Path):
    """`consume --group` (the group coordinator's join, sync, heartbeat and commits) and `group describe`
    over SASL_SSL: every message once, and the group's committed offsets seen through the same settings."""
    s, topic = secured, "t-group-sasl"
    pairs = settings(s, "SASL_SSL", "SCRAM-SHA-512")
    bootstrap = s.address("SASL_SSL")
    messages = [f"group message {i}" for i in range(150)]
    ok(kafkactl(tmp_path, "produce", topic, "--create", "-b", bootstrap, *xs(pairs), input_text="\n".join(messages)))
    got = json_lines(ok(kafkactl(tmp_path, "consume", topic, "--group", "g-sasl", "--reset", "earliest", "-o", "json",
                                 "--exit", "-b", bootstrap, "-z", s.chroot, *xs(pairs))))  # fmt: skip
    assert sorted(m["value"] for m in got) == sorted(messages)
    described = ok(kafkactl(tmp_path, *xs(pairs), "group", "describe", "g-sasl", "-b", bootstrap, "-z", s.chroot,
                            "-o", "json"))  # fmt: skip
    [group] = json_lines(described)
    parts = [p for p in group["partitions"] if p["topic"] == topic]
    assert parts and sum(p["committed"] for p in parts) == len(messages), group
