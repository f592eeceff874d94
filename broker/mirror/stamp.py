"""The mirror's stamp: where a mirrored batch came from, carried in the target's own bytes.

`kafkactl mirror` copies each source batch to one target batch of the same records, partition i to
partition i, changing three things:

- producerId, producerEpoch and baseSequence become the mirror's. It is an idempotent producer, and
  after a crash it carries on with the producer id, epoch and sequence of the target's last batch, so
  a batch resent after a crash or an error is answered as a duplicate instead of being stored twice;
- the first record gains one header, `kafkactl.mirror`, whose value is the source offset after the
  batch, in ASCII decimal. The target's last batch thus says where mirroring resumes. A batch mirrored
  again (A to B to C) carries one such header per hop; the last one is the latest hop's;
- the transactional bit is cleared. Control batches (transaction markers) are not copied.

Keys, values, other headers, timestamps, attributes and the codec are kept: an uncompressed batch is
decoded no further than its first record, and a compressed one is decompressed and compressed again
with its own codec. A batch whose offsets have gaps (a compacted source) or which carries LogAppendTime
is rebuilt record by record, with consecutive offsets, and each record takes the source broker's
append time as its CreateTime.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from broker.audit.counts import HOST_HEADER
from broker.records.batch import (
    BATCH_HEADER_SIZE,
    CODEC_MASK,
    CONTROL_BIT,
    CRC_OFFSET,
    HEADER,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    Buffer,
    Record,
    build_batch,
    compute_crc,
    decode_records,
    first_record_headers,
)
from broker.records.compression import compress, decompress
from broker.records.varint import decode_varint, encode_varint

HEADER_KEY = "kafkactl.mirror"
#: headers of a batch's first record that speak for the whole batch
BATCH_STAMPS = (HEADER_KEY, HOST_HEADER)
_KEY = HEADER_KEY.encode()
_KEEP_ATTRIBUTES = CODEC_MASK  # timestamp type CreateTime, not transactional, not control
_CRC = struct.Struct(">I")


class Resume(NamedTuple):
    """Where a target partition's mirroring carries on: the source offset, and the producer's place."""

    source_offset: int
    producer_id: int
    producer_epoch: int
    next_sequence: int


def is_control(header: BatchHeader) -> bool:
    return bool(header.attributes & CONTROL_BIT)


def restamp(buf: Buffer, pos: int, header: BatchHeader, producer_id: int, producer_epoch: int,
            base_sequence: int, first_offset: int = 0) -> bytes | None:  # fmt: skip
    """The target batch for the source batch at `pos`: the mirror's producer fields and stamp, the same records
    (those at or after `first_offset`; None when there is none, in a compacted batch)."""
    view = memoryview(buf)
    if (header.attributes & TIMESTAMP_TYPE_BIT or header.record_count != header.last_offset_delta + 1
            or header.base_offset < first_offset):  # fmt: skip
        return _rebuilt(view, pos, header, producer_id, producer_epoch, base_sequence, first_offset)
    body = view[pos + BATCH_HEADER_SIZE : pos + header.size]
    codec = header.codec
    stamp = str(header.next_offset).encode()
    records = _with_stamp(decompress(codec, body) if codec else body, stamp)
    if codec:
        records = compress(codec, records)
    size = BATCH_HEADER_SIZE + len(records)
    out = bytearray(size)
    HEADER.pack_into(
        out, 0,
        0, size - LOG_OVERHEAD, -1, 2, 0, header.attributes & _KEEP_ATTRIBUTES, header.last_offset_delta,
        header.base_timestamp, header.max_timestamp, producer_id, producer_epoch, base_sequence, header.record_count,
    )  # fmt: skip
    out[BATCH_HEADER_SIZE:] = records
    _CRC.pack_into(out, CRC_OFFSET, compute_crc(out, 0, size))
    return bytes(out)


def _rebuilt(view: memoryview, pos: int, header: BatchHeader, producer_id: int, producer_epoch: int,
             base_sequence: int, first_offset: int) -> bytes | None:  # fmt: skip
    log_append = bool(header.attributes & TIMESTAMP_TYPE_BIT)
    decoded = decode_records(view, pos, header)
    kept = [r for r in decoded if r.offset >= first_offset]
    if not kept:
        return None
    # the batch-wide stamps of its first record (an audited producer's host) stay on the first one kept
    carried = tuple(h for h in decoded[0].headers if h[0] in BATCH_STAMPS) if kept[0] is not decoded[0] else ()
    stamp = ((HEADER_KEY, str(header.next_offset).encode()),)
    records = [
        Record(i, header.max_timestamp if log_append else r.timestamp, r.key, r.value,
               (*r.headers, *carried, *stamp) if i == 0 else r.headers)
        for i, r in enumerate(kept)
    ]  # fmt: skip
    return build_batch(records, base_offset=0, codec=header.codec, producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=base_sequence)  # fmt: skip


def _first_record(records: Buffer) -> tuple[int, int, int, int, int]:
    """(start of its body, end, position of its header count, header count, position after the count)."""
    length, start = decode_varint(records, 0)
    p = start + 1  # attributes
    _, p = decode_varint(records, p)  # timestamp delta
    _, p = decode_varint(records, p)  # offset delta
    key_length, p = decode_varint(records, p)
    p += max(key_length, 0)
    value_length, p = decode_varint(records, p)
    p += max(value_length, 0)
    count, after = decode_varint(records, p)
    return start, start + length, p, count, after


def _with_stamp(records: Buffer, stamp: bytes) -> bytes:
    """The records, the first one with the stamp header appended to its headers."""
    start, end, count_at, count, after = _first_record(records)
    view = memoryview(records)
    body = b"".join((view[start:count_at], encode_varint(count + 1), view[after:end],
                     encode_varint(len(_KEY)), _KEY, encode_varint(len(stamp)), stamp))  # fmt: skip
    return b"".join((encode_varint(len(body)), body, view[end:]))


def read_stamp(buf: Buffer, pos: int, header: BatchHeader) -> Resume | None:
    """Where mirroring resumes after the target batch at `pos`; None when the mirror did not write it."""
    if is_control(header) or header.producer_id < 0:
        return None
    stamps = [v for k, v in first_record_headers(buf, pos, header) if k == HEADER_KEY and v]
    if not stamps or not stamps[-1].isdigit():
        return None
    next_sequence = (header.base_sequence + header.last_offset_delta + 1) % (2**31)
    return Resume(int(stamps[-1]), header.producer_id, header.producer_epoch, next_sequence)
