"""A local cluster: a private ZooKeeper and brokers 1..N on this machine, each a daemon (`kafkactl cluster`).

Everything of cluster NAME lives in `$KAFKACTL_HOME/clusters/NAME/`, which is also the daemons' own
KAFKACTL_HOME, so their pid files and logs never mix with those of `broker start` / `zookeeper start`:

    cluster.json     the plan: ZooKeeper's port, each broker's id and port (kept across down and up)
    zookeeper/       ZooKeeper's data dir
    broker-<id>/     broker <id>'s log dir
    run/, logs/      the daemons' pid files and logs (`broker-<id>`, `zookeeper-<port>`)
    .lock            held while `up` or `down` runs, so two of them never interleave

`up` starts whatever is not running (ZooKeeper first, then the brokers side by side) with the daemon
code of `broker start --daemon` and `zookeeper start --daemon`; a cluster already up is left as it is.
Saved ports are reused while free, so a cluster brought back keeps its addresses; a port taken
meanwhile is replaced by a free one. Ports asked for (`--zookeeper-port`, `--base-port`) are saved too, and
never replaced: one taken by another process is an error. If a start fails, what this `up` started is stopped again.
`down` SIGTERMs the brokers in id order (each a clean shutdown), then ZooKeeper; its data stays
unless purged.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from broker import home
from broker.daemon import free_port, read_pid, read_pid_of, remove_pid_file, stop_process
from broker.errors import KafkactlError, UsageError
from broker.server import launcher
from broker.server.config import BrokerConfig
from broker.zk import client as zkclient
from broker.zk import registry
from broker.zk.server import PID_FILE as ZK_JVM_PID_FILE
from broker.zk.server import daemon_name, server_info, start_server_daemon

HOST = "127.0.0.1"
STATE_FILE = "cluster.json"
DEFAULT_NAME = "local"
DEFAULT_BROKERS = 3
MAX_BROKERS = 16
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def clusters_dir() -> Path:
    return home.home_dir() / "clusters"


def cluster_dir(name: str) -> Path:
    """`$KAFKACTL_HOME/clusters/<name>`; UsageError for a name that is not a plain file name."""
    if not _NAME.fullmatch(name):
        raise UsageError(f"cluster name {name!r}: use letters, digits, '.', '_' and '-' (at most 64, not leading '.')")
    return clusters_dir() / name


@dataclass
class Plan:
    """Where a cluster's parts listen and keep their data: what `cluster.json` holds."""

    name: str
    dir: Path
    zookeeper_port: int
    brokers: dict[int, int] = field(default_factory=dict)  # id -> port

    @property
    def zookeeper(self) -> str:
        return f"{HOST}:{self.zookeeper_port}"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{HOST}:{port}" for _, port in sorted(self.brokers.items()))

    @property
    def zookeeper_dir(self) -> Path:
        return self.dir / "zookeeper"

    def log_dir(self, broker_id: int) -> Path:
        return self.dir / f"broker-{broker_id}"

    def to_json(self) -> dict:
        return {"name": self.name, "host": HOST, "zookeeper_port": self.zookeeper_port,
                "brokers": [{"id": i, "port": p} for i, p in sorted(self.brokers.items())]}  # fmt: skip

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / STATE_FILE
        tmp = path.with_name(f".{STATE_FILE}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        os.replace(tmp, path)


def load(name: str) -> Plan | None:
    """The saved plan of cluster `name`, or None when there is no such cluster."""
    d = cluster_dir(name)
    path = d / STATE_FILE
    try:
        doc = json.loads(path.read_text())
        brokers = {int(b["id"]): int(b["port"]) for b in doc["brokers"]}
        return Plan(name, d, int(doc["zookeeper_port"]), brokers)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise KafkactlError(f"cluster {name}: cannot read {path}: {exc}") from None


def require(name: str) -> Plan:
    plan = load(name)
    if plan is None:
        others = [n for n in names() if n != name]
        have = f"; here: {', '.join(others)}" if others else ""
        raise KafkactlError(f"no cluster {name!r} here (no {cluster_dir(name) / STATE_FILE}{have})")
    return plan


@contextlib.contextmanager
def _locked(d: Path) -> Iterator[None]:
    d.mkdir(parents=True, exist_ok=True)
    with open(d / ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# --- processes -------------------------------------------------------------------------------------


def _daemon_pid(path: Path) -> int | None:
    """The live kafkactl daemon `path` names (a stale file is removed)."""
    return read_pid_of(path, b"kafkactl")


def broker_pid(plan: Plan, broker_id: int) -> int | None:
    return _daemon_pid(home.pid_file(f"broker-{broker_id}", plan.dir))


def zookeeper_pid(plan: Plan) -> int | None:
    return _daemon_pid(home.pid_file(daemon_name(plan.zookeeper_port), plan.dir))


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind: TIME_WAIT is no obstacle
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def _new_port(taken: set[int]) -> int:
    while True:
        port = free_port()
        if port not in taken:
            taken.add(port)
            return port


# --- up, down, status ------------------------------------------------------------------------------


@dataclass
class Ports:
    """Ports asked for (`cluster up --zookeeper-port`, `--base-port`): ZooKeeper's, and broker i's at
    base + i - 1. None: a free port (a new cluster) or the saved one (a cluster that exists)."""

    zookeeper: int | None = None
    base: int | None = None

    def wanted(self, ids: list[int]) -> dict[str, int]:
        """{part ("zookeeper", "broker <id>"): port} of what is asked for; UsageError for ports out of range
        or given twice."""
        out = {} if self.zookeeper is None else {"zookeeper": self.zookeeper}
        if self.base is not None:
            out |= {f"broker {i}": self.base + i - 1 for i in ids}
        bad = {k: p for k, p in out.items() if not 1 <= p <= 65535}
        if bad:
            raise UsageError(f"ports run from 1 to 65535: {', '.join(f'{k} would get {p}' for k, p in bad.items())}")
        if self.zookeeper is not None and self.zookeeper in list(out.values())[1:]:
            raise UsageError(f"--zookeeper-port {self.zookeeper} is also a broker's (--base-port {self.base} gives "
                             f"brokers {self.base}..{self.base + len(ids) - 1})")  # fmt: skip
        return out


def _ask_ports(plan: Plan, ports: Ports, running: set[int], zk_running: bool) -> None:
    """Put the ports asked for into `plan`; KafkactlError for one taken by another process, or for a part
    running on another port (it cannot move while it runs)."""
    ids = sorted(plan.brokers)
    for part, port in ports.wanted(ids).items():
        is_zk = part == "zookeeper"
        now = plan.zookeeper_port if is_zk else plan.brokers[int(part.split()[1])]
        up_now = zk_running if is_zk else int(part.split()[1]) in running
        if port == now and up_now:
            continue
        if up_now:
            raise KafkactlError(f"cluster {plan.name}: {part} runs on port {now}, not {port}: "
                                f"`kafkactl cluster down --name {plan.name}` first to move it")  # fmt: skip
        if not _port_free(port):
            raise KafkactlError(f"cluster {plan.name}: port {port} (for {part}) is taken by another process")
        if is_zk:
            if running:
                raise KafkactlError(f"cluster {plan.name}: brokers {', '.join(map(str, sorted(running)))} run "
                                    f"against ZooKeeper's port {now}: `kafkactl cluster down` first")  # fmt: skip
            plan.zookeeper_port = port
        else:
            plan.brokers[int(part.split()[1])] = port
    every = [plan.zookeeper_port, *plan.brokers.values()]
    if len(set(every)) != len(every):
        raise UsageError(
            f"cluster {plan.name}: the ports asked for meet its saved ones (zookeeper "
            f"{plan.zookeeper_port}, brokers {plan.brokers}): give both --zookeeper-port and --base-port"
        )


def _plan_for_up(name: str, brokers: int | None, ports: Ports | None = None) -> Plan:
    """The saved plan (its ports re-checked) or a new one, with the ports asked for; saved before anything
    starts. A port asked for is never replaced: taken, it is an error; a saved one taken meanwhile is."""
    ports = ports or Ports()
    plan = load(name)
    if plan is None:
        count = brokers or DEFAULT_BROKERS
        asked = ports.wanted(list(range(1, count + 1)))
        taken: set[int] = set(asked.values())
        busy = [f"{p} (for {part})" for part, p in asked.items() if not _port_free(p)]
        if busy:
            raise KafkactlError(f"cluster {name}: port(s) taken by another process: {', '.join(busy)}")
        zk_port = ports.zookeeper if ports.zookeeper is not None else _new_port(taken)
        plan = Plan(name, cluster_dir(name), zk_port)
        plan.brokers = {i: asked.get(f"broker {i}") or _new_port(taken) for i in range(1, count + 1)}
        plan.save()
        return plan
    if brokers is not None and brokers != len(plan.brokers):
        raise UsageError(
            f"cluster {name} has {len(plan.brokers)} brokers, not {brokers}: leave out -n, or "
            f"`kafkactl cluster down --purge --name {name}` first"
        )
    running = {i for i in plan.brokers if broker_pid(plan, i) is not None}
    _ask_ports(plan, ports, running, zookeeper_pid(plan) is not None)
    asked_parts = ports.wanted(sorted(plan.brokers))
    taken = {plan.zookeeper_port, *plan.brokers.values()}
    if zookeeper_pid(plan) is None and "zookeeper" not in asked_parts and not _port_free(plan.zookeeper_port):
        if running:
            raise KafkactlError(
                f"cluster {name}: ZooKeeper's port {plan.zookeeper_port} is taken by another process while "
                f"brokers {', '.join(map(str, sorted(running)))} still point at it; `kafkactl cluster down` first"
            )
        plan.zookeeper_port = _new_port(taken)
    for i, port in sorted(plan.brokers.items()):
        if i not in running and f"broker {i}" not in asked_parts and not _port_free(port):
            plan.brokers[i] = _new_port(taken)
    plan.save()
    return plan


def _start_broker(plan: Plan, broker_id: int, timeout: float, extra: dict[str, str] | None = None) -> int:
    overrides = {
        **(extra or {}),
        "broker.id": str(broker_id),
        "listeners": f"PLAINTEXT://{HOST}:{plan.brokers[broker_id]}",
        "log.dirs": str(plan.log_dir(broker_id)),
        "zookeeper.connect": plan.zookeeper,
    }
    config = BrokerConfig.load(None, overrides)
    argv = launcher.daemon_argv(overrides, embedded_zookeeper=False)
    return launcher.start_broker_daemon(argv, config, timeout, home=plan.dir)


def _start_brokers(plan: Plan, ids: list[int], timeout: float, started: dict[int, int],
                   extra: dict[str, str] | None = None) -> None:  # fmt: skip
    """Start brokers `ids` side by side, each waited for until registered and listening; `started` gets
    {id: pid} of each that did (also when interrupted, so they can be stopped), then the first failure
    in id order is raised."""
    if not ids:
        return
    pool = ThreadPoolExecutor(max_workers=len(ids), thread_name_prefix="cluster-up")
    futures = {i: pool.submit(_start_broker, plan, i, timeout, extra) for i in ids}
    try:
        wait(futures.values())
    finally:
        pool.shutdown(wait=True)  # after Ctrl-C too: each start ends within its timeout
        for i, future in futures.items():
            if future.done() and not future.cancelled() and future.exception() is None:
                started[i] = future.result()
    failures = [f.exception() for f in futures.values() if f.exception() is not None]
    if failures:
        raise failures[0]


def up(name: str = DEFAULT_NAME, brokers: int | None = None, *, timeout: float = 60.0,
       ports: Ports | None = None, overrides: dict[str, str] | None = None) -> dict:  # fmt: skip
    """Start what of cluster `name` is not running (creating it with `brokers` brokers, default 3), on the
    `ports` asked for (else saved or free ones); returns its status with `started`: {"zookeeper": bool,
    "brokers": [ids]} (nothing started: it was already up). `overrides`: broker config the brokers this call
    starts run with (not saved: give them to every `up`), under the cluster's own id, listener, log dir and
    ZooKeeper, which always win.

    A start that fails stops what this call started, in reverse order, and raises KafkactlError."""
    if brokers is not None and not 1 <= brokers <= MAX_BROKERS:
        raise UsageError(f"-n {brokers}: a cluster has 1 to {MAX_BROKERS} brokers")
    d = cluster_dir(name)
    with _locked(d):
        plan = _plan_for_up(name, brokers, ports)
        started_zk: int | None = None
        started: dict[int, int] = {}
        try:
            if zookeeper_pid(plan) is None:
                plan.zookeeper_dir.mkdir(parents=True, exist_ok=True)
                started_zk = start_server_daemon(
                    plan.zookeeper_port, HOST, plan.zookeeper_dir, timeout=timeout, root=plan.dir
                )
            _start_brokers(plan, [i for i in sorted(plan.brokers) if broker_pid(plan, i) is None], timeout, started,
                           overrides)  # fmt: skip
        except BaseException as exc:
            undone = _undo(plan, started, started_zk)
            if isinstance(exc, KafkactlError) and undone:
                raise KafkactlError(f"cluster {name}: {exc}; stopped what it had started ({undone})") from None
            raise
        result = status(name)
        result["started"] = {"zookeeper": started_zk is not None, "brokers": sorted(started)}
        return result


def _undo(plan: Plan, brokers: dict[int, int], zk_pid: int | None) -> str:
    """Stop the brokers (newest first), then ZooKeeper, that a failed `up` started; what it stopped."""
    done = []
    for broker_id, pid in sorted(brokers.items(), reverse=True):
        with contextlib.suppress(Exception):
            stop_process(pid, 30)
            remove_pid_file(home.pid_file(f"broker-{broker_id}", plan.dir), pid)
        done.append(f"broker {broker_id}")
    if zk_pid is not None:
        with contextlib.suppress(Exception):
            stop_process(zk_pid, 30)
            remove_pid_file(home.pid_file(daemon_name(plan.zookeeper_port), plan.dir), zk_pid)
        done.append("zookeeper")
    return ", ".join(done)


def down(name: str = DEFAULT_NAME, *, purge: bool = False, timeout: float = 60.0,
         broker: int | None = None) -> dict:  # fmt: skip
    """Stop cluster `name`: SIGTERM each broker in id order and wait for its clean shutdown, then ZooKeeper;
    with `purge` delete its dir; with `broker`, stop that broker alone (`up` starts it again). Returns
    {"name", "dir", "stopped": {"brokers": [{"id", "pid"}], "zookeeper": pid}, "purged"}. Raises KafkactlError
    (after stopping everything) when a broker did not shut down cleanly."""
    plan = require(name)
    if broker is not None and broker not in plan.brokers:
        raise KafkactlError(f"cluster {name} has no broker {broker} (its brokers: "
                            f"{', '.join(map(str, sorted(plan.brokers)))})")  # fmt: skip
    if broker is not None and purge:
        raise KafkactlError("--purge deletes a whole cluster's data: not with --broker")
    with _locked(plan.dir):
        stopped: dict[int, int] = {}
        problems = []
        for broker_id in sorted(plan.brokers) if broker is None else [broker]:
            pid = broker_pid(plan, broker_id)
            if pid is None:
                continue
            try:
                stopped[broker_id], _ = launcher.stop_broker(broker_id, timeout, home=plan.dir)
            except KafkactlError as exc:
                stopped[broker_id] = pid
                problems.append(str(exc))
        zk_pid = zookeeper_pid(plan) if broker is None else None
        if zk_pid is not None:
            stop_process(zk_pid, timeout)
            remove_pid_file(home.pid_file(daemon_name(plan.zookeeper_port), plan.dir), zk_pid)
        if purge:
            shutil.rmtree(plan.dir)
    if problems:
        raise KafkactlError(f"cluster {name} stopped, but {'; '.join(problems)}" + (" (purged)" if purge else ""))
    brokers = [{"id": i, "pid": pid} for i, pid in stopped.items()]
    return {"name": name, "dir": str(plan.dir), "stopped": {"brokers": brokers, "zookeeper": zk_pid}, "purged": purge}


def _registered(plan: Plan) -> dict[int, tuple[str, int, str | None]] | None:
    """The brokers registered in the cluster's ZooKeeper, or None when it does not answer."""
    try:
        with zkclient.session(plan.zookeeper, connect_timeout_s=5.0) as zk:
            return registry.live_brokers(zk)
    except KafkactlError:
        return None


def status(name: str = DEFAULT_NAME) -> dict:
    """What runs of cluster `name`: `state` (up, degraded or down), ZooKeeper (address, pid, serving), each
    broker (id, host, port, pid, alive, registered, log dir, log), the bootstrap and ZooKeeper strings."""
    plan = require(name)
    zk_pid = zookeeper_pid(plan)
    serving = server_info(HOST, plan.zookeeper_port) is not None
    registered = (_registered(plan) if serving else None) or {}
    brokers = []
    for broker_id, port in sorted(plan.brokers.items()):
        pid = broker_pid(plan, broker_id)
        brokers.append({
            "id": broker_id, "host": HOST, "port": port, "pid": pid, "alive": pid is not None,
            "registered": registered.get(broker_id, (None, None))[:2] == (HOST, port),
            "log_dir": str(plan.log_dir(broker_id)), "log": str(home.log_file(f"broker-{broker_id}", plan.dir)),
        })  # fmt: skip
    parts = [zk_pid is not None and serving] + [b["alive"] and b["registered"] for b in brokers]
    anything = zk_pid is not None or any(b["alive"] for b in brokers)
    state = "up" if all(parts) else "degraded" if anything else "down"
    return {
        "name": name,
        "state": state,
        "dir": str(plan.dir),
        "zookeeper": {
            "address": plan.zookeeper,
            "pid": zk_pid,
            "serving": serving,
            "java_pid": read_pid(plan.zookeeper_dir / ZK_JVM_PID_FILE),
            "data_dir": str(plan.zookeeper_dir),
            "log": str(home.log_file(daemon_name(plan.zookeeper_port), plan.dir)),
        },  # fmt: skip
        "brokers": brokers,
        "bootstrap": plan.bootstrap,
    }


def names() -> list[str]:
    """The clusters kept under this home."""
    d = clusters_dir()
    return sorted(p.parent.name for p in d.glob(f"*/{STATE_FILE}")) if d.is_dir() else []
