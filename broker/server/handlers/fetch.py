"""Fetch and ListOffsets: file slices of the leader's log for consumers and followers, offsets by position or time.

A consumer reads below the high watermark; a follower (replica id ≥ 0) reads to the log end, and its
fetch offset tells the leader how far its copy got (`ReplicaManager.replica_fetched`). A follower that
names another leader epoch than the leader's is refused: FENCED_LEADER_EPOCH when its epoch is older,
UNKNOWN_LEADER_EPOCH when newer (this broker has not heard of it yet). With an authorizer a consumer
needs Read on each topic and a follower ClusterAction on the cluster, else TOPIC_AUTHORIZATION_FAILED and
no records (as Kafka).

A consumer fetching with isolation_level 1 (read_committed) reads only below the last stable offset
(`last_stable_offset`: the first offset of the oldest open transaction, at least the log start offset,
capped by the high watermark)
and gets the aborted transactions overlapping what it may read (from the `.txnindex`,
`broker.log.txn_index`), so it can drop their records; every answer carries the real LSO. A marker
wakes the fetches waiting on its partition (the LSO moved); ListOffsets' "latest" under isolation 1 is
the LSO.

A fetch of Fetch v7+ may belong to an incremental fetch session (`broker.server.fetch_sessions`, KIP-227):
it then names only the partitions whose fetch fields changed, is read over all its session's partitions
(a follower's position is noted for each, from its last named offset) and answered with only those with news.

A fetch answers at once when `min_bytes` are there (or it asked for no wait); otherwise it waits in
the purgatory until an append brings enough or `max_wait_ms` passes. Each partition's records
leave as a `sendfile` of its segment file, at most `partition_max_bytes` (but always one whole batch
for the first partition with data) and `max_bytes` in all.
"""

from __future__ import annotations

import functools
import os
import time
from typing import TYPE_CHECKING, Any

from broker.errors import OffsetOutOfRangeError
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import RequestHeader
from broker.protocol.messages.fetch import EARLIEST, LATEST
from broker.security.acl import Operation, ResourceType
from broker.security.acl_authorizer import allowed, cluster_allowed
from broker.server.fetch_sessions import SWEEP_MS
from broker.server.network import FileRegion

if TYPE_CHECKING:
    from broker.server.fetch_sessions import FetchContext, FetchSession
    from broker.server.services import Services


async def handle_fetch(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    deadline = time.monotonic() + max(req["max_wait_ms"], 0) / 1000
    min_bytes = req["min_bytes"]
    replica = req["replica_id"]
    ctx = b.fetch_sessions.context(req)  # (an incremental fetch covers all its session's partitions)
    if ctx.error:
        return {"error_code": ctx.error, "session_id": 0, "topics": []}
    session = ctx.session
    denied = _denied(b, ctx, replica)
    committed = req.get("isolation_level", 0) == 1 and replica < 0
    read = functools.partial(_read_all, b, max_bytes=req["max_bytes"], replica=replica, denied=denied,
                             committed=committed)  # fmt: skip
    # registered before the first read, so that an append while it reads wakes the wait that follows: the
    # session's own watch (what it noted since the last fetch of the session tells what may have changed), or
    # one for this fetch
    own = session is not None and session.watch is not None and not session.busy
    if own:
        assert session is not None and session.watch is not None
        session.busy, watch, since = True, session.watch, session.watch.drain()
    else:
        watch, since = b.purgatory.watch([(t, p["partition"]) for t, p in ctx.wanted]), None
    try:
        partial = ctx.incremental and replica >= 0 and not denied  # (only what may hold news is read)
        if partial:
            assert session is not None
            reading = _not_quiet(b, session, replica, since)  # (after the watch: an append now wakes it)
        else:
            reading = ctx.wanted
        covers = bool(session.partitions) if ctx.incremental and session is not None else bool(reading)
        topics, total, errors = await read(reading)  # (a follower's position is noted here, once)
        entries: dict[tuple[str, int], tuple[str, dict[str, Any]]] = {}  # (built at the first wake)
        outs: dict[tuple[str, int], dict[str, Any]] = {}
        while total < min_bytes and not errors and covers:
            woken = await watch.next(deadline - time.monotonic())
            if not woken:  # time is up: the answer is a fresh read of every partition read so far
                _release(topics)
                topics, total, errors = await read(reading, note=False)
                break
            # only what was woken is read again, into its place in the answer (a wait over thousands of
            # partitions then costs per append, not per partition)
            if not outs:
                if not ctx.incremental:
                    entries = {(t, p["partition"]): (t, p) for t, p in reading}
                outs = {(t["topic"], p["partition_index"]): p for t in topics for p in t["partitions"]}
            if ctx.incremental and session is not None:
                session.unquiet(woken)  # (the next fetch looks at them again)
                again = [(tp[0], session.partitions[tp].fetch) for tp in woken if tp in session.partitions]
            else:
                again = [entries[tp] for tp in woken if tp in entries]
            for t, p in again:
                out = outs.get((t, p["partition"]))
                if out is not None:
                    total -= _release_one(out)
            fresh, total, errors = await read(again, note=False, total=total)
            for t in fresh:
                for p in t["partitions"]:
                    key = (t["topic"], p["partition_index"])
                    out = outs.get(key)
                    if out is None:  # a quiet partition woken: it joins the answer (and a later re-read)
                        outs[key] = p
                        _partitions_of(topics, t["topic"]).append(p)
                        if partial and session is not None and key in session.partitions:
                            reading.append((t["topic"], session.partitions[key].fetch))
                    else:
                        out.clear()
                        out.update(p)
    finally:
        if own:
            assert session is not None
            session.busy = False
        else:
            watch.close()
    return {"error_code": 0, "session_id": ctx.session_id, "topics": ctx.answer(topics)}


def _not_quiet(b: Services, session: FetchSession, replica: int,
               woken: set[tuple[str, int]] | None) -> list[tuple[str, dict[str, Any]]]:  # fmt: skip
    """The partitions of a follower's incremental fetch to read: those it named, and those with something new
    for it; the others are noted as caught up without a read (`ReplicaManager.quiet_fetch`). With the
    session's watch (`woken`: what it noted since its last fetch), the partitions the last fetches left quiet
    and nothing woke are not looked at (they stay caught up by the session's clock), except in a sweep over all
    of them once every `SWEEP_MS`."""
    now_ms = int(time.monotonic() * 1000)
    quiet, loud, parts = session.quiet, session.loud, session.partitions
    if woken is None or now_ms - session.swept_ms >= SWEEP_MS:
        session.swept_ms = now_ms
        session.unquiet(list(quiet))
        looked = list(parts.items())
    else:
        session.unquiet(woken)
        looked = [(tp, parts[tp]) for tp in loud]
    is_quiet = b.replicas.quiet_fetch
    get = b.logs.get
    clock = session.clock
    out = []
    for tp, c in looked:
        fetch = c.fetch
        plog = get(*tp)
        sent = (c.high_watermark, c.last_stable_offset, c.log_start_offset)
        epoch = fetch.get("current_leader_epoch", -1)
        f = is_quiet(tp, replica, fetch["fetch_offset"], epoch, sent, plog, now_ms, clock) if plog is not None else None
        if f is not None:
            quiet[tp] = f
            loud.pop(tp, None)
        else:
            out.append((tp[0], fetch))
    clock.ms = now_ms  # (the quiet ones were caught up as of this fetch; the others' last was the one before)
    return out


def _partitions_of(topics: list[dict[str, Any]], topic: str) -> list[dict[str, Any]]:
    """The partitions list of `topic` in an answer's topics (added when it has none yet)."""
    for t in topics:
        if t["topic"] == topic:
            return t["partitions"]
    entry: dict[str, Any] = {"topic": topic, "partitions": []}
    topics.append(entry)
    return entry["partitions"]


def _denied(b: Services, ctx: FetchContext, replica: int) -> set[str]:
    """The topics the request may not read (as Kafka: a follower needs ClusterAction on the cluster, a
    consumer Read on each topic)."""
    a = b.authorizer
    if a is None:
        return set()
    if replica >= 0:
        return set() if cluster_allowed(a, Operation.CLUSTER_ACTION, "Fetch") else {t for t, _ in ctx.wanted}
    return {t for t in {t for t, _ in ctx.wanted} if not allowed(a, Operation.READ, ResourceType.TOPIC, t, "Fetch")}


def _release(topics: list[dict[str, Any]]) -> None:
    for t in topics:
        for p in t["partitions"]:
            _release_one(p)


def _release_one(out: dict[str, Any]) -> int:
    """Close the file slice a partition's answer holds; its length (0 without one)."""
    rec = out.get("records")
    if isinstance(rec, FileRegion):
        os.close(rec.fd)
        out["records"] = b""
        return rec.length
    return 0


def last_stable_offset(b: Services, plog: Any, hw: int | None = None) -> int:
    """The partition's last stable offset: below it every transaction is decided (the first offset of the
    oldest one still open here, but never below the log start offset: retention or DeleteRecords may remove
    an open transaction's first records, as Kafka's updateFirstUnstableOffset), and the ISR holds every
    record (the high watermark, `hw` when the caller has it)."""
    if hw is None:
        hw = b.high_watermark(plog)
    first = plog.producer_states.first_unstable_offset()
    return hw if first is None else min(hw, max(first, plog.log_start_offset))


async def _read_all(b: Services, wanted: list[tuple[str, dict[str, Any]]], max_bytes: int, replica: int = -1,
                    note: bool = True, denied: set[str] | frozenset[str] = frozenset(), committed: bool = False,
                    total: int = 0) -> tuple[list[dict[str, Any]], int, bool]:  # fmt: skip
    """Read `wanted` into answers: (topics, bytes in all counting `total` already in the answer, any error)."""
    topics: list[dict[str, Any]] = []
    by_name: dict[str, list[dict[str, Any]]] = {}
    errors = False
    for topic, p in wanted:
        index = p["partition"]
        out: dict[str, Any] = {"partition_index": index, "error_code": 0, "aborted_transactions": [], "records": b""}
        parts = by_name.get(topic)
        if parts is None:
            parts = by_name[topic] = []
            topics.append({"topic": topic, "partitions": parts})
        parts.append(out)
        if topic in denied:  # no data, and nothing about the topic (not even whether it exists)
            out["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            errors = True
            continue
        code, plog, info = await b.leader_log(topic, index)
        if plog is None or info is None:
            out["error_code"] = code
            errors = True
            continue
        limit: int | None = None
        if replica >= 0:
            code = _fenced(p, info.leader_epoch)
            if code:
                out["error_code"] = code
                errors = True
                continue
        last_epoch = p.get("last_fetched_epoch", -1)
        if last_epoch >= 0:
            code, diverging = _diverging(b, plog, last_epoch, p["fetch_offset"])
            if code or diverging is not None:  # no records: the fetcher truncates (or resets) first, answered now
                out["error_code"] = code
                if diverging is not None:
                    out["diverging_epoch"] = diverging
                out["high_watermark"] = b.high_watermark(plog)
                out["last_stable_offset"] = last_stable_offset(b, plog)
                out["log_start_offset"] = plog.log_start_offset
                errors = True  # (as Kafka: an answer with a diverging epoch does not wait for min_bytes)
                continue
        if replica >= 0:
            code = _replica_fetch(b, plog, replica, p, note)
            if code:
                out["error_code"] = code
                errors = True
                continue
        hw = b.high_watermark(plog)
        lso = last_stable_offset(b, plog, hw)
        if replica < 0:
            limit = lso if committed else hw
        out["high_watermark"], out["last_stable_offset"] = hw, lso
        out["log_start_offset"] = plog.log_start_offset
        budget = min(p["partition_max_bytes"], max_bytes - total)
        if budget <= 0 and total > 0:
            continue
        try:
            sl = plog.read(p["fetch_offset"], max(budget, 1), max_offset=limit)
        except OffsetOutOfRangeError:
            out["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
            errors = True
            continue
        if sl is None:
            continue
        length = sl.length if total == 0 else min(sl.length, budget)
        if length < sl.length and total > 0 and length < _first_batch_size(sl):
            continue  # not even one batch fits in what is left of the response
        out["records"] = FileRegion(os.dup(sl.fd), sl.position, length)
        total += length
        if committed:
            out["aborted_transactions"] = [
                {"producer_id": a.producer_id, "first_offset": a.first_offset}
                for a in plog.txn_index.overlapping(p["fetch_offset"], lso)
            ]
    return topics, total, errors


def _fenced(p: dict[str, Any], leader_epoch: int) -> ErrorCode:
    """A follower's fetch from another leader epoch than this leader's: refused."""
    epoch = p.get("current_leader_epoch", -1)
    if epoch >= 0 and epoch != leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH if epoch < leader_epoch else ErrorCode.UNKNOWN_LEADER_EPOCH
    return ErrorCode.NONE


def _diverging(b: Services, plog: Any, last_epoch: int, offset: int) -> tuple[ErrorCode, dict[str, int] | None]:
    """Fetch v12 (KIP-595), as Kafka's Partition.readRecords: when the fetcher's last fetched epoch ends
    in this log before its fetch offset, or a larger one is this log's nearest, the epoch and end offset
    to truncate to; OFFSET_OUT_OF_RANGE when no epoch up to it is known here (nothing to truncate to)."""
    epoch, end = b.replicas.end_offset_for((plog.topic, plog.partition), plog, last_epoch)
    if epoch < 0 or end < 0:
        return ErrorCode.OFFSET_OUT_OF_RANGE, None
    if epoch < last_epoch or end < offset:
        return ErrorCode.NONE, {"epoch": epoch, "end_offset": end}
    return ErrorCode.NONE, None


def _replica_fetch(b: Services, plog: Any, replica: int, p: dict[str, Any], note: bool) -> ErrorCode:
    """A follower's fetch: its offset must be in this log, and (`note`) how far its copy got is noted."""
    offset = p["fetch_offset"]
    if offset > plog.log_end_offset:
        return ErrorCode.OFFSET_OUT_OF_RANGE  # its copy holds what this log does not: it must truncate first
    if not note:
        return ErrorCode.NONE
    tp = (plog.topic, plog.partition)
    return b.replicas.replica_fetched(tp, replica, offset, plog, p.get("log_start_offset", -1))


def _first_batch_size(sl: Any) -> int:
    head = os.pread(sl.fd, 12, sl.position)
    return 12 + int.from_bytes(head[8:12], "big", signed=True) if len(head) == 12 else sl.length


async def handle_offset_for_leader_epoch(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    """Where a leader epoch ends in the leader's log: a new follower truncates there (KIP-101), a consumer
    checks its position after a leader change (KIP-320)."""
    a = b.authorizer  # ClusterAction on the cluster (a follower), else Describe on each topic (KIP-320's consumer)
    follower = a is None or cluster_allowed(a, Operation.CLUSTER_ACTION, log_denial=False)
    topics = []
    for t in req["topics"]:
        parts = []
        denied = not follower and not allowed(
            a, Operation.DESCRIBE, ResourceType.TOPIC, t["topic"], "OffsetForLeaderEpoch"
        )
        for p in t["partitions"]:
            out: dict[str, Any] = {"partition": p["partition"], "error_code": 0, "leader_epoch": -1, "end_offset": -1}
            parts.append(out)
            if denied:
                out["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            code, plog, info = await b.leader_log(t["topic"], p["partition"])
            if plog is None or info is None:
                out["error_code"] = code
                continue
            current = p.get("current_leader_epoch", -1)
            if current >= 0 and current != info.leader_epoch:
                out["error_code"] = (
                    ErrorCode.FENCED_LEADER_EPOCH if current < info.leader_epoch else ErrorCode.UNKNOWN_LEADER_EPOCH
                )
                continue
            out["leader_epoch"], out["end_offset"] = b.replicas.end_offset_for(
                (t["topic"], p["partition"]), plog, p["leader_epoch"]
            )
        topics.append({"topic": t["topic"], "partitions": parts})
    return {"topics": topics}


async def handle_list_offsets(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    version = header.api_version
    committed = req.get("isolation_level", 0) == 1  # read_committed: nothing at or past the last stable offset
    topics = []
    for t in req["topics"]:
        parts = []
        denied = not allowed(b.authorizer, Operation.DESCRIBE, ResourceType.TOPIC, t["name"], "ListOffsets")
        for p in t["partitions"]:
            out: dict[str, Any] = {"partition_index": p["partition_index"], "error_code": 0}
            parts.append(out)
            if denied:
                out["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            code, plog, info = await b.leader_log(t["name"], p["partition_index"])
            if plog is None or info is None:
                out["error_code"] = code
                continue
            ts = p["timestamp"]
            if ts != EARLIEST and not b.replicas.offsets_known((t["name"], p["partition_index"]), plog):
                out["error_code"] = ErrorCode.OFFSET_NOT_AVAILABLE  # a new leader's high watermark is not known yet
                continue
            if ts == EARLIEST:
                offset, found_ts = plog.log_start_offset, -1
            elif ts == LATEST:  # (read_committed: the last stable offset)
                offset, found_ts = (last_stable_offset(b, plog) if committed else b.high_watermark(plog)), -1
            elif ts < 0:
                out["error_code"] = ErrorCode.INVALID_REQUEST
                continue
            else:
                hit = plog.offset_for_timestamp(ts)
                end = last_stable_offset(b, plog) if committed else b.high_watermark(plog)
                offset, found_ts = hit if hit is not None and hit[0] < end else (-1, -1)
            out["offset"], out["timestamp"], out["leader_epoch"] = offset, found_ts, info.leader_epoch
            if version == 0:
                out["old_style_offsets"] = [offset] if offset >= 0 else []
        topics.append({"name": t["name"], "partitions": parts})
    return {"topics": topics}
