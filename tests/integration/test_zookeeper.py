"""A real ZooKeeper server: the library that runs it, and `kafkactl zookeeper start|stop|status`."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from broker import home
from broker.daemon import free_port, is_alive, port_open, read_pid, stop_process
from broker.errors import KafkactlError
from broker.zk import consumers
from broker.zk import paths as zk_paths
from broker.zk.server import PID_FILE, ZooKeeperServer, four_letter, is_serving, server_info
from tests.cli.conftest import kafkactl
from tests.fixtures import zk_client


@contextmanager
def reaped(data_dir: Path, port: int) -> Iterator[None]:
    """On the way out, stop whatever a test started: the kafkactl process and its JVM, by pid."""
    try:
        yield
    finally:
        for pid_path in (home.pid_file(f"zookeeper-{port}"), data_dir / PID_FILE):
            pid = read_pid(pid_path)
            if pid is not None:
                stop_process(pid, timeout=10)


def one_error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kafkactl: error: "), r.stderr
    assert "Traceback" not in r.stderr
    return lines[0]


# --- the library -------------------------------------------------------------------------------------


def test_server_answers_srvr(zk_server: ZooKeeperServer) -> None:
    answer = four_letter(zk_server.host, zk_server.port, "srvr")
    assert answer is not None and "Mode: standalone" in answer
    assert is_serving(zk_server.host, zk_server.port)
    info = server_info(zk_server.host, zk_server.port)
    assert info is not None and info["mode"] == "standalone" and info["version"].startswith("3.")
    assert zk_server.pid is not None and is_alive(zk_server.pid)
    assert (zk_server.data_dir / PID_FILE).read_text().strip() == str(zk_server.pid)
    assert four_letter(zk_server.host, zk_server.port, "ruok") == "imok"


def test_four_letter_words_outside_the_whitelist_are_refused(zk_server: ZooKeeperServer) -> None:
    answer = four_letter(zk_server.host, zk_server.port, "conf")
    assert answer is not None and "not in the whitelist" in answer


def test_kazoo_creates_and_reads_in_a_chroot(zk_server: ZooKeeperServer, zk_chroot: str) -> None:
    client = zk_client(zk_chroot)
    try:
        client.create("/brokers/ids/1", b'{"version":5}', ephemeral=True, makepath=True)
        data, stat = client.get("/brokers/ids/1")
        assert data == b'{"version":5}' and stat.ephemeralOwner == client.client_id[0]
    finally:
        client.stop()
        client.close()
    root = zk_client(zk_server.connect_string)
    try:
        chroot = "/" + zk_chroot.split("/", 1)[1]
        assert root.exists(f"{chroot}/brokers/ids") is not None
        assert root.exists(f"{chroot}/brokers/ids/1") is None  # the session ended: the ephemeral went with it
    finally:
        root.stop()
        root.close()


def test_server_refuses_a_busy_port(zk_server: ZooKeeperServer, tmp_path: Path) -> None:
    with pytest.raises(KafkactlError, match="already in use"):
        ZooKeeperServer(tmp_path, zk_server.port).start()
    assert not (tmp_path / PID_FILE).exists()


def test_server_refuses_a_data_dir_in_use(zk_server: ZooKeeperServer) -> None:
    with pytest.raises(KafkactlError, match="in use by another server"):
        ZooKeeperServer(zk_server.data_dir, free_port()).start()
    assert is_serving(zk_server.host, zk_server.port)


def test_context_manager_starts_and_stops(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path, free_port())
    try:
        with server:
            pid = server.pid
            assert pid is not None and is_serving(server.host, server.port)
        assert server.pid is None and not is_alive(pid)
        assert not port_open(server.host, server.port)
        assert not (tmp_path / PID_FILE).exists()
        assert (tmp_path / "zookeeper.log").stat().st_size > 0  # logs go to the file ...
        assert (tmp_path / "zookeeper.out").read_text() == ""  # ... not to the console
    finally:
        server.stop()


# --- the command line --------------------------------------------------------------------------------


def test_daemon_start_status_stop(kafkactl_home: Path, tmp_path: Path) -> None:
    port, data_dir = free_port(), tmp_path / "zk"
    with reaped(data_dir, port):
        r = kafkactl("zookeeper", "start", "--daemon", "--port", port, "--data-dir", data_dir)
        assert r.returncode == 0, r.stderr
        pid = read_pid(home.pid_file(f"zookeeper-{port}"))
        assert pid is not None
        assert r.stdout.strip() == f"zookeeper started on 127.0.0.1:{port} (pid {pid}, data {data_dir})"
        java_pid = read_pid(data_dir / PID_FILE)
        assert java_pid is not None and java_pid != pid
        assert (kafkactl_home / "logs" / f"zookeeper-{port}.log").exists()

        r = kafkactl("zookeeper", "status", "--port", port)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(f"zookeeper on 127.0.0.1:{port}: serving, mode standalone, version 3.")
        assert f"pid {pid}" in r.stdout

        r = kafkactl("zookeeper", "status", "--port", port, "-o", "json")
        assert r.returncode == 0, r.stderr
        status = json.loads(r.stdout)
        assert status["serving"] is True and status["pid"] == pid and status["mode"] == "standalone"
        assert status["address"] == f"127.0.0.1:{port}"

        r = kafkactl("zookeeper", "start", "--daemon", "--port", port, "--data-dir", data_dir)
        assert "already running" in one_error_line(r)

        r = kafkactl("zookeeper", "stop", "--port", port)
        assert r.returncode == 0, r.stderr
        assert not home.pid_file(f"zookeeper-{port}").exists()
        assert not (data_dir / PID_FILE).exists()
        assert not is_alive(pid) and not is_alive(java_pid)
        assert not port_open("127.0.0.1", port)

        r = kafkactl("zookeeper", "status", "--port", port)
        assert r.returncode == 1
        assert r.stdout.strip() == f"zookeeper on 127.0.0.1:{port}: not running"
        r = kafkactl("zookeeper", "status", "--port", port, "-o", "json")
        assert r.returncode == 1
        assert json.loads(r.stdout) == {"address": f"127.0.0.1:{port}", "serving": False, "pid": None, "private": False}


def test_stop_when_nothing_runs(kafkactl_home: Path) -> None:
    r = kafkactl("zookeeper", "stop", "--port", free_port())
    assert r.returncode == 1
    assert "no zookeeper" in one_error_line(r)


def test_stop_with_a_stale_pid_file(kafkactl_home: Path) -> None:
    port = free_port()
    dead = subprocess.Popen(["true"])
    dead.wait()
    pid_path = home.pid_file(f"zookeeper-{port}")
    pid_path.parent.mkdir(parents=True)
    pid_path.write_text(f"{dead.pid}\n")
    r = kafkactl("zookeeper", "stop", "--port", port)
    assert r.returncode == 1 and "no zookeeper" in one_error_line(r)
    assert not pid_path.exists()


@pytest.mark.parametrize("daemon", [False, True], ids=["foreground", "daemon"])
def test_start_on_a_busy_port(zk_server: ZooKeeperServer, kafkactl_home: Path, tmp_path: Path, daemon: bool) -> None:
    data_dir = tmp_path / "zk"
    with reaped(data_dir, zk_server.port):
        args = ["zookeeper", "start", "--port", zk_server.port, "--data-dir", data_dir]
        r = kafkactl(*args, *(["--daemon"] if daemon else []))
        assert "already in use" in one_error_line(r)
        assert r.stdout == ""
        assert read_pid(home.pid_file(f"zookeeper-{zk_server.port}")) is None
    assert is_serving(zk_server.host, zk_server.port)  # the server that holds the port is untouched


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_foreground_start_stops_cleanly_on_a_signal(kafkactl_home: Path, tmp_path: Path, sig: int) -> None:
    port, data_dir = free_port(), tmp_path / "zk"
    argv = [sys.executable, "-m", "kafkactl", "zookeeper", "start", "--port", str(port), "--data-dir", str(data_dir)]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a shell's `&` may have ignored it
    )  # fmt: skip
    java_pid = None
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "no ready line within 60 s"
        line = proc.stdout.readline()
        assert line.startswith(f"zookeeper serving on 127.0.0.1:{port} (pid {proc.pid}, java pid "), line
        java_pid = int(line.split("java pid ")[1].split(",")[0])
        assert is_serving("127.0.0.1", port)
        assert read_pid(home.pid_file(f"zookeeper-{port}")) == proc.pid

        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert err == ""
        assert not is_alive(java_pid)
        assert not port_open("127.0.0.1", port)
        assert not home.pid_file(f"zookeeper-{port}").exists()
        assert not (data_dir / PID_FILE).exists()
    finally:
        if proc.poll() is None:
            stop_process(proc.pid, timeout=10)
        if java_pid is not None and is_alive(java_pid):
            stop_process(java_pid, timeout=10)
        proc.communicate()


def test_foreground_stop_command(kafkactl_home: Path, tmp_path: Path) -> None:
    """`kafkactl zookeeper stop` also stops a server started in the foreground (its pid file is the same)."""
    port, data_dir = free_port(), tmp_path / "zk"
    argv = [sys.executable, "-m", "kafkactl", "zookeeper", "start", "--port", str(port), "--data-dir", str(data_dir)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with reaped(data_dir, port):
        try:
            ready, _, _ = select.select([proc.stdout], [], [], 60)
            assert ready and proc.stdout.readline().startswith("zookeeper serving on")
            r = kafkactl("zookeeper", "stop", "--port", port)
            assert r.returncode == 0 and r.stdout.strip() == f"zookeeper on port {port} stopped (pid {proc.pid})"
            assert proc.wait(timeout=30) == 0
            assert not port_open("127.0.0.1", port)
        finally:
            if proc.poll() is None:
                stop_process(proc.pid, timeout=10)
            proc.communicate()


def test_default_data_dir_is_under_kafkactl_home(kafkactl_home: Path) -> None:
    port = free_port()
    data_dir = kafkactl_home / "zookeeper"
    with reaped(data_dir, port):
        r = kafkactl("zookeeper", "start", "--daemon", "--port", port)
        assert r.returncode == 0, r.stderr
        assert f"data {data_dir})" in r.stdout
        assert (data_dir / "zoo.cfg").exists() and (data_dir / "data" / "version-2").is_dir()
        assert kafkactl("zookeeper", "stop", "--port", port).returncode == 0
    assert os.listdir(kafkactl_home / "run") == []


def test_a_group_generation_round_trips_through_its_znode(zk_chroot: str) -> None:
    """The coordinator's stored generation (bytes in base64) reads back as written; None deletes it (and the
    group's node when no offsets are left); an older generation does not overwrite or delete a newer one;
    a node this version cannot read is no generation."""
    state = {"generation": 7, "protocol_type": "consumer", "protocol": "range", "leader": "m-1",
             "members": [{"member_id": "m-1", "group_instance_id": "i-1", "client_id": "c", "client_host": "/h",
                          "session_timeout_ms": 6000, "rebalance_timeout_ms": 9000,
                          "protocols": [{"name": "range", "metadata": b"\x00\x01meta"},
                                        {"name": "cooperative-sticky", "metadata": b""}],
                          "assignment": bytes(range(256))}]}  # fmt: skip
    client = zk_client(zk_chroot)
    try:
        assert consumers.generation(client, "g/1") is None
        assert consumers.store_generation(client, "g/1", 7, state)
        assert consumers.generation(client, "g/1") == state
        assert json.loads(client.get(zk_paths.group_generation("g/1"))[0])["version"] == 1
        assert consumers.store_generation(client, "g/1", 8, {**state, "generation": 8})
        assert not consumers.store_generation(client, "g/1", 7, state)  # a coordinator the group left
        assert not consumers.store_generation(client, "g/1", 7, None)
        assert consumers.generation(client, "g/1")["generation"] == 8
        consumers.commit(client, "g/1", {("t", 0): 5})
        assert consumers.store_generation(client, "g/1", 9, None)
        assert client.exists(zk_paths.group_generation("g/1")) is None
        assert consumers.committed(client, "g/1")[("t", 0)].offset == 5  # the offsets stay
        assert consumers.store_generation(client, "g/1", 9, None)  # already gone: nothing to do
        assert consumers.store_generation(client, "g/3", 1, {**state, "generation": 1})
        assert consumers.store_generation(client, "g/3", 1, None)
        assert client.exists(zk_paths.group("g/3")) is None  # nothing left of a group that never committed
        for bad in (b"not json", b'{"version":2}', b'{"version":1,"generation":1}'):
            client.create(zk_paths.group_generation("g/2"), bad, makepath=True)
            assert consumers.generation(client, "g/2") is None, bad
            assert consumers.store_generation(client, "g/2", 7, state)  # an unreadable node may be replaced
            client.delete(zk_paths.group_generation("g/2"))
    finally:
        client.stop()
        client.close()
