"""The transaction coordinator against a zombie coordinator and a ZooKeeper that refuses writes, on real
brokers: a coordinator that takes a Prepare state over fences the markers its predecessor still has in
flight (a late COMMIT must not close the producer's next transaction), and a commit whose offsets ZooKeeper
does not take stays PrepareCommit, its held offsets pending, until they are written (then the group's
coordinator, another broker, answers them)."""

from __future__ import annotations

import json
import threading
import time

from kazoo.security import OPEN_ACL_UNSAFE, make_acl

from broker.coordinator.group.coordinator import coordinator_for
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.zk import paths
from tests.integration.clientkit import create_topic, unique
from tests.integration.helpers import connect, wait_until, zk_session
from tests.integration.test_txn_coordinator import _add, _describe, _end, _init, _offset_fetch
from tests.integration.txn_raw import produce_txn, read_values, write_markers

SWEEP = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "300"}


def test_a_coordinator_taking_over_fences_its_predecessors_markers(start_broker, zk_chroot) -> None:
    """The previous coordinator wrote PrepareCommit (at znode version v) and stopped with its COMMIT round
    in flight; the next one completes the transaction, the producer begins transaction 2 on the same
    partition with the same producer id and epoch, and then the old round's COMMIT (coordinator epoch v)
    arrives: the partition refuses it (TRANSACTION_COORDINATOR_FENCED), so transaction 2 stays open and its
    abort hides its records."""
    b = start_broker(1)
    topic = create_topic(b.bootstrap, unique("zomb"))
    txn_id = unique("zombie")
    with connect(b.bootstrap) as conn:
        pid = _init(conn, txn_id)["producer_id"]
        assert _add(conn, txn_id, pid, 0, {topic: [0]}) == {(topic, 0): 0}
        assert produce_txn(conn, txn_id, topic, 0, [b"p0", b"p1"], pid, 0, 0)["error_code"] == 0
    b.stop()
    with zk_session(zk_chroot) as zk:  # (the state the previous coordinator wrote before its markers)
        path = paths.transaction(txn_id)
        data, _ = zk.get(path)
        zombie_epoch = zk.set(path, json.dumps({**json.loads(data), "state": "PrepareCommit"}).encode()).version
    b.start()
    with connect(b.bootstrap) as conn:
        wait_until(lambda: _describe(conn, txn_id)["transaction_state"] == "CompleteCommit", 30, "the completion")
        assert read_values(conn, topic, 0, committed=True) == [b"p0", b"p1"]
        assert _add(conn, txn_id, pid, 0, {topic: [0]}) == {(topic, 0): 0}  # transaction 2
        assert produce_txn(conn, txn_id, topic, 0, [b"t2"], pid, 0, 2)["error_code"] == 0
        late = write_markers(conn, pid, 0, True, zombie_epoch, [(topic, 0)])
        assert late == {(topic, 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED}
        assert read_values(conn, topic, 0, committed=True) == [b"p0", b"p1"]  # (transaction 2 still open)
        assert _end(conn, txn_id, pid, 0, False) == 0
        assert read_values(conn, topic, 0, committed=True) == [b"p0", b"p1"]
        assert read_values(conn, topic, 0, committed=False) == [b"p0", b"p1", b"t2"]


def _ids_on_two_brokers() -> tuple[str, str]:
    """A transactional id coordinated by broker 1 and a group coordinated by broker 2."""
    while True:
        txn_id, group = unique("split-txn"), unique("split-group")
        if coordinator_for(txn_id, [1, 2]) == 1 and coordinator_for(group, [1, 2]) == 2:
            return txn_id, group


def test_a_commit_zookeeper_refuses_stays_prepared_until_its_offsets_are_written(start_broker, zk_chroot) -> None:
    """The group's offset block refuses writes (an ACL: a ZooKeeper that will not take them yet):
    the commit stays PrepareCommit (CONCURRENT_TRANSACTIONS to the producer), its held offsets stay pending
    (UNSTABLE_OFFSET_COMMIT from the group's coordinator, broker 2), nothing is lost; once ZooKeeper takes the
    write the sweep completes it and broker 2 answers the transaction's offset."""
    b1, b2 = start_broker(1, overrides=SWEEP), start_broker(2, overrides=SWEEP)
    topic = create_topic(b1.bootstrap, unique("split"))
    txn_id, group = _ids_on_two_brokers()
    offset_path = paths.group_offset_block(group, topic, 0)

    def committed() -> int:
        return paths.parse_offset_block(zk.get(offset_path)[0])[0].stored.offset

    with zk_session(zk_chroot) as zk, connect(b1.bootstrap) as txn_conn, connect(b2.bootstrap) as group_conn:
        zk.ensure_path(offset_path.rsplit("/", 1)[0])
        first = paths.offset_block_json({0: paths.BlockEntry(paths.StoredOffset(1), 0)})
        zk.create(offset_path, first, acl=[make_acl("world", "anyone", read=True, admin=True)])
        init = _init(txn_conn, txn_id)
        pid, epoch = init["producer_id"], init["producer_epoch"]
        add = {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch, "group_id": group}
        assert txn_conn.request(ApiKey.ADD_OFFSETS_TO_TXN, add, 3)["error_code"] == 0
        body = {**add, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": 42, "committed_metadata": "m"}]}]}  # fmt: skip
        (t,) = group_conn.request(ApiKey.TXN_OFFSET_COMMIT, body, 3)["topics"]
        assert t["partitions"][0]["error_code"] == 0

        ended: list[int] = []

        def end() -> None:  # (EndTxn waits for the completion, up to END_WAIT_S)
            with connect(b1.bootstrap) as conn:
                ended.append(_end(conn, txn_id, pid, epoch, True))

        ending = threading.Thread(target=end)
        ending.start()
        try:
            with connect(b1.bootstrap) as other:
                wait_until(lambda: _describe(other, txn_id)["transaction_state"] == "PrepareCommit", 10, "Prepare")
                time.sleep(1.5)  # (several sweeps retrying the completion)
                assert _describe(other, txn_id)["transaction_state"] == "PrepareCommit"
                assert _add(other, txn_id, pid, epoch, {topic: [0]}) == {(topic, 0): ErrorCode.CONCURRENT_TRANSACTIONS}
            assert _offset_fetch(group_conn, group, topic, True)["error_code"] == ErrorCode.UNSTABLE_OFFSET_COMMIT
            assert zk.exists(paths.txn_group_offsets(group, txn_id))
            assert committed() == 1
            zk.set_acls(offset_path, OPEN_ACL_UNSAFE)  # ZooKeeper takes the write now
        finally:
            ending.join(30)
        assert ended == [0]
        wait_until(lambda: _describe(txn_conn, txn_id)["transaction_state"] == "CompleteCommit", 10, "the commit")
        got = _offset_fetch(group_conn, group, topic, True)
        assert (got["error_code"], got["committed_offset"], got["metadata"]) == (0, 42, "m")
        assert committed() == 42 and not zk.exists(paths.txn_group_offsets(group, txn_id))
