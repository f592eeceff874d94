"""ZooKeeper's request limit (jute.maxbuffer, 1 MiB) and the transaction state: a TxnOffsetCommit whose held
offsets, or an AddPartitionsToTxn whose transaction state, would pass it is refused with Kafka's error for an
oversize state record (INVALID_COMMIT_OFFSET_SIZE, UNKNOWN_SERVER_ERROR) and nothing is sent to ZooKeeper
(which would drop the broker's shared session connection on every retry). In-memory fakes of kazoo."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

from kazoo.exceptions import ConnectionLoss, NoNodeError

from broker.coordinator.txn import store as txn_store
from broker.coordinator.txn.state import TxnMeta, TxnState
from broker.protocol.errors import ErrorCode
from broker.zk import paths
from tests.unit.coordinator.test_txn_completion import _coordinator, _txn_id_on

#: what ZooKeeper takes in one request (its default jute.maxbuffer)
ZK_LIMIT = 1024 * 1024


class Zk:
    """Znodes in a dict; a request over ZooKeeper's limit loses the connection, as a real server does."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, int]] = {}
        self.sent: list[int] = []  # the sizes of the writes sent

    def _send(self, size: int) -> None:
        self.sent.append(size)
        if size > ZK_LIMIT:
            raise ConnectionLoss()

    def ensure_path(self, path: str) -> None:
        self.nodes.setdefault(path, (b"", 0))

    def get(self, path: str) -> tuple[bytes, Any]:
        if path not in self.nodes:
            raise NoNodeError()
        data, version = self.nodes[path]
        return data, SimpleNamespace(version=version)

    def set(self, path: str, data: bytes, version: int = -1) -> Any:
        self._send(len(data))
        old = self.nodes.get(path, (b"", -1))[1]
        self.nodes[path] = (data, old + 1)
        return SimpleNamespace(version=old + 1)

    def transaction(self) -> Any:
        zk, ops = self, []

        class T:
            def check(self, path: str, version: int) -> None:
                ops.append(("check", path, b""))

            def create(self, path: str, data: bytes) -> None:
                ops.append(("create", path, data))

            def set_data(self, path: str, data: bytes, version: int) -> None:
                ops.append(("set", path, data))

            def commit(self) -> list[Any]:
                zk._send(sum(len(p) + len(d) for _, p, d in ops))
                for kind, path, data in ops:
                    if kind != "check":
                        zk.nodes[path] = (data, 0)
                return [True] * len(ops)

        return T()


ONGOING = TxnMeta(7, 0, 60000, TxnState.ONGOING, groups=frozenset({"g"}), partitions=frozenset({("t", 0)}),
                  start_ms=1, update_ms=1, txn_number=1)  # fmt: skip


def test_txn_offsets_over_the_znode_limit_are_refused_without_a_write() -> None:
    zk = Zk()
    zk.nodes[paths.transaction("tx")] = (paths.dumps(ONGOING.to_json()), 3)
    small = {("t", p): txn_store.PendingOffset(p, -1, "m" * 100) for p in range(10)}
    assert txn_store.add_offsets(zk, "g", "tx", 7, 0, small) == ErrorCode.NONE  # type: ignore[arg-type]
    sent = len(zk.sent)
    # 300 partitions of 4 KB metadata each: 1.2 MB, merged with the 10 held already
    big = {("t", p): txn_store.PendingOffset(p, -1, "x" * 4000) for p in range(100, 400)}
    assert txn_store.add_offsets(zk, "g", "tx", 7, 0, big) == ErrorCode.INVALID_COMMIT_OFFSET_SIZE  # type: ignore[arg-type]
    assert len(zk.sent) == sent  # nothing sent: the session untouched
    held, _ = zk.get(paths.txn_group_offsets("g", "tx"))
    assert len(json.loads(held)["offsets"]) == 10  # what was held stays


def test_a_transaction_state_over_the_znode_limit_is_refused_without_a_write() -> None:
    async def run() -> None:
        zk = Zk()
        txn_id = _txn_id_on(1, [1])
        zk.nodes[paths.transaction(txn_id)] = (paths.dumps(ONGOING.to_json()), 3)
        coord, _ = _coordinator(zk, {1: None})  # type: ignore[arg-type]
        name = "a-topic-name-of-some-length-" * 4
        assert await coord.add_to_txn(txn_id, 7, 0, {(name, p) for p in range(100)}, set()) == ErrorCode.NONE
        sent = len(zk.sent)
        many = {(name, p) for p in range(10_000)}  # (about 1.2 MB of JSON)
        assert await coord.add_to_txn(txn_id, 7, 0, many, set()) == ErrorCode.UNKNOWN_SERVER_ERROR
        assert len(zk.sent) == sent
        # the transaction goes on with what it had, and ends
        meta, _ = coord._txns[txn_id]
        assert len(meta.partitions) == 101 and meta.state == TxnState.ONGOING
        assert await coord.add_to_txn(txn_id, 7, 0, set(), {"g2"}) == ErrorCode.NONE
        await coord.close()

    asyncio.run(run())
