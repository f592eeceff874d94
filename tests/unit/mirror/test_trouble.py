"""The mirror's troubles: each error said once and counted; the stuck partitions grouped in one short line;
the topic configs left to the target (MirrorMaker 2's DefaultConfigPropertyFilter)."""

from __future__ import annotations

from broker.mirror.topics import copied_configs
from broker.mirror.trouble import SOURCE, TARGET, Troubles, partition_list


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_error_is_said_once_then_counted_and_stuck_until_cleared() -> None:
    said: list[str] = []
    clock = Clock()
    t = Troubles(said.append, clock)
    for p in (0, 1, 2):
        t.hit(TARGET, "orders", p, "NOT_ENOUGH_REPLICAS", f"target orders partition {p} refuses batches")
    t.hit(TARGET, "orders", 0, "NOT_ENOUGH_REPLICAS")
    t.hit(SOURCE, "events", 3, "LEADER_NOT_AVAILABLE")
    t.note("THROTTLED", "the target throttles")
    t.note("THROTTLED")
    assert said == [
        "target orders partition 0 refuses batches; retrying (said once: more of NOT_ENOUGH_REPLICAS are counted)",
        "LEADER_NOT_AVAILABLE; retrying (said once: more of LEADER_NOT_AVAILABLE are counted)",
        "the target throttles; retrying (said once: more of THROTTLED are counted)",
    ]
    clock.now = 142.4
    assert t.stuck_line() == ("orders[0,1,2] NOT_ENOUGH_REPLICAS (for 42 s), "
                              "source events[3] LEADER_NOT_AVAILABLE (for 42 s)")  # fmt: skip
    assert t.tally() == "NOT_ENOUGH_REPLICAS 4, THROTTLED 2, LEADER_NOT_AVAILABLE 1"
    t.clear(TARGET, "orders", 1)
    t.clear_all(SOURCE, keep=set())
    assert t.stuck_line() == "orders[0,2] NOT_ENOUGH_REPLICAS (for 42 s)"
    t.clear(TARGET, "orders", 0)
    t.clear(TARGET, "orders", 2)
    assert t.stuck_line() == ""


def test_thousands_of_stuck_partitions_make_one_short_line() -> None:
    t = Troubles(lambda _: None, Clock())
    for p in range(2000):
        t.hit(TARGET, "big", p, "LEADER_NOT_AVAILABLE" if p % 2 else "NOT_ENOUGH_REPLICAS")
    for i in range(6):
        t.hit(TARGET, f"small{i}", 0, "TOPIC_AUTHORIZATION_FAILED")
    line = t.stuck_line()
    assert len(line) < 400, line
    assert line.endswith("4 more partitions")
    assert partition_list([0, 1, 2, 3, 4, 7, 9, 10]) == "0-4,7,9,10"
    assert partition_list(list(range(0, 40, 2))) == "0,2,4,6,8,10,12,14,16,18,20,22,+8"


def test_the_configs_of_the_target_cluster_are_not_copied() -> None:
    kept, left = copied_configs({"min.insync.replicas": "2", "retention.ms": "1000", "cleanup.policy": "compact",
                                 "unclean.leader.election.enable": "true", "message.timestamp.type": "LogAppendTime",
                                 "message.timestamp.difference.max.ms": "5", "segment.bytes": "1048576",
                                 "leader.replication.throttled.replicas": "0:1",
                                 "follower.replication.throttled.replicas": "0:2"})  # fmt: skip
    assert kept == {"retention.ms": "1000", "cleanup.policy": "compact", "segment.bytes": "1048576"}
    assert set(left) == {"min.insync.replicas", "unclean.leader.election.enable", "message.timestamp.type",
                         "message.timestamp.difference.max.ms", "leader.replication.throttled.replicas",
                         "follower.replication.throttled.replicas"}  # fmt: skip


def test_a_produce_answer_tells_its_throttle_time() -> None:
    from broker.mirror.engine import read_produce_answer
    from broker.protocol.messages.produce import PRODUCE_RESPONSE
    from broker.protocol.primitives import Reader

    for version in (3, 8):
        for throttle in (0, 1234):
            answer = {"topics": [{"name": "orders", "partitions": [
                {"index": 2, "error_code": 19, "base_offset": -1, "record_errors": [], "error_message": None}]}],
                "throttle_time_ms": throttle}  # fmt: skip
            results, got = read_produce_answer(Reader(PRODUCE_RESPONSE.encode(answer, version)), version)
            assert got == throttle and [(r.topic, r.partition, r.error_code) for r in results] == [("orders", 2, 19)]
