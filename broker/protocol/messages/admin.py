"""CreateTopics (19), DeleteTopics (20), DescribeConfigs (32), AlterConfigs (33), DescribeLogDirs (35),
CreatePartitions (37), ElectLeaders (43)."""

from broker.protocol.schema import (
    BOOLEAN,
    INT8,
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

CREATE_TOPICS_REQUEST = Struct(
    F("topics", Array(Struct(
        F("name", STRING),
        F("num_partitions", INT32, default=-1),
        F("replication_factor", INT16, default=-1),
        F("assignments", Array(Struct(F("partition_index", INT32), F("broker_ids", Array(INT32))))),
        F("configs", Array(Struct(F("name", STRING), F("value", NULLABLE_STRING)))),
    ))),
    F("timeout_ms", INT32, default=30000),
    F("validate_only", BOOLEAN, "1+"),
    flexible_from=5,
)  # fmt: skip

CREATE_TOPICS_RESPONSE = Struct(
    F("throttle_time_ms", INT32, "2+"),
    F("topics", Array(Struct(
        F("name", STRING),
        F("topic_id", UUID, "7+"),  # all zero: kafkactl's topics have no ids
        F("error_code", INT16),
        F("error_message", NULLABLE_STRING, "1+"),
        F("topic_config_error_code", INT16, "5+", tag=0),  # TOPIC_AUTHORIZATION_FAILED: no DescribeConfigs
        F("num_partitions", INT32, "5+", default=-1),
        F("replication_factor", INT16, "5+", default=-1),
        F("configs", Array(Struct(
            F("name", STRING),
            F("value", NULLABLE_STRING),
            F("read_only", BOOLEAN),
            F("config_source", INT8, default=-1),
            F("is_sensitive", BOOLEAN),
        ), nullable_from=5), "5+"),
    ))),
    flexible_from=5,
)  # fmt: skip

DELETE_TOPICS_REQUEST = Struct(
    F("topics", Array(Struct(
        F("name", NULLABLE_STRING),  # null: the topic is named by its id
        F("topic_id", UUID),
    )), "6+"),
    F("topic_names", Array(STRING), "0-5"),
    F("timeout_ms", INT32, default=30000),
    flexible_from=4,
)  # fmt: skip

DELETE_TOPICS_RESPONSE = Struct(
    F("throttle_time_ms", INT32, "1+"),
    F("responses", Array(Struct(
        F("name", STRING, "0-5"),
        F("name", NULLABLE_STRING, "6+"),  # null: a topic named by an id no topic has
        F("topic_id", UUID, "6+"),
        F("error_code", INT16),
        F("error_message", NULLABLE_STRING, "5+"),
    ))),
    flexible_from=4,
)  # fmt: skip

CREATE_PARTITIONS_REQUEST = Struct(
    F("topics", Array(Struct(
        F("name", STRING),
        F("count", INT32),
        F("assignments", Array(Struct(F("broker_ids", Array(INT32))), nullable_from=0)),
    ))),
    F("timeout_ms", INT32, default=30000),
    F("validate_only", BOOLEAN),
    flexible_from=2,
)  # fmt: skip

CREATE_PARTITIONS_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("results", Array(Struct(F("name", STRING), F("error_code", INT16), F("error_message", NULLABLE_STRING)))),
    flexible_from=2,
)

ELECT_LEADERS_REQUEST = Struct(
    F("election_type", INT8, "1+"),  # 0: the preferred replica; 1: unclean (a live replica, where none is in sync)
    F("topic_partitions", Array(Struct(F("topic", STRING), F("partitions", Array(INT32))), nullable_from=0)),
    F("timeout_ms", INT32, default=60000),
    flexible_from=2,
)

ELECT_LEADERS_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("error_code", INT16, "1+"),
    F("replica_election_results", Array(Struct(
        F("topic", STRING),
        F("partition_result", Array(Struct(
            F("partition_id", INT32), F("error_code", INT16), F("error_message", NULLABLE_STRING),
        ))),
    ))),
    flexible_from=2,
)  # fmt: skip

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4

DESCRIBE_CONFIGS_REQUEST = Struct(
    F("resources", Array(Struct(
        F("resource_type", INT8),
        F("resource_name", STRING),
        F("configuration_keys", Array(STRING, nullable_from=0)),
    ))),
    F("include_synonyms", BOOLEAN, "1+"),
    F("include_documentation", BOOLEAN, "3+"),
    flexible_from=4,
)  # fmt: skip

DESCRIBE_CONFIGS_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("results", Array(Struct(
        F("error_code", INT16),
        F("error_message", NULLABLE_STRING),
        F("resource_type", INT8),
        F("resource_name", STRING),
        F("configs", Array(Struct(
            F("name", STRING),
            F("value", NULLABLE_STRING),
            F("read_only", BOOLEAN),
            F("is_default", BOOLEAN, "0"),
            F("config_source", INT8, "1+", default=-1),
            F("is_sensitive", BOOLEAN),
            F("synonyms", Array(Struct(F("name", STRING), F("value", NULLABLE_STRING), F("source", INT8))), "1+"),
            F("config_type", INT8, "3+"),
            F("documentation", NULLABLE_STRING, "3+"),
        ))),
    ))),
    flexible_from=4,
)  # fmt: skip

# config_source values
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

ALTER_CONFIGS_REQUEST = Struct(
    F("resources", Array(Struct(
        F("resource_type", INT8),
        F("resource_name", STRING),
        F("configs", Array(Struct(F("name", STRING), F("value", NULLABLE_STRING)))),
    ))),
    F("validate_only", BOOLEAN),
    flexible_from=2,
)  # fmt: skip

ALTER_CONFIGS_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("responses", Array(Struct(
        F("error_code", INT16),
        F("error_message", NULLABLE_STRING),
        F("resource_type", INT8),
        F("resource_name", STRING),
    ))),
    flexible_from=2,
)  # fmt: skip

DESCRIBE_LOG_DIRS_REQUEST = Struct(
    F("topics", Array(Struct(F("topic", STRING), F("partitions", Array(INT32))), nullable_from=0)),
    flexible_from=2,
)

DESCRIBE_LOG_DIRS_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("results", Array(Struct(
        F("error_code", INT16),
        F("log_dir", STRING),
        F("topics", Array(Struct(
            F("name", STRING),
            F("partitions", Array(Struct(
                F("partition_index", INT32),
                F("partition_size", INT64),
                F("offset_lag", INT64),
                F("is_future_key", BOOLEAN),
            ))),
        ))),
    ))),
    flexible_from=2,
)  # fmt: skip
