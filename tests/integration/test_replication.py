"""Replication between real brokers (issue 14): followers copy their leaders byte for byte, acks=all waits
for the ISR, the controller elects a new leader from the ISR when one dies, a controlled shutdown moves
leadership first, and a partition whose whole ISR is gone stays offline with nothing truncated.

Three broker processes on one real ZooKeeper, with a short session timeout so failover is quick.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from broker.client.producer import AsyncProducer
from broker.protocol.api import ApiKey
from tests.integration.helpers import (
    cli,
    connect,
    controller_of,
    json_lines,
    make_batch,
    metadata,
    ok,
    produce_body,
    wait_until,
    zk_json,
    zk_session,
)

SESSION_MS = 6000
OVERRIDES = {"zookeeper.session.timeout.ms": str(SESSION_MS), "replica.lag.time.max.ms": "2000"}


def start3(start_broker, ids=(1, 2, 3)):
    return [start_broker(i, overrides=OVERRIDES) for i in ids]


def states(zk_connect: str, topic: str) -> dict[int, dict]:
    with zk_session(zk_connect) as zk:
        parts = zk_json(zk, f"/brokers/topics/{topic}")["partitions"]
        return {int(p): zk_json(zk, f"/brokers/topics/{topic}/partitions/{p}/state") for p in parts}


def replicas_of(zk_connect: str, topic: str) -> dict[int, list[int]]:
    with zk_session(zk_connect) as zk:
        return {int(p): r for p, r in zk_json(zk, f"/brokers/topics/{topic}")["partitions"].items()}


def full_isr(zk_connect: str, topic: str) -> bool:
    reps = replicas_of(zk_connect, topic)
    return all(sorted(st["isr"]) == sorted(reps[p]) for p, st in states(zk_connect, topic).items())


def segment_bytes(log_dir: Path, topic: str, partition: int) -> bytes:
    d = log_dir / f"{topic}-{partition}"
    return b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))


def identical_replicas(brokers, zk_connect: str, topic: str) -> bool:
    by_id = {b.broker_id: b for b in brokers}
    for p, reps in replicas_of(zk_connect, topic).items():
        copies = {segment_bytes(by_id[r].log_dir, topic, p) for r in reps if r in by_id}
        if len(copies) != 1:
            return False
    return True


def create(brokers, topic: str, partitions: int, rf: int, min_isr: int) -> None:
    ok(cli("topic", "create", topic, "-p", partitions, "-r", rf, "--config", f"min.insync.replicas={min_isr}",
           "-b", brokers[0].bootstrap))  # fmt: skip


async def produce_acked(bootstrap: str, topic: str, values: list[bytes], **cfg) -> tuple[list[bytes], list[str]]:
    """Send `values` (acks=all, idempotent); returns those acknowledged and the errors of the others."""
    producer = await AsyncProducer(bootstrap, acks="all", linger_ms=2, delivery_timeout_ms=60000, **cfg).start()
    try:
        deliveries = [(v, await producer.send(topic, v, key=v)) for v in values]
        acked, errors = [], []
        for v, d in deliveries:
            try:
                await d
                acked.append(v)
            except Exception as exc:
                errors.append(str(exc))
        return acked, errors
    finally:
        await producer.close()


def read_values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    r = cli("consume", topic, "-e", "-b", bootstrap, "--format", "%s\\n", timeout=60)
    ok(r)
    values = [ln.encode() for ln in r.stdout.splitlines() if ln]
    assert len(values) >= expected, f"read {len(values)} of {expected}"
    return values


def test_followers_copy_their_leader_byte_for_byte_and_acks_all_waits_for_the_isr(start_broker, zk_chroot):
    brokers = start3(start_broker)
    create(brokers, "copied", 3, 3, 2)
    values = [f"m{i:05d}".encode() for i in range(3000)]
    acked, errors = asyncio.run(produce_acked(brokers[0].bootstrap, "copied", values))
    assert not errors and acked == values
    wait_until(lambda: full_isr(zk_chroot, "copied"), 10, "every replica in the ISR")
    wait_until(lambda: identical_replicas(brokers, zk_chroot, "copied"), 10, "identical segment files")
    for b in brokers:  # every replica holds each of its partitions' records, leader epochs as stamped
        for p, reps in replicas_of(zk_chroot, "copied").items():
            assert b.broker_id in reps
            assert segment_bytes(b.log_dir, "copied", p), f"broker {b.broker_id} has no copy of partition {p}"
    assert sorted(read_values(brokers[1].bootstrap, "copied", 3000)) == values


def test_acks_all_is_refused_when_the_isr_is_smaller_than_min_insync_replicas(start_broker, zk_chroot):
    brokers = start3(start_broker)
    create(brokers, "strict", 1, 3, 3)
    (leader,) = {st["leader"] for st in states(zk_chroot, "strict").values()}
    victim = next(b for b in brokers if b.broker_id != leader)
    assert victim.stop() == 0  # a clean stop: it leaves the ISR at once
    wait_until(lambda: len(states(zk_chroot, "strict")[0]["isr"]) == 2, 10, "the ISR without the stopped broker")
    lead = next(b for b in brokers if b.broker_id == leader)
    with connect(lead.bootstrap) as conn:
        answer = conn.request(ApiKey.PRODUCE, produce_body("strict", 0, make_batch([b"x"]), acks=-1))
        assert answer["topics"][0]["partitions"][0]["error_code"] == 19  # NOT_ENOUGH_REPLICAS
        answer = conn.request(ApiKey.PRODUCE, produce_body("strict", 0, make_batch([b"y"]), acks=1))
        assert answer["topics"][0]["partitions"][0]["error_code"] == 0  # acks=1 is unchanged


@pytest.mark.chaos
def test_a_leader_killed_under_acks_all_loses_no_acknowledged_message(start_broker, zk_chroot):
    brokers = start3(start_broker)
    create(brokers, "failover", 3, 3, 2)
    first = [f"a{i:05d}".encode() for i in range(2000)]
    acked, errors = asyncio.run(produce_acked(brokers[0].bootstrap, "failover", first))
    assert not errors
    leader0 = states(zk_chroot, "failover")[0]["leader"]
    victim = next(b for b in brokers if b.broker_id == leader0)
    survivors = [b for b in brokers if b is not victim]

    async def produce_through_the_kill() -> tuple[list[bytes], list[str]]:
        acked, errors = [], []
        for chunk in range(30):  # the leader of partition 0 dies after the 5th chunk of 100
            if chunk == 5:
                victim.kill()
            values = [f"b{chunk:02d}-{i:03d}".encode() for i in range(100)]
            more, failed = await produce_acked(survivors[0].bootstrap, "failover", values)
            acked += more
            errors += failed
        return acked, errors

    started = time.monotonic()
    more, errors = asyncio.run(produce_through_the_kill())
    took = time.monotonic() - started
    assert not errors, errors[:3]
    acked += more
    st = states(zk_chroot, "failover")
    assert st[0]["leader"] != leader0 and leader0 not in st[0]["isr"]
    values = read_values(survivors[0].bootstrap, "failover", len(acked))
    assert sorted(values) == sorted(acked), "every acknowledged message once, nothing else"  # idempotent: no dups
    victim.start()  # it comes back as a follower, catches up and rejoins every ISR
    wait_until(lambda: full_isr(zk_chroot, "failover"), 20, "the restarted broker back in every ISR")
    wait_until(lambda: identical_replicas(brokers, zk_chroot, "failover"), 10, "identical segment files")
    print(f"\n5,000 acks=all messages through a leader's kill -9 in {took:.1f}s (session timeout {SESSION_MS} ms)")


def test_a_controlled_shutdown_moves_leadership_before_the_broker_goes(start_broker, zk_chroot):
    brokers = start3(start_broker)
    create(brokers, "moved", 3, 3, 2)
    acked, _ = asyncio.run(produce_acked(brokers[0].bootstrap, "moved", [f"c{i}".encode() for i in range(300)]))
    wait_until(lambda: full_isr(zk_chroot, "moved"), 10, "full ISRs")
    victim = brokers[0]
    led = [p for p, st in states(zk_chroot, "moved").items() if st["leader"] == victim.broker_id]
    assert led
    assert victim.stop() == 0
    after = states(zk_chroot, "moved")  # moved by the broker itself before it stopped, not after its session
    for p, st in after.items():
        assert st["leader"] != victim.broker_id and victim.broker_id not in st["isr"], (p, st)
        if p in led:
            assert st["leader_epoch"] >= 1
    described = json_lines(ok(cli("topic", "describe", "--under-replicated", "-o", "json", "-b", brokers[1].bootstrap)))
    assert [(d["topic"], sorted(p["partition"] for p in d["partitions"])) for d in described] == [("moved", [0, 1, 2])]
    assert all(p["offline_replicas"] == [victim.broker_id] for p in described[0]["partitions"])
    assert ok(cli("topic", "describe", "--offline", "-b", brokers[1].bootstrap)).count("\n") <= 1  # none
    more, errors = asyncio.run(produce_acked(brokers[1].bootstrap, "moved", [f"d{i}".encode() for i in range(300)]))
    assert not errors
    assert sorted(read_values(brokers[1].bootstrap, "moved", 600)) == sorted(acked + more)


@pytest.mark.chaos
def test_unclean_election_off_keeps_a_partition_offline_until_its_last_in_sync_replica_returns(start_broker,
                                                                                               zk_chroot):  # fmt: skip
    brokers = start3(start_broker, ids=(1, 2))
    create(brokers, "last", 1, 2, 1)
    leader = states(zk_chroot, "last")[0]["leader"]
    lead, follower = sorted(brokers, key=lambda b: b.broker_id != leader)
    first, _ = asyncio.run(produce_acked(lead.bootstrap, "last", [f"e{i}".encode() for i in range(100)]))
    wait_until(lambda: full_isr(zk_chroot, "last"), 10, "full ISR")
    assert follower.stop() == 0  # the follower leaves the ISR
    wait_until(lambda: states(zk_chroot, "last")[0]["isr"] == [leader], 10, "ISR of the leader alone")
    with connect(lead.bootstrap) as conn:  # acks=1 writes only the leader has
        answer = conn.request(ApiKey.PRODUCE, produce_body("last", 0, make_batch([b"only-on-leader"]), acks=1))
        assert answer["topics"][0]["partitions"][0]["error_code"] == 0
    held = segment_bytes(lead.log_dir, "last", 0)
    lead.kill()
    follower.start()  # not in the ISR: it must not lead (what it lacks would be lost)
    wait_until(lambda: states(zk_chroot, "last")[0]["leader"] == -1, SESSION_MS / 1000 + 10, "partition offline")
    time.sleep(1)
    st = states(zk_chroot, "last")[0]
    assert st["leader"] == -1 and st["isr"] == [leader]
    md = metadata(follower.bootstrap, ["last"])
    assert md["topics"][0]["partitions"][0]["error_code"] == 5  # LEADER_NOT_AVAILABLE
    lead.start()  # the last in-sync replica is back: it leads, with everything it had
    wait_until(lambda: states(zk_chroot, "last")[0]["leader"] == leader, 15, "the old leader leading again")
    assert segment_bytes(lead.log_dir, "last", 0).startswith(held)
    wait_until(lambda: identical_replicas(brokers, zk_chroot, "last"), 15, "the follower caught up")
    values = read_values(lead.bootstrap, "last", 101)
    assert sorted(values) == sorted([*first, b"only-on-leader"])


@pytest.mark.chaos
def test_a_new_controller_takes_over_when_the_controller_dies(start_broker, zk_chroot):
    brokers = start3(start_broker)
    create(brokers, "ctl", 3, 3, 1)
    with zk_session(zk_chroot) as zk:
        controller = zk_json(zk, "/controller")["brokerid"]
    by_id = {b.broker_id: b for b in brokers}
    by_id[controller].kill()

    successor = wait_until(lambda: (c := controller_of(zk_chroot)) not in (None, controller) and c,
                           SESSION_MS / 1000 + 10, "another controller")  # fmt: skip
    # it elects leaders for what the dead one led (it registers as controller first, then elects)
    wait_until(
        lambda: all(st["leader"] in by_id and st["leader"] != controller for st in states(zk_chroot, "ctl").values()),
        10,
        "leaders elected by the new controller",
    )
    other = next(i for i in by_id if i not in (controller, successor))
    led_by_other = [p for p, st in states(zk_chroot, "ctl").items() if st["leader"] == other]
    assert by_id[other].stop() == 0
    for p in led_by_other:
        wait_until(lambda p=p: states(zk_chroot, "ctl")[p]["leader"] == successor, 10, f"partition {p} moved")
    acked, errors = asyncio.run(produce_acked(by_id[successor].bootstrap, "ctl", [b"after"] * 10))
    assert not errors and len(acked) == 10


@pytest.mark.chaos
def test_an_old_leader_back_as_follower_cuts_what_it_alone_held_and_copies_the_new_leader(start_broker, zk_chroot):
    """Its acks=1 tail was never copied; the new leader wrote other batches at those offsets in a new epoch. The
    old leader asks where its epoch ends in the new leader's log (OffsetsForLeaderEpoch) and truncates there."""
    brokers = start3(start_broker, ids=(1, 2))
    create(brokers, "diverge", 1, 2, 1)
    leader = states(zk_chroot, "diverge")[0]["leader"]
    old, new = sorted(brokers, key=lambda b: b.broker_id != leader)
    first, _ = asyncio.run(produce_acked(old.bootstrap, "diverge", [f"f{i}".encode() for i in range(50)]))
    wait_until(lambda: identical_replicas(brokers, zk_chroot, "diverge"), 10, "the follower caught up")
    new.pause()  # the follower stops copying for a moment (well within replica.lag.time.max.ms)
    try:
        time.sleep(0.8)  # its fetch in flight is answered (empty, after replica.fetch.wait.max.ms) meanwhile
        with connect(old.bootstrap) as conn:  # acks=1: written by the leader alone
            answer = conn.request(ApiKey.PRODUCE, produce_body("diverge", 0, make_batch([b"lost"] * 5), acks=1))
            assert answer["topics"][0]["partitions"][0]["error_code"] == 0
        old.kill()
    finally:
        new.resume()
    wait_until(lambda: states(zk_chroot, "diverge")[0]["leader"] == new.broker_id, SESSION_MS / 1000 + 10,
               "the follower elected")  # fmt: skip
    later, errors = asyncio.run(produce_acked(new.bootstrap, "diverge", [f"g{i}".encode() for i in range(20)]))
    assert not errors
    old.start()
    wait_until(lambda: identical_replicas(brokers, zk_chroot, "diverge"), 15, "the old leader's copy = the new log")
    assert "truncating its log from 55 to 50" in old.log_text()
    assert sorted(read_values(new.bootstrap, "diverge", 70)) == sorted(first + later)


def test_partitions_added_under_load_get_replicas_and_every_message_stays(start_broker, zk_chroot):
    from kafka.admin import KafkaAdminClient, NewPartitions

    brokers = start3(start_broker)
    create(brokers, "grow", 2, 2, 1)
    bootstrap = ",".join(b.bootstrap for b in brokers)

    async def produce_while_growing() -> tuple[list[bytes], list[str]]:
        first = asyncio.ensure_future(produce_acked(bootstrap, "grow", [f"h{i}".encode() for i in range(3000)]))
        await asyncio.sleep(0.05)
        out = await asyncio.to_thread(cli, "topic", "alter", "grow", "--partitions", "4", "-b", brokers[1].bootstrap)
        ok(out)
        return await first

    acked, errors = asyncio.run(produce_while_growing())
    assert not errors
    reps = replicas_of(zk_chroot, "grow")
    assert sorted(reps) == [0, 1, 2, 3] and all(len(r) == 2 and len(set(r)) == 2 for r in reps.values()), reps
    admin = KafkaAdminClient(bootstrap_servers=brokers[2].bootstrap, request_timeout_ms=10000)
    try:  # a third party's CreatePartitions (kafka-python's hand-written v1 request)
        admin.create_partitions({"grow": NewPartitions(total_count=6)})
    finally:
        admin.close()
    wait_until(lambda: sorted(replicas_of(zk_chroot, "grow")) == list(range(6)), 10, "six partitions")
    wait_until(lambda: full_isr(zk_chroot, "grow"), 10, "every replica of the new partitions in sync")
    more = []
    for p in range(6):  # each new partition has a leader that takes writes, and followers that copy them
        lead = next(b for b in brokers if b.broker_id == states(zk_chroot, "grow")[p]["leader"])
        with connect(lead.bootstrap) as conn:
            value = f"p{p}".encode()
            answer = conn.request(ApiKey.PRODUCE, produce_body("grow", p, make_batch([value]), acks=-1))
            assert answer["topics"][0]["partitions"][0]["error_code"] == 0
            more.append(value)
    wait_until(lambda: identical_replicas(brokers, zk_chroot, "grow"), 10, "identical copies")
    assert sorted(read_values(brokers[0].bootstrap, "grow", len(acked) + 6)) == sorted(acked + more)
    r = cli("topic", "alter", "grow", "--partitions", "3", "-b", brokers[0].bootstrap)
    assert r.returncode == 1 and "INVALID_PARTITIONS" in r.stderr and "Traceback" not in r.stderr


def test_an_idempotent_batch_that_expired_unanswered_never_lends_its_sequences_to_the_next(start_broker):
    """m1 expires while the broker is paused, but the broker appends it once it resumes. Reusing m1's sequence
    for m2 made m2 pass for a duplicate of m1: acknowledged, never stored. The producer takes a new id instead."""
    b = start_broker(1)
    ok(cli("topic", "create", "fate", "-b", b.bootstrap))

    async def main() -> tuple[list, list]:
        producer = await AsyncProducer(b.bootstrap, acks="all", linger_ms=0, delivery_timeout_ms=1500,
                                       request_timeout_ms=1000, retry_backoff_ms=50).start()  # fmt: skip
        outcomes = []
        try:
            outcomes.append(await (await producer.send("fate", b"m0", partition=0)))
            first_id = producer.producer_id
            b.pause()
            try:
                pending = await producer.send("fate", b"m1", partition=0)
                with pytest.raises(Exception, match="delivery.timeout.ms"):
                    await pending
            finally:
                b.resume()
            outcomes.append(await (await producer.send("fate", b"m2", partition=0)))
            return outcomes, [first_id, producer.producer_id]
        finally:
            await producer.close()

    outcomes, ids = asyncio.run(main())
    assert ids[0] != ids[1]  # a new producer id after the batch of unknown fate
    stored = wait_until(lambda: (v := read_values(b.bootstrap, "fate", 2)) and b"m2" in v and v, 10, "m2 stored")
    assert stored == [b"m0", b"m1", b"m2"]  # m1 was appended after all: at least once, never a phantom ack
    assert [o.offset for o in outcomes] == [0, 2]


def test_elect_leaders_moves_leadership_back_to_the_preferred_replicas(start_broker, zk_chroot):
    brokers = start3(start_broker)
    create(brokers, "prefer", 3, 3, 1)
    preferred = {p: r[0] for p, r in replicas_of(zk_chroot, "prefer").items()}
    victim = brokers[0]
    assert victim.stop() == 0  # its partitions move to other replicas
    assert all(st["leader"] != victim.broker_id for st in states(zk_chroot, "prefer").values())
    r = cli("topic", "elect-leaders", "nope", "-z", zk_chroot)
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == "kafkactl: error: unknown topic 'nope'"
    r = cli("topic", "elect-leaders", "prefer", "-z", zk_chroot)  # the preferred replica of some is down
    assert r.returncode == 1 and "not on their preferred replica" in r.stderr and "Traceback" not in r.stderr
    victim.start()
    wait_until(lambda: full_isr(zk_chroot, "prefer"), 20, "the restarted broker back in every ISR")
    out = json_lines(ok(cli("topic", "elect-leaders", "prefer", "-z", zk_chroot, "-o", "json")))
    assert {(d["partition"], d["leader"]) for d in out} == set(preferred.items())
    assert {p: st["leader"] for p, st in states(zk_chroot, "prefer").items()} == preferred
    acked, errors = asyncio.run(produce_acked(victim.bootstrap, "prefer", [b"after"] * 5))
    assert not errors and len(acked) == 5
