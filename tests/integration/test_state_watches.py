"""A broker learns partition states from the state-change notifications every writer of states creates in the same
multi (one children watch), and reads every state again on reconnecting and when it fell behind the notifications'
pruning. Here ZooKeeper is restarted under a running cluster (the sessions survive it), then leadership changes: a
broker that leads none of the partitions must still answer Metadata with each change."""

from __future__ import annotations

from broker.zk import paths, registry
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


def test_a_broker_that_missed_pruned_notifications_reads_every_state(broker: BrokerProcess):
    """Brokers learn of state changes from `/kafkactl/state_changes` notifications, which the controller deletes
    after a minute, recording the highest sequence number it deleted. A broker that finds that number above the
    highest it read fell behind and missed some: it reads every state again, so a change whose notification it
    never saw still reaches it."""
    with zk_session(broker.zk_connect) as zk:
        registry.create_topic(zk, "behind", {0: [1]}, {})

    def epoch() -> int | None:
        (t,) = metadata(broker.bootstrap, ["behind"])["topics"]
        return t["partitions"][0]["leader_epoch"] if t["partitions"] else None

    wait_until(lambda: epoch() == 0, 30, "the broker serves the new topic")
    with zk_session(broker.zk_connect) as zk:
        st = registry.partition_state(zk, "behind", 0)
        # a change whose notification was deleted before this broker read it ...
        zk.set(paths.partition_state("behind", 0), paths.state_json(1, 7, [1]), version=st["zk_version"])
        zk.set(paths.STATE_CHANGES, b"999999999")  # ... as the prune's record says
        zk.create(paths.state_change_prefix(), paths.partitions_json([]), sequence=True)  # (the next one)
    wait_until(lambda: epoch() == 7, 30, "the broker read every state again")
    assert "went before this broker read them" in broker.log_text()
