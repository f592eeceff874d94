"""The transaction coordinators' durable state in ZooKeeper (blocking calls: run them off the event loop).

Where Kafka keeps `__transaction_state`, a replicated internal topic, kafkactl keeps one znode per
transactional id, `/kafkactl/transactions/<id>` (JSON: `TxnMeta.to_json`, listed in `broker.zk.paths`).
ZooKeeper is already kafkactl's replicated store for group offsets, it survives any broker's loss, and a
broker that takes an id over reads one znode instead of loading a log.

Every change is conditional on the znode's version (`update`), so two brokers that both believe they
coordinate an id cannot both win: the loser gets `Fenced` and answers NOT_COORDINATOR. The version a
Prepare state was written at is the markers' coordinator epoch: it only grows for an id.

TxnOffsetCommit's offsets wait under `/kafkactl/txn_offsets/<group>/<id>` ({"version":1,"producer_id",
"producer_epoch","offsets":[[topic, partition, offset, leader_epoch, metadata]]}), written by the group's
coordinator; the transaction's coordinator moves them to the group's committed offsets when the transaction
commits and deletes them when it ends. Listed by group, so OffsetFetch's require_stable finds them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from broker.server.txn_state import TopicPartition, TxnMeta, TxnState
from broker.zk import paths


class Fenced(Exception):
    """Another broker changed the id's state since it was read here: this broker no longer coordinates it."""


def load(zk: KazooClient, txn_id: str) -> tuple[TxnMeta, int] | None:
    """The id's state and znode version, or None when the id is unknown."""
    try:
        data, stat = zk.get(paths.transaction(txn_id))
    except NoNodeError:
        return None
    return TxnMeta.from_json(paths.loads(data)), stat.version


def create(zk: KazooClient, txn_id: str, meta: TxnMeta) -> int:
    """A new id's first state; `Fenced` if someone created it meanwhile. Returns the znode version (0)."""
    try:
        zk.create(paths.transaction(txn_id), paths.dumps(meta.to_json()), makepath=True)
    except NodeExistsError:
        raise Fenced(txn_id) from None
    return 0


def update(zk: KazooClient, txn_id: str, meta: TxnMeta, version: int) -> int:
    """Write the id's next state if its znode is still at `version`; the new version, or `Fenced`."""
    try:
        return zk.set(paths.transaction(txn_id), paths.dumps(meta.to_json()), version=version).version
    except (BadVersionError, NoNodeError):
        raise Fenced(txn_id) from None


def delete(zk: KazooClient, txn_id: str, version: int) -> None:
    """Remove an expired id (if unchanged since `version`)."""
    try:
        zk.delete(paths.transaction(txn_id), version=version)
    except (BadVersionError, NoNodeError):
        raise Fenced(txn_id) from None


def ids(zk: KazooClient) -> list[str]:
    """Every transactional id with a state."""
    try:
        return sorted(paths.group_name(n) for n in zk.get_children(paths.TRANSACTIONS))
    except NoNodeError:
        return []


@dataclass(frozen=True)
class PendingOffset:
    offset: int
    leader_epoch: int
    metadata: str


def add_offsets(zk: KazooClient, group: str, txn_id: str, producer_id: int, producer_epoch: int,
                offsets: dict[TopicPartition, PendingOffset]) -> None:  # fmt: skip
    """Hold a transaction's offsets for `group` (merged with those it held already in this producer epoch)."""
    path = paths.txn_group_offsets(group, txn_id)
    while True:
        held: dict[TopicPartition, PendingOffset] = {}
        version = -1
        try:
            data, stat = zk.get(path)
            d = paths.loads(data)
            version = stat.version
            if d["producer_id"] == producer_id and d["producer_epoch"] == producer_epoch:
                held = _offsets(d)
        except NoNodeError:
            pass
        held.update(offsets)
        body = paths.dumps({"version": 1, "producer_id": producer_id, "producer_epoch": producer_epoch,
                            "offsets": [[t, p, o.offset, o.leader_epoch, o.metadata]
                                        for (t, p), o in sorted(held.items())]})  # fmt: skip
        try:
            if version < 0:
                zk.create(path, body, makepath=True)
            else:
                zk.set(path, body, version=version)
            return
        except (NodeExistsError, BadVersionError, NoNodeError):
            continue  # (changed meanwhile: merge again)


def _offsets(d: dict) -> dict[TopicPartition, PendingOffset]:
    return {(str(t), int(p)): PendingOffset(int(o), int(e), str(m)) for t, p, o, e, m in d.get("offsets", ())}


def take_offsets(zk: KazooClient, group: str, txn_id: str, producer_id: int) -> dict[TopicPartition, PendingOffset]:
    """The offsets a transaction of `producer_id` holds for `group` (empty: none)."""
    try:
        data, _ = zk.get(paths.txn_group_offsets(group, txn_id))
    except NoNodeError:
        return {}
    d = paths.loads(data)
    return _offsets(d) if d.get("producer_id") == producer_id else {}


def drop_offsets(zk: KazooClient, group: str, txn_id: str) -> None:
    """Delete a transaction's held offsets for `group` (and the group's parent once empty)."""
    try:
        zk.delete(paths.txn_group_offsets(group, txn_id))
    except NoNodeError:
        pass
    try:
        zk.delete(paths.txn_offsets(group))
    except Exception:  # (not empty, or gone: fine)
        pass


def pending_partitions(zk: KazooClient, group: str) -> set[TopicPartition]:
    """The partitions of `group` with transactional offsets not yet committed or dropped."""
    try:
        children = zk.get_children(paths.txn_offsets(group))
    except NoNodeError:
        return set()
    out: set[TopicPartition] = set()
    for child in children:
        try:
            data, _ = zk.get(f"{paths.txn_offsets(group)}/{child}")
        except NoNodeError:
            continue
        d = paths.loads(data)
        txn = load(zk, paths.group_name(child))
        meta = txn[0] if txn is not None else None
        if meta is None or (meta.producer_id, meta.producer_epoch) != (d.get("producer_id"), d.get("producer_epoch")) \
                or not (meta.state == TxnState.ONGOING or meta.state.preparing):  # fmt: skip
            # left behind (a TxnOffsetCommit that landed after its transaction ended): not pending, removed
            drop_offsets(zk, group, paths.group_name(child))
            continue
        out.update(_offsets(d))
    return out
