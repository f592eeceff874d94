"""Commit metadata and leader epochs (issue 18): kept with each offset, as Kafka keeps them in `__consumer_offsets`,
in the group's offset blocks (`/consumers/<g>/offsets/<t>/block-<n>`, broker/zk/paths.py); the per-partition znodes
of earlier versions (the bare decimal, and the `offset_metadata` JSON beside it) are still read, a block's entry
winning over them. Here: both encodings; kafkactl (broker/zk/consumers.py) and the group store reading both,
writing blocks only (a commit is one block write whatever it carries) and deleting both; the store writing a
commit held through an outage or a lost reply after, as it was accepted, and never over a newer one someone else
wrote meanwhile; the OffsetCommit/OffsetFetch handlers storing and answering them as Kafka does (null metadata is
"", v0 keeps none, the epoch from v6 in and v5 out, `offset.metadata.max.bytes` per partition), and refusing an
entry too large for its block. The handlers run over a real coordinator and group store on test_group_store's
in-memory ZooKeeper; the same through Kafka's clients: tests/integration/test_offset_metadata.py.
"""

from __future__ import annotations

import asyncio
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
from broker.zk.paths import BlockEntry, StoredOffset
from tests.unit.coordinator.test_group_store import FakeZk, block_writes, run, short_bounds, started, until  # noqa: F401
from tests.unit.server.test_group_deletion import services

G = "g"
T = "orders"
BLOCK = paths.group_offset_block(G, T, 0)  # the commits of partitions 0 to 15
LEGACY = paths.group_offset(G, T, 0)  # partition 0's offset znode of an earlier version


def _now_ms() -> int:
    return int(time.time() * 1000)


def legacy(zk: FakeZk, p: int, stored: StoredOffset) -> None:
    """An earlier version's commit of partition `p`: its offset znode, and the metadata one beside it if any."""
    zk.put(paths.group_offset(G, T, p), paths.offset_data(stored))
    extra = paths.offset_metadata_json(stored)
    if extra is not None:
        zk.put(paths.group_offset_metadata(G, T, p), extra)


def put_stored(zk: FakeZk, p: int, stored: StoredOffset, at_ms: int | None = None) -> None:
    """test_group_store's `put_entry` with metadata and epoch: someone else writes a commit into `p`'s block."""
    path = paths.group_offset_block(G, T, paths.offset_block_of(p))
    node = zk.nodes.get(path)
    entries = paths.parse_offset_block(node[0]) if node is not None else {}
    entries[p] = BlockEntry(stored, at_ms or _now_ms())
    zk.put(path, paths.offset_block_json(entries))


def in_block(zk: FakeZk, p: int = 0) -> StoredOffset | None:
    """Partition `p`'s commit in its block (None: no entry)."""
    entry = zk.entry(T, p)
    return None if entry is None else entry.stored


# --- the znodes' data ----------------------------------------------------------------------------------------------


def test_an_earlier_versions_offset_znode_is_the_bare_decimal() -> None:
    assert paths.offset_data(StoredOffset(42, 7, "meta")) == b"42"  # what earlier versions and Kafka read
    assert paths.offset_metadata_json(StoredOffset(42)) is None  # nothing beside it: no znode
    assert paths.stored_offset(b"42") == StoredOffset(42, -1, "")  # stored before metadata was kept
    assert paths.stored_offset(b"nonsense") is None and paths.stored_offset(None) is None


@pytest.mark.parametrize("stored", [
    StoredOffset(7, 3, ""), StoredOffset(7, -1, "m"), StoredOffset(2**62, 2**31 - 1, 'quote " \\ \n {} ,:'),
    StoredOffset(5, 0, "ünïcödé ✓ 🎉 \u0000"), StoredOffset(1, 1, "x" * 4096),
])  # fmt: skip
def test_metadata_and_epoch_round_trip(stored: StoredOffset) -> None:
    at = 1_700_000_000_123
    data = paths.offset_block_json({3: BlockEntry(stored, at), 0: BlockEntry(StoredOffset(1), 5)})
    assert json.loads(data) == {"version": 1, "offsets": {
        "0": [1, -1, "", 5], "3": [stored.offset, stored.leader_epoch, stored.metadata, at]}}  # fmt: skip
    assert paths.parse_offset_block(data) == {3: BlockEntry(stored, at), 0: BlockEntry(StoredOffset(1), 5)}
    extra = paths.offset_metadata_json(stored)  # as an earlier version wrote it beside the offset
    assert extra is not None
    assert json.loads(extra) == {"version": 1, "offset": stored.offset, "leader_epoch": stored.leader_epoch,
                                 "metadata": stored.metadata}  # fmt: skip
    assert paths.stored_offset(paths.offset_data(stored), extra) == stored


@pytest.mark.parametrize("data", [
    None, b"", b"abc", b"{", b"[]", b'{"version":2,"offsets":{"0":[1,-1,"",5]}}', b'{"offsets":{"0":[1,-1,"",5]}}',
    b'{"version":1}', b'{"version":1,"offsets":[]}', b"\xff\xfe",
])  # fmt: skip
def test_an_unreadable_block_has_no_commits(data: bytes | None) -> None:
    assert paths.parse_offset_block(data) == {}


def test_a_blocks_entries_of_the_wrong_types_are_left_out() -> None:
    data = (b'{"version":1,"offsets":{"0":[1,-1,"",5],"1":["1",-1,"",5],"2":[1,1.5,"",5],"3":[1,-1,3,5],'
            b'"4":[1,-1,"",null],"5":[true,-1,"",5],"6":[6,2,"m",7]}}')  # fmt: skip
    assert paths.parse_offset_block(data) == {
        0: BlockEntry(StoredOffset(1), 5),
        6: BlockEntry(StoredOffset(6, 2, "m"), 7),
    }


@pytest.mark.parametrize("extra", [
    b"", b"abc", b"{", b"[]", b'{"version":2,"offset":1,"metadata":"m"}', b'{"version":1,"metadata":"m"}',
    b'{"version":1,"offset":"1","metadata":"m"}', b'{"version":1,"offset":1,"leader_epoch":1.5}',
    b'{"version":1,"offset":1,"metadata":3}', b"\xff\xfe",
    b'{"version":1,"offset":2,"leader_epoch":5,"metadata":"of another commit"}',
])  # fmt: skip
def test_an_earlier_versions_unreadable_or_stale_metadata_is_none(extra: bytes) -> None:
    assert paths.stored_offset(b"1", extra) == StoredOffset(1, -1, "")


def test_json_without_the_optional_fields_has_their_defaults() -> None:
    assert paths.stored_offset(b"9", b'{"version":1,"offset":9}') == StoredOffset(9, -1, "")
    assert paths.stored_offset(b"9", b'{"version":1,"offset":9,"metadata":null}') == StoredOffset(9, -1, "")


def test_kafkactl_reads_blocks_and_earlier_znodes_writes_blocks_and_deletes_both() -> None:
    zk = FakeZk()
    legacy(zk, 0, StoredOffset(11))
    legacy(zk, 1, StoredOffset(12, 4, "meta"))
    zk.put(paths.group_offset(G, T, 2), b"not an offset")
    legacy(zk, 3, StoredOffset(1, 1, "older"))  # and partition 3's block entry over it: the entry wins
    put_stored(zk, 3, StoredOffset(30, 2, "block"), at_ms=1_000)
    put_stored(zk, 17, StoredOffset(40, 5, ""), at_ms=2_000)  # (the next block)
    got = consumers.committed(zk, G)  # type: ignore[arg-type]
    assert {tp: (c.offset, c.leader_epoch, c.metadata) for tp, c in got.items()} == {
        (T, 0): (11, -1, ""), (T, 1): (12, 4, "meta"), (T, 3): (30, 2, "block"), (T, 17): (40, 5, "")}  # fmt: skip
    assert (got[(T, 3)].mtime_ms, got[(T, 17)].mtime_ms) == (1_000, 2_000)  # when they were committed
    zk.writes.clear()
    consumers.commit(zk, G, {(T, 0): 13}, metadata="from kafkactl")  # type: ignore[arg-type]
    assert [path for path, _ in zk.writes] == [BLOCK]  # the earlier version's znode is not written: read under it
    assert in_block(zk, 0) == StoredOffset(13, -1, "from kafkactl") and in_block(zk, 3) == StoredOffset(30, 2, "block")
    assert zk.nodes[LEGACY][0] == b"11" and consumers.committed(zk, G, [T])[(T, 0)].offset == 13  # type: ignore[arg-type]
    consumers.commit(zk, G, {(T, 0): 14})  # type: ignore[arg-type] # (kafkactl group rewind, say): no metadata
    assert in_block(zk, 0) == StoredOffset(14)
    consumers.delete_partition_offsets(zk, G, [(T, 1), (T, 3)])  # type: ignore[arg-type]
    assert sorted(consumers.committed(zk, G)) == [(T, 0), (T, 17)]  # type: ignore[arg-type]
    assert in_block(zk, 0) == StoredOffset(14) and in_block(zk, 3) is None
    assert not [n for n in zk.nodes if n.endswith((f"/{T}/1", f"/{T}/3"))]  # both of its znodes, of each
    consumers.delete_group_state(zk, G)  # type: ignore[arg-type]
    assert not [n for n in zk.nodes if n.startswith(f"/consumers/{G}")]


# --- the group store ------------------------------------------------------------------------------------------------


def test_the_store_writes_metadata_and_epochs_into_blocks_and_reads_earlier_znodes_under_them() -> None:
    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        await store.commit(G, {(T, 0): StoredOffset(5, 2, "five"), (T, 1): 6})
        assert block_writes(zk) == [(f"{G}/offsets/{T}/block-0", {0: 5, 1: 6})]  # both partitions, one write
        assert (in_block(zk, 0), in_block(zk, 1)) == (StoredOffset(5, 2, "five"), StoredOffset(6))
        assert LEGACY not in zk.nodes and paths.group_offset_metadatas(G) not in zk.nodes
        legacy(zk, 2, StoredOffset(9))  # stored by an earlier version: no metadata, epoch -1
        legacy(zk, 4, StoredOffset(4, 1, "old"))  # with its metadata beside
        zk.put(paths.group_offset(G, T, 5), b"7")  # its metadata znode an earlier commit's (of offset 6): not its
        zk.put(paths.group_offset_metadata(G, T, 5), paths.offset_metadata_json(StoredOffset(6, 1, "of 6")) or b"")
        assert await store.fetch(G, {T: [0, 1, 2, 3, 4, 5]}) == {
            (T, 0): StoredOffset(5, 2, "five"), (T, 1): StoredOffset(6), (T, 2): StoredOffset(9),
            (T, 3): StoredOffset(-1, -1, ""), (T, 4): StoredOffset(4, 1, "old"), (T, 5): StoredOffset(7)}  # fmt: skip
        assert (await store.fetch(G, None))[(T, 4)] == StoredOffset(4, 1, "old")
        # a later commit without metadata clears it, as Kafka; one of a partition an earlier version stored wins
        await store.commit(G, {(T, 0): StoredOffset(8), (T, 4): StoredOffset(10, 3, "ten")})
        assert (in_block(zk, 0), in_block(zk, 4)) == (StoredOffset(8), StoredOffset(10, 3, "ten"))
        assert zk.nodes[paths.group_offset(G, T, 4)][0] == b"4"  # (not written: read under the block)
        assert await store.fetch(G, {T: [0, 4]}) == {(T, 0): StoredOffset(8), (T, 4): StoredOffset(10, 3, "ten")}
        assert await store.delete(G) and not [n for n in zk.nodes if n.startswith(f"/consumers/{G}")]
        await store.close(1)

    run(main())


def test_metadata_held_through_an_outage_is_served_and_written_after_as_accepted() -> None:
    async def main() -> None:
        zk = FakeZk()
        store = await started(zk, live=lambda g: True)
        await store.commit(G, {(T, 0): StoredOffset(1, 1, "one")})
        zk.down()
        before = _now_ms()
        await store.commit(G, {(T, 0): StoredOffset(2, 3, "two")})
        assert await store.fetch(G, {T: [0]}) == {(T, 0): StoredOffset(2, 3, "two")}  # from memory
        assert in_block(zk) == StoredOffset(1, 1, "one")
        await asyncio.sleep(0.02)
        back = _now_ms()
        zk.up()
        await until("the held commit written", lambda: not store.held_commits())
        entry = zk.entry(T, 0)
        assert entry is not None and entry.stored == StoredOffset(2, 3, "two")
        assert before <= entry.at_ms < back  # when it was accepted, not when it was written
        await store.close(1)

    run(main())


def test_a_commit_is_one_block_write_whatever_it_carries() -> None:
    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        await store.commit(G, {(T, 0): 1})  # (the block created, with its parents)
        zk.writes.clear()
        for stored in (StoredOffset(2, 1, "m"), StoredOffset(3), StoredOffset(4, 2, "x" * 4096)):
            await store.commit(G, {(T, 0): stored, (T, 1): stored})
            assert in_block(zk, 0) == in_block(zk, 1) == stored
        assert [path for path, _ in zk.writes] == [BLOCK] * 3  # nothing beside, with metadata or without
        put_stored(
            zk, 0, StoredOffset(5, 2, "theirs")
        )  # another coordinator commits meanwhile (the group moved and back)
        zk.writes.clear()
        await store.commit(G, {(T, 0): 5})  # the same offset without metadata: the last commit's, as Kafka
        assert [path for path, _ in zk.writes] == [BLOCK]  # (refused at the version it knew, read again, written)
        assert (in_block(zk, 0), in_block(zk, 1)) == (StoredOffset(5), StoredOffset(4, 2, "x" * 4096))
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


def test_a_commit_whose_written_reply_was_lost_keeps_its_metadata_and_is_not_written_again() -> None:
    async def main() -> None:
        zk = LostReplyZk()
        store = await started(zk)
        await store.commit(G, {(T, 0): StoredOffset(1, 1, "one")})
        zk.lose = BLOCK
        zk.writes.clear()
        await store.commit(G, {(T, 0): StoredOffset(7, 3, "seven")})  # held after the ConnectionLoss, retried
        await until("the held commit done", lambda: not store.held_commits())
        assert in_block(zk) == StoredOffset(7, 3, "seven")
        assert len(block_writes(zk)) == 1  # (read again: its own entry was there)
        assert await store.fetch(G, {T: [0]}) == {(T, 0): StoredOffset(7, 3, "seven")}
        await store.close(1)

    run(main())


def test_a_lost_reply_keeps_what_someone_committed_with_the_same_offset_after_it() -> None:
    async def main() -> None:
        zk = LostReplyZk()
        store = await started(zk)
        await store.commit(G, {(T, 0): StoredOffset(1, 1, "one")})
        zk.lose = BLOCK  # and the group's next coordinator commits the same offset, with its metadata, meanwhile
        accepted = _now_ms()
        zk.then = lambda: put_stored(zk, 0, StoredOffset(7, 4, "theirs"), accepted + 50)  # (later, not the same ms)
        await store.commit(G, {(T, 0): StoredOffset(7, 3, "ours")})
        await until("the held commit done", lambda: not store.held_commits())
        assert in_block(zk) == StoredOffset(7, 4, "theirs")
        assert await store.fetch(G, {T: [0]}) == {(T, 0): StoredOffset(7, 4, "theirs")}
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


def test_metadata_too_large_for_its_offset_block_is_refused_whatever_the_setting() -> None:
    async def main() -> None:
        zk = FakeZk()
        store = await started(zk)
        b = _services(zk, store, max_bytes=10**6)  # (offset.metadata.max.bytes above what a block's entry holds)
        fits, too_large = "x" * (paths.OFFSET_ENTRY_MAX_BYTES - 100), "x" * paths.OFFSET_ENTRY_MAX_BYTES
        escaped = "\u0001" * (paths.OFFSET_ENTRY_MAX_BYTES // 6 + 1)  # (short, but 6 bytes each in JSON)
        too = ErrorCode.OFFSET_METADATA_TOO_LARGE
        assert await _commit(b, 7, [_part(0, 1, fits, 1), _part(1, 1, too_large, 1)]) == {0: 0, 1: too}
        assert await _commit(b, 7, [_part(0, 2, escaped, 2), _part(1, 2, "", 2)]) == {0: too, 1: 0}
        assert await _fetch(b, 5, [0, 1]) == {0: (1, 1, fits), 1: (2, 2, "")}  # the refused ones not stored
        await store.close(1)

    run(main())
