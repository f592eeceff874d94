"""Spark fixtures: one local[2] session for the whole test session (it takes 5-10 s to start) with the
`kafkactl` data source registered, and one real broker (with real ZooKeeper) shared by the Spark tests.

The session runs its Python workers with this interpreter (PYSPARK_PYTHON), binds to 127.0.0.1
(SPARK_LOCAL_IP), has no web UI, few shuffle partitions and UTC as its time zone.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from tests.integration.cluster import BrokerProcess, new_chroot  # noqa: E402

#: retention checked often, so tests can make it remove segments in a second
BROKER_OVERRIDES = {"log.retention.check.interval.ms": "200"}


@pytest.fixture(scope="session")
def spark() -> Iterator:
    from pyspark.sql import SparkSession

    from broker.spark.source import register

    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "SPARK_LOCAL_IP")}
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    session = (
        SparkSession.builder.master("local[2]")
        .appName("kafkactl-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def spark_broker(zk_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for every Spark test (each test uses topics of its own)."""
    root = tmp_path_factory.mktemp("spark-broker")
    with BrokerProcess(1, new_chroot(zk_server.connect_string), root, overrides=BROKER_OVERRIDES) as b:
        yield b
