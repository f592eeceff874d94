"""Kafka's record formats: RecordBatch v2 (written and read) and message sets v0/v1 (read only)."""

from broker.records.batch import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    Record,
    build_batch,
    decode_header,
    iter_records,
)
from broker.records.compression import Codec
from broker.records.crc import crc32c

__all__ = [
    "BATCH_HEADER_SIZE",
    "BatchHeader",
    "Codec",
    "Record",
    "build_batch",
    "crc32c",
    "decode_header",
    "iter_records",
]
