"""Exactly-once consume-transform-produce, as each client's users write it (tests/compat/eos_worker.py), with
the worker killed -9 in the middle of a transaction whose records are already in the log.

A second worker with the same transactional id fences the first (its open transaction is aborted) and
carries on from the group's committed offsets. A read_committed consumer of the output then sees every
input record transformed exactly once, none of the killed transaction's records (which a read_uncommitted
consumer does see: the kill really happened mid-transaction), and the group's committed offsets are the
input's end.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from broker.client.admin import Admin

WORKER = Path(__file__).with_name("eos_worker.py")
PARTITIONS = 2
PER_PARTITION = 60
PER_TXN = 10
STALL_AT = 3  # the 4th transaction is left open when the first worker is killed


class Worker:
    """An eos_worker.py subprocess; its JSON events are collected by a reader thread."""

    def __init__(self, log: Path, *argv: str) -> None:
        self.events: list[dict[str, Any]] = []
        self.log = log
        with open(log, "w") as err:
            self.proc = subprocess.Popen([sys.executable, str(WORKER), *argv], stdout=subprocess.PIPE,
                                         stderr=err, text=True, bufsize=1)  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                self.events.append(json.loads(line))

    def wait_for(self, ev: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in list(self.events):
                if e["ev"] == ev:
                    return e
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.1)
        tail = self.log.read_text()[-3000:]
        raise AssertionError(f"no {ev!r} event within {timeout}s (rc={self.proc.poll()}, events "
                             f"{self.events[-5:]}):\n{tail}")  # fmt: skip

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


def read_all(bootstrap: str, topic: str, isolation: str, expect_at_least: int,
             partitions: int = PARTITIONS) -> list[tuple[bytes, bytes, int]]:  # fmt: skip
    """Every record of `topic` with `isolation`: (key, value, partition), read until nothing more comes."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "isolation.level": isolation})  # fmt: skip
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[tuple[bytes, bytes, int]] = []
    deadline = time.monotonic() + 60
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        msgs = [m for m in c.consume(1000, 0.5) if m.error() is None]
        out.extend((m.key(), m.value(), m.partition()) for m in msgs)
        if msgs:
            quiet_since = time.monotonic()
        elif len(out) >= expect_at_least and time.monotonic() - quiet_since > 3:
            break
    c.close()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python", "aiokafka"])
def test_consume_transform_produce_survives_kill_9(client: str, shared_broker, tmp_path: Path) -> None:
    bootstrap = shared_broker.bootstrap
    tag = f"{client}-{uuid.uuid4().hex[:6]}"
    src, dst, group, txn_id = f"eos-in-{tag}", f"eos-out-{tag}", f"eos-group-{tag}", f"eos-txn-{tag}"
    with Admin(bootstrap) as admin:
        admin.create_topic(src, PARTITIONS, 1)
        admin.create_topic(dst, PARTITIONS, 1)
    p = Producer({"bootstrap.servers": bootstrap})
    inputs = {(f"k{part}-{i}".encode(), f"v{part}-{i}".encode(), part)
              for part in range(PARTITIONS) for i in range(PER_PARTITION)}  # fmt: skip
    for key, value, part in sorted(inputs):
        p.produce(src, value, key=key, partition=part)
    assert p.flush(30) == 0
    end = json.dumps({str(part): PER_PARTITION for part in range(PARTITIONS)})
    argv = [client, bootstrap, txn_id, group, src, dst, str(PER_TXN)]

    first = Worker(tmp_path / "first.log", *argv, str(STALL_AT), end)
    try:
        stalled = first.wait_for("stalled", 90)
        committed_before = sum(e["n"] for e in first.events if e["ev"] == "committed")
        assert committed_before > 0
    finally:
        first.stop()  # kill -9 with a transaction of `stalled["n"]` records open in the log

    second = Worker(tmp_path / "second.log", *argv, "-1", end)
    try:
        second.wait_for("done", 120)
    finally:
        second.stop()

    expected = sorted((k, b"T:" + v, part) for k, v, part in inputs)
    committed = read_all(bootstrap, dst, "read_committed", len(expected))
    assert sorted(committed) == expected  # each input exactly once: no aborted record, no duplicate, none lost
    uncommitted = read_all(bootstrap, dst, "read_uncommitted", len(expected) + stalled["n"])
    assert len(uncommitted) == len(expected) + stalled["n"]  # the killed transaction's records are in the log

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        offsets = c.committed([TopicPartition(src, part) for part in range(PARTITIONS)], timeout=10)
    finally:
        c.close()
    assert {tp.partition: tp.offset for tp in offsets} == {part: PER_PARTITION for part in range(PARTITIONS)}
