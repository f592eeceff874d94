"""Pure logic of broker.zk.server: the config it writes, the classpath it picks, srvr parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

import broker.zk.server as srv
from broker.errors import KafkactlError


def parse(cfg: Path) -> dict[str, str]:
    lines = [ln for ln in cfg.read_text().splitlines() if ln and not ln.startswith("#")]
    return dict(ln.split("=", 1) for ln in lines)


def test_write_config(tmp_path: Path) -> None:
    cfg = srv.write_config(tmp_path / "zk", 12181)
    assert cfg == (tmp_path / "zk" / "zoo.cfg").resolve()
    conf = parse(cfg)
    assert conf["dataDir"] == str((tmp_path / "zk" / "data").resolve())
    assert (tmp_path / "zk" / "data").is_dir()
    assert conf["clientPort"] == "12181" and conf["clientPortAddress"] == "127.0.0.1"
    assert conf["tickTime"] == "500" and conf["initLimit"] and conf["syncLimit"]
    assert conf["maxClientCnxns"] == "0"
    assert conf["admin.enableServer"] == "false"
    assert conf["4lw.commands.whitelist"] == "ruok,srvr,stat,mntr"
    # ZooKeeper's floor is 2 ticks unless minSessionTimeout says otherwise: tests use short sessions
    assert int(conf["minSessionTimeout"]) <= 1000 and int(conf["maxSessionTimeout"]) >= 60000


def test_write_config_host_and_tick(tmp_path: Path) -> None:
    conf = parse(srv.write_config(tmp_path, 2182, "0.0.0.0", tick_time=200))
    assert conf["clientPortAddress"] == "0.0.0.0" and conf["tickTime"] == "200"
    assert int(conf["minSessionTimeout"]) <= 400


def test_logging_goes_to_a_file_in_the_data_dir(tmp_path: Path) -> None:
    srv.write_config(tmp_path, 2181)
    log = str(tmp_path.resolve() / "zookeeper.log")
    log4j = (tmp_path / "log4j.properties").read_text()
    assert "log4j.rootLogger=INFO, FILE" in log4j and f"File={log}\n" in log4j and "Console" not in log4j
    log4j2 = (tmp_path / "log4j2.properties").read_text()
    assert f"fileName = {log}\n" in log4j2 and "Console" not in log4j2


def test_debian_classpath_has_a_log4j_binding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for jar in ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-log4j12.jar", "log4j-1.2.jar"):
        (tmp_path / jar).touch()
    monkeypatch.setattr(srv, "DEBIAN_JARS", tmp_path)
    parts = srv.classpath().split(":")
    assert parts[-5:] == [str(tmp_path / j) for j in srv._DEBIAN_CLASSPATH]


def test_pyspark_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jars = tmp_path / "pyspark" / "jars"
    jars.mkdir(parents=True)
    wanted = ["zookeeper-3.9.5.jar", "zookeeper-jute-3.9.5.jar", "slf4j-api-2.0.17.jar", "log4j-api-2.25.4.jar",
              "log4j-core-2.25.4.jar", "log4j-slf4j2-impl-2.25.4.jar", "metrics-core-4.2.37.jar",
              "snappy-java-1.1.10.8.jar"]  # fmt: skip
    for name in [*wanted, "spark-core_2.13-4.0.0.jar", "netty-all-4.2.13.Final.jar"]:
        (jars / name).touch()
    monkeypatch.setattr(srv, "DEBIAN_JARS", tmp_path / "nowhere")
    monkeypatch.setattr(srv, "_pyspark_jars", lambda: jars)
    assert sorted(srv.classpath().split(":")) == sorted(str(jars / n) for n in wanted)


def test_no_jars_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(srv, "DEBIAN_JARS", tmp_path / "nowhere")
    monkeypatch.setattr(srv, "_pyspark_jars", lambda: None)
    with pytest.raises(KafkactlError, match="apt-get install zookeeper") as exc:
        srv.classpath()
    assert "\n" not in str(exc.value)


def test_no_java_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(KafkactlError, match="java not found"):
        srv.java_executable()


def test_java_home_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    assert srv.java_executable() == str(java)


SRVR = """Zookeeper version: 3.8.0-${mvngit.commit.id}, built on 2024-12-29 17:54 UTC
Latency min/avg/max: 0/0.5/3
Received: 12
Sent: 11
Connections: 2
Outstanding: 0
Zxid: 0x1f
Mode: standalone
Node count: 42
"""


def test_server_info_parses_srvr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(srv, "four_letter", lambda host, port, cmd, timeout=1.0: SRVR)
    assert srv.server_info("h", 1) == {
        "version": "3.8.0", "mode": "standalone", "znodes": 42, "connections": 2, "outstanding": 0,
        "zxid": "0x1f", "latency_ms": "0/0.5/3",
    }  # fmt: skip
    assert srv.is_serving("h", 1)


@pytest.mark.parametrize("answer", [None, "This ZooKeeper instance is not currently serving requests\n"])
def test_not_serving(monkeypatch: pytest.MonkeyPatch, answer: str | None) -> None:
    monkeypatch.setattr(srv, "four_letter", lambda host, port, cmd, timeout=1.0: answer)
    assert srv.server_info("h", 1) is None
    assert not srv.is_serving("h", 1)


def test_four_letter_on_a_closed_port() -> None:
    from broker.daemon import free_port

    assert srv.four_letter("127.0.0.1", free_port(), "srvr", timeout=0.5) is None
