"""Incremental fetch sessions (KIP-227) between real brokers: the followers' fetchers use them, acks=all and
the ISR work as before, and a session lost (a leader restarted, or evicted from a one-slot cache) is replaced by
a full fetch with a new one. A consumer's Fetch sees the session semantics on the wire."""

from __future__ import annotations

import asyncio

from broker.protocol.api import ApiKey
from tests.integration.helpers import connect, fetch_body, produce, wait_until
from tests.integration.test_replication import (
    OVERRIDES,
    create,
    full_isr,
    identical_replicas,
    produce_acked,
    read_values,
    states,
)


def _replicated(brokers, zk_chroot: str, topic: str, values: list[bytes]) -> None:
    """Every value acknowledged (acks=all), the ISR full and every replica's files the same."""
    acked, errors = asyncio.run(produce_acked(brokers[0].bootstrap, topic, values))
    assert not errors and acked == values
    wait_until(lambda: full_isr(zk_chroot, topic), 15, "every replica in the ISR")
    wait_until(lambda: identical_replicas(brokers, zk_chroot, topic), 15, "identical segment files")


def test_replication_with_sessions_survives_a_leader_restart_and_a_one_slot_cache(start_broker, zk_chroot):
    # broker 1 keeps one session: its two followers evict each other's, each fetch after is refused
    # (FETCH_SESSION_ID_NOT_FOUND) and falls back to a full one
    brokers = [start_broker(i, overrides={**OVERRIDES, **slots}) for i, slots in
               ((1, {"max.incremental.fetch.session.cache.slots": "1"}), (2, {}), (3, {}))]  # fmt: skip
    create(brokers, "sessions", 12, 3, 2)
    first = [f"a{i:04d}".encode() for i in range(600)]
    _replicated(brokers, zk_chroot, "sessions", first)
    assert any("FETCH_SESSION_ID_NOT_FOUND" in b.log_text() for b in brokers[1:])

    # a leader's restart loses every session it held; its followers start again with full fetches
    led = {st["leader"] for st in states(zk_chroot, "sessions").values()}
    victim = next(b for b in brokers if b.broker_id in led and b.broker_id != 1)
    victim.stop()
    victim.start()
    wait_until(lambda: full_isr(zk_chroot, "sessions"), 30, "the restarted broker back in every ISR")
    second = [f"b{i:04d}".encode() for i in range(600)]
    _replicated(brokers, zk_chroot, "sessions", second)
    assert sorted(read_values(brokers[2].bootstrap, "sessions", 1200)) == sorted(first + second)


def test_a_consumer_fetch_session_on_the_wire(start_broker, zk_chroot):
    (b,) = [start_broker(1, overrides=OVERRIDES)]
    create([b], "wire", 2, 1, 1)
    with connect(b.bootstrap) as conn:
        body = fetch_body("wire", 0)
        p0 = body["topics"][0]["partitions"][0]
        body["topics"][0]["partitions"].append({**p0, "partition": 1})
        full = conn.request(ApiKey.FETCH, {**body, "session_epoch": 0}, version=11)
        sid = full["session_id"]
        assert full["error_code"] == 0 and sid != 0
        assert sorted(p["partition_index"] for p in full["topics"][0]["partitions"]) == [0, 1]
        # nothing changed: an incremental fetch naming nothing answers nothing
        empty = {**body, "session_id": sid, "session_epoch": 1, "topics": []}
        answer = conn.request(ApiKey.FETCH, empty, version=11)
        assert (answer["error_code"], answer["session_id"], answer["topics"]) == (0, sid, [])
        # partition 1 gets records: only it is answered, from its last offset (0)
        produce(conn, "wire", 1, [b"x", b"y"])
        answer = conn.request(ApiKey.FETCH, {**empty, "session_epoch": 2}, version=11)
        assert [(t["topic"], p["partition_index"], p["high_watermark"]) for t in answer["topics"]
                for p in t["partitions"]] == [("wire", 1, 2)]  # fmt: skip
        # partition 1 moved to its end (a partition named is answered), partition 0 is forgotten
        moved = {**p0, "partition": 1, "fetch_offset": 2}
        answer = conn.request(ApiKey.FETCH, {**empty, "session_epoch": 3, "topics": [{"topic": "wire", "partitions": [
            moved]}], "forgotten_topics_data": [{"topic": "wire", "partitions": [0]}]}, version=11)  # fmt: skip
        assert [(p["partition_index"], p["high_watermark"], bytes(p["records"] or b"")) for t in answer["topics"]
                for p in t["partitions"]] == [(1, 2, b"")]  # fmt: skip
        # a record on the forgotten partition 0 is not answered either
        produce(conn, "wire", 0, [b"z"])
        answer = conn.request(ApiKey.FETCH, {**empty, "session_epoch": 4}, version=11)
        assert answer["error_code"] == 0 and answer["topics"] == []
        wrong = conn.request(ApiKey.FETCH, {**empty, "session_epoch": 9}, version=11)
        assert wrong["error_code"] == 71 and wrong["topics"] == []  # INVALID_FETCH_SESSION_EPOCH
        unknown = conn.request(ApiKey.FETCH, {**empty, "session_id": sid + 1, "session_epoch": 5}, version=11)
        assert unknown["error_code"] == 70  # FETCH_SESSION_ID_NOT_FOUND
        # sessionless (what librdkafka and kafka-python send) is as before: every partition named is answered
        plain = conn.request(ApiKey.FETCH, body, version=11)
        assert plain["session_id"] == 0 and len(plain["topics"][0]["partitions"]) == 2
