"""WriteTxnMarkers (27), v0-1 (flexible from v1, KIP-482): a transaction coordinator tells partition
leaders to write the commit or abort marker of producers' transactions (KIP-98).

Each marker names a producer (id and epoch), the result (true: commit), the coordinator epoch and the
partitions; the answer carries an error code per producer and partition.
"""

from broker.protocol.schema import BOOLEAN, INT16, INT32, INT64, STRING, Array, F, Struct

WRITE_TXN_MARKERS_REQUEST = Struct(
    F("markers", Array(Struct(
        F("producer_id", INT64),
        F("producer_epoch", INT16),
        F("transaction_result", BOOLEAN),
        F("topics", Array(Struct(F("name", STRING), F("partition_indexes", Array(INT32))))),
        F("coordinator_epoch", INT32),
    ))),
    flexible_from=1,
)  # fmt: skip

WRITE_TXN_MARKERS_RESPONSE = Struct(
    F("markers", Array(Struct(
        F("producer_id", INT64),
        F("topics", Array(Struct(
            F("name", STRING),
            F("partitions", Array(Struct(F("partition_index", INT32), F("error_code", INT16)))),
        ))),
    ))),
    flexible_from=1,
)  # fmt: skip
