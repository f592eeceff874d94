"""Failover time: from a leader's kill -9 (or controlled shutdown) to the first acks=all produce acknowledged
by its successor.

    .venv/bin/python benchmarks/failover.py

Starts a private local cluster of 3 brokers (`kafkactl cluster up`, under a temporary KAFKACTL_HOME), a
topic of one partition with 3 replicas (min.insync.replicas 2), and an idempotent acks=all producer
sending a message every 5 ms. It kills the partition's leader with SIGKILL (then starts it again), and
stops the next leader with SIGTERM (a controlled shutdown), and reports for each the longest gap
between two acknowledgements: about the ZooKeeper session timeout for a kill (the controller acts when
the session expires), well under a second for a controlled shutdown. JSON on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import tempfile
import time

from broker.client.admin import Admin
from broker.client.producer import AsyncProducer
from broker.server.config import BrokerConfig

TOPIC = "failover"


def leader_of(bootstrap: str) -> int:
    with Admin(bootstrap) as admin:
        return admin.describe_topic(TOPIC)[0].leader


async def produce_through(bootstrap: str, event, seconds: float) -> list[float]:
    """Ack times of a message every 5 ms for `seconds`; `event()` runs once, after one second."""
    producer = await AsyncProducer(bootstrap, acks="all", linger_ms=0, request_timeout_ms=5000).start()
    acks: list[float] = []
    pending = []
    try:
        start = time.monotonic()
        fired = False
        while time.monotonic() - start < seconds:
            if not fired and time.monotonic() - start > 1:
                fired = True
                await asyncio.to_thread(event)
            pending.append(asyncio.ensure_future(acked(await producer.send(TOPIC, b"x" * 100, partition=0), acks)))
            await asyncio.sleep(0.005)
        await producer.flush()
        await asyncio.gather(*pending)
    finally:
        await producer.close()
    return sorted(acks)


async def acked(delivery, acks: list[float]) -> None:
    try:
        await delivery
    except Exception:
        return
    acks.append(time.monotonic())


def longest_gap(acks: list[float]) -> float:
    return max((b - a for a, b in zip(acks, acks[1:], strict=False)), default=0.0)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    session_ms = BrokerConfig().zk_session_timeout_ms  # (what `cluster up` brokers run with)
    home = tempfile.mkdtemp(prefix="kafkactl-failover-")
    os.environ["KAFKACTL_HOME"] = home
    from broker import local_cluster  # (reads KAFKACTL_HOME)

    status = local_cluster.up("failover", 3)
    bootstrap = status["bootstrap"]
    try:
        with Admin(bootstrap) as admin:
            admin.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "2"})
        time.sleep(1)
        pids = {b["id"]: b["pid"] for b in status["brokers"]}
        victim = leader_of(bootstrap)
        acks = asyncio.run(produce_through(bootstrap, lambda: os.kill(pids[victim], signal.SIGKILL),
                                           session_ms / 1000 + 6))  # fmt: skip
        killed = longest_gap(acks)
        local_cluster.up("failover")  # the killed broker back
        time.sleep(3)
        stopped = leader_of(bootstrap)
        acks = asyncio.run(produce_through(bootstrap, lambda: local_cluster.down("failover", broker=stopped), 4))
        controlled = longest_gap(acks)
        print(json.dumps({"session_timeout_ms": session_ms, "kill9_leader_gap_s": round(killed, 3),
                          "controlled_shutdown_gap_s": round(controlled, 3)}))  # fmt: skip
    finally:
        local_cluster.down("failover", purge=True)


if __name__ == "__main__":
    main()
