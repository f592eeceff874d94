"""The paper's consumer registries: group members, partition ownership and committed offsets.

Blocking kazoo calls over the `/consumers/<g>/...` paths of `broker.zk.paths`. kafkactl's group
consumer uses all three registries; the broker's group coordinator the offset registry and its own
`generation` node, so `kafkactl group` reads committed offsets of both kinds of group from here. The
broker never calls these on a group request's path: its `broker.coordinator.group.store` writes them behind
(held in memory while ZooKeeper is unreachable) and reads with kazoo's asynchronous calls, within a bound.
"""

from __future__ import annotations

import base64
import contextlib
import json
from typing import Any, NamedTuple

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from broker.zk import batch, paths

TopicPartition = tuple[str, int]


class Committed(NamedTuple):
    offset: int
    mtime_ms: int  # when it was last committed (the znode's modification time)
    leader_epoch: int = -1  # the committed position's leader epoch (-1: none given)
    metadata: str = ""  # the client's commit metadata


def groups(zk: KazooClient) -> list[str]:
    """Every group with a node under `/consumers`, sorted."""
    try:
        return sorted(paths.group_name(node) for node in zk.get_children(paths.CONSUMERS))
    except NoNodeError:
        return []


def broker_groups(zk: KazooClient) -> list[str]:
    """The groups in the offset registry that kafkactl's own consumer never joined (standard clients')."""
    return [g for g in groups(zk) if not is_zookeeper_group(zk, g)]


def is_zookeeper_group(zk: KazooClient, group: str) -> bool:
    """True for a group kafkactl's own (ZooKeeper-coordinated) consumer has joined at least once."""
    return zk.exists(paths.group_ids(group)) is not None


def register(zk: KazooClient, group: str, consumer_id: str, topics: list[str]) -> None:
    """Create this consumer's ephemeral `/consumers/<g>/ids/<id>`."""
    zk.ensure_path(paths.group_ids(group))
    zk.create(paths.group_member(group, consumer_id), paths.consumer_json(topics), ephemeral=True)


def deregister(zk: KazooClient, group: str, consumer_id: str) -> None:
    try:
        zk.delete(paths.group_member(group, consumer_id))
    except NoNodeError:
        pass


def members(zk: KazooClient, group: str) -> dict[str, list[str]]:
    """{consumer id: subscribed topics} of the group's live consumers, sorted by id."""
    out: dict[str, list[str]] = {}
    try:
        children = zk.get_children(paths.group_ids(group))
    except NoNodeError:
        return out
    for child in sorted(children):
        try:
            data, _ = zk.get(paths.group_member(group, child))
        except NoNodeError:
            continue
        out[child] = paths.parse_consumer(data)
    return out


def claim(zk: KazooClient, group: str, topic: str, partition: int, consumer_id: str) -> bool:
    """Take ownership of a partition (an ephemeral node); False if another consumer holds it."""
    path = paths.group_owner(group, topic, partition)
    try:
        zk.create(path, consumer_id.encode(), ephemeral=True, makepath=True)
        return True
    except NodeExistsError:
        try:
            data, stat = zk.get(path)
        except NoNodeError:
            return False  # released meanwhile: the caller's retry will take it
        session = zk.client_id  # None while disconnected: ownership cannot be confirmed then
        return data.decode() == consumer_id and session is not None and stat.ephemeralOwner == session[0]


def release(zk: KazooClient, group: str, topic: str, partition: int, consumer_id: str) -> None:
    """Give up ownership of a partition, if this consumer holds it."""
    path = paths.group_owner(group, topic, partition)
    try:
        data, stat = zk.get(path)
        if data.decode() == consumer_id:
            zk.delete(path, version=stat.version)
    except NoNodeError:
        pass


def owners(zk: KazooClient, group: str) -> dict[TopicPartition, str]:
    """{(topic, partition): owning consumer id}."""
    out: dict[TopicPartition, str] = {}
    for topic in _children(zk, paths.group_owners(group)):
        for p in _children(zk, f"{paths.group_owners(group)}/{topic}"):
            try:
                data, _ = zk.get(paths.group_owner(group, topic, int(p)))
            except (NoNodeError, ValueError):
                continue
            out[(topic, int(p))] = data.decode()
    return dict(sorted(out.items()))


def committed(zk: KazooClient, group: str, topics: list[str] | None = None) -> dict[TopicPartition, Committed]:
    """The group's committed offsets, of `topics` or of every topic it has committed to."""
    out: dict[TopicPartition, Committed] = {}
    names = _children(zk, paths.group_offsets(group)) if topics is None else topics
    for topic in names:
        children = _children(zk, paths.group_topic_offsets(group, topic))
        for p in (c for c in children if c.isdigit()):  # (an earlier version's znodes, under the blocks)
            try:
                data, stat = zk.get(paths.group_offset(group, topic, int(p)))
            except NoNodeError:
                continue
            try:
                extra, _ = zk.get(paths.group_offset_metadata(group, topic, int(p)))
            except NoNodeError:
                extra = None
            stored = paths.stored_offset(data, extra)
            if stored is not None:
                out[(topic, int(p))] = Committed(stored.offset, stat.mtime, stored.leader_epoch, stored.metadata)
        for child in children:
            block = paths.block_number(child)
            if block is None:
                continue
            try:
                data, _ = zk.get(paths.group_offset_block(group, topic, block))
            except NoNodeError:
                continue
            for p, e in paths.parse_offset_block(data).items():
                out[(topic, p)] = Committed(e.stored.offset, e.at_ms, e.stored.leader_epoch, e.stored.metadata)
    return dict(sorted(out.items()))


def commit(zk: KazooClient, group: str, offsets: dict[TopicPartition, int], metadata: str = "") -> None:
    """Write committed offsets (the next offset to consume, as Kafka commits them), each with `metadata`."""
    at_ms = int(paths.now_ms())
    write_offsets(zk, group, {tp: paths.BlockEntry(paths.StoredOffset(int(o), -1, metadata), at_ms)
                              for tp, o in offsets.items()})  # fmt: skip


def by_block(group: str, items: dict[TopicPartition, Any]) -> dict[str, dict[int, Any]]:
    """`items` of a group's partitions by the path of the offset block each belongs to, then by partition."""
    out: dict[str, dict[int, Any]] = {}
    for (topic, p), item in items.items():
        out.setdefault(paths.group_offset_block(group, topic, paths.offset_block_of(p)), {})[p] = item
    return out


def read_block(zk: KazooClient, path: str) -> tuple[dict[int, paths.BlockEntry], int | None]:
    """An offset block's commits and znode version (None: no such znode)."""
    try:
        data, stat = zk.get(path)
    except NoNodeError:
        return {}, None
    return paths.parse_offset_block(data), stat.version


def write_offsets(zk: KazooClient, group: str, entries: dict[TopicPartition, paths.BlockEntry]) -> None:
    """Write these commits into their blocks, each block read and written again conditionally on its version
    (again after losing a race with another writer): the other partitions' commits stay."""
    for path, part in by_block(group, entries).items():
        while True:
            current, version = read_block(zk, path)
            data = paths.offset_block_json({**current, **part})
            try:
                if version is None:
                    zk.create(path, data, makepath=True)
                else:
                    zk.set(path, data, version=version)
                break
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue


def store_generation(zk: KazooClient, group: str, generation: int, state: dict[str, Any] | None) -> bool:
    """Write a coordinator group's stable generation (its members' protocol metadata and assignments as
    bytes), or delete it (None: the group emptied) with the group's node if no committed offsets are left.
    Only over a generation no newer than `generation`, and only if nobody wrote in between: a coordinator
    the group already left does not undo its successor's. Returns whether it wrote."""
    path = paths.group_generation(group)
    try:
        data, stat = zk.get(path)
        if _stored_generation(data) > generation:
            return False
    except NoNodeError:
        stat = None
    try:
        if state is None:
            if stat is not None:
                zk.delete(path, version=stat.version)
            with contextlib.suppress(NoNodeError, NotEmptyError):
                zk.delete(paths.group(group))
            return True
        members = [{**m, "protocols": [{"name": p["name"], "metadata": _b64(p["metadata"])} for p in m["protocols"]],
                    "assignment": _b64(m["assignment"])} for m in state["members"]]  # fmt: skip
        data = json.dumps({"version": 1, **state, "members": members}, separators=(",", ":")).encode()
        if stat is None:
            zk.create(path, data, makepath=True)
        else:
            zk.set(path, data, version=stat.version)
        return True
    except (BadVersionError, NodeExistsError, NoNodeError):
        return False  # another coordinator wrote meanwhile


def generation(zk: KazooClient, group: str) -> dict[str, Any] | None:
    """What `store_generation` wrote, or None (no node, or one this version cannot read)."""
    try:
        data, _ = zk.get(paths.group_generation(group))
    except NoNodeError:
        return None
    return parse_generation(data)


def parse_generation(data: bytes | None) -> dict[str, Any] | None:
    """The data of a `generation` node as `store_generation` was given it, or None if it cannot be read."""
    try:
        state = json.loads(data or b"")
        if state.pop("version", None) != 1:
            return None
        state["generation"] = int(state["generation"])
        for key in ("protocol_type", "protocol", "leader"):
            if not isinstance(state[key], str):
                return None
        state["members"] = [
            {"member_id": m["member_id"], "group_instance_id": m["group_instance_id"], "client_id": m["client_id"],
             "client_host": m["client_host"], "session_timeout_ms": int(m["session_timeout_ms"]),
             "rebalance_timeout_ms": int(m["rebalance_timeout_ms"]), "assignment": base64.b64decode(m["assignment"]),
             "protocols": [{"name": p["name"], "metadata": base64.b64decode(p["metadata"])} for p in m["protocols"]]}
            for m in state["members"]
        ]  # fmt: skip
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return state


def _stored_generation(data: bytes) -> int:
    try:
        return int(json.loads(data)["generation"])
    except (ValueError, KeyError, TypeError):
        return -1  # unreadable: anyone may replace it


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def delete_group(zk: KazooClient, group: str) -> bool:
    """Remove a group's registries; False if it did not exist."""
    if zk.exists(paths.group(group)) is None:
        return False  # (kazoo's recursive delete does not report a missing node)
    zk.delete(paths.group(group), recursive=True)
    return True


def _children(zk: KazooClient, path: str) -> list[str]:
    try:
        return sorted(zk.get_children(path))
    except NoNodeError:
        return []


def delete_group_state(zk: KazooClient, group: str) -> None:
    """DeleteGroups: remove a broker-coordinated group's committed offsets and stored generation, then its node
    if nothing else is under it (a ZooKeeper-coordinated group's `ids` and `owners` are left alone)."""
    with contextlib.suppress(NoNodeError):
        zk.delete(paths.group_generation(group))
    topics = sorted({*_children(zk, paths.group_offsets(group)), *_children(zk, paths.group_offset_metadatas(group))})
    bases = [
        b for t in topics for b in (paths.group_topic_offsets(group, t), paths.group_topic_offset_metadata(group, t))
    ]
    batch.delete_many(zk, [f"{base}/{child}" for base in bases for child in _children(zk, base)])
    _prune(zk, group, topics)


def delete_partition_offsets(zk: KazooClient, group: str, tps: list[TopicPartition]) -> None:
    """OffsetDelete: forget a group's committed offsets of these partitions; the topic, `offsets` and group nodes
    left empty go too (as Kafka drops an empty group whose last offsets were deleted)."""
    # first the partitions' znodes of earlier versions (one would show again from under its block), those there
    # only: a list of each topic's, then the deletes pipelined (not a round trip per partition)
    legacy = []
    for topic in sorted({t for t, _ in tps}):
        asked = {str(p) for t, p in tps if t == topic}
        for base in (paths.group_topic_offsets(group, topic), paths.group_topic_offset_metadata(group, topic)):
            legacy += [f"{base}/{child}" for child in _children(zk, base) if child in asked]
    batch.delete_many(zk, legacy)
    for path, part in by_block(group, dict.fromkeys(tps)).items():
        while True:
            current, version = read_block(zk, path)
            left = {p: e for p, e in current.items() if p not in part}
            try:
                if version is None or left == current:
                    break
                if left:
                    zk.set(path, paths.offset_block_json(left), version=version)
                else:
                    zk.delete(path, version=version)
                break
            except (BadVersionError, NoNodeError):
                continue
    _prune(zk, group, sorted({t for t, _ in tps}))


def _prune(zk: KazooClient, group: str, topics: list[str]) -> None:
    """Delete whichever of these topics' offset nodes, the `offsets` node and the group's node are empty."""
    nodes = [paths.group_topic_offsets(group, t) for t in topics] + [paths.group_offsets(group)]
    nodes += [paths.group_topic_offset_metadata(group, t) for t in topics] + [paths.group_offset_metadatas(group)]
    nodes.append(paths.group(group))
    for path in nodes:
        with contextlib.suppress(NoNodeError, NotEmptyError):
            zk.delete(path)
