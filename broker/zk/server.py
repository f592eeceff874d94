"""A real Apache ZooKeeper server run as a child process (Debian's jars, or those in pyspark's wheel).

Everything the server writes stays in its data dir: `zoo.cfg`, `data/` (snapshots and transaction
logs), `zookeeper.log` (its log4j log), `zookeeper.out` (the JVM's own stdout/stderr) and
`zookeeper_server.pid` (the JVM's pid while it runs). It listens on `host:port` only, with no admin
web server, and answers the four-letter words `ruok,srvr,stat,mntr`. It is ready once `srvr` reports a
`Mode:` (`ruok` can say `imok` for a server that is not serving).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from broker import home
from broker.daemon import kafkactl_command, port_open, read_pid_of, remove_pid_file, start_daemon, write_pid_file
from broker.errors import KafkactlError

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
DEBIAN_JARS = Path("/usr/share/java")
# zookeeper.jar's manifest Class-Path brings its own dependencies (slf4j-api, jute, netty, metrics, ...);
# the log4j binding is not among them.
_DEBIAN_CLASSPATH = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-log4j12.jar", "log4j-1.2.jar")
# ZooKeeper 3.9 in pyspark's wheel logs through slf4j 2 to log4j 2 (log4j-api, -core, -slf4j2-impl).
_PYSPARK_GLOBS = ("zookeeper-[0-9]*.jar", "zookeeper-jute-*.jar", "slf4j-api-*.jar", "log4j-*.jar",
                  "metrics-core-*.jar", "snappy-java-*.jar")  # fmt: skip
JVM_FLAGS = ("-Xms16m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:-UsePerfData",
             "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true")  # fmt: skip
LOG_FILE = "zookeeper.log"
OUT_FILE = "zookeeper.out"
PID_FILE = "zookeeper_server.pid"
_EXCEPTION = re.compile(r"^(Caused by: |Exception in thread \S+ )?[\w.$]+(Exception|Error)\b")


def classpath() -> str:
    """The Java classpath of a ZooKeeper server: Debian's `zookeeper` package, else pyspark's jars."""
    if (DEBIAN_JARS / "zookeeper.jar").is_file():
        parts = ["/etc/zookeeper/conf"] if Path("/etc/zookeeper/conf").is_dir() else []
        parts += [str(DEBIAN_JARS / j) for j in _DEBIAN_CLASSPATH if (DEBIAN_JARS / j).is_file()]
        return ":".join(parts)
    jars = _pyspark_jars()
    if jars is not None:
        found = sorted({str(p) for pattern in _PYSPARK_GLOBS for p in jars.glob(pattern)})
        if any(Path(p).name.startswith("zookeeper-jute-") for p in found):
            return ":".join(found)
    raise KafkactlError("no ZooKeeper server jars found: install them with `apt-get install zookeeper`")


def _pyspark_jars() -> Path | None:
    try:
        spec = importlib.util.find_spec("pyspark")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
    return jars if jars.is_dir() else None


def java_executable() -> str:
    """`$JAVA_HOME/bin/java`, else `java` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise KafkactlError("java not found: install a Java runtime (`apt-get install default-jre-headless`)")
    return java


#: ZooKeeper's tick, ms. It expires sessions at tick boundaries (an expiry is rounded up to the next one), so a
#: killed broker's partitions wait up to a tick beyond its session timeout: 2 s ticks made that up to 2 s more
TICK_MS = 500


def write_config(data_dir: Path, port: int, host: str = "127.0.0.1", *, tick_time: int = TICK_MS) -> Path:
    """Write `<data_dir>/zoo.cfg` (and the log4j configs next to it); returns the zoo.cfg path.

    Sessions may be as short as 1 s and as long as 60 s.
    """
    data_dir = Path(data_dir).resolve()
    (data_dir / "data").mkdir(parents=True, exist_ok=True)
    log = data_dir / LOG_FILE
    cfg = data_dir / "zoo.cfg"
    cfg.write_text(
        "# written by kafkactl; rewritten at every start\n"
        f"dataDir={data_dir / 'data'}\n"
        f"clientPort={port}\n"
        f"clientPortAddress={host}\n"
        f"tickTime={tick_time}\n"
        "initLimit=10\n"
        "syncLimit=5\n"
        f"minSessionTimeout={min(1000, 2 * tick_time)}\n"
        f"maxSessionTimeout={max(60000, 2 * tick_time)}\n"
        "maxClientCnxns=0\n"
        "admin.enableServer=false\n"
        "4lw.commands.whitelist=ruok,srvr,stat,mntr\n"
        "autopurge.snapRetainCount=3\n"
        "autopurge.purgeInterval=1\n"
    )
    # log4j 1.2 (Debian's ZooKeeper 3.8)
    (data_dir / "log4j.properties").write_text(
        "log4j.rootLogger=INFO, FILE\n"
        "log4j.appender.FILE=org.apache.log4j.RollingFileAppender\n"
        f"log4j.appender.FILE.File={log}\n"
        "log4j.appender.FILE.MaxFileSize=10MB\n"
        "log4j.appender.FILE.MaxBackupIndex=3\n"
        "log4j.appender.FILE.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n\n"
    )
    # log4j 2 (the ZooKeeper 3.9 jars in pyspark's wheel)
    (data_dir / "log4j2.properties").write_text(
        "status = error\n"
        "appender.file.type = RollingFile\n"
        "appender.file.name = FILE\n"
        f"appender.file.fileName = {log}\n"
        f"appender.file.filePattern = {log}.%i\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = %d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n\n"
        "appender.file.policies.type = Policies\n"
        "appender.file.policies.size.type = SizeBasedTriggeringPolicy\n"
        "appender.file.policies.size.size = 10MB\n"
        "appender.file.strategy.type = DefaultRolloverStrategy\n"
        "appender.file.strategy.max = 3\n"
        "rootLogger.level = info\n"
        "rootLogger.appenderRef.file.ref = FILE\n"
    )
    return cfg


def four_letter(host: str, port: int, cmd: str, timeout: float = 1.0) -> str | None:
    """Send a four-letter word (`srvr`, `ruok`, `mntr`, ...); the answer, or None if none came."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(cmd.encode("ascii"))
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
    except OSError:
        return None
    return b"".join(chunks).decode("utf-8", "replace") or None


def is_serving(host: str, port: int) -> bool:
    """Whether a ZooKeeper server on host:port serves requests (`srvr` reports its `Mode:`)."""
    answer = four_letter(host, port, "srvr")
    return answer is not None and any(line.startswith("Mode:") for line in answer.splitlines())


def server_info(host: str, port: int, timeout: float = 1.0) -> dict | None:
    """What `srvr` says of a serving server: version, mode, znodes, connections, ...; None if not serving."""
    answer = four_letter(host, port, "srvr", timeout)
    if answer is None:
        return None
    fields = {}
    for line in answer.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip().lower()] = value.strip()
    if "mode" not in fields:
        return None
    version = fields.get("zookeeper version", "").split(",")[0]
    return {
        "version": version.split("-")[0] or None,
        "mode": fields["mode"],
        "znodes": _int(fields.get("node count")),
        "connections": _int(fields.get("connections")),
        "outstanding": _int(fields.get("outstanding")),
        "zxid": fields.get("zxid"),
        "latency_ms": fields.get("latency min/avg/max"),
    }


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to SIGTERM the JVM when the process that started it dies, so no orphan outlives us."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class ZooKeeperServer:
    """One standalone ZooKeeper server, a child JVM of this process, with its files in `data_dir`."""

    def __init__(self, data_dir: Path, port: int = 2181, host: str = "127.0.0.1", *, tick_time: int = TICK_MS):
        self.data_dir = Path(data_dir).resolve()
        self.port = port
        self.host = host
        self.tick_time = tick_time
        self._proc: subprocess.Popen | None = None

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The JVM's pid while it runs."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_FILE

    def start(self, timeout: float = 30.0) -> int:
        """Start the JVM and wait until it serves; returns its pid.

        Refuses when the port is taken or another server uses the data dir; raises KafkactlError
        with the reason from ZooKeeper's log when the server dies or is not serving within `timeout`.
        """
        if self.pid is not None:
            return self.pid
        java, cp = java_executable(), classpath()
        pid_path = self.data_dir / PID_FILE
        other = _running_server(pid_path)
        if other is not None:
            raise KafkactlError(f"zookeeper data dir {self.data_dir} is in use by another server (pid {other})")
        if port_open(self.host, self.port):
            raise KafkactlError(f"cannot start zookeeper: {self.connect_string} is already in use")
        cfg = write_config(self.data_dir, self.port, self.host, tick_time=self.tick_time)
        offsets = {name: _size(self.data_dir / name) for name in (LOG_FILE, OUT_FILE)}
        argv = [
            java, *JVM_FLAGS,
            f"-Dzookeeper.log.dir={self.data_dir}",
            "-Dzookeeper.root.logger=INFO,FILE",
            f"-Dlog4j.configuration=file:{self.data_dir / 'log4j.properties'}",
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            "-cp", cp, MAIN_CLASS, str(cfg),
        ]  # fmt: skip
        # Only the main thread: Linux sends the death signal when the *thread* that forked exits.
        preexec = _die_with_parent if threading.current_thread() is threading.main_thread() else None
        with open(self.data_dir / OUT_FILE, "ab") as out:
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=self.data_dir,
                preexec_fn=preexec,
            )  # fmt: skip
        write_pid_file(pid_path, self._proc.pid)
        deadline = time.monotonic() + timeout
        while not is_serving(self.host, self.port):
            code = self._proc.poll()
            if code is not None:
                self._proc = None
                remove_pid_file(pid_path)
                raise KafkactlError(f"zookeeper exited during start-up: {self._failure(offsets, code)}")
            if time.monotonic() >= deadline:
                self.stop()
                raise KafkactlError(
                    f"zookeeper not serving on {self.connect_string} after {timeout:g}s, stopped it: "
                    + self._failure(offsets, None)
                )
            time.sleep(0.05)
        return self._proc.pid

    def _failure(self, offsets: dict[str, int], code: int | None) -> str:
        """The ERROR line and the exception under it that the JVM logged, else its last output line."""
        lines = _new_lines(self.data_dir / LOG_FILE, offsets[LOG_FILE])
        errors = [i for i, ln in enumerate(lines) if " ERROR " in ln or " FATAL " in ln]
        for i in reversed(errors):  # the last ERROR with an exception under it, e.g. a BindException
            cause = lines[i + 1].strip() if i + 1 < len(lines) else ""
            if _EXCEPTION.match(cause):
                return f"{lines[i].split(' - ', 1)[-1]}: {cause} (log: {self.log_path})"
        if errors:
            return f"{lines[errors[-1]].split(' - ', 1)[-1]} (log: {self.log_path})"
        out = _new_lines(self.data_dir / OUT_FILE, offsets[OUT_FILE])
        causes = [ln.strip() for ln in out if _EXCEPTION.search(ln) and not ln.lstrip().startswith(("at ", "..."))]
        if causes or out:
            detail = causes[-1] if causes else out[-1]
        else:
            detail = "no error logged" if code is None else f"exit code {code}"
        return f"{detail} (log: {self.data_dir / OUT_FILE})"

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the JVM and wait for it (SIGKILL after `timeout`); a no-op when not running."""
        proc = self._proc
        if proc is None:
            return
        try:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        finally:
            if proc.poll() is not None:  # else (interrupted) a second stop() finishes the job
                self._proc = None
                remove_pid_file(self.data_dir / PID_FILE, proc.pid)

    def wait(self) -> int:
        """Block until the JVM exits (foreground mode); returns its exit code."""
        if self._proc is None:
            raise KafkactlError("zookeeper is not running")
        return self._proc.wait()

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ZooKeeperServer({str(self.data_dir)!r}, port={self.port}, host={self.host!r}, pid={self.pid})"


def daemon_name(port: int) -> str:
    """The name of a ZooKeeper daemon's pid and log files (`run/zookeeper-<port>.pid`)."""
    return f"zookeeper-{port}"


def start_server_daemon(port: int, host: str, data_dir: Path, *, timeout: float = 60.0,
                        root: Path | None = None) -> int:  # fmt: skip
    """Run `kafkactl zookeeper start` detached, its pid file and log under `root` (default: the home,
    which `root` also becomes for the daemon); returns its pid once the server serves."""
    if port_open(host, port):
        raise KafkactlError(f"cannot start zookeeper: {host}:{port} is already in use")
    argv = kafkactl_command("zookeeper", "start", "--port", str(port), "--host", host,
                            "--data-dir", str(data_dir), "--timeout", str(timeout))  # fmt: skip
    env = {**os.environ, "KAFKACTL_HOME": str(root)} if root is not None else None
    return start_daemon(
        argv, home.log_file(daemon_name(port), root), home.pid_file(daemon_name(port), root),
        lambda: is_serving(host, port), timeout=timeout + 5, what="zookeeper", env=env,
    )  # fmt: skip


def _running_server(pid_path: Path) -> int | None:
    """The ZooKeeper JVM `pid_path` names, if it still runs (not a process that reused its pid)."""
    return read_pid_of(pid_path, MAIN_CLASS.encode())


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _new_lines(path: Path, offset: int) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return [ln.rstrip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return []
