"""`kafkactl broker start | stop | list` against a real ZooKeeper, with real broker processes.

Every broker these tests start runs as a child process and is stopped by its pid, also when a test fails.
"""

from __future__ import annotations

import os
import re
import signal
import socket
from pathlib import Path

import pytest

from broker.daemon import free_port, is_alive, port_open
from broker.protocol.api import ApiKey
from broker.protocol.messages.admin import BROKER_RESOURCE, TOPIC_RESOURCE
from broker.zk.server import is_serving
from tests.integration.cluster import new_chroot
from tests.integration.helpers import (
    CliProcess,
    cli,
    connect,
    error_line,
    fetch,
    json_lines,
    leaders,
    metadata,
    ok,
    produce,
    records_of,
    terminate,
    tsv,
    wait_until,
    zk_json,
    zk_session,
)


def start_args(broker_id: int, port: int, log_dir: Path, zk: str, *extra: object) -> list[object]:
    return ["broker", "start", "--broker-id", broker_id, "--port", port, "--log-dirs", log_dir, "-z", zk,
            "--no-embedded-zookeeper", *extra]  # fmt: skip


def read_checkpoint(path: Path) -> tuple[int, dict[tuple[str, int], int]]:
    """(version, {(topic, partition): offset}) of a checkpoint file, checking its entry count."""
    lines = path.read_text().splitlines()
    version, count = int(lines[0]), int(lines[1])
    entries = {}
    for line in lines[2:]:
        topic, p, offset = line.split()
        entries[(topic, int(p))] = int(offset)
    assert len(entries) == count, path.read_text()
    return version, entries


# --- foreground start and the clean stop ------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_foreground_start_prints_one_serving_line_and_a_signal_shuts_down_cleanly(zk_chroot, tmp_path, sig):
    port, log_dir, home = free_port(), tmp_path / "logs", tmp_path / "home"
    with CliProcess(start_args(1, port, log_dir, zk_chroot), tmp_path, home=home, name="broker-1") as b, \
            zk_session(zk_chroot) as zk:  # fmt: skip
        b.wait_for_stdout("serving on")
        assert port_open("127.0.0.1", port)
        serving = [ln for ln in b.stdout().splitlines() if "serving on" in ln]
        assert len(serving) == 1, b.output()
        assert serving[0].startswith(f"broker 1 serving on 127.0.0.1:{port} "), serving
        assert f"pid {b.pid}" in serving[0]
        assert (home / "run" / "broker-1.pid").read_text().strip() == str(b.pid)
        assert zk.exists("/brokers/ids/1") is not None
        assert zk_json(zk, "/controller")["brokerid"] == 1

        # some data, so the checkpoints have something to say: 4 + 2 records in topic fg, partition 0
        bootstrap = f"127.0.0.1:{port}"
        md = metadata(bootstrap, ["fg"], auto_create=True)
        assert [t["error_code"] for t in md["topics"]] == [0]
        with connect(bootstrap) as conn:
            assert produce(conn, "fg", 0, [b"a", b"b", b"c", b"d"])["error_code"] == 0
            assert produce(conn, "fg", 0, [b"e", b"f"])["base_offset"] == 4

        assert b.terminate(sig=sig) == 0, b.output()
        # right after the exit, not after a session timeout: the broker deregistered itself
        assert zk.exists("/brokers/ids/1") is None
        assert zk.exists("/controller") is None
        assert zk.get_children("/brokers/ids") == []

    assert "Traceback" not in b.output()
    assert len([ln for ln in b.stdout().splitlines() if "serving on" in ln]) == 1
    assert not (home / "run" / "broker-1.pid").exists()
    assert (log_dir / ".kafka_cleanshutdown").exists()
    assert "broker.id=1" in (log_dir / "meta.properties").read_text().splitlines()
    assert read_checkpoint(log_dir / "recovery-point-offset-checkpoint") == (0, {("fg", 0): 6})
    assert read_checkpoint(log_dir / "log-start-offset-checkpoint") == (0, {("fg", 0): 0})
    assert sorted(p.name for p in (log_dir / "fg-0").iterdir() if p.suffix == ".log") == [f"{0:020d}.log"]
    # the high watermark (= log end offset while the leader is the whole ISR), as Kafka checkpoints it
    assert read_checkpoint(log_dir / "replication-offset-checkpoint") == (0, {("fg", 0): 6})


# --- daemon ----------------------------------------------------------------------------------------


def test_daemon_start_then_stop_by_broker_id(zk_chroot, tmp_path):
    port, log_dir, home = free_port(), tmp_path / "logs", tmp_path / "home"
    pid_file = home / "run" / "broker-7.pid"
    pid = None
    try:
        with zk_session(zk_chroot) as zk:
            out = ok(cli(*start_args(7, port, log_dir, zk_chroot, "--daemon"), home=home))
            # "wait until the broker is registered and listening" (broker/server/launcher.py)
            registered = zk.exists("/brokers/ids/7") is not None
            assert wait_until(lambda: zk.exists("/brokers/ids/7"), 10, "broker 7 registered")
            assert zk_json(zk, "/brokers/ids/7")["port"] == port
        m = re.fullmatch(rf"broker 7 started on 127\.0\.0\.1:{port} \(pid (\d+), log (\S+)\)\n", out)
        assert m, out
        pid = int(m[1])
        assert Path(m[2]) == home / "logs" / "broker-7.log"
        assert pid_file.read_text().strip() == str(pid)
        assert is_alive(pid)
        assert port_open("127.0.0.1", port)
        assert wait_until(lambda: "serving on" in (home / "logs" / "broker-7.log").read_text(), 10, "serving line")
        assert [b["node_id"] for b in metadata(f"127.0.0.1:{port}")["brokers"]] == [7]

        out = ok(cli("broker", "stop", "--broker-id", 7, home=home))
        assert out == f"broker 7 stopped (pid {pid})\n"
        assert not pid_file.exists()
        assert not is_alive(pid)
        assert not port_open("127.0.0.1", port)
        with zk_session(zk_chroot) as zk:
            assert zk.exists("/brokers/ids/7") is None
        assert (log_dir / ".kafka_cleanshutdown").exists()
        assert "Traceback" not in (home / "logs" / "broker-7.log").read_text()

        error_line(cli("broker", "stop", "--broker-id", 7, home=home), "no broker 7 is running here")
        assert registered, "`broker start --daemon` returned before the broker registered in ZooKeeper"
    finally:
        if pid is None and pid_file.exists():  # `--daemon` failed or hung after spawning it
            pid = int(pid_file.read_text().strip() or 0) or None
        terminate(pid)


def test_stop_without_broker_id_stops_the_only_broker_running_here(zk_chroot, tmp_path):
    port, home = free_port(), tmp_path / "home"
    with CliProcess(start_args(4, port, tmp_path / "logs", zk_chroot), tmp_path, home=home, name="broker-4") as b:
        b.wait_for_stdout("serving on")
        assert ok(cli("broker", "stop", home=home)) == f"broker 4 stopped (pid {b.pid})\n"
        assert b.proc is not None and b.proc.wait(10) == 0, b.output()
    assert not (home / "run" / "broker-4.pid").exists()
    assert (tmp_path / "logs" / ".kafka_cleanshutdown").exists()
    with zk_session(zk_chroot) as zk:
        assert zk.exists("/brokers/ids/4") is None
    error_line(cli("broker", "stop", home=home), "no broker is running here")


def test_stop_without_broker_id_refuses_to_choose_between_two(zk_chroot, tmp_path):
    home = tmp_path / "home"
    with CliProcess(start_args(1, free_port(), tmp_path / "logs-1", zk_chroot), tmp_path, home=home,
                    name="broker-1") as b1, \
            CliProcess(start_args(2, free_port(), tmp_path / "logs-2", zk_chroot), tmp_path, home=home,
                       name="broker-2") as b2:  # fmt: skip
        b1.wait_for_stdout("serving on")
        b2.wait_for_stdout("serving on")
        result = cli("broker", "stop", home=home)
        assert result.returncode == 2, result
        error_line(result, "several brokers run here (1, 2)", "--broker-id")
        assert b1.alive and b2.alive  # neither was touched
        assert b1.terminate() == 0 and b2.terminate() == 0


def test_second_start_of_a_running_broker_id_in_the_same_home_refuses(broker, tmp_path):
    other_port = free_port()
    for extra in ((), ("--daemon",)):
        r = cli(*start_args(1, other_port, tmp_path / "other-logs", broker.zk_connect, *extra), home=broker.home,
                timeout=30)  # fmt: skip
        error_line(r, "broker 1 is already running here", f"pid {broker.proc.pid}")
        assert not port_open("127.0.0.1", other_port)
    assert (broker.home / "run" / "broker-1.pid").read_text().strip() == str(broker.proc.pid)
    assert broker.alive


# --- broker list -----------------------------------------------------------------------------------


def test_broker_list_shows_three_brokers_and_the_controller(cluster3, zk_chroot):
    with zk_session(zk_chroot) as zk:
        controller = zk_json(zk, "/controller")["brokerid"]
    assert controller in (1, 2, 3)
    ports = {b.broker_id: b.port for b in cluster3}

    rows = json_lines(ok(cli("broker", "list", "-z", zk_chroot, "-o", "json")))
    assert rows == [
        {"id": i, "host": "127.0.0.1", "port": ports[i], "rack": None, "controller": i == controller} for i in (1, 2, 3)
    ]

    table = tsv(ok(cli("broker", "list", "-z", zk_chroot)))
    assert table[0] == ["ID", "HOST", "PORT", "RACK", "CONTROLLER"]
    assert table[1:] == [[str(i), "127.0.0.1", str(ports[i]), "", "yes" if i == controller else ""] for i in (1, 2, 3)]


# --- configuration errors and the properties file ---------------------------------------------------


@pytest.mark.parametrize("where", ["override", "file"])
def test_unknown_config_key_is_one_error_line(where, tmp_path):
    zk = f"127.0.0.1:{free_port()}"
    log_dir = tmp_path / "logs"
    extra: list[object] = ["--override", "zookeeper.connection.timeout.ms=2000"]
    if where == "override":
        extra += ["--override", "foo.bar=1"]
    else:
        props = tmp_path / "server.properties"
        props.write_text("# a broker\nnum.partitions=2\nfoo.bar=1\nlog.retention.hours=24\n")
        extra += ["--config", props]
    r = cli(*start_args(1, free_port(), log_dir, zk, *extra), home=tmp_path / "home", timeout=30)
    error_line(r, "foo.bar")
    assert r.stdout == ""
    assert not log_dir.exists()  # refused before anything was touched


def test_override_without_equals_sign_is_a_usage_error(tmp_path):
    zk = f"127.0.0.1:{free_port()}"
    r = cli(*start_args(1, free_port(), tmp_path / "logs", zk, "--override", "nonsense"), home=tmp_path / "home",
            timeout=30)  # fmt: skip
    error_line(r, "nonsense", "key=value")
    assert r.returncode == 2


def describe_configs(bootstrap: str, rtype: int, name: str) -> dict[str, str]:
    body = {"resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False}  # fmt: skip
    with connect(bootstrap) as conn:
        (res,) = conn.request(ApiKey.DESCRIBE_CONFIGS, body)["results"]
    assert res["error_code"] == 0, res
    return {c["name"]: c["value"] for c in res["configs"]}


def test_server_properties_file_is_honoured(zk_chroot, tmp_path):
    port, log_dir, home = free_port(), tmp_path / "data" / "logs", tmp_path / "home"
    props = tmp_path / "server.properties"
    props.write_text(
        "# server.properties for a test broker\n"
        "! a comment in the other style\n"
        "\n"
        "broker.id: 5\n"
        f"listeners = PLAINTEXT://127.0.0.1:{port}\n"
        f"log.dirs={log_dir}\n"
        f"zookeeper.connect={zk_chroot}\n"
        "   num.partitions=3\n"
        "zookeeper.session.timeout.ms   10000\n"
        "log.retention.hours=\\\n"
        "    48\n"
        "num.io.threads=8\n"
    )
    with CliProcess(["broker", "start", "--config", props, "--no-embedded-zookeeper"], tmp_path, home=home,
                    name="broker-5") as b:  # fmt: skip
        b.wait_for_stdout("serving on")
        assert f"broker 5 serving on 127.0.0.1:{port} " in b.stdout()
        bootstrap = f"127.0.0.1:{port}"

        md = metadata(bootstrap, ["auto"], auto_create=True)
        (t,) = md["topics"]
        assert t["error_code"] == 0, t
        assert sorted((p["partition_index"], p["leader_id"]) for p in t["partitions"]) == [(0, 5), (1, 5), (2, 5)]
        with zk_session(zk_chroot) as zk:
            assert zk_json(zk, "/brokers/topics/auto")["partitions"] == {"0": [5], "1": [5], "2": [5]}
            assert zk_json(zk, "/brokers/ids/5")["port"] == port
        assert partition_dir_names(log_dir) == ["auto-0", "auto-1", "auto-2"]
        assert "broker.id=5" in (log_dir / "meta.properties").read_text().splitlines()

        broker_cfg = describe_configs(bootstrap, BROKER_RESOURCE, "5")
        assert broker_cfg["num.partitions"] == "3"
        assert broker_cfg["zookeeper.session.timeout.ms"] == "10000"
        assert broker_cfg["log.retention.hours"] == "48"
        assert describe_configs(bootstrap, TOPIC_RESOURCE, "auto")["retention.ms"] == str(48 * 3_600_000)
        assert b.terminate() == 0
    assert "Traceback" not in b.output()


def partition_dir_names(log_dir: Path) -> list[str]:
    return sorted(e.name for e in os.scandir(log_dir) if e.is_dir())


# --- refusals at start-up --------------------------------------------------------------------------


def test_a_killed_broker_restarted_at_once_waits_for_its_old_registration_to_expire(start_broker, zk_chroot):
    """kill -9 leaves /brokers/ids/1 to the dead session until ZooKeeper expires it: the restart (same id,
    same port) says so once, waits for it instead of refusing, then serves what was written before."""
    b = start_broker(1, overrides={"zookeeper.session.timeout.ms": "6000"})
    with connect(b.bootstrap) as conn:
        metadata(b.bootstrap, ["again"], auto_create=True)
        assert produce(conn, "again", 0, [b"before the kill"])["error_code"] == 0
    b.kill()
    b.start()
    log = wait_until(lambda: (t := b.log_text()).count("serving on") == 2 and t, 30, "the restarted broker serving")
    assert log.count("still registered by an earlier run of this broker") == 1, log
    assert "pick another" not in log and "Traceback" not in log
    with connect(b.bootstrap) as conn:
        assert [r.value for r in records_of(fetch(conn, "again", 0)["records"])] == [b"before the kill"]


def test_broker_id_already_registered_refuses_and_the_first_keeps_serving(start_broker, zk_chroot, tmp_path):
    first = start_broker(1)
    with zk_session(zk_chroot) as zk:
        data, stat = zk.get("/brokers/ids/1")
    with connect(first.bootstrap) as conn:
        metadata(first.bootstrap, ["keep"], auto_create=True)
        assert produce(conn, "keep", 0, [b"before"])["error_code"] == 0

    other = tmp_path / "elsewhere"  # another machine, as far as pid files go
    port2 = free_port()
    r = cli(*start_args(1, port2, other / "logs", zk_chroot), home=other / "home", timeout=60)
    error_line(r, "broker id 1 is held by a live broker", f"127.0.0.1:{first.port}", "pick another --broker-id")
    assert not port_open("127.0.0.1", port2)

    assert first.alive
    with zk_session(zk_chroot) as zk:
        data2, stat2 = zk.get("/brokers/ids/1")
        assert (data2, stat2.ephemeralOwner, stat2.version) == (data, stat.ephemeralOwner, stat.version)
        assert zk_json(zk, "/controller")["brokerid"] == 1
    md = metadata(first.bootstrap)
    assert [(b["node_id"], b["port"]) for b in md["brokers"]] == [(1, first.port)]
    with connect(first.bootstrap) as conn:
        assert produce(conn, "keep", 0, [b"after"])["base_offset"] == 1
        got = fetch(conn, "keep", 0)
        assert got["error_code"] == 0
        assert [r.value for r in records_of(got["records"])] == [b"before", b"after"]
    assert first.stop() == 0
    assert "Traceback" not in first.log_text()


def test_a_log_dir_of_another_cluster_is_one_clear_error_and_nothing_is_touched(start_broker, zk_server, tmp_path):
    """The broker's log dir, started again against another ZooKeeper (a wiped one, as far as the dir can
    tell): refused as Kafka refuses it, with one line, and the log dir is left as it was."""
    first = start_broker(1)
    with connect(first.bootstrap) as conn:
        metadata(first.bootstrap, ["kept"], auto_create=True)
        assert produce(conn, "kept", 0, [b"v"])["error_code"] == 0
    assert first.stop() == 0
    before = {p: p.read_bytes() for p in first.log_dir.rglob("*") if p.is_file() and p.name != ".lock"}
    other = new_chroot(zk_server.connect_string)
    port = free_port()
    r = cli(*start_args(1, port, first.log_dir, other), home=tmp_path / "home2", timeout=60)
    error_line(r, f"log dir {first.log_dir} belongs to cluster", "meta.properties")
    assert not port_open("127.0.0.1", port)
    after = {p: p.read_bytes() for p in first.log_dir.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before
    first.start()  # its own cluster still takes it
    with connect(first.bootstrap) as conn:
        assert [r.value for r in records_of(fetch(conn, "kept", 0)["records"])] == [b"v"]


def test_port_in_use_is_one_clear_error(zk_chroot, tmp_path):
    home = tmp_path / "home"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = cli(*start_args(1, port, tmp_path / "logs", zk_chroot), home=home, timeout=30)
    assert r.returncode != 0
    with zk_session(zk_chroot) as zk:  # refused before it registered anything
        assert zk.exists("/brokers/ids/1") is None
    assert not (home / "run" / "broker-1.pid").exists()
    line = error_line(r, f"127.0.0.1:{port}", "in use")
    assert "--debug" not in line, f"a user error reported as a crash: {line}"


def test_unreachable_zookeeper_is_a_quick_clear_error(tmp_path):
    zk_port = free_port()
    home, port = tmp_path / "home", free_port()
    # the default connection timeout is 18 s: finishing within 15 s proves the override is honoured
    r = cli(*start_args(1, port, tmp_path / "logs", f"127.0.0.1:{zk_port}",
                        "--override", "zookeeper.connection.timeout.ms=2000"), home=home, timeout=15)  # fmt: skip
    assert r.returncode != 0
    assert f"kafkactl: error: cannot reach ZooKeeper at 127.0.0.1:{zk_port} within 2s" in r.stderr, r.stderr
    assert not port_open("127.0.0.1", zk_port)  # no private ZooKeeper was started
    assert not (home / "zookeeper").exists()
    assert not (home / "run" / "broker-1.pid").exists()
    error_line(r, "ZooKeeper", f"127.0.0.1:{zk_port}")  # and nothing else on stderr


# --- the private ZooKeeper -------------------------------------------------------------------------


def _is_zookeeper_daemon(pid: int) -> bool:
    """Whether `pid` is a `kafkactl zookeeper start` process (the daemon a broker starts as its private one)."""
    try:
        return b"zookeeper\0start\0" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _stop_leftovers(home: Path, *names: str) -> None:
    """Stop whatever a failed test left running under `home` (pid files `run/<name>.pid`)."""
    for name in names:
        pid_file = home / "run" / f"{name}.pid"
        if pid_file.exists():
            pid = int(pid_file.read_text().strip() or 0) or None
            if pid is not None and is_alive(pid):
                terminate(pid)


def test_private_zookeeper_starts_when_none_answers_and_stops_with_the_broker(tmp_path):
    home, log_dir = tmp_path / "home", tmp_path / "logs"
    zk_port, port = free_port(), free_port()
    args = ["broker", "start", "--port", port, "--log-dirs", log_dir, "-z", f"127.0.0.1:{zk_port}"]
    try:
        with CliProcess(args, tmp_path, home=home, name="embedded") as b:
            b.wait_for_stdout("serving on", timeout=60)
            out = b.stdout()
            m = re.search(rf"^no ZooKeeper answered at 127\.0\.0\.1:{zk_port}: started a private one "
                          r"\(pid (\d+), data (\S+)\)$", out, re.M)  # fmt: skip
            assert m, b.output()
            zk_pid = int(m[1])
            assert _is_zookeeper_daemon(zk_pid)
            assert Path(m[2]) == (home / "zookeeper").resolve()
            assert (home / "zookeeper" / "zoo.cfg").is_file()
            assert out.index("started a private one") < out.index("serving on")
            assert f"broker 0 serving on 127.0.0.1:{port} " in out
            assert is_serving("127.0.0.1", zk_port)
            # it is the daemon `zookeeper status` and `zookeeper stop` know
            status = json_lines(ok(cli("zookeeper", "status", "-p", zk_port, "-o", "json", home=home)))[0]
            assert (status["serving"], status["pid"], status["private"]) == (True, zk_pid, True)

            with zk_session(f"127.0.0.1:{zk_port}") as zk:
                assert zk_json(zk, "/brokers/ids/0")["port"] == port
            assert [b_["node_id"] for b_ in metadata(f"127.0.0.1:{port}")["brokers"]] == [0]

            assert b.terminate() == 0, b.output()
            assert re.search(rf"^stopped the private ZooKeeper on 127\.0\.0\.1:{zk_port} \(pid {zk_pid}\): "
                             "no other broker uses it$", b.stdout(), re.M), b.output()  # fmt: skip
            assert not port_open("127.0.0.1", zk_port)
            assert not is_alive(zk_pid)
            assert not port_open("127.0.0.1", port)
        assert "Traceback" not in b.output()
        assert (log_dir / ".kafka_cleanshutdown").exists()
        assert not (home / "run" / f"zookeeper-{zk_port}.private").exists()
    finally:
        _stop_leftovers(home, f"zookeeper-{zk_port}")


def test_the_private_zookeeper_outlives_its_broker_while_another_uses_it(tmp_path):
    """Issue 15: stopping the broker that started the private ZooKeeper must not pull it from under the
    others; the last broker to stop stops it. A ZooKeeper the user started is never stopped by a broker."""
    home = tmp_path / "home"
    zk_port, p1, p2 = free_port(), free_port(), free_port()
    zk = f"127.0.0.1:{zk_port}"
    bootstrap2 = f"127.0.0.1:{p2}"
    try:
        out = ok(cli("broker", "start", "--daemon", "--broker-id", 1, "--port", p1, "--log-dirs", tmp_path / "b1",
                     "-z", zk, home=home, timeout=120))  # fmt: skip
        started, private = out.splitlines()
        assert started.startswith(f"broker 1 started on 127.0.0.1:{p1} ")
        m = re.fullmatch(rf"no ZooKeeper answered at 127\.0\.0\.1:{zk_port}: started a private one \(pid (\d+), "
                         r"data \S+\); it stops with the last broker that uses it", private)  # fmt: skip
        assert m, out
        zk_pid = int(m[1])
        assert _is_zookeeper_daemon(zk_pid)
        out = ok(cli("broker", "start", "--daemon", "--broker-id", 2, "--port", p2, "--log-dirs", tmp_path / "b2",
                     "-z", zk, home=home, timeout=120))  # fmt: skip
        assert len(out.splitlines()) == 1 and "ZooKeeper" not in out, out  # it found the server
        ok(cli("topic", "create", "t", "-p", 2, "-r", 2, "-b", bootstrap2, home=home))
        ok(cli("produce", "t", "-b", bootstrap2, "-p", 0, "-K", ":", home=home, input_text="before:a\n"))

        out = ok(cli("broker", "stop", "--broker-id", 1, home=home))
        broker2 = int((home / "run" / "broker-2.pid").read_text())
        assert re.fullmatch(rf"broker 1 stopped \(pid \d+\)\nleft the private ZooKeeper on 127\.0\.0\.1:{zk_port} "
                            rf"\(pid {zk_pid}\) running: broker process\(es\) {broker2} use it; the last broker to "
                            r"stop stops it\n", out), out  # fmt: skip
        assert is_serving("127.0.0.1", zk_port) and is_alive(zk_pid)
        # broker 2 still serves, and becomes leader of what broker 1 led
        wait_until(
            lambda: set(leaders(metadata(bootstrap2, ["t"]), "t").values()) == {2}, 30, "broker 2 leads both partitions"
        )
        ok(cli("produce", "t", "-b", bootstrap2, "-p", 1, "-K", ":", home=home, input_text="after:b\n"))
        got = json_lines(ok(cli("consume", "t", "-b", bootstrap2, "-e", "-o", "json", home=home)))
        assert sorted((r["partition"], r["key"], r["value"]) for r in got) == [(0, "before", "a"), (1, "after", "b")]

        out = ok(cli("broker", "stop", "--broker-id", 2, home=home))
        assert out.splitlines()[1] == (f"stopped the private ZooKeeper on 127.0.0.1:{zk_port} (pid {zk_pid}): "
                                       "no other broker uses it"), out  # fmt: skip
        assert wait_until(lambda: not is_alive(zk_pid), 30, "the private ZooKeeper stopped with the last broker")
        assert not port_open("127.0.0.1", zk_port)

        # the user's own ZooKeeper: found, used, and left running
        ok(cli("zookeeper", "start", "--daemon", "-p", zk_port, home=home, timeout=120))
        user_zk = json_lines(ok(cli("zookeeper", "status", "-p", zk_port, "-o", "json", home=home)))[0]
        assert user_zk["private"] is False
        out = ok(cli("broker", "start", "--daemon", "--broker-id", 1, "--port", p1, "--log-dirs", tmp_path / "b1",
                     "-z", zk, home=home, timeout=120))  # fmt: skip
        assert len(out.splitlines()) == 1 and "ZooKeeper" not in out, out
        out = ok(cli("broker", "stop", "--broker-id", 1, home=home))
        assert "ZooKeeper" not in out, out
        assert is_serving("127.0.0.1", zk_port) and is_alive(user_zk["pid"])
        ok(cli("zookeeper", "stop", "-p", zk_port, home=home))
    finally:
        _stop_leftovers(home, "broker-1", "broker-2", f"zookeeper-{zk_port}")


# --- ZooKeeper session loss ------------------------------------------------------------------------


@pytest.mark.slow
def test_expired_session_re_registers_and_the_broker_keeps_serving(start_broker, zk_chroot):
    b = start_broker(1, overrides={"zookeeper.session.timeout.ms": "4000"})
    metadata(b.bootstrap, ["live"], auto_create=True)
    with connect(b.bootstrap) as conn:
        assert produce(conn, "live", 0, [b"m0", b"m1", b"m2"])["error_code"] == 0

    pid = b.proc.pid
    with zk_session(zk_chroot) as zk:
        _, stat = zk.get("/brokers/ids/1")
        old_session = stat.ephemeralOwner
        assert old_session != 0
        os.kill(pid, signal.SIGSTOP)  # silent longer than its session timeout: ZooKeeper expires the session
        try:
            wait_until(lambda: zk.exists("/brokers/ids/1") is None, 30, "registration gone while the broker is stopped")
            assert zk.exists("/controller") is None
        finally:
            os.kill(pid, signal.SIGCONT)
        new = wait_until(lambda: zk.exists("/brokers/ids/1"), 30, "broker 1 registered again")
        assert new.ephemeralOwner not in (0, old_session)
        reg = zk_json(zk, "/brokers/ids/1")
        assert (reg["host"], reg["port"], reg["endpoints"]) == (
            "127.0.0.1",
            b.port,
            [f"PLAINTEXT://127.0.0.1:{b.port}"],
        )
        wait_until(lambda: zk.exists("/controller"), 15, "a controller again")
        assert zk_json(zk, "/controller")["brokerid"] == 1

    assert b.alive
    wait_until(lambda: [x["node_id"] for x in metadata(b.bootstrap)["brokers"]] == [1], 15, "broker 1 in Metadata")
    with connect(b.bootstrap) as conn:
        answer = produce(conn, "live", 0, [b"m3", b"m4"])
        assert (answer["error_code"], answer["base_offset"]) == (0, 3)
        got = fetch(conn, "live", 0)
        assert got["error_code"] == 0
        assert got["high_watermark"] == 5
        assert [r.value for r in records_of(got["records"])] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    # ZooKeeper writes work with the new session too
    ok(cli("topic", "create", "after", "-p", "2", "-b", b.bootstrap))
    with connect(b.bootstrap) as conn:
        assert produce(conn, "after", 1, [b"x"])["error_code"] == 0
    assert "registered broker 1 in ZooKeeper again" in b.log_text()
    assert b.stop() == 0
    assert "Traceback" not in b.log_text()
