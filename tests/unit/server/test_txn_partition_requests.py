"""Produce and WriteTxnMarkers on a partition leader (a Broker without ZooKeeper or sockets): a retried marker
is answered only once the in-sync replicas hold the first one; a record set of more than one batch is refused
(a transactional batch behind a plain one escaped the producer state and the TransactionalId ACL)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import RequestHeader
from broker.records.batch import Record, build_batch
from broker.server.handlers import txn_markers
from broker.server.handlers.fetch import last_stable_offset
from broker.server.handlers.produce import produce_now

TOPIC = "txn-req"


def _produce(broker: Any, records: bytes, version: int = 8, txn_id: str | None = "tx") -> dict[str, Any]:
    req = {"transactional_id": txn_id, "acks": 1, "timeout_ms": 1000,
           "topics": [{"name": TOPIC, "partitions": [{"index": 0, "records": memoryview(records)}]}]}  # fmt: skip
    out = produce_now(broker, RequestHeader(ApiKey.PRODUCE, version, 1, "c"), req)
    if asyncio.iscoroutine(out):
        out = asyncio.run(out)
    broker.write_deferred()
    return out["topics"][0]["partitions"][0]


def _txn_batch(seq: int = 0) -> bytes:
    return build_batch([Record(0, int(time.time() * 1000), None, b"t")], producer_id=7, producer_epoch=0,
                       base_sequence=seq, transactional=True)  # fmt: skip


def test_a_retried_marker_is_answered_only_once_the_isr_holds_the_first(broker, monkeypatch) -> None:
    broker.cache.set_topic(TOPIC, {0: [1, 2]}, {0: {"leader": 1, "leader_epoch": 1, "isr": [1, 2]}})
    broker.replicas.apply((TOPIC, 0), broker.cache.partition(TOPIC, 0))
    monkeypatch.setattr(txn_markers, "MARKER_TIMEOUT_S", 0.3)
    assert _produce(broker, _txn_batch())["error_code"] == 0
    body = {"markers": [{"producer_id": 7, "producer_epoch": 0, "transaction_result": True, "coordinator_epoch": 3,
                         "topics": [{"name": TOPIC, "partition_indexes": [0]}]}]}  # fmt: skip
    hdr = RequestHeader(ApiKey.WRITE_TXN_MARKERS, 1, 2, "c")

    async def twice() -> tuple[int, int]:
        first = await txn_markers.handle_write_txn_markers(broker, hdr, body)
        retry = await txn_markers.handle_write_txn_markers(broker, hdr, body)
        return (first["markers"][0]["topics"][0]["partitions"][0]["error_code"],
                retry["markers"][0]["topics"][0]["partitions"][0]["error_code"])  # fmt: skip

    first, retry = asyncio.run(twice())
    plog = broker.logs.get(TOPIC, 0)
    assert plog.log_end_offset == 2  # the marker written once, not again by the retry
    assert broker.high_watermark(plog) < 2  # follower 2 never fetched it
    assert first != ErrorCode.NONE and retry != ErrorCode.NONE  # the coordinator keeps retrying


def test_a_record_set_of_two_batches_is_refused_whole(broker) -> None:
    plain = build_batch([Record(0, int(time.time() * 1000), None, b"p")])
    out = _produce(broker, plain + _txn_batch())
    assert out["error_code"] == ErrorCode.INVALID_RECORD
    assert "exactly one record batch" in out["error_message"]
    assert _produce(broker, plain + _txn_batch(), version=7)["error_code"] == ErrorCode.CORRUPT_MESSAGE
    plog = broker.logs.get(TOPIC, 0)
    assert plog.log_end_offset == 0 and not plog.producer_states.open_transactions()
    # one batch each: the transactional one is tracked and holds the last stable offset
    assert (
        _produce(broker, plain, txn_id=None)["base_offset"] == 0 and _produce(broker, _txn_batch())["base_offset"] == 1
    )
    assert plog.producer_states.open_transactions() == {7: 1}
    assert last_stable_offset(broker, plog) == 1


def _marker(broker: Any, commit: bool) -> int:
    body = {"markers": [{"producer_id": 7, "producer_epoch": 0, "transaction_result": commit, "coordinator_epoch": 3,
                         "topics": [{"name": TOPIC, "partition_indexes": [0]}]}]}  # fmt: skip
    hdr = RequestHeader(ApiKey.WRITE_TXN_MARKERS, 1, 2, "c")
    out = asyncio.run(txn_markers.handle_write_txn_markers(broker, hdr, body))
    return out["markers"][0]["topics"][0]["partitions"][0]["error_code"]


def test_a_follower_truncated_below_two_markers_has_the_first_transaction_open_again(broker) -> None:
    """ReplicaManager.truncate_copy rebuilds the producers from the log (Kafka's truncateTo), not one marker deep."""
    assert _produce(broker, _txn_batch(0))["base_offset"] == 0
    assert _marker(broker, commit=True) == 0  # offset 1
    assert _produce(broker, _txn_batch(1))["base_offset"] == 2
    assert _marker(broker, commit=False) == 0  # offset 3
    tp, plog = (TOPIC, 0), broker.logs.get(TOPIC, 0)
    assert plog.producer_states.open_transactions() == {} and len(plog.txn_index.all()) == 1
    broker.replicas.truncate_copy(tp, plog, 1, "as a test")
    assert plog.log_end_offset == 1 and plog.txn_index.all() == []
    assert plog.producer_states.open_transactions() == {7: 0}
    assert last_stable_offset(broker, plog) == 0


def _marker_of(broker: Any, commit: bool, coordinator_epoch: int) -> int:
    body = {"markers": [{"producer_id": 7, "producer_epoch": 0, "transaction_result": commit,
                         "coordinator_epoch": coordinator_epoch,
                         "topics": [{"name": TOPIC, "partition_indexes": [0]}]}]}  # fmt: skip
    hdr = RequestHeader(ApiKey.WRITE_TXN_MARKERS, 1, 2, "c")
    out = asyncio.run(txn_markers.handle_write_txn_markers(broker, hdr, body))
    return out["markers"][0]["topics"][0]["partitions"][0]["error_code"]


def test_a_takeover_coordinators_marker_is_written_and_fences_the_old_ones_late_marker(broker) -> None:
    """Coordinator A wrote T1's abort (coordinator epoch 3); B took the Prepare over (epoch 4) and sends it again:
    it is appended (not a repeat), so the producer's next transaction is not closed by A's late marker."""
    plog = broker.logs.get(TOPIC, 0)
    assert _produce(broker, _txn_batch(0))["base_offset"] == 0
    assert _marker_of(broker, commit=False, coordinator_epoch=3) == 0  # offset 1
    assert _marker_of(broker, commit=False, coordinator_epoch=3) == 0 and plog.log_end_offset == 2  # A's retry
    assert _marker_of(broker, commit=False, coordinator_epoch=4) == 0 and plog.log_end_offset == 3  # B's
    assert _produce(broker, _txn_batch(1))["base_offset"] == 3  # T2, same producer epoch
    assert _marker_of(broker, commit=False, coordinator_epoch=3) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert plog.log_end_offset == 4 and plog.producer_states.open_transactions() == {7: 3}
    assert last_stable_offset(broker, plog) == 3
