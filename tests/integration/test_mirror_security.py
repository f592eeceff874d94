"""The mirror between two clusters secured differently: a SASL_SSL source (SCRAM) and an SSL target with
client certificates required, each given its own settings (`--source-property`, `--target-property`)."""

from __future__ import annotations

from pathlib import Path

from broker.daemon import free_port
from broker.security import credentials
from broker.security.certs import Pki
from broker.security.scram import make_credential
from tests.integration.cluster import BrokerProcess, new_chroot
from tests.integration.helpers import cli, error_line, ok, zk_session
from tests.integration.test_mirror import produce, read_all


def _broker(zk_server, root: Path, pki: Pki, listener: str, extra: dict[str, str]) -> tuple[BrokerProcess, int]:
    chroot = new_chroot(zk_server.connect_string)
    with zk_session(chroot) as zk:
        credentials.write_user(zk, "mirror", {"SCRAM-SHA-512": make_credential("SCRAM-SHA-512", "mirror-pw")})
    port, secure = free_port(), free_port()
    overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{port},{listener}://127.0.0.1:{secure}",
                 "ssl.keystore.location": str(pki.keystore("broker")), "ssl.truststore.location": str(pki.ca),
                 **extra}  # fmt: skip
    return BrokerProcess(1, chroot, root, port=port, overrides=overrides).start(), secure


def test_mirror_between_differently_secured_clusters(zk_server, pki: Pki, tmp_path: Path) -> None:
    source, source_port = _broker(zk_server, tmp_path / "source", pki, "SASL_SSL", {})
    target, target_port = _broker(zk_server, tmp_path / "target", pki, "SSL",
                                  {"listener.name.ssl.ssl.client.auth": "required"})  # fmt: skip
    try:
        ok(cli("topic", "create", "orders", "-p", 2, "-b", source.bootstrap))
        produce(source.bootstrap, "orders", 300)
        source_props = ["security.protocol=SASL_SSL", f"ssl.ca.location={pki.ca}", "sasl.mechanism=SCRAM-SHA-512",
                        "sasl.username=mirror", "sasl.password=mirror-pw"]  # fmt: skip
        target_props = [
            "security.protocol=SSL",
            f"ssl.ca.location={pki.ca}",
            f"ssl.certificate.location={pki.cert('client')}",
            f"ssl.key.location={pki.key('client')}",
        ]
        args = ["--from", f"127.0.0.1:{source_port}", "--to", f"127.0.0.1:{target_port}", "--include", "orders"]
        args += [a for p in source_props for a in ("--source-property", p)]
        args += [a for p in target_props for a in ("--target-property", p)]

        # a wrong source password is one line, and nothing reaches the target
        wrong = [a if a != "sasl.password=mirror-pw" else "sasl.password=nope" for a in args]
        assert "authentication failed for user 'mirror'" in error_line(cli("mirror", "start", *wrong, "--exit"))
        # the target's settings alone do not open the source (its listener wants SASL)
        assert cli("mirror", "start", *args[:6], *[a for p in target_props for a in ("--source-property", p)],
                   *args[-8:], "--exit").returncode != 0  # fmt: skip

        ok(cli("mirror", "start", *args, "--exit", timeout=120))
        assert read_all(target.bootstrap, "orders") == read_all(source.bootstrap, "orders")
        assert sum(len(v) for v in read_all(target.bootstrap, "orders").values()) == 300
        rows = ok(cli("mirror", "status", *args, "-o", "json"))
        assert rows.count('"lag":0') == 2, rows
        # an option that is not a security setting is refused
        assert "only security settings" in error_line(cli("mirror", "status", *args, "--source-property", "acks=1"))
    finally:
        source.stop()
        target.stop()
