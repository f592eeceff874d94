"""A log dir that fills up, against a live broker on a small tmpfs (issue: data integrity, item 3).

The write that meets the full disk ends its connection unanswered (its answer would name offsets the
file never got), the log dir goes offline as Kafka's does, and from then on produce to it is answered
KAFKA_STORAGE_ERROR; every acknowledged message stays readable. A stop in that state says it was not
clean (non-zero exit, no `.tmp` left), and the next start, with room made, recovers everything that was
acknowledged and takes writes again.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from broker.client.connection import Connection, ProtocolError
from broker.daemon import free_port
from broker.protocol.errors import ErrorCode
from tests.integration import wire
from tests.integration.clientkit import kcli
from tests.integration.cluster import BrokerProcess
from tests.integration.helpers import cli

MiB = 1 << 20


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 3 MiB tmpfs (root only; skipped where mounting is not allowed), unmounted at the end."""
    where = tmp_path / "disk"
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_log_dir_goes_offline_answers_storage_errors_and_loses_nothing(zk_chroot, tmp_path, small_disk):
    b = BrokerProcess(1, zk_chroot, tmp_path, overrides={"log.segment.bytes": str(MiB)})
    b.log_dir = small_disk / "logs"
    b.start()
    try:
        with wire.open_conn(b) as conn:
            wire.create_topic(conn, "full")
        acked = fill(b.port, "full")
        with wire.open_conn(b) as conn:
            for acks in (1, -1):  # the retry, at either acks: KAFKA_STORAGE_ERROR, and the dir offline
                got = wire.produce_one(conn, "full", 0, wire.make_batch([b"after"]), acks=acks)
                assert got["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR, got
            assert all_values(conn, "full", 0) == acked  # reads go on: every acknowledged message
        log = b.log_text()
        assert log.count("is offline after a failed write") == 1, log
        assert "Traceback" not in log

        out = kcli("produce", "full", "-p", "0", "--delivery-timeout-ms", "3000", "-b", b.bootstrap, input=b"x\n")
        assert out.returncode == 1 and "KAFKA_STORAGE_ERROR" in out.err and "Traceback" not in out.err, str(out)

        rc = b.stop()
        assert rc not in (0, None), "a shutdown that could not checkpoint must not pass for a clean one"
        assert "did not shut down cleanly" in b.log_text() and "Traceback" not in b.log_text()
        assert not list(b.log_dir.glob("*.tmp")), "a failed checkpoint leaves no half-written file"
        assert not (b.log_dir / ".kafka_cleanshutdown").exists()

        subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)  # room made
        b.start()
        with wire.open_conn(b) as conn:
            assert all_values(conn, "full", 0) == acked
            assert wire.produce_one(conn, "full", 0, wire.make_batch([b"again"]))["error_code"] == 0
        assert "was not shut down cleanly" in b.log_text()
    finally:
        if b.alive:
            b.kill()


def all_values(conn, topic: str, partition: int) -> list[bytes | None]:
    """Every value from offset 0 to the high watermark, fetch after fetch."""
    values: list[bytes | None] = []
    while True:
        p = wire.fetch_partition(conn, topic, partition, len(values))
        assert p["error_code"] == 0, p
        got = wire.values_of(p["records"])
        if not got:
            assert len(values) == p["high_watermark"], (len(values), p["high_watermark"])
            return values
        values += got


def fill(port: int, topic: str) -> list[bytes]:
    """Produce 64 KiB batches, a connection each, until one ends unanswered (the disk is full); returns the
    acknowledged values."""
    acked: list[bytes] = []
    for i in range(200):  # a 3 MiB disk fills within about 50
        value = b"%04d" % i + bytes(64 * 1024)
        try:
            with Connection("127.0.0.1", port, client_id="filler", timeout=15.0) as conn:
                got = wire.produce_one(conn, topic, 0, wire.make_batch([value]))
        except ProtocolError:  # the write that met the full disk: the connection ends unanswered
            return acked
        assert got["error_code"] == 0, got
        acked.append(value)
    raise AssertionError("the disk never filled")


def test_broker_stop_of_a_daemon_that_could_not_shut_down_cleanly_says_so(zk_chroot, tmp_path, small_disk):
    home, port = tmp_path / "home", free_port()
    start = cli("broker", "start", "--daemon", "--broker-id", "7", "--port", port, "--log-dirs", small_disk / "d",
                "-z", zk_chroot, "--no-embedded-zookeeper", home=home)  # fmt: skip
    assert start.returncode == 0, start.stderr
    try:
        with Connection("127.0.0.1", port, client_id="t", timeout=15.0) as conn:
            wire.create_topic(conn, "full")
        assert fill(port, "full")
    finally:
        stop = cli("broker", "stop", "--broker-id", "7", home=home)
    assert stop.returncode == 1, (stop.stdout, stop.stderr)
    (line,) = stop.stderr.splitlines()
    assert line.startswith("kafkactl: error: broker 7 did not shut down cleanly:") and "No space left" in line, line
