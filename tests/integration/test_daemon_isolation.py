"""Daemons import only the installed kafkactl, whatever directory they are started from (issue 26, item 8).

`python -m kafkactl` puts the working directory first on the import path: a `kafkactl/` or `broker/` package
there (a clone of the project next to a wheel install) was run by every broker instead. The tests start
daemons from a directory holding look-alike packages whose import writes a marker file and raises."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.daemon import free_port, kafkactl_command, read_pid
from tests.integration.helpers import cli_env, terminate

DECOY = """from pathlib import Path
Path({marker!r}).write_text(__name__ + " imported from " + __file__ + "\\n")
raise RuntimeError("a look-alike {name} package in the working directory was imported")
"""


@pytest.fixture
def decoy(tmp_path: Path) -> Path:
    """A directory holding look-alike `kafkactl/` and `broker/` packages; their import writes `marker`."""
    d = tmp_path / "clone"
    for name in ("kafkactl", "broker"):
        (d / name).mkdir(parents=True)
        (d / name / "__init__.py").write_text(DECOY.format(marker=str(tmp_path / "marker"), name=name))
    (d / "kafkactl" / "__main__.py").write_text("import broker\n")
    return d


def _cli_argv() -> list[str]:
    """The installed `kafkactl` script (its own directory, not the working one, is first on its path)."""
    script = Path(sys.executable).parent / "kafkactl"
    return [str(script)] if script.exists() else kafkactl_command()


def _run(args: list[object], cwd: Path, home: Path, timeout: float = 90.0) -> str:
    done = subprocess.run([*_cli_argv(), *map(str, args)], cwd=cwd, env=cli_env(home), capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


def test_the_decoy_would_be_imported_by_plain_python_m(decoy: Path, tmp_path: Path) -> None:
    """The look-alike packages are a real trap for `python -m kafkactl`, and none for the daemons' command."""
    plain = subprocess.run([sys.executable, "-m", "kafkactl", "--help"], cwd=decoy, capture_output=True, text=True,
                           timeout=60, env=cli_env(tmp_path / "home"))  # fmt: skip
    assert plain.returncode != 0 and (tmp_path / "marker").exists(), plain.stderr
    (tmp_path / "marker").unlink()
    isolated = subprocess.run(kafkactl_command("--help"), cwd=decoy, capture_output=True, text=True, timeout=60,
                              env=cli_env(tmp_path / "home"))  # fmt: skip
    assert isolated.returncode == 0, isolated.stderr
    assert not (tmp_path / "marker").exists()


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """A scratch KAFKACTL_HOME; every daemon that recorded a pid under it is stopped at the end."""
    h = tmp_path / "home"
    h.mkdir()
    try:
        yield h
    finally:
        patterns = (
            "clusters/*/run/broker-*.pid",
            "run/*.pid",
            "clusters/*/run/zookeeper-*.pid",
            "clusters/*/zookeeper/zookeeper_server.pid",
        )  # daemons first, ZooKeeper's JVM last
        files = [f for pattern in patterns for f in sorted(h.glob(pattern))]
        for f in files:
            terminate(read_pid(f))


def test_a_cluster_started_beside_a_clone_runs_the_installed_code(decoy: Path, home: Path, tmp_path: Path) -> None:
    """`cluster up` (a ZooKeeper launcher and a broker daemon) and `schema-registry start --daemon`, run from
    the look-alike directory: they start, serve a round trip, and never import the look-alikes."""
    st = json.loads(_run(["cluster", "up", "-n", "1", "-o", "json"], decoy, home))
    assert st["state"] == "up" and all(b["alive"] and b["registered"] for b in st["brokers"]), st
    bootstrap, zk = st["bootstrap"], st["zookeeper"]["address"]
    _run(["topic", "create", "orders", "-p", "2", "-b", bootstrap], decoy, home)
    lines = [f"k{i}:v{i}" for i in range(50)]
    done = subprocess.run([*_cli_argv(), "produce", "orders", "-b", bootstrap, "-K:", "--acks", "1"], cwd=decoy,
                          input="".join(f"{ln}\n" for ln in lines), capture_output=True, text=True, timeout=60,
                          env=cli_env(home))  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [json.loads(ln) for ln in _run(["consume", "orders", "-b", bootstrap, "-o", "json"], decoy, home).split("\n")
            if ln.strip()]  # fmt: skip
    assert sorted(f"{r['key']}:{r['value']}" for r in rows) == sorted(lines)

    port = free_port()
    _run(["schema-registry", "start", "--daemon", "-z", zk, "--port", port], decoy, home)
    _run(["schema-registry", "stop", "--port", port], decoy, home)
    _run(["cluster", "down"], decoy, home)
    assert not (tmp_path / "marker").exists(), (tmp_path / "marker").read_text()


def test_every_child_kafkactl_is_started_through_the_one_helper() -> None:
    """No module builds its own `python -m kafkactl` command line (one that would put the cwd on the path)."""
    root = Path(__file__).resolve().parents[2]
    offenders = [
        str(p.relative_to(root))
        for package in ("broker", "kafkactl")
        for p in sorted((root / package).rglob("*.py"))
        if '"-m", "kafkactl"' in p.read_text() and p != root / "broker" / "daemon.py"
    ]
    assert offenders == []
