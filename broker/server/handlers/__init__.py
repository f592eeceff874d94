"""Request dispatch: parse the header, check the API and version, decode the body, run its handler.

A frame whose header or body does not parse, an unknown API key or a version outside the advertised
range ends the connection (`BadRequest`, one log line), as do bytes after a non-flexible body. After a
flexible body they are ignored, as Kafka ignores them: librdkafka's all-topics Metadata v9+ leaves
three bytes of its reserved array count behind its body. ApiVersions above v3 gets the v0-format
answer with UNSUPPORTED_VERSION and the list, so the client can retry at a version we speak.

Produce has a synchronous handler too: when it can answer without waiting (its partitions are in
the metadata cache) the dispatcher returns the answer frame itself, with no coroutine on the way;
otherwise, and for every other API, it returns a coroutine the server awaits.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from broker.protocol.api import APIS, ApiKey, api_versions_table
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import RequestHeader, encode_response, read_header_tags, read_request_header
from broker.protocol.messages.metadata import API_VERSIONS_RESPONSE
from broker.protocol.messages.produce import encode_produce_response, read_produce_request
from broker.protocol.primitives import DecodeError, Reader
from broker.security.session import current
from broker.server.handlers import (
    acls,
    admin,
    elections,
    fetch,
    groups,
    metadata,
    produce,
    sasl,
    scram_credentials,
    throttling,
)
from broker.server.handlers import configs as configs_handlers
from broker.server.handlers import quotas as quotas_handlers
from broker.server.handlers import records as records_handlers
from broker.server.handlers import transactions as txn_handlers
from broker.server.handlers import txn_markers as txn_markers_handlers
from broker.server.network import BadRequest, Later

if TYPE_CHECKING:
    from broker.server.services import Services

log = logging.getLogger(__name__)

#: api key → handler(broker, header, body) → answer body (or None: no answer)
Handler = Callable[["Services", RequestHeader, dict[str, Any]], Awaitable[dict[str, Any] | None]]

HANDLERS: dict[int, Handler] = {
    ApiKey.PRODUCE: produce.handle_produce,
    ApiKey.INIT_PRODUCER_ID: produce.handle_init_producer_id,
    ApiKey.DESCRIBE_PRODUCERS: produce.handle_describe_producers,
    ApiKey.WRITE_TXN_MARKERS: txn_markers_handlers.handle_write_txn_markers,
    ApiKey.FETCH: fetch.handle_fetch,
    ApiKey.LIST_OFFSETS: fetch.handle_list_offsets,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: fetch.handle_offset_for_leader_epoch,
    ApiKey.METADATA: metadata.handle_metadata,
    ApiKey.API_VERSIONS: metadata.handle_api_versions,
    ApiKey.DESCRIBE_CLUSTER: metadata.handle_describe_cluster,
    ApiKey.FIND_COORDINATOR: groups.handle_find_coordinator,
    ApiKey.JOIN_GROUP: groups.handle_join_group,
    ApiKey.SYNC_GROUP: groups.handle_sync_group,
    ApiKey.HEARTBEAT: groups.handle_heartbeat,
    ApiKey.LEAVE_GROUP: groups.handle_leave_group,
    ApiKey.OFFSET_COMMIT: groups.handle_offset_commit,
    ApiKey.OFFSET_FETCH: groups.handle_offset_fetch,
    ApiKey.DESCRIBE_GROUPS: groups.handle_describe_groups,
    ApiKey.LIST_GROUPS: groups.handle_list_groups,
    ApiKey.DELETE_GROUPS: groups.handle_delete_groups,
    ApiKey.OFFSET_DELETE: groups.handle_offset_delete,
    ApiKey.CREATE_TOPICS: admin.handle_create_topics,
    ApiKey.DELETE_TOPICS: admin.handle_delete_topics,
    ApiKey.DELETE_RECORDS: records_handlers.handle_delete_records,
    ApiKey.DESCRIBE_CONFIGS: admin.handle_describe_configs,
    ApiKey.ALTER_CONFIGS: admin.handle_alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: configs_handlers.handle_incremental_alter_configs,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: quotas_handlers.handle_describe_client_quotas,
    ApiKey.ALTER_CLIENT_QUOTAS: quotas_handlers.handle_alter_client_quotas,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: scram_credentials.handle_describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: scram_credentials.handle_alter_user_scram_credentials,
    ApiKey.DESCRIBE_LOG_DIRS: admin.handle_describe_log_dirs,
    ApiKey.CREATE_PARTITIONS: admin.handle_create_partitions,
    ApiKey.ELECT_LEADERS: elections.handle_elect_leaders,
    ApiKey.SASL_HANDSHAKE: sasl.handle_sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: sasl.handle_sasl_authenticate,
    ApiKey.DESCRIBE_ACLS: acls.handle_describe_acls,
    ApiKey.ADD_PARTITIONS_TO_TXN: txn_handlers.handle_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: txn_handlers.handle_add_offsets_to_txn,
    ApiKey.END_TXN: txn_handlers.handle_end_txn,
    ApiKey.TXN_OFFSET_COMMIT: txn_handlers.handle_txn_offset_commit,
    ApiKey.DESCRIBE_TRANSACTIONS: txn_handlers.handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: txn_handlers.handle_list_transactions,
    ApiKey.CREATE_ACLS: acls.handle_create_acls,
    ApiKey.DELETE_ACLS: acls.handle_delete_acls,
}

#: api key → (read request, encode answer frame): hand-written codecs of the hot APIs, equal to the schemas'
FAST_CODECS = {ApiKey.PRODUCE: (read_produce_request, encode_produce_response)}

#: api key → handler(broker, header, body) → answer body, None (no answer) or `produce.LATER` when it
#: must wait: then the async handler of `HANDLERS` runs instead (nothing was done yet)
SYNC_HANDLERS: dict[int, Callable[[Services, RequestHeader, dict[str, Any]], Any]] = {
    ApiKey.PRODUCE: produce.produce_now,
}

Answer = list[Any] | None


def dispatcher(broker: Services) -> Callable[[memoryview, str], Answer | Awaitable[Answer]]:
    """The server's dispatch function: the answer frame's parts, or a coroutine giving them."""
    quotas = broker.quotas  # client quotas: Produce and Fetch of a quota'd client go through `throttled`
    throttled = throttling.hook(broker, HANDLERS, lambda header, answer: encode(header, answer))

    def dispatch(frame: memoryview, peer: str) -> Answer | Coroutine[Any, Any, Answer]:
        session = current()
        if not session.authenticated and session.raw_tokens:
            return sasl.raw_token(broker, session, frame)
        r = Reader(frame)
        try:
            header = read_request_header(r)
        except DecodeError as exc:
            raise BadRequest(f"unreadable request header: {exc}") from None
        api = APIS.get(header.api_key)
        if api is None:
            raise BadRequest(f"unknown API key {header.api_key}")
        v = header.api_version
        if not session.authenticated:
            sasl.check_unauthenticated(session, header.api_key)
        if header.api_key == ApiKey.API_VERSIONS and v > api.advertised[1]:
            body = {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": api_versions_table()}
            return encode_response(header.correlation_id, API_VERSIONS_RESPONSE, body, 0)
        if not api.advertised[0] <= v <= api.advertised[1]:
            raise BadRequest(
                f"{ApiKey(header.api_key).name} v{v} is not spoken (v{api.advertised[0]}-{api.advertised[1]})"
            )
        fast = FAST_CODECS.get(header.api_key)
        try:
            if api.request.flexible(v):
                read_header_tags(r)
            body = api.request.read(r, v) if fast is None else fast[0](r, v)
        except DecodeError as exc:
            raise BadRequest(f"malformed {ApiKey(header.api_key).name} v{v} request: {exc}") from None
        if r.remaining() and not api.request.flexible(v):
            raise BadRequest(f"{ApiKey(header.api_key).name} v{v} request has {r.remaining()} bytes after its body")
        if quotas.active:  # (False while no client quota is configured)
            session.client_id = header.client_id or ""  # (the produce run path looks its quota up by it)
            waiting = throttled(header, body, len(frame))
            if waiting is not None:
                return waiting
        now = SYNC_HANDLERS.get(header.api_key)
        if now is not None:
            answer = now(broker, header, body)
            if answer.__class__ is dict:
                return encode(header, answer)
            if answer is None:
                return None
            if answer is not produce.LATER:  # a coroutine: acks=all waits for the followers, not the connection
                return Later(encoded(header, answer))
        return handle(header, body)

    def encode(header: RequestHeader, answer: dict[str, Any]) -> list[Any]:
        fast = FAST_CODECS.get(header.api_key)
        if fast is not None:
            return fast[1](header.correlation_id, answer, header.api_version)
        return encode_response(header.correlation_id, APIS[header.api_key].response, answer, header.api_version)

    async def encoded(header: RequestHeader, waiting: Awaitable[dict[str, Any]]) -> Answer:
        return encode(header, await waiting)

    async def handle(header: RequestHeader, body: dict[str, Any]) -> Answer:
        answer = await HANDLERS[header.api_key](broker, header, body)
        return None if answer is None else encode(header, answer)

    return dispatch
