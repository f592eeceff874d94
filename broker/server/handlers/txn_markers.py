"""WriteTxnMarkers (27): a transaction coordinator has a partition leader close a producer's transaction.

For each producer and partition the leader appends one control batch (attributes transactional|control,
the producer's id and epoch, base sequence -1, one record: the marker of `broker.log.txn_index`), closes
the producer's open transaction there (`ProducerStates.end_txn`), notes an abort in the segment's
`.txnindex`, and answers once the high watermark passes the marker (as Kafka appends markers with
acks=-1), so a read_committed consumer's last stable offset moves only past replicated markers.

A marker for a producer with no open transaction here, no newer producer epoch and the same coordinator epoch
as the last marker is a repeat (a coordinator whose first attempt timed out sends the markers again): it is
not written again, but
answered NONE only once the high watermark passes the producer's last marker here, so that the coordinator
never completes a transaction whose marker the followers lack; if that marker's offset is unknown here (it
lies before the producer snapshot start-up read) the marker is appended again, as Kafka appends every one.
One with a newer coordinator epoch (a coordinator that took the transaction over) is appended too, closing
nothing: the partition (and its log, and so its followers and its next start-up) then holds that epoch, and
the old coordinator's late marker is refused instead of closing the producer's next transaction.
A marker from an older producer epoch than the partition's answers INVALID_PRODUCER_EPOCH, one from an
older coordinator epoch than the last marker's TRANSACTION_COORDINATOR_FENCED. Only brokers send it:
ClusterAction on the cluster is needed (CLUSTER_AUTHORIZATION_FAILED for every partition otherwise).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from broker.errors import CorruptRecordError
from broker.log.producer_state_io import note_completed
from broker.log.txn_index import marker_record
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import RequestHeader
from broker.records.batch import Record, build_batch
from broker.security.acl import Operation
from broker.security.acl_authorizer import cluster_allowed

if TYPE_CHECKING:
    from broker.server.services import Services

log = logging.getLogger(__name__)

#: how long a marker waits for the in-sync replicas (Kafka's request.timeout.ms default)
MARKER_TIMEOUT_S = 30.0


async def handle_write_txn_markers(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    permitted = cluster_allowed(b.authorizer, Operation.CLUSTER_ACTION, "WriteTxnMarkers")
    markers_out = []
    waits = []
    for m in req["markers"]:
        topics_out = []
        for t in m["topics"]:
            parts = []
            for index in t["partition_indexes"]:
                out = {"partition_index": index, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
                if permitted:
                    out["error_code"], last = await write_marker(
                        b, t["name"], index, m["producer_id"], m["producer_epoch"], m["coordinator_epoch"],
                        m["transaction_result"],
                    )  # fmt: skip
                    if last >= 0 and b.replicas.needs_wait((t["name"], index), last):
                        waits.append((out, t["name"], index, last))
                parts.append(out)
            topics_out.append({"name": t["name"], "partitions": parts})
        markers_out.append({"producer_id": m["producer_id"], "topics": topics_out})
    if waits:
        codes = await asyncio.gather(*(
            b.replicas.wait_replicated((topic, index), last, MARKER_TIMEOUT_S, b.min_insync(topic))
            for _, topic, index, last in waits
        ))  # fmt: skip
        for (out, *_), code in zip(waits, codes, strict=True):
            out["error_code"] = code
    return {"markers": markers_out}


async def write_marker(b: Services, topic: str, partition: int, producer_id: int, producer_epoch: int,
                       coordinator_epoch: int, commit: bool) -> tuple[ErrorCode, int]:  # fmt: skip
    """Append the marker to the partition this broker leads; (error, the marker's offset or -1 if none was
    written)."""
    code, plog, info = await b.leader_log(topic, partition)
    if plog is None or info is None:
        return code, -1
    tp = (topic, partition)
    if b.logs.why_offline(tp) is not None:
        return ErrorCode.KAFKA_STORAGE_ERROR, -1
    states = plog.producer_states
    err, repeat_of = states.check_marker(producer_id, producer_epoch, coordinator_epoch)
    if err:
        log.info("%s-%d: refused the %s marker of producer %d epoch %d (coordinator epoch %d): %s", topic,
                 partition, "commit" if commit else "abort", producer_id, producer_epoch, coordinator_epoch,
                 err.name)  # fmt: skip
        return err, -1
    if repeat_of >= 0:  # a retry: answered once the in-sync replicas hold the marker written first
        return ErrorCode.NONE, repeat_of
    now = int(time.time() * 1000)
    key, value = marker_record(commit, coordinator_epoch)
    data = build_batch([Record(0, now, key, value)], producer_id=producer_id, producer_epoch=producer_epoch,
                       transactional=True, control=True)  # fmt: skip
    end_before = plog.log_end_offset
    try:
        result = plog.append(data, leader_epoch=info.leader_epoch, validated=plog.validate(data, client=False))
    except CorruptRecordError as exc:  # (cannot happen: the batch is ours)
        log.error("%s-%d: the marker batch was refused: %s", topic, partition, exc)
        return ErrorCode.UNKNOWN_SERVER_ERROR, -1
    except OSError as exc:
        b.reload_producer_states(plog, end_before)
        b.logs.mark_offline(tp, exc)
        return ErrorCode.KAFKA_STORAGE_ERROR, -1
    done = states.end_txn(producer_id, producer_epoch, coordinator_epoch, result.first_offset, commit, now)
    note_completed(plog, states, [done])
    b.purgatory.notify(tp)  # (read_committed fetches wait for the last stable offset to move)
    return ErrorCode.NONE, result.last_offset
