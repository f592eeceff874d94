"""A real broker killed (SIGKILL: no clean-shutdown marker) with a torn last write: when it starts
again, its log says per partition what recovery cut — the segment, the byte range, the offsets, the
quarantine file — and the log goes on from the cut."""

from __future__ import annotations

import re
import time
from pathlib import Path

from broker.records.batch import Record, build_batch
from broker.zk import paths as zk_paths
from tests.fixtures import zk_client
from tests.integration.clientkit import create_topic
from tests.integration.helpers import connect, fetch, produce, wait_until


def wait_for_registration_to_expire(zk_connect: str, broker_id: int) -> None:
    zk = zk_client(zk_connect)
    try:
        deadline = time.monotonic() + 30
        while zk.exists(zk_paths.broker(broker_id)):  # a killed broker's registration expires with its session
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        zk.stop()
        zk.close()


def test_restart_after_a_kill_logs_what_recovery_cut(start_broker):
    b = start_broker(1, overrides={"zookeeper.session.timeout.ms": "2000"})  # a quick restart after the kill
    topic = create_topic(b.bootstrap, "torn", 2)
    conn = connect(b.bootstrap)
    try:
        for i in range(5):
            assert produce(conn, topic, 0, [b"kept-%d-%d" % (i, j) for j in range(3)])["error_code"] == 0
            assert produce(conn, topic, 1, [b"whole-%d" % i])["error_code"] == 0
    finally:
        conn.close()
    b.kill()
    wait_for_registration_to_expire(b.zk_connect, 1)
    part = b.log_dir / f"{topic}-0"
    segment = sorted(part.glob("*.log"))[-1]
    size = segment.stat().st_size
    torn = build_batch([Record(15, 0, None, b"never acknowledged" * 20)])[:-30]  # a write the kill tore
    with open(segment, "ab") as f:
        f.write(torn)
    b.start()
    wait_until(lambda: b.log_text().count("serving on") == 2, 30, "the restarted broker serving")  # its own line
    lines = [line for line in b.log_text().splitlines() if "recovery after an unclean stop" in line]
    assert len(lines) == 1, b.log_text()  # the other partition had nothing to cut
    q = part / f"{segment.name}.{size}-{size + len(torn)}.quarantined"
    assert re.search(
        rf"WARNING .*{topic}-0: recovery after an unclean stop cut offsets 15-… \(log end offset now 15\): "
        rf"{segment.name} bytes {size}-{size + len(torn)} \(tail damage: truncated: .*\) -> {re.escape(str(q))}$",
        lines[0],
    ), lines[0]
    assert Path(q).read_bytes() == torn and segment.stat().st_size == size
    conn = connect(b.bootstrap)
    try:
        assert produce(conn, topic, 0, [b"after"])["base_offset"] == 15
        assert fetch(conn, topic, 0)["error_code"] == 0
    finally:
        conn.close()
