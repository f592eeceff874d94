"""The group coordinator's ZooKeeper state, written behind: no group request waits on ZooKeeper.

Committed offsets (in blocks of a topic's partitions, `/consumers/<g>/offsets/<t>/block-<n>`: `paths`) and each
group's stable generation
(`/consumers/<g>/generation`) go through one `GroupStore` per broker, on a ZooKeeper session of its own
(reconnecting at most `RECONNECT_MAX_DELAY_S` apart, so what it holds is written within about a second of
ZooKeeper's return, and not tied to the broker's registration session).

- OffsetCommit: the offsets (each with its metadata string and leader epoch) are held in memory and one writer
  thread writes them in the order they were committed (a partition committed again before its write keeps only
  the newer commit), `WRITE_WINDOW` at a time: one write per block the window's commits fall in, conditional on
  the version this broker last wrote or read (read again after losing a race), requests pipelined, so a commit
  of many partitions costs a write per 16 of them, not a round trip per partition.
  While ZooKeeper answers, the commit is answered once written, or after `COMMIT_WAIT_S`
  still held; while it does not, at once. Always with error 0: a commit is never refused for ZooKeeper's
  sake, and a member's heartbeats, queued behind its commit on the same connection, are never held back long.
- Stable generations, and their deletion when a group empties, are queued in order for the same thread.
- DeleteGroups and OffsetDelete (`delete`): queued for the same thread in the order of commits and
  generations, so a commit accepted before the deletion is written and then deleted with it, and one accepted
  after it stays. The request waits for it; with ZooKeeper unreachable, or slower than `DELETE_WAIT_S` to let
  it begin, it is withdrawn and answered as not done (nothing is deleted behind the client's back: it retries).
- While ZooKeeper is unreachable the writer waits; when it is back it writes what it holds, in order. A
  commit held through an outage is not written over one that someone else (the group's next coordinator)
  wrote to the same znode after it was accepted: the newer commit stays.
- OffsetFetch: ZooKeeper's offsets with the held ones over them. During an outage, or when the read takes
  longer than `READ_WAIT_S`: the held ones, and those this broker committed or read for a group that has
  members here (nobody else writes them meanwhile: `kafkactl group rewind` refuses a group with members; the
  memory is dropped when the group empties or moves). A partition known neither way is answered
  COORDINATOR_LOAD_IN_PROGRESS (see `fetch`). Never from memory: a partition with a transaction's offsets
  held (TxnOffsetCommit: `note_txn_offsets` drops it from memory, and a read keeps no partition that
  `/kafkactl/txn_offsets/<g>` holds), until a read after its transaction ended: the transaction's
  coordinator, maybe another broker, commits them straight to ZooKeeper (`txn_store.finish`), and memory
  would answer the offsets from before the transaction (its input consumed again).
- A group's stored generation, read when a broker takes a group over, is read within `READ_WAIT_S`;
  unreachable, the group starts afresh at once (it did so before, after a failed read).
- The outage is logged once, at WARNING ("ZooKeeper unreachable: …, N commits held in memory"), and its end
  once ("ZooKeeper back after …: wrote N held commits"); nothing per request.

What is held lives only in this process: a broker killed during an outage loses the commits it held, and
the group resumes from the last commits ZooKeeper has, consuming those messages again (at-least-once). A
clean shutdown writes what it holds if ZooKeeper answers within its grace period, and logs what it lost
if not.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    RequestTimeoutError,
    SessionExpiredError,
    ThrottledOpError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from broker.coordinator.txn import store as txn_store
from broker.zk import batch, consumers, paths
from broker.zk import client as zkclient
from broker.zk.paths import StoredOffset

log = logging.getLogger(__name__)

#: how long an OffsetCommit waits for its write while ZooKeeper answers (then it is answered, still held)
COMMIT_WAIT_S = 1.0
#: how long a group request waits for a ZooKeeper read (a stored generation, committed offsets)
READ_WAIT_S = 2.0
#: the longest pause between two attempts to reconnect to ZooKeeper (kazoo's default grows to an hour)
RECONNECT_MAX_DELAY_S = 1.0
#: the pause after a failed write before the writer tries again while the session looks connected
RETRY_PAUSE_S = 0.5
#: commits written at a time, their ZooKeeper requests pipelined (each key is in at most one write in flight)
WRITE_WINDOW = 20000
#: how long a DeleteGroups or OffsetDelete waits for its deletion to begin (then it is withdrawn)
DELETE_WAIT_S = 5.0
#: offset blocks whose version and commits the writer keeps (a block not kept is read before it is written)
BLOCKS_KEPT = 20_000

TopicPartition = tuple[str, int]
OffsetKey = tuple[str, str, int]  # (group, topic, partition)
#: a partition the group has not committed to (OffsetFetch answers offset -1, metadata "", epoch -1)
NO_OFFSET = StoredOffset(-1)

#: errors that mean ZooKeeper did not answer (the request may be retried), not that it refused
UNREACHABLE = (
    ConnectionLoss,
    ConnectionClosedError,
    SessionExpiredError,
    OperationTimeoutError,
    KazooTimeoutError,
    RequestTimeoutError,
    ThrottledOpError,
)


@dataclass(slots=True)
class _Commit:
    stored: StoredOffset  # the offset, its leader epoch and metadata
    at_ms: int  # (wall clock) when it was accepted
    seq: int  # its OffsetCommit's place in the order of commits
    held: bool  # accepted while ZooKeeper was unreachable, or its write failed: written with care


@dataclass
class _Generation:
    group: str
    generation: int
    state: dict[str, Any] | None
    seq: int = 0  # its place in the order of commits, generations and deletions


@dataclass(eq=False)
class _Deletion:
    """A DeleteGroups (`partitions` None: the whole group) or OffsetDelete, for the writer."""

    group: str
    partitions: list[TopicPartition] | None
    seq: int
    done: asyncio.Future  # (the event loop's) True once deleted, False if it failed
    begun: bool = False


def connect_client(hosts: str, session_timeout_s: float) -> KazooClient:
    """The store's own kazoo client (not started): its reconnection attempts never pause long."""
    retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=RECONNECT_MAX_DELAY_S)
    return zkclient.new_client(hosts, timeout=session_timeout_s, connection_retry=retry)


class GroupStore:
    """Committed offsets and stable generations between the coordinator (on the event loop) and ZooKeeper.

    `owns(group)`: whether this broker coordinates the group now (generations of groups that moved away are
    their new coordinator's to write). `live(group)`: whether the group has members here (its offsets may be
    answered from memory during an outage). `moves()`: a value that changes whenever groups' coordinators may
    have moved (the blocks this broker knows are then read again: a group deleted and committed again by
    another coordinator meanwhile has blocks whose versions started again from 0, which a write conditional on
    the version known here could take for its own). `client`: makes the (unstarted) kazoo client, for tests.
    """

    def __init__(self, hosts: str, *, session_timeout_s: float = 18.0, connect_timeout_s: float = 15.0,
                 owns: Callable[[str], bool] = lambda g: True, live: Callable[[str], bool] = lambda g: False,
                 moves: Callable[[], object] = lambda: None,
                 client: Callable[[], Any] | None = None) -> None:  # fmt: skip
        self.hosts = hosts
        self.connect_timeout_s = connect_timeout_s
        self.owns = owns
        self.live = live
        self.moves = moves
        self._make_client = client or (lambda: connect_client(hosts, session_timeout_s))
        self.zk: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._cond = threading.Condition()
        # -- under _cond --
        self._held: collections.OrderedDict[OffsetKey, _Commit] = collections.OrderedDict()  # in commit order
        self._generations: collections.deque[_Generation] = collections.deque()
        self._deletions: collections.deque[_Deletion] = collections.deque()
        self._seq = 0
        self._reachable = False  # the session is connected and the last write went through
        self._retry_at = 0.0  # (monotonic) the writer's next attempt after a failed write
        self._stopping = False
        self._outage: float | None = None  # (monotonic) when the outage being logged began
        self._wrote_held = 0  # held commits written since the outage began
        self._kept_newer = 0  # held commits not written over a newer one
        self._wrote_generations = 0
        # -- the event loop's --
        self._waiters: list[tuple[int, asyncio.Future]] = []  # OffsetCommits waiting for their write
        self._known: dict[str, dict[TopicPartition, StoredOffset]] = {}  # group → partition → commit (-1: none)
        self._txn_noted: dict[str, int] = {}  # group → the number of its last TxnOffsetCommit (see fetch)
        self._txn_notes = 0
        # -- the writer thread's --
        #: offset block → (its znode version, None: no znode; its commits) as this broker last wrote or read it
        self._blocks: collections.OrderedDict[str, tuple[int | None, dict[int, paths.BlockEntry]]] = (
            collections.OrderedDict()
        )
        self._parents: set[str] = set()  # parents of offset blocks this broker made or saw made
        self._known_as_of: tuple[object, int] | None = None  # (moves(), outages) when _blocks was last trusted
        self._outages = 0  # (under _cond) outages begun: someone else may have written meanwhile
        self._writer: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Open the session (waiting up to the connect timeout: it goes on trying after that, as an outage)
        and start the writer."""
        self.loop = loop
        self.zk = self._make_client()
        self.zk.add_listener(self._on_state)
        with warnings.catch_warnings():  # kazoo warns of a missing chroot; the broker's own session made it
            warnings.simplefilter("ignore")
            connected = self.zk.start_async()
        if connected.wait(self.connect_timeout_s) and self.zk.connected:
            with self._cond:
                self._reachable = True
        else:
            self._unreachable(f"no answer from {self.hosts} within {self.connect_timeout_s:g}s")
        self._writer = threading.Thread(target=self._write_loop, name="group-store", daemon=True)
        self._writer.start()

    async def close(self, timeout: float) -> None:
        """Write what is held (if ZooKeeper answers within `timeout`), stop the writer, close the session."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._writer is not None:
            await asyncio.to_thread(self._writer.join, timeout)
        with self._cond:
            lost, generations = len(self._held), len(self._generations)
            self._withdraw_deletions()
        if lost or generations:
            log.warning("ZooKeeper unreachable at shutdown: %d held commits and %d group generations are lost "
                        "(their groups resume from the last commits ZooKeeper has)", lost, generations)  # fmt: skip
        if self.zk is not None:
            zk, self.zk = self.zk, None
            with contextlib.suppress(Exception):
                zk.remove_listener(self._on_state)
            await asyncio.to_thread(_close_client, zk)
        self._release(None)

    # -- commits ----------------------------------------------------------------------------------

    async def commit(self, group: str, offsets: dict[TopicPartition, StoredOffset | int]) -> None:
        """Hold the offsets (a bare int: no metadata, epoch -1) for the writer; return once written, after
        `COMMIT_WAIT_S`, or at once while ZooKeeper is unreachable. Never raises for ZooKeeper's sake."""
        now_ms = int(time.time() * 1000)
        commits = {tp: o if isinstance(o, StoredOffset) else StoredOffset(int(o)) for tp, o in offsets.items()}
        with self._cond:
            self._seq += 1
            seq, reachable = self._seq, self._reachable and not self._stopping
            for (topic, p), stored in commits.items():
                key = (group, topic, p)
                self._held[key] = _Commit(stored, now_ms, seq, held=not reachable)
                self._held.move_to_end(key)
            self._cond.notify_all()
        if self.live(group):
            self._known.setdefault(group, {}).update(commits)
        if not reachable:
            return
        assert self.loop is not None
        fut = self.loop.create_future()
        self._waiters.append((seq, fut))
        try:
            await asyncio.wait_for(fut, COMMIT_WAIT_S)
        except TimeoutError:  # still held: written when the writer gets to it
            self._waiters = [(s, f) for s, f in self._waiters if not f.done()]

    def note_committed(self, group: str, offsets: dict[TopicPartition, StoredOffset]) -> None:
        """A transaction's commit wrote these offsets to ZooKeeper itself (`txn_store.finish`): what memory
        answers for a group with members here (during an outage) is them from now on."""
        if self.live(group):
            self._known.setdefault(group, {}).update(offsets)

    def note_txn_offsets(self, group: str, partitions: list[TopicPartition]) -> None:
        """A TxnOffsetCommit (on this broker, the group's coordinator) holds offsets of these partitions: memory
        no longer answers them (their transaction may be committed by another broker, which does not tell this
        one) until a read made after their transaction ended (see `fetch`). Called before the held write and
        again once it is answered: a read that began before the held copy landed keeps nothing it read."""
        self._txn_notes += 1
        self._txn_noted[group] = self._txn_notes
        known = self._known.get(group)
        if known is not None:
            for tp in partitions:
                known.pop(tp, None)

    def held_commits(self, group: str | None = None) -> dict[OffsetKey, int]:
        """The offsets of the commits not written to ZooKeeper yet (of one group, or all)."""
        return {k: stored.offset for k, stored in self._held_stored(group).items()}

    def _held_stored(self, group: str | None) -> dict[OffsetKey, StoredOffset]:
        with self._cond:
            return {k: c.stored for k, c in self._held.items() if group is None or k[0] == group}

    async def fetch(self, group: str, wanted: dict[str, list[int]] | None) -> dict[TopicPartition, StoredOffset] | None:
        """The group's commits (offset, leader epoch, metadata; `NO_OFFSET`: none) of the `wanted` partitions
        (None: every partition it committed), or None when they cannot be known now: ZooKeeper is unreachable,
        or slower than `READ_WAIT_S`, and memory does not have them all.

        The handler answers None with COORDINATOR_LOAD_IN_PROGRESS, a retriable error: librdkafka retries an
        OffsetFetch that gets it in place, with its retry backoff and no retry limit while its assignment
        stays the same (rd_kafka_err_action: RETRY), so the partitions start at the committed offset once it
        is known. COORDINATOR_NOT_AVAILABLE would only make it look the coordinator up again and drop the
        answer, leaving those partitions unstarted until the next rebalance; -1 would send them to
        auto.offset.reset. The Java client, kafka-python and aiokafka retry it too."""
        held = {(t, p): o for (g, t, p), o in self._held_stored(group).items() if g == group}
        if self._reachable:
            topics = None if wanted is None else list(wanted)
            live = self.live(group)
            noted = self._txn_noted.get(group, 0)
            try:
                stored, in_txn = await asyncio.wait_for(self._read_offsets_for(group, topics, live), READ_WAIT_S)
            except (TimeoutError, KazooException):  # (unreachable, or refused: not known now)
                pass
            else:
                found = {**stored, **held}
                if wanted is not None:
                    found = {(t, p): found.get((t, p), NO_OFFSET) for t, ps in wanted.items() for p in ps}
                if live and self._txn_noted.get(group, 0) == noted:  # (else a TxnOffsetCommit came meanwhile)
                    known = self._known.setdefault(group, {})
                    known.update((tp, o) for tp, o in found.items() if tp not in in_txn)
                    for tp in in_txn:
                        known.pop(tp, None)
                return found
        if wanted is None:
            return None  # which partitions it committed to is ZooKeeper's to say
        memory = {**self._known.get(group, {}), **held}
        keys = [(t, p) for t, ps in wanted.items() for p in ps]
        if not all(k in memory for k in keys):
            return None
        return {k: memory[k] for k in keys}

    def forget(self, group: str) -> None:
        """The coordinator dropped the group (it emptied or moved): its offsets are no longer answered from
        memory during an outage (someone else may change them meanwhile)."""
        self._known.pop(group, None)
        self._txn_noted.pop(group, None)  # (a read under way sees the change: it keeps nothing)

    async def _read_offsets_for(self, group: str, topics: list[str] | None, live: bool
                                ) -> tuple[dict[TopicPartition, StoredOffset], set[TopicPartition]]:  # fmt: skip
        """The group's offsets and, for a group with members here (whose reads memory keeps), the partitions a
        transaction's held offsets name, read first: a transaction that ends after that read commits only those
        (in one multi-op with the held copy's deletion), so the other offsets read next are the latest."""
        in_txn = await self._txn_held_partitions(group) if live else set()
        return await self._read_offsets(group, topics), in_txn

    async def _txn_held_partitions(self, group: str) -> set[TopicPartition]:
        """The partitions of `group` named in `/kafkactl/txn_offsets/<g>` (any transaction's, even one left
        behind: memory is then merely not used for them)."""
        base = paths.txn_offsets(group)
        datas = await asyncio.gather(*(self._get(f"{base}/{c}") for c in await self._children(base)))
        return set().union(*(txn_store.held_partitions(d) for d in datas if d is not None))

    async def _read_offsets(self, group: str, topics: list[str] | None) -> dict[TopicPartition, StoredOffset]:
        """The group's commits in ZooKeeper: its offset blocks', over the per-partition znodes of an earlier
        version (as `consumers.committed` reads them)."""
        names = await self._children(paths.group_offsets(group)) if topics is None else topics
        children = await asyncio.gather(*(self._children(paths.group_topic_offsets(group, t)) for t in names))
        legacy = [(t, int(c)) for t, cs in zip(names, children, strict=True) for c in cs if c.isdigit()]
        blocks = [(t, b) for t, cs in zip(names, children, strict=True) for c in cs
                  if (b := paths.block_number(c)) is not None]  # fmt: skip
        datas, extras, block_datas = await asyncio.gather(
            asyncio.gather(*(self._get(paths.group_offset(group, t, p)) for t, p in legacy)),
            asyncio.gather(*(self._get(paths.group_offset_metadata(group, t, p)) for t, p in legacy)),
            asyncio.gather(*(self._get(paths.group_offset_block(group, t, b)) for t, b in blocks)),
        )
        out = {}
        for key, data, extra in zip(legacy, datas, extras, strict=True):
            stored = paths.stored_offset(data, extra)  # (None: gone meanwhile, or unreadable: as never committed)
            if stored is not None:
                out[key] = stored
        for (t, _), data in zip(blocks, block_datas, strict=True):
            out.update(((t, p), e.stored) for p, e in paths.parse_offset_block(data).items())
        return out

    # -- deletions --------------------------------------------------------------------------------

    async def delete(self, group: str, partitions: list[TopicPartition] | None = None) -> bool:
        """Delete the group's committed offsets of `partitions` (OffsetDelete), or its offsets and stored
        generation (None: DeleteGroups), after the commits and generations accepted before; True once done,
        False when it was not done (ZooKeeper unreachable or slow to begin it, or it refused)."""
        assert self.loop is not None
        fut = self.loop.create_future()
        with self._cond:
            if not self._reachable or self._stopping:
                return False
            self._seq += 1
            d = _Deletion(group, None if partitions is None else list(partitions), self._seq, fut)
            self._deletions.append(d)
            self._cond.notify_all()
        try:
            ok = await asyncio.wait_for(asyncio.shield(fut), DELETE_WAIT_S)
        except TimeoutError:
            with self._cond:
                if not d.begun and d in self._deletions:
                    self._deletions.remove(d)
                    return False
            ok = await fut  # begun: ZooKeeper answers (or fails) within its own timeouts
        if ok:
            if partitions is None:
                self._known.pop(group, None)
            elif group in self._known:
                self._known[group].update(dict.fromkeys(partitions, -1))  # (known: none)
        return ok

    # -- generations ------------------------------------------------------------------------------

    def store_generation(self, group: str, generation: int, state: dict[str, Any] | None) -> None:
        """(The coordinator's `store` hook.) Queue a stable generation (None: the group emptied) for the
        writer, which writes them in order."""
        with self._cond:
            self._seq += 1
            self._generations.append(_Generation(group, generation, state, self._seq))
            self._cond.notify_all()

    async def load_generation(self, group: str) -> dict[str, Any] | None:
        """The group's stable generation: the last one queued here and not written yet, else ZooKeeper's
        within `READ_WAIT_S`; None (the group starts afresh) when there is none or ZooKeeper does not answer."""
        with self._cond:
            queued = [g for g in self._generations if g.group == group]
        if queued:
            return queued[-1].state
        if not self._reachable:
            return None
        try:
            data = await asyncio.wait_for(self._get(paths.group_generation(group)), READ_WAIT_S)
        except (TimeoutError, KazooException):  # (unreachable, or refused: not known now)
            return None
        return consumers.parse_generation(data) if data is not None else None

    async def stored_groups(self) -> set[str]:
        """Broker-coordinated groups with a node in ZooKeeper (not kafkactl's own ZooKeeper groups), within
        `READ_WAIT_S`; with the groups whose commits are held. Only the held ones while unreachable."""
        out = {g for g, _, _ in self.held_commits()}
        if not self._reachable:
            return out
        try:
            return out | await asyncio.wait_for(self._broker_groups(), READ_WAIT_S)
        except (TimeoutError, KazooException):  # (unreachable, or refused: not known now)
            return out

    async def has_group(self, group: str) -> bool | None:
        """Whether a broker-coordinated group is stored: commits held for it, or a `/consumers/<g>` node that
        kafkactl's own consumer never joined (no `ids`); None when ZooKeeper cannot say within `READ_WAIT_S`."""
        if self.held_commits(group):
            return True
        if not self._reachable:
            return None
        try:
            node, ids = await asyncio.wait_for(
                asyncio.gather(self._exists(paths.group(group)), self._exists(paths.group_ids(group))), READ_WAIT_S
            )
        except (TimeoutError, KazooException):  # (unreachable, or refused: not known now)
            return None
        return node is not None and ids is None

    async def _broker_groups(self) -> set[str]:
        groups = [paths.group_name(n) for n in await self._children(paths.CONSUMERS)]
        ids = await asyncio.gather(*(self._exists(paths.group_ids(g)) for g in groups))
        return {g for g, stat in zip(groups, ids, strict=True) if stat is None}

    # -- kazoo's asynchronous calls, awaited on the event loop --------------------------------------

    async def _get(self, path: str) -> bytes | None:
        try:
            data, _ = await self._await(lambda zk: zk.get_async(path))
        except NoNodeError:
            return None
        return data

    async def _children(self, path: str) -> list[str]:
        try:
            return sorted(await self._await(lambda zk: zk.get_children_async(path)))
        except NoNodeError:
            return []

    async def _exists(self, path: str) -> Any:
        return await self._await(lambda zk: zk.exists_async(path))

    def _await(self, call: Callable[[Any], Any]) -> asyncio.Future:
        """An asyncio future of a kazoo asynchronous call (no thread waits for it)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        zk = self.zk
        if zk is None:
            fut.set_exception(ConnectionClosedError("the group store is closed"))
            return fut

        def settle(result: Any) -> None:
            try:
                value, error = result.get(block=False), None
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                value, error = None, exc
            with contextlib.suppress(RuntimeError):  # (the loop closed meanwhile)
                loop.call_soon_threadsafe(_settle, fut, value, error)

        call(zk).rawlink(settle)
        return fut

    # -- reachability -----------------------------------------------------------------------------

    def _on_state(self, state: str) -> None:
        """(kazoo's thread) The session's state changed: lost means an outage; connected, the writer goes on."""
        if state == KazooState.CONNECTED:
            with self._cond:
                self._reachable = True
                self._retry_at = 0.0
                self._cond.notify_all()
        else:
            self._unreachable("session expired" if state == KazooState.LOST else "connection lost")

    def _unreachable(self, reason: str) -> None:
        """Commits are answered at once from now on, and held; the outage is logged once."""
        with self._cond:
            if self._stopping:
                return
            self._reachable = False
            self._outages += 1
            self._withdraw_deletions()
            for c in self._held.values():
                c.held = True
            if self._outage is None:
                self._outage = time.monotonic()
                self._wrote_held = self._kept_newer = self._wrote_generations = 0
                log.warning("ZooKeeper unreachable: %s, %d commits held in memory (group commits and generations "
                            "are held and written when it returns)", reason, len(self._held))  # fmt: skip
        self._release(None)

    def _back(self) -> None:
        """(The writer, with nothing left to write and the session connected.) The end of the outage, once."""
        with self._cond:
            if self._outage is None or self._generations or any(c.held for c in self._held.values()):
                return  # (commits made since it came back need not be written for it to be back)
            took, self._outage = time.monotonic() - self._outage, None
            wrote, kept, generations = self._wrote_held, self._kept_newer, self._wrote_generations
        newer = f", kept {kept} newer ones ZooKeeper had" if kept else ""
        log.warning("ZooKeeper back after %.1fs: wrote %d held commits%s and %d group generations", took, wrote,
                    newer, generations)  # fmt: skip

    # -- the writer -------------------------------------------------------------------------------

    def _ready(self) -> bool:
        """(Under _cond.) Whether the writer has something to do now."""
        zk = self.zk
        if zk is None or not zk.connected or time.monotonic() < self._retry_at:
            return False
        return bool(self._held or self._generations or self._deletions
                    or (self._outage is not None and self._reachable))  # fmt: skip

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                while not self._ready():
                    if self._stopping:
                        return  # (with ZooKeeper unreachable, what is held stays unwritten: see close)
                    if self._held or self._generations or self._deletions or self._outage is not None:
                        self._cond.wait(max(0.05, min(1.0, self._retry_at - time.monotonic())))
                    else:
                        self._cond.wait()
                # what came before the first deletion is written first, then the deletion (see `delete`)
                deletion = self._deletions[0] if self._deletions else None
                cut = deletion.seq if deletion is not None else self._seq + 1
                generations = [g for g in self._generations if g.seq < cut]
                if deletion is None:  # (all of them: a copy, not a look at each)
                    commits = list(self._held.items())
                else:
                    commits = [(k, c) for k, c in self._held.items() if c.seq < cut]
            try:
                ok = self._write_generations(generations) and self._write_commits(commits)
                if ok and deletion is not None:
                    ok = self._delete(deletion)
            except Exception:  # a bug, not ZooKeeper (or the session closed under it at shutdown)
                if not self._stopping:
                    log.exception("writing group state to ZooKeeper failed")
                ok = False
            with self._cond:
                if ok:
                    self._reachable = bool(self.zk is not None and self.zk.connected)
                else:
                    self._retry_at = time.monotonic() + RETRY_PAUSE_S
            if ok:
                self._back()

    def _delete(self, d: _Deletion) -> bool:
        """Carry out the first queued deletion (unless withdrawn meanwhile); False when ZooKeeper did not answer
        (it is answered as not done either way, and not tried again: the client retries)."""
        with self._cond:
            if not self._deletions or self._deletions[0] is not d:
                return True
            d.begun = True
        ok = reachable = True
        try:
            if d.partitions is None:
                consumers.delete_group_state(self.zk, d.group)
            else:
                consumers.delete_partition_offsets(self.zk, d.group, d.partitions)
        except UNREACHABLE as exc:
            self._unreachable(_reason(exc))
            ok = reachable = False
        except KazooException as exc:
            log.warning("deleting group %s's %s failed: %s", d.group,
                        "state" if d.partitions is None else "offsets", _reason(exc))  # fmt: skip
            ok = False
        except Exception:  # a bug: answered (not done) all the same, so the request does not hang
            log.exception("deleting group %s's state failed", d.group)
            ok = False
        if ok:
            gone = paths.group(d.group) + "/"
            for path in [path for path in self._blocks if path.startswith(gone)]:
                del self._blocks[path]
            self._parents = {path for path in self._parents if not path.startswith(gone)}
        with self._cond:
            with contextlib.suppress(ValueError):
                self._deletions.remove(d)
        self._answer(d, ok)
        return reachable

    def _withdraw_deletions(self) -> None:
        """(Under _cond.) Answer the deletions not begun as not done, and drop them."""
        for d in [d for d in self._deletions if not d.begun]:
            self._deletions.remove(d)
            self._answer(d, False)

    def _answer(self, d: _Deletion, ok: bool) -> None:
        loop = self.loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # (the loop closed meanwhile)
                loop.call_soon_threadsafe(_settle, d.done, ok, None)

    def _write_generations(self, generations: list[_Generation]) -> bool:
        for g in generations:
            try:
                if self.owns(g.group):  # a group that moved meanwhile is its new coordinator's to write
                    consumers.store_generation(self.zk, g.group, g.generation, g.state)
            except UNREACHABLE as exc:
                self._unreachable(_reason(exc))
                return False
            except KazooException as exc:
                log.warning("storing group %s's generation %d failed: %s", g.group, g.generation, _reason(exc))
            with self._cond:
                if self._generations and self._generations[0] is g:
                    self._generations.popleft()
                    if self._outage is not None:
                        self._wrote_generations += 1
        return True

    def _write_commits(self, commits: list[tuple[OffsetKey, _Commit]]) -> bool:
        """Write the commits (in commit order), `WRITE_WINDOW` at a time with their writes pipelined; False when
        ZooKeeper stopped answering (what was not written stays held). The OffsetCommits waiting are answered
        as each window is written, up to the first commit not written whole."""
        done = 0  # commits[:done] are written (or dropped after a refusal)
        try:
            for at in range(0, len(commits), WRITE_WINDOW):
                window = commits[at : at + WRITE_WINDOW]
                finished, reachable = self._write_window(window)
                with self._cond:
                    for key, c in window:
                        if key not in finished:
                            continue
                        if self._held.get(key) is c:
                            del self._held[key]
                        if c.held and self._outage is not None:
                            if finished[key]:
                                self._wrote_held += 1
                            else:
                                self._kept_newer += 1
                while done < len(commits) and commits[done][0] in finished:
                    done += 1
                if not reachable:
                    return False
            return True
        finally:
            upto = _released_upto(commits, done)
            if upto:
                self._release(upto)

    def _write_window(self, window: list[tuple[OffsetKey, _Commit]]) -> tuple[dict[OffsetKey, bool], bool]:
        """Write a window of commits into their offset blocks, a write per block, pipelined: each block written
        over the version this broker last wrote or read (`_blocks`), read again after losing a race. Returns (key
        → whether its commit was written rather than kept from over a newer one, for each commit done; whether
        ZooKeeper answered throughout)."""
        finished: dict[OffsetKey, bool] = {}
        with self._cond:
            as_of = (self.moves(), self._outages)
        if as_of != self._known_as_of:  # (coordinators may have moved, or ZooKeeper was away: read blocks again)
            self._blocks.clear()
            self._parents.clear()
            self._known_as_of = as_of
        todo: dict[str, dict[int, tuple[OffsetKey, _Commit]]] = {}
        bases: dict[tuple[str, str], str] = {}
        for key, c in window:
            group, topic, p = key
            base = bases.get((group, topic))
            if base is None:
                base = bases[(group, topic)] = paths.group_offset_blocks(group, topic)
            path = f"{base}{paths.offset_block_of(p)}"
            part = todo.get(path)
            if part is None:
                part = todo[path] = {}
            part[p] = (key, c)
        try:
            alone = False
            while todo:
                known = {path: self._blocks[path] for path in todo if path in self._blocks}
                known.update(self._read_blocks([path for path in todo if path not in known]))
                todo = self._write_blocks(todo, known, finished, alone=alone)
                alone = True
        except UNREACHABLE as exc:
            self._unreachable(_reason(exc))
            return finished, False
        return finished, True

    def _read_blocks(self, blocks: list[str]) -> dict[str, tuple[int | None, dict[int, paths.BlockEntry]]]:
        """Read these offset blocks (pipelined): {path: (version, None: no such znode; its commits)}."""
        return {path: (None, {}) if node is None else (node[1].version, paths.parse_offset_block(node[0]))
                for path, node in zip(blocks, batch.get_many(self.zk, blocks), strict=True)}  # fmt: skip

    def _write_blocks(self, todo: dict[str, dict[int, tuple[OffsetKey, _Commit]]],
                      known: dict[str, tuple[int | None, dict[int, paths.BlockEntry]]], finished: dict[OffsetKey, bool],
                      *, alone: bool) -> dict[str, dict[int, tuple[OffsetKey, _Commit]]]:  # fmt: skip
        """Write each block of `todo` with its commits merged into what `known` says it holds, many blocks to a
        multi (`alone`: a request each, pipelined, after a multi was refused); the blocks that lost a race (read
        again and retried by the caller). A held commit is not written over an entry someone else wrote after it
        was accepted (as in Kafka, the last commit wins; a commit written as it comes is the last)."""
        planned = []
        for path, part in todo.items():
            version, current = known[path]
            merged = dict(current)
            outcome: dict[OffsetKey, bool] = {}
            for p, (key, c) in part.items():
                entry = paths.BlockEntry(c.stored, c.at_ms)
                there = current.get(p)
                if c.held and there is not None and there != entry and there.at_ms > c.at_ms:
                    outcome[key] = False
                else:
                    merged[p] = entry
                    outcome[key] = True
            if merged == current:
                finished.update(outcome)
            else:
                planned.append((path, merged, outcome, version, paths.offset_block_json(merged)))
        if alone:
            results = []
            for at in range(0, len(planned), batch.WINDOW):
                sent = [self.zk.create_async(path, data, makepath=True) if version is None
                        else self.zk.set_async(path, data, version)
                        for path, _, _, version, data in planned[at : at + batch.WINDOW]]  # fmt: skip
                results += [_answer(result) for result in sent]
        else:
            self._ensure_parents([path for path, _, _, version, _ in planned if version is None])
            results = batch.try_multis(self.zk, [batch.Op("create", path, data) if version is None
                                                 else batch.Op("set_data", path, data, version)
                                                 for path, _, _, version, data in planned])  # fmt: skip
        again: dict[str, dict[int, tuple[OffsetKey, _Commit]]] = {}
        lost: BaseException | None = None
        for (path, merged, outcome, version, _), result in zip(planned, results, strict=True):
            if result is batch.REFUSED or isinstance(result, (BadVersionError, NodeExistsError, NoNodeError)):
                self._blocks.pop(path, None)  # (someone else wrote it: read it again)
                again[path] = todo[path]
            elif isinstance(result, UNREACHABLE):
                self._blocks.pop(path, None)  # (written or not: read it again)
                lost = lost or result
            elif isinstance(result, BaseException):
                log.warning("writing commits to %s failed, dropped: %s", path, _reason(result))
                finished.update(dict.fromkeys(outcome, True))
            else:
                self._remember(path, 0 if version is None else result.version, merged)
                finished.update(outcome)
        if lost is not None:  # (what was not written stays held)
            raise lost
        return again

    def _ensure_parents(self, leaves: list[str]) -> None:
        """Create the parents of blocks about to be created that this store has not made or seen yet (one gone
        meanwhile refuses the multi: the block is then created alone, with its parents)."""
        new = [leaf for leaf in leaves if leaf.rsplit("/", 1)[0] not in self._parents]
        if new:
            batch.ensure_parents(self.zk, new)
            self._parents.update(leaf.rsplit("/", 1)[0] for leaf in new)

    def _remember(self, path: str, version: int | None, entries: dict[int, paths.BlockEntry]) -> None:
        """Keep a block's version and commits as this broker last wrote or read them (the least recently used
        forgotten past `BLOCKS_KEPT`: read again when next written)."""
        self._blocks[path] = (version, entries)
        self._blocks.move_to_end(path)
        while len(self._blocks) > BLOCKS_KEPT:
            self._blocks.popitem(last=False)

    def _release(self, upto: int | None) -> None:
        """Answer the OffsetCommits waiting for writes up to `upto` (None: all of them)."""
        loop = self.loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # (the loop closed meanwhile)
            loop.call_soon_threadsafe(self._release_now, upto)

    def _release_now(self, upto: int | None) -> None:
        keep = []
        for seq, fut in self._waiters:
            if upto is None or seq <= upto:
                if not fut.done():
                    fut.set_result(None)
            elif not fut.done():
                keep.append((seq, fut))
        self._waiters = keep


def _released_upto(commits: list[tuple[OffsetKey, _Commit]], done: int) -> int:
    """The last commit number whose commits are all written, when `commits[:done]` are (in commit order, one
    OffsetCommit's partitions sharing its number): 0 when none."""
    if not done:
        return 0
    last = commits[done - 1][1].seq
    return last if done == len(commits) or commits[done][1].seq != last else last - 1


def _answer(result: Any) -> Any:
    """A kazoo asynchronous call's answer, or the exception it failed with."""
    try:
        return result.get()
    except Exception as exc:  # noqa: BLE001 - the caller tells the errors apart
        return exc


def _settle(fut: asyncio.Future, value: Any, error: BaseException | None) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(value)


def _reason(exc: BaseException) -> str:
    """kazoo's exceptions often say nothing: their type does."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _close_client(zk: Any) -> None:
    with contextlib.suppress(Exception):
        zk.stop()
    with contextlib.suppress(Exception):
        zk.close()
