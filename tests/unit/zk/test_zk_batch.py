"""broker.zk.batch (pipelined reads, chunked multis) and broker.zk.node_watches against a real ZooKeeper."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, ConnectionClosedError, NodeExistsError

from broker.zk import batch, paths, registry
from broker.zk.batch import Op
from broker.zk.node_watches import NodeWatches
from tests.fixtures import zk_client


@pytest.fixture
def zk(zk_chroot: str) -> Iterator[KazooClient]:
    client = zk_client(zk_chroot)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def _create(zk: KazooClient, n: int, parent: str = "/n") -> list[str]:
    zk.ensure_path(parent)
    paths = [f"{parent}/{i}" for i in range(n)]
    results = batch.multi_chunks(zk, [Op("create", p, str(i).encode()) for i, p in enumerate(paths)])
    assert results == paths
    return paths


def test_chunks_bound_ops_and_bytes() -> None:
    ops = [Op("create", f"/a/{i}", b"x" * 10) for i in range(1201)]
    parts = batch.chunks(ops)
    assert [len(p) for p in parts] == [500, 500, 201]
    big = [Op("set_data", f"/b/{i}", b"y" * 100_000) for i in range(12)]
    parts = batch.chunks(big, max_bytes=512 * 1024)
    assert [len(p) for p in parts] == [5, 5, 2]
    assert [op for part in parts for op in part] == big
    assert batch.chunks([]) == []


def test_multi_chunks_writes_more_than_one_multi_holds(zk: KazooClient) -> None:
    """2,500 creates of 500 bytes each are 1.2 MB: more than jute.maxbuffer (1 MiB) lets one multi carry."""
    zk.ensure_path("/big")
    ops = [Op("create", f"/big/{i}", b"z" * 500) for i in range(2500)]
    assert batch.multi_chunks(zk, ops) == [op.path for op in ops]
    assert len(zk.get_children("/big")) == 2500
    stat = zk.exists("/big/7")
    sets = [Op("check", "/big/7", version=stat.version), Op("set_data", "/big/7", b"new", stat.version),
            Op("delete", "/big/8")]  # fmt: skip
    results = batch.multi_chunks(zk, sets)
    assert results[0] is True and results[1].version == stat.version + 1 and results[2] is True
    assert zk.get("/big/7")[0] == b"new" and zk.exists("/big/8") is None


def test_multi_chunks_a_failed_chunk_rolls_back_alone(zk: KazooClient) -> None:
    zk.ensure_path("/c")
    zk.create("/c/600", b"there")
    ops = [Op("create", f"/c/{i}") for i in range(1000)]  # chunks 0..499 and 500..999; /c/600 fails the 2nd
    results = batch.multi_chunks(zk, ops)
    assert results[:500] == [f"/c/{i}" for i in range(500)]
    assert isinstance(results[600], NodeExistsError)
    assert all(isinstance(r, Exception) for r in results[500:])
    assert sorted(int(c) for c in zk.get_children("/c")) == [*range(500), 600]


def test_get_many_in_order_missing_as_none(zk: KazooClient) -> None:
    paths = _create(zk, 2300)
    asked = [*paths[::-1], "/n/missing", "/nowhere/at/all"]
    found = batch.get_many(zk, asked, window=1000)
    assert [node[0] for node in found[:-2]] == [str(i).encode() for i in range(2299, -1, -1)]  # type: ignore[index]
    assert found[-2:] == [None, None]
    assert batch.get_many(zk, []) == []


def test_get_many_leaves_watches(zk: KazooClient) -> None:
    paths = _create(zk, 10)
    fired: list[str] = []
    done = threading.Event()

    def watch(event: object) -> None:
        fired.append(event.path)  # type: ignore[attr-defined]
        done.set()

    batch.get_many(zk, paths, watch=watch)
    zk.set("/n/3", b"changed")
    assert done.wait(10)
    assert fired == ["/n/3"]


class _Seen:
    def __init__(self) -> None:
        self.changes: list[tuple[object, bytes, int]] = []
        self.cond = threading.Condition()

    def __call__(self, changes: list) -> None:
        with self.cond:
            self.changes += [(key, data, stat.version) for key, data, stat in changes]
            self.cond.notify_all()

    def wait_for(self, pred: object, timeout: float = 10) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: pred(self.changes), timeout)  # type: ignore[operator]


def test_node_watches_report_changes_and_rearm(zk: KazooClient) -> None:
    paths = _create(zk, 1500)
    seen = _Seen()
    watches: NodeWatches[int] = NodeWatches(zk, seen)
    got: list[dict] = []
    read = watches.watch({i: p for i, p in enumerate(paths)} | {-1: "/n/missing"}, then=got.append)
    assert read[5] is not None and read[5][0] == b"5" and read[-1] is None
    assert got == [read] and len(watches) == 1500 and -1 not in watches.keys()
    zk.set("/n/5", b"five")
    assert seen.wait_for(lambda c: (5, b"five", 1) in c)
    zk.set("/n/5", b"again")  # (the watch was set again by the read that reported the first change)
    assert seen.wait_for(lambda c: (5, b"again", 2) in c)
    watches.unwatch([6])
    zk.set("/n/6", b"unheard")
    zk.set("/n/7", b"heard")
    assert seen.wait_for(lambda c: (7, b"heard", 1) in c)
    assert not [c for c in seen.changes if c[0] == 6]
    seen.changes.clear()
    watches.rearm()  # (as after a reconnect: every znode read, and reported, again)
    assert seen.wait_for(lambda c: len(c) == 1499)
    assert (5, b"again", 2) in seen.changes


def test_node_watches_drop_a_znode_made_again(zk: KazooClient) -> None:
    """A znode deleted and created again is another incarnation (a topic of the same name): not reported."""
    paths = _create(zk, 3)
    seen = _Seen()
    watches: NodeWatches[str] = NodeWatches(zk, seen)
    watches.watch({"a": paths[0], "b": paths[1]})
    zk.delete(paths[0])
    zk.create(paths[0], b"new incarnation")
    zk.set(paths[1], b"b changed")
    assert seen.wait_for(lambda c: ("b", b"b changed", 1) in c)
    assert watches.keys() == ["b"]
    assert not [c for c in seen.changes if c[0] == "a"]
    watches.watch({"a2": paths[0]})  # its owner watches the new one under a key of its own
    zk.set(paths[0], b"heard")
    assert seen.wait_for(lambda c: ("a2", b"heard", 1) in c)


def test_node_watches_never_report_an_older_state_after_a_newer(zk: KazooClient, zk_chroot: str) -> None:
    """What `watch()` returns (through `then`) and the changes reported, in the order an owner would apply
    them, never go back to an older version of a znode, while another session writes and `watch()` reads again."""
    paths = _create(zk, 200)
    applied: list[tuple[int, int]] = []  # (key, version), in the order the owner would apply them
    watches: NodeWatches[int] = NodeWatches(zk, lambda changes: applied.extend((k, s.version) for k, _, s in changes))
    writer = zk_client(zk_chroot)
    stop = threading.Event()

    def write() -> None:
        i = 0
        while not stop.is_set():
            writer.set_async(paths[i % len(paths)], str(i).encode())
            i += 1
            if i % 200 == 0:
                writer.sync("/")

    thread = threading.Thread(target=write)
    thread.start()
    try:
        for _ in range(15):
            watches.watch(dict(enumerate(paths)), then=lambda read: applied.extend(
                (k, n[1].version) for k, n in read.items() if n))  # fmt: skip
        # (under load every change may have come while a read was in flight, folded into it: some between)
        deadline = time.monotonic() + 30
        while len(applied) <= 15 * len(paths) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join()
        writer.stop()
        writer.close()
    last: dict[int, int] = {}
    for key, version in applied:
        assert version >= last.get(key, -1), (key, version, last[key])
        last[key] = version
    assert len(applied) > 15 * len(paths)  # (changes were reported between the reads)


def test_multis_commit_each_transaction_on_its_own(zk: KazooClient) -> None:
    """One multi per transaction, pipelined: a failed one rolls back alone, the others are committed."""
    paths = _create(zk, 3, "/m")
    results = batch.multis(zk, [
        [Op("check", paths[0], version=0), Op("set_data", paths[1], b"one", 0)],
        [Op("check", paths[0], version=7), Op("set_data", paths[2], b"two", 0)],  # a stale check: all of it fails
        [Op("set_data", paths[2], b"three", 0)],
    ], window=2)  # fmt: skip
    assert results[0][1].version == 1 and results[2][0].version == 1
    assert isinstance(results[1][0], BadVersionError) and isinstance(results[1][1], Exception)  # (not applied)
    assert [zk.get(p)[0] for p in paths] == [b"0", b"one", b"three"]


def test_fenced_state_writes_name_the_raced_and_stop_at_a_newer_controller(zk: KazooClient) -> None:
    """The controller's pipelined writes: a state someone wrote first comes back None, the rest are written
    with the controller's epoch; once `/controller_epoch` moves, FencedError."""
    registry.ensure_roots(zk)
    registry.create_topic(zk, "f", {0: [1], 1: [1], 2: [1]}, {})
    if zk.exists(paths.CONTROLLER_EPOCH) is None:
        zk.create(paths.CONTROLLER_EPOCH, b"1", makepath=True)
    fence = zk.exists(paths.CONTROLLER_EPOCH).version
    states = registry.partition_states_of(zk, [("f", p) for p in range(3)])
    registry.write_partition_state(zk, "f", 1, 1, 5, [1], states[1]["zk_version"])  # a leader's ISR write first
    writes = [("f", p, 1, 9, [1], st["zk_version"]) for p, st in enumerate(states)]
    versions = registry.write_partition_states(zk, writes, fence=fence)
    assert versions[1] is None and versions[0] == versions[2] == states[0]["zk_version"] + 1
    after = registry.partition_states_of(zk, [("f", p) for p in range(3)])
    assert [st["leader_epoch"] for st in after] == [9, 5, 9]
    zk.set(paths.CONTROLLER_EPOCH, b"99")  # a newer controller
    with pytest.raises(registry.FencedError):
        registry.write_partition_states(zk, [("f", 0, 1, 10, [1], after[0]["zk_version"])], fence=fence)
    assert registry.partition_state(zk, "f", 0)["leader_epoch"] == 9


def _notified(zk: KazooClient) -> list[set[tuple[str, int]]]:
    """The partitions each state-change notification names, oldest first."""
    children = sorted(zk.get_children(paths.STATE_CHANGES), key=lambda c: c.rsplit("_", 1)[1])
    return [paths.parse_partitions(zk.get(f"{paths.STATE_CHANGES}/{c}")[0]) for c in children]


def test_state_writes_notify_in_the_same_multi_and_old_notifications_are_pruned(zk: KazooClient) -> None:
    """Every state write lands with a notification naming exactly the partitions it wrote (a stale write is
    named by none, the rest of its multi is written again); more than a multi's worth makes more than one
    notification; the controller's prune takes only those older than the TTL, and records the highest sequence
    number it took."""
    registry.ensure_roots(zk)
    registry.create_topic(zk, "s", {p: [1] for p in range(registry.STATES_PER_MULTI + 3)}, {})
    assert _notified(zk) == []  # a new topic's states are read with the topic
    states = registry.partition_states(zk, "s", [0, 1, 2])
    assert registry.write_partition_state(zk, "s", 1, 1, 5, [1], states[1]["zk_version"]) == 1
    assert _notified(zk) == [{("s", 1)}]
    versions = registry.write_partition_states(zk, [("s", p, 1, 7, [1], st["zk_version"]) for p, st in states.items()])
    assert versions == [1, None, 1]
    assert _notified(zk)[1:] == [{("s", 0), ("s", 2)}]
    many = registry.partition_states(zk, "s", list(range(3, registry.STATES_PER_MULTI + 3)))
    registry.write_partition_states(zk, [("s", p, 1, 1, [1], st["zk_version"]) for p, st in many.items()])
    tail = _notified(zk)[2:]
    assert [len(n) for n in tail] == [registry.STATES_PER_MULTI] and tail[0] == {("s", p) for p in many}
    before = sorted(paths.state_change_seq(c) for c in zk.get_children(paths.STATE_CHANGES))
    assert registry.state_changes_pruned_through(zk) == -1
    time.sleep(0.5)
    newest = zk.create(paths.state_change_prefix(), paths.partitions_json([("s", 9)]), sequence=True)
    assert registry.prune_state_changes(zk, ttl_s=0.4) == 3  # those 0.4 s older than the newest, by ZooKeeper's clock
    assert zk.get_children(paths.STATE_CHANGES) == [newest.rsplit("/", 1)[1]]
    assert registry.state_changes_pruned_through(zk) == before[-1]  # a broker that read less than that missed some


def test_state_writes_carry_what_a_read_would_give_and_tell_reports_it_once(zk: KazooClient) -> None:
    """A state written with its topic's id rides in its notification: the same content as its znode, the version
    the write made, at the notification's own zxid (the multi's). `NodeWatches.tell` reports such a state of a
    watched znode once, as a read would (data, version, mzxid), never an older one, and hands back the paths it
    cannot place (a key not watched) for a read; a state written without its topic's id is only named."""
    registry.ensure_roots(zk)
    registry.create_topic(zk, "c", {p: [1, 2] for p in range(3)}, {})
    state_paths = [paths.partition_state("c", p) for p in range(3)]
    seen: list[tuple[tuple[str, int, int], bytes, int, int]] = []
    watches: NodeWatches[tuple[str, int, int]] = NodeWatches(
        zk, lambda changes: seen.extend((k, d, s.version, s.mzxid) for k, d, s in changes), armed=False
    )
    watches.watch({("c", p, 77): state_paths[p] for p in (0, 1)})
    before = registry.partition_states(zk, "c", [0, 1, 2])
    assert registry.write_partition_states(zk, [("c", p, 2, 1, [2], before[p]["zk_version"]) for p in (0, 1)],
                                           carry={("c", 0): 77, ("c", 1): 77}) == [1, 1]  # fmt: skip
    assert registry.write_partition_state(zk, "c", 2, 2, 1, [2], before[2]["zk_version"]) == 1  # (no id given)
    notes = [zk.get(f"{paths.STATE_CHANGES}/{c}") for c in sorted(zk.get_children(paths.STATE_CHANGES))]
    (named0, carried), (named2, carried2) = [paths.parse_state_changes(data) for data, _ in notes]
    assert named0 == set() and named2 == {("c", 2)} and carried2 == []
    assert [(c.topic, c.partition, c.topic_id, c.zk_version) for c in carried] == [("c", 0, 77, 1), ("c", 1, 77, 1)]
    for c in carried:
        data, stat = zk.get(state_paths[c.partition])
        assert paths.loads(data) == c.state and stat.version == c.zk_version and stat.mzxid == notes[0][1].czxid
    told = [(("c", c.partition, c.topic_id), state_paths[c.partition], paths.dumps(c.state), notes[0][1].czxid,
             c.zk_version) for c in carried]  # fmt: skip
    stray = (("c", 2, 77), state_paths[2], b"{}", notes[1][1].czxid, 1)
    assert watches.tell([*told, stray]) == [state_paths[2]]  # not watched: read it
    real = {p: zk.get(state_paths[p]) for p in (0, 1)}
    assert seen == [(("c", p, 77), real[p][0], real[p][1].version, real[p][1].mzxid) for p in (0, 1)]
    assert watches.tell(told) == [] and len(seen) == 2  # nothing newer
    older = [(k, path, b"{}", zxid - 1, 0) for k, path, _, zxid, _ in told]
    assert watches.tell(older) == [] and len(seen) == 2
    watches.reread(state_paths)  # a read finds nothing newer than what was told
    assert len(seen) == 2


def test_unarmed_node_watches_report_only_newer_states_of_watched_znodes_on_reread(zk: KazooClient) -> None:
    """`reread` (how the broker follows its state-change notifications): a changed znode is reported once, an
    unchanged or unwatched one never, and a znode made again is dropped, not reported."""
    paths_ = _create(zk, 3)
    seen: list[list[tuple[int, bytes]]] = []
    watches: NodeWatches[int] = NodeWatches(zk, lambda changes: seen.append([(k, d) for k, d, _ in changes]),
                                            armed=False)  # fmt: skip
    assert {k: node[0] for k, node in watches.watch({0: paths_[0], 1: paths_[1]}).items()} == {0: b"0", 1: b"1"}
    zk.set(paths_[0], b"zero")
    zk.set(paths_[2], b"two")  # not watched
    time.sleep(0.2)
    assert seen == []  # no ZooKeeper watch was left
    watches.reread(paths_)
    assert seen == [[(0, b"zero")]]
    watches.reread(paths_)
    assert seen == [[(0, b"zero")]]
    zk.delete(paths_[1])
    zk.create(paths_[1], b"again")
    watches.reread([paths_[1]])
    assert seen == [[(0, b"zero")]] and watches.keys() == [0]
    zk.set(paths_[0], b"late")
    watches.closed = True  # (its client is closing: a read sent after its connection thread ended could block)
    with pytest.raises(ConnectionClosedError):
        watches.reread(paths_)
    assert seen == [[(0, b"zero")]]


def test_a_controlled_shutdown_decides_from_the_cache_and_reads_only_what_it_had_wrong(zk: KazooClient) -> None:
    """`move_leadership_away` with the broker's cached states: written without reading them first; a cached
    state someone has since replaced fails its conditional write, is read and decided again."""
    from broker.replication.controller import move_leadership_away

    registry.ensure_roots(zk)
    registry.create_topic(zk, "m", {0: [1, 2], 1: [1, 2], 2: [2, 1]}, {})
    tid = registry.topic_id(zk, "m")
    known = {("m", p): {**st, "topic_id": tid} for p, st in registry.partition_states(zk, "m", [0, 1, 2]).items()}
    registry.write_partition_state(zk, "m", 1, 1, 3, [1, 2], known[("m", 1)]["zk_version"])  # the cache is behind
    notes_before = set(zk.get_children(paths.STATE_CHANGES))
    written = move_leadership_away(zk, 1, {"m": {0: [1, 2], 1: [1, 2], 2: [2, 1]}}, {1, 2}, known)
    notes = [paths.parse_state_changes(zk.get(f"{paths.STATE_CHANGES}/{c}")[0])
             for c in sorted(set(zk.get_children(paths.STATE_CHANGES)) - notes_before)]  # fmt: skip
    # what was decided from the cache rides in its notification; the one read after its write failed is named
    assert [({(c.topic, c.partition) for c in carried}, named) for named, carried in notes] == [
        ({("m", 0), ("m", 2)}, set()), (set(), {("m", 1)})]  # fmt: skip
    after = registry.partition_states(zk, "m", [0, 1, 2])
    assert {(t, p): (st["leader"], st["isr"]) for t, p, st in written} == {
        ("m", 0): (2, [2]), ("m", 1): (2, [2]), ("m", 2): (2, [2])}  # fmt: skip
    assert [(st["leader"], st["leader_epoch"], st["isr"]) for st in after.values()] == [(2, 1, [2]), (2, 4, [2]),
                                                                                        (2, 0, [2])]  # fmt: skip
