"""The partition side of transactions (KIP-98) on real brokers, driven by raw protocol: transactional batches,
WriteTxnMarkers as a coordinator sends them, the last stable offset, read_committed fetches with their aborted
lists, fencing, restarts, a follower taking over, and what kafkactl and third-party consumers read."""

from __future__ import annotations

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from tests.integration.clientkit import create_topic, unique
from tests.integration.helpers import connect
from tests.integration.txn_raw import batches_of, fetch, produce_txn, read_values, write_markers

PID, PID2 = 4000, 4001


def _values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


def _list_latest(conn, topic: str, committed: bool) -> int:
    body = {"replica_id": -1, "isolation_level": 1 if committed else 0,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                       "timestamp": -1}]}]}  # fmt: skip
    (t,) = conn.request(ApiKey.LIST_OFFSETS, body)["topics"]
    (p,) = t["partitions"]
    assert p["error_code"] == 0, p
    return p["offset"]


def _interleaved(conn, topic: str) -> tuple[list[bytes], list[bytes]]:
    """Two producers' transactions on partition 0: PID commits 2 batches, PID2 aborts 2 batches, interleaved;
    returns (committed values, aborted values)."""
    committed, aborted = _values("c", 3) + _values("c2", 2), _values("a", 2) + _values("a2", 4)
    assert produce_txn(conn, "t1", topic, 0, committed[:3], PID, 0, 0)["error_code"] == 0
    assert produce_txn(conn, "t2", topic, 0, aborted[:2], PID2, 0, 0)["error_code"] == 0
    assert produce_txn(conn, "t1", topic, 0, committed[3:], PID, 0, 3)["error_code"] == 0
    assert produce_txn(conn, "t2", topic, 0, aborted[2:], PID2, 0, 2)["error_code"] == 0
    return committed, aborted


def test_commit_and_abort_as_read_committed_and_read_uncommitted_see_them(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("txn"))
    with connect(shared_broker.bootstrap) as conn:
        committed, aborted = _interleaved(conn, topic)
        # open transactions hold the last stable offset at the first one's first offset
        p = fetch(conn, topic, 0, committed=True)
        assert (p["high_watermark"], p["last_stable_offset"]) == (11, 0)
        assert not p["records"]
        assert read_values(conn, topic, 0, committed=False) == committed[:3] + aborted[:2] + committed[3:] + aborted[2:]
        assert (_list_latest(conn, topic, True), _list_latest(conn, topic, False)) == (0, 11)

        assert write_markers(conn, PID, 0, True, 0, [(topic, 0)]) == {(topic, 0): 0}  # commit at offset 11
        p = fetch(conn, topic, 0, committed=True)
        assert p["last_stable_offset"] == 3  # PID2's transaction (from offset 3) is still open
        assert [r.value for _, rs in batches_of(p["records"]) for r in rs] == committed[:3]

        assert write_markers(conn, PID2, 0, False, 0, [(topic, 0)]) == {(topic, 0): 0}  # abort at offset 12
        p = fetch(conn, topic, 0, committed=True)
        assert (p["high_watermark"], p["last_stable_offset"]) == (13, 13)
        assert p["aborted_transactions"] == [{"producer_id": PID2, "first_offset": 3}]
        assert read_values(conn, topic, 0, committed=True) == committed
        assert _list_latest(conn, topic, True) == 13
        # read_uncommitted sees every data record, never a control batch as one
        assert read_values(conn, topic, 0, committed=False) == committed[:3] + aborted[:2] + committed[3:] + aborted[2:]
        markers = [h for h, _ in batches_of(fetch(conn, topic, 0)["records"]) if h.is_control]
        assert [(h.base_offset, h.producer_id, h.is_transactional, h.base_sequence) for h in markers] == [
            (11, PID, True, -1), (12, PID2, True, -1)]  # fmt: skip


def test_markers_are_refused_from_a_stale_coordinator_or_an_old_producer_epoch(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("fence"))
    with connect(shared_broker.bootstrap) as conn:
        assert produce_txn(conn, "t", topic, 0, [b"x"], PID, 3, 0)["error_code"] == 0
        assert write_markers(conn, PID, 3, True, 5, [(topic, 0)]) == {(topic, 0): 0}
        assert produce_txn(conn, "t", topic, 0, [b"y"], PID, 3, 1)["error_code"] == 0
        # a coordinator with an older epoch than the last marker's is fenced; the transaction stays open
        assert write_markers(conn, PID, 3, False, 4, [(topic, 0)]) == {
            (topic, 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED}
        assert fetch(conn, topic, 0, committed=True)["last_stable_offset"] == 2
        # a new producer epoch's abort (the coordinator fenced the producer) closes it and raises the epoch
        assert write_markers(conn, PID, 4, False, 6, [(topic, 0)]) == {(topic, 0): 0}
        assert fetch(conn, topic, 0, committed=True)["last_stable_offset"] == 4
        zombie = produce_txn(conn, "t", topic, 0, [b"z"], PID, 3, 2)
        assert zombie["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH
        assert write_markers(conn, PID, 3, True, 7, [(topic, 0)]) == {(topic, 0): ErrorCode.INVALID_PRODUCER_EPOCH}
        # the new epoch writes from sequence 0; a repeated marker is answered and not written again
        assert produce_txn(conn, "t", topic, 0, [b"w"], PID, 4, 0)["error_code"] == 0
        assert write_markers(conn, PID, 4, True, 6, [(topic, 0)]) == {(topic, 0): 0}
        assert write_markers(conn, PID, 4, True, 6, [(topic, 0)], version=1) == {(topic, 0): 0}
        assert fetch(conn, topic, 0)["high_watermark"] == 6
        assert read_values(conn, topic, 0, committed=True) == [b"x", b"w"]
        # transactional batches need a transactional id; a producer in a transaction writes only transactional ones
        assert produce_txn(conn, None, topic, 0, [b"v"], PID2, 0, 0)["error_code"] == (
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        assert produce_txn(conn, "t", topic, 0, [b"v"], PID, 4, 1)["error_code"] == 0
        plain = produce_txn(conn, None, topic, 0, [b"u"], PID, 4, 2, transactional=False)
        assert plain["error_code"] == ErrorCode.INVALID_TXN_STATE
        # DescribeProducers tells the open transaction and the coordinator epoch
        body = {"topics": [{"name": topic, "partition_indexes": [0]}]}
        (t,) = conn.request(ApiKey.DESCRIBE_PRODUCERS, body)["topics"]
        (prod,) = [a for a in t["partitions"][0]["active_producers"] if a["producer_id"] == PID]
        assert (prod["producer_epoch"], prod["coordinator_epoch"], prod["current_txn_start_offset"]) == (4, 6, 6)
