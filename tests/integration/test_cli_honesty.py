"""Exit codes and messages as an operator meets them (issue 15, item 9): usage errors exit 2 with one line,
options that cannot apply together are refused, and what a consume quietly changed is said once."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.cli_runner import run_cli
from tests.integration.helpers import cli, cli_env, error_line, kcat_produce


def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return run_cli(list(args), cli_env(), input=stdin)


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


def test_a_json_line_with_an_unknown_field_is_an_error_not_a_tombstone(shared_broker):
    b = shared_broker.bootstrap
    r = run("produce", "typos", "--input", "json", "-b", b, stdin='{"value":"fine"}\n{"vlaue":"typo"}\n')
    assert r.returncode == 2 and "Traceback" not in r.stderr
    summary, error = r.stderr.strip().splitlines()  # what was sent before the bad line, then the error
    assert summary.startswith("produced 1 message(s)")
    assert error.startswith("kafkactl: error: line 2: unknown field(s) 'vlaue'") and "--ignore-unknown-fields" in error
    r = run("consume", "typos", "-e", "-o", "json", "-b", b)
    assert [d["value"] for d in map(json.loads, r.stdout.splitlines())] == ["fine"]  # the typo was not sent
    r = run("produce", "typos", "--input", "json", "--ignore-unknown-fields", "-b", b,
            stdin='{"value":"kept","note":"skipped"}\n')  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = run("consume", "typos", "-e", "-b", b)
    assert r.stdout.splitlines() == ["fine", "kept"]


def test_the_readmes_lossless_copy_runs_as_written(shared_broker):
    b = shared_broker.bootstrap
    assert cli("topic", "create", "source", "-p", 3, "-b", b).returncode == 0
    for p in range(3):
        kcat_produce(b, "source", p, [f"p{p}-m{i}" for i in range(4)])
    dump = run("consume", "source", "-o", "json", "-e", "-b", b)
    assert dump.returncode == 0 and len(dump.stdout.splitlines()) == 12
    # a new topic auto-created with one partition cannot take partitions 1 and 2: one line, before sending them
    r = run("produce", "copy-strict", "--input", "json", "-b", b, stdin=dump.stdout)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    error = r.stderr.strip().splitlines()[-1]
    assert re.match(r"kafkactl: error: line \d+: topic 'copy-strict' has 1 partition\(s\), no partition [12];", error)
    assert "-p N" in error and "--create" in error
    # --create gives the topic the partitions the input names: the same messages in the same partitions
    r = run("produce", "copy", "--input", "json", "--create", "-b", b, stdin=dump.stdout)
    assert r.returncode == 0, r.stderr
    copy = run("consume", "copy", "-o", "json", "-e", "-b", b)
    source = sorted((d["partition"], d["offset"], d["value"]) for d in map(json.loads, dump.stdout.splitlines()))
    copied = sorted((d["partition"], d["offset"], d["value"]) for d in map(json.loads, copy.stdout.splitlines()))
    assert copied == source
    # -p writes every message to one partition, whatever the line says
    r = run("produce", "copy-one", "--input", "json", "-p", "0", "-b", b, stdin=dump.stdout)
    assert r.returncode == 0, r.stderr
    one = [json.loads(x) for x in run("consume", "copy-one", "-o", "json", "-e", "-b", b).stdout.splitlines()]
    assert {d["partition"] for d in one} == {0} and sorted(d["value"] for d in one) == sorted(x[2] for x in source)


def test_producer_properties_and_a_message_over_one_mib(shared_broker):
    b = shared_broker.bootstrap
    assert cli("topic", "create", "big", "-p", 1, "--config", "max.message.bytes=3000000", "-b", b).returncode == 0
    value = "v" * 2_000_000
    r = run("produce", "big", "-b", b, stdin=value + "\n")  # the producer's default max.request.size: 1 MiB
    assert r.returncode == 1 and "over max.request.size (1048576)" in r.stderr and "--max-message-bytes" in r.stderr
    r = run("produce", "big", "--max-message-bytes", "3000000", "-X", "linger.ms=0", "-X", "enable.idempotence=false",
            "-b", b, stdin=value + "\n")  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = run("consume", "big", "-e", "-b", b)
    assert r.stdout.splitlines() == [value]
    for bad, needle in (("nope=1", "unknown producer property 'nope'"), ("retries=soon", "expected an integer"),
                        ("acks", "expected KEY=VALUE")):  # fmt: skip
        r = run("produce", "big", "-X", bad, "-b", b, stdin="x\n")
        error_line(r, needle)
        assert r.returncode == 2


def readme_block(heading: str) -> list[str]:
    """The command lines of the first sh block under a README heading (comments stripped)."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    after = text[text.index(heading) :]
    block = after[after.index("```sh\n") + 6 : after.index("\n```", after.index("```sh\n"))]
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def test_the_readmes_topic_commands_run_as_written(cluster3, tmp_path):
    """README's `kafkactl topic` block, line by line, against a 3-broker cluster named by the environment; a
    pipe still shows the overrides a terminal shows in the table's title."""
    env = cli_env(KAFKACTL_BOOTSTRAP_SERVER=",".join(b.bootstrap for b in cluster3))
    (tmp_path / "topics.json").write_text('{"topics": [{"name": "payments", "partitions": 2}]}')
    for argv in readme_block("### `kafkactl topic create | list | describe | alter | delete`"):
        assert argv[0] == "kafkactl"
        r = subprocess.run([sys.executable, "-m", "kafkactl", *argv[1:]], capture_output=True, text=True,
                           timeout=60, env=env, cwd=tmp_path)  # fmt: skip
        assert r.returncode == 0 and "Traceback" not in r.stderr, (argv, r.stdout, r.stderr)
        if argv[1:4] == ["topic", "describe", "orders"]:
            assert r.stdout.splitlines()[0] == "# orders overrides: retention.ms=86400000, segment.bytes=104857600"
    r = subprocess.run([sys.executable, "-m", "kafkactl", "topic", "create", "x", "--config", "retention.ms"],
                       capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert r.returncode == 2 and r.stderr.strip() == "kafkactl: error: --config 'retention.ms': expected key=value"


def test_json_output_of_produce_and_topic_changes(shared_broker):
    b = shared_broker.bootstrap

    def js(*argv: str, stdin: str = "") -> dict:
        r = run(*argv, "-o", "json", "-b", b, stdin=stdin)
        assert r.returncode == 0, r.stderr
        (line,) = r.stdout.splitlines()
        return json.loads(line)

    assert js("topic", "create", "as-json", "-p", "2") == {"topic": "as-json", "created": True, "partitions": 2}
    assert js("topic", "create", "as-json", "--if-not-exists") == {"topic": "as-json", "created": False}
    out = js("produce", "as-json", "-p", "1", stdin="a\nb\nc\n")
    assert (
        out["messages"] == 3
        and out["failed"] == 0
        and out["partitions"] == {"1": {"first_offset": 0, "last_offset": 2}}
    )
    assert js("topic", "alter", "as-json", "--partitions", "3", "--config", "retention.ms=1000") == {
        "topic": "as-json", "partitions": 3, "config": {"retention.ms": "1000"}}  # fmt: skip
    plan = js("topic", "delete", "as-json")
    assert plan["deleted"] is False and plan["partitions"] == 3 and plan["messages"] == 3
    assert js("topic", "delete", "as-json", "--execute") == {"topic": "as-json", "deleted": True}


def test_zookeeper_status_takes_the_zookeeper_the_environment_names(zk_server):
    env = cli_env(KAFKACTL_ZOOKEEPER=zk_server.connect_string + "/x")
    r = subprocess.run([sys.executable, "-m", "kafkactl", "zookeeper", "status", "-o", "json"], capture_output=True,
                       text=True, timeout=60, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    status = json.loads(r.stdout)
    assert status["address"] == zk_server.connect_string and status["serving"] is True


def test_consume_a_window_and_grep(shared_broker):
    b = shared_broker.bootstrap
    assert cli("topic", "create", "windowed", "-p", 1, "-b", b).returncode == 0
    kcat_produce(b, "windowed", 0, [f"{'order' if i % 3 == 0 else 'ping'}-{i}" for i in range(30)])
    r = run("consume", "windowed", "--offset", "10", "--until", "20", "-b", b)
    assert r.stdout.split() == [f"{'order' if i % 3 == 0 else 'ping'}-{i}" for i in range(10, 20)], r.stderr
    r = run("consume", "windowed", "--grep", "^order-[0-9]*[05]$", "-b", b)
    assert r.stdout.split() == ["order-0", "order-15"] and "consumed 2 message(s)" in r.stderr
    r = run("consume", "windowed", "--grep", "order", "--until", "10", "-c", "2", "-b", b)
    assert r.stdout.split() == ["order-0", "order-3"]
    r = run("consume", "windowed", "--until", "1h", "-b", b)  # a time: everything written before an hour ago
    assert r.returncode == 0 and r.stdout == ""
    for argv, needle in ((["--grep", "("], "not a regular expression"), (["--until", "5", "-f"], "--follow"),
                         (["--grep", "x", "--group", "g"], "cannot be used with --group")):  # fmt: skip
        r = run("consume", "windowed", *argv, "-b", b)
        error_line(r, needle)
        assert r.returncode == 2


def test_topics_created_from_a_file(shared_broker, tmp_path):
    b = shared_broker.bootstrap
    plan = tmp_path / "topics.json"
    plan.write_text(json.dumps({"topics": [
        {"name": "batch-a", "partitions": 3, "config": {"retention.ms": "3600000"}},
        {"name": "batch-b"},
        {"name": "batch-c", "partitions": 2, "replication_factor": 9},  # more replicas than brokers: it fails
    ]}))  # fmt: skip
    r = run("topic", "create", "--from-file", str(plan), "-o", "json", "-b", b)
    assert r.returncode == 1 and r.stderr.strip() == "kafkactl: error: 1 of 3 topic(s) not created: batch-c"
    results = {d["topic"]: d for d in map(json.loads, r.stdout.splitlines())}
    assert results["batch-a"] == {"topic": "batch-a", "created": True, "partitions": 3}
    assert results["batch-b"]["created"] is True and results["batch-c"]["created"] is False
    r = run("topic", "create", "--from-file", str(plan), "--if-not-exists", "-b", b)
    assert "topic batch-a exists already" in r.stdout and "topic batch-b exists already" in r.stdout
    described = json.loads(run("topic", "describe", "batch-a", "-o", "json", "-b", b).stdout)
    assert described["config"] == {"retention.ms": "3600000"} and len(described["partitions"]) == 3
    plan.write_text('{"topics": [{"name": "ok"}, {"name": "../bad"}]}')  # checked whole before anything is made
    r = run("topic", "create", "--from-file", str(plan), "-b", b)
    error_line(r, "topics[1]: topic name '../bad'")
    assert r.returncode == 2 and "ok" not in run("topic", "list", "-b", b).stdout.split()
