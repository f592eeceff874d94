"""Fixtures shared by every test directory: real ZooKeeper and broker processes (see tests/fixtures.py).

Every test also carries the marker of its lane, the directory it lives in (unit, cli, integration, compat,
spark), so a lane runs alone: `bash scripts/test.sh -m unit`, `-m "integration and not chaos"`.

The suite runs in parallel workers (pytest-xdist, `--dist loadgroup`, see scripts/test.sh). Tests that share
a broker for their module are one group, so the module's broker starts once; the Spark lane, which shares
one Spark session, is one group. Each worker draws its ports from a range of its own
(`broker.daemon.PORT_RANGE_ENV`), below the kernel's ephemeral ports.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.daemon import PORT_RANGE_ENV

pytest_plugins = ["tests.fixtures"]

LANES = ("unit", "cli", "integration", "compat", "spark")
_TESTS = Path(__file__).parent
#: ports for the suite's servers: below Linux's default ephemeral range (32768-60999), split between workers
_PORTS = (12000, 32000)
#: fixtures shared beyond one test that are cheap enough to start again in each worker (the Spark lane's broker
#: too: its tests use topics of their own, and the long ones, which run Spark of their own, then spread out)
_CHEAP_SHARED = {"zk_server", "pki", "tmp_path_factory", "worker_id", "testrun_uid", "spark_broker"}


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    span = (_PORTS[1] - _PORTS[0]) // max(1, count)
    low = _PORTS[0] + index * span
    os.environ[PORT_RANGE_ENV] = f"{low}-{low + span - 1}"


def _shared_group(item: pytest.Item, lane: str) -> str | None:
    """The xdist group of a test whose fixtures outlive it, else None: a module's shared broker keeps the module
    on one worker, and the lane's session-wide ones (the Spark session) keep those tests on one."""
    if lane == "unit":
        return None
    info = getattr(item, "_fixtureinfo", None)
    scopes = {
        d.scope
        for name, defs in (info.name2fixturedefs.items() if info else ())
        if name not in _CHEAP_SHARED
        for d in defs
    }
    if "session" in scopes:
        return f"{lane}-session"
    if scopes & {"package", "module", "class"}:
        return Path(item.path).relative_to(_TESTS).as_posix()
    return None


def _long(item: pytest.Item) -> bool:
    """Whether a test is one of the long ones (marked slow or chaos, or of the Spark lane); a group's tests keep
    their order."""
    return any(item.get_closest_marker(m) for m in ("slow", "chaos", "spark"))


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into node ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(item.path).relative_to(_TESTS).parts
        if parts and parts[0] in LANES:
            item.add_marker(parts[0])
            group = _shared_group(item, parts[0])
            if group and not item.get_closest_marker("xdist_group"):
                item.add_marker(pytest.mark.xdist_group(group))
    if os.environ.get("PYTEST_XDIST_WORKER"):  # in parallel, the long tests first: none is left to run alone at the end
        items.sort(key=lambda item: item.get_closest_marker("xdist_group") is not None or not _long(item))
