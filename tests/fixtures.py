"""Fixtures for tests against real processes (integration, compat): ZooKeeper, brokers, a scratch home.

- `zk_server`: one real ZooKeeper server for the whole test session (a child JVM on a free port).
- `zk_chroot`: a connect string with a fresh, existing chroot per test, so tests never see each other's znodes.
- `kafkactl_home`: `KAFKACTL_HOME` pointed at a temporary dir (pid files, logs, default data dirs).
- `pki`: a CA and certificates signed by it (broker, client, expired, untrusted), for the TLS tests.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from broker.daemon import free_port
from broker.security.certs import Pki, make_pki
from broker.zk.server import ZooKeeperServer


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA, a broker certificate for 127.0.0.1/localhost, a client certificate, the same expired, and a
    client certificate from another CA (made with the openssl command, which scripts/setup.sh installs)."""
    return make_pki(tmp_path_factory.mktemp("pki"))


# --- ZooKeeper -------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"), free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def private_zk(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper server of this test's own, to stop or kill (the session-wide one is never stopped)."""
    server = ZooKeeperServer(tmp_path / "zookeeper", free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


def zk_client(hosts: str) -> KazooClient:
    """A started kazoo client (the caller stops and closes it)."""
    client = KazooClient(hosts=hosts, timeout=10.0)
    client.start(timeout=15)
    return client


@pytest.fixture
def zk_chroot(zk_server: ZooKeeperServer) -> Iterator[str]:
    """`127.0.0.1:<port>/t<hex>`: a connect string whose chroot exists and is this test's alone."""
    chroot = f"/t{uuid.uuid4().hex}"
    client = zk_client(zk_server.connect_string)
    try:
        client.ensure_path(chroot)
    finally:
        client.stop()
        client.close()
    yield zk_server.connect_string + chroot
    client = zk_client(zk_server.connect_string)
    try:  # best effort: keep the session's server small
        client.delete(chroot, recursive=True)
    except Exception:
        pass
    finally:
        client.stop()
        client.close()


# --- kafkactl's own files --------------------------------------------------------------------------


@pytest.fixture
def kafkactl_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh KAFKACTL_HOME, also seen by `kafkactl` subprocesses (they inherit the environment)."""
    home = tmp_path / "kafkactl-home"
    home.mkdir()
    monkeypatch.setenv("KAFKACTL_HOME", str(home))
    return home


# --- brokers ---------------------------------------------------------------------------------------

from tests.integration.cluster import BrokerProcess, new_chroot  # noqa: E402


@pytest.fixture
def start_broker(zk_chroot: str, tmp_path: Path) -> Iterator:
    """A factory: `start_broker(broker_id=1, overrides={...}, zk=None)` starts a real broker process on a free port
    under this test's chroot; every broker it started is stopped (SIGTERM, then kill) at the end."""
    started: list[BrokerProcess] = []

    def start(broker_id: int = 1, overrides: dict[str, str] | None = None, zk: str | None = None,
              port: int | None = None) -> BrokerProcess:  # fmt: skip
        b = BrokerProcess(broker_id, zk or zk_chroot, tmp_path, port=port, overrides=overrides)
        started.append(b)
        return b.start()

    yield start
    for b in started:
        try:
            b.stop(timeout=20)
        except Exception:
            b.kill()


@pytest.fixture
def broker(start_broker) -> BrokerProcess:
    """One broker (id 1) of its own cluster."""
    return start_broker(1)


@pytest.fixture
def cluster3(start_broker) -> list[BrokerProcess]:
    """Brokers 1, 2 and 3 of one cluster, each with its own port and log dir."""
    return [start_broker(i) for i in (1, 2, 3)]


@pytest.fixture(scope="module")
def shared_broker(zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for a whole test module (tests use their own topic names)."""
    with BrokerProcess(1, new_chroot(zk_server.connect_string), tmp_path_factory.mktemp("shared-broker")) as b:
        yield b


TWO_CLUSTER_OVERRIDES = {"zookeeper.session.timeout.ms": "6000"}


@pytest.fixture
def two_clusters(zk_server: ZooKeeperServer, tmp_path: Path) -> Iterator[tuple[str, str, list[BrokerProcess]]]:
    """A source cluster (broker 1) and a target cluster (brokers 11 and 12), each under its own ZooKeeper chroot:
    (source bootstrap, target bootstrap, the three brokers). A killed broker's partitions move within seconds."""
    source_zk, target_zk = new_chroot(zk_server.connect_string), new_chroot(zk_server.connect_string)
    brokers = [BrokerProcess(1, source_zk, tmp_path, overrides=TWO_CLUSTER_OVERRIDES),
               BrokerProcess(11, target_zk, tmp_path, overrides=TWO_CLUSTER_OVERRIDES),
               BrokerProcess(12, target_zk, tmp_path, overrides=TWO_CLUSTER_OVERRIDES)]  # fmt: skip
    try:
        for b in brokers:
            b.start()
        yield brokers[0].bootstrap, f"{brokers[1].bootstrap},{brokers[2].bootstrap}", brokers
    finally:
        for b in brokers:
            try:
                b.stop(timeout=20)
            except Exception:
                b.kill()
