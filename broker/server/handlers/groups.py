"""FindCoordinator, answered COORDINATOR_NOT_AVAILABLE until the group coordinator exists.

It is served (and advertised) already because librdkafka enables LZ4 only for brokers that list
FindCoordinator in ApiVersions; without it kcat and confluent-kafka silently send lz4 uncompressed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.protocol.errors import ErrorCode
from broker.protocol.framing import RequestHeader

if TYPE_CHECKING:
    from broker.server.broker import Broker


async def handle_find_coordinator(b: Broker, header: RequestHeader, req: dict[str, Any]) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
        "error_message": "this broker has no group coordinator yet",
    }
