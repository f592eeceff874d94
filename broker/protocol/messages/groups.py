"""FindCoordinator (10); the other group APIs join it with the group coordinator."""

from broker.protocol.schema import INT8, INT16, INT32, NULLABLE_STRING, STRING, F, Struct

FIND_COORDINATOR_REQUEST = Struct(
    F("key", STRING),
    F("key_type", INT8, "1+"),
)

FIND_COORDINATOR_RESPONSE = Struct(
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("error_message", NULLABLE_STRING, "1+"),
    F("node_id", INT32, default=-1),
    F("host", STRING),
    F("port", INT32, default=-1),
)
