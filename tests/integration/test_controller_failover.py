"""A controller that is always there (issue 26): claiming `/controller` and raising `/controller_epoch` are one
multi whose result is the fence, a fenced controller resigns, and after every lost session exactly one broker
acts as controller.

The claim tests drive `Controller` and `registry.claim_controller` against the real ZooKeeper. The chaos test
pauses a ZooKeeper of its own (SIGSTOP) past every broker's session on a 3-broker cluster, resumes it, and
checks that a preferred-leader election is carried out after each round, and that a broker killed at the end
has every one of its partitions led by a live broker.

CI runs KAFKACTL_CHAOS_ROUNDS (default 3) rounds; the full run is
`KAFKACTL_CHAOS_ROUNDS=10 .venv/bin/python -m pytest -m chaos tests/integration/test_controller_failover.py`.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from broker.replication.controller import Controller
from broker.zk import paths, registry
from tests.integration.cluster import BrokerProcess, new_chroot
from tests.integration.helpers import cli, controller_of, wait_until, zk_session
from tests.integration.test_replication import create, full_isr, replicas_of, states

ROUNDS = int(os.environ.get("KAFKACTL_CHAOS_ROUNDS", "3"))
SESSION_MS = 3000
OVERRIDES = {"zookeeper.session.timeout.ms": str(SESSION_MS), "replica.lag.time.max.ms": "5000"}
TOPIC = "ctl"


# --- the claim, against the real ZooKeeper ---------------------------------------------------------


@pytest.fixture
def two_sessions(zk_chroot: str) -> Iterator[tuple[KazooClient, KazooClient]]:
    with zk_session(zk_chroot) as a, zk_session(zk_chroot) as b:
        yield a, b


def test_a_claim_creates_the_controller_and_raises_the_epoch_in_one_multi(two_sessions):
    a, b = two_sessions
    won = registry.claim_controller(a, 1)
    data, stat = a.get(paths.CONTROLLER)
    epoch, estat = a.get(paths.CONTROLLER_EPOCH)
    assert won.fence == estat.version and epoch == b"1"  # Kafka's first epoch
    assert won.zxid == stat.czxid == estat.mzxid  # one transaction: the fence is the claim's own
    assert won.broker_id == 1 and won.session == a.client_id[0]
    lost = registry.claim_controller(b, 2)
    assert (lost.broker_id, lost.zxid, lost.fence) == (1, won.zxid, -1)
    a.delete(paths.CONTROLLER)  # (as the holder's session ending would)
    again = registry.claim_controller(b, 2)
    assert again.broker_id == 2 and again.fence == won.fence + 1 and again.zxid > won.zxid
    assert a.get(paths.CONTROLLER_EPOCH)[0] == b"2"
    # a resignation deletes only the znode it names
    assert not registry.resign_controller(b, 2, won.zxid)
    assert not registry.resign_controller(b, 1, again.zxid)
    assert registry.resign_controller(b, 2, again.zxid)
    assert b.exists(paths.CONTROLLER) is None


def test_a_fenced_controller_resigns_and_a_new_election_runs(two_sessions):
    a, b = two_sessions
    registry.ensure_roots(a)
    registry.create_topic(a, "t", {0: [5]}, {})  # its replica is not live: the controller writes it offline
    c = Controller(a, 1, lambda _topic: False)
    try:
        assert c.elect() == 1 and c.active
        first = c.epoch_version
        wait_until(lambda: registry.partition_state(b, "t", 0)["leader"] == -1, 10, "the offline state written")
        czxid = b.exists(paths.CONTROLLER).czxid
        epoch, estat = b.get(paths.CONTROLLER_EPOCH)  # someone else raises the epoch (an older broker, a tool)
        b.set(paths.CONTROLLER_EPOCH, str(int(epoch) + 1).encode(), version=estat.version)
        st = registry.partition_state(b, "t", 0)  # make the next pass write: its write is fenced
        registry.write_partition_state(b, "t", 0, 5, st["leader_epoch"], [5], st["zk_version"])
        c.poke()
        # it resigned (deleted its /controller) and won the new election: a new znode, a new fence
        wait_until(lambda: (s := b.exists(paths.CONTROLLER)) is not None and s.czxid != czxid, 10, "a new claim")
        wait_until(lambda: c.active and c.epoch_version > first + 1, 10, "acting on the new claim")
        assert registry.controller_id(b) == 1
        wait_until(lambda: registry.partition_state(b, "t", 0)["leader"] == -1, 10, "the write done at the new fence")
    finally:
        c.close()


def test_a_pass_that_starts_from_a_cache_behind_zookeeper_still_decides_every_partition(two_sessions):
    """The controller's first pass decides from the broker's cached states and writes before it reads; a
    partition the cache has at an old version, and one it does not know lost its leader, are read by the next
    pass and decided from what ZooKeeper holds; a cached state of another topic of the same name is not used."""
    a, b = two_sessions
    registry.ensure_roots(a)
    registry.register_broker(b, 1, [registry.Endpoint("PLAINTEXT", "PLAINTEXT", "h1", 9092)])
    registry.create_topic(a, "k", {0: [5, 1], 1: [5, 1], 2: [1, 5]}, {})  # broker 5 is not live
    registry.write_partition_state(b, "k", 2, 1, 6, [1], 0)  # as the cache has it: nothing to do
    tid = registry.topic_id(a, "k")
    cache = {("k", p): st | {"topic_id": tid} for p, st in registry.partition_states(a, "k", [0, 1, 2]).items()}
    # a state of an earlier topic named "k", at the same version: not this topic's, so read, not decided from
    cache[("k", 0)] = {"leader": 5, "leader_epoch": 50, "isr": [5, 1], "zk_version": 0, "topic_id": tid - 1}
    registry.write_partition_state(b, "k", 1, 5, 4, [5, 1], 0)  # the cache is a version behind
    registry.write_partition_state(b, "k", 2, 5, 7, [5, 1], 1)  # and does not know broker 5 took this one
    c = Controller(a, 1, lambda _topic: False, known=lambda: dict(cache))
    try:
        assert c.elect() == 1 and c.active
        wait_until(lambda: [registry.partition_state(b, "k", p)["leader"] for p in range(3)] == [1, 1, 1], 10,
                   "every partition led by the live broker")  # fmt: skip
        assert [(st["leader_epoch"], st["isr"]) for st in registry.partition_states(b, "k", [0, 1, 2]).values()] \
            == [(1, [1]), (5, [1]), (8, [1])]  # fmt: skip
    finally:
        c.close()


def test_sightings_and_a_claim_whose_answer_was_lost(two_sessions):
    a, b = two_sessions
    c = Controller(a, 1, lambda _topic: False)
    try:
        assert c.elect() == 1 and c.active
        mine = a.exists(paths.CONTROLLER)
        c.observe(b"{}", mine)  # the watch seeing our own claim: nothing changes
        assert c.active and c.holder == 1
        a.delete(paths.CONTROLLER)  # our znode gone (as with the session) and another broker's claim
        other = registry.claim_controller(b, 2)
        c.observe(b"{}", mine)  # a stale sighting (an older znode) changes nothing either
        c.observe(*b.get(paths.CONTROLLER))
        assert not c.active and c.holder == 2
        b.delete(paths.CONTROLLER)
        # a /controller of our own session that no claim of ours answered for (its answer lost): resigned, claimed
        a.create(paths.CONTROLLER, paths.controller_json(1), ephemeral=True)
        lost = a.exists(paths.CONTROLLER).czxid
        assert c.elect() == 1 and c.active
        now = a.exists(paths.CONTROLLER)
        assert now.czxid != lost and c.epoch_version == a.exists(paths.CONTROLLER_EPOCH).version > other.fence
    finally:
        c.close()


# --- sessions lost, again and again ----------------------------------------------------------------


def acting_controllers(brokers: list[BrokerProcess]) -> set[int]:
    """The brokers whose latest controller line in their log says they are the controller."""
    acting = set()
    for b in brokers:
        if not b.alive:
            continue
        lines = re.findall(r"broker \d+ (is the controller|is no longer the controller|was fenced)", b.log_text())
        if lines and lines[-1] == "is the controller":
            acting.add(b.broker_id)
    return acting


def one_controller(zk_connect: str, brokers: list[BrokerProcess]) -> int | None:
    """The controller, once `/controller` names a live broker and it alone acts as controller."""
    named = controller_of(zk_connect)
    live = {b.broker_id for b in brokers if b.alive}
    return named if named in live and acting_controllers(brokers) == {named} else None


def elect_preferred(zk_connect: str) -> bool:
    """`kafkactl topic elect-leaders`: True once the controller took the request and every partition is led by
    its preferred replica (a request left pending by an earlier try is taken first)."""
    r = cli("topic", "elect-leaders", TOPIC, "-z", zk_connect, timeout=60)
    return r.returncode == 0


@pytest.mark.slow
@pytest.mark.chaos
def test_after_every_lost_session_one_broker_acts_as_controller(private_zk, tmp_path):
    chroot = new_chroot(private_zk.connect_string)
    brokers = [BrokerProcess(i, chroot, tmp_path, overrides=OVERRIDES) for i in (1, 2, 3)]
    zk_pid = private_zk.pid
    assert zk_pid is not None
    paused = False
    try:
        for b in brokers:
            b.start()
        create(brokers, TOPIC, 6, 3, 1)
        wait_until(lambda: full_isr(chroot, TOPIC), 30, "every replica in sync")
        preferred = {p: r[0] for p, r in replicas_of(chroot, TOPIC).items()}
        for n in range(ROUNDS):
            os.kill(zk_pid, signal.SIGSTOP)  # ZooKeeper stops answering: every session times out
            paused = True
            time.sleep(3 * SESSION_MS / 1000)
            os.kill(zk_pid, signal.SIGCONT)
            paused = False
            wait_until(lambda: one_controller(chroot, brokers), 60, f"round {n}: one broker acting as controller")
            wait_until(lambda: full_isr(chroot, TOPIC), 60, f"round {n}: every replica back in sync")
            # the controller carries out a preferred-leader election (it is acting, not only named)
            wait_until(lambda: elect_preferred(chroot), 120, f"round {n}: a preferred leader election", interval=1)
            assert {p: st["leader"] for p, st in states(chroot, TOPIC).items()} == preferred
            assert one_controller(chroot, brokers), f"round {n}: the controller changed under the election"
        controller = one_controller(chroot, brokers)
        victim = next(b for b in brokers if b.broker_id != controller)
        led = [p for p, st in states(chroot, TOPIC).items() if st["leader"] == victim.broker_id]
        assert led, "the victim leads some partitions (its preferred ones)"
        victim.kill()
        live = {b.broker_id for b in brokers if b.alive}
        wait_until(lambda: all(states(chroot, TOPIC)[p]["leader"] in live for p in led), 60,
                   f"partitions {led} of the killed broker {victim.broker_id} led by live brokers")  # fmt: skip
    finally:
        if paused:
            os.kill(zk_pid, signal.SIGCONT)
        for b in brokers:
            try:
                b.stop(timeout=20)
            except Exception:
                b.kill()
