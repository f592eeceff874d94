"""`kafkactl bench broker` end to end with tiny counts: a scratch ZooKeeper and broker, kcat as the load
generator, one JSON document out. A smoke test of the plumbing and the report's fields, never of speed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.integration.helpers import cli, cli_env, ok

MESSAGES, SIZE, FETCH_MESSAGES, FETCH_SIZE, REPEAT = 300, 50, 200, 100, 2


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_bench_broker_json_report(tmp_path, kafkactl_home):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = ok(cli("bench", "broker", "--messages", MESSAGES, "--size", SIZE, "--fetch-messages", FETCH_MESSAGES,
                 "--fetch-size", FETCH_SIZE, "--repeat", REPEAT, "--dir", scratch, "-o", "json",
                 home=kafkactl_home, timeout=240))  # fmt: skip
    [line] = out.splitlines()
    r = json.loads(line)
    assert (r["bench"], r["load_generator"], r["acks"]) == ("broker", "kcat", 1)
    assert r["crc_backend"]
    assert (r["produce_messages"], r["produce_message_bytes"]) == (MESSAGES, SIZE)
    assert (r["fetch_messages"], r["fetch_message_bytes"]) == (FETCH_MESSAGES, FETCH_SIZE)
    # the fetched log holds every message plus batch and record overheads
    assert FETCH_MESSAGES * FETCH_SIZE < r["fetch_log_bytes"] < 4 * FETCH_MESSAGES * FETCH_SIZE
    assert r["produce_seconds"] > 0 and r["fetch_seconds"] > 0
    assert len(r["produce_msgs_per_s_each"]) == len(r["fetch_mb_per_s_each"]) == REPEAT
    assert all(x > 0 for x in r["produce_msgs_per_s_each"]) and all(x >= 0 for x in r["fetch_mb_per_s_each"])
    # the reported figure is the median of the runs
    each = r["produce_msgs_per_s_each"]
    assert min(each) - 1 <= r["produce_msgs_per_s"] <= max(each) + 1
    each = r["fetch_mb_per_s_each"]
    assert min(each) - 0.1 <= r["fetch_mb_per_s"] <= max(each) + 0.1
    assert r["produce_mb_per_s"] >= 0 and r["fetch_payload_mb_per_s"] >= 0
    assert r["kcat_produce_props"]["acks"] == "1" and "fetch.message.max.bytes" in r["kcat_fetch_props"]
    assert list(scratch.iterdir()) == []  # the scratch ZooKeeper, broker and message files are gone


def test_bench_with_replicas_needs_a_cluster(tmp_path):
    r = cli("bench", "produce", "--messages", "10", "-r", "3", "--dir", tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        "kafkactl: error: --replication-factor above 1 needs a cluster: start one with `kafkactl cluster up -n 3` "
        'and give its bootstrap servers with -b (or `eval "$(kafkactl cluster env)"`)'
    )
    assert list(tmp_path.iterdir()) == []  # no scratch broker was started


def test_bench_honours_the_root_bootstrap_and_the_environment(tmp_path):
    """`kafkactl -b X bench …` and KAFKACTL_BOOTSTRAP_SERVER measure X, as every command uses them; only with no
    cluster named is a scratch broker started."""
    for argv, extra in ((["-b", "127.0.0.1:1", "bench", "produce"], {}),
                        (["bench", "consume"], {"KAFKACTL_BOOTSTRAP_SERVER": "127.0.0.1:1"}),
                        (["bench", "broker"], {"KAFKACTL_BOOTSTRAP_SERVER": "127.0.0.1:1"})):  # fmt: skip
        r = subprocess.run([sys.executable, "-m", "kafkactl", *argv, "--messages", "1000", "--dir", str(tmp_path)],
                           capture_output=True, text=True, timeout=60, env=cli_env(**extra))  # fmt: skip
        assert r.returncode == 1 and "Traceback" not in r.stderr, (argv, r.stderr)
        assert "127.0.0.1:1" in r.stderr.strip().splitlines()[-1], (argv, r.stderr)
        assert list(tmp_path.iterdir()) == []  # no scratch broker


def test_bench_tls_reports_each_listener(tmp_path, kafkactl_home):
    """One scratch broker, three listeners: every produce run stored every message (the bench checks the log
    end), and each figure and ratio is there; nothing is left behind."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = ok(cli("bench", "tls", "--messages", 20_000, "--repeat", 1, "--dir", scratch, "-o", "json",
                 home=kafkactl_home, timeout=240))  # fmt: skip
    [line] = out.splitlines()
    r = json.loads(line)
    assert (r["bench"], r["messages"], r["acks"]) == ("tls", 20_000, 1)
    for listener in ("plaintext", "ssl", "sasl_ssl"):
        assert r[f"{listener}_produce_msgs_per_s"] > 0 and r[f"{listener}_fetch_msgs_per_s"] > 0
    for listener in ("ssl", "sasl_ssl"):
        for what in ("produce", "fetch"):
            got = r[f"{listener}_{what}_msgs_per_s"] / r[f"plaintext_{what}_msgs_per_s"]
            assert abs(r[f"{listener}_{what}_vs_plaintext"] - got) < 0.01
    assert list(scratch.iterdir()) == []
