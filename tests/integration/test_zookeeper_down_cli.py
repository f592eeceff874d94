"""The command line while ZooKeeper is down (issue 15, item 7): topic changes are refused at once, saying
ZooKeeper is unreachable (they waited for the client's 30 s timeout, saying only "no answer"), while
produce and consume go on; ZooKeeper commands give up within seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from broker.client.connection import Connection
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from tests.integration.cluster import BrokerProcess, new_chroot
from tests.integration.helpers import cli, cli_env, error_line, ok, wait_until, zk_session


def test_topic_changes_say_zookeeper_is_unreachable_at_once(private_zk, tmp_path):
    with BrokerProcess(1, new_chroot(private_zk.connect_string), tmp_path) as b:
        ok(cli("topic", "create", "kept", "-p", 2, "-b", b.bootstrap))
        os.kill(private_zk.pid, signal.SIGKILL)
        private_zk.stop()
        time.sleep(1.0)  # (the broker notices the connection drop)
        for argv in (["topic", "create", "new", "-p", "1"], ["topic", "alter", "kept", "--partitions", "3"],
                     ["topic", "alter", "kept", "--config", "retention.ms=1000"]):  # fmt: skip
            began = time.monotonic()
            line = error_line(cli(*argv, "-b", b.bootstrap), "broker 1 cannot reach ZooKeeper")
            assert time.monotonic() - began < 10, line  # not the client's 30 s request timeout
        r = cli("topic", "delete", "kept", "--execute", "-b", b.bootstrap)
        assert r.returncode == 1 and "UNKNOWN_SERVER_ERROR" in r.stderr
        r = subprocess.run([sys.executable, "-m", "kafkactl", "produce", "kept", "--acks", "1", "-b", b.bootstrap],
                           input="a\nb\n", capture_output=True, text=True, timeout=60, env=cli_env())  # fmt: skip
        assert r.returncode == 0 and "produced 2 message(s)" in r.stderr, r.stderr  # writes go on
        r = cli("consume", "kept", "-e", "-b", b.bootstrap)
        assert sorted(r.stdout.split()) == ["a", "b"]
        with Connection("127.0.0.1", b.port) as c:  # a new idempotent producer's id: retriable at once, not a 30 s wait
            answer = c.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 60000})
            assert answer["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
        began = time.monotonic()
        error_line(cli("zk", "ls", "/", "-z", b.zk_connect), "cannot reach ZooKeeper", "within 3s")
        assert time.monotonic() - began < 10
        private_zk.start()
        wait_until(lambda: "is back" in b.log_text(), 30, "the broker back on ZooKeeper")
        with zk_session(b.zk_connect) as zk:
            assert zk.exists("/brokers/ids/1") is not None
        ok(cli("topic", "create", "after", "-p", 1, "-b", b.bootstrap))
        log = b.log_text()  # the outage said once, its end once, and no traceback
        assert log.count("lost the connection to ZooKeeper") == 1 and log.count("is back") == 1, log[-3000:]
        assert "Traceback" not in log, log[-3000:]
