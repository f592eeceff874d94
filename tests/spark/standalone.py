"""A real Spark standalone cluster for tests: a master and workers, each its own JVM started with pyspark's own
`bin/spark-class`, on 127.0.0.1, logs and work dirs under one directory, every process stopped by its
process group at the end (a worker's executors are its children)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyspark

from broker.daemon import free_port

SPARK_HOME = Path(pyspark.__file__).parent


class SparkStandalone:
    def __init__(self, root: Path, workers: int = 2, cores: int = 1, memory: str = "768m") -> None:
        self.root, self.cores, self.memory = root, cores, memory
        self.port, self.ui = free_port(), free_port()
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen | None] = [None] * workers
        root.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        return {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
                "PYSPARK_PYTHON": sys.executable, "SPARK_LOG_DIR": str(self.root / "logs"),
                "SPARK_NO_DAEMONIZE": "1"}  # fmt: skip

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - the child keeps it
        return subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=self._env(), start_new_session=True)  # fmt: skip

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self, timeout: float = 90) -> SparkStandalone:
        self.master = self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                  "--port", str(self.port), "--webui-port", str(self.ui))  # fmt: skip
        self._wait(lambda: "I have been elected leader" in self.log("master"), timeout, "the master")
        for i in range(len(self.workers)):
            self.start_worker(i, timeout)
        return self

    def start_worker(self, i: int, timeout: float = 90) -> None:
        before = self.log("master").count("Registering worker")
        self.workers[i] = self._spawn(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                      "--cores", str(self.cores), "--memory", self.memory, "--webui-port", "0",
                                      "--work-dir", str(self.root / f"work-{i}"), self.url)  # fmt: skip
        self._wait(lambda: self.log("master").count("Registering worker") > before, timeout, f"worker {i}")

    def kill_worker(self, i: int) -> None:
        """kill -9 of a worker and the executors it started: a machine lost."""
        proc = self.workers[i]
        if proc is not None:
            _kill_group(proc)
            self.workers[i] = None

    def _wait(self, ready, timeout: float, what: str) -> None:  # noqa: ANN001
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                tail = self.log("master")[-3000:]
                raise RuntimeError(f"{what} of the Spark cluster not up after {timeout}s:\n{tail}")
            time.sleep(0.2)

    def stop(self) -> None:
        for proc in [*self.workers, self.master]:
            if proc is not None:
                _kill_group(proc)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(30)
