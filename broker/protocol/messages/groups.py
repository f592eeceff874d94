"""The group coordinator's APIs: FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup (13),
SyncGroup (14), OffsetCommit (8), OffsetFetch (9), DescribeGroups (15), ListGroups (16), DeleteGroups (42)
and OffsetDelete (47).

Versions reach Kafka 2.8's: each message is flexible (KIP-482: compact forms, tagged fields) from the
`flexible_from` its Kafka JSON names. Member metadata and assignments are opaque bytes to the broker: the
consumer protocol inside them is the clients' own.
"""

from broker.protocol.schema import (
    BOOLEAN,
    BYTES,
    INT8,
    INT16,
    INT32,
    INT64,
    NULLABLE_BYTES,
    NULLABLE_STRING,
    STRING,
    Array,
    F,
    Struct,
)  # fmt: skip

FIND_COORDINATOR_REQUEST = Struct(
    F("key", STRING),
    F("key_type", INT8, "1+"),
    flexible_from=3,
)

FIND_COORDINATOR_RESPONSE = Struct(
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("error_message", NULLABLE_STRING, "1+"),
    F("node_id", INT32, default=-1),
    F("host", STRING),
    F("port", INT32, default=-1),
    flexible_from=3,
)

JOIN_GROUP_REQUEST = Struct(
    F("group_id", STRING),
    F("session_timeout_ms", INT32),
    F("rebalance_timeout_ms", INT32, "1+", default=-1),
    F("member_id", STRING),
    F("group_instance_id", NULLABLE_STRING, "5+"),
    F("protocol_type", STRING),
    F("protocols", Array(Struct(F("name", STRING), F("metadata", BYTES)))),
    flexible_from=6,
)

JOIN_GROUP_RESPONSE = Struct(
    F("throttle_time_ms", INT32, "2+"),
    F("error_code", INT16),
    F("generation_id", INT32, default=-1),
    F("protocol_type", NULLABLE_STRING, "7+"),  # (null in an error answer, as Kafka's)
    F("protocol_name", STRING, "0-6"),
    F("protocol_name", NULLABLE_STRING, "7+"),  # (null in an error answer)
    F("leader", STRING),
    F("member_id", STRING),
    F("members", Array(Struct(
        F("member_id", STRING),
        F("group_instance_id", NULLABLE_STRING, "5+"),
        F("metadata", BYTES),
    ))),
    flexible_from=6,
)  # fmt: skip

HEARTBEAT_REQUEST = Struct(
    F("group_id", STRING),
    F("generation_id", INT32),
    F("member_id", STRING),
    F("group_instance_id", NULLABLE_STRING, "3+"),
    flexible_from=4,
)

HEARTBEAT_RESPONSE = Struct(
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    flexible_from=4,
)

LEAVE_GROUP_REQUEST = Struct(
    F("group_id", STRING),
    F("member_id", STRING, "0-2"),
    F("members", Array(Struct(F("member_id", STRING), F("group_instance_id", NULLABLE_STRING))), "3+"),
    flexible_from=4,
)

LEAVE_GROUP_RESPONSE = Struct(
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("members", Array(Struct(
        F("member_id", STRING),
        F("group_instance_id", NULLABLE_STRING),
        F("error_code", INT16),
    )), "3+"),
    flexible_from=4,
)  # fmt: skip

SYNC_GROUP_REQUEST = Struct(
    F("group_id", STRING),
    F("generation_id", INT32),
    F("member_id", STRING),
    F("group_instance_id", NULLABLE_STRING, "3+"),
    F("protocol_type", NULLABLE_STRING, "5+"),  # (v5+: required, and checked against the group's)
    F("protocol_name", NULLABLE_STRING, "5+"),
    F("assignments", Array(Struct(F("member_id", STRING), F("assignment", BYTES)))),
    flexible_from=4,
)

SYNC_GROUP_RESPONSE = Struct(
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("protocol_type", NULLABLE_STRING, "5+"),  # (null in an error answer)
    F("protocol_name", NULLABLE_STRING, "5+"),
    F("assignment", BYTES),
    flexible_from=4,
)

OFFSET_COMMIT_REQUEST = Struct(
    F("group_id", STRING),
    F("generation_id", INT32, "1+", default=-1),
    F("member_id", STRING, "1+"),
    F("group_instance_id", NULLABLE_STRING, "7+"),
    F("retention_time_ms", INT64, "2-4", default=-1),
    F("topics", Array(Struct(
        F("name", STRING),
        F("partitions", Array(Struct(
            F("partition_index", INT32),
            F("committed_offset", INT64),
            F("committed_leader_epoch", INT32, "6+", default=-1),
            F("commit_timestamp", INT64, "1", default=-1),
            F("committed_metadata", NULLABLE_STRING),
        ))),
    ))),
    flexible_from=8,
)  # fmt: skip

OFFSET_COMMIT_RESPONSE = Struct(
    F("throttle_time_ms", INT32, "3+"),
    F("topics", Array(Struct(
        F("name", STRING),
        F("partitions", Array(Struct(F("partition_index", INT32), F("error_code", INT16)))),
    ))),
    flexible_from=8,
)  # fmt: skip

OFFSET_FETCH_REQUEST = Struct(
    F("group_id", STRING),
    F("topics", Array(Struct(F("name", STRING), F("partition_indexes", Array(INT32))), nullable_from=2)),
    F("require_stable", BOOLEAN, "7+"),  # (offsets a transaction holds: UNSTABLE_OFFSET_COMMIT)
    flexible_from=6,
)

OFFSET_FETCH_RESPONSE = Struct(
    F("throttle_time_ms", INT32, "3+"),
    F("topics", Array(Struct(
        F("name", STRING),
        F("partitions", Array(Struct(
            F("partition_index", INT32),
            F("committed_offset", INT64, default=-1),
            F("committed_leader_epoch", INT32, "5+", default=-1),
            F("metadata", NULLABLE_STRING, default=""),
            F("error_code", INT16),
        ))),
    ))),
    F("error_code", INT16, "2+"),
    flexible_from=6,
)  # fmt: skip

DESCRIBE_GROUPS_REQUEST = Struct(
    F("groups", Array(STRING)),
    F("include_authorized_operations", BOOLEAN, "3+"),
    flexible_from=5,
)

DESCRIBE_GROUPS_RESPONSE = Struct(
    F("throttle_time_ms", INT32, "1+"),
    F("groups", Array(Struct(
        F("error_code", INT16),
        F("group_id", STRING),
        F("group_state", STRING),
        F("protocol_type", STRING),
        F("protocol_data", STRING),
        F("members", Array(Struct(
            F("member_id", STRING),
            F("group_instance_id", NULLABLE_STRING, "4+"),
            F("client_id", STRING),
            F("client_host", STRING),
            F("member_metadata", BYTES),
            F("member_assignment", BYTES),
        ))),
        F("authorized_operations", INT32, "3+", default=-(2**31)),
    ))),
    flexible_from=5,
)  # fmt: skip

LIST_GROUPS_REQUEST = Struct(
    F("states_filter", Array(STRING), "4+"),  # (KIP-518: empty, or null, lists every state)
    flexible_from=3,
)

LIST_GROUPS_RESPONSE = Struct(
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("groups", Array(Struct(F("group_id", STRING), F("protocol_type", STRING), F("group_state", STRING, "4+")))),
    flexible_from=3,
)

DELETE_GROUPS_REQUEST = Struct(
    F("groups_names", Array(STRING)),
    flexible_from=2,
)

DELETE_GROUPS_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("results", Array(Struct(F("group_id", STRING), F("error_code", INT16)))),
    flexible_from=2,
)

OFFSET_DELETE_REQUEST = Struct(
    F("group_id", STRING),
    F("topics", Array(Struct(F("name", STRING), F("partitions", Array(Struct(F("partition_index", INT32))))))),
)

OFFSET_DELETE_RESPONSE = Struct(
    F("error_code", INT16),
    F("throttle_time_ms", INT32),
    F("topics", Array(Struct(
        F("name", STRING),
        F("partitions", Array(Struct(F("partition_index", INT32), F("error_code", INT16)))),
    ))),
)  # fmt: skip

# The consumer protocol ("consumer" protocol type): what standard clients put in JoinGroup metadata and
# SyncGroup assignments. Each starts with an int16 version; kafkactl reads them only to show members.
CONSUMER_SUBSCRIPTION = Struct(
    F("topics", Array(STRING)),
    F("user_data", NULLABLE_BYTES),
    F("owned_partitions", Array(Struct(F("topic", STRING), F("partitions", Array(INT32)))), "1+"),
)

CONSUMER_ASSIGNMENT = Struct(
    F("assigned_partitions", Array(Struct(F("topic", STRING), F("partitions", Array(INT32))))),
    F("user_data", NULLABLE_BYTES),
)
