"""The transaction coordinators' durable state in ZooKeeper (blocking calls: run them off the event loop).

Where Kafka keeps `__transaction_state`, a replicated internal topic, kafkactl keeps one znode per
transactional id, `/kafkactl/transactions/<id>` (JSON: `TxnMeta.to_json`, listed in `broker.zk.paths`).
ZooKeeper is already kafkactl's replicated store for group offsets, it survives any broker's loss, and a
broker that takes an id over reads one znode instead of loading a log.

Every change is conditional on the znode's version (`update`), so two brokers that both believe they
coordinate an id cannot both win: the loser gets `Fenced` and answers NOT_COORDINATOR. The markers'
coordinator epoch is kept in the JSON (`TxnMeta.coordinator_epoch`; it only grows for an id).

TxnOffsetCommit's offsets wait under `/kafkactl/txn_offsets/<group>/<id>` ({"version":1,"producer_id",
"producer_epoch","txn_number","offsets":[[topic, partition, offset, leader_epoch, metadata]]}), written by the
group's coordinator (`add_offsets`) in one ZooKeeper multi-op with a check of the transaction's znode at the
version its Ongoing state was read at: offsets are never held for a transaction that ended meanwhile. Neither
znode is written past `STATE_MAX_BYTES` (ZooKeeper's request limit): the request is refused. The
tag (producer id, epoch, `TxnMeta.txn_number`) says which transaction they belong to; entries of any other
(left by an earlier version) are not pending and are removed when found.

A transaction ends (`finish`) in one multi-op: on commit its held offsets become the groups' committed offsets
(in their blocks, `/consumers/<g>/offsets/<t>/block-<n>`, each conditional on the version read, as
`broker.zk.consumers` writes them), the held copies are deleted, and the Complete state is written, conditional
on the Prepare state's version. A ZooKeeper that fails or is slow leaves all of it undone (the id stays in its
Prepare state and is completed again); never the held copy dropped without the offsets written. Offsets too many
for one multi-op (`MULTI_MAX_OPS`, `MULTI_MAX_BYTES`) are written first, in multi-ops each checking the Prepare
state's version; the last one drops the held copies and writes Complete. Listed by group, so OffsetFetch's
require_stable finds them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError, RolledBackError

from broker.coordinator.txn.state import TopicPartition, TxnMeta, TxnState, holds_offsets_of, txn_offsets_error
from broker.protocol.errors import ErrorCode
from broker.zk import consumers, paths

#: the most operations, and about the most bytes (paths and data), of one ZooKeeper multi-op here (ZooKeeper
#: refuses a request over jute.maxbuffer, 1 MiB by default)
MULTI_MAX_OPS = 1000
MULTI_MAX_BYTES = 512 * 1024
#: the most bytes of one state here (a transaction's znode, one group's held offsets): ZooKeeper refuses a
#: request over jute.maxbuffer (1 MiB by default) by dropping the connection, the broker's shared session's
#: (and it would again at every retry). A transaction that would grow past it is refused instead, as Kafka
#: refuses a state record over the transaction or offsets topic's message size: AddPartitionsToTxn and
#: AddOffsetsToTxn with UNKNOWN_SERVER_ERROR, TxnOffsetCommit with INVALID_COMMIT_OFFSET_SIZE. (The margin
#: left takes a Prepare or Complete write of a state that fits, a few bytes longer.)
STATE_MAX_BYTES = 900 * 1024
#: attempts of a multi-op that lost a race (a znode changed between its reads and its write)
MULTI_ATTEMPTS = 50


class Fenced(Exception):
    """Another broker changed the id's state since it was read here: this broker no longer coordinates it."""


def fits(meta: TxnMeta) -> bool:
    """Whether the id's state is small enough for its znode (`STATE_MAX_BYTES`)."""
    return len(paths.dumps(meta.to_json())) <= STATE_MAX_BYTES


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


class _Raced(Exception):
    """A znode a multi-op read changed before it was written: read again and retry."""


def _commit(zk: KazooClient, ops: list[tuple[str, str, bytes | None, int]], guard: int) -> list[Any]:
    """Run `ops` ((kind create|set|delete|check, path, data, version)) as one multi-op; the op at `guard` is
    the transaction znode's: its failure raises `Fenced`. Another op's race raises `_Raced`; any other
    failure (NoAuth, …) is raised as kazoo's exception."""
    t = zk.transaction()
    for kind, path, data, version in ops:
        if kind == "create":
            t.create(path, data or b"")
        elif kind == "set":
            t.set_data(path, data or b"", version)
        elif kind == "delete":
            t.delete(path, version)
        else:
            t.check(path, version)
    results = t.commit()
    for i, result in enumerate(results):
        if isinstance(result, Exception) and not isinstance(result, RolledBackError):
            if i == guard and isinstance(result, (BadVersionError, NoNodeError)):
                raise Fenced(ops[i][1])
            if isinstance(result, (BadVersionError, NoNodeError, NodeExistsError)):
                raise _Raced(ops[i][1])
            raise result
    return results


def _retrying(attempt: Any) -> Any:
    for _ in range(MULTI_ATTEMPTS - 1):
        try:
            return attempt()
        except _Raced:
            continue
    try:
        return attempt()
    except _Raced as exc:
        raise KazooException(f"{exc}: changed under every attempt") from None


def _tag(d: dict) -> tuple[int, int, int]:
    return int(d.get("producer_id", -1)), int(d.get("producer_epoch", -1)), int(d.get("txn_number", 0))


def add_offsets(zk: KazooClient, group: str, txn_id: str, producer_id: int, producer_epoch: int,
                offsets: dict[TopicPartition, PendingOffset]) -> ErrorCode:  # fmt: skip
    """Hold a transaction's offsets for `group` (merged with those its transaction holds already), if the
    id's current transaction is (producer id, epoch)'s, Ongoing, with the group added: the write is one
    multi-op with a check of the transaction's znode at the version that said so. Returns the error of that
    check (`txn_state.txn_offsets_error`); NONE once held."""
    path = paths.txn_group_offsets(group, txn_id)

    def attempt() -> ErrorCode:
        zk.ensure_path(paths.txn_offsets(group))  # (a create in a multi-op makes no parent)
        got = load(zk, txn_id)
        meta = got[0] if got is not None else None
        error = txn_offsets_error(meta, group, producer_id, producer_epoch)
        if error or meta is None or got is None:
            return error or ErrorCode.INVALID_PRODUCER_ID_MAPPING
        held: dict[TopicPartition, PendingOffset] = {}
        try:
            data, stat = zk.get(path)
            d = paths.loads(data)
            if _tag(d) == (meta.producer_id, meta.producer_epoch, meta.txn_number):
                held = _offsets(d)  # (else left behind by an earlier transaction: replaced)
            write = ("set", path, None, stat.version)
        except NoNodeError:
            write = ("create", path, None, -1)
        held.update(offsets)
        body = paths.dumps({"version": 1, "producer_id": producer_id, "producer_epoch": producer_epoch,
                            "txn_number": meta.txn_number,
                            "offsets": [[t, p, o.offset, o.leader_epoch, o.metadata]
                                        for (t, p), o in sorted(held.items())]})  # fmt: skip
        if len(body) > STATE_MAX_BYTES:
            return ErrorCode.INVALID_COMMIT_OFFSET_SIZE  # (nothing written: what is held stays)
        try:
            _commit(zk, [("check", paths.transaction(txn_id), None, got[1]), (write[0], path, body, write[3])], 0)
        except Fenced:  # (the transaction changed meanwhile: its state is checked again)
            raise _Raced(txn_id) from None
        return ErrorCode.NONE

    return _retrying(attempt)


def _offsets(d: dict) -> dict[TopicPartition, PendingOffset]:
    return {(str(t), int(p)): PendingOffset(int(o), int(e), str(m)) for t, p, o, e, m in d.get("offsets", ())}


def held_partitions(data: bytes) -> set[TopicPartition]:
    """The partitions a held copy (a `txn_group_offsets` znode's data) names; none when unreadable."""
    try:
        return set(_offsets(paths.loads(data)))
    except (ValueError, TypeError, AttributeError):
        return set()


def held_offsets(zk: KazooClient, group: str, txn_id: str, meta: TxnMeta) -> dict[TopicPartition, PendingOffset]:
    """The offsets `meta`'s transaction under way holds for `group` (empty: none, or only left-behind ones)."""
    try:
        data, _ = zk.get(paths.txn_group_offsets(group, txn_id))
    except NoNodeError:
        return {}
    d = paths.loads(data)
    return _offsets(d) if holds_offsets_of(meta, *_tag(d)) else {}


def _offset_ops(zk: KazooClient, group: str, offsets: dict[TopicPartition, PendingOffset]
                ) -> list[tuple[str, str, bytes | None, int]]:  # fmt: skip
    """The writes that make `offsets` the group's committed ones, as `broker.zk.consumers` stores a commit: each
    offset block they fall in, read and written again conditionally on its version (a commit written meanwhile
    makes the multi-op lose its race: read again)."""
    at_ms = int(paths.now_ms())
    entries = {tp: paths.BlockEntry(paths.StoredOffset(o.offset, o.leader_epoch, o.metadata), at_ms)
               for tp, o in offsets.items()}  # fmt: skip
    ops: list[tuple[str, str, bytes | None, int]] = []
    ensured: set[str] = set()
    for path, part in sorted(consumers.by_block(group, entries).items()):
        current, version = consumers.read_block(zk, path)
        data = paths.offset_block_json({**current, **part})
        if version is not None:
            ops.append(("set", path, data, version))
            continue
        parent = path.rsplit("/", 1)[0]
        if parent not in ensured:
            zk.ensure_path(parent)
            ensured.add(parent)
        ops.append(("create", path, data, -1))
    return ops


def _size(op: tuple[str, str, bytes | None, int]) -> int:
    return len(op[1]) + len(op[2] or b"") + 16


def finish(zk: KazooClient, txn_id: str, prepared: TxnMeta, version: int, done: TxnMeta
           ) -> tuple[int, dict[str, dict[TopicPartition, PendingOffset]]]:  # fmt: skip
    """End `prepared`'s transaction (its Prepare state at znode `version`): on commit, its held offsets become
    the groups' committed offsets, the held copies go, and `done` (its Complete state) is written, all in one
    multi-op conditional on `version` (more offsets than one multi-op takes go first, in multi-ops checking
    `version`). Returns the new version and the offsets committed, by group; `Fenced` when the id changed
    meanwhile (another coordinator)."""
    commit = prepared.state == TxnState.PREPARE_COMMIT
    txn_path = paths.transaction(txn_id)

    committed: dict[str, dict[TopicPartition, PendingOffset]] = {}

    def attempt() -> int:
        committed.clear()
        writes: list[tuple[str, str, bytes | None, int]] = []
        drops: list[tuple[str, str, bytes | None, int]] = []
        for group in sorted(prepared.groups):
            path = paths.txn_group_offsets(group, txn_id)
            try:
                data, stat = zk.get(path)
            except NoNodeError:
                continue
            d = paths.loads(data)
            if commit and holds_offsets_of(prepared, *_tag(d)):
                committed[group] = _offsets(d)
                writes += _offset_ops(zk, group, committed[group])
            drops.append(("delete", path, None, stat.version))  # (this transaction's, or left behind)
        last = [*drops, ("set", txn_path, paths.dumps(done.to_json()), version)]
        chunk: list[tuple[str, str, bytes | None, int]] = []
        budget = sum(map(_size, last))
        for op in writes:
            if len(chunk) + len(last) >= MULTI_MAX_OPS or budget + _size(op) > MULTI_MAX_BYTES:
                _commit(zk, [("check", txn_path, None, version), *chunk], 0)
                chunk, budget = [], sum(map(_size, last))
            chunk.append(op)
            budget += _size(op)
        if chunk and budget > MULTI_MAX_BYTES:  # (a large final part: the last writes go before it, alone)
            _commit(zk, [("check", txn_path, None, version), *chunk], 0)
            chunk = []
        results = _commit(zk, [*chunk, *last], len(chunk) + len(last) - 1)
        return int(results[-1].version)

    new_version = _retrying(attempt)
    for group in prepared.groups:  # (the group's parent, once empty)
        try:
            zk.delete(paths.txn_offsets(group))
        except KazooException:  # (not empty, or gone: fine)
            pass
    return new_version, dict(committed)


def drop_offsets(zk: KazooClient, group: str, txn_id: str, version: int = -1) -> None:
    """Delete a transaction's held offsets for `group` (at `version`: only if unchanged since read; a changed
    one stays) and the group's parent once empty."""
    try:
        zk.delete(paths.txn_group_offsets(group, txn_id), version=version)
    except (NoNodeError, BadVersionError):
        pass
    try:
        zk.delete(paths.txn_offsets(group))
    except KazooException:  # (not empty, or gone: fine)
        pass


def pending_partitions(zk: KazooClient, group: str) -> set[TopicPartition]:
    """The partitions of `group` with transactional offsets not yet committed or dropped: held for their
    transactional id's transaction under way (Ongoing or being completed). Others (left behind by a
    transaction that ended, of another producer, epoch or transaction number) are not, and are removed."""
    try:
        children = zk.get_children(paths.txn_offsets(group))
    except NoNodeError:
        return set()
    out: set[TopicPartition] = set()
    for child in children:
        txn_id = paths.group_name(child)
        try:
            data, stat = zk.get(f"{paths.txn_offsets(group)}/{child}")
        except NoNodeError:
            continue
        d = paths.loads(data)
        txn = load(zk, txn_id)
        meta = txn[0] if txn is not None else None
        if not holds_offsets_of(meta, *_tag(d)) or meta is None or group not in meta.groups:
            drop_offsets(zk, group, txn_id, stat.version)  # (left behind: not pending, removed)
            continue
        out.update(_offsets(d))
    return out
