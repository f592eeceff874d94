"""kafkactl's consumer: assigned partitions, positions, and a fetcher that prefetches while you work.

One fetch task per leader keeps a Fetch request in flight for the assigned partitions it leads
(`fetch.min.bytes`, `fetch.max.wait.ms`, `max.partition.fetch.bytes`, `fetch.max.bytes`), checks
each batch's CRC, decodes the records from the partition's position on and queues them; `getmany`
hands out at most `max.poll.records`. Prefetching stops while more than `fetch.max.bytes` wait
unread. Positions are the consumer's own (no group yet): `seek`, `seek_to_beginning`,
`seek_to_end`, `seek_to_timestamp`. `RawConsumer` hands out the fetched bytes undecoded instead, for
callers that decode them their own way (the Spark source decodes them into columns).

`isolation_level` 1 (read_committed) fetches below the last stable offset and drops the batches of
aborted transactions the broker lists (`drop_aborted`, as Kafka's consumer does); control batches (the
transaction markers) never come out as records, whatever the isolation level.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

from broker.client.aio import AsyncCluster
from broker.client.connection import ProtocolError, apply_settings
from broker.client.security import ClientSecurity, SecurityError
from broker.errors import CorruptRecordError, KafkactlError
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError, error_name
from broker.protocol.messages.fetch import EARLIEST, LATEST
from broker.records.batch import MAGIC_OFFSET, crc_ok, iter_records
from broker.records.record_set import batches

TopicPartition = tuple[str, int]

#: a partition's answer that says its leader moved (or is being elected): refresh metadata and ask again
_LEADER_MOVED = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_ENOUGH_REPLICAS})  # fmt: skip


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    attributes: int = 0
    timestamp_type: int = 0  # 0 CreateTime, 1 LogAppendTime


class ConsumeError(KafkaError):
    """A read that cannot go on; `code` is the broker's error (-1 when there is none)."""

    def __init__(self, message: str, code: int = -1) -> None:
        super().__init__(message, code)


@dataclass
class ConsumerConfig:
    fetch_min_bytes: int = 1
    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 52428800
    max_partition_fetch_bytes: int = 1048576
    max_poll_records: int = 500
    auto_offset_reset: str = "latest"  # earliest | latest | none (raise)
    check_crcs: bool = True
    isolation_level: int = 0
    request_timeout_ms: int = 30000
    #: while an assigned partition has no leader, metadata is asked for this often (librdkafka's
    #: topic.metadata.refresh.fast.interval.ms), so its reading resumes soon after its broker is back
    leaderless_refresh_ms: int = 250
    client_id: str = "kafkactl-consumer"
    #: TLS and SASL (broker.client.security); None: the process default
    security: ClientSecurity | None = None


class AsyncConsumer:
    def __init__(self, bootstrap: str, config: ConsumerConfig | None = None, **overrides: Any) -> None:
        cfg = config or ConsumerConfig()
        apply_settings(cfg, overrides, "consumer")
        self.config = cfg
        timeout = (cfg.request_timeout_ms + cfg.fetch_max_wait_ms) / 1000
        self.cluster = AsyncCluster(bootstrap, client_id=cfg.client_id, timeout=timeout, security=cfg.security)
        self.assignment: list[TopicPartition] = []
        self.positions: dict[TopicPartition, int] = {}
        self.high_watermarks: dict[TopicPartition, int] = {}
        #: fetched, unread records per partition, as the lists each fetch decoded (handed out whole when they fit)
        self.buffers: dict[TopicPartition, collections.deque[list[ConsumerRecord]]] = {}
        self.buffered = 0
        self._record_bytes = 200.0  # bytes a fetched record took, on average, in the latest fetch
        self._errors: list[BaseException] = []
        #: a partition's corrupt batch, raised once the good records fetched before it are handed out
        self._after_buffered: dict[TopicPartition, BaseException] = {}
        self._data = asyncio.Event()
        self._room = asyncio.Event()
        self._tasks: dict[int, asyncio.Task] = {}
        self._resets: set[asyncio.Task] = set()  # offset resets in flight (kept referenced until done)
        self._watch: asyncio.Task | None = None  # refreshes metadata while an assigned partition has no leader
        self._generation = 0
        self._closed = False

    async def start(self) -> AsyncConsumer:
        await self.cluster.refresh([])
        return self

    async def __aenter__(self) -> AsyncConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def partitions_for(self, topic: str) -> list[int]:
        meta = await self.cluster.topic(topic)
        return sorted(meta.partitions)

    async def assign(self, partitions: list[TopicPartition]) -> None:
        """Consume exactly these partitions; positions are kept for those that stay."""
        for topic in sorted({t for t, _ in partitions}):
            meta = await self.cluster.topic(topic)
            missing = [p for t, p in partitions if t == topic and p not in meta.partitions]
            if missing:
                raise ConsumeError(
                    f"topic {topic!r} has no partition {missing[0]}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
        self.assignment = list(dict.fromkeys(partitions))
        self.positions = {tp: off for tp, off in self.positions.items() if tp in self.assignment}
        self._restart()

    # -- positions ------------------------------------------------------------------------------------

    async def list_offsets(self, tps: list[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        """Offsets by ListOffsets: EARLIEST (-2), LATEST (-1) or the first offset at/after a timestamp (-1: none).
        A partition with no leader in the metadata (its brokers down) is a ConsumeError (LEADER_NOT_AVAILABLE)
        naming it. A leader that cannot be reached (killed, not yet replaced by the controller) or a retriable
        answer (a leader just elected: OFFSET_NOT_AVAILABLE; a leader that moved) is asked again, with fresh
        metadata and backoff, for up to the request timeout (the wait is told once, see `AsyncCluster.waits`);
        then a ConsumeError (LEADER_NOT_AVAILABLE) names the partitions still waiting and why."""
        timeout_s = self.config.request_timeout_ms / 1000
        deadline = time.monotonic() + timeout_s
        out: dict[TopicPartition, int] = {}
        pending, delay = list(dict.fromkeys(tps)), 0.1
        while True:
            found, waiting = await self.offsets_now(pending, timestamp)
            out.update(found)
            if not waiting:
                return out
            gone = [tp for tp in waiting if self.cluster.leader(*tp) < 0]  # no leader at all: not waited for
            if gone:
                raise ConsumeError(f"{describe_partitions(gone)}: no leader (LEADER_NOT_AVAILABLE)",
                                   ErrorCode.LEADER_NOT_AVAILABLE)  # fmt: skip
            if time.monotonic() >= deadline:
                raise ConsumeError(f"{describe_partitions(waiting)}: no reachable leader within {timeout_s:g}s "
                                   f"({self.cluster.why_leaderless(waiting)})",
                                   ErrorCode.LEADER_NOT_AVAILABLE)  # fmt: skip
            await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 1.0)
            with contextlib.suppress(KafkactlError, OSError):
                await self.cluster.refresh(sorted({t for t, _ in waiting}))
            pending = waiting

    async def offsets_now(self, tps: list[TopicPartition], timestamp: int,
                          ) -> tuple[dict[TopicPartition, int], list[TopicPartition]]:  # fmt: skip
        """One round of `list_offsets`: the offsets found, and the partitions that must wait for a leader
        (none in the metadata, one that cannot be reached — marked so in the cluster — or a retriable answer).
        A non-retriable answer is a ConsumeError."""
        if self.cluster.leaderless(tps):
            for topic in sorted({t for t, p in self.cluster.leaderless(tps) if self.cluster.leader(t, p) < 0}):
                await self.cluster.topic(topic)
        waiting = self.cluster.leaderless(tps)
        by_leader: dict[int, list[TopicPartition]] = collections.defaultdict(list)
        for tp in tps:
            if tp not in waiting:
                by_leader[self.cluster.leader(*tp)].append(tp)
        out: dict[TopicPartition, int] = {}
        for leader, group in by_leader.items():
            topics: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
            for t, p in group:
                topics[t].append({"partition_index": p, "timestamp": timestamp, "max_num_offsets": 1})
            try:
                conn = await self.cluster.connection(leader)
                answer = await conn.request(ApiKey.LIST_OFFSETS, {
                    "replica_id": -1, "isolation_level": self.config.isolation_level,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})  # fmt: skip
            except SecurityError:
                raise
            except (KafkactlError, OSError) as exc:  # refused, reset, no answer in time: wait for it or another
                self.cluster.mark_unreachable(leader, exc, group)
                waiting += group
                continue
            for t in answer["topics"]:
                for p in t["partitions"]:
                    tp = (t["name"], p["partition_index"])
                    code = p["error_code"]
                    if code in _LEADER_MOVED or code == ErrorCode.OFFSET_NOT_AVAILABLE:
                        waiting.append(tp)
                    elif code:
                        raise ConsumeError(f"{tp[0]}-{tp[1]}: {error_name(code)}", code)
                    else:
                        out[tp] = p["offset"] if "offset" in p else (p["old_style_offsets"] or [-1])[0]
        return out, waiting

    async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return await self.list_offsets(tps, EARLIEST)

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return await self.list_offsets(tps, LATEST)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if tp not in self.assignment:
            raise ConsumeError(f"{tp[0]}-{tp[1]} is not assigned")
        self.positions[tp] = offset
        self._drop_buffered(tp)
        self._restart()

    async def seek_to_beginning(self, tps: list[TopicPartition] | None = None) -> None:
        for tp, off in (await self.beginning_offsets(tps or self.assignment)).items():
            self.seek(tp, off)

    async def seek_to_end(self, tps: list[TopicPartition] | None = None) -> None:
        for tp, off in (await self.end_offsets(tps or self.assignment)).items():
            self.seek(tp, off)

    async def seek_to_timestamp(self, timestamp: int, tps: list[TopicPartition] | None = None) -> None:
        """The first offset stamped at or after `timestamp`; the end where there is none."""
        tps = tps or self.assignment
        found = await self.list_offsets(tps, timestamp)
        ends = await self.end_offsets([tp for tp, off in found.items() if off < 0]) if any(
            off < 0 for off in found.values()) else {}  # fmt: skip
        for tp, off in found.items():
            self.seek(tp, off if off >= 0 else ends[tp])

    def position(self, tp: TopicPartition) -> int | None:
        """The offset of the next record `getmany` hands out for `tp` (records already prefetched count as unread)."""
        buf = self.buffers.get(tp)
        if buf:
            return buf[0][0].offset
        return self.positions.get(tp)

    # -- fetching -------------------------------------------------------------------------------------

    def _drop_buffered(self, tp: TopicPartition) -> None:
        self._after_buffered.pop(tp, None)
        buf = self.buffers.pop(tp, None)
        if buf:
            self.buffered -= sum(len(chunk) for chunk in buf)

    def _restart(self) -> None:
        """(Re)start one fetch task per leader of the assigned partitions."""
        self._generation += 1
        for task in self._tasks.values():
            task.cancel()
        self._tasks = {}
        self.buffers = {tp: buf for tp, buf in self.buffers.items() if tp in self.assignment}
        self._after_buffered = {tp: e for tp, e in self._after_buffered.items() if tp in self.assignment}
        self.buffered = sum(len(chunk) for b in self.buffers.values() for chunk in b)
        self._room.set()

    def _ensure_fetchers(self) -> None:
        if self._closed:
            return
        leaders: dict[int, list[TopicPartition]] = collections.defaultdict(list)
        for tp in self.assignment:
            if tp in self.positions:
                leaders[self.cluster.reachable_leader(*tp)].append(tp)
        loop = asyncio.get_running_loop()
        if any(tp not in self.positions for tp in self.leaderless()):
            leaders.setdefault(-1, [])
        for leader in leaders:
            if leader < 0:  # no broker to fetch from: metadata is watched until one leads them again
                if self._watch is None or self._watch.done():
                    self._watch = loop.create_task(self._watch_leaderless())
                continue
            task = self._tasks.get(leader)
            if task is None or task.done():
                self._tasks[leader] = loop.create_task(self._fetch_loop(leader, self._generation))

    async def check_leaders(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        """Connect to the leader of each of `tps` (once per broker); a leader that cannot be reached is marked
        so (`AsyncCluster.mark_unreachable`) and its partitions wait, told once. Returns those without a
        reachable leader now."""
        by_leader: dict[int, list[TopicPartition]] = collections.defaultdict(list)
        for tp in tps:
            if self.cluster.reachable_leader(*tp) >= 0:
                by_leader[self.cluster.leader(*tp)].append(tp)
        nodes = list(by_leader)
        within = min(5.0, self.config.request_timeout_ms / 1000)  # a hung broker (stopped, not dead) is not waited on
        found = await asyncio.gather(*(self._reconnect(node, within) for node in nodes))
        for node, failed in zip(nodes, found, strict=True):
            if failed is not None:
                self.cluster.mark_unreachable(node, failed, by_leader[node])
        return self.cluster.leaderless(tps)

    def leaderless(self) -> list[TopicPartition]:
        """The assigned partitions that have no leader now (their broker is down): not read until it is back."""
        return self.cluster.leaderless(self.assignment)

    async def _watch_leaderless(self) -> None:
        """Refresh metadata every `leaderless_refresh_ms` while an assigned partition has no leader; the
        fetchers take each one up as soon as a leader is known again."""
        delay = self.config.leaderless_refresh_ms / 1000
        while not self._closed:
            waiting = self.leaderless()
            if not waiting:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, max(1.0, self.config.leaderless_refresh_ms / 1000))  # backoff, to 1 s
            with contextlib.suppress(KafkactlError, OSError):  # (also probes the unreachable brokers again)
                await self.cluster.refresh(sorted({t for t, _ in waiting}))
            if any(self.cluster.reachable_leader(*tp) >= 0 for tp in waiting):
                delay = self.config.leaderless_refresh_ms / 1000
                if any(tp not in self.positions for tp in waiting):
                    with contextlib.suppress(KafkactlError):
                        await self._reset_positions()
                self._ensure_fetchers()

    async def _reset_positions(self) -> None:
        """Positions by auto.offset.reset for the assigned partitions that have none (and a leader: the
        others are reset once the watcher finds their leader back)."""
        missing = [tp for tp in self.assignment if tp not in self.positions and self.cluster.reachable_leader(*tp) >= 0]
        if not missing:
            return
        policy = self.config.auto_offset_reset
        if policy == "none":
            raise ConsumeError(f"no position for {missing[0][0]}-{missing[0][1]}: seek first")
        # (one round: a partition whose leader cannot be reached is reset by the watcher once it is back)
        found, _ = await self.offsets_now(missing, EARLIEST if policy == "earliest" else LATEST)
        self.positions.update(found)
        if any(tp not in self.positions for tp in missing):
            self._ensure_fetchers_later()

    async def _fetch_loop(self, leader: int, generation: int) -> None:
        """One leader's fetcher; an unexpected failure reaches the application through `getmany`."""
        try:
            await self._fetch_rounds(leader, generation)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._errors.append(ConsumeError(f"fetching from broker {leader} failed: {type(exc).__name__}: {exc}"))
            self._data.set()

    async def _fetch_rounds(self, leader: int, generation: int) -> None:
        cfg = self.config
        while generation == self._generation and not self._closed:
            if self._full():  # plenty unread: let the application catch up
                self._room.clear()
                await self._room.wait()
                continue
            mine = [tp for tp in self.assignment if tp in self.positions and tp not in self._after_buffered
                    and self.cluster.reachable_leader(*tp) == leader]  # fmt: skip
            if not mine:
                return
            try:
                conn = await self.cluster.connection(leader)
                topics: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
                for t, p in mine:
                    topics[t].append({"partition": p, "fetch_offset": self.positions[(t, p)],
                                      "partition_max_bytes": cfg.max_partition_fetch_bytes})  # fmt: skip
                body = {"replica_id": -1, "max_wait_ms": cfg.fetch_max_wait_ms, "min_bytes": cfg.fetch_min_bytes,
                        "max_bytes": cfg.fetch_max_bytes, "isolation_level": cfg.isolation_level, "session_id": 0,
                        "session_epoch": -1, "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
                        "forgotten_topics_data": [], "rack_id": ""}  # fmt: skip
                answer = await conn.request(ApiKey.FETCH, body)
            except SecurityError:
                raise
            except (KafkactlError, OSError) as exc:  # refused, reset, no answer in time: its partitions wait
                if generation != self._generation:
                    return
                if isinstance(exc, ProtocolError):
                    failed = await self._reconnect(leader)
                    if failed is None:
                        continue  # only that connection was lost (closed when idle, ...): the broker is there
                    exc = failed
                self.cluster.mark_unreachable(leader, exc, mine)  # the watcher takes them up when one leads again
                with contextlib.suppress(KafkactlError, OSError):
                    await self.cluster.refresh(sorted({t for t, _ in mine}))
                self._ensure_fetchers_later()
                return
            if generation != self._generation:
                return
            moved = False
            for t in answer["topics"]:
                for p in t["partitions"]:
                    moved |= self._take(t["topic"], p)
            if moved:  # a partition's leader changed: refresh and let the right fetcher take it
                with contextlib.suppress(KafkactlError, OSError):
                    await self.cluster.refresh(sorted({t for t, _ in mine}))
                self._ensure_fetchers_later()
                if all(self.cluster.reachable_leader(*tp) != leader for tp in mine):
                    return
                await asyncio.sleep(0.1)

    async def _reconnect(self, node_id: int, within_s: float = 2.0) -> BaseException | None:
        """Connect to `node_id` (again, after a lost connection) unless connected: None when it opens within
        `within_s` (a lost connection, not a lost broker), else why not."""
        try:
            await asyncio.wait_for(self.cluster.connection(node_id), within_s)
        except SecurityError:
            raise
        except (KafkactlError, OSError, TimeoutError) as exc:
            return exc if str(exc) else TimeoutError(f"no connection within {within_s:g}s")
        return None

    def _ensure_fetchers_later(self) -> None:
        asyncio.get_running_loop().call_soon(self._ensure_fetchers)

    def _take(self, topic: str, p: dict[str, Any]) -> bool:
        """Queue one partition's fetched records; True when its leader must be looked up again."""
        tp = (topic, p["partition_index"])
        if tp not in self.positions:
            return False
        code = p["error_code"]
        if code:
            if code in _LEADER_MOVED:
                return True
            if code == ErrorCode.OFFSET_OUT_OF_RANGE and self.config.auto_offset_reset != "none":
                self.positions.pop(tp, None)
                task = asyncio.get_running_loop().create_task(self._reset_then_fetch())
                self._resets.add(task)
                task.add_done_callback(self._resets.discard)
                return False
            self._errors.append(
                ConsumeError(f"{topic}-{tp[1]} at offset {self.positions[tp]}: {error_name(code)}", code)
            )
            if code == ErrorCode.OFFSET_OUT_OF_RANGE:  # auto.offset.reset=none: paused until the next seek
                self.positions.pop(tp, None)
            self._data.set()
            return False
        self.high_watermarks[tp] = p["high_watermark"]
        data = p["records"]
        if not data:
            return False
        aborted = p.get("aborted_transactions") if self.config.isolation_level == 1 else None
        if aborted:
            self._queue_committed(tp, data, self.positions[tp], aborted)
        else:
            self._queue(tp, data, self.positions[tp])
        return False

    def _queue_committed(self, tp: TopicPartition, data: Any, position: int, aborted: list[dict[str, int]]) -> None:
        """Queue a read_committed record set without the batches of its aborted transactions; the position
        moves past every whole batch of it (dropped ones too)."""
        end = next_offset_after(data, position)
        kept = drop_aborted(data, aborted)
        if kept:
            self._queue(tp, kept, position)
        if end > self.positions.get(tp, end):
            self.positions[tp] = end

    def _full(self) -> bool:
        """Whether so much waits unread (over `fetch.max.bytes`, as fetched) that prefetching pauses."""
        return self.buffered * self._record_bytes > self.config.fetch_max_bytes

    def _queue(self, tp: TopicPartition, data: Any, position: int) -> None:
        """Decode a fetched record set and queue its records at or after `position`; the position moves past it."""
        topic = tp[0]
        records, error = _decode_until_corrupt(data, topic, tp[1], position, self.config.check_crcs)
        if records:
            self._record_bytes = len(data) / len(records)
            self._push(tp, records, records[-1].offset + 1)
        if error is not None:  # the records before the corrupt batch go out first; the partition waits
            where = records[-1].offset + 1 if records else position
            self._after_buffered[tp] = ConsumeError(f"{topic}-{tp[1]} at offset {where}: {error}",
                                                    ErrorCode.CORRUPT_MESSAGE)  # fmt: skip
            self._data.set()
        elif not records:
            next_offset = next_offset_after(data, position)
            if next_offset > position:  # only control/aborted records or records below the position
                self.positions[tp] = next_offset

    def _push(self, tp: TopicPartition, chunk: list[Any], next_position: int) -> None:
        """Queue one chunk for `getmany` and move the partition's position to `next_position`."""
        buf = self.buffers.get(tp)
        if buf is None:
            buf = self.buffers[tp] = collections.deque()
        buf.append(chunk)
        self.buffered += len(chunk)
        self.positions[tp] = next_position
        self._data.set()

    async def _reset_then_fetch(self) -> None:
        try:
            await self._reset_positions()
        except KafkactlError as exc:
            self._errors.append(exc)
            self._data.set()
        self._ensure_fetchers()

    async def getmany(
        self, timeout_ms: float = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records fetched so far, at most `max_records` (default `max.poll.records`), waiting up to `timeout_ms`."""
        if self._closed:
            raise ConsumeError("the consumer is closed")
        self._surface_errors()
        if self._errors:
            raise self._errors.pop(0)
        if any(tp not in self.positions and self.cluster.reachable_leader(*tp) >= 0 for tp in self.assignment):
            await self._reset_positions()
        self._ensure_fetchers()
        if self.buffered == 0 and not self._errors and timeout_ms > 0:
            self._data.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._data.wait(), timeout_ms / 1000)
        self._surface_errors()
        if self._errors:
            raise self._errors.pop(0)
        limit = max_records or self.config.max_poll_records
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        for tp in list(self.buffers):
            buf = self.buffers[tp]
            taken: list[ConsumerRecord] = []
            while buf and limit > 0:
                chunk = buf[0]
                if len(chunk) <= limit:
                    buf.popleft()
                else:  # split the chunk: the rest stays first in line
                    chunk, buf[0] = chunk[:limit], chunk[limit:]
                limit -= len(chunk)
                if taken:
                    taken.extend(chunk)
                else:
                    taken = chunk  # the chunk left the buffer: no copy needed
            if taken:
                out[tp] = taken
                self.buffered -= len(taken)
            if not buf:
                del self.buffers[tp]
            if limit <= 0:
                break
        if out:
            self._room.set()
        return out

    def _surface_errors(self) -> None:
        """A partition's corrupt-batch error becomes due once its good records are all handed out."""
        for tp in [tp for tp in self._after_buffered if tp not in self.buffers]:
            self._errors.append(self._after_buffered.pop(tp))

    async def close(self) -> None:
        self._closed = True
        self._generation += 1
        tasks = [*self._tasks.values(), *self._resets, *([self._watch] if self._watch is not None else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.cluster.close()


class RecordSet(NamedTuple):
    """A fetched record set as the broker sent it (`RawConsumer`): whole batches, neither checked nor decoded."""

    offset: int  # the partition's position when it was fetched: records below it were not asked for
    next_offset: int  # the offset after its last whole batch, where the next fetch starts
    data: memoryview


class RawConsumer(AsyncConsumer):
    """An AsyncConsumer whose `getmany` hands out RecordSets, not records (`max_records` counts record
    sets): for a caller that checks and decodes fetched bytes itself, with no Python object per record.
    Prefetching pauses while fetch.max.bytes / max.partition.fetch.bytes record sets (one at least) wait.
    """

    def _full(self) -> bool:
        cfg = self.config
        return self.buffered >= max(1, cfg.fetch_max_bytes // cfg.max_partition_fetch_bytes)

    def _queue(self, tp: TopicPartition, data: Any, position: int) -> None:
        next_offset = next_offset_after(data, position)
        if next_offset > position:
            self._push(tp, [RecordSet(position, next_offset, memoryview(data))], next_offset)

    def _queue_committed(self, tp: TopicPartition, data: Any, position: int, aborted: list[dict[str, int]]) -> None:
        next_offset = next_offset_after(data, position)
        if next_offset <= position:
            return
        kept = drop_aborted(data, aborted)
        if kept:  # (the record set ends where the fetched one did: the gaps are aborted data)
            self._push(tp, [RecordSet(position, next_offset, memoryview(kept))], next_offset)
        else:
            self.positions[tp] = next_offset


def describe_partitions(tps: list[TopicPartition]) -> str:
    """`orders partition 2` / `orders partitions 2, 5` (topic by topic, joined by `; `)."""
    by_topic: dict[str, list[int]] = collections.defaultdict(list)
    for t, p in sorted(set(tps)):
        by_topic[t].append(p)
    return "; ".join(f"{t} partition{'s' if len(ps) > 1 else ''} {', '.join(map(str, ps))}"
                     for t, ps in by_topic.items())  # fmt: skip


def decode_records(
    data: Any, topic: str, partition: int, position: int, check_crcs: bool = True
) -> list[ConsumerRecord]:
    """The records at or after `position` in a fetched record set (a trailing partial batch is skipped);
    a corrupt batch raises CorruptRecordError."""
    records, error = _decode_until_corrupt(data, topic, partition, position, check_crcs)
    if error is not None:
        raise error
    return records


def _decode_until_corrupt(
    data: Any, topic: str, partition: int, position: int, check_crcs: bool = True
) -> tuple[list[ConsumerRecord], CorruptRecordError | None]:
    """`decode_records`, but a corrupt batch ends the decoding instead: the records of the batches
    before it, and its error."""
    buf = data if isinstance(data, bytes | bytearray) else memoryview(data).cast("B")  # not copied
    out: list[ConsumerRecord] = []
    make = functools.partial(ConsumerRecord, topic, partition)
    for pos, h in batches(buf):  # (a batch the fetch cut ends the walk: the next fetch starts at it)
        if buf[pos + MAGIC_OFFSET] != 2:
            return out, CorruptRecordError(f"batch at offset {h.base_offset} has magic {buf[pos + MAGIC_OFFSET]}")
        if check_crcs and not crc_ok(buf, pos, h):
            return out, CorruptRecordError(f"batch at offset {h.base_offset} fails its CRC")
        if h.last_offset >= position and not h.is_control:
            try:
                recs = iter_records(buf, pos, h, make)  # decoded whole here: a bad record raises now
            except CorruptRecordError as exc:
                return out, exc
            if h.timestamp_type:
                out.extend(r._replace(timestamp_type=1) for r in recs if r.offset >= position)
            elif h.base_offset >= position:
                out.extend(recs)
            else:
                out.extend(r for r in recs if r.offset >= position)
    return out, None


def drop_aborted(data: Any, aborted: list[dict[str, int]]) -> bytes:
    """The whole batches of a read_committed record set but the aborted transactions' and the control batches,
    as Kafka's consumer reads them: from an aborted transaction's first offset its producer's transactional
    batches are dropped until that producer's abort marker. `aborted`: the Fetch answer's
    aborted_transactions ({producer_id, first_offset})."""
    buf = memoryview(data).cast("B") if not isinstance(data, bytes | bytearray) else data
    pending = sorted((a["first_offset"], a["producer_id"]) for a in aborted)
    dropping: set[int] = set()
    out = bytearray()
    i = 0
    for pos, h in batches(buf):
        while i < len(pending) and pending[i][0] <= h.last_offset:
            dropping.add(pending[i][1])
            i += 1
        if h.is_control:
            if h.producer_id in dropping and _is_abort(buf, pos, h):
                dropping.discard(h.producer_id)
        elif not (h.is_transactional and h.producer_id in dropping):
            out += buf[pos : pos + h.size]
    return bytes(out)


def _is_abort(buf: Any, pos: int, h: Any) -> bool:
    for r in iter_records(buf, pos, h):
        return r.key is not None and len(r.key) >= 4 and r.key[2:4] == b"\x00\x00"
    return False


def next_offset_after(data: Any, position: int) -> int:
    """The offset after the last whole batch of a record set (to step over control batches)."""
    nxt = position
    for _, h in batches(memoryview(data)):
        nxt = max(nxt, h.last_offset + 1)
    return nxt
