"""ApiVersions (18), Metadata (3) and DescribeCluster (60)."""

from broker.protocol.schema import (
    BOOLEAN,
    INT16,
    INT32,
    INT64,
    NULLABLE_STRING,
    STRING,
    UUID,
    Array,
    F,
    Struct,
)  # fmt: skip

API_VERSIONS_REQUEST = Struct(  # v0-v2 carry no fields
    F("client_software_name", STRING, "3+"),
    F("client_software_version", STRING, "3+"),
    flexible_from=3,
)

_FEATURE_RANGE = Struct(F("name", STRING), F("min_version", INT16), F("max_version", INT16))

API_VERSIONS_RESPONSE = Struct(  # its header stays v0 in every version, so any client can read an error
    F("error_code", INT16),
    F("api_keys", Array(Struct(F("api_key", INT16), F("min_version", INT16), F("max_version", INT16)))),
    F("throttle_time_ms", INT32, "1+"),
    F("supported_features", Array(_FEATURE_RANGE), "3+", tag=0),
    F("finalized_features_epoch", INT64, "3+", default=-1, tag=1),
    F("finalized_features", Array(_FEATURE_RANGE), "3+", tag=2),
    flexible_from=3,
    header_flexible=False,
)

METADATA_REQUEST = Struct(
    F("topics", Array(Struct(
        F("topic_id", UUID, "10+"),
        F("name", STRING, "0-9"),
        F("name", NULLABLE_STRING, "10+"),  # null: the topic is named by its id
    ), nullable_from=1)),
    F("allow_auto_topic_creation", BOOLEAN, "4+", default=True),
    F("include_cluster_authorized_operations", BOOLEAN, "8-10"),
    F("include_topic_authorized_operations", BOOLEAN, "8+"),
    flexible_from=9,
)  # fmt: skip

METADATA_RESPONSE = Struct(
    F("throttle_time_ms", INT32, "3+"),
    F("brokers", Array(Struct(
        F("node_id", INT32),
        F("host", STRING),
        F("port", INT32),
        F("rack", NULLABLE_STRING, "1+"),
    ))),
    F("cluster_id", NULLABLE_STRING, "2+"),
    F("controller_id", INT32, "1+", default=-1),
    F("topics", Array(Struct(
        F("error_code", INT16),
        F("name", STRING),
        F("topic_id", UUID, "10+"),  # all zero: kafkactl's topics have no ids
        F("is_internal", BOOLEAN, "1+"),
        F("partitions", Array(Struct(
            F("error_code", INT16),
            F("partition_index", INT32),
            F("leader_id", INT32, default=-1),
            F("leader_epoch", INT32, "7+", default=-1),
            F("replica_nodes", Array(INT32)),
            F("isr_nodes", Array(INT32)),
            F("offline_replicas", Array(INT32), "5+"),
        ))),
        F("topic_authorized_operations", INT32, "8+", default=-2147483648),
    ))),
    F("cluster_authorized_operations", INT32, "8-10", default=-2147483648),
    flexible_from=9,
)  # fmt: skip

DESCRIBE_CLUSTER_REQUEST = Struct(
    F("include_cluster_authorized_operations", BOOLEAN),
    flexible_from=0,
)

DESCRIBE_CLUSTER_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", NULLABLE_STRING),
    F("cluster_id", STRING),
    F("controller_id", INT32, default=-1),
    F("brokers", Array(Struct(
        F("broker_id", INT32),
        F("host", STRING),
        F("port", INT32),
        F("rack", NULLABLE_STRING),
    ))),
    F("cluster_authorized_operations", INT32, default=-2147483648),
    flexible_from=0,
)  # fmt: skip
