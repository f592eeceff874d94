"""Produce and InitProducerId: validate each partition's batches, check producer sequences, append.

The record set is appended as received (only the 16 bytes outside the CRC are rewritten by the log);
a bad CRC or framing rejects that partition's batches with CORRUPT_MESSAGE, and a header that disagrees
with its records (count, offset deltas, max timestamp) with INVALID_RECORD (CORRUPT_MESSAGE before
Produce v8); nothing is appended then. A topic's `message.timestamp.difference.max.ms` refuses CreateTime
records too far from the broker's clock (INVALID_TIMESTAMP), and its `compression.type`, unless `producer`,
has the batches recompressed to its codec before they are appended (broker/log/topic_policy.py); both
cost one attribute read per partition when the topic asks for neither (`LogConfig.checks_batches`).

Produce does not wait once its topics are in the metadata cache, unless acks=all must wait for the
followers (`ReplicaManager.wait_replicated`), so the dispatcher runs `produce_now` without a coroutine
and gets a coroutine back only for such a wait; a topic not yet cached sends the request through
`handle_produce`, which looks it up in ZooKeeper first.
Appends are deferred: the server has the broker write them (`Broker.write_deferred`) before it sends
their answers, so the pipelined requests of one read reach a partition's file with one write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from broker.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from broker.log.config import MAX_LONG
from broker.log.topic_policy import Validated, out_of_window, recompress, window_message
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import RequestHeader
from broker.records.batch import ATTRIBUTES_OFFSET, HEADER, LOG_OVERHEAD, TRANSACTIONAL_BIT, BatchHeader, crc_ok
from broker.security.acl import Operation, ResourceType
from broker.security.acl_authorizer import allowed, cluster_allowed
from broker.server.handlers.transactions import init_transactional_producer
from broker.server.network import BadRequest
from broker.zk import registry

if TYPE_CHECKING:
    from broker.log.log import PartitionLog
    from broker.server.services import Services

log = logging.getLogger(__name__)

_NO_PRODUCER = -1
_ACKS = (0, 1, -1)


def _is_transactional(records: memoryview | None) -> bool:
    """Whether a record set's first batch carries the transactional bit (a set holds one batch: Produce refuses
    more, as Kafka's)."""
    if records is None or len(records) < HEADER.size:
        return False
    return bool(records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_BIT)


def _intact(records: memoryview) -> bool:
    """Whether a record set's first batch is whole and carries its CRC."""
    h = BatchHeader(*HEADER.unpack_from(records, 0))
    return LOG_OVERHEAD + h.length <= len(records) and h.length >= HEADER.size - LOG_OVERHEAD and crc_ok(records, 0, h)


class _Span(NamedTuple):
    """The producer sequences a record set carries (the arguments of `ProducerStates.check` and `record`)."""

    producer_id: int
    epoch: int
    first_seq: int
    last_seq: int


def _producer_span(records: memoryview, validated: Validated) -> _Span | None:
    """The producer sequences of an idempotent record set whose batches `validated` lists (`PartitionLog.validate`
    walked and checked them: every one is whole), else None."""
    h = BatchHeader._make(HEADER.unpack_from(records, 0))
    if h.producer_id < 0 or h.base_sequence < 0:
        return None
    total = 0
    for _pos, _size, _count, last_offset_delta, _max_ts in validated:  # (Produce allows one batch a set)
        total += last_offset_delta + 1
    return _Span(h.producer_id, h.producer_epoch, h.base_sequence, (h.base_sequence + total - 1) % (2**31))


#: `produce_now`'s answer when a topic must first be looked up in ZooKeeper (nothing was appended)
LATER: Final = object()


def produce_now(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any] | None | Coroutine | object:
    """Produce without waiting, the hot path: every topic is in the metadata cache (else LATER); a coroutine
    of the answer when acks=all must wait for the followers."""
    if header.api_version >= 3 and req["acks"] in _ACKS:
        topics = b.cache.topics
        for t in req["topics"]:
            if t["name"] not in topics:
                return LATER
    return _produce(b, header.api_version, req)


async def handle_produce(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any] | None:
    """Produce after looking up in ZooKeeper the topics the metadata cache does not know yet."""
    if header.api_version >= 3 and req["acks"] in _ACKS:
        for t in req["topics"]:
            if t["name"] not in b.cache.topics and _may_write(b, t["name"], log_denial=False):
                await b.refresh_topic(t["name"])
    answer = _produce(b, header.api_version, req)
    return await answer if asyncio.iscoroutine(answer) else answer


def _produce(b: Services, version: int, req: dict[str, Any]) -> dict[str, Any] | None | Coroutine:
    acks = req["acks"]
    failed: list[str] = []
    waits: list[tuple[dict[str, Any], str, int]] = []
    topics_out = []
    txn_denied = _transactional_denied(b, req)
    for t in req["topics"]:
        name = t["name"]
        parts_out = []
        denied = b.authorizer is not None and not _may_write(b, name)
        for p in t["partitions"]:
            if txn_denied:
                out = {"index": p["index"], "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
            elif denied:  # (nothing about the topic is told, not even whether it exists)
                out = {"index": p["index"], "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
            else:
                out = _produce_partition(b, name, p["index"], p["records"], acks, version)
            last = out.pop("_last_offset", None)
            if last is not None and b.replicas.needs_wait((name, p["index"]), last):
                waits.append((out, name, last))
            if out["error_code"]:
                failed.append(f"{name}-{p['index']}: {ErrorCode(out['error_code']).name}")
            parts_out.append(out)
        topics_out.append({"name": name, "partitions": parts_out})
    if acks == 0:
        if failed:  # no answer can carry the error: close the connection so the client refreshes (as Kafka)
            raise BadRequest(f"acks=0 produce failed ({', '.join(failed[:3])})")
        return None
    answer = {"topics": topics_out}
    if waits:
        return _replicated(b, answer, waits, req["timeout_ms"] / 1000)
    return answer


def _transactional_denied(b: Services, req: dict[str, Any]) -> bool:
    """Whether transactional batches come without a transactional id, or one the principal may not Write (as
    Kafka's KafkaApis: the whole request is then TRANSACTIONAL_ID_AUTHORIZATION_FAILED)."""
    sets = [p["records"] for t in req["topics"] for p in t["partitions"]]
    if not any(_is_transactional(r) and _intact(r) for r in sets):
        return False  # (a corrupted bit is no transactional batch: validation answers CORRUPT_MESSAGE for it)
    txn_id = req.get("transactional_id")
    a = b.authorizer
    return txn_id is None or not allowed(a, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id, "Produce")


def _may_write(b: Services, topic: str, *, log_denial: bool = True) -> bool:
    """Whether the request's principal may write to the topic (Write on it; always, without an authorizer)."""
    a = b.authorizer
    return a is None or a.allows(Operation.WRITE, ResourceType.TOPIC, topic, "Produce", log_denial=log_denial)


async def _replicated(b: Services, answer: dict[str, Any], waits: list[tuple[dict[str, Any], str, int]],
                      timeout_s: float) -> dict[str, Any]:  # fmt: skip
    """The acks=all answer, once the ISR holds every partition's batches (or the wait failed)."""
    codes = await asyncio.gather(*(
        b.replicas.wait_replicated((topic, out["index"]), last, timeout_s, b.min_insync(topic))
        for out, topic, last in waits
    ))  # fmt: skip
    for (out, topic, _), code in zip(waits, codes, strict=True):
        if code:
            out["error_code"] = code
            out["error_message"] = f"{ErrorCode(code).name} waiting for the in-sync replicas of {topic}-{out['index']}"
    return answer


def _produce_partition(b: Services, topic: str, partition: int, records: memoryview | None,
                       acks: int, version: int) -> dict[str, Any]:  # fmt: skip
    out: dict[str, Any] = {"index": partition, "error_code": 0}
    if version < 3:
        out["error_code"] = ErrorCode.UNSUPPORTED_VERSION
        return out
    if acks not in _ACKS:
        out["error_code"] = ErrorCode.INVALID_REQUIRED_ACKS
        return out
    code, plog, info = b.leader_log_now(topic, partition)
    if plog is None or info is None:
        out["error_code"] = code
        return out
    if acks == -1 and len(info.isr) < b.min_insync(topic):
        out["error_code"] = ErrorCode.NOT_ENOUGH_REPLICAS
        out["error_message"] = f"ISR {info.isr} is smaller than min.insync.replicas={b.min_insync(topic)}"
        return out
    if not records:
        out["error_code"] = ErrorCode.CORRUPT_MESSAGE
        out["error_message"] = "empty record set"
        return out
    tp = (topic, partition)
    offline = b.logs.why_offline(tp)
    if offline is not None:
        out["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
        out["error_message"] = offline
        return out
    end_before = plog.log_end_offset
    try:  # validate before the sequence check: a corrupted retry of a stored batch is no duplicate
        validated = plog.validate(records)
        if len(validated) > 1:  # (Kafka's ProduceRequest.validateRecords: a producer's fields, its transaction and
            # its TransactionalId ACL are those of the one batch; kafkactl's producers send one too)
            raise InvalidRecordError(f"Produce requests with version {version} are only allowed to contain "
                                     "exactly one record batch")  # fmt: skip
        config = plog.config
        if config.checks_batches and _refused_timestamps(plog, records, validated, version, out):
            return out
        span = _producer_span(records, validated)
        transactional = _is_transactional(records)
        if span is not None and _answered_by_sequence(plog, span, out, transactional):
            if acks == -1 and not out["error_code"]:  # a duplicate: answered once the ISR holds the original
                out["_last_offset"] = out["base_offset"] + (span.last_seq - span.first_seq) % 2**31
            return out
        if config.checks_batches and config.target_codec >= 0:  # compression.type: store the topic's codec
            records, validated = recompress(records, validated, config.target_codec, config.max_message_bytes)
        result = plog.append(records, leader_epoch=info.leader_epoch, validated=validated, defer=True)
        b.deferred_logs.add(plog)  # written before this answer leaves (see `Broker.write_deferred`)
    except CorruptRecordError as exc:
        log.info("rejected a produce to %s-%d: %s", topic, partition, exc)
        # INVALID_RECORD came with Produce v8 (KIP-467); older clients know only CORRUPT_MESSAGE
        invalid = isinstance(exc, InvalidRecordError) and version >= 8
        out["error_code"] = ErrorCode.INVALID_RECORD if invalid else ErrorCode.CORRUPT_MESSAGE
        out["error_message"] = str(exc)
        if invalid:
            named = exc.record_errors if isinstance(exc, InvalidRecordError) else []
            out["record_errors"] = [{"batch_index": i, "message": m} for i, m in named or [(0, str(exc))]]
        return out
    except RecordTooLargeError as exc:
        out["error_code"] = ErrorCode.MESSAGE_TOO_LARGE
        out["error_message"] = str(exc)
        return out
    except OSError as exc:  # a write or fsync failed: sequences as the file holds them, the dir offline
        b.reload_producer_states(plog, end_before)
        b.logs.mark_offline(tp, exc)
        raise  # the connection closes: answers held for it may name offsets the failed write lost
    if span is not None:
        plog.producer_states.record(*span, result.first_offset, transactional=transactional)
    b.purgatory.notify(tp)
    if acks == -1:
        out["_last_offset"] = result.last_offset
    out["base_offset"] = result.first_offset
    out["log_append_time_ms"] = result.log_append_time
    out["log_start_offset"] = plog.log_start_offset
    return out


def _refused_timestamps(plog: PartitionLog, records: memoryview, validated: list[tuple[int, int, int, int, int]],
                        version: int, out: dict[str, Any]) -> bool:  # fmt: skip
    """Fill `out` with INVALID_TIMESTAMP when a record of a CreateTime topic is further from the broker's clock
    than message.timestamp.difference.max.ms (each such record named from Produce v8 on, as Kafka)."""
    config = plog.config
    max_diff = config.message_timestamp_difference_max_ms
    if max_diff == MAX_LONG or config.message_timestamp_type != "CreateTime":
        return False
    now = int(plog.clock() * 1000)
    bad = out_of_window(records, validated, now, max_diff)
    if not bad:
        return False
    out["error_code"] = ErrorCode.INVALID_TIMESTAMP
    out["error_message"] = window_message(bad[0], now, max_diff)
    if version >= 8:
        out["record_errors"] = [{"batch_index": r.index, "message": window_message(r, now, max_diff)} for r in bad]
    log.info("rejected a produce to %s: %s", plog.dir.name, out["error_message"])
    return True


def _answered_by_sequence(plog: PartitionLog, span: _Span, out: dict[str, Any], transactional: bool = False) -> bool:
    """Fill `out` for a sequence error or a duplicate (answered with its first offset, not appended)."""
    err, dup_offset = plog.producer_states.check(*span, transactional)
    if err:
        out["error_code"] = err
        out["error_message"] = f"producer {span.producer_id} epoch {span.epoch} sequence {span.first_seq}: {err.name}"
        entry = plog.producer_states.entries.get(span.producer_id)
        log.warning("%s-%d: %s; its last batches here (first seq, last seq, offset): %s", plog.topic, plog.partition,
                    out["error_message"], list(entry.batches) if entry else None)  # fmt: skip
        return True
    if dup_offset >= 0:
        out["base_offset"] = dup_offset
        out["log_start_offset"] = plog.log_start_offset
        return True
    return False


async def handle_init_producer_id(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    if req["transactional_id"] is not None:  # a transactional producer: the transaction coordinator's
        return await init_transactional_producer(b, header.api_version, req)
    a = b.authorizer  # an idempotent producer: IdempotentWrite on the cluster, or Write on some topic (as 2.8)
    if a is not None and not (cluster_allowed(a, Operation.IDEMPOTENT_WRITE, log_denial=False)
                              or a.allows_any(Operation.WRITE, ResourceType.TOPIC, "InitProducerId")):  # fmt: skip
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "producer_id": -1, "producer_epoch": -1}
    pid = b.pid_pool.take()
    if pid is None:
        if b.zookeeper_problem():  # a new block of ids comes from ZooKeeper: retriable, not a 30 s wait
            return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "producer_id": -1, "producer_epoch": -1}
        assert b.zk is not None
        first, last = await b.blocking(registry.allocate_producer_ids, b.zk, b.id)
        b.pid_pool.add_block(first, last)
        pid = b.pid_pool.take()
    return {"error_code": 0, "producer_id": pid, "producer_epoch": 0}


async def handle_describe_producers(b: Services, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    """The idempotent and transactional producers each partition led here knows (KIP-664), as Kafka 2.8's
    leader answers: Read on the topic needed, NOT_LEADER_OR_FOLLOWER from another broker; each with the
    coordinator epoch of its last marker here and the first offset of its open transaction (-1: none)."""
    topics = []
    for t in req["topics"]:
        name, parts = t["name"], []
        topics.append({"name": name, "partitions": parts})
        readable = allowed(b.authorizer, Operation.READ, ResourceType.TOPIC, name, "DescribeProducers")
        for index in t["partition_indexes"]:
            out: dict[str, Any] = {"partition_index": index, "error_code": 0, "active_producers": []}
            parts.append(out)
            if not readable:
                out["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            code, plog, _ = await b.leader_log(name, index)
            if plog is None:
                out["error_code"] = code
                continue
            states = plog.producer_states
            out["active_producers"] = [
                {"producer_id": pid, "producer_epoch": epoch, "last_sequence": seq, "last_timestamp": ms,
                 "coordinator_epoch": coordinator_epoch, "current_txn_start_offset": txn_first}
                for pid, epoch, seq, ms, coordinator_epoch, txn_first in states.active()
            ]  # fmt: skip
    return {"topics": topics}
