"""Hostile load against one live broker (issue 15, item 12): connections that each send most of a huge
frame, more connections than allowed, and a Metadata request naming thousands of unknown topics. The
broker's memory and descriptors stay bounded and come back, and a normal client is served throughout."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import time

import pytest

from tests.integration.cluster import BrokerProcess, new_chroot
from tests.integration.helpers import cli, cli_env, metadata, ok, wait_until, zk_session

MiB = 1 << 20


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def served(b: BrokerProcess, topic: str, value: str) -> None:
    """A normal client's round trip: produce one message, read the topic back."""
    p = subprocess.run([sys.executable, "-m", "kafkactl", "produce", topic, "--acks", "1", "-b", b.bootstrap],
                       input=value + "\n", capture_output=True, text=True, timeout=60, env=cli_env())  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert value in ok(cli("consume", topic, "-e", "-b", b.bootstrap)).split()


@pytest.fixture
def broker(private_zk, tmp_path):
    overrides = {"socket.request.max.bytes": str(16 * MiB), "queued.max.request.bytes": str(20 * MiB),
                 "max.connections.per.ip": "20"}  # fmt: skip
    with BrokerProcess(1, new_chroot(private_zk.connect_string), tmp_path, overrides=overrides) as b:
        ok(cli("topic", "create", "normal", "-p", 1, "-b", b.bootstrap))
        yield b


def test_huge_frames_wait_for_the_memory_budget_and_give_it_back(broker):
    pid = broker.proc.pid
    served(broker, "normal", "before")
    baseline = rss_mb(pid)
    socks = []
    chunk = b"\0" * MiB
    for _ in range(8):  # each sends 15 MiB of a 16 MiB frame and then nothing
        s = socket.create_connection(("127.0.0.1", broker.port))
        s.settimeout(0.2)
        s.sendall(struct.pack(">i", 16 * MiB - 4))
        sent = 0
        try:
            while sent < 15 * MiB:
                s.send(chunk)
                sent += MiB
        except (TimeoutError, BlockingIOError):
            pass  # the broker stopped reading this one: its frame waits for the budget
        socks.append(s)
    time.sleep(1.0)
    grown = rss_mb(pid) - baseline
    assert grown < 80, f"RSS grew {grown:.0f} MB with 8 half-sent 16 MiB frames (budget 20 MiB)"
    served(broker, "normal", "during")  # small requests need no budget
    for s in socks:
        s.close()
    wait_until(lambda: rss_mb(pid) - baseline < 40, 20, "the frames' memory given back")
    served(broker, "normal", "after")


def test_connections_past_the_per_ip_limit_are_refused_and_others_served(broker):
    pid = broker.proc.pid
    baseline = open_fds(pid)
    socks, refused = [], 0
    for _ in range(60):  # from 127.0.0.2: its own address, so the normal client (127.0.0.1) is not counted
        s = socket.socket()
        s.bind(("127.0.0.2", 0))
        s.connect(("127.0.0.1", broker.port))
        socks.append(s)
    time.sleep(0.5)
    for s in socks:
        s.settimeout(0.5)
        try:
            if s.recv(1) == b"":
                refused += 1
        except TimeoutError:
            pass  # still open: accepted
        except ConnectionResetError:
            refused += 1
    assert refused == 40, f"{refused} of 60 refused (max.connections.per.ip=20)"
    served(broker, "normal", "meanwhile")
    log = broker.log_text()
    assert log.count("max.connections.per.ip=20 reached for 127.0.0.2") == 1, log[-2000:]  # once per interval
    for s in socks:
        s.close()
    wait_until(lambda: open_fds(pid) <= baseline + 5, 20, "the descriptors back")


def test_a_metadata_request_naming_thousands_of_unknown_topics_creates_only_a_few(broker):
    names = [f"flood-{i}" for i in range(3000)]
    began = time.monotonic()
    md = metadata(broker.bootstrap, names, auto_create=True)
    assert time.monotonic() - began < 30
    assert len(md["topics"]) == 3000
    created = [t["name"] for t in md["topics"] if t["error_code"] == 0]
    assert 0 < len(created) <= 100, len(created)  # at most 100 looked up per request, 50 created per second
    with zk_session(broker.zk_connect) as zk:
        flood = [t for t in zk.get_children("/brokers/topics") if t.startswith("flood-")]
    assert sorted(flood) == sorted(created)
    served(broker, "normal", "after-flood")
    time.sleep(0.2)  # the budget refills: a client asking again gets its topic
    md = metadata(broker.bootstrap, ["flood-2999"], auto_create=True)
    assert md["topics"][0]["error_code"] in (0, 5)  # created (LEADER_NOT_AVAILABLE while its leader starts)
