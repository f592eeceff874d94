"""Runs of pipelined one-partition Produce requests, appended and answered per run.

A producer sending one small batch per request pipelines many requests alike but for their
correlation id and batch. The server offers each connection's received bytes here first: the C scanner
(`broker/protocol/_produce_run.c`, which documents what a request of a run is) cuts the run, and the
run is appended with one deferred write and answered with one buffer, with no per-request Python.
Whatever the run cannot answer with "no error" at once (a topic not in the metadata cache or that the
authorizer does not let the connection's principal write, not the leader, too small an ISR for acks=all,
an offline log dir, LogAppendTime, a topic's compression.type or timestamp window
(`LogConfig.checks_batches`), a batch over max.message.bytes, an idempotent first batch that is a
duplicate or out of sequence, a segment roll due) goes the general way, request by request, so the
errors and every other case have one implementation (`produce.py`).
Without the C codec there are no runs: every request goes the general way.

An acks=all run with followers to wait for is appended the same way and answered once the ISR holds
its last record (`network.Later`: the connection's next requests are handled meanwhile); if that wait
fails, every request of the run gets the error.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from broker.log.producer_state import KEEP, ProducerStates
from broker.protocol.api import APIS, ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.produce import FAST_MAX_VERSION, RUN_CODEC, encode_produce_response
from broker.quota.manager import PRODUCE_KEY, user_of
from broker.records.crc import crc32c
from broker.security.acl import Operation, ResourceType
from broker.security.session import current
from broker.server.network import Later

if TYPE_CHECKING:
    from broker.server.services import Services

_ITEM = struct.Struct("=qqiiii")  # one request of a run in `info` (the C codec's Item): its fields are `_Item`'s


class _Item(NamedTuple):
    """One request of a run, as the C scanner lists it in `info`."""

    position: int
    max_timestamp: int
    correlation_id: int
    batch_size: int
    last_offset_delta: int
    record_count: int


_SEQ = 2**31  # sequence numbers wrap here

#: requests of one run at most: the answers of a run leave together, so the client hears back steadily
MAX_RUN = 64

#: how long an acks=all run waits for its followers (the scanner does not read the requests' timeout_ms:
#: Kafka's producer default request.timeout.ms)
_TIMEOUT_S = 30.0

#: a connection's bytes → (position after the run, answers in it, the answer frames or None for acks=0),
#: or the count of the next requests that must go the general way (0: the next one is no run's)
RunDispatch = Callable[[bytearray, int, int], "tuple[int, int, bytes | None] | int"]


class _Run:
    """The scanner's view of a run, stitched when the log appends it (`StitchableRun`)."""

    __slots__ = ("buf", "info", "first_max_timestamp")

    def __init__(self, buf: bytearray, info: bytes) -> None:
        self.buf, self.info = buf, info
        self.first_max_timestamp = _Item._make(_ITEM.unpack_from(info, 0)).max_timestamp

    def stitch(self, first_offset: int, leader_epoch: int, position: int, since_index: int, interval: int,
               max_timestamp: int) -> tuple[bytes, list[tuple[int, int, int]], int, int, int]:  # fmt: skip
        return RUN_CODEC.stitch(self.buf, self.info, first_offset, leader_epoch, position, since_index, interval,
                                   max_timestamp)  # fmt: skip


def _record_last_batches(states: ProducerStates, pid: int, epoch: int, first_seq: int, first_offset: int,
                         info: bytes) -> None:  # fmt: skip
    """Note the run's batches in the producer's state as one by one appends would; only the last
    `KEEP` are kept, so only those are noted."""
    spans = []
    seq, offset = first_seq, first_offset
    for item in map(_Item._make, _ITEM.iter_unpack(info)):
        delta = item.last_offset_delta
        spans.append((seq, (seq + delta) % _SEQ, offset))
        seq, offset = (seq + delta + 1) % _SEQ, offset + delta + 1
    for first, last, at in spans[-KEEP:]:
        states.record(pid, epoch, first, last, at)


async def _replicated(b: Services, tp: tuple[str, int], last: int, frames: bytes, info: bytes,
                      version: int) -> list[bytes]:  # fmt: skip
    """The run's answers once the ISR holds its records; each request answered with the error if that failed."""
    code = await b.replicas.wait_replicated(tp, last, _TIMEOUT_S, b.min_insync(tp[0]))
    if not code:
        return [frames]
    message = f"{ErrorCode(code).name} waiting for the in-sync replicas of {tp[0]}-{tp[1]}"
    part = {"index": tp[1], "error_code": code, "error_message": message}
    answer = {"topics": [{"name": tp[0], "partitions": [part]}]}
    out: list[bytes] = []
    for item in map(_Item._make, _ITEM.iter_unpack(info)):
        out += encode_produce_response(item.correlation_id, answer, version)
    return out


def run_dispatcher(b: Services) -> RunDispatch | None:
    """The server's run dispatch for broker `b`, or None without the C extension."""
    if RUN_CODEC is None:
        return None
    scan, answers = RUN_CODEC.scan, RUN_CODEC.answers
    max_request = b.config.socket_request_max_bytes
    max_version = min(APIS[ApiKey.PRODUCE].advertised[1], FAST_MAX_VERSION)  # (v9 is flexible: not a run's)
    topics = b.cache.topics
    quotas = b.quotas

    def dispatch_run(buf: bytearray, start: int, end: int) -> tuple[int, int, bytes | None] | int:
        got = scan(buf, start, end, MAX_RUN, max_request, max_version, crc32c)
        if got is None:
            return 0
        if quotas.active:  # a client quota'd connection's requests go the general path, where they are counted
            session = current()
            if session.client_id is None or quotas.limited(PRODUCE_KEY, user_of(session.principal), session.client_id):
                return got[0]
        n, pos, version, acks, topic_b, partition, info, total, records, largest, pid, epoch, first_seq = got
        try:
            topic = topic_b.decode()
        except UnicodeDecodeError:
            return n
        if topic not in topics:
            return n
        auth = b.authorizer  # (its decisions are cached until the ACLs change: one dict look-up per run)
        if auth is not None and not auth.allows(Operation.WRITE, ResourceType.TOPIC, topic, log_denial=False):
            return n  # the general path answers TOPIC_AUTHORIZATION_FAILED (and logs it)
        code, plog, part = b.leader_log_now(topic, partition)
        if plog is None or part is None or b.logs.is_offline((topic, partition)):
            return n
        config = plog.config
        if (config.checks_batches or largest > config.max_message_bytes
                or (acks == -1 and len(part.isr) < b.min_insync(topic)) or not plog.takes_run(total, n)):  # fmt: skip
            return n
        tp = (topic, partition)
        if pid >= 0:  # the batches chain on from the first (the scanner saw to it): check only that one
            first_delta = _Item._make(_ITEM.unpack_from(info, 0)).last_offset_delta  # its records: that + 1
            last_seq = (first_seq + first_delta) % _SEQ
            err, duplicate_of = plog.producer_states.check(pid, epoch, first_seq, last_seq)
            if err or duplicate_of >= 0:
                return n
        end_before = plog.log_end_offset
        try:
            first = plog.append_run(_Run(buf, info), total, records, leader_epoch=part.leader_epoch)
        except OSError as exc:  # a write or fsync failed: sequences as the file holds them, the dir offline
            b.reload_producer_states(plog, end_before)
            b.logs.mark_offline((topic, partition), exc)
            raise
        b.deferred_logs.add(plog)  # written before the answers leave (see `Broker.write_deferred`)
        if pid >= 0:
            _record_last_batches(plog.producer_states, pid, epoch, first_seq, first, info)
        b.purgatory.notify(tp)
        if acks == 0:
            return pos, 0, None
        frames = answers(info, version, topic_b, partition, first, plog.log_start_offset)
        if acks == -1 and b.replicas.needs_wait(tp, first + records - 1):
            return pos, n, Later(_replicated(b, tp, first + records - 1, frames, info, version))
        return pos, n, frames

    return dispatch_run
