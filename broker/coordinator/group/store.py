"""The group coordinator's ZooKeeper state, written behind: no group request waits on ZooKeeper.

Committed offsets (`/consumers/<g>/offsets/<t>/<p>`) and each group's stable generation
(`/consumers/<g>/generation`) go through one `GroupStore` per broker, on a ZooKeeper session of its own
(reconnecting at most `RECONNECT_MAX_DELAY_S` apart, so what it holds is written within about a second of
ZooKeeper's return, and not tied to the broker's registration session).

- OffsetCommit: the offsets (each with its metadata string and leader epoch, written after the offset to
  `/consumers/<g>/offset_metadata/<t>/<p>`: `paths.stored_offset`) are held in memory and one writer thread
  writes them in the order they were committed (a partition committed again before its write keeps only the
  newer commit), `WRITE_WINDOW` at a time: the window's offsets with their requests pipelined, then what they
  carry beside them (each after its own offset), so the rate is ZooKeeper's, not one round trip per write.
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
    SessionExpiredError,
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
WRITE_WINDOW = 2000
#: how long a DeleteGroups or OffsetDelete waits for its deletion to begin (then it is withdrawn)
DELETE_WAIT_S = 5.0

TopicPartition = tuple[str, int]
OffsetKey = tuple[str, str, int]  # (group, topic, partition)
#: a partition the group has not committed to (OffsetFetch answers offset -1, metadata "", epoch -1)
NO_OFFSET = StoredOffset(-1)

#: errors that mean ZooKeeper did not answer (the request may be retried), not that it refused
UNREACHABLE = (ConnectionLoss, ConnectionClosedError, SessionExpiredError, OperationTimeoutError, KazooTimeoutError)
#: what a write's answer may raise: ZooKeeper unreachable (kept, retried) or another refusal (dropped)
WRITE_FAILURES = (KazooException, KazooTimeoutError)


@dataclass
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
    answered from memory during an outage). `client`: makes the (unstarted) kazoo client, for tests.
    """

    def __init__(self, hosts: str, *, session_timeout_s: float = 18.0, connect_timeout_s: float = 15.0,
                 owns: Callable[[str], bool] = lambda g: True, live: Callable[[str], bool] = lambda g: False,
                 client: Callable[[], Any] | None = None) -> None:  # fmt: skip
        self.hosts = hosts
        self.connect_timeout_s = connect_timeout_s
        self.owns = owns
        self.live = live
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
        self._versions: dict[str, int] = {}  # offset znode → its version after this broker's last write
        #: offset znode → what this broker wrote beside it last (`paths.offset_metadata_json`; None: nothing, the
        #: metadata znode deleted), while its offset is this broker's write: a commit carrying the same is not
        #: written there again
        self._beside: dict[str, bytes | None] = {}
        self._parents: set[str] = set()  # parents of offset znodes this broker made or saw made
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
        base = paths.group_offsets(group)
        names = await self._children(base) if topics is None else topics
        parts = await asyncio.gather(*(self._children(f"{base}/{t}") for t in names))
        keys = [(t, int(p)) for t, ps in zip(names, parts, strict=True) for p in ps if p.isdigit()]
        datas, extras = await asyncio.gather(
            asyncio.gather(*(self._get(paths.group_offset(group, t, p)) for t, p in keys)),
            asyncio.gather(*(self._get(paths.group_offset_metadata(group, t, p)) for t, p in keys)),
        )
        out = {}
        for key, data, extra in zip(keys, datas, extras, strict=True):
            stored = paths.stored_offset(data, extra)  # (None: gone meanwhile, or unreadable: as never committed)
            if stored is not None:
                out[key] = stored
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
            self._versions = {k: v for k, v in self._versions.items() if not k.startswith(gone)}
            self._beside = {k: v for k, v in self._beside.items() if not k.startswith(gone)}
            self._parents = {k for k in self._parents if not k.startswith(gone)}
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
                for key, c in window:
                    if key not in finished:
                        continue
                    with self._cond:
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
        """Write a window of commits: the held ones one by one (`_write_offset`), the others with their offsets
        pipelined, then what they carry beside them pipelined (each after its offset, as `_write_offset`).
        Returns (key → whether its commit was written rather than kept from over a newer one, for each commit done;
        whether ZooKeeper answered throughout)."""
        finished: dict[OffsetKey, bool] = {}
        try:
            for key, c in window:
                if c.held:
                    try:
                        finished[key] = self._write_offset(key, c)
                    except UNREACHABLE:
                        raise
                    except KazooException as exc:
                        log.warning("writing group %s's commit of %s-%d failed, dropped: %s", *key, _reason(exc))
                        finished[key] = True
            quick = [(key, c) for key, c in window if not c.held]
            offsets = self._pipelined_offsets(quick, finished)
            self._pipelined_metadata(offsets, finished)
        except UNREACHABLE as exc:
            self._unreachable(_reason(exc))
            return finished, False
        return finished, True

    def _pipelined_offsets(self, quick: list[tuple[OffsetKey, _Commit]],
                           finished: dict[OffsetKey, bool]) -> list[tuple[OffsetKey, _Commit, int | None]]:  # fmt: skip
        """Set the offset znodes of commits not held, many to a multi (`batch.try_multis`: one request for
        hundreds of offsets); those of a multi ZooKeeper refused (one of its znodes is missing: a partition's
        first commit) one request each (`_offsets_one_by_one`); (key, commit, the znode's version before) of
        those written."""
        ops = [batch.Op("set_data", paths.group_offset(*key), paths.offset_data(c.stored)) for key, c in quick]
        befores = [self._versions.get(op.path) for op in ops]
        written: list[tuple[OffsetKey, _Commit, int | None]] = []
        alone: list[tuple[OffsetKey, _Commit]] = []
        lost: BaseException | None = None
        for (key, c), op, before, result in zip(quick, ops, befores, batch.try_multis(self.zk, ops), strict=True):
            if result is batch.REFUSED:
                alone.append((key, c))
            elif isinstance(result, BaseException):
                lost = _failed_write(key, result, finished, lost)
            else:
                self._versions[op.path] = result.version
                written.append((key, c, before))
        if lost is not None:  # (what carries beside the offsets written goes when ZooKeeper is back: still held)
            raise lost
        return written + self._offsets_one_by_one(alone, finished) if alone else written

    def _offsets_one_by_one(self, quick: list[tuple[OffsetKey, _Commit]], finished: dict[OffsetKey, bool]
                            ) -> list[tuple[OffsetKey, _Commit, int | None]]:  # fmt: skip
        """Set the offset znodes of commits not held, all requests sent before the first answer is awaited, then
        create the missing ones the same way; (key, commit, the znode's version before) of those written."""
        zk = self.zk
        sent = []
        for key, c in quick:
            path = paths.group_offset(*key)
            sent.append((key, c, self._versions.get(path), zk.set_async(path, paths.offset_data(c.stored))))
        written = []
        missing = []
        lost: BaseException | None = None
        for key, c, before, result in sent:
            path = paths.group_offset(*key)
            try:
                self._versions[path] = result.get().version
            except NoNodeError:
                missing.append((key, c, before))
                continue
            except WRITE_FAILURES as exc:
                lost = _failed_write(key, exc, finished, lost)
                continue
            written.append((key, c, before))
        if lost is None and missing:  # (a first commit of the partition: its parents first, a level at a time)
            self._ensure_parents([paths.group_offset(*key) for key, _, _ in missing])
            created = [(key, c, before, zk.create_async(paths.group_offset(*key), paths.offset_data(c.stored),
                                                        makepath=True)) for key, c, before in missing]  # fmt: skip
            for key, c, before, result in created:
                try:
                    try:
                        result.get()
                        self._versions[paths.group_offset(*key)] = 0
                    except NodeExistsError:  # (created meanwhile by someone else: set after all)
                        if lost is not None:
                            continue
                        self._write_offset_znode(key, c)
                except WRITE_FAILURES as exc:
                    lost = _failed_write(key, exc, finished, lost)
                    continue
                written.append((key, c, before))
        if lost is not None:  # (what carries beside the offsets written goes when ZooKeeper is back: still held)
            raise lost
        return written

    def _pipelined_metadata(self, offsets: list[tuple[OffsetKey, _Commit, int | None]],
                            finished: dict[OffsetKey, bool]) -> None:  # fmt: skip
        """What the commits whose offsets were just written carry beside them (`consumers.put_offset_metadata`),
        many to a multi, those of a multi ZooKeeper refused (a first metadata znode, one to delete that is not
        there) pipelined one request each; skipped, as in `_write_offset`, when it is there already
        (`_beside_unchanged`)."""
        todo: list[tuple[OffsetKey, _Commit, bytes | None]] = []
        for key, c, before in offsets:
            path = paths.group_offset(*key)
            if self._beside_unchanged(path, before, c):
                finished[key] = True
                continue
            self._beside.pop(path, None)
            todo.append((key, c, paths.offset_metadata_json(c.stored)))
        # the deletes in multis of their own: a bare commit's delete finds no znode after a restart (refused), and
        # would take the sets of its multi down with it
        todo.sort(key=lambda item: item[2] is None)
        ops = [batch.Op("set_data", paths.group_offset_metadata(*key), data) if data is not None
               else batch.Op("delete", paths.group_offset_metadata(*key)) for key, _, data in todo]  # fmt: skip
        sets = sum(1 for _, _, data in todo if data is not None)
        results = batch.try_multis(self.zk, ops[:sets]) + batch.try_multis(self.zk, ops[sets:])
        alone = []
        lost: BaseException | None = None
        for (key, c, data), result in zip(todo, results, strict=True):
            if result is batch.REFUSED:
                alone.append((key, c, data))
            elif isinstance(result, BaseException):
                lost = _failed_write(key, result, finished, lost)
            else:
                self._beside[paths.group_offset(*key)] = data
                finished[key] = True
        if lost is not None:
            raise lost
        if alone:
            self._metadata_one_by_one(alone, finished)

    def _metadata_one_by_one(self, todo: list[tuple[OffsetKey, _Commit, bytes | None]],
                             finished: dict[OffsetKey, bool]) -> None:  # fmt: skip
        """`_pipelined_metadata`'s writes, pipelined one request each (creating the missing znodes)."""
        zk = self.zk
        self._ensure_parents([paths.group_offset_metadata(*key) for key, _, data in todo if data is not None])
        sent = []
        for key, c, data in todo:
            meta = paths.group_offset_metadata(*key)
            sent.append((key, c, data, zk.set_async(meta, data) if data is not None else zk.delete_async(meta)))
        lost: BaseException | None = None
        for at, (key, c, data, result) in enumerate(sent):
            try:
                result.get()
            except NoNodeError:
                if data is not None:  # (a first metadata znode: created with its parents, below)
                    sent[at] = (key, c, data, zk.create_async(paths.group_offset_metadata(*key), data, makepath=True))
                    continue
            except UNREACHABLE as exc:
                lost = lost or exc
                sent[at] = (key, c, data, None)
                continue
            except KazooException:
                pass  # (dropped: logged below)
        for key, c, data, result in sent:
            if result is None:
                continue
            try:
                try:
                    result.get()
                except NodeExistsError:  # (created meanwhile by someone else)
                    if lost is not None:
                        continue
                    consumers.put_offset_metadata(self.zk, *key, c.stored)
                except NoNodeError:  # (a metadata znode to delete that is not there: fine)
                    if data is not None:
                        raise
            except WRITE_FAILURES as exc:  # (dropped, as in `_write_commits`; not known to be there)
                lost = _failed_write(key, exc, finished, lost)
                continue
            self._beside[paths.group_offset(*key)] = data
            finished[key] = True
        if lost is not None:
            raise lost

    def _ensure_parents(self, leaves: list[str]) -> None:
        """Create the parents of znodes about to be created that this store has not made or seen yet."""
        new = [leaf for leaf in leaves if leaf.rsplit("/", 1)[0] not in self._parents]
        if new:
            batch.ensure_parents(self.zk, new)
            self._parents.update(leaf.rsplit("/", 1)[0] for leaf in new)

    def _write_offset(self, key: OffsetKey, c: _Commit) -> bool:
        """Write one commit, its offset then what it carries beside it (`consumers.put_offset_metadata`); False
        when it was not written over a newer one."""
        path = paths.group_offset(*key)
        before = self._versions.get(path)
        if not self._write_offset_znode(key, c):
            return False
        if not self._beside_unchanged(path, before, c):
            self._beside.pop(path, None)
            consumers.put_offset_metadata(self.zk, *key, c.stored)
        self._beside[path] = paths.offset_metadata_json(c.stored)
        return True

    def _beside_unchanged(self, path: str, before: int | None, c: _Commit) -> bool:
        """Whether what a commit carries beside its offset (just written over version `before`) is there already:
        this broker wrote the same last, and nobody wrote the offset in between (every writer writes the offset
        first). A bare commit over a bare one, or a client committing the same position again, skips a write."""
        alone = before is not None and self._versions.get(path) == before + 1
        return alone and path in self._beside and self._beside[path] == paths.offset_metadata_json(c.stored)

    def _write_offset_znode(self, key: OffsetKey, c: _Commit) -> bool:
        """Write one commit's offset; False when it was not written over a newer one. Only a held commit is
        checked (one written as it comes is the newest there is: as in Kafka, the last commit wins)."""
        zk = self.zk
        path = paths.group_offset(*key)
        data = paths.offset_data(c.stored)
        if not c.held:
            try:
                stat = zk.set(path, data)
            except NoNodeError:
                try:
                    zk.create(path, data, makepath=True)
                    self._versions[path] = 0
                    return True
                except NodeExistsError:
                    stat = zk.set(path, data)
            self._versions[path] = stat.version
            return True
        while True:  # held: not over a commit someone else wrote after this one was accepted
            try:
                current, stat = zk.get(path)
            except NoNodeError:
                try:
                    zk.create(path, data, makepath=True)
                except NodeExistsError:
                    continue
                self._versions[path] = 0
                return True
            if stat.version != self._versions.get(path) and stat.mtime > c.at_ms:
                if current != data or self._metadata_newer(key, c):
                    return False
                # this commit's own offset, written by an attempt whose reply was lost (ConnectionLoss): it is
                # there, and what it carries beside it is not yet (written next, as after any write)
                self._versions[path] = stat.version
                return True
            try:
                stat = zk.set(path, data, version=stat.version)
            except (BadVersionError, NoNodeError):
                continue
            self._versions[path] = stat.version
            return True

    def _metadata_newer(self, key: OffsetKey, c: _Commit) -> bool:
        """Whether the metadata znode beside a held commit's offset was written after the commit was accepted:
        by someone else (this commit's own is written only after its offset), committing the same offset
        later; theirs stays."""
        stat = self.zk.exists(paths.group_offset_metadata(*key))
        return stat is not None and stat.mtime > c.at_ms

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


def _settle(fut: asyncio.Future, value: Any, error: BaseException | None) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(value)


def _failed_write(key: OffsetKey, exc: BaseException, finished: dict[OffsetKey, bool],
                  lost: BaseException | None) -> BaseException | None:  # fmt: skip
    """A pipelined commit write that failed: ZooKeeper unreachable is what `lost` becomes (the first such error,
    raised once the window settles; the commit stays held); any other error drops the commit, logged."""
    if isinstance(exc, UNREACHABLE):
        return lost or exc
    log.warning("writing group %s's commit of %s-%d failed, dropped: %s", *key, _reason(exc))
    finished[key] = True
    return lost


def _reason(exc: BaseException) -> str:
    """kazoo's exceptions often say nothing: their type does."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _close_client(zk: Any) -> None:
    with contextlib.suppress(Exception):
        zk.stop()
    with contextlib.suppress(Exception):
        zk.close()
