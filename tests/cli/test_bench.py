"""`kafkactl bench log` runs end to end and reports what it measured (no timing is asserted)."""

from __future__ import annotations

import json

from tests.cli.conftest import kafkactl


def test_bench_log_small(tmp_path) -> None:
    r = kafkactl("bench", "log", "--size", "4MiB", "--dir", tmp_path, "-o", "json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["bytes"] == res["batches"] * res["batch_bytes"] and res["bytes"] >= 4 * 2**20 - res["batch_bytes"]
    assert res["read_bytes"] == res["bytes"]  # every byte appended came back through the slice API
    assert res["append_mb_per_s"] > 0 and res["read_mb_per_s"] > 0 and res["crc_mb_per_s"] > 0
    assert list(tmp_path.iterdir()) == []  # the temporary log is removed


def test_bench_log_repeat_reports_every_run(tmp_path) -> None:
    r = kafkactl("bench", "log", "--size", "1MiB", "--repeat", "3", "--dir", tmp_path, "-o", "json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["runs"] == 3 and len(res["append_mb_per_s_each"]) == 3 and len(res["read_mb_per_s_each"]) == 3
    assert res["append_mb_per_s"] == sorted(res["append_mb_per_s_each"])[1]


def test_bench_bad_size_is_usage_error() -> None:
    r = kafkactl("bench", "log", "--size", "lots")
    assert r.returncode == 2 and "invalid size" in r.stderr
