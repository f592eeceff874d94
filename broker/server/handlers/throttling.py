"""Requests of a client with a quota: counted, answered with `throttle_time_ms`, then the connection muted.

The dispatcher sends a request here only while some quota is configured (`QuotaManager.active`); this
answers None (the request then takes its usual path, at no further cost) unless a quota applies to the
request's user and client id. As Kafka 2.8's KafkaApis:

- Produce: the request's size counts against `producer_byte_rate` once it is handled; the answer carries
  the throttle time (acks=0 has no answer: the connection is muted all the same).
- Fetch (a consumer's; followers are not client-quota'd): `max_bytes` is capped at what the quota lets
  through in (samples - 1) windows; the answer's size counts against `consumer_byte_rate`; a fetch over
  the quota is answered with no partitions and the throttle time, and its bytes are taken back (the client
  fetches them again after the throttle).
- `request_percentage`: the time the broker spends handling the client's requests, as a percentage of one
  thread (Kafka's request handler thread time: here the handler's own steps, timed as it runs, not its
  waits), counted for every API but SaslHandshake, SaslAuthenticate and ApiVersions, and requests of
  followers (replica_id ≥ 0); acks=0 produce is exempt, as in Kafka. Throttled, a fetch is answered empty
  too; the larger of the byte-rate and request throttles is the one answered and waited.

Throttled, the connection reads nothing more for the throttle time after its answer has gone out
(KIP-219: the socket server honours `Session.mute_until`).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any

from broker.protocol.api import ApiKey
from broker.protocol.framing import RequestHeader
from broker.protocol.primitives import part_length
from broker.quota.manager import FETCH_KEY, PRODUCE_KEY, user_of
from broker.quota.store import REQUEST_PERCENTAGE
from broker.security.session import Session, current
from broker.server.network import FileRegion

if TYPE_CHECKING:
    from broker.server.services import Services

#: the APIs byte-rate quotas count, and the quota key of each
APIS = {ApiKey.PRODUCE: PRODUCE_KEY, ApiKey.FETCH: FETCH_KEY}
#: APIs request quotas never count (authentication, and the version handshake every client starts with)
EXEMPT = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.API_VERSIONS})

Encode = Callable[[RequestHeader, dict[str, Any]], list[Any]]
Handler = Callable[["Services", RequestHeader, dict[str, Any]], Awaitable[dict[str, Any] | None]]


class _Timed:
    """Await a coroutine, adding up the time its own steps take (its waits between them are not counted)."""

    __slots__ = ("coro", "spent")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.coro = coro
        self.spent = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        it = self.coro.__await__()
        value: Any = None
        exc: BaseException | None = None
        clock = time.perf_counter
        while True:
            start = clock()
            try:
                step = it.throw(exc) if exc is not None else it.send(value)
            except StopIteration as stop:
                self.spent += clock() - start
                return stop.value
            except BaseException:
                self.spent += clock() - start
                raise
            self.spent += clock() - start
            value, exc = None, None
            try:
                value = yield step
            except BaseException as e:  # (a cancellation: handed to the coroutine)
                exc = e


def hook(b: Services, handlers: dict[int, Handler], encode: Encode) -> Callable[..., Any]:
    """`throttled(header, body, request_size)`: a coroutine answering the request under its quotas, or None
    when none applies to it (the dispatcher then goes its usual way)."""
    quotas = b.quotas

    def throttled(header: RequestHeader, body: dict[str, Any], size: int) -> Awaitable[list[Any] | None] | None:
        if body.get("replica_id", -1) >= 0:
            return None  # a follower: replication quotas are another matter
        session = current()
        user, client = user_of(session.principal), header.client_id or ""
        byte_key = APIS.get(header.api_key)
        if byte_key is not None and not quotas.limited(byte_key, user, client):
            byte_key = None
        timed = header.api_key not in EXEMPT and quotas.limited(REQUEST_PERCENTAGE, user, client)
        if header.api_key == ApiKey.PRODUCE and body.get("acks") == 0:
            timed = False
        if byte_key is None and not timed:
            return None
        return _answer(header, body, size, session, user, client, byte_key, timed)

    async def _answer(header: RequestHeader, body: dict[str, Any], size: int, session: Session, user: str,
                      client: str, byte_key: str | None, timed: bool) -> list[Any] | None:  # fmt: skip
        if byte_key == FETCH_KEY:
            # as Kafka: a fetch is capped at what the quota lets through in one window, else a big answer would
            # be throttled (and answered empty) every time and the consumer never get anything
            cap = quotas.max_in_window(FETCH_KEY, user, client)
            if cap is not None:
                body["max_bytes"] = max(1, min(body.get("max_bytes", cap), cap))
                body["min_bytes"] = min(body.get("min_bytes", 1), body["max_bytes"])
        work = handlers[header.api_key](b, header, body)
        if timed:
            timer = _Timed(work)  # type: ignore[arg-type]
            answer = await timer
            request_throttle = quotas.record(REQUEST_PERCENTAGE, user, client, timer.spent * 100.0)
        else:
            answer = await work
            request_throttle = 0
        if header.api_key == ApiKey.FETCH:
            return _fetched(header, body, answer, session, user, client, byte_key, request_throttle)
        throttle = request_throttle
        if byte_key == PRODUCE_KEY:
            throttle = max(throttle, quotas.record(PRODUCE_KEY, user, client, size))
        _mute(session, throttle)
        if answer is None:
            return None
        answer["throttle_time_ms"] = throttle  # (a version without the field does not write it)
        return encode(header, answer)

    def _fetched(header: RequestHeader, req: dict[str, Any], answer: dict[str, Any] | None, session: Session,
                 user: str, client: str, byte_key: str | None, request_throttle: int) -> list[Any] | None:  # fmt: skip
        if answer is None:
            return None
        answer["throttle_time_ms"] = request_throttle
        parts = encode(header, answer)
        size = sum(part_length(p) for p in parts)
        byte_throttle = quotas.record(FETCH_KEY, user, client, size) if byte_key is not None else 0
        throttle = max(byte_throttle, request_throttle)
        if throttle <= 0:
            return parts
        if byte_key is not None:
            quotas.unrecord(FETCH_KEY, user, client, size)
        for part in parts:  # the records are not sent: their file regions close
            if isinstance(part, FileRegion):
                os.close(part.fd)
        # as Kafka: a full fetch creates no session then; an incremental one's news are sent next time
        sid = b.fetch_sessions.unsent(answer.get("session_id", 0), full=req.get("session_epoch", -1) <= 0)
        _mute(session, throttle)
        empty = {"throttle_time_ms": throttle, "error_code": 0, "session_id": sid, "topics": []}
        return encode(header, empty)

    return throttled


def _mute(session: Session, throttle_ms: int) -> None:
    if throttle_ms > 0:
        session.mute_until = max(session.mute_until, asyncio.get_running_loop().time() + throttle_ms / 1000)
