"""The transaction APIs of KIP-98 a transaction coordinator answers: AddPartitionsToTxn (24),
AddOffsetsToTxn (25), EndTxn (26) and TxnOffsetCommit (28, on the group coordinator), and, for
`kafkactl txn`, DescribeTransactions (65) and ListTransactions (66) of KIP-664 (beyond Kafka 2.8).

InitProducerId (22) lives with Produce in `produce.py`; WriteTxnMarkers (27), which coordinators send
to partition leaders, in `txn_markers.py`. Versions reach Kafka 2.8's; each message is flexible
(KIP-482) from the version its Kafka JSON names (3 here; DescribeTransactions and ListTransactions
are flexible from their first version).
"""

from broker.protocol.schema import (
    BOOLEAN,
    INT16,
    INT32,
    INT64,
    NULLABLE_STRING,
    STRING,
    Array,
    F,
    Struct,
)  # fmt: skip

_TOPIC_PARTITIONS = Struct(F("name", STRING), F("partitions", Array(INT32)))

ADD_PARTITIONS_TO_TXN_REQUEST = Struct(
    F("transactional_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("topics", Array(_TOPIC_PARTITIONS)),
    flexible_from=3,
)

ADD_PARTITIONS_TO_TXN_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("results", Array(Struct(
        F("name", STRING),
        F("results", Array(Struct(F("partition_index", INT32), F("error_code", INT16)))),
    ))),
    flexible_from=3,
)  # fmt: skip

ADD_OFFSETS_TO_TXN_REQUEST = Struct(
    F("transactional_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("group_id", STRING),
    flexible_from=3,
)

ADD_OFFSETS_TO_TXN_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    flexible_from=3,
)

END_TXN_REQUEST = Struct(
    F("transactional_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("committed", BOOLEAN),
    flexible_from=3,
)

END_TXN_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    flexible_from=3,
)

TXN_OFFSET_COMMIT_REQUEST = Struct(
    F("transactional_id", STRING),
    F("group_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("generation_id", INT32, "3+", default=-1),
    F("member_id", STRING, "3+"),
    F("group_instance_id", NULLABLE_STRING, "3+"),
    F("topics", Array(Struct(
        F("name", STRING),
        F("partitions", Array(Struct(
            F("partition_index", INT32),
            F("committed_offset", INT64),
            F("committed_leader_epoch", INT32, "2+", default=-1),
            F("committed_metadata", NULLABLE_STRING),
        ))),
    ))),
    flexible_from=3,
)  # fmt: skip

TXN_OFFSET_COMMIT_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("topics", Array(Struct(
        F("name", STRING),
        F("partitions", Array(Struct(F("partition_index", INT32), F("error_code", INT16)))),
    ))),
    flexible_from=3,
)  # fmt: skip

DESCRIBE_TRANSACTIONS_REQUEST = Struct(
    F("transactional_ids", Array(STRING)),
    flexible_from=0,
)

DESCRIBE_TRANSACTIONS_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("transaction_states", Array(Struct(
        F("error_code", INT16),
        F("transactional_id", STRING),
        F("transaction_state", STRING),
        F("transaction_timeout_ms", INT32),
        F("transaction_start_time_ms", INT64, default=-1),
        F("producer_id", INT64, default=-1),
        F("producer_epoch", INT16, default=-1),
        F("topics", Array(Struct(F("topic", STRING), F("partitions", Array(INT32))))),
    ))),
    flexible_from=0,
)  # fmt: skip

LIST_TRANSACTIONS_REQUEST = Struct(
    F("state_filters", Array(STRING)),
    F("producer_id_filters", Array(INT64)),
    flexible_from=0,
)

LIST_TRANSACTIONS_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("unknown_state_filters", Array(STRING)),
    F("transaction_states", Array(Struct(
        F("transactional_id", STRING),
        F("producer_id", INT64),
        F("transaction_state", STRING),
    ))),
    flexible_from=0,
)  # fmt: skip
