"""A ZooKeeper watch callback that loses its session logs one line and never raises into kazoo."""

import logging

from kazoo.exceptions import ConnectionLoss

from broker.server.broker import Broker
from broker.server.config import BrokerConfig


def make_broker(tmp_path):
    return Broker(BrokerConfig.load(overrides={"log.dirs": str(tmp_path), "broker.id": "3"}))


def test_connection_loss_in_a_watch_is_one_warning(tmp_path, caplog):
    broker = make_broker(tmp_path)

    def on_brokers(children):
        raise ConnectionLoss()

    with caplog.at_level(logging.WARNING, logger="broker.server.zk_watches"):
        assert broker._guarded(on_brokers)(["1"]) is None
    assert [r.getMessage() for r in caplog.records] == ["ZooKeeper watch on_brokers failed: ConnectionLoss"]
    assert all(r.exc_info is None for r in caplog.records)


def test_watch_stops_once_the_broker_is_closing(tmp_path):
    broker = make_broker(tmp_path)
    calls = []
    guarded = broker._guarded(calls.append)
    assert guarded(["1"]) is None
    broker._closing = True
    assert guarded(["2"]) is False  # kazoo drops a watch whose callback returns False
    assert calls == [["1"]]
