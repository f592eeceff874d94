"""The README's first command, `bash scripts/quickstart.sh`, as a new user runs it, with 127.0.0.1:9092 and
:2181 held by something that is neither a broker nor ZooKeeper (issue 15, item 11): it picks free ports,
says so in one line each, and its round trip of 10,000 keyed messages comes back whole."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def hold(port: int) -> socket.socket | None:
    """Listen on 127.0.0.1:`port` (accepting nothing), or None if something holds it already."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        s.close()
        return None
    s.listen()
    return s


@pytest.mark.slow
def test_quickstart_picks_free_ports_when_9092_and_2181_are_taken(tmp_path):
    held = [hold(9092), hold(2181)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKACTL_")}
    env.update(KAFKACTL_HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "config"))
    try:
        r = subprocess.run(["bash", "scripts/quickstart.sh"], cwd=ROOT, capture_output=True, text=True,
                           timeout=600, env=env)  # fmt: skip
    finally:
        for s in held:
            if s is not None:
                s.close()
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "quickstart: 127.0.0.1:9092 is taken; the broker listens on" in out, out[-3000:]
    assert "quickstart: 127.0.0.1:2181 is taken by something that is not ZooKeeper; using" in out, out[-3000:]
    assert "10000 messages produced to" in out and "every key and value intact" in out
    assert "broker 0 stopped" in out and "Traceback" not in out
