"""The broker's log against a hostile client (broker/server/broker_logging.py), with real broker processes.

- Malformed requests cost at most one line each, never a traceback, and repeated lines of one template
  are suppressed after the first few (`KAFKACTL_LOG_REPEATS`), with a count of what was suppressed: the
  log grows by a bounded amount however many bad requests come, and the broker serves on.
- A daemon's log file (`$KAFKACTL_HOME/logs/broker-<id>.log`) is rotated by size.
"""

from __future__ import annotations

import random
import socket
import subprocess
import sys
from pathlib import Path

from broker.daemon import free_port, is_alive
from broker.protocol.api import ApiKey
from broker.protocol.messages.admin import TOPIC_RESOURCE
from broker.protocol.primitives import I32
from tests.integration.cluster import BrokerProcess
from tests.integration.helpers import cli, cli_env, ok, terminate, wait_until
from tests.integration.wire import (
    connect,
    create_topic,
    fetch_values,
    frame,
    make_batch,
    metadata_body,
    open_conn,
    produce_one,
    raw_frame,
    read_until_closed,
)


def hostile_frames(cid: int) -> list[bytes]:
    """Requests a hostile client sends: each is refused, or closes its connection."""
    meta = frame(ApiKey.METADATA, 1, cid, metadata_body(["x"]))
    alter = {"resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": "a/../b", "configs": []}],
             "validate_only": False}  # fmt: skip
    return [
        raw_frame(99, 0, cid, b"\x00" * 40),  # an unknown API key
        I32.pack(-5),  # a negative frame size
        I32.pack(len(meta) - 4 - 3) + meta[4:-3],  # a Metadata body cut short
        frame(ApiKey.DELETE_TOPICS, 1, cid, {"topic_names": ["a/../b", "../x"], "timeout_ms": 1000}),  # not a path
        frame(ApiKey.ALTER_CONFIGS, 0, cid, alter),  # nor this
        raw_frame(ApiKey.METADATA, 1, cid, random.Random(cid).randbytes(64)),  # a garbage body
    ]


def send_all(b: BrokerProcess, frames: list[bytes]) -> None:
    """Each frame on its own connection: send, then read until the broker answers or closes it."""
    for data in frames:
        s = connect(b.port)
        try:
            try:
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            read_until_closed(s, 5.0)
        finally:
            s.close()


def log_size(b: BrokerProcess) -> int:
    return b.output.stat().st_size


def test_a_hostile_client_grows_the_log_by_a_bounded_amount(start_broker, monkeypatch) -> None:
    monkeypatch.setenv("KAFKACTL_LOG_REPEATS", "10/600")  # one window for the whole test: the bound is exact
    b = start_broker(1)
    with open_conn(b) as steady:
        create_topic(steady, "steady")
        start = log_size(b)
        first = [f for i in range(60) for f in hostile_frames(i)]
        send_all(b, first)
        grown = log_size(b) - start
        new = b.output.read_bytes()[start:].decode(errors="replace")
        lines = new.splitlines()
        assert "Traceback" not in new and "internal error" not in new, new[-3000:]
        assert all(len(line) <= 400 for line in lines), max(lines, key=len)
        # at most 10 lines of the one closing-line template, however many of the 360 requests were bad
        assert len([ln for ln in lines if "closing connection from" in ln]) <= 10, lines
        assert grown <= 10 * 400, grown

        mark = log_size(b)
        send_all(b, [f for i in range(60, 120) for f in hostile_frames(i)])
        assert log_size(b) == mark, b.output.read_bytes()[mark:]  # all suppressed, counted for later

        p = produce_one(steady, "steady", 0, make_batch([b"served"]))
        assert (p["error_code"], p["base_offset"]) == (0, 0)
    with open_conn(b) as fresh:
        assert fetch_values(fresh, "steady", 0) == [b"served"]
    assert b.stop() == 0
    tail = b.output.read_bytes()[mark:].decode()
    assert "similar message(s) suppressed in the last" in tail and "closing connection from %s: %s" in tail, tail
    assert "Traceback" not in b.log_text()


def test_the_daemon_log_rotates_by_size(zk_chroot, tmp_path: Path) -> None:
    """`broker start --daemon` writes $KAFKACTL_HOME/logs/broker-<id>.log itself, rotated at
    KAFKACTL_BROKER_LOG_MAX_BYTES keeping KAFKACTL_BROKER_LOG_BACKUPS older files."""
    home, port = tmp_path / "home", free_port()
    env = cli_env(home, KAFKACTL_BROKER_LOG_MAX_BYTES="4096", KAFKACTL_BROKER_LOG_BACKUPS="2",
                  KAFKACTL_LOG_REPEATS="0")  # fmt: skip
    argv = [sys.executable, "-m", "kafkactl", "broker", "start", "--daemon", "--broker-id", "5", "--port", str(port),
            "--log-dirs", str(tmp_path / "data"), "-z", zk_chroot, "--no-embedded-zookeeper"]  # fmt: skip
    started = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    pid_file = home / "run" / "broker-5.pid"
    pid = int(pid_file.read_text()) if pid_file.exists() else None
    try:
        assert started.returncode == 0, started.stderr
        logs = home / "logs"
        b = BrokerProcess(5, zk_chroot, tmp_path, port=port)
        send_all(b, [raw_frame(99, 0, i, b"\x00" * 40) for i in range(300)])  # 300 closing lines: ~35 kB
        wait_until(lambda: (logs / "broker-5.log.2").exists(), 10, "the log rotated twice")
        names = sorted(p.name for p in logs.iterdir())
        assert names == ["broker-5.log", "broker-5.log.1", "broker-5.log.2"]
        for name in names:
            size = (logs / name).stat().st_size
            assert 0 < size <= 4096, (name, size)
        current = (logs / "broker-5.log").read_text()
        last = connect(port)
        last_port = last.getsockname()[1]
        last.sendall(raw_frame(99, 0, 1, b""))
        read_until_closed(last, 5.0)
        last.close()
        wait_until(lambda: f"127.0.0.1:{last_port}" in (logs / "broker-5.log").read_text(), 10, "the newest line")
        assert "Traceback" not in current
        with open_conn(b) as conn:  # still serving
            create_topic(conn, "after-rotation")
        assert ok(cli("broker", "stop", "--broker-id", 5, home=home)).startswith("broker 5 stopped")
        assert not is_alive(pid or 0)
    finally:
        terminate(pid)
