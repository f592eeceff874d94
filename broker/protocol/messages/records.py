"""DeleteRecords (21), v0-1 (v2 is the first flexible version): move partitions' log start offsets up."""

from broker.protocol.schema import INT16, INT32, INT64, STRING, Array, F, Struct

#: `offset` -1 in a request: delete up to the partition's high watermark
HIGH_WATERMARK = -1

DELETE_RECORDS_REQUEST = Struct(
    F("topics", Array(Struct(
        F("name", STRING),
        F("partitions", Array(Struct(F("partition_index", INT32), F("offset", INT64)))),
    ))),
    F("timeout_ms", INT32, default=30000),
    flexible_from=2,
)  # fmt: skip

DELETE_RECORDS_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("topics", Array(Struct(
        F("name", STRING),
        F("partitions", Array(Struct(
            F("partition_index", INT32), F("low_watermark", INT64), F("error_code", INT16),
        ))),
    ))),
    flexible_from=2,
)  # fmt: skip
