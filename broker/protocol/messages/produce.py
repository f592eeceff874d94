"""Produce (0) and InitProducerId (22)."""

from broker.protocol.schema import (
    INT16,
    INT32,
    INT64,
    NULLABLE_STRING,
    RECORDS,
    STRING,
    Array,
    F,
    Struct,
)  # fmt: skip

PRODUCE_REQUEST = Struct(
    F("transactional_id", NULLABLE_STRING, "3+"),
    F("acks", INT16),
    F("timeout_ms", INT32),
    F("topics", Array(Struct(
        F("name", STRING),
        F("partitions", Array(Struct(F("index", INT32), F("records", RECORDS)))),
    ))),
)  # fmt: skip

PRODUCE_RESPONSE = Struct(
    F("topics", Array(Struct(
        F("name", STRING),
        F("partitions", Array(Struct(
            F("index", INT32),
            F("error_code", INT16),
            F("base_offset", INT64, default=-1),
            F("log_append_time_ms", INT64, "2+", default=-1),
            F("log_start_offset", INT64, "5+", default=-1),
            F("record_errors", Array(Struct(F("batch_index", INT32), F("message", NULLABLE_STRING))), "8+"),
            F("error_message", NULLABLE_STRING, "8+"),
        ))),
    ))),
    F("throttle_time_ms", INT32, "1+"),
)  # fmt: skip

INIT_PRODUCER_ID_REQUEST = Struct(
    F("transactional_id", NULLABLE_STRING),
    F("transaction_timeout_ms", INT32),
)

INIT_PRODUCER_ID_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("producer_id", INT64, default=-1),
    F("producer_epoch", INT16, default=-1),
)
