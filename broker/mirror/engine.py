"""The mirror's engine: source partitions fetched as raw batches, restamped, and produced to the target.

Each mirrored partition is a lane: source partition i of a topic feeding target partition i. A lane
knows the next source offset to copy, and the producer id, epoch and sequence its next batch carries.
At start, and again after any failed or unanswered produce, a lane takes all of these from the
target's last batch (`broker.mirror.stamp`). A lane never has more than five batches unanswered, the
window within which a broker recognises a resent batch as a duplicate, so everything a killed mirror
left in flight is either in the target's log or resent exactly once. Produce requests go with
acks=all: what is answered is committed, and the tail read back is what the target will keep.

The source is read as Kafka's MirrorMaker 2 with isolation.level=read_committed reads it: below each
partition's last stable offset, without the batches of aborted transactions and without the
transaction markers, so the target receives committed data only. The mirror's own writes stay
idempotent, not transactional: a batch it copies loses its transactional bit, and its exactly-once
comes from the stamps and sequences above, not from transactions of its own. A lane is caught up
once it has everything below the source's last stable offset: the markers and aborted records in
between are skipped, never copied, and an open transaction waits for its end.

What the clusters refuse holds back the partitions it concerns, never the others: a target partition
that answers NOT_ENOUGH_REPLICAS, has no leader, refuses authorization, or whose broker does not
answer, is recovered from the target's tail and tried again, backing off up to `MAX_BACKOFF_S`; a
source partition the source refuses is asked again after a metadata refresh. Each distinct error is
said once and counted, and the progress line names the stuck partitions (`broker.mirror.trouble`).
Only what waiting cannot change (`FATAL`: a batch too large for the target, a corrupt source batch,
source offsets deleted before they were copied, a target partition another producer writes to) stops
the mirror.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from broker.audit.counts import AUDIT_TOPIC, DEFAULT_WINDOW_MS, WindowCounts, count_stamped
from broker.audit.counts import records as audit_records
from broker.audit.topic import ensure_audit_topic_async
from broker.client.admin import Admin
from broker.client.aio import AsyncCluster
from broker.client.connection import ProtocolError
from broker.client.consumer import (
    ConsumeError,
    ConsumerConfig,
    RawConsumer,
    RecordSet,
    drop_aborted,
    next_offset_after,
)
from broker.client.producer import AsyncProducer
from broker.client.security import ClientSecurity
from broker.errors import KafkactlError, UsageError
from broker.mirror.stamp import Resume, is_control, read_stamp, restamp
from broker.mirror.state import ProducerIds
from broker.mirror.topics import MirrorError, Selection, prepare_targets
from broker.mirror.trouble import SOURCE, TARGET, Troubles
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, error_name
from broker.protocol.messages.produce import PartitionResult, encode_produce_request, read_produce_response
from broker.protocol.primitives import Reader
from broker.records.batch import crc_ok, decode_header
from broker.records.record_set import batches

TopicPartition = tuple[str, int]
CLIENT_ID = "kafkactl-mirror"
#: unanswered batches per lane: a broker remembers the last five batches of a producer per partition
WINDOW = 5
#: answers to a batch that resending it cannot change: the mirror stops with them (an authorization refused is
#: not one: an ACL may be added, and the other partitions go on meanwhile)
FATAL = frozenset({ErrorCode.CORRUPT_MESSAGE, ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE,
                   ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                   ErrorCode.POLICY_VIOLATION, ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.INVALID_RECORD})  # fmt: skip
#: fetch errors of a source partition that are the consumer's own business: leaders moving (it refreshes),
#: offsets out of range and corrupt batches (the mirror stops: what it must copy next is gone or broken)
_SOURCE_OWN = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.FENCED_LEADER_EPOCH,
                         ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.CORRUPT_MESSAGE})  # fmt: skip
#: the longest wait before a stuck partition is tried again
MAX_BACKOFF_S = 5.0
#: how long a partition found without a leader (a topic just made, an election) is waited for before it is left
#: to the next refresh
LEADER_WAIT_S = 5.0


@dataclass
class MirrorConfig:
    """What `kafkactl mirror start` mirrors, and how."""

    source: str
    target: str
    selection: Selection
    start: str = "earliest"  # where a partition the target has nothing of begins: earliest | latest
    replication_factor: int = -1
    exit_at_end: bool = False
    refresh_s: float = 30.0  # how often new source topics and partitions are looked for
    report_s: float = 10.0
    queued_bytes: int = 64 << 20  # restamped bytes waiting to be produced, at most (then fetching pauses)
    fetch_bytes: int = 4 << 20  # per partition and fetch
    request_timeout_ms: int = 30000
    #: publish per-window counts of what the target acknowledged to its audit topic (broker.audit.counts)
    audit: bool = False
    audit_window_ms: int = DEFAULT_WINDOW_MS
    #: each cluster's TLS/SASL settings (None: the process default), for clusters secured differently
    source_security: ClientSecurity | None = None
    target_security: ClientSecurity | None = None


class CommittedSource(RawConsumer):
    """The mirror's source reader: read_committed, with each partition's last stable offset (as fetched last),
    and a record set for every step of the position, also one whose batches were all aborted or markers (an
    empty one), so a lane moves past what it will never copy."""

    def __init__(self, bootstrap: str, config: ConsumerConfig, troubles: Troubles | None = None) -> None:
        config.isolation_level = 1
        super().__init__(bootstrap, config)
        self.last_stable_offsets: dict[TopicPartition, int] = {}
        #: with troubles: a partition the source refuses (authorization, a storage error...) is noted there and
        #: asked again after a metadata refresh, instead of failing `getmany`
        self.troubles = troubles

    def _take(self, topic: str, p: dict) -> bool:
        lso = p.get("last_stable_offset", -1)
        tp = (topic, p["partition_index"])
        code = p["error_code"]
        if tp in self.positions and self.troubles is not None:
            if code and code not in _SOURCE_OWN:
                self.troubles.hit(SOURCE, topic, tp[1], error_name(code),
                                  f"source {topic} partition {tp[1]}: fetch refused: {error_name(code)}")  # fmt: skip
                return True  # a metadata refresh, then asked again
            if not code:
                self.troubles.clear(SOURCE, topic, tp[1])
        if not code and tp in self.positions:
            self.last_stable_offsets[tp] = lso if lso >= 0 else p["high_watermark"]
        return super()._take(topic, p)

    def _queue_committed(self, tp: TopicPartition, data: Any, position: int, aborted: list[dict[str, int]]) -> None:
        next_offset = next_offset_after(data, position)
        if next_offset > position:
            kept = drop_aborted(data, aborted)
            self._push(tp, [RecordSet(position, next_offset, memoryview(kept))], next_offset)


class Tail(NamedTuple):
    """A target partition's offsets and where its mirroring resumes (None: empty, or not the mirror's)."""

    start: int
    end: int
    resume: Resume | None


class Pending(NamedTuple):
    data: bytes
    next_offset: int  # the source offset after this batch
    count: int
    windows: dict[int, int] | None = None  # audited messages per window (with audit on)


@dataclass
class Lane:
    source: TopicPartition
    target: TopicPartition
    producer_id: int
    producer_epoch: int
    sequence: int
    position: int  # the next source offset to restamp
    acked: int  # the source offset below which the target acknowledged everything the mirror copies
    origin: int  # where an empty target partition starts from
    queue: collections.deque[Pending] = field(default_factory=collections.deque)
    in_flight: collections.deque[Pending] = field(default_factory=collections.deque)
    broken: str | None = None  # why the lane must be recovered from the target's tail
    node: int = -1  # the broker its unanswered batches went to
    recovering: bool = False
    mirrored: int = 0  # records acknowledged in this run
    failures: int = 0  # recoveries since its last stored batch (its backoff grows with them)
    retry_at: float = 0.0  # (monotonic) not recovered before

    @property
    def idle(self) -> bool:
        return not self.queue and not self.in_flight


@dataclass
class Summary:
    mirrored: int
    seconds: float
    partitions: int
    lag: int | None
    errors: str = ""  # every error met and how often (Troubles.tally)


class Mirror:
    """One mirror run: `run()` until `stop` is set (or, with exit_at_end, until caught up)."""

    def __init__(self, cfg: MirrorConfig, say: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.say = say
        self.lanes: dict[TopicPartition, Lane] = {}
        self.source: CommittedSource | None = None
        self.target = AsyncCluster(cfg.target, client_id=CLIENT_ID, timeout=cfg.request_timeout_ms / 1000 + 5,
                                   security=cfg.target_security)  # fmt: skip
        self.queued = 0
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._producer: tuple[int, int] | None = None
        self._ids: ProducerIds | None = None
        self._connecting: set[int] = set()
        self._failure: BaseException | None = None
        self.audit = WindowCounts(cfg.audit_window_ms) if cfg.audit else None
        self._audit_producer: AsyncProducer | None = None
        self.troubles = Troubles(say)
        self._said: set[str] = set()  # the set-up lines said (each is said once a run)
        self._recovery: asyncio.Task | None = None
        #: selected partitions not mirrored yet: they had no leader when found (the next refresh looks again)
        self.deferred: set[TopicPartition] = set()

    # -- set-up ---------------------------------------------------------------------------------------

    def _topics(self) -> dict[str, int]:
        """Pick the source topics and make their targets (blocking: run in a thread)."""
        cfg = self.cfg
        with Admin(cfg.source, security=cfg.source_security) as source, \
                Admin(cfg.target, security=cfg.target_security) as target:  # fmt: skip
            topics = self.cfg.selection.pick(source.list_topics())
            for line in prepare_targets(source, target, topics, self.cfg.selection,
                                        replication_factor=self.cfg.replication_factor):  # fmt: skip
                if line not in self._said:
                    self._said.add(line)
                    self.say(line)
        return topics

    async def _add_lanes(self, topics: dict[str, int]) -> None:
        new = [(t, p) for t, n in topics.items() for p in range(n) if (t, p) not in self.lanes]
        if not new:
            return
        sel = self.cfg.selection
        new = await self._with_leaders(new)
        if not new:
            return
        tails = await read_tails(self.cfg.target, [(sel.target(t), p) for t, p in new], self.cfg.target_security)
        fresh = [tp for tp in new if tails[(sel.target(tp[0]), tp[1])].resume is None]
        for t, p in new:
            tail = tails[(sel.target(t), p)]
            if tail.resume is None and tail.end > tail.start:
                raise MirrorError(f"target {sel.target(t)} partition {p} holds messages the mirror did not write "
                                    "(its last batch has no kafkactl.mirror stamp): mirror into a new topic "
                                    "(--prefix or --rename)")  # fmt: skip
        assert self.source is not None
        await self.source.assign([*self.lanes, *new])
        origins: dict[TopicPartition, int] = {}
        starting: dict[TopicPartition, tuple[int, int]] = {}
        if fresh:
            # --start applies to the partitions there at the start; those found later begin at their beginning
            latest = self.cfg.start == "latest" and not self.lanes
            origins = await (self.source.end_offsets(fresh) if latest else self.source.beginning_offsets(fresh))
            ids = self._ids or ProducerIds(self.target.cluster_id or self.cfg.target)
            self._ids = ids
            unknown = [(sel.target(t), p) for t, p in fresh if ids.get((sel.target(t), p)) is None]
            if unknown:  # written before their first batch goes out (see broker.mirror.state)
                ids.put(unknown, *await self._producer_id())
            starting = {(t, p): ids.get((sel.target(t), p)) for t, p in fresh}  # type: ignore[misc]
        for t, p in new:
            tail = tails[(sel.target(t), p)]
            if tail.resume is not None:
                r = tail.resume
                lane = Lane((t, p), (sel.target(t), p), r.producer_id, r.producer_epoch, r.next_sequence,
                            r.source_offset, r.source_offset, r.source_offset)  # fmt: skip
            else:
                pid, epoch = starting[(t, p)]
                lane = Lane((t, p), (sel.target(t), p), pid, epoch, 0, origins[(t, p)], origins[(t, p)],
                            origins[(t, p)])  # fmt: skip
            self.lanes[(t, p)] = lane
            self.source.seek((t, p), lane.position)
        await self.target.refresh(sorted({lane.target[0] for lane in self.lanes.values()}))

    async def _with_leaders(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        """Those of the new partitions with a leader on both clusters; the others are stuck, and looked at again at
        the next refresh (a broker down must not hold back the partitions it does not lead)."""
        assert self.source is not None
        sel = self.cfg.selection
        src, dst = self.source.cluster, self.target
        deadline = time.monotonic() + LEADER_WAIT_S
        while True:  # a topic just made, an election under way: worth a few seconds; brokers all down: not
            await src.refresh(sorted({t for t, _ in tps}))
            await dst.refresh(sorted({sel.target(t) for t, _ in tps}))
            electing = [
                tp
                for tp in tps
                if (src.leader(*tp) < 0 and not src.offline(tp))
                or (dst.leader(sel.target(tp[0]), tp[1]) < 0 and not dst.offline((sel.target(tp[0]), tp[1])))
            ]
            if not electing or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.2)
        ready = []
        for t, p in tps:
            if self.source.cluster.leader(t, p) < 0:
                self.troubles.hit(SOURCE, t, p, "LEADER_NOT_AVAILABLE", f"source {t} partition {p} has no leader: "
                                                                        "not mirrored until it has one")  # fmt: skip
            elif self.target.leader(sel.target(t), p) < 0:
                self.troubles.hit(TARGET, sel.target(t), p, "LEADER_NOT_AVAILABLE", f"target {sel.target(t)} partition "
                                  f"{p} has no leader: not mirrored until it has one")  # fmt: skip
            else:
                self.troubles.clear(SOURCE, t, p)
                self.troubles.clear(TARGET, sel.target(t), p)
                ready.append((t, p))
        self.deferred = (self.deferred - set(tps)) | (set(tps) - set(ready))
        return ready

    async def _refresh(self) -> None:
        """Look for new source topics and partitions; a cluster that does not answer now is asked next time."""
        try:
            await self._add_lanes(await asyncio.to_thread(self._topics))
        except (KafkactlError, ProtocolError, OSError) as exc:
            if isinstance(exc, MirrorError | UsageError):
                raise
            self.troubles.note("NEW_TOPICS_UNKNOWN", f"cannot look for new topics now ({exc}); trying again every "
                                                     f"{self.cfg.refresh_s:g}s")  # fmt: skip

    async def _producer_id(self) -> tuple[int, int]:
        if self._producer is None:
            conn = await self.target.any_connection()
            answer = await conn.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None,
                                                                   "transaction_timeout_ms": 60000})  # fmt: skip
            if answer["error_code"]:
                raise KafkactlError(f"the target refused a producer id: {error_name(answer['error_code'])}")
            self._producer = answer["producer_id"], answer["producer_epoch"]
        return self._producer

    # -- the run --------------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> Summary:
        cfg = self.cfg
        began = time.monotonic()
        fetching = ConsumerConfig(client_id=CLIENT_ID, auto_offset_reset="none",
                                  max_partition_fetch_bytes=cfg.fetch_bytes, request_timeout_ms=cfg.request_timeout_ms,
                                  fetch_max_bytes=max(cfg.queued_bytes // 2, cfg.fetch_bytes),
                                  security=cfg.source_security)  # fmt: skip
        self.source = CommittedSource(cfg.source, fetching, self.troubles)
        try:
            await self.source.start()
            await self.target.refresh([])  # its cluster id names the producer ids kept (broker.mirror.state)
            await self._add_lanes(await asyncio.to_thread(self._topics))
            self.say(f"mirroring {len({lane.source[0] for lane in self.lanes.values()})} topic(s), "
                     f"{len(self.lanes)} partition(s) from {cfg.source} to {cfg.target}")  # fmt: skip
            next_refresh = time.monotonic() + cfg.refresh_s
            next_report, reported = time.monotonic() + cfg.report_s, (0, time.monotonic())
            while not stop.is_set():
                if self._failure is not None:
                    raise self._failure
                if cfg.exit_at_end and self._caught_up():
                    break
                await self._step()
                now = time.monotonic()
                if now >= next_refresh:
                    next_refresh = now + cfg.refresh_s
                    await self._refresh()
                if now >= next_report:
                    await self._publish_audit()
                    done = self.mirrored
                    rate = (done - reported[0]) / max(now - reported[1], 1e-9)
                    self._poll_source_leaders()
                    stuck = self.troubles.stuck_line()
                    self.say(f"mirrored {done:,} messages ({rate:,.0f}/s); lag {self.lag():,}"
                             + (f"; stuck: {stuck}" if stuck else ""))  # fmt: skip
                    next_report, reported = now + cfg.report_s, (done, now)
            await self._drain(timeout=cfg.request_timeout_ms / 1000)
            await self._publish_audit(everything=True)
        finally:
            if self._audit_producer is not None:
                await self._audit_producer.close()
            for task in list(self._tasks):
                task.cancel()
            if self.source is not None:
                await self.source.close()
            await self.target.close()
        return Summary(self.mirrored, time.monotonic() - began, len(self.lanes), self.lag(), self.troubles.tally())

    @property
    def mirrored(self) -> int:
        return sum(lane.mirrored for lane in self.lanes.values())

    def _poll_source_leaders(self) -> None:
        """Mark the source partitions with no leader now (their broker down) stuck; the consumer refreshes its
        metadata until they have one again."""
        if self.source is None:
            return
        leaderless = set(self.source.leaderless())
        for t, p in leaderless:
            if (SOURCE, t, p) not in self.troubles.stuck:
                self.troubles.hit(SOURCE, t, p, "LEADER_NOT_AVAILABLE",
                                  f"source {t} partition {p} has no leader (its brokers are down?)")  # fmt: skip
        for (side, t, p), s in list(self.troubles.stuck.items()):
            if (
                side == SOURCE
                and s.error == "LEADER_NOT_AVAILABLE"
                and (t, p) in self.lanes
                and (t, p) not in leaderless
            ):  # (those not yet mirrored are looked at by the refresh)
                self.troubles.clear(SOURCE, t, p)

    def lag(self) -> int:
        """Source offsets not yet acknowledged by the target, by the last stable offsets fetched last (offsets, not
        messages: markers and aborted records not yet passed count too)."""
        lso = self.source.last_stable_offsets if self.source is not None else {}
        return sum(max(0, lso.get(tp, lane.acked) - lane.acked) for tp, lane in self.lanes.items())

    def _caught_up(self) -> bool:
        """Every lane has all the source's committed data below its last stable offset acknowledged."""
        lso = self.source.last_stable_offsets if self.source is not None else {}
        return not self.deferred and all(lane.idle and not lane.broken and tp in lso and lane.acked >= lso[tp]
                   for tp, lane in self.lanes.items())  # fmt: skip

    async def _step(self) -> None:
        """Take what was fetched (while there is room), send what is ready, recover broken lanes."""
        assert self.source is not None
        if self.queued < self.cfg.queued_bytes:
            try:
                sets = await self.source.getmany(timeout_ms=100 if self._all_idle() else 0, max_records=64)
            except ConsumeError as exc:
                if exc.code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    raise MirrorError(
                        f"source {exc}: the offsets the mirror needs next are gone (retention "
                        "removed them before they were mirrored, or the topic was made anew)"
                    ) from None
                if exc.code == ErrorCode.CORRUPT_MESSAGE:
                    raise
                # a fetcher that failed (a broker gone mid-answer...): the consumer starts it again next time
                self.troubles.note(error_name(exc.code) if exc.code > 0 else "SOURCE_FETCH_FAILED", f"source: {exc}")
                await asyncio.sleep(0.2)
                sets = {}
            for tp, record_sets in sets.items():
                lane = self.lanes.get(tp)
                if lane is not None:
                    for rs in record_sets:
                        self._take(lane, rs)
        self._send()
        if self._recovery is None or self._recovery.done():
            now = time.monotonic()
            due = [lane for lane in self.lanes.values()
                   if lane.broken and not lane.in_flight and not lane.recovering and lane.retry_at <= now]  # fmt: skip
            if due:
                for lane in due:
                    lane.recovering = True
                self._recovery = self._spawn(self._recover(due))
        if self.queued >= self.cfg.queued_bytes or not self._all_idle():
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 0.005 if self.queued < self.cfg.queued_bytes else 0.1)

    def _all_idle(self) -> bool:
        return all(lane.idle for lane in self.lanes.values())

    def _take(self, lane: Lane, rs: RecordSet) -> None:
        """Restamp the batches of a fetched record set that start at or after the lane's position."""
        if lane.broken:
            return  # recovery seeks the source again
        if rs.offset > lane.position:  # fetched for an older position: ask again from ours
            assert self.source is not None
            self.source.seek(lane.source, lane.position)
            return
        buf = rs.data
        for pos, h in batches(buf):
            if h.next_offset > lane.position:
                if h.magic != 2:
                    raise MirrorError(
                        f"source {lane.source[0]} partition {lane.source[1]}: the batch at offset "
                        f"{h.base_offset} is in message format v{h.magic}; the mirror copies v2 batches"
                    )
                if not crc_ok(buf, pos, h):
                    raise MirrorError(
                        f"source {lane.source[0]} partition {lane.source[1]}: the batch at "
                        f"offset {h.base_offset} fails its CRC; nothing after it is mirrored"
                    )
                data = None if is_control(h) else restamp(buf, pos, h, lane.producer_id, lane.producer_epoch,
                                                          lane.sequence, first_offset=lane.position)  # fmt: skip
                if data is not None:
                    count = decode_header(data).record_count
                    lane.sequence = (lane.sequence + count) % (2**31)
                    windows: dict[int, int] | None = None
                    if self.audit is not None:
                        windows = {}
                        count_stamped(windows, data, 0, decode_header(data), self.audit.window_ms)
                    lane.queue.append(Pending(data, h.next_offset, count, windows))
                    self.queued += len(data)
                lane.position = h.next_offset
        # past the dropped batches after its last kept one (aborted, markers: the record set's end says where)
        lane.position = max(lane.position, rs.next_offset)
        if lane.idle:  # nothing unanswered: all below the position is acknowledged or never copied
            lane.acked = max(lane.acked, lane.position)

    def _source_id(self) -> str:
        """The source cluster as the audit names it: its cluster id (else its bootstrap servers)."""
        return (self.source.cluster.cluster_id if self.source is not None else None) or self.cfg.source

    async def _publish_audit(self, *, everything: bool = False) -> None:
        """Publish the counts of what the target acknowledged so far (to the target's audit topic)."""
        if self.audit is None or self.audit.oldest is None:
            return
        counts = self.audit.take()
        try:
            if self._audit_producer is None:
                with contextlib.suppress(KafkactlError, OSError):  # (refused: the producer's auto-creation may do)
                    await ensure_audit_topic_async(self.cfg.target, self.cfg.target_security)
                self._audit_producer = await AsyncProducer(self.cfg.target, acks="all", client_id=CLIENT_ID,
                                                           security=self.cfg.target_security).start()  # fmt: skip
            targets = {lane.source[0]: lane.target[0] for lane in self.lanes.values()}
            for rec in audit_records("mirrored", counts, self.audit.window_ms, client=CLIENT_ID,
                                     source=self._source_id(), targets=targets):  # fmt: skip
                await self._audit_producer.send(AUDIT_TOPIC, rec.encode(), key=rec.topic.encode())
            if everything:
                await self._audit_producer.flush()
        except (KafkactlError, ProtocolError, OSError) as exc:  # the copy goes on; the counts wait for the next try
            for (topic, w), n in counts.items():
                self.audit.add(topic, w, n)
            self.say(f"audit counts not published yet: {exc}")

    def _send(self) -> None:
        """One Produce request per target leader with one batch of each lane that has room, as often as they have."""
        by_node: dict[int, list[Lane]] = collections.defaultdict(list)
        for lane in self.lanes.values():
            if lane.queue and not lane.broken and len(lane.in_flight) < WINDOW:
                node = self.target.leader(*lane.target)
                if node < 0:
                    self._break(lane, "LEADER_NOT_AVAILABLE", f"target {lane.target[0]} partition {lane.target[1]} "
                                                              "has no leader")  # fmt: skip
                    continue
                if lane.in_flight and node != lane.node:  # the leader moved: nothing more until it is recovered
                    self._break(lane, "LEADER_MOVED", f"target {lane.target[0]} partition {lane.target[1]}: its "
                                                      f"leader moved from broker {lane.node} to {node}")  # fmt: skip
                    continue
                lane.node = node
                by_node[node].append(lane)
        for node, lanes in by_node.items():
            conn = self.target.open_connection(node)
            if conn is None:
                if node not in self._connecting:
                    self._connecting.add(node)
                    self._spawn(self._connect(node, lanes))
                continue
            version = conn.version_for(ApiKey.PRODUCE)
            while True:
                batch = [(lane, lane.queue.popleft()) for lane in lanes if lane.queue and len(lane.in_flight) < WINDOW]
                if not batch:
                    break
                topics: dict[str, list[tuple[int, bytes]]] = {}
                for lane, p in batch:
                    lane.in_flight.append(p)
                    self.queued -= len(p.data)
                    topics.setdefault(lane.target[0], []).append((lane.target[1], p.data))
                body = encode_produce_request(version, -1, self.cfg.request_timeout_ms, topics)
                try:
                    fut = conn.send_encoded(ApiKey.PRODUCE, version, body, read_produce_answer)
                except (ProtocolError, KafkactlError) as exc:
                    self._answered(batch, None, exc)
                    break
                assert fut is not None
                fut.add_done_callback(functools.partial(self._done, batch))

    def _done(self, batch: list[tuple[Lane, Pending]], fut: asyncio.Future) -> None:
        if fut.cancelled():
            self._answered(batch, None, KafkactlError("cancelled"))
        elif fut.exception() is not None:
            self._answered(batch, None, fut.exception())
        else:
            results, throttle_ms = fut.result()
            if throttle_ms > 0:
                self.troubles.note("THROTTLED", f"the target throttles the mirror's produce requests (a client "
                                                f"quota): answers held back {throttle_ms} ms")  # fmt: skip
            self._answered(batch, results, None)

    def _answered(self, batch: list[tuple[Lane, Pending]], results: list[PartitionResult] | None,
                  error: BaseException | None) -> None:  # fmt: skip
        by_tp = {(r.topic, r.partition): r for r in results or ()}
        for lane, p in batch:
            with contextlib.suppress(ValueError):  # (answers of one connection come in order; this is cheap then)
                lane.in_flight.remove(p)
            r = by_tp.get(lane.target)
            if r is not None and r.error_code in FATAL and self._failure is None:
                why = error_name(r.error_code) + (f" ({r.error_message})" if r.error_message else "")
                self._failure = MirrorError(
                    f"target {lane.target[0]} partition {lane.target[1]} refuses the batch of source offsets before "
                    f"{p.next_offset}: {why}; waiting cannot change that (a limit such as max.message.bytes differs "
                    "between the clusters?)")  # fmt: skip
            if r is not None and r.error_code:
                why = error_name(r.error_code)
                self._break(lane, why, f"target {lane.target[0]} partition {lane.target[1]} refuses batches: {why}"
                                       + (f" ({r.error_message})" if r.error_message else ""))  # fmt: skip
            elif r is None:
                why = f"{type(error).__name__}: {error}" if error else "no answer"
                self._break(lane, f"NO_ANSWER from target broker {lane.node}",
                            f"no answer from target broker {lane.node} ({why})")  # fmt: skip
            else:  # stored, also when an earlier batch failed: recovery resumes after it
                lane.failures = 0
                self.troubles.clear(TARGET, *lane.target)
                lane.acked = max(lane.acked, p.next_offset)
                if lane.idle and not lane.broken:  # the markers and aborted records after it were passed too
                    lane.acked = max(lane.acked, lane.position)
                lane.mirrored += p.count
                if p.windows and self.audit is not None:
                    self.audit.add_windows(lane.source[0], p.windows)
        self._wake.set()

    async def _connect(self, node: int, lanes: list[Lane]) -> None:
        try:
            await self.target.connection(node)
        except (KafkactlError, OSError) as exc:
            for lane in lanes:
                self._break(lane, f"target broker {node} unreachable", f"cannot connect to target broker {node}: {exc}")
        finally:
            self._connecting.discard(node)
            self._wake.set()

    def _break(self, lane: Lane, error: str, detail: str) -> None:
        """The lane stops sending until it is recovered from the target's tail, after its backoff; the error is
        counted (said if new) and the partition stuck until a batch of it is stored. Only its first error
        counts: the batches after it in flight fail for it (out of order), not for a cause of their own."""
        if lane.broken:
            return
        self.troubles.hit(TARGET, *lane.target, error, detail)
        lane.broken = error
        self._backoff(lane)

    @staticmethod
    def _backoff(lane: Lane) -> None:
        lane.retry_at = time.monotonic() + min(0.1 * 2**lane.failures, MAX_BACKOFF_S)
        lane.failures += 1

    async def _recover(self, lanes: list[Lane]) -> None:
        """Carry the lanes on from what the target holds: each one's last batch's stamp and producer place (or its
        origin). One metadata refresh and one read of the tails for all of them; a lane whose partition has no
        leader, or whose tail cannot be read now, is tried again after its backoff."""
        try:
            try:
                await self.target.refresh(sorted({lane.target[0] for lane in lanes}))
            except (KafkactlError, ProtocolError, OSError) as exc:
                self._retry_later(lanes, "TARGET_UNREACHABLE", f"cannot refresh the target's metadata ({exc})")
                return
            ready = []
            for lane in lanes:
                if self.target.leader(*lane.target) < 0:
                    self._retry_later([lane], "LEADER_NOT_AVAILABLE", f"target {lane.target[0]} partition "
                                                                      f"{lane.target[1]} has no leader")  # fmt: skip
                else:
                    ready.append(lane)
            if not ready:
                return
            try:
                tails = await read_tails(self.cfg.target, [lane.target for lane in ready], self.cfg.target_security)
            except (KafkactlError, ProtocolError, OSError) as exc:
                code = getattr(exc, "code", -1)
                self._retry_later(ready, error_name(code) if isinstance(code, int) and code > 0 else "TAIL_UNREAD",
                                  f"cannot read the target's last batches now ({exc})")  # fmt: skip
                return
            for lane in ready:
                self._resume(lane, tails[lane.target])
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # reaches run() and stops the mirror with its message
            self._failure = exc
        finally:
            for lane in lanes:
                lane.recovering = False
            self._wake.set()

    def _retry_later(self, lanes: list[Lane], error: str, detail: str) -> None:
        for lane in lanes:
            self.troubles.hit(TARGET, *lane.target, error, detail)
            self._backoff(lane)

    def _resume(self, lane: Lane, tail: Tail) -> None:
        """Set the lane to carry on after the target's last batch (MirrorError: that batch is not the mirror's)."""
        self.queued -= sum(len(p.data) for p in lane.queue)
        lane.queue.clear()
        if tail.resume is not None:
            r = tail.resume
            lane.producer_id, lane.producer_epoch, lane.sequence = r.producer_id, r.producer_epoch, r.next_sequence
            lane.position = lane.acked = r.source_offset
        elif tail.end == tail.start:
            lane.sequence, lane.position, lane.acked = 0, lane.origin, lane.origin
        else:
            raise MirrorError(f"target {lane.target[0]} partition {lane.target[1]}: its last batch is not "
                                "the mirror's any more (another producer writes to it)")  # fmt: skip
        assert self.source is not None
        self.source.seek(lane.source, lane.position)
        lane.broken = None
        lso = self.source.last_stable_offsets.get(lane.source)
        if lso is not None and lane.acked >= lso:  # nothing left to copy: nothing stuck
            self.troubles.clear(TARGET, *lane.target)

    async def _drain(self, timeout: float) -> None:
        """Wait until what was sent is answered (nothing new is sent)."""
        deadline = time.monotonic() + timeout
        while any(lane.in_flight for lane in self.lanes.values()) and time.monotonic() < deadline:
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 0.1)

    def _spawn(self, coro) -> asyncio.Task:  # noqa: ANN001
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def read_produce_answer(r: Reader, version: int) -> tuple[list[PartitionResult], int]:
    """A Produce answer's partitions and its throttle_time_ms (v1-8: the answer's last four bytes; the client
    speaks Produce up to v8, `broker.client.connection.CLIENT_MAX`; 0 when absent)."""
    buf, end, throttle = r.buf, r.end, 0
    if 1 <= version <= 8 and end - r.pos >= 4:
        throttle = int.from_bytes(buf[end - 4 : end], "big", signed=True)
    return read_produce_response(r, version), throttle


async def read_tails(bootstrap: str, tps: list[TopicPartition], security: ClientSecurity | None = None,
                     timeout_s: float = 30.0) -> dict[TopicPartition, Tail]:  # fmt: skip
    """Each partition's log start and high watermark, and the stamp of its last data batch: transaction markers
    after it (the mirror writes none: another producer's) are no batch of the mirror's, and are stepped over."""
    consumer = RawConsumer(bootstrap, ConsumerConfig(client_id=CLIENT_ID, auto_offset_reset="earliest",
                                                     fetch_max_wait_ms=50, security=security))  # fmt: skip
    out: dict[TopicPartition, Tail] = {}
    try:
        await consumer.start()
        await consumer.assign(tps)
        starts = await consumer.beginning_offsets(tps)
        ends = await consumer.end_offsets(tps)
        want = [tp for tp in tps if ends[tp] > starts[tp]]
        out = {tp: Tail(starts[tp], ends[tp], None) for tp in tps if tp not in want}
        if not want:
            return out
        await consumer.assign(want)
        probes = {tp: _TailProbe(ends[tp] - 1, ends[tp]) for tp in want}
        for tp, probe in probes.items():
            consumer.seek(tp, probe.low)
        deadline = time.monotonic() + timeout_s
        while any(tp not in out for tp in want):
            if time.monotonic() > deadline:
                missing = [tp for tp in want if tp not in out]
                raise KafkactlError(f"no answer from the target for {missing[0][0]} partition {missing[0][1]}'s "
                                    f"last batch within {timeout_s:g}s")  # fmt: skip
            for tp, record_sets in (await consumer.getmany(timeout_ms=200)).items():
                probe = probes[tp]
                for rs in record_sets:
                    if tp in out or not probe.low <= rs.offset <= probe.reached:
                        continue  # done, or fetched for an earlier window
                    probe.take(rs)
                    if probe.reached < probe.below:
                        continue
                    if probe.found or probe.low <= starts[tp]:
                        out[tp] = Tail(starts[tp], ends[tp], probe.resume)
                    else:  # only markers in the window: look further back, twice as far
                        probe.back(starts[tp])
                        consumer.seek(tp, probe.low)
                        break
    finally:
        await consumer.close()
    return out


@dataclass
class _TailProbe:
    """The offsets [low, below) of a target partition read for its last data batch (those after `below`: markers)."""

    low: int
    below: int
    reached: int = -1  # the offset after the last whole batch read of the window
    found: bool = False
    resume: Resume | None = None  # the stamp of the last data batch found

    def __post_init__(self) -> None:
        self.reached = self.low

    def take(self, rs: RecordSet) -> None:
        data = rs.data
        for pos, h in batches(data):
            if h.base_offset < self.below and not is_control(h):
                self.found, self.resume = True, read_stamp(data, pos, h)
        self.reached = max(self.reached, rs.next_offset)

    def back(self, start: int) -> None:
        """The window before this one, twice as wide (not before the log start)."""
        width = self.below - self.low
        self.below, self.low = self.low, max(start, self.low - 2 * width)
        self.reached = self.low
