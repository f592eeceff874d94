"""The fetch-session cache (KIP-227) and a fetcher's session builder, as pure logic."""

from __future__ import annotations

from typing import Any

from broker.protocol.errors import ErrorCode
from broker.protocol.messages.fetch import next_epoch
from broker.replication.fetch_session import FetchSessionBuilder
from broker.server.fetch_sessions import FetchSessions


def _part(p: int, offset: int, epoch: int = 0) -> dict[str, Any]:
    return {"partition": p, "current_leader_epoch": epoch, "fetch_offset": offset, "log_start_offset": 0,
            "partition_max_bytes": 1024}  # fmt: skip


def _req(session_id: int, epoch: int, parts: dict[str, list[dict]], forgotten: dict[str, list[int]] | None = None,
         replica: int = 1) -> dict[str, Any]:  # fmt: skip
    gone = [{"topic": t, "partitions": ps} for t, ps in (forgotten or {}).items()]
    named = [{"topic": t, "partitions": ps} for t, ps in parts.items()]
    return {"replica_id": replica, "session_id": session_id, "session_epoch": epoch, "topics": named,
            "forgotten_topics_data": gone}  # fmt: skip


def _out(p: int, hw: int, records: bytes = b"", error: int = 0) -> dict[str, Any]:
    return {"partition_index": p, "error_code": error, "high_watermark": hw, "last_stable_offset": hw,
            "log_start_offset": 0, "records": records, "aborted_transactions": []}  # fmt: skip


def _answer(topic: str, *outs: dict) -> list[dict]:
    return [{"topic": topic, "partitions": list(outs)}]


def _offsets(ctx: Any) -> dict[tuple[str, int], int]:
    return {(t, p["partition"]): p["fetch_offset"] for t, p in ctx.wanted}


def test_full_fetch_creates_a_session_and_answers_everything() -> None:
    cache = FetchSessions()
    ctx = cache.context(_req(0, 0, {"t": [_part(0, 5), _part(1, 7)]}))
    assert ctx.error == ErrorCode.NONE and ctx.session_id != 0 and len(cache) == 1
    assert _offsets(ctx) == {("t", 0): 5, ("t", 1): 7}
    answer = ctx.answer(_answer("t", _out(0, 5), _out(1, 7)))
    assert [p["partition_index"] for p in answer[0]["partitions"]] == [0, 1]


def test_sessionless_fetch_creates_nothing() -> None:
    cache = FetchSessions()
    ctx = cache.context(_req(0, -1, {"t": [_part(0, 5)]}, replica=-1))
    assert ctx.session_id == 0 and len(cache) == 0 and _offsets(ctx) == {("t", 0): 5}
    assert ctx.answer(_answer("t", _out(0, 5))) == _answer("t", _out(0, 5))


def test_incremental_fetch_covers_the_session_and_answers_only_news() -> None:
    cache = FetchSessions()
    sid = cache.context(_req(0, 0, {"t": [_part(0, 5), _part(1, 7)]})).session_id
    cache.get(sid).partitions[("t", 0)].news(_out(0, 5))
    cache.get(sid).partitions[("t", 1)].news(_out(1, 7))
    # names only partition 0 (moved to 6) and a new one, u-0: partition 1 is fetched from its last offset
    ctx = cache.context(_req(sid, 1, {"t": [_part(0, 6)], "u": [_part(0, 0)]}))
    assert ctx.error == ErrorCode.NONE and ctx.session_id == sid
    assert _offsets(ctx) == {("t", 0): 6, ("t", 1): 7, ("u", 0): 0}
    # t-0: the high watermark moved; t-1: nothing new; u-0: records
    answer = ctx.answer(_answer("t", _out(0, 6), _out(1, 7)) + _answer("u", _out(0, 0, records=b"x")))
    assert [(t["topic"], p["partition_index"]) for t in answer for p in t["partitions"]] == [("t", 0), ("u", 0)]
    # the same again: only what still has records
    ctx = cache.context(_req(sid, 2, {}))
    answer = ctx.answer(_answer("t", _out(0, 6), _out(1, 7)) + _answer("u", _out(0, 0, records=b"x")))
    assert answer == _answer("u", _out(0, 0, records=b"x"))


def test_an_error_or_a_changed_log_start_is_news() -> None:
    cache = FetchSessions()
    ctx = cache.context(_req(0, 0, {"t": [_part(0, 5), _part(1, 5)]}))
    ctx.answer(_answer("t", _out(0, 5), _out(1, 5)))
    ctx = cache.context(_req(ctx.session_id, 1, {}))
    moved = {**_out(1, 5), "log_start_offset": 3}
    answer = ctx.answer(_answer("t", _out(0, 5, error=ErrorCode.NOT_LEADER_OR_FOLLOWER), moved))
    assert [p["partition_index"] for p in answer[0]["partitions"]] == [0, 1]


def test_a_partition_named_again_is_answered_even_without_news() -> None:
    cache = FetchSessions()
    ctx = cache.context(_req(0, 0, {"t": [_part(0, 5), _part(1, 5)]}))
    ctx.answer(_answer("t", _out(0, 5), _out(1, 5)))
    ctx = cache.context(_req(ctx.session_id, 1, {"t": [_part(1, 5, epoch=1)]}))  # (its leader epoch changed)
    answer = ctx.answer(_answer("t", _out(0, 5), _out(1, 5)))
    assert [p["partition_index"] for p in answer[0]["partitions"]] == [1]


def test_a_partition_answered_with_records_is_read_last_next_time() -> None:
    cache = FetchSessions()
    ctx = cache.context(_req(0, 0, {"t": [_part(0, 0), _part(1, 0), _part(2, 0)]}))
    ctx.answer(_answer("t", _out(0, 0), _out(1, 0), _out(2, 0)))
    ctx = cache.context(_req(ctx.session_id, 1, {}))
    ctx.answer(_answer("t", _out(0, 0, records=b"x"), _out(1, 0), _out(2, 0)))
    assert [p["partition"] for _, p in cache.context(_req(ctx.session_id, 2, {})).wanted] == [1, 2, 0]


def test_forgotten_partitions_leave_the_session() -> None:
    cache = FetchSessions()
    sid = cache.context(_req(0, 0, {"t": [_part(0, 5), _part(1, 7)]})).session_id
    ctx = cache.context(_req(sid, 1, {}, forgotten={"t": [1]}))
    assert _offsets(ctx) == {("t", 0): 5}


def test_wrong_epoch_and_unknown_id_are_refused() -> None:
    cache = FetchSessions()
    sid = cache.context(_req(0, 0, {"t": [_part(0, 5)]})).session_id
    assert cache.context(_req(sid, 2, {})).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert cache.context(_req(sid + 1, 1, {})).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert cache.context(_req(sid, 1, {})).error == ErrorCode.NONE  # (a refused fetch moves nothing)
    assert cache.context(_req(sid, 1, {})).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH  # (replayed)
    assert next_epoch(0x7FFFFFFF) == 1


def test_a_full_fetch_naming_a_session_closes_it() -> None:
    cache = FetchSessions()
    sid = cache.context(_req(0, 0, {"t": [_part(0, 5)]})).session_id
    ctx = cache.context(_req(sid, -1, {"t": [_part(0, 5)]}))  # closes it, sessionless
    assert ctx.session_id == 0 and len(cache) == 0
    sid = cache.context(_req(0, 0, {"t": [_part(0, 5)]})).session_id
    new = cache.context(_req(sid, 0, {"t": [_part(0, 5)]})).session_id  # closes it, creates another
    assert new not in (0, sid) and cache.get(sid) is None and len(cache) == 1


def test_a_throttled_answer_is_sent_again() -> None:
    cache = FetchSessions()
    ctx = cache.context(_req(0, 0, {"t": [_part(0, 5)]}))
    ctx.answer(_answer("t", _out(0, 5)))
    assert cache.unsent(ctx.session_id, full=False) == ctx.session_id
    assert cache.context(_req(ctx.session_id, 1, {})).answer(_answer("t", _out(0, 5))) == _answer("t", _out(0, 5))
    assert cache.unsent(ctx.session_id, full=True) == 0 and len(cache) == 0  # a throttled full fetch: no session


def test_eviction_takes_the_least_recently_used_consumer_session_first() -> None:
    cache = FetchSessions(slots=3)
    follower = cache.context(_req(0, 0, {"t": [_part(0, 0)]}, replica=1)).session_id
    old = cache.context(_req(0, 0, {"t": [_part(0, 0)]}, replica=-1)).session_id
    recent = cache.context(_req(0, 0, {"t": [_part(0, 0)]}, replica=-1)).session_id
    cache.context(_req(old, 1, {}, replica=-1))  # used: `recent` is now the least recently used consumer's
    new = cache.context(_req(0, 0, {"t": [_part(0, 0)]}, replica=-1)).session_id
    assert new and cache.get(recent) is None and cache.get(old) and cache.get(follower) and len(cache) == 3


def test_a_consumer_never_evicts_a_follower() -> None:
    cache = FetchSessions(slots=2)
    first = cache.context(_req(0, 0, {"t": [_part(0, 0)]}, replica=1)).session_id
    second = cache.context(_req(0, 0, {"t": [_part(0, 0)]}, replica=2)).session_id
    ctx = cache.context(_req(0, 0, {"t": [_part(0, 0)]}, replica=-1))
    assert ctx.session_id == 0 and _offsets(ctx) == {("t", 0): 0}  # answered sessionless
    third = cache.context(_req(0, 0, {"t": [_part(0, 0)]}, replica=3)).session_id  # a follower evicts the LRU one
    assert third and cache.get(first) is None and cache.get(second)


def test_builder_names_only_what_changed_and_forgets_what_left() -> None:
    b = FetchSessionBuilder()
    wanted = {("t", 0): _part(0, 5), ("t", 1): _part(1, 7)}
    req = b.build(wanted)
    assert (req["session_id"], req["session_epoch"]) == (0, 0) and len(req["topics"][0]["partitions"]) == 2
    b.received(0, 42)
    req = b.build({("t", 0): _part(0, 6), ("t", 1): _part(1, 7)})
    assert (req["session_id"], req["session_epoch"]) == (42, 1)
    assert req["topics"] == [{"topic": "t", "partitions": [_part(0, 6)]}] and req["forgotten_topics_data"] == []
    b.received(0, 42)
    req = b.build({("t", 0): _part(0, 6)})
    assert req["topics"] == [] and req["forgotten_topics_data"] == [{"topic": "t", "partitions": [1]}]
    assert req["session_epoch"] == 2


def test_builder_falls_back_to_a_full_fetch_on_a_session_error() -> None:
    b = FetchSessionBuilder()
    wanted = {("t", 0): _part(0, 5)}
    b.build(wanted)
    b.received(0, 42)
    b.build(wanted)
    b.received(ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0)
    req = b.build(wanted)  # full, closing session 42
    assert (req["session_id"], req["session_epoch"]) == (42, 0) and req["topics"][0]["partitions"] == [_part(0, 5)]
    b.received(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0)
    assert b.build(wanted)["session_id"] == 0
    b.received(0, 0)  # the leader had no room: full fetches go on
    assert b.build(wanted)["session_epoch"] == 0


def test_builder_and_cache_together_keep_every_position() -> None:
    """Whatever moves, the leader's session sees the follower's own positions."""
    cache, b = FetchSessions(), FetchSessionBuilder()
    positions = {("t", p): 0 for p in range(5)}
    for step in range(12):
        if step % 3 == 1:
            positions[("t", step % 5)] += 2
        if step == 7:
            del positions[("t", 4)]
        req = {"replica_id": 1, **b.build({tp: _part(tp[1], o) for tp, o in positions.items()})}
        ctx = cache.context(req)
        assert _offsets(ctx) == positions
        b.received(ctx.error, ctx.session_id)
