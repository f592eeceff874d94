"""Chaos soak (issue 14): an idempotent acks=all producer (RF 3, min.insync.replicas 2) keeps writing while
leaders and followers are killed with kill -9, paused with SIGSTOP past their ZooKeeper session, or
stopped, and restarted, one seeded trial after another.

After every trial a reader reads every partition from the start: no offset it read before may hold
another message or be gone (nothing it saw disappears, no offset goes backwards). At the end: every
acknowledged message is there, each message at most once (the idempotent producer's retries are not
stored twice), and every replica's segment files are byte-identical.

CI runs KAFKACTL_CHAOS_TRIALS (default 12) trials; the full soak is
`KAFKACTL_CHAOS_TRIALS=100 scripts/test.sh -m chaos tests/integration/test_replication_chaos.py`.
`KAFKACTL_CHAOS_SEED` replays a run.
"""

from __future__ import annotations

import collections
import os
import random
import time

import pytest

from broker.client.partitioner import partition_for_key
from tests.integration.clientkit import AckedProducer
from tests.integration.helpers import cli, ok, wait_until
from tests.integration.test_replication import create, full_isr, identical_replicas, states

TRIALS = int(os.environ.get("KAFKACTL_CHAOS_TRIALS", "12"))
SEED = int(os.environ.get("KAFKACTL_CHAOS_SEED", "20261125"))
SESSION_MS = 3000
OVERRIDES = {"zookeeper.session.timeout.ms": str(SESSION_MS), "replica.lag.time.max.ms": "2000"}
TOPIC = "chaos"


def read_all(bootstrap: str) -> dict[tuple[int, int], bytes]:
    r = cli("consume", TOPIC, "-e", "-b", bootstrap, "--format", "%p %o %s\\n", timeout=120)
    ok(r)
    out = {}
    for line in r.stdout.splitlines():
        p, o, v = line.split(" ", 2)
        out[(int(p), int(o))] = v.encode()
    return out


@pytest.mark.chaos
@pytest.mark.timeout(max(300, 30 * TRIALS))
def test_no_acknowledged_message_is_lost_while_brokers_are_killed_paused_and_restarted(start_broker, zk_chroot):
    rng = random.Random(SEED)
    brokers = [start_broker(i, overrides=OVERRIDES) for i in (1, 2, 3)]
    by_id = {b.broker_id: b for b in brokers}
    create(brokers, TOPIC, 3, 3, 2)
    bootstrap = ",".join(b.bootstrap for b in brokers)
    producer = AckedProducer(bootstrap, TOPIC, per_tick=20, tick_s=0.01)  # about 2,000/s
    producer.start()
    seen: dict[tuple[int, int], bytes] = {}
    actions = collections.Counter()
    try:
        for trial in range(TRIALS):
            time.sleep(rng.uniform(0.3, 1.0))  # some writes between the faults
            partition = rng.randrange(3)
            st = states(zk_chroot, TOPIC)[partition]
            followers = [r for r in st["isr"] if r != st["leader"]]
            action = rng.choice(["kill-leader", "kill-follower", "pause-leader", "stop-leader"])
            if action == "kill-follower" and not followers:
                action = "kill-leader"
            victim = by_id[rng.choice(followers) if action == "kill-follower" else st["leader"]]
            actions[action] += 1
            if action.startswith("kill"):
                victim.kill()
                time.sleep(rng.uniform(0.2, 2.0))
                victim.start()
            elif action == "pause-leader":
                victim.pause()  # past its session: ZooKeeper expires it, the controller elects another leader
                time.sleep(SESSION_MS / 1000 + rng.uniform(1.0, 2.5))
                victim.resume()
            else:
                assert victim.stop() == 0
                victim.start()
            wait_until(lambda: full_isr(zk_chroot, TOPIC), 60, f"trial {trial} ({action}): every replica in sync")
            now = read_all(bootstrap)
            for key, value in seen.items():  # nothing read before went away or changed
                assert now.get(key) == value, f"trial {trial} ({action}): partition {key[0]} offset {key[1]}"
            seen = now
    finally:
        producer.stop.set()
        producer.join(120)
    assert not producer.is_alive()
    final = read_all(bootstrap)
    for key, value in seen.items():
        assert final.get(key) == value
    values = list(final.values())
    counts = collections.Counter(values)
    assert [v for v, c in counts.items() if c > 1] == [], "stored twice"
    missing = {v for _, _, v in producer.acked} - set(values)
    ends = {p: max(o for q, o in final if q == p) for p in range(3)}
    assert not missing, (f"{len(missing)} acknowledged messages missing, e.g. "
                         f"{[(v, partition_for_key(v, 3)) for v in sorted(missing)[:5]]}; log ends {ends}")  # fmt: skip
    wait_until(lambda: identical_replicas(brokers, zk_chroot, TOPIC), 30, "identical segment files")
    print(f"\n{TRIALS} trials (seed {SEED}): {dict(actions)}; {len(producer.acked)} acknowledged, "
          f"{len(producer.failed)} not (first: {producer.failed[:1]}), {len(values)} stored")  # fmt: skip
    assert len(producer.failed) < len(producer.acked) / 10, "the producer stalled"
