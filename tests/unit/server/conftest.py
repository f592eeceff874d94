"""Fixtures of the broker's unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.server.broker import Broker
from broker.server.config import BrokerConfig


@pytest.fixture
def broker(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Broker]:
    """Broker 1 leading partition 0 of the test module's TOPIC, with its log dir loaded and locked
    (released at the end); no ZooKeeper and no socket."""
    b = Broker(BrokerConfig.load(overrides={"log.dirs": str(tmp_path / "logs"), "broker.id": "1"}))
    b.logs.startup()
    b.cache.set_topic(request.module.TOPIC, {0: [1]}, {0: {"leader": 1, "leader_epoch": 0, "isr": [1]}})
    b.replicas.apply((request.module.TOPIC, 0), b.cache.partition(request.module.TOPIC, 0))
    yield b
    b.logs.shutdown()
