"""Fetch (1), ListOffsets (2) and OffsetsForLeaderEpoch (23)."""

from broker.protocol.schema import (
    INT8,
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

FETCH_REQUEST = Struct(
    F("cluster_id", NULLABLE_STRING, "12+", tag=0),
    F("replica_id", INT32, default=-1),
    F("max_wait_ms", INT32),
    F("min_bytes", INT32),
    F("max_bytes", INT32, "3+", default=0x7FFFFFFF),
    F("isolation_level", INT8, "4+"),
    F("session_id", INT32, "7+"),
    F("session_epoch", INT32, "7+", default=-1),
    F("topics", Array(Struct(
        F("topic", STRING),
        F("partitions", Array(Struct(
            F("partition", INT32),
            F("current_leader_epoch", INT32, "9+", default=-1),
            F("fetch_offset", INT64),
            F("last_fetched_epoch", INT32, "12+", default=-1),  # set: answer a diverging epoch (KIP-595)
            F("log_start_offset", INT64, "5+", default=-1),
            F("partition_max_bytes", INT32),
        ))),
    ))),
    F("forgotten_topics_data", Array(Struct(F("topic", STRING), F("partitions", Array(INT32)))), "7+"),
    F("rack_id", STRING, "11+"),
    flexible_from=12,
)  # fmt: skip

_EPOCH_END = Struct(F("epoch", INT32, default=-1), F("end_offset", INT64, default=-1))
_LEADER = Struct(F("leader_id", INT32, default=-1), F("leader_epoch", INT32, default=-1))
_SNAPSHOT_ID = Struct(F("end_offset", INT64, default=-1), F("epoch", INT32, default=-1))

FETCH_RESPONSE = Struct(
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16, "7+"),
    F("session_id", INT32, "7+"),
    F("topics", Array(Struct(
        F("topic", STRING),
        F("partitions", Array(Struct(
            F("partition_index", INT32),
            F("error_code", INT16),
            F("high_watermark", INT64, default=-1),
            F("last_stable_offset", INT64, "4+", default=-1),
            F("log_start_offset", INT64, "5+", default=-1),
            F("diverging_epoch", _EPOCH_END, "12+", tag=0),
            F("current_leader", _LEADER, "12+", tag=1),
            F("snapshot_id", _SNAPSHOT_ID, "12+", tag=2),
            F("aborted_transactions", Array(Struct(F("producer_id", INT64), F("first_offset", INT64)),
                                            nullable_from=4), "4+"),
            F("preferred_read_replica", INT32, "11+", default=-1),
            F("records", RECORDS),
        ))),
    ))),
    flexible_from=12,
)  # fmt: skip

LIST_OFFSETS_REQUEST = Struct(
    F("replica_id", INT32, default=-1),
    F("isolation_level", INT8, "2+"),
    F("topics", Array(Struct(
        F("name", STRING),
        F("partitions", Array(Struct(
            F("partition_index", INT32),
            F("current_leader_epoch", INT32, "4+", default=-1),
            F("timestamp", INT64),
            F("max_num_offsets", INT32, "0", default=1),
        ))),
    ))),
    flexible_from=6,
)  # fmt: skip

LIST_OFFSETS_RESPONSE = Struct(
    F("throttle_time_ms", INT32, "2+"),
    F("topics", Array(Struct(
        F("name", STRING),
        F("partitions", Array(Struct(
            F("partition_index", INT32),
            F("error_code", INT16),
            F("old_style_offsets", Array(INT64), "0"),
            F("timestamp", INT64, "1+", default=-1),
            F("offset", INT64, "1+", default=-1),
            F("leader_epoch", INT32, "4+", default=-1),
        ))),
    ))),
    flexible_from=6,
)  # fmt: skip

OFFSET_FOR_LEADER_EPOCH_REQUEST = Struct(
    F("replica_id", INT32, "3+", default=-2),
    F("topics", Array(Struct(
        F("topic", STRING),
        F("partitions", Array(Struct(
            F("partition", INT32),
            F("current_leader_epoch", INT32, "2+", default=-1),
            F("leader_epoch", INT32),
        ))),
    ))),
    flexible_from=4,
)  # fmt: skip

OFFSET_FOR_LEADER_EPOCH_RESPONSE = Struct(
    F("throttle_time_ms", INT32, "2+"),
    F("topics", Array(Struct(
        F("topic", STRING),
        F("partitions", Array(Struct(
            F("error_code", INT16),
            F("partition", INT32),
            F("leader_epoch", INT32, "1+", default=-1),
            F("end_offset", INT64),
        ))),
    ))),
    flexible_from=4,
)  # fmt: skip

EARLIEST = -2
LATEST = -1

#: Fetch v7+ session epochs (KIP-227): 0 creates a session, -1 is sessionless (or closes the session named)
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 0x7FFFFFFF


def next_epoch(epoch: int) -> int:
    """The session epoch after `epoch` (as Kafka's FetchMetadata.nextEpoch: after the last comes 1, never 0)."""
    if epoch < 0:
        return INITIAL_EPOCH
    return 1 if epoch == _MAX_EPOCH else epoch + 1
