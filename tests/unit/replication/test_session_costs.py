"""A replica fetch costs what changed, not the session's size: the leader leaves quiet partitions alone until
something wakes them (`handlers.fetch._not_quiet` with the session's watch and clock), and the follower
recomputes the fetch fields only of what it touched (`ReplicaFetcher._request`)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

from broker.protocol.errors import ErrorCode
from broker.records.batch import Record, build_batch
from broker.replication.fetcher import SWEEP_S, ReplicaFetcher
from broker.server.cache import PartitionInfo
from broker.server.fetch_sessions import SWEEP_MS, FetchSessions
from broker.server.handlers.fetch import _not_quiet
from tests.unit.replication.leader import TP, leader_manager


def _entry(offset: int, epoch: int = 0) -> dict[str, Any]:
    return {"partition": TP[1], "current_leader_epoch": epoch, "fetch_offset": offset, "log_start_offset": 0,
            "partition_max_bytes": 1024}  # fmt: skip


def _req(session_id: int, epoch: int, named: list[dict[str, Any]]) -> dict[str, Any]:
    topics = [{"topic": TP[0], "partitions": named}] if named else []
    return {"replica_id": 2, "session_id": session_id, "session_epoch": epoch, "topics": topics,
            "forgotten_topics_data": []}  # fmt: skip


def test_a_quiet_partition_is_left_alone_until_something_wakes_it(tmp_path, monkeypatch):
    m, plog = leader_manager(tmp_path)
    for i in range(10):
        plog.append(build_batch([Record(0, 0, None, b"v%d" % i)]))
    m.replica_fetched(TP, 2, 10, plog)
    m.replica_fetched(TP, 3, 10, plog)
    b = SimpleNamespace(replicas=m, logs=m.logs)
    cache = FetchSessions(purgatory=m.purgatory)  # type: ignore[arg-type]
    ctx = cache.context(_req(0, 0, [_entry(10)]))
    session = ctx.session
    assert session is not None and session.watch is not None
    ctx.answer([{"topic": TP[0], "partitions": [{"partition_index": 0, "error_code": 0, "high_watermark": 10,
                                                  "last_stable_offset": 10, "log_start_offset": 0}]}])  # fmt: skip
    looked: list[tuple[str, int]] = []
    real = m.quiet_fetch

    def counting(tp: tuple[str, int], *args: Any) -> bool:
        looked.append(tp)
        return real(tp, *args)

    monkeypatch.setattr(m, "quiet_fetch", counting)

    def fetch(epoch: int) -> list:
        cache.context(_req(session.id, epoch, []))
        return _not_quiet(b, session, 2, session.watch.drain())  # type: ignore[union-attr,arg-type]

    assert fetch(1) == [] and looked == [TP] and TP in session.quiet and TP not in session.loud  # left quiet
    follower = m.leaders[TP].followers[2]
    assert follower.quiet is session.clock
    looked.clear()
    time.sleep(0.01)
    assert fetch(2) == [] and looked == []  # nothing woke it: not looked at, and still caught up as of now
    assert follower.caught_up() == session.clock.ms > follower.caught_up_ms
    assert not m.leaders[TP].lagging(session.clock.ms + 50, 100)
    assert m.leaders[TP].lagging(session.clock.ms + 200, 100)  # (its session stopped fetching: it lags)

    plog.append(build_batch([Record(0, 0, None, b"new")]))
    m.purgatory.notify(TP)  # (as the produce path does)
    assert fetch(3) == [(TP[0], _entry(10))] and looked == [TP] and TP not in session.quiet  # read: records

    m.replica_fetched(TP, 2, 11, plog)  # its next fetch names the partition, read the usual way
    m.replica_fetched(TP, 3, 11, plog)
    assert follower.quiet is None  # (what the quiet fetches said is taken into its own figures)
    session.partitions[TP].fetch = _entry(11)
    session.partitions[TP].high_watermark = session.partitions[TP].last_stable_offset = 11
    looked.clear()
    assert fetch(4) == [] and looked == [TP]  # caught up again: quiet
    looked.clear()
    session.swept_ms -= SWEEP_MS  # once a second every partition is looked at, woken or not
    assert fetch(5) == [] and looked == [TP]

    looked.clear()
    m.fetching = False  # (no fetcher of its own in this test)
    m.apply(TP, PartitionInfo([1, 2, 3], 2, 1, [1, 2, 3]))  # broker 2 leads now: the sessions are woken
    assert fetch(6) == [(TP[0], _entry(11))] and looked == [TP]


def test_a_session_watch_follows_the_session_and_goes_with_it(tmp_path):
    m, plog = leader_manager(tmp_path)
    cache = FetchSessions(slots=1, purgatory=m.purgatory)  # type: ignore[arg-type]
    first = cache.context(_req(0, 0, [_entry(0)])).session
    assert first is not None and m.purgatory.waiting() == 1
    cache.context({**_req(first.id, 1, []), "forgotten_topics_data": [{"topic": TP[0], "partitions": [0]}]})
    assert m.purgatory.waiting() == 0
    cache.context(_req(first.id, 2, [_entry(0)]))
    assert m.purgatory.waiting() == 1
    second = cache.context(_req(0, 0, [_entry(0)])).session  # evicts the first (one slot)
    assert second is not None and cache.get(first.id) is None and m.purgatory.waiting() == 1
    cache.context(_req(second.id, -1, []))  # closed
    assert m.purgatory.waiting() == 0


class _Log:
    def __init__(self, end: int) -> None:
        self.log_end_offset, self.log_start_offset = end, 0


def _fetcher(n: int) -> tuple[ReplicaFetcher, dict[tuple[str, int], _Log]]:
    logs = {("t", p): _Log(5) for p in range(n)}

    def append_copy(tp: tuple[str, int], plog: _Log, data: memoryview) -> None:
        plog.log_end_offset += 1

    config = SimpleNamespace(replica_fetch_max_bytes=1 << 20, replica_fetch_wait_max_ms=500)
    m = SimpleNamespace(broker_id=2, config=config,
                        throttle=SimpleNamespace(rate=None), is_throttled=lambda tp: False,
                        follower_log=lambda t, p: logs.get((t, p)), append_copy=append_copy,
                        follower_high_watermark=lambda *a: None, follower_log_start=lambda *a: None)  # fmt: skip
    fetcher = ReplicaFetcher(m, 1)  # type: ignore[arg-type]
    for tp in logs:
        fetcher.add(tp, 0)
        fetcher._truncated(tp, fetcher.partitions[tp])
    return fetcher, logs


def _named(req: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {(t["topic"], p["partition"]): p["fetch_offset"] for t in req["topics"] for p in t["partitions"]}


def _forgotten(req: dict[str, Any]) -> list[tuple[str, int]]:
    return [(t["topic"], p) for t in req["forgotten_topics_data"] for p in t["partitions"]]


def _send(fetcher: ReplicaFetcher, now: float) -> tuple[dict[str, Any], int]:
    req = fetcher._request(now)
    fetcher._sent += 1
    fetcher._session.received(0, 7)
    return req, fetcher._sent


def _take(fetcher: ReplicaFetcher, sent: int, *parts: dict[str, Any]) -> None:
    asyncio.run(fetcher._take(None, sent, {"topics": [{"topic": "t", "partitions": list(parts)}]}))  # type: ignore[arg-type]


def test_the_follower_names_only_what_it_touched():
    fetcher, logs = _fetcher(4)
    now = time.monotonic()
    req, sent = _send(fetcher, now)
    assert req["session_epoch"] == 0 and _named(req) == {("t", p): 5 for p in range(4)}
    req, sent = _send(fetcher, now)
    assert _named(req) == {} and _forgotten(req) == []
    batch = build_batch([Record(0, 0, None, b"x")])
    _take(fetcher, sent, {"partition_index": 1, "error_code": 0, "high_watermark": 6, "records": batch})
    logs[("t", 3)].log_start_offset = 2  # (its own retention: nothing the fetcher did)
    req, sent = _send(fetcher, now)
    assert _named(req) == {("t", 1): 6}  # the copy moved; the log start waits for the sweep
    req, sent = _send(fetcher, now + SWEEP_S)
    assert _named(req) == {("t", 3): 5}

    _take(fetcher, sent, {"partition_index": 2, "error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER, "records": b""})
    req, sent = _send(fetcher, now + SWEEP_S)
    assert _named(req) == {} and _forgotten(req) == [("t", 2)]  # paused: out of the session meanwhile
    fetcher._resume(now + SWEEP_S + 1)
    req, sent = _send(fetcher, now + SWEEP_S + 1)
    assert _named(req) == {("t", 2): 5}

    fetcher.add(("t", 0), 1)  # followed anew while a fetch is out: that fetch's answer is not for it
    _take(fetcher, sent, {"partition_index": 0, "error_code": 0, "high_watermark": 6, "records": batch})
    assert logs[("t", 0)].log_end_offset == 5
    req, sent = _send(fetcher, now + SWEEP_S + 1)
    assert _forgotten(req) == [("t", 0)]  # (truncated first, then named again at its new epoch)
    fetcher._truncated(("t", 0), fetcher.partitions[("t", 0)])
    req, sent = _send(fetcher, now + SWEEP_S + 1)
    assert _named(req) == {("t", 0): 5} and req["topics"][0]["partitions"][0]["current_leader_epoch"] == 1


def test_a_partition_leaving_the_quiet_set_stops_counting_the_sessions_fetches(tmp_path):
    """Forgotten (or named, or woken), a quiet partition's follower is caught up as of the session's last fetch
    that found it quiet, never later: a follower that stopped fetching a partition leaves its ISR in time."""
    m, plog = leader_manager(tmp_path)
    plog.append(build_batch([Record(0, 0, None, b"v")]))
    m.replica_fetched(TP, 2, 1, plog)
    m.replica_fetched(TP, 3, 1, plog)
    b = SimpleNamespace(replicas=m, logs=m.logs)
    cache = FetchSessions(purgatory=m.purgatory)  # type: ignore[arg-type]
    session = cache.context(_req(0, 0, [_entry(1)])).session
    assert session is not None
    session.partitions[TP].high_watermark = session.partitions[TP].last_stable_offset = 1
    session.partitions[TP].log_start_offset = 0
    cache.context(_req(session.id, 1, []))
    assert _not_quiet(b, session, 2, session.watch.drain()) == []  # type: ignore[union-attr]
    quiet_at = session.clock.ms
    follower = m.leaders[TP].followers[2]
    cache.context({**_req(session.id, 2, []), "forgotten_topics_data": [{"topic": TP[0], "partitions": [0]}]})
    assert follower.quiet is None and follower.caught_up() == quiet_at
    session.clock.ms += 10_000  # (the session goes on fetching its other partitions)
    assert 2 in m.leaders[TP].lagging(quiet_at + 200, 100)  # (3 has not fetched either)

    # woken between two fetches: caught up as of the fetch before, not the one that finds it behind
    cache.context(_req(session.id, 3, [_entry(1)]))  # named again: read the usual way, and answered
    m.replica_fetched(TP, 2, 1, plog)
    c = session.partitions[TP]
    c.high_watermark = c.last_stable_offset = 1
    c.log_start_offset = 0
    cache.context(_req(session.id, 4, []))
    assert _not_quiet(b, session, 2, session.watch.drain()) == []  # type: ignore[union-attr]
    confirmed = session.clock.ms
    time.sleep(0.05)
    plog.append(build_batch([Record(0, 0, None, b"w")]))
    m.purgatory.notify(TP)
    cache.context(_req(session.id, 5, []))
    assert _not_quiet(b, session, 2, session.watch.drain()) == [(TP[0], _entry(1))]
    assert follower.quiet is None and follower.caught_up() == confirmed < session.clock.ms
