"""A follower's fetcher: one per source broker, copying every partition this broker follows there.

One Fetch at a time carries all of them (replica id = this broker's id, `current_leader_epoch` = the
epoch this broker knows, so a leader of another epoch refuses it), in an incremental fetch session
(KIP-227, `broker.replication.fetch_session`): after the first, full, fetch, each names only the partitions
whose fetch offset, leader epoch, log start or size limit changed, and the answer holds only those with
news. The answer's batches are appended byte for byte (offsets and leader epochs as the leader stamped
them, CRCs checked) and the leader's high watermark is taken, capped at the copy's end, and its log start
offset (DeleteRecords moves it). The next fetch tells the leader how far the copy got, which is what moves
its high watermark, and where the copy starts. A trailing batch the leader's size limit cut is left for
the next fetch.

A partition newly followed is first truncated: OffsetsForLeaderEpoch asks the leader where the copy's
latest leader epoch ends in its log, and the copy is cut there (`ReplicaManager.truncation_point`);
only then is it fetched.

Partitions under a replication throttle (a reassignment's copies, `broker.replication.throttle`) are
fetched at most a second's worth of the rate at a time, and sit out while the rate is spent.

Building a fetch costs what changed, not the number of partitions followed: the fetcher recomputes the fetch
fields only of the partitions it touched since the last fetch (copied to, truncated, added, paused or resumed),
and of all of them at most once a second (`SWEEP_S`: a copy's log start may move by its own retention).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.client.aio import AsyncConnection
from broker.client.security import inter_broker_security
from broker.errors import CorruptRecordError, KafkactlError
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.fetch import EARLIEST
from broker.records.record_set import whole_length
from broker.replication.fetch_session import FetchSessionBuilder

if TYPE_CHECKING:
    from broker.replication.interfaces import FollowerSide

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

#: errors after which a partition waits for news of its leadership instead of fetching again at once
_WAIT_FOR_METADATA = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.REPLICA_NOT_AVAILABLE,
}  # fmt: skip


#: how often every partition's fetch fields are recomputed, touched or not
SWEEP_S = 1.0


@dataclass(slots=True)
class Followed:
    leader_epoch: int
    paused_until: float = 0.0  # monotonic: after an error, no fetch before then
    truncating: bool = True  # not fetched before the leader said where the copy must end
    since: int = 0  # the fetches sent before it was added: an answer to one of those is not for it


class ReplicaFetcher:
    """Copies, from broker `source`, the partitions this broker follows there."""

    def __init__(self, manager: FollowerSide, source: int) -> None:
        self.m = manager
        self.source = source
        self.partitions: dict[TopicPartition, Followed] = {}
        self._wake = asyncio.Event()
        self._conn: AsyncConnection | None = None
        self._task: asyncio.Task | None = None
        self._complained = False
        self._session = FetchSessionBuilder()  # what the leader's fetch session holds (KIP-227)
        self._sent = 0  # fetches sent
        self._truncating: set[TopicPartition] = set()  # added, not yet truncated
        self._paused: set[TopicPartition] = set()  # with a pause not yet over
        self._entries: dict[TopicPartition, dict] = {}  # the fetch fields of what the next fetch covers
        self._touched: set[TopicPartition] = set()  # whose fetch fields may have changed since the last fetch
        self._swept = 0.0  # when every partition's fetch fields were last recomputed
        self._closed = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{self.source}")

    def add(self, tp: TopicPartition, leader_epoch: int) -> None:
        self.partitions[tp] = Followed(leader_epoch, since=self._sent)
        self._truncating.add(tp)
        self._paused.discard(tp)
        self._touched.add(tp)
        self._wake.set()

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)
        self._truncating.discard(tp)
        self._paused.discard(tp)
        self._touched.add(tp)

    def pause(self, tp: TopicPartition, f: Followed, until: float) -> None:
        """No fetch of `tp` before `until` (monotonic); meanwhile it leaves the fetch session."""
        f.paused_until = max(f.paused_until, until)
        self._paused.add(tp)
        self._touched.add(tp)

    def _resume(self, now: float) -> None:
        """The paused partitions whose pause is over are fetched again."""
        over = [tp for tp in self._paused if (f := self.partitions.get(tp)) is None or f.paused_until <= now]
        self._paused.difference_update(over)
        self._touched.update(over)

    def _due_truncating(self) -> dict[TopicPartition, Followed]:
        return {tp: self.partitions[tp] for tp in self._truncating if tp not in self._paused and tp in self.partitions}

    async def close(self) -> None:
        """Stop the fetcher: bounded, and never swallowing a cancellation of the caller (a controlled shutdown's
        15 s bound cancels it; suppressing that while waiting on a fetcher task that missed its own cancel, as
        Python 3.11's `wait_for` can, held a SIGTERM stop for minutes)."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=5)
        await self._drop_connection()

    async def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        self._session.reset()  # (whatever the leader took of the fetch in flight: start again in full)
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def _connection(self) -> AsyncConnection:
        if self._conn is None or self._conn.closed:
            address = self.m.address_of(self.source)
            if address is None:
                raise KafkactlError(f"broker {self.source} is not live")
            timeout = self.m.config.replica_fetch_wait_max_ms / 1000 + 10
            self._conn = await AsyncConnection.open(*address, client_id=f"broker-{self.m.broker_id}-fetcher",
                                                    timeout=timeout,
                                                    security=inter_broker_security(self.m.config))  # fmt: skip
        return self._conn

    async def _run(self) -> None:
        backoff = 0.05
        while not self._closed:
            now = time.monotonic()
            spent = self.m.throttle.wait_s(now)
            if spent:
                for tp, f in self.partitions.items():
                    if self.m.is_throttled(tp):
                        self.pause(tp, f, now + spent)
            if self._paused:
                self._resume(now)
            truncating = self._due_truncating()
            if not truncating and len(self._paused) >= len(self.partitions):  # (nothing to fetch now)
                self._wake.clear()
                ends = [f.paused_until for tp in self._paused if (f := self.partitions.get(tp)) is not None]
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), max(min(ends, default=now + 3600) - now, 0.01))
                continue
            try:
                conn = await self._connection()
                if truncating:
                    await self._truncate(conn, truncating)
                    continue
                req = self._request(now)
                self._sent += 1
                sent = self._sent
                answer = await conn.request(ApiKey.FETCH, req, version=conn.version_for(ApiKey.FETCH))
                code = answer.get("error_code", 0)
                self._session.received(code, answer.get("session_id", 0))
                if code:  # (a lost session: the next fetch is full, with a new one)
                    log.info("fetch session with broker %d: %s (fetching in full)", self.source, ErrorCode(code).name)
                    continue
                await self._take(conn, sent, answer)
                backoff, self._complained = 0.05, False
            except asyncio.CancelledError:
                raise
            except (KafkactlError, OSError) as exc:
                if not self._complained:
                    log.warning("replica fetcher from broker %d: %s (retrying)", self.source, exc)
                    self._complained = True
                await self._drop_connection()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
            except Exception:
                log.exception("replica fetcher from broker %d failed (retrying)", self.source)
                await self._drop_connection()
                await asyncio.sleep(1.0)

    async def _truncate(self, conn: AsyncConnection, truncating: dict[TopicPartition, Followed]) -> None:
        """Cut each new copy back to where its latest leader epoch ends in the leader's log."""
        asked: dict[TopicPartition, int] = {}
        by_topic: dict[str, list[dict]] = {}
        for tp, f in truncating.items():
            plog = self.m.follower_log(*tp)
            if plog is None:
                self._truncated(tp, f)
                continue
            asked[tp] = epoch = self.m.latest_epoch(tp, plog)
            by_topic.setdefault(tp[0], []).append(
                {"partition": tp[1], "current_leader_epoch": f.leader_epoch, "leader_epoch": epoch}
            )
        if not by_topic:
            return
        req = {"replica_id": self.m.broker_id, "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}
        answer = await conn.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, req, version=3)
        now = time.monotonic()
        for t in answer["topics"]:
            for p in t["partitions"]:
                tp = (t["topic"], p["partition"])
                f = self.partitions.get(tp)
                plog = self.m.follower_log(*tp)
                if f is None or f is not truncating.get(tp) or plog is None or tp not in asked:
                    continue
                if p["error_code"]:
                    self.pause(tp, f, now + 0.2)
                    continue
                try:  # (one copy's failure leaves it truncating, retried; the others of this pass go on)
                    point = self.m.truncation_point(tp, plog, asked[tp], p["leader_epoch"], p["end_offset"])
                    self.m.truncate_copy(tp, plog, point, f"follows broker {self.source} at epoch {f.leader_epoch}")
                except Exception as exc:
                    log.error("%s-%d: truncating the copy failed (retrying): %s", *tp, exc)
                    self.pause(tp, f, now + 1.0)
                    continue
                self._truncated(tp, f)

    def _truncated(self, tp: TopicPartition, f: Followed) -> None:
        f.truncating = False
        self._truncating.discard(tp)
        self._touched.add(tp)

    def _request(self, now: float) -> dict:
        """The next Fetch in the session: in full the first time, then only what changed (forgetting what left)."""
        per_partition = self.m.config.replica_fetch_max_bytes
        entries = self._entries
        full = self._session.full_next()
        if full or now - self._swept >= SWEEP_S:
            self._swept, self._touched = now, set(self.partitions) | self._touched
        touched, self._touched = self._touched, set()
        for tp in touched:
            f = self.partitions.get(tp)
            plog = self.m.follower_log(*tp) if f is not None and not f.truncating and tp not in self._paused else None
            if plog is None:
                entries.pop(tp, None)
                continue
            limit = per_partition
            if self.m.is_throttled(tp):
                limit = min(per_partition, max(self.m.throttle.rate or 0, 1024))
            entries[tp] = {
                "partition": tp[1], "current_leader_epoch": f.leader_epoch, "fetch_offset": plog.log_end_offset,
                "log_start_offset": plog.log_start_offset, "partition_max_bytes": limit,
            }  # fmt: skip
        if full:  # throttled copies first: the leader always sends the first partition with data at least a whole
            # batch, so a small throttled limit cannot starve them behind partitions that always have data
            # (the session keeps this order, and moves a partition answered with records behind the others)
            order = sorted(entries, key=lambda tp: not self.m.is_throttled(tp))
            self._entries = entries = {tp: entries[tp] for tp in order}
        return {
            "replica_id": self.m.broker_id, "max_wait_ms": self.m.config.replica_fetch_wait_max_ms, "min_bytes": 1,
            "max_bytes": max(per_partition, 10 * 1024 * 1024), "isolation_level": 0, "rack_id": "",
            **self._session.build(entries, None if full else touched),
        }  # fmt: skip

    async def _take(self, conn: AsyncConnection, sent: int, answer: dict) -> None:
        """Take the answer to fetch number `sent`."""
        now = time.monotonic()
        for t in answer["topics"]:
            for p in t["partitions"]:
                tp = (t["topic"], p["partition_index"])
                f = self.partitions.get(tp)
                if f is None or f.since >= sent or f.truncating or tp in self._paused:
                    continue  # no longer followed here (or followed anew, or paused) since the fetch left
                code = p["error_code"]
                if code == ErrorCode.NONE:
                    self._copy(tp, p)
                elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    await self._out_of_range(conn, tp, f)
                elif code in _WAIT_FOR_METADATA:
                    self.pause(tp, f, now + 0.2)
                else:
                    log.warning("fetching %s-%d from broker %d: %s", *tp, self.source, ErrorCode(code).name)
                    self.pause(tp, f, now + 1.0)

    def _copy(self, tp: TopicPartition, p: dict) -> None:
        plog = self.m.follower_log(*tp)
        if plog is None:
            return
        self._touched.add(tp)  # (its log end, and maybe its log start, move)
        records = p["records"]
        if records and self.m.is_throttled(tp):
            self.m.throttle.took(len(records))
        if records:
            data = memoryview(bytes(records) if not isinstance(records, bytes) else records)
            whole = whole_length(data)  # a size limit may cut the last batch
            if whole:
                try:
                    self.m.append_copy(tp, plog, data[:whole])
                except CorruptRecordError as exc:
                    log.error("the copy of %s-%d from broker %d was refused: %s", *tp, self.source, exc)
                    self.pause(tp, self.partitions[tp], time.monotonic() + 1.0)
                    return
        self.m.follower_high_watermark(tp, plog, p["high_watermark"])
        self.m.follower_log_start(tp, plog, p.get("log_start_offset", -1))

    async def _out_of_range(self, conn: AsyncConnection, tp: TopicPartition, f: Followed) -> None:
        """Our end is outside the leader's log: past its end (we hold what it never had: cut back to its
        high watermark), or before its start (retention deleted what we lack: start again at its start)."""
        plog = self.m.follower_log(*tp)
        if plog is None:
            return
        topic, p = tp
        req = {"replica_id": self.m.broker_id, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "current_leader_epoch": f.leader_epoch, "timestamp": EARLIEST}]}]}  # fmt: skip
        answer = await conn.request(ApiKey.LIST_OFFSETS, req, version=1)
        part = answer["topics"][0]["partitions"][0]
        self._touched.add(tp)
        if part["error_code"]:
            self.pause(tp, f, time.monotonic() + 0.2)
            return
        start = part["offset"]
        if plog.log_end_offset < start:
            log.warning("%s-%d: the leader's log starts at %d, past this copy's end %d: starting again there",
                        topic, p, start, plog.log_end_offset)  # fmt: skip
            self.m.reset_copy(tp, plog, start)
        else:
            self.m.truncate_copy(tp, plog, self.m.known_high_watermark(tp), "ends past the leader's log")
