"""Produce and Fetch of a client with a byte-rate quota: counted, answered with `throttle_time_ms`, then muted.

The dispatcher sends a request here only while some quota is configured (`QuotaManager.active`) and one
applies to the request's user and client id; every other request takes its usual path, at no cost.
As Kafka 2.8's KafkaApis:

- Produce: the request's size counts against `producer_byte_rate` once it is handled; the answer carries
  the throttle time (acks=0 has no answer: the connection is muted all the same).
- Fetch (a consumer's; followers are not client-quota'd): `max_bytes` is capped at what the quota lets
  through in (samples - 1) windows; the answer's size counts against `consumer_byte_rate`; a fetch over
  the quota is answered with no partitions and the throttle time, and its bytes are taken back (the client
  fetches them again after the throttle).

Throttled, the connection reads nothing more for the throttle time after its answer has gone out
(KIP-219: the socket server honours `Session.mute_until`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from broker.protocol.api import ApiKey
from broker.protocol.framing import RequestHeader
from broker.protocol.primitives import part_length
from broker.security.session import Session, current
from broker.server.network import FileRegion
from broker.server.quotas import FETCH_KEY, PRODUCE_KEY, user_of

if TYPE_CHECKING:
    from broker.server.services import Services

#: the APIs byte-rate quotas count, and the quota key of each
APIS = {ApiKey.PRODUCE: PRODUCE_KEY, ApiKey.FETCH: FETCH_KEY}

Encode = Callable[[RequestHeader, dict[str, Any]], list[Any]]
Handler = Callable[["Services", RequestHeader, dict[str, Any]], Awaitable[dict[str, Any] | None]]


def hook(b: Services, handlers: dict[int, Handler], encode: Encode) -> Callable[..., Any]:
    """`throttled(header, body, request_size)`: a coroutine answering the request under its quota, or None
    when no quota applies to it (the dispatcher then goes its usual way)."""
    quotas = b.quotas

    def throttled(header: RequestHeader, body: dict[str, Any], size: int) -> Awaitable[list[Any] | None] | None:
        key = APIS[header.api_key]
        if header.api_key == ApiKey.FETCH and body.get("replica_id", -1) >= 0:
            return None  # a follower: replication quotas are another matter
        session = current()
        user, client = user_of(session.principal), header.client_id or ""
        if not quotas.limited(key, user, client):
            return None
        if header.api_key == ApiKey.PRODUCE:
            return _produce(header, body, size, session, user, client)
        return _fetch(header, body, session, user, client)

    async def _produce(header: RequestHeader, body: dict[str, Any], size: int, session: Session, user: str,
                       client: str) -> list[Any] | None:  # fmt: skip
        answer = await handlers[header.api_key](b, header, body)
        throttle = quotas.record(PRODUCE_KEY, user, client, size)
        _mute(session, throttle)
        if answer is None:
            return None
        answer["throttle_time_ms"] = throttle
        return encode(header, answer)

    async def _fetch(header: RequestHeader, body: dict[str, Any], session: Session, user: str,
                     client: str) -> list[Any] | None:  # fmt: skip
        # as Kafka: a fetch is capped at what the quota lets through in one window, else a big answer would be
        # throttled (and answered empty) every time and the consumer never get anything
        cap = quotas.max_in_window(FETCH_KEY, user, client)
        if cap is not None:
            body["max_bytes"] = max(1, min(body.get("max_bytes", cap), cap))
            body["min_bytes"] = min(body.get("min_bytes", 1), body["max_bytes"])
        answer = await handlers[header.api_key](b, header, body)
        if answer is None:
            return None
        parts = encode(header, answer)
        size = sum(part_length(p) for p in parts)
        throttle = quotas.record(FETCH_KEY, user, client, size)
        if throttle <= 0:
            return parts
        quotas.unrecord(FETCH_KEY, user, client, size)
        for part in parts:  # the records are not sent: their file regions close
            if isinstance(part, FileRegion):
                os.close(part.fd)
        _mute(session, throttle)
        empty = {"throttle_time_ms": throttle, "error_code": 0, "session_id": answer.get("session_id", 0),
                 "topics": []}  # fmt: skip
        return encode(header, empty)

    return throttled


def _mute(session: Session, throttle_ms: int) -> None:
    if throttle_ms > 0:
        session.mute_until = max(session.mute_until, asyncio.get_running_loop().time() + throttle_ms / 1000)
