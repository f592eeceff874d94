"""`kafkactl config`: contexts added, listed, used and removed, and every command then finding its cluster."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

from tests.cli_runner import run_cli


def run(xdg: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKACTL_")}
    env["XDG_CONFIG_HOME"] = str(xdg)
    return run_cli(list(args), env)


def test_contexts_are_added_used_listed_and_removed(tmp_path: Path) -> None:
    assert run(tmp_path, "config", "add", "local", "-b", "127.0.0.1:9092", "-z", "127.0.0.1:2181").returncode == 0
    assert run(tmp_path, "config", "add", "prod eu", "-b", "k1:9092,k2:9092").returncode == 0  # a name with a space
    doc = tomllib.loads((tmp_path / "kafkactl" / "config.toml").read_text())
    assert doc == {"current-context": "local", "contexts": {"local": {"bootstrap-server": "127.0.0.1:9092",
                   "zookeeper": "127.0.0.1:2181"}, "prod eu": {"bootstrap-server": "k1:9092,k2:9092"}}}  # fmt: skip
    r = run(tmp_path, "config", "list", "-o", "json")
    listed = [(d["name"], d["current"]) for d in map(json.loads, r.stdout.splitlines())]
    assert listed == [("local", True), ("prod eu", False)]
    assert run(tmp_path, "config", "use", "prod eu").returncode == 0
    current = json.loads(run(tmp_path, "config", "current", "-o", "json").stdout)
    assert current == {"context": "prod eu", "bootstrap-server": "k1:9092,k2:9092", "zookeeper": "localhost:2181",
                       "schema-registry": "http://localhost:8081"}  # fmt: skip
    assert run(tmp_path, "config", "add", "prod eu", "--schema-registry", "http://sr:8081").returncode == 0
    current = json.loads(run(tmp_path, "config", "current", "-o", "json").stdout)
    assert current["schema-registry"] == "http://sr:8081"
    r = run(tmp_path, "-b", "other:1", "config", "current", "-o", "json")  # the root option wins
    assert json.loads(r.stdout)["bootstrap-server"] == "other:1"
    r = run(tmp_path, "config", "use", "nope")
    assert r.returncode == 2
    assert r.stderr.strip().startswith("kafkactl: error: no context 'nope' (have: local, prod eu)")
    assert run(tmp_path, "config", "remove", "prod eu").returncode == 0
    doc = tomllib.loads((tmp_path / "kafkactl" / "config.toml").read_text())
    assert doc == {"contexts": {"local": {"bootstrap-server": "127.0.0.1:9092", "zookeeper": "127.0.0.1:2181"}}}
    r = run(tmp_path, "config", "add", "empty")
    assert r.returncode == 2 and "give -b/--bootstrap-server" in r.stderr


def test_a_context_holds_security_settings_and_never_shows_a_password(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("(a CA bundle)\n")
    r = run(tmp_path, "config", "add", "secure", "-b", "k1:9093", "-X", "security.protocol=sasl_ssl",
            "-X", "sasl.mechanism=SCRAM-SHA-256", "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret",
            "-X", f"ssl.ca.location={ca}")  # fmt: skip
    assert r.returncode == 0, r.stderr
    path = tmp_path / "kafkactl" / "config.toml"
    assert path.stat().st_mode & 0o777 == 0o600  # a password inside: the owner's only
    entry = tomllib.loads(path.read_text())["contexts"]["secure"]
    assert entry["sasl.password"] == "alice-secret" and entry["security.protocol"] == "sasl_ssl"
    current = json.loads(run(tmp_path, "config", "current", "-o", "json").stdout)
    assert current["security.protocol"] == "SASL_SSL" and current["sasl.username"] == "alice"
    assert "sasl.password" not in current and "alice-secret" not in json.dumps(current)
    r = run(tmp_path, "-X", "sasl.username=bob", "config", "current", "-o", "json")  # the root -X wins
    assert json.loads(r.stdout)["sasl.username"] == "bob"
    assert run(tmp_path, "config", "add", "secure", "-X", "sasl.password=").returncode == 2  # SASL needs one
    r = run(tmp_path, "config", "add", "secure", "-X", "linger.ms=5")
    assert r.returncode == 2 and r.stderr.startswith("kafkactl: error: -X linger.ms: not a security setting")
    r = run(tmp_path, "config", "add", "secure", "-X", "security.protocol=TLS")
    assert r.returncode == 2 and "security.protocol='TLS': expected one of PLAINTEXT, SSL" in r.stderr
    r = run(tmp_path, "-X", "linger.ms=5", "topic", "list")
    assert r.returncode == 2 and "-X linger.ms: only security settings go before the command" in r.stderr
    r = run(tmp_path, "-X", "ssl.ca.location=/nonexistent/ca.pem", "topic", "list")
    assert r.returncode == 2 and r.stderr.strip() == (
        "kafkactl: error: ssl.ca.location: cannot read /nonexistent/ca.pem: No such file or directory"
    )
