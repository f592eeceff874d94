"""WriteTxnMarkers v0 byte for byte as Kafka 2.8's WriteTxnMarkersRequest.json lays it out (kafka-python has no
v0 class: its v1, flexible, is crosschecked in test_kafka_python_crosscheck.py)."""

from __future__ import annotations

import struct

from broker.protocol.messages.txn_markers import WRITE_TXN_MARKERS_REQUEST, WRITE_TXN_MARKERS_RESPONSE

BODY = {"markers": [{"producer_id": 7, "producer_epoch": 2, "transaction_result": True, "coordinator_epoch": 9,
                     "topics": [{"name": "t", "partition_indexes": [0, 3]}]}]}  # fmt: skip


def test_v0_request_is_the_json_fields_unflexible() -> None:
    expected = (struct.pack(">i", 1) + struct.pack(">qh?", 7, 2, True) + struct.pack(">i", 1)
                + struct.pack(">h", 1) + b"t" + struct.pack(">iii", 2, 0, 3) + struct.pack(">i", 9))  # fmt: skip
    assert WRITE_TXN_MARKERS_REQUEST.encode(BODY, 0) == expected
    assert WRITE_TXN_MARKERS_REQUEST.decode(expected, 0) == BODY


def test_v0_response_round_trips() -> None:
    body = {"markers": [{"producer_id": 7, "topics": [{"name": "t", "partitions": [
        {"partition_index": 3, "error_code": 52}]}]}]}  # fmt: skip
    data = WRITE_TXN_MARKERS_RESPONSE.encode(body, 0)
    assert data == (struct.pack(">iqih", 1, 7, 1, 1) + b"t" + struct.pack(">iih", 1, 3, 52))
    assert WRITE_TXN_MARKERS_RESPONSE.decode(data, 0) == body
    assert WRITE_TXN_MARKERS_RESPONSE.decode(WRITE_TXN_MARKERS_RESPONSE.encode(body, 1), 1) == body
