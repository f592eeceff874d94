"""`spark-load --master spark://…` on a real Spark standalone cluster: a master and two workers, each its own JVM
started from pyspark's `bin/spark-class`, output on a path they share. A load is exactly once when a worker
is lost mid-job (kill -9 of it and its executor: Spark runs its tasks again on the other one) and when the
driver is killed mid-job (the next load rolls the interrupted one back or forward)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.spark.standalone import SparkStandalone
from tests.spark.test_load import (
    _wait_group_gone,
    assert_clean_state,
    assert_exactly_once,
    cli_env,
    new_topic,
    process_groups,
    produce,
    spark_load_argv,
)

CONF = ["--conf", "spark.executor.memory=512m", "--conf", "spark.executor.cores=1"]


@pytest.fixture
def standalone(tmp_path: Path):
    cluster = SparkStandalone(tmp_path / "spark", workers=2, cores=1, memory="1g").start()
    try:
        yield cluster
    finally:
        cluster.stop()


def running_tasks(out: Path) -> bool:
    """Whether a task of the load is writing: a file in its staging dir (a task's hidden temporary file, or
    one it finished)."""
    staging = out / "_kafkactl" / "staging"
    return staging.is_dir() and any(p.is_file() for p in staging.rglob("*"))


def wait_for(check, timeout: float, what: str, log: Path) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} not seen in {timeout}s:\n{log.read_text()[-3000:]}"
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.chaos
def test_a_standalone_cluster_loads_exactly_once_through_a_lost_worker_and_a_killed_driver(
        spark_broker, standalone: SparkStandalone, tmp_path: Path) -> None:  # fmt: skip
    b = spark_broker.bootstrap
    topic = new_topic(b, 4)
    expected = produce(b, topic, 60_000, 4)
    out = tmp_path / "out"
    argv = [*spark_load_argv(b, out, topic, "--min-partitions", "24", master=standalone.url), *CONF]

    # a worker lost while the job runs: its tasks run again on the other worker; the load still commits
    log = tmp_path / "lost-worker.log"
    with process_groups() as start:
        p = start(argv, log)
        wait_for(lambda: running_tasks(out), 180, "a running task", log)
        standalone.kill_worker(0)
        assert p.wait(300) == 0, log.read_text()[-3000:]
    assert_exactly_once(out, expected)
    assert_clean_state(out)

    # the driver killed while the job runs: the next load (the worker back) rolls it back and loads it all
    standalone.start_worker(0)
    expected |= produce(b, topic, 20_000, 4, tag="b")
    log = tmp_path / "killed-driver.log"
    with process_groups() as start:
        p = start(argv, log)
        wait_for(lambda: running_tasks(out), 180, "a running task", log)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(30)
        _wait_group_gone(p.pid, 10)
    final = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=cli_env())
    assert final.returncode == 0, final.stderr
    assert "rolled back the interrupted load" in final.stderr or "finished the interrupted load" in final.stderr
    assert_exactly_once(out, expected)
    assert_clean_state(out)
