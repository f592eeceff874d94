"""A broker learns partition states from watches set by pipelined reads (broker/zk/node_watches.py); kazoo forgets
its watches when the connection drops, so the broker reads every state again on reconnecting. Here ZooKeeper is
restarted under a running cluster (the sessions survive it), then leadership changes: a broker that leads none of
the partitions must still answer Metadata with each change."""

from __future__ import annotations

from broker.zk import registry
from tests.integration.cluster import BrokerProcess, new_chroot
from tests.integration.helpers import leaders, metadata, wait_until, zk_session

TOPIC = "watched"
PARTITIONS = 40


def test_state_changes_reach_a_broker_after_zookeeper_restarts(private_zk, tmp_path):
    chroot = new_chroot(private_zk.connect_string)
    overrides = {"zookeeper.session.timeout.ms": "30000", "controlled.shutdown.enable": "false"}
    leader, observer = (BrokerProcess(i, chroot, tmp_path, overrides=overrides) for i in (1, 2))
    try:
        leader.start()
        observer.start()
        with zk_session(chroot) as zk:
            registry.create_topic(zk, TOPIC, {p: [1] for p in range(PARTITIONS)}, {})

        def led_by(who: int) -> bool:
            return set(leaders(metadata(observer.bootstrap, [TOPIC]), TOPIC).values()) == {who}

        def epochs_seen() -> bool:
            """The observer answers each partition's leader epoch as its state znode has it."""
            with zk_session(chroot) as zk:
                written = registry.partition_states(zk, TOPIC, list(range(PARTITIONS)))
            (t,) = metadata(observer.bootstrap, [TOPIC])["topics"]
            return {p["partition_index"]: p["leader_epoch"] for p in t["partitions"]} == {
                p: st["leader_epoch"] for p, st in written.items() if st is not None
            }

        wait_until(lambda: led_by(1) and epochs_seen(), 30, "the observer sees broker 1 lead every partition")

        private_zk.stop()
        private_zk.start()
        wait_until(lambda: "is back" in observer.log_text(), 60, "the observer reconnected to ZooKeeper")

        leader.stop()  # (no other replica: the controller leaves every partition without a leader)
        wait_until(lambda: led_by(-1), 60, "the observer sees every partition without a leader")
        leader.start()
        wait_until(lambda: led_by(1) and epochs_seen(), 60, "the observer sees broker 1 lead at the new epochs")
    finally:
        for b in (leader, observer):
            try:
                b.stop(timeout=20)
            except Exception:
                b.kill()
