"""Commit metadata and leader epochs (issue 18): their znodes beside the offsets' (broker/zk/paths.py), the
group store holding, writing and reading them back, and the OffsetCommit/OffsetFetch handlers storing and
answering them as Kafka does (null metadata is "", v0 keeps none, the epoch from v6 in and v5 out,
`offset.metadata.max.bytes` per partition). The handlers run over a real coordinator and group store on
test_group_store's in-memory ZooKeeper; the same through Kafka's clients: tests/integration/test_offset_metadata.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from kazoo.exceptions import ConnectionLoss

from broker.protocol.errors import ErrorCode
from broker.server.handlers import groups
from broker.zk import consumers, paths
from broker.zk.paths import StoredOffset
from tests.unit.coordinator.test_group_store import FakeZk, run, short_bounds, started, until  # noqa: F401 - the fixture
from tests.unit.server.test_group_deletion import services

G = "g"
T = "orders"
NODE = f"/consumers/{G}/offsets/{T}/0"
META = f"/consumers/{G}/offset_metadata/{T}/0"


# --- the znodes' data ----------------------------------------------------------------------------------------------


def test_the_offset_znode_stays_the_bare_decimal() -> None:
    assert paths.offset_data(StoredOffset(42, 7, "meta")) == b"42"  # what earlier versions and Kafka read
    assert paths.offset_metadata_json(StoredOffset(42)) is None  # nothing beside it: no znode
    assert paths.stored_offset(b"42") == StoredOffset(42, -1, "")  # stored before metadata was kept
    assert paths.stored_offset(b"nonsense") is None and paths.stored_offset(None) is None


@pytest.mark.parametrize("stored", [
    StoredOffset(7, 3, ""), StoredOffset(7, -1, "m"), StoredOffset(2**62, 2**31 - 1, 'quote " \\ \n {} ,:'),
    StoredOffset(5, 0, "ünïcödé ✓ 🎉 \u0000"), StoredOffset(1, 1, "x" * 4096),
])  # fmt: skip
def test_metadata_and_epoch_round_trip(stored: StoredOffset) -> None:
    extra = paths.offset_metadata_json(stored)
    assert extra is not None
    assert json.loads(extra) == {"version": 1, "offset": stored.offset, "leader_epoch": stored.leader_epoch,
                                 "metadata": stored.metadata}  # fmt: skip
    assert paths.stored_offset(paths.offset_data(stored), extra) == stored


@pytest.mark.parametrize("extra", [
    b"", b"abc", b"{", b"[]", b'{"version":2,"offset":1,"metadata":"m"}', b'{"version":1,"metadata":"m"}',
    b'{"version":1,"offset":"1","metadata":"m"}', b'{"version":1,"offset":1,"leader_epoch":1.5}',
    b'{"version":1,"offset":1,"metadata":3}', b"\xff\xfe",
    b'{"version":1,"offset":2,"leader_epoch":5,"metadata":"of another commit"}',
])  # fmt: skip
def test_unreadable_or_stale_metadata_is_none(extra: bytes) -> None:
    assert paths.stored_offset(b"1", extra) == StoredOffset(1, -1, "")


def test_json_without_the_optional_fields_has_their_defaults() -> None:
    assert paths.stored_offset(b"9", b'{"version":1,"offset":9}') == StoredOffset(9, -1, "")
    assert paths.stored_offset(b"9", b'{"version":1,"offset":9,"metadata":null}') == StoredOffset(9, -1, "")


def test_kafkactl_reads_both_and_writes_metadata_and_deletes_it() -> None:
    zk = FakeZk()
    zk.put(NODE, b"11")
    zk.put(f"/consumers/{G}/offsets/{T}/1", b"12")
    zk.put(f"/consumers/{G}/offset_metadata/{T}/1", paths.offset_metadata_json(StoredOffset(12, 4, "meta")) or b"")
    zk.put(f"/consumers/{G}/offsets/{T}/2", b"not an offset")
    got = consumers.committed(zk, G)  # type: ignore[arg-type]
    assert {tp: (c.offset, c.leader_epoch, c.metadata) for tp, c in got.items()} == {
        (T, 0): (11, -1, ""), (T, 1): (12, 4, "meta")}  # fmt: skip
    consumers.commit(zk, G, {(T, 0): 13}, metadata="from kafkactl")  # type: ignore[arg-type]
    assert zk.nodes[NODE][0] == b"13" and stored(zk) == StoredOffset(13, -1, "from kafkactl")
    consumers.commit(zk, G, {(T, 0): 14})  # type: ignore[arg-type]
    assert zk.nodes[NODE][0] == b"14" and META not in zk.nodes  # (kafkactl group rewind, say)
    consumers.delete_group_state(zk, G)  # type: ignore[arg-type]
    assert not [n for n in zk.nodes if n.startswith(f"/consumers/{G}")]


def stored(zk: FakeZk) -> StoredOffset | None:
    meta = zk.nodes.get(META)
    return paths.stored_offset(zk.nodes[NODE][0], None if meta is None else meta[0])


# --- the group store ------------------------------------------------------------------------------------------------


def test_the_store_writes_and_reads_metadata_and_epochs() -> None:
    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        await store.commit(G, {(T, 0): StoredOffset(5, 2, "five"), (T, 1): 6})
        assert zk.nodes[NODE][0] == b"5" and stored(zk) == StoredOffset(5, 2, "five")
        assert zk.nodes[f"/consumers/{G}/offsets/{T}/1"][0] == b"6"
        assert f"/consumers/{G}/offset_metadata/{T}/1" not in zk.nodes
        zk.put(f"/consumers/{G}/offsets/{T}/2", b"9")  # stored before this version: no metadata, epoch -1
        assert await store.fetch(G, {T: [0, 1, 2, 3]}) == {
            (T, 0): StoredOffset(5, 2, "five"), (T, 1): StoredOffset(6), (T, 2): StoredOffset(9),
            (T, 3): StoredOffset(-1, -1, "")}  # fmt: skip
        assert (await store.fetch(G, None))[(T, 0)] == StoredOffset(5, 2, "five")
        await store.commit(G, {(T, 0): StoredOffset(8)})  # a later commit without metadata clears it, as Kafka
        assert zk.nodes[NODE][0] == b"8" and META not in zk.nodes
        zk.put(META, paths.offset_metadata_json(StoredOffset(8, 1, "left over")) or b"")  # an unfinished commit's
        zk.put(NODE, b"9")  # and the offset someone wrote after it (an earlier version's broker, say)
        assert await store.fetch(G, {T: [0]}) == {(T, 0): StoredOffset(9)}
        assert await store.delete(G) and not [n for n in zk.nodes if n.startswith(f"/consumers/{G}")]
        await store.close(1)

    run(main())


def test_metadata_held_through_an_outage_is_served_and_written_after() -> None:
    async def main() -> None:
        zk = FakeZk()
        store = await started(zk, live=lambda g: True)
        await store.commit(G, {(T, 0): StoredOffset(1, 1, "one")})
        zk.down()
        await store.commit(G, {(T, 0): StoredOffset(2, 3, "two")})
        assert await store.fetch(G, {T: [0]}) == {(T, 0): StoredOffset(2, 3, "two")}  # from memory
        zk.up()
        await until("the held commit written", lambda: not store.held_commits())
        assert stored(zk) == StoredOffset(2, 3, "two")
        await store.close(1)

    run(main())


class CountingZk(FakeZk):
    """Counts the deletions of metadata znodes (a round trip each)."""

    def __init__(self) -> None:
        super().__init__()
        self.deleted: list[str] = []

    def delete(self, path: str, version: int = -1) -> None:
        self.deleted.append(path)
        super().delete(path, version)


def test_a_commit_without_metadata_after_one_costs_no_second_write() -> None:
    async def main() -> None:
        zk = CountingZk()
        store = await started(zk)
        await store.commit(G, {(T, 0): 1})  # the first here: whatever an earlier commit left beside it goes
        await store.commit(G, {(T, 0): 2})
        assert zk.deleted == [META] and META not in zk.nodes
        await store.commit(G, {(T, 0): StoredOffset(3, 1, "m")})
        assert stored(zk) == StoredOffset(3, 1, "m")
        await store.commit(G, {(T, 0): 4})  # a commit without metadata clears it
        assert META not in zk.nodes and stored(zk) == StoredOffset(4)
        zk.put(NODE, b"5")  # another coordinator commits, with metadata, meanwhile (the group moved and back)
        zk.put(META, paths.offset_metadata_json(StoredOffset(5, 2, "theirs")) or b"")
        await store.commit(G, {(T, 0): 5})  # the same offset without metadata: theirs is not kept
        assert META not in zk.nodes and stored(zk) == StoredOffset(5)
        await store.close(1)

    run(main())


class LostReplyZk(FakeZk):
    """`lose` (a path): its next set is applied by ZooKeeper but its reply is lost (ConnectionLoss)."""

    def __init__(self) -> None:
        super().__init__()
        self.lose: str | None = None
        self.then: Callable[[], None] = lambda: None  # what happens between the lost reply and the retry

    def set(self, path: str, data: bytes, version: int = -1) -> Any:
        if path != self.lose:
            return super().set(path, data, version)
        self.lose = None
        time.sleep(0.005)  # (written a few ms after the commit was accepted, as over a network)
        super().set(path, data, version)
        self.then()
        raise ConnectionLoss()


def test_a_commit_whose_written_reply_was_lost_still_writes_its_metadata() -> None:
    async def main() -> None:
        zk = LostReplyZk()
        store = await started(zk)
        await store.commit(G, {(T, 0): StoredOffset(1, 1, "one")})
        zk.lose = NODE
        await store.commit(G, {(T, 0): StoredOffset(7, 3, "seven")})  # held after the ConnectionLoss, retried
        await until("the held commit written", lambda: not store.held_commits())
        assert stored(zk) == StoredOffset(7, 3, "seven")
        assert await store.fetch(G, {T: [0]}) == {(T, 0): StoredOffset(7, 3, "seven")}
        await store.close(1)

    run(main())


def test_a_lost_reply_keeps_metadata_someone_committed_with_the_same_offset_after_it() -> None:
    async def main() -> None:
        zk = LostReplyZk()
        store = await started(zk)
        await store.commit(G, {(T, 0): StoredOffset(1, 1, "one")})
        zk.lose = NODE  # and the group's next coordinator commits the same offset, with its metadata, meanwhile
        zk.then = lambda: zk.put(META, paths.offset_metadata_json(StoredOffset(7, 4, "theirs")) or b"")
        await store.commit(G, {(T, 0): StoredOffset(7, 3, "ours")})
        await until("the held commit done", lambda: not store.held_commits())
        assert stored(zk) == StoredOffset(7, 4, "theirs")
        await store.close(1)

    run(main())


# --- the handlers ----------------------------------------------------------------------------------------------------


def _services(zk: FakeZk, store: Any, max_bytes: int = 4096) -> SimpleNamespace:
    b = services(zk, store)
    b.config = SimpleNamespace(offset_metadata_max_bytes=max_bytes)
    return b


async def _commit(b: SimpleNamespace, version: int, parts: list[dict[str, Any]]) -> dict[int, int]:
    req = {"group_id": G, "generation_id": -1, "member_id": "",
           "topics": [{"name": T, "partitions": parts}]}  # fmt: skip
    answer = await groups.handle_offset_commit(b, SimpleNamespace(api_version=version), req)  # type: ignore[arg-type]
    return {p["partition_index"]: p["error_code"] for p in answer["topics"][0]["partitions"]}


async def _fetch(b: SimpleNamespace, version: int, partitions: list[int]) -> dict[int, tuple[int, int, str]]:
    req = {"group_id": G, "topics": [{"name": T, "partition_indexes": partitions}]}
    answer = await groups.handle_offset_fetch(b, SimpleNamespace(api_version=version), req)  # type: ignore[arg-type]
    assert answer["error_code"] == 0
    return {p["partition_index"]: (p["committed_offset"], p["committed_leader_epoch"], p["metadata"])
            for p in answer["topics"][0]["partitions"]}  # fmt: skip


def _part(p: int, offset: int, metadata: str | None, epoch: int = -1) -> dict[str, Any]:
    return {"partition_index": p, "committed_offset": offset, "committed_leader_epoch": epoch,
            "committed_metadata": metadata}  # fmt: skip


def test_offset_commit_stores_what_offset_fetch_answers() -> None:
    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        b = _services(zk, store)
        assert await _commit(b, 7, [_part(0, 10, "ten", 4), _part(1, 11, None, 5)]) == {0: 0, 1: 0}
        assert await _fetch(b, 5, [0, 1]) == {0: (10, 4, "ten"), 1: (11, 5, "")}  # null metadata: ""
        assert await _commit(b, 2, [_part(0, 12, "twelve")]) == {0: 0}  # before v6: no epoch
        assert (await _fetch(b, 5, [0]))[0] == (12, -1, "twelve")
        assert await _commit(b, 0, [_part(0, 13, "dropped")]) == {0: 0}  # v0: the offset alone, as Kafka's ZK
        assert (await _fetch(b, 1, [0]))[0] == (13, -1, "")
        assert await _fetch(b, 5, [7]) == {7: (-1, -1, "")}  # never committed
        await store.close(1)

    run(main())


def test_too_large_metadata_is_refused_for_its_partition_only() -> None:
    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        b = _services(zk, store, max_bytes=10)
        await _commit(b, 7, [_part(0, 1, "old", 1), _part(1, 1, "old", 1)])
        # 10 UTF-16 code units fit (Java's String.length, what Kafka compares): an emoji counts two
        errors = await _commit(b, 7, [_part(0, 2, "x" * 11, 2), _part(1, 2, "🎉" * 5, 2)])
        assert errors == {0: ErrorCode.OFFSET_METADATA_TOO_LARGE, 1: 0}
        assert await _fetch(b, 5, [0, 1]) == {0: (1, 1, "old"), 1: (2, 2, "🎉" * 5)}  # the refused one unchanged
        errors = await _commit(b, 7, [_part(0, 3, "🎉" * 5 + "x", 3)])
        assert errors == {0: ErrorCode.OFFSET_METADATA_TOO_LARGE}
        await store.close(1)

    run(main())


def test_null_metadata_is_never_too_large() -> None:
    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        b = _services(zk, store, max_bytes=-1)  # (Kafka does not validate the setting: nothing but null fits)
        errors = await _commit(b, 7, [_part(0, 1, None, 1), _part(1, 1, "", 1)])
        assert errors == {0: 0, 1: ErrorCode.OFFSET_METADATA_TOO_LARGE}
        assert await _fetch(b, 5, [0, 1]) == {0: (1, 1, ""), 1: (-1, -1, "")}
        await store.close(1)

    run(main())
