"""Chaos at scale (issue 28): 3,000 partitions (three topics of 1,000, RF 3, min.insync.replicas 2) on three
brokers while idempotent acks=all producers write across all of them; a broker is killed with kill -9 or
stopped (a controlled shutdown), then started again, one seeded trial after another.

After each fault every partition must have a live leader again (the time it took is printed; the targets are
`benchmarks/scale.py`'s to measure, not a timed assertion here) and, after the restart, every ISR must be full.
At the end every acknowledged message is there, once.

CI runs KAFKACTL_SCALE_CHAOS_TRIALS (default 2: one kill -9, one controlled stop) at 3,000 partitions; the full
soak is `KAFKACTL_SCALE_CHAOS_TRIALS=10 scripts/test.sh tests/integration/test_scale_chaos.py`, and
KAFKACTL_SCALE_CHAOS_PARTITIONS sets the size (a multiple of 1,000).
"""

from __future__ import annotations

import collections
import os
import random
import time

import pytest

from tests.integration.clientkit import AckedProducer, read_all
from tests.integration.helpers import cli, metadata, ok, wait_until

TRIALS = int(os.environ.get("KAFKACTL_SCALE_CHAOS_TRIALS", "2"))
PARTITIONS = int(os.environ.get("KAFKACTL_SCALE_CHAOS_PARTITIONS", "3000"))
SEED = int(os.environ.get("KAFKACTL_CHAOS_SEED", "20261129"))
SESSION_MS = 6000
OVERRIDES = {"zookeeper.session.timeout.ms": str(SESSION_MS), "replica.lag.time.max.ms": "10000"}
PER_TOPIC = 1000


def partitions(bootstrap: str, topics: list[str]) -> list[dict]:
    """Every partition of `topics` as `bootstrap`'s Metadata answer has it."""
    md = metadata(bootstrap, topics)
    return [p for t in md["topics"] for p in t["partitions"]]


def all_led(bootstrap: str, topics: list[str], live: set[int]) -> bool:
    parts = partitions(bootstrap, topics)
    return len(parts) == len(topics) * PER_TOPIC and all(p["leader_id"] in live for p in parts)


def all_in_sync(bootstrap: str, topics: list[str]) -> bool:
    parts = partitions(bootstrap, topics)
    return len(parts) == len(topics) * PER_TOPIC and all(len(p["isr_nodes"]) == 3 for p in parts)


@pytest.mark.chaos
@pytest.mark.slow
@pytest.mark.timeout(600 + 180 * TRIALS)
def test_nothing_acknowledged_is_lost_and_every_partition_is_led_again_at_3000_partitions(start_broker):
    rng = random.Random(SEED)
    brokers = [start_broker(i, overrides=OVERRIDES) for i in (1, 2, 3)]
    by_id = {b.broker_id: b for b in brokers}
    bootstrap = ",".join(b.bootstrap for b in brokers)
    topics = [f"scale{i}" for i in range(PARTITIONS // PER_TOPIC)]
    for topic in topics:
        ok(cli("topic", "create", topic, "-p", PER_TOPIC, "-r", 3, "--config", "min.insync.replicas=2",
               "-b", brokers[0].bootstrap, timeout=120))  # fmt: skip
    wait_until(lambda: all_in_sync(brokers[0].bootstrap, topics), 120, "every ISR full after the creation")
    producers = [AckedProducer(bootstrap, t, per_tick=10, tick_s=0.02) for t in topics]
    for producer in producers:
        producer.start()
    took: list[str] = []
    try:
        for trial in range(TRIALS):
            time.sleep(rng.uniform(1.0, 3.0))  # writes between the faults
            action = "kill" if trial % 2 == 0 else "stop"
            victim = by_id[rng.choice(sorted(by_id))]
            others = [b for b in brokers if b is not victim]
            live = {b.broker_id for b in others}
            started = time.monotonic()
            if action == "kill":
                victim.kill()
            else:
                assert victim.stop(timeout=120) == 0
            what = f"trial {trial} ({action} of broker {victim.broker_id})"
            wait_until(lambda b=others[0].bootstrap, live=live: all_led(b, topics, live), SESSION_MS / 1000 + 90,
                       f"{what}: every partition led again")  # fmt: skip
            took.append(f"{action} {victim.broker_id}: led again in {time.monotonic() - started:.1f} s")
            victim.start(timeout=120)
            started = time.monotonic()
            wait_until(lambda b=others[0].bootstrap: all_in_sync(b, topics), 180,
                       f"{what}: every ISR full after the restart")  # fmt: skip
            took[-1] += f", every ISR full {time.monotonic() - started:.1f} s after the restart"
    finally:
        for producer in producers:
            producer.stop.set()
        for producer in producers:
            producer.join(120)
    assert not any(p.is_alive() for p in producers)
    acked = failed = 0
    for topic, producer in zip(topics, producers, strict=True):
        stored = [r.value for r in read_all(bootstrap, topic, timeout=120)]
        counts = collections.Counter(stored)
        assert [v for v, c in counts.items() if c > 1] == [], f"{topic}: stored twice"
        missing = {v for _, _, v in producer.acked} - set(stored)
        assert not missing, f"{topic}: {len(missing)} acknowledged messages missing, e.g. {sorted(missing)[:5]}"
        acked, failed = acked + len(producer.acked), failed + len(producer.failed)
    for b in brokers:  # (the fixture's controlled shutdowns of 3,000 partitions each take a minute: not tested here)
        b.kill()
    print(f"\n{TRIALS} trials at {PARTITIONS} partitions (seed {SEED}): {'; '.join(took)}; {acked} acknowledged, "
          f"{failed} not")  # fmt: skip
    assert acked > 0 and failed < acked / 10, "the producers stalled"
