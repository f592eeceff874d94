"""The group store (broker/coordinator/group/store.py) on an in-memory stand-in for kazoo's client: commits written
in order and answered once written; during an outage answered at once, held, served back by fetch, and written
when ZooKeeper returns (the newest per partition; never over a newer commit someone else wrote); generations
the same; reads bounded; the outage logged once and its end once. Plain asyncio.run, no plugin.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
from kazoo.client import KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)

from broker.coordinator.group import store as group_store
from broker.coordinator.group.store import GroupStore
from broker.zk import consumers, paths
from broker.zk.paths import StoredOffset

G = "g"
T = "orders"


def run(coro):  # noqa: ANN001, ANN201 - a tiny helper
    return asyncio.run(asyncio.wait_for(coro, 20))


def offsets_of(found: dict[tuple[str, int], StoredOffset] | None) -> dict[tuple[str, int], int] | None:
    """A fetch's offsets alone (the tests below are about which commit is answered, not what it carries)."""
    return None if found is None else {tp: stored.offset for tp, stored in found.items()}


class Stat(NamedTuple):
    version: int
    mtime: int


class Result:
    """A finished (or, when `hang`, never finishing) kazoo async result."""

    def __init__(self, fn: Callable[[], Any] | None) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.ready = fn is not None
        if fn is not None:
            try:
                self.value = fn()
            except BaseException as exc:  # noqa: BLE001
                self.error = exc

    def rawlink(self, callback: Callable[[Any], None]) -> None:
        if self.ready:
            callback(self)

    def get(self, block: bool = True) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class FakeZk:
    """Znodes in a dict; `down()` fails every call with ConnectionLoss and tells the listeners SUSPENDED, `up()`
    CONNECTED; `hang` leaves asynchronous calls unanswered (a ZooKeeper that does not answer yet)."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, Stat]] = {}
        self.connected = True
        self.hang = False
        self.failing = False  # calls fail with ConnectionLoss while the session still looks connected
        self.listeners: list[Callable[[str], None]] = []
        self.writes: list[tuple[str, bytes]] = []
        self.lock = threading.RLock()

    # -- session --
    def add_listener(self, fn: Callable[[str], None]) -> None:
        self.listeners.append(fn)

    def remove_listener(self, fn: Callable[[str], None]) -> None:
        self.listeners.remove(fn)

    def start_async(self) -> threading.Event:
        e = threading.Event()
        if self.connected:
            e.set()
        return e

    def stop(self) -> None:
        pass

    def close(self) -> None:
        pass

    def down(self) -> None:
        self.connected = False
        for fn in list(self.listeners):
            fn(KazooState.SUSPENDED)

    def up(self) -> None:
        self.connected = True
        for fn in list(self.listeners):
            fn(KazooState.CONNECTED)

    # -- synchronous calls --
    def _check(self) -> None:
        if not self.connected or self.failing:
            raise ConnectionLoss()

    def get(self, path: str) -> tuple[bytes, Stat]:
        with self.lock:
            self._check()
            if path not in self.nodes:
                raise NoNodeError()
            return self.nodes[path]

    def exists(self, path: str) -> Stat | None:
        with self.lock:
            self._check()
            return self.nodes[path][1] if path in self.nodes else None

    def get_children(self, path: str) -> list[str]:
        with self.lock:
            self._check()
            if path not in self.nodes:
                raise NoNodeError()
            prefix = path.rstrip("/") + "/"
            return sorted({p[len(prefix) :].split("/")[0] for p in self.nodes if p.startswith(prefix)})

    def put(self, path: str, data: bytes, *, mtime: int | None = None) -> None:
        """Someone else writes (another coordinator, kafkactl): no version check."""
        with self.lock:
            old = self.nodes.get(path)
            self._mkparents(path)
            self.nodes[path] = (data, Stat(old[1].version + 1 if old else 0, mtime or _now_ms()))

    def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        with self.lock:
            self._check()
            if path not in self.nodes:
                raise NoNodeError()
            stat = self.nodes[path][1]
            if version != -1 and version != stat.version:
                raise BadVersionError()
            self.nodes[path] = (data, Stat(stat.version + 1, _now_ms()))
            self.writes.append((path, data))
            return self.nodes[path][1]

    def create(self, path: str, data: bytes = b"", makepath: bool = False) -> str:
        with self.lock:
            self._check()
            if path in self.nodes:
                raise NodeExistsError()
            parent = path.rsplit("/", 1)[0]
            if parent and parent not in self.nodes and not makepath:
                raise NoNodeError()
            self._mkparents(path)
            self.nodes[path] = (data, Stat(0, _now_ms()))
            self.writes.append((path, data))
            return path

    def delete(self, path: str, version: int = -1) -> None:
        with self.lock:
            self._check()
            if path not in self.nodes:
                raise NoNodeError()
            if any(p.startswith(path + "/") for p in self.nodes):
                raise NotEmptyError()
            del self.nodes[path]

    def _mkparents(self, path: str) -> None:
        parts = path.split("/")
        for i in range(2, len(parts)):
            self.nodes.setdefault("/".join(parts[:i]), (b"", Stat(0, _now_ms())))

    # -- asynchronous calls --
    def _async(self, fn: Callable[[], Any]) -> Result:
        return Result(None if self.hang else fn)

    def get_async(self, path: str, watch: Any = None) -> Result:
        return self._async(lambda: self.get(path))

    def get_children_async(self, path: str) -> Result:
        return self._async(lambda: self.get_children(path))

    def exists_async(self, path: str) -> Result:
        return self._async(lambda: self.exists(path))

    # the writer's pipelined writes answer at once (`hang` is for reads)
    def set_async(self, path: str, data: bytes, version: int = -1) -> Result:
        return Result(lambda: self.set(path, data, version))

    def delete_async(self, path: str) -> Result:
        return Result(lambda: self.delete(path))

    def create_async(self, path: str, data: bytes = b"", makepath: bool = False) -> Result:
        return Result(lambda: self.create(path, data, makepath=makepath))

    def transaction(self) -> FakeTransaction:
        return FakeTransaction(self)

    # -- what a test reads --
    def offset(self, topic: str, p: int, group: str = G) -> int | None:
        entry = self.entry(topic, p, group)
        return None if entry is None else entry.stored.offset

    def entry(self, topic: str, p: int, group: str = G) -> paths.BlockEntry | None:
        node = self.nodes.get(paths.group_offset_block(group, topic, paths.offset_block_of(p)))
        return None if node is None else paths.parse_offset_block(node[0]).get(p)


class FakeTransaction:
    """A multi: all of its operations or none (kazoo's results: a refused op's exception, RolledBackError for the
    others)."""

    def __init__(self, zk: FakeZk) -> None:
        self.zk = zk
        self.ops: list[tuple[str, str, bytes, int]] = []

    def set_data(self, path: str, data: bytes, version: int = -1) -> None:
        self.ops.append(("set", path, data, version))

    def delete(self, path: str, version: int = -1) -> None:
        self.ops.append(("delete", path, b"", version))

    def create(self, path: str, data: bytes = b"", sequence: bool = False) -> None:
        self.ops.append(("create", path, data, -1))

    def commit_async(self) -> Result:
        return Result(self._commit)

    def _commit(self) -> list[Any]:
        zk = self.zk
        with zk.lock:
            zk._check()
            nodes, writes = dict(zk.nodes), list(zk.writes)
            counted = getattr(zk, "deleted", None)  # (a subclass's count of deletions: a refused multi did none)
            before = list(counted) if counted is not None else None
            out: list[Any] = []
            for kind, path, data, version in self.ops:
                try:
                    if kind == "set":
                        out.append(zk.set(path, data, version))
                    elif kind == "delete":
                        zk.delete(path, version)
                        out.append(True)
                    else:
                        out.append(zk.create(path, data))
                except (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError) as exc:
                    zk.nodes.clear()
                    zk.nodes.update(nodes)
                    zk.writes[:] = writes
                    if counted is not None and before is not None:
                        counted[:] = before
                    return [exc if i == len(out) else RolledBackError() for i in range(len(self.ops))]
            return out


def _now_ms() -> int:
    return int(time.time() * 1000)


async def started(zk: FakeZk, live: Callable[[str], bool] = lambda g: True,
                  owns: Callable[[str], bool] = lambda g: True) -> GroupStore:  # fmt: skip
    store = GroupStore("fake:2181", connect_timeout_s=1, live=live, owns=owns, client=lambda: zk)
    store.start(asyncio.get_running_loop())
    return store


async def until(what: str, check: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)
    return result


@pytest.fixture(autouse=True)
def short_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_store, "COMMIT_WAIT_S", 0.3)
    monkeypatch.setattr(group_store, "READ_WAIT_S", 0.3)
    monkeypatch.setattr(group_store, "RETRY_PAUSE_S", 0.05)


def outage_lines(caplog: pytest.LogCaptureFixture) -> tuple[list[str], list[str]]:
    msgs = [r.getMessage() for r in caplog.records if r.name == "broker.coordinator.group.store"]
    return [m for m in msgs if m.startswith("ZooKeeper unreachable")], [m for m in msgs if "ZooKeeper back" in m]


# --- while ZooKeeper answers ------------------------------------------------------------------------------------


def test_a_commit_is_answered_once_written_and_fetch_reads_zookeeper() -> None:
    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        await store.commit(G, {(T, 0): 5, (T, 1): 7})
        assert (zk.offset(T, 0), zk.offset(T, 1)) == (5, 7) and store.held_commits() == {}
        zk.put(f"/consumers/{G}/offsets/{T}/2", b"9")  # (kafkactl group rewind, say)
        assert offsets_of(await store.fetch(G, {T: [0, 2, 3]})) == {(T, 0): 5, (T, 2): 9, (T, 3): -1}
        assert offsets_of(await store.fetch(G, None)) == {(T, 0): 5, (T, 1): 7, (T, 2): 9}
        await store.commit(G, {(T, 0): 6})
        assert zk.offset(T, 0) == 6
        await store.close(1)

    run(main())


def put_entry(zk: FakeZk, topic: str, p: int, offset: int, at_ms: int | None = None, group: str = G) -> None:
    """Someone else (another coordinator, kafkactl group rewind) writes one partition's commit into its block."""
    path = paths.group_offset_block(group, topic, paths.offset_block_of(p))
    node = zk.nodes.get(path)
    entries = paths.parse_offset_block(node[0]) if node is not None else {}
    entries[p] = paths.BlockEntry(StoredOffset(offset), at_ms or _now_ms())
    zk.put(path, paths.offset_block_json(entries))


def block_writes(zk: FakeZk) -> list[tuple[str, dict[int, int]]]:
    """The block writes made (path under /consumers, partition -> offset), in order."""
    return [(path.split("/consumers/")[1], {p: e.stored.offset for p, e in paths.parse_offset_block(data).items()})
            for path, data in zk.writes if "/block-" in path]  # fmt: skip


def test_commits_go_a_block_at_a_time_many_blocks_to_a_multi() -> None:
    """A commit of 50 partitions is 4 block writes (16 partitions to a block) in one multi, creating the blocks
    the first time; a multi refused because someone else wrote one of its blocks meanwhile is done again a
    block at a time, each read again: the other writer's commit of a partition not committed here stays."""

    async def main() -> None:
        zk = FakeZk()
        multis: list[int] = []
        singles: list[str] = []
        transaction, set_async = zk.transaction, zk.set_async

        def counted_transaction() -> FakeTransaction:
            tx = transaction()
            commit = tx.commit_async
            tx.commit_async = lambda: (multis.append(len(tx.ops)), commit())[1]  # type: ignore[method-assign]
            return tx

        def counted_set(path: str, data: bytes, version: int = -1) -> Result:
            singles.append(path)
            return set_async(path, data, version)

        zk.transaction, zk.set_async = counted_transaction, counted_set  # type: ignore[method-assign]
        store = await started(zk)
        await store.commit(G, {(T, p): StoredOffset(p, leader_epoch=3, metadata="m") for p in range(50)})
        assert [zk.offset(T, p) for p in range(50)] == list(range(50))
        assert multis == [4] and singles == []  # (the blocks created, in one multi)
        multis.clear()
        await store.commit(G, {(T, p): StoredOffset(p + 100, leader_epoch=4, metadata="m") for p in range(50)})
        assert [zk.offset(T, p) for p in range(50)] == [p + 100 for p in range(50)]
        assert multis == [4] and singles == []
        multis.clear()
        put_entry(zk, T, 60, 600)  # (another writer, in the block of partitions 48-63)
        await store.commit(G, {(T, p): StoredOffset(p + 200, leader_epoch=5, metadata="m") for p in range(50)})
        assert [zk.offset(T, p) for p in range(50)] == [p + 200 for p in range(50)] and zk.offset(T, 60) == 600
        assert multis == [4] and len(singles) == 4  # (refused whole, then a block at a time)
        found = await store.fetch(G, {T: [0, 49, 60]})
        assert found is not None and (found[(T, 49)].leader_epoch, found[(T, 49)].metadata) == (5, "m")
        assert found[(T, 60)].offset == 600
        await store.close(1)

    run(main())


def test_commits_are_written_in_the_order_they_were_made() -> None:
    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        zk.down()
        for i in range(5):
            await store.commit(G, {(T, i % 2): 100 + i, ("other", 0): i})
        await store.commit("h", {(T, 0): 1})
        zk.writes.clear()
        zk.up()
        await until("the held commits written", lambda: not store.held_commits())
        # the newest of each partition only, a write per block, in the order of their last commits
        assert block_writes(zk) == [
            (f"{G}/offsets/{T}/block-0", {0: 104, 1: 103}), (f"{G}/offsets/other/block-0", {0: 4}),
            (f"h/offsets/{T}/block-0", {0: 1})]  # fmt: skip
        await store.close(1)

    run(main())


def test_commits_are_written_a_window_at_a_time_and_those_a_lost_connection_stopped_stay_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(group_store, "WRITE_WINDOW", 3)  # (8 partitions: three windows, a block write each)

    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        await store.commit(G, {(T, p): StoredOffset(10 + p, 2, f"m{p}") for p in range(8)})  # (the block created)
        assert [zk.offset(T, p) for p in range(8)] == [10 + p for p in range(8)] and not store.held_commits()
        assert await store.fetch(G, None) == {(T, p): StoredOffset(10 + p, 2, f"m{p}") for p in range(8)}
        real_set, calls = zk.set, [0]

        def set_failing_from_the_second(path: str, data: bytes, version: int = -1) -> Stat:
            calls[0] += 1
            if calls[0] == 2:
                zk.failing = True  # (the connection drops after the first window)
            return real_set(path, data, version)

        zk.set = set_failing_from_the_second  # type: ignore[method-assign]
        await store.commit(G, {(T, p): StoredOffset(20 + p, 3, "") for p in range(8)})  # answered: not all written
        assert store.held_commits() == {(G, T, p): 20 + p for p in range(3, 8)}
        assert [zk.offset(T, p) for p in range(8)] == [20, 21, 22, 13, 14, 15, 16, 17]
        zk.failing = False
        await until("the held commits written", lambda: not store.held_commits())
        assert await store.fetch(G, None) == {(T, p): StoredOffset(20 + p, 3, "") for p in range(8)}
        await store.close(1)

    run(main())


def test_blocks_are_read_again_after_coordinators_may_have_moved() -> None:
    """A group deleted and committed again by another coordinator meanwhile has a block whose version started
    again from 0: once the broker set changed (`moves`), the store reads it again instead of writing over it
    at the version it knew."""

    async def main() -> None:
        zk = FakeZk()
        moves = [0]
        store = GroupStore("fake:2181", connect_timeout_s=1, client=lambda: zk, moves=lambda: moves[0])
        store.start(asyncio.get_running_loop())
        await store.commit(G, {(T, 0): 5, (T, 2): 9})  # (the block at version 0, known here)
        consumers.delete_group_state(zk, G)  # type: ignore[arg-type] - the group's next coordinator deletes it
        consumers.commit(zk, G, {(T, 1): 7})  # type: ignore[arg-type] - and a commit makes the block again
        moves[0] += 1  # (the broker set changed: this broker coordinates the group again)
        await store.commit(G, {(T, 0): 6})
        assert offsets_of(await store.fetch(G, None)) == {(T, 0): 6, (T, 1): 7}
        await store.close(1)

    run(main())


def test_a_window_of_more_blocks_than_the_store_keeps_is_written_whole(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(group_store, "BLOCKS_KEPT", 2)  # (7 blocks a commit: those read push out those known)

    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        for r in range(3):
            await store.commit(G, {(T, p): 100 * r + p for p in range(100)})
            assert [zk.offset(T, p) for p in range(100)] == [100 * r + p for p in range(100)]
            assert not store.held_commits()
        await store.close(1)

    run(main())
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_block_written_by_someone_else_meanwhile_is_read_again_not_written_over() -> None:
    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        await store.commit(G, {(T, 0): StoredOffset(5, 1, "m")})
        put_entry(zk, T, 1, 3)  # kafkactl group rewind, between two of this broker's writes to the block
        zk.writes.clear()
        await store.commit(G, {(T, 0): StoredOffset(6, 1, "m")})
        assert len(block_writes(zk)) == 1  # (refused at the version this broker wrote, read again, written once)
        assert await store.fetch(G, None) == {(T, 0): StoredOffset(6, 1, "m"), (T, 1): StoredOffset(3)}
        await store.close(1)

    run(main())


# --- an outage ---------------------------------------------------------------------------------------------------


def test_during_an_outage_commits_are_answered_at_once_held_fetched_back_and_written_when_it_returns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "broker.coordinator.group.store")

    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        await store.commit(G, {(T, 0): 1, (T, 1): 1})
        zk.down()
        began = time.monotonic()
        for i in range(2, 40):
            await store.commit(G, {(T, 0): i})
        assert time.monotonic() - began < 0.2  # no commit waited
        assert store.held_commits() == {(G, T, 0): 39} and zk.offset(T, 0) == 1
        # held, and committed here before
        assert offsets_of(await store.fetch(G, {T: [0, 1]})) == {(T, 0): 39, (T, 1): 1}
        assert offsets_of(await store.fetch(G, {T: [0, 2]})) is None  # partition 2: unknown here → LOAD_IN_PROGRESS
        assert offsets_of(await store.fetch(G, None)) is None  # which partitions: ZooKeeper's to say
        for _ in range(3):
            zk.down()  # (the session flapping, writes failing: one line all the same)
        zk.up()
        await until("the held commit written", lambda: zk.offset(T, 0) == 39)
        await until("the end of the outage logged", lambda: outage_lines(caplog)[1])
        down, back = outage_lines(caplog)
        assert len(down) == 1 and down[0].startswith("ZooKeeper unreachable: connection lost, 0 commits held")
        assert len(back) == 1 and "wrote 1 held commits" in back[0], back
        assert offsets_of(await store.fetch(G, {T: [0, 2]})) == {(T, 0): 39, (T, 2): -1}
        await store.close(1)

    run(main())


def test_memory_answers_only_for_groups_with_members_here_and_forgets_them() -> None:
    async def main() -> None:
        zk = FakeZk()
        live = {G}
        store = await started(zk, live=lambda g: g in live)
        zk.put(f"/consumers/{G}/offsets/{T}/0", b"4")
        zk.put(f"/consumers/h/offsets/{T}/0", b"8")
        assert offsets_of(await store.fetch(G, {T: [0, 1]})) == {(T, 0): 4, (T, 1): -1}
        assert offsets_of(await store.fetch("h", {T: [0]})) == {(T, 0): 8}
        zk.down()
        assert offsets_of(await store.fetch(G, {T: [0, 1]})) == {(T, 0): 4, (T, 1): -1}  # read while it had members
        assert offsets_of(await store.fetch("h", {T: [0]})) is None  # no members here: anyone may have changed it
        store.forget(G)  # the group emptied (kafkactl group rewind may change its offsets now) or moved
        assert offsets_of(await store.fetch(G, {T: [0]})) is None
        await store.close(1)

    run(main())


def test_a_held_commit_is_not_written_over_a_newer_one(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "broker.coordinator.group.store")

    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        await store.commit(G, {(T, 0): 10, (T, 1): 10})
        zk.down()
        put_entry(zk, T, 1, 3, _now_ms() - 60_000)  # older than what is held
        await store.commit(G, {(T, 0): 20, (T, 1): 20})
        await asyncio.sleep(0.01)
        put_entry(zk, T, 0, 25)  # the group's next coordinator, after it
        zk.up()
        await until("the held commits written", lambda: not store.held_commits())
        assert (zk.offset(T, 0), zk.offset(T, 1)) == (25, 20)
        await until("the end of the outage logged", lambda: outage_lines(caplog)[1])
        assert "wrote 1 held commits, kept 1 newer ones ZooKeeper had" in outage_lines(caplog)[1][0]
        await store.close(1)

    run(main())


def test_a_failed_write_holds_the_commit_and_the_writer_tries_again(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "broker.coordinator.group.store")

    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        zk.failing = True  # (the connection dropped; kazoo has not told the listeners yet)
        began = time.monotonic()
        await store.commit(G, {(T, 0): 3})  # answered as soon as the write failed
        assert time.monotonic() - began < group_store.COMMIT_WAIT_S
        assert store.held_commits() == {(G, T, 0): 3}
        await store.commit(G, {(T, 0): 4})
        await asyncio.sleep(0.2)  # (the writer tries again, and fails again)
        zk.failing = False  # back without a state change: the writer's next try finds it
        await until("the commit written", lambda: zk.offset(T, 0) == 4)
        await until("the end of the outage logged", lambda: outage_lines(caplog)[1])
        down, back = outage_lines(caplog)
        assert len(down) == 1 and down[0].startswith("ZooKeeper unreachable: ConnectionLoss, 1 commits held"), down
        assert len(back) == 1 and "wrote 1 held commits" in back[0], back
        await store.close(1)

    run(main())


# --- generations -------------------------------------------------------------------------------------------------


def state(generation: int, member: str = "m1") -> dict[str, Any]:
    return {"generation": generation, "protocol_type": "consumer", "protocol": "range", "leader": member,
            "members": [{"member_id": member, "group_instance_id": None, "client_id": "c", "client_host": "/h",
                         "session_timeout_ms": 6000, "rebalance_timeout_ms": 6000,
                         "protocols": [{"name": "range", "metadata": b"m"}], "assignment": b"a"}]}  # fmt: skip


def test_generations_are_held_through_an_outage_and_written_in_order() -> None:
    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        store.store_generation(G, 1, state(1))
        await until("generation 1 stored", lambda: consumers.generation(zk, G))
        zk.down()
        store.store_generation(G, 2, state(2))
        store.store_generation(G, 3, state(3, "m2"))
        assert await store.load_generation(G) == state(3, "m2")  # the last one queued, not ZooKeeper's
        store.store_generation("h", 5, state(5))
        store.store_generation("h", 5, None)  # h emptied
        assert await store.load_generation("h") is None
        assert await store.load_generation("unknown") is None  # unreachable: afresh, at once
        zk.up()
        await until("generation 3 stored", lambda: (consumers.generation(zk, G) or {}).get("generation") == 3)
        assert consumers.generation(zk, "h") is None
        assert await store.load_generation(G) == state(3, "m2")  # from ZooKeeper now
        await store.close(1)

    run(main())


def test_a_group_that_moved_away_is_not_written_by_its_old_coordinator() -> None:
    async def main() -> None:
        zk = FakeZk()
        store = await started(zk, owns=lambda g: g != "moved")
        store.store_generation("moved", 1, state(1))
        store.store_generation(G, 1, state(1))
        await until("G's generation stored", lambda: consumers.generation(zk, G))
        assert consumers.generation(zk, "moved") is None
        await store.close(1)

    run(main())


# --- bounds ------------------------------------------------------------------------------------------------------


def test_reads_of_a_zookeeper_that_does_not_answer_end_within_their_bound() -> None:
    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        await store.commit(G, {(T, 0): 2})
        zk.hang = True
        began = time.monotonic()
        assert await store.load_generation(G) is None
        assert offsets_of(await store.fetch(G, {T: [0]})) == {(T, 0): 2}  # from memory
        assert offsets_of(await store.fetch(G, {T: [1]})) is None
        assert await store.stored_groups() == set()
        assert time.monotonic() - began < 4 * group_store.READ_WAIT_S + 0.5
        zk.hang = False
        assert await store.stored_groups() == {G}
        await store.close(1)

    run(main())


def test_close_writes_what_is_held_or_says_what_it_lost(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "broker.coordinator.group.store")

    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        zk.down()
        await store.commit(G, {(T, 0): 4})
        zk.up()
        await store.close(2)
        assert zk.offset(T, 0) == 4
        zk2 = FakeZk()
        store2 = await started(zk2)
        zk2.down()
        await store2.commit(G, {(T, 0): 4, (T, 1): 5})
        await store2.close(0.5)
        assert zk2.offset(T, 0) is None
        assert any("at shutdown: 2 held commits and 0 group generations are lost" in r.getMessage()
                   for r in caplog.records)  # fmt: skip

    run(main())


# --- deletions (DeleteGroups, OffsetDelete) ----------------------------------------------------------------------


def test_deleting_a_group_removes_its_offsets_generation_and_node() -> None:
    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        await store.commit(G, {(T, 0): 5, (T, 1): 7, ("other", 0): 1})
        store.store_generation(G, 2, state(2))
        store.store_generation(G, 2, None)  # (it emptied)
        await store.commit("h", {(T, 0): 3})
        assert await store.has_group(G) is True
        assert await store.delete(G) is True
        assert not [p for p in zk.nodes if p == f"/consumers/{G}" or p.startswith(f"/consumers/{G}/")]
        assert offsets_of(await store.fetch(G, None)) == {} and await store.has_group(G) is False
        assert zk.offset(T, 0, group="h") == 3  # another group's are left alone
        assert await store.delete(G) is True  # (nothing left: nothing to do)
        await store.close(1)

    run(main())


def test_offset_delete_removes_those_partitions_and_prunes_what_it_empties() -> None:
    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        await store.commit(G, {(T, 0): 5, (T, 1): 7, ("other", 0): 1})
        assert await store.delete(G, [(T, 0)]) is True
        assert offsets_of(await store.fetch(G, None)) == {(T, 1): 7, ("other", 0): 1}
        assert await store.delete(G, [(T, 1), ("other", 0), ("never", 3)]) is True
        assert not [p for p in zk.nodes if p.startswith(f"/consumers/{G}")]  # (an empty group goes, as Kafka)
        await store.close(1)

    run(main())


def test_a_deletion_takes_the_commits_made_before_it_and_none_made_after(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        with zk.lock:  # the writer is stuck in its write of the first commit
            await store.commit(G, {(T, 0): 5})  # (answered after COMMIT_WAIT_S, still held)
            deleting = asyncio.create_task(store.delete(G))
            await asyncio.sleep(0.05)
            await store.commit(G, {(T, 1): 7})  # after the deletion
        assert await deleting is True
        await until("the later commit written", lambda: not store.held_commits())
        assert (zk.offset(T, 0), zk.offset(T, 1)) == (None, 7)
        assert offsets_of(await store.fetch(G, None)) == {(T, 1): 7}
        await store.close(1)

    run(main())


def test_a_deletion_zookeeper_cannot_take_is_answered_not_done_and_never_done_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(group_store, "DELETE_WAIT_S", 0.3)

    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        await store.commit(G, {(T, 0): 5})
        zk.down()
        assert await store.delete(G) is False  # unreachable: at once
        zk.up()
        await until("reachable again", lambda: store._reachable)
        with zk.lock:  # too slow to begin it: withdrawn
            await store.commit(G, {(T, 1): 6})
            began = time.monotonic()
            assert await store.delete(G) is False
            assert time.monotonic() - began < 1.0
        await until("the commit written", lambda: not store.held_commits())
        await asyncio.sleep(0.2)
        assert (zk.offset(T, 0), zk.offset(T, 1)) == (5, 6)
        await store.close(1)

    run(main())
