"""Fixtures shared by every test directory: real ZooKeeper and broker processes (see tests/fixtures.py).

Every test also carries the marker of its lane, the directory it lives in (unit, cli, integration, compat,
spark), so a lane runs alone: `bash scripts/test.sh -m unit`, `-m "integration and not chaos"`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["tests.fixtures"]

LANES = ("unit", "cli", "integration", "compat", "spark")
_TESTS = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(item.path).relative_to(_TESTS).parts
        if parts and parts[0] in LANES:
            item.add_marker(parts[0])
