"""IncrementalAlterConfigs (44): change single keys of a topic's or broker's config (KIP-339).

Each key comes with an operation: SET a value, DELETE the override (back to the default), APPEND items
to or SUBTRACT items from a list-typed key (`cleanup.policy`, the `*.replication.throttled.replicas`).
Kafka's IncrementalAlterConfigsRequest.json / Response.json; v1 is the flexible form of v0.
"""

from broker.protocol.schema import BOOLEAN, INT8, INT16, INT32, NULLABLE_STRING, STRING, Array, F, Struct

#: `config_operation` values (Kafka's AlterConfigOp.OpType ids)
OP_SET = 0
OP_DELETE = 1
OP_APPEND = 2
OP_SUBTRACT = 3
OPERATIONS = {OP_SET: "SET", OP_DELETE: "DELETE", OP_APPEND: "APPEND", OP_SUBTRACT: "SUBTRACT"}

INCREMENTAL_ALTER_CONFIGS_REQUEST = Struct(
    F("resources", Array(Struct(
        F("resource_type", INT8),
        F("resource_name", STRING),
        F("configs", Array(Struct(
            F("name", STRING),
            F("config_operation", INT8),
            F("value", NULLABLE_STRING),
        ))),
    ))),
    F("validate_only", BOOLEAN),
    flexible_from=1,
)  # fmt: skip

INCREMENTAL_ALTER_CONFIGS_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("responses", Array(Struct(
        F("error_code", INT16),
        F("error_message", NULLABLE_STRING),
        F("resource_type", INT8),
        F("resource_name", STRING),
    ))),
    flexible_from=1,
)  # fmt: skip
