"""Exit codes and messages as an operator meets them (issue 15, item 9): usage errors exit 2 with one line,
options that cannot apply together are refused, and what a consume quietly changed is said once."""

from __future__ import annotations

import subprocess
import sys

from tests.integration.helpers import cli, cli_env, error_line, kcat_produce


def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkactl", *args], input=stdin, capture_output=True, text=True,
                          timeout=60, env=cli_env())  # fmt: skip


def test_usage_errors_exit_2_with_one_line(tmp_path):
    cases = [
        (run("produce", "t", "-b", "127.0.0.1:abc", stdin="x\n"), "port is not a number"),
        (run("topic", "list", "-b", "127.0.0.1:0"), "port 0 is out of range"),
        (run("produce", "t", "--acks", "2", "-b", "127.0.0.1:1", stdin="x\n"), "acks='2': expected 0, 1 or all"),
        (run("bench", "log", "--dir", str(tmp_path / "missing"), "--size", "1MiB"), "does not exist"),
        (run("bench", "produce", "--dir", "/etc/passwd", "--messages", "10"), "is a file"),
        (run("consume", "t", "-o", "json", "--format", "%s", "-b", "127.0.0.1:1"), "--format shapes text output"),
    ]
    for r, needle in cases:
        error_line(r, needle)
        assert r.returncode == 2, (r.args, r.returncode, r.stderr)


def test_consume_says_once_what_it_changed(shared_broker):
    topic = "honest-consume"
    assert cli("topic", "create", topic, "-p", 1, "-b", shared_broker.bootstrap).returncode == 0
    kcat_produce(shared_broker.bootstrap, topic, 0, ["not json", '{"a":1}', "also not"])
    r = run("consume", topic, "-e", "--value-decoder", "json", "-b", shared_broker.bootstrap)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["not json", "{", '  "a": 1', "}", "also not"]
    notes = [ln for ln in r.stderr.splitlines() if ln.startswith("kafkactl: note:")]
    assert notes == ["kafkactl: note: some keys or values are not JSON: shown as text"]
    r = run("consume", topic, "-e", "--offset", "99", "-b", shared_broker.bootstrap)
    assert r.returncode == 0 and r.stdout == ""
    assert "kafkactl: note: partition 0: offset 99 is past its end (3); reading from the end" in r.stderr
    r = run("consume", topic, "-e", "--offset", "1", "-b", shared_broker.bootstrap)
    assert r.stdout.splitlines() == ['{"a":1}', "also not"] and "note" not in r.stderr
