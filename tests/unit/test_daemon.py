"""broker.daemon: pid files, detached processes, clean stops, ports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker import daemon
from broker.errors import KafkactlError


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_pid_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "run" / "x.pid"
    daemon.write_pid_file(path, os.getpid())
    assert path.read_text() == f"{os.getpid()}\n"
    assert daemon.read_pid(path) == os.getpid()
    assert [p.name for p in path.parent.iterdir()] == ["x.pid"]  # no temporary file left behind


@pytest.mark.parametrize("content", ["garbage", "", "-5", None])
def test_read_pid_removes_stale_and_garbled_files(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "x.pid"
    path.write_text(f"{dead_pid()}\n" if content is None else content)
    assert daemon.read_pid(path) is None
    assert not path.exists()


def test_read_pid_missing(tmp_path: Path) -> None:
    assert daemon.read_pid(tmp_path / "none.pid") is None


def test_remove_pid_file_only_when_it_is_ours(tmp_path: Path) -> None:
    path = tmp_path / "x.pid"
    daemon.write_pid_file(path, 123)
    daemon.remove_pid_file(path, 456)
    assert path.exists()
    daemon.remove_pid_file(path, 123)
    assert not path.exists()
    daemon.remove_pid_file(path)  # missing: no error


def test_is_alive() -> None:
    assert daemon.is_alive(os.getpid())
    assert not daemon.is_alive(dead_pid())
    assert not daemon.is_alive(0) and not daemon.is_alive(-1)


def test_a_zombie_is_not_alive() -> None:
    proc = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while daemon.is_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not daemon.is_alive(proc.pid)  # exited, not yet reaped
    proc.wait()


def test_stop_process_reaps_a_child() -> None:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        assert daemon.stop_process(proc.pid, timeout=10) is True
        assert not daemon.is_alive(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert daemon.stop_process(proc.pid) is False


def test_stop_process_kills_after_the_timeout() -> None:
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        started = time.monotonic()
        assert daemon.stop_process(proc.pid, timeout=0.5) is True
        assert 0.5 <= time.monotonic() - started < 5
        assert not daemon.is_alive(proc.pid)  # killed, and reaped by stop_process (Popen then reports 0)
    finally:
        proc.kill()
        proc.wait()


def test_spawn_daemon(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "d.log"
    log.parent.mkdir()
    log.write_text("earlier\n")
    proc = daemon.spawn_daemon(["sh", "-c", "echo out; echo err >&2; read x; echo stdin=$x; sleep 30"], log)
    try:
        deadline = time.monotonic() + 10
        while "stdin=" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert log.read_text() == "earlier\nout\nerr\nstdin=\n"  # appended; stdin is /dev/null
        assert os.getsid(proc.pid) == proc.pid  # its own session: no terminal signals reach it
    finally:
        daemon.stop_process(proc.pid, timeout=5)
        proc.wait()


def test_start_daemon_reports_the_error_line(tmp_path: Path) -> None:
    pid_path = tmp_path / "run" / "d.pid"
    argv = ["sh", "-c", "echo starting; echo 'kafkactl: error: port taken' >&2; exit 1"]
    with pytest.raises(KafkactlError, match=r"^thing did not start: port taken \(log: "):
        daemon.start_daemon(argv, tmp_path / "d.log", pid_path, lambda: False, timeout=10, what="thing")
    assert not pid_path.exists()


def test_start_daemon_waits_until_ready(tmp_path: Path) -> None:
    pid_path = tmp_path / "run" / "d.pid"
    marker = tmp_path / "ready"
    argv = ["sh", "-c", f"sleep 0.3; touch {marker}; sleep 30"]
    pid = daemon.start_daemon(argv, tmp_path / "d.log", pid_path, marker.exists, timeout=10)
    try:
        assert daemon.read_pid(pid_path) == pid and marker.exists()
    finally:
        assert daemon.stop_process(pid, timeout=5)


def test_start_daemon_stops_what_is_not_ready(tmp_path: Path) -> None:
    pid_path = tmp_path / "run" / "d.pid"
    with pytest.raises(KafkactlError, match="not ready after 0.5s"):
        daemon.start_daemon(["sleep", "30"], tmp_path / "d.log", pid_path, lambda: False, timeout=0.5)
    assert not pid_path.exists()


def test_run_foreground_stops_on_sigterm(tmp_path: Path) -> None:
    pid_path = tmp_path / "run" / "fg.pid"
    calls = []

    def wait() -> int:
        calls.append(("pid file", daemon.read_pid(pid_path)))
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)
        return 0

    previous = signal.getsignal(signal.SIGTERM)
    code = daemon.run_foreground(pid_path, lambda: calls.append("start"), wait, lambda: calls.append("stop"))
    assert code is None
    assert calls == ["start", ("pid file", os.getpid()), "stop"]
    assert not pid_path.exists()
    assert signal.getsignal(signal.SIGTERM) is previous


def test_run_foreground_returns_the_exit_code(tmp_path: Path) -> None:
    stopped = []
    code = daemon.run_foreground(tmp_path / "fg.pid", lambda: None, lambda: 3, lambda: stopped.append(1))
    assert code == 3 and stopped == [1]


def test_ports() -> None:
    port = daemon.free_port()
    assert not daemon.port_open("127.0.0.1", port)
    assert not daemon.wait_port("127.0.0.1", port, 0.2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        assert daemon.wait_port("127.0.0.1", port, 5)
