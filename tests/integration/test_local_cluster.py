"""`kafkactl cluster up | status | down`: a real ZooKeeper and three real broker daemons in a scratch home.

Every process a test's cluster started is stopped by pid at the end, whatever happened (the `home` fixture
reads the pid files the cluster keeps)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.daemon import is_alive, read_pid
from kafkactl.app import run
from tests.integration.helpers import cli, cli_env, error_line, json_lines, ok, terminate, wait_until


def _pids(home: Path) -> list[int]:
    """Every live process the clusters under `home` record: daemons' pid files and ZooKeeper's JVM."""
    files = [*sorted(home.glob("clusters/*/run/broker-*.pid")), *home.glob("clusters/*/run/zookeeper-*.pid"),
             *home.glob("clusters/*/zookeeper/zookeeper_server.pid")]  # fmt: skip
    return [pid for f in files if (pid := read_pid(f)) is not None]


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    h = tmp_path / "home"
    h.mkdir()
    try:
        yield h
    finally:
        for pid in _pids(h):  # the daemons first: a broker's stop is clean, then ZooKeeper's wrapper, then its JVM
            terminate(pid)


def _pids_of(st: dict) -> list[int]:
    zk = st["zookeeper"]
    return [b["pid"] for b in st["brokers"]] + [zk["pid"], zk["java_pid"]]


def produce(bootstrap: str, topic: str, lines: list[str], home: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "kafkactl", "produce", topic, "-b", bootstrap, "-K:"],
        input="".join(f"{ln}\n" for ln in lines), capture_output=True, text=True, timeout=60, env=cli_env(home),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr


def consumed(bootstrap: str, topic: str, home: Path) -> dict[str, str]:
    rows = json_lines(ok(cli("consume", topic, "-b", bootstrap, "-o", "json", home=home)))
    assert len(rows) == len({r["key"] for r in rows}), "a message came back twice"
    return {r["key"]: r["value"] for r in rows}


def test_up_status_down_up_purge(home: Path) -> None:
    st = json.loads(ok(cli("cluster", "up", "-n", "3", "-o", "json", home=home)))
    cdir = home / "clusters" / "local"
    assert st["name"] == "local" and st["state"] == "up" and st["dir"] == str(cdir)
    assert st["started"] == {"zookeeper": True, "brokers": [1, 2, 3]}
    assert [b["id"] for b in st["brokers"]] == [1, 2, 3]
    assert all(b["alive"] and b["registered"] for b in st["brokers"]), st
    assert st["bootstrap"] == ",".join(f"127.0.0.1:{b['port']}" for b in st["brokers"])
    assert len({b["port"] for b in st["brokers"]} | {int(st["zookeeper"]["address"].rsplit(":", 1)[1])}) == 4
    assert all(Path(b["log_dir"]).parent == cdir for b in st["brokers"])
    zk, bootstrap = st["zookeeper"]["address"], st["bootstrap"]
    pids = _pids_of(st)
    assert all(p and is_alive(p) for p in pids), st

    # the registry, through the command line: three brokers at the printed ports
    listed = json_lines(ok(cli("broker", "list", "-z", zk, "-o", "json", home=home)))
    assert {(b["id"], b["port"]) for b in listed} == {(b["id"], b["port"]) for b in st["brokers"]}

    # status says the same; `up` again leaves it as it is
    again = json.loads(ok(cli("cluster", "status", "-o", "json", home=home)))
    assert {k: v for k, v in again.items()} == {k: v for k, v in st.items() if k != "started"}
    already = json.loads(ok(cli("cluster", "up", "-o", "json", home=home)))
    assert already["started"] == {"zookeeper": False, "brokers": []} and _pids_of(already) == pids
    assert "already up" in ok(cli("cluster", "up", home=home))
    env = ok(cli("cluster", "env", home=home)).strip()
    assert env == f"export KAFKACTL_BOOTSTRAP_SERVER={bootstrap} KAFKACTL_ZOOKEEPER={zk}"

    # a topic over the three brokers, and a round trip through the printed bootstrap
    ok(cli("topic", "create", "orders", "--partitions", "3", "-b", bootstrap, home=home))
    described = ok(cli("topic", "describe", "orders", "-b", bootstrap, "-o", "json", home=home))
    assert {p["leader"] for p in json.loads(described)["partitions"]} == {1, 2, 3}, described
    sent = {f"k{i}": f"v{i}" for i in range(300)}
    produce(bootstrap, "orders", [f"{k}:{v}" for k, v in sent.items()], home)
    assert consumed(bootstrap, "orders", home) == sent

    # one broker down (a controlled shutdown) and back: a replicated topic goes on, its ISR shrinks and grows
    ok(cli("topic", "create", "copies", "-p", "3", "-r", "3", "--config", "min.insync.replicas=2", "-b", bootstrap,
           home=home))  # fmt: skip
    produce(bootstrap, "copies", [f"{k}:{v}" for k, v in sent.items()], home)
    out = ok(cli("cluster", "down", "--broker", "2", home=home))
    assert out.startswith("cluster local down: stopped broker 2") and "zookeeper" not in out, out
    assert not is_alive(pids[1]) and is_alive(pids[0]) and is_alive(pids[2])  # brokers 2; 1 and 3

    def parts() -> list[dict]:
        described = ok(cli("topic", "describe", "copies", "-b", bootstrap, "-o", "json", home=home))
        return json.loads(described)["partitions"]

    assert all(p["leader"] != 2 and 2 not in p["isr"] for p in parts()), parts()
    assert consumed(bootstrap, "copies", home) == sent
    restarted = json.loads(ok(cli("cluster", "up", "-o", "json", home=home)))
    assert restarted["started"] == {"zookeeper": False, "brokers": [2]}
    wait_until(lambda: all(sorted(p["isr"]) == [1, 2, 3] for p in parts()), 30, "broker 2 back in every ISR")
    # `eval "$(kafkactl cluster env)"` is enough for a replicated bench: it takes the cluster from the variable
    bench = subprocess.run([sys.executable, "-m", "kafkactl", "bench", "produce", "--messages", "2000", "--acks", "all",
                            "-r", "3", "-o", "json"], capture_output=True, text=True, timeout=120,
                           env=cli_env(home, KAFKACTL_BOOTSTRAP_SERVER=bootstrap))  # fmt: skip
    assert bench.returncode == 0, bench.stderr
    measured = json.loads(bench.stdout)
    assert measured["replication_factor"] == 3 and measured["messages"] == 2000 and measured["acks"] == -1
    error_line(cli("cluster", "down", "--broker", "7", home=home), "has no broker 7")

    # down: brokers, then ZooKeeper, all gone, data kept
    out = ok(cli("cluster", "down", home=home))
    assert out.startswith("cluster local down: stopped broker 1") and "data kept" in out, out
    assert out.index("broker 1") < out.index("broker 2") < out.index("broker 3") < out.index("zookeeper")
    assert not [p for p in pids if is_alive(p)], f"left running: {[p for p in pids if is_alive(p)]}"
    assert _pids(home) == []
    down = subprocess.run([sys.executable, "-m", "kafkactl", "cluster", "status", "-o", "json"], capture_output=True,
                          text=True, env=cli_env(home), timeout=60)  # fmt: skip
    assert down.returncode == 1 and json.loads(down.stdout)["state"] == "down", down
    error_line(cli("cluster", "env", home=home), "cluster local is down")

    # up again: the same cluster, addresses and messages
    back = json.loads(ok(cli("cluster", "up", "-o", "json", home=home)))
    assert back["state"] == "up" and back["bootstrap"] == bootstrap and back["zookeeper"]["address"] == zk
    assert consumed(bootstrap, "orders", home) == sent
    error_line(cli("cluster", "up", "-n", "2", home=home), "has 3 brokers")  # not a silent resize

    # down --purge: the data is gone
    pids = _pids_of(back)
    out = ok(cli("cluster", "down", "--purge", home=home))
    assert "data deleted" in out, out
    assert not [p for p in pids if is_alive(p)]
    assert not cdir.exists()
    error_line(cli("cluster", "status", home=home), "no cluster 'local'")


def test_up_failing_midway_stops_what_it_started(home: Path) -> None:
    blocked = home / "clusters" / "mid" / "broker-2"  # broker 2's log dir is a file: it cannot start
    blocked.parent.mkdir(parents=True)
    blocked.write_text("not a dir\n")
    r = cli("cluster", "up", "--name", "mid", "-n", "2", home=home)
    line = error_line(r, "broker 2 did not start", "stopped what it had started (broker 1, zookeeper)")
    assert r.returncode == 1, line
    assert _pids(home) == []
    st = subprocess.run([sys.executable, "-m", "kafkactl", "cluster", "status", "--name", "mid", "-o", "json"],
                        capture_output=True, text=True, env=cli_env(home), timeout=60)  # fmt: skip
    assert st.returncode == 1 and json.loads(st.stdout)["state"] == "down", st


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (("up", "-n", "0"), 2, "-n 0: a cluster has 1 to"),
        (("up", "--name", "../x"), 2, "cluster name '../x'"),
        (("down",), 1, "no cluster 'local' here"),
        (("status", "--name", "other"), 1, "no cluster 'other' here"),
    ],
)
def test_usage_errors(home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
                      args: tuple[str, ...], code: int, needle: str) -> None:  # fmt: skip
    monkeypatch.setenv("KAFKACTL_HOME", str(home))  # in this process: nothing here starts a daemon
    assert run(["cluster", *args]) == code
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("kafkactl: error: ") and len(err.splitlines()) == 1, err
    assert needle in err
    assert not (home / "clusters").exists() or not any((home / "clusters").iterdir())


def test_up_with_overrides_runs_its_brokers_with_them(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`up(overrides=…)` (what benchmarks/scale.py gives its brokers): each broker it starts runs with them,
    under the cluster's own id and listener."""
    monkeypatch.setenv("KAFKACTL_HOME", str(home))
    from broker import local_cluster
    from broker.client.admin import Admin
    from broker.protocol.messages.admin import BROKER_RESOURCE

    st = local_cluster.up("ov", 1, overrides={"zookeeper.session.timeout.ms": "7000", "broker.id": "9"})
    try:
        assert [b["id"] for b in st["brokers"]] == [1]
        with Admin(st["bootstrap"]) as admin:
            configs = {c.name: c for c in admin.describe_configs(BROKER_RESOURCE, "1")}
        assert configs["zookeeper.session.timeout.ms"].value == "7000"
        assert configs["zookeeper.session.timeout.ms"].source == "static"
    finally:
        local_cluster.down("ov", purge=True)
