"""Incremental fetch sessions (KIP-227, Fetch v7+): a fetcher names only what changed, the answer holds only news.

A Fetch's `session_id` and `session_epoch` say which kind it is (as Kafka's FetchManager):

- id 0, epoch -1: a sessionless full fetch of the partitions it names (what librdkafka and kafka-python send);
  a nonzero id with epoch -1 closes that session first.
- epoch 0: a full fetch that creates a session of the partitions it names (a nonzero id is closed first);
  the answer carries the new id (0 when the cache has no room: the fetcher goes on sessionless).
- id X, epoch N ≥ 1: incremental. The named partitions are added to session X or replace its fetch fields
  (`fetch_offset`, `current_leader_epoch`, `log_start_offset`, ...), `forgotten_topics_data` leaves it, and
  the fetch covers all of the session's partitions: one not named fetches from its last named offset (the
  follower's copy has not moved). The answer holds only the partitions with records, an error, a diverging
  epoch, or a high watermark / last stable offset / log start offset other than the session last sent, and
  those the fetch named (unlike Kafka: a fetcher that dropped an answer, e.g. its copy's leader epoch changed
  meanwhile, then learns the high watermark again when it names the partition anew).
  An unknown id is FETCH_SESSION_ID_NOT_FOUND, an epoch other than the session's next one
  INVALID_FETCH_SESSION_EPOCH; each accepted incremental fetch moves the epoch on (after 2^31-1 comes 1).
  A partition answered with records moves behind the others in the session's reading order (as Kafka), so
  that the size limits cannot starve the ones behind it (only the first partition with data is sure of a
  whole batch).

A session of the broker's cache (`FetchSessions(purgatory=...)`) keeps one purgatory watch over its partitions
for its life, and a follower's session the set of partitions it left quiet (caught up, nothing new:
`ReplicaManager.quiet_fetch`) with a clock its fetches move on: an incremental fetch then looks only at the
partitions it named, those woken since the last fetch and those not quiet, and at all of them at most once a
second (`SWEEP_MS`), so a fetch costs what changed, not the session's size.

The cache holds at most `max.incremental.fetch.session.cache.slots` sessions. When full, a new session takes
the slot of the least recently used consumer session; only when all are followers' (replica id ≥ 0) does a
new follower session take the least recently used follower's. A consumer's new session then gets none (id 0)
— as Kafka, followers' sessions are privileged, but without Kafka's minimum eviction age.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker.protocol.errors import ErrorCode
from broker.protocol.messages.fetch import FINAL_EPOCH, INITIAL_EPOCH, next_epoch
from broker.replication.isr import SessionClock

if TYPE_CHECKING:
    from collections.abc import Iterable

    from broker.replication.isr import Follower
    from broker.server.purgatory import Purgatory, Watch

TopicPartition = tuple[str, int]

_MAX_ID = 0x7FFFFFFF

#: how often a follower's incremental fetch looks again at the partitions it left quiet (a safety net: whatever
#: could change about them wakes the session's watch)
SWEEP_MS = 1000


@dataclass(slots=True)
class CachedPartition:
    """A session's partition: the fetch fields last named, and what the last answer that held it said."""

    fetch: dict[str, Any]  # the request's partition entry (partition, fetch_offset, current_leader_epoch, ...)
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def news(self, out: dict[str, Any]) -> bool:
        """Whether the answer `out` for this partition holds something the fetcher does not know; noted as sent."""
        sent = (out.get("high_watermark", -1), out.get("last_stable_offset", -1), out.get("log_start_offset", -1))
        changed = sent != (self.high_watermark, self.last_stable_offset, self.log_start_offset)
        self.high_watermark, self.last_stable_offset, self.log_start_offset = sent
        return changed or bool(out.get("records")) or out.get("error_code", 0) != 0 or "diverging_epoch" in out


@dataclass(slots=True)
class FetchSession:
    id: int
    follower: bool
    epoch: int = 1  # the epoch the next incremental fetch must carry
    partitions: dict[TopicPartition, CachedPartition] = field(default_factory=dict)  # in the order first named
    watch: Watch | None = None  # the purgatory's watch over its partitions, for the session's life
    busy: bool = False  # a fetch of it is using the watch
    #: the partitions the last fetches left quiet (a follower's session), with the follower's record of each
    quiet: dict[TopicPartition, Follower] = field(default_factory=dict)
    loud: dict[TopicPartition, None] = field(default_factory=dict)  # the others (an ordered set)
    clock: SessionClock = field(default_factory=SessionClock)  # when it last fetched
    swept_ms: int = 0  # when a fetch last looked at every partition, quiet or not

    def wanted(self) -> list[tuple[str, dict[str, Any]]]:
        return [(tp[0], c.fetch) for tp, c in self.partitions.items()]

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()
            self.watch = None
        self.unquiet(list(self.quiet))

    def unquiet(self, tps: Iterable[TopicPartition]) -> None:
        """`tps` are not quiet any more (named, woken, forgotten): their followers stop counting this session's
        later fetches as caught up (what the fetches until the last one said is kept: `Follower.leave_quiet`)."""
        quiet, clock, loud, parts = self.quiet, self.clock, self.loud, self.partitions
        for tp in tps:
            f = quiet.pop(tp, None)
            if f is not None:
                f.leave_quiet(clock)
                if tp in parts:
                    loud[tp] = None

    def forget_sent(self) -> None:
        """The last answer never left (a throttled fetch answers empty): the next one holds every partition."""
        for c in self.partitions.values():
            c.high_watermark = c.last_stable_offset = c.log_start_offset = -2


@dataclass(slots=True)
class FetchContext:
    """One fetch as its session sees it: what to read (`wanted`) and how to trim the answer (`answer`)."""

    named: list[tuple[str, dict[str, Any]]]  # what the request named
    session: FetchSession | None = None
    incremental: bool = False
    error: ErrorCode = ErrorCode.NONE

    @property
    def wanted(self) -> list[tuple[str, dict[str, Any]]]:
        """Every partition the fetch covers: the request's, or all its session's when incremental."""
        return self.session.wanted() if self.incremental and self.session is not None else self.named

    @property
    def session_id(self) -> int:
        return self.session.id if self.session is not None else 0

    def answer(self, topics: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The answer's topics: all of them for a full fetch, only the partitions with news for an incremental
        one (whose session notes what it sent)."""
        s = self.session
        if s is None:
            return topics
        kept = []
        for t in topics:
            parts = []
            for p in t["partitions"]:
                key = (t["topic"], p["partition_index"])
                c = s.partitions.get(key)
                news = c.news(p) if c is not None else True
                if news or not self.incremental:
                    parts.append(p)
                if c is not None and self.incremental and p.get("records"):
                    s.partitions[key] = s.partitions.pop(key)  # (as Kafka: behind the others next time)
            if parts:
                kept.append({**t, "partitions": parts})
        return kept


class FetchSessions:
    """A broker's fetch-session cache (bounded, least recently used first out, followers' sessions kept longest)."""

    def __init__(self, slots: int = 1000, purgatory: Purgatory | None = None) -> None:
        self.slots = slots
        self.purgatory = purgatory  # (without one, each fetch registers its own watch)
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def context(self, req: dict[str, Any]) -> FetchContext:
        """What the fetch `req` reads, after its session (if any) is created, updated or closed."""
        sid, epoch = req.get("session_id", 0), req.get("session_epoch", FINAL_EPOCH)
        named = [(t["topic"], p) for t in req["topics"] for p in t["partitions"]]
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # full: any session named is closed
            if sid:
                self._drop(sid)
            if epoch == FINAL_EPOCH:
                return FetchContext(named)
            session = self._create(req.get("replica_id", -1) >= 0)
            if session is not None:
                for topic, p in named:
                    session.partitions[(topic, p["partition"])] = CachedPartition(p)
                session.loud = dict.fromkeys(session.partitions)
                if self.purgatory is not None:
                    session.watch = self.purgatory.watch(list(session.partitions))
            return FetchContext(named, session)
        session = self._sessions.get(sid)
        if session is None:
            return FetchContext([], error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext([], error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        self._sessions.move_to_end(sid)
        session.epoch = next_epoch(epoch)
        parts = session.partitions
        added: list[TopicPartition] = []
        for topic, p in named:
            tp = (topic, p["partition"])
            c = parts.get(tp)
            if c is None:
                parts[tp] = CachedPartition(p)
                session.loud[tp] = None
                added.append(tp)
            else:  # (answered whatever it holds: the fetcher may have dropped what it was last sent)
                c.fetch = p
                c.high_watermark = c.last_stable_offset = c.log_start_offset = -2
                session.unquiet((tp,))
        gone = [(t["topic"], index) for t in req.get("forgotten_topics_data") or () for index in t["partitions"]]
        for tp in gone:
            parts.pop(tp, None)
            session.loud.pop(tp, None)
        session.unquiet(gone)
        if session.watch is not None:
            session.watch.add(added)
            session.watch.discard(gone)
        return FetchContext(named, session, incremental=True)

    def unsent(self, session_id: int, full: bool) -> int:
        """The answer to a fetch of session `session_id` was not sent (a throttled fetch answers empty): the
        session id to answer instead. A full fetch's new session is dropped (0); an incremental one's next
        answer holds every partition (`FetchSession.forget_sent`)."""
        session = self._sessions.get(session_id) if session_id else None
        if session is None:
            return 0
        if full:
            self._drop(session_id)
            return 0
        session.forget_sent()
        return session_id

    def _create(self, follower: bool) -> FetchSession | None:
        if self.slots <= 0:
            return None
        if len(self._sessions) >= self.slots and not self._evict(follower):
            return None
        sid = 0
        while sid == 0 or sid in self._sessions:
            sid = random.randint(1, _MAX_ID)
        session = self._sessions[sid] = FetchSession(sid, follower)
        return session

    def _evict(self, follower: bool) -> bool:
        """Free one slot for a new session (a follower's if `follower`): whether one was freed."""
        victim = next((s.id for s in self._sessions.values() if not s.follower), None)
        if victim is None and follower:
            victim = next(iter(self._sessions))
        if victim is None:
            return False
        self._drop(victim)
        return True

    def _drop(self, session_id: int) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.close()
