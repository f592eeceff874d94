"""What a topic's config asks of its leader's appends beyond validation, as Kafka's LogValidator:
the timestamp window (`message.timestamp.difference.max.ms`) and the stored codec (`compression.type`).

Both run only when `LogConfig.checks_batches` says the topic asks for them, so a topic with Kafka's
defaults appends as before. Recompression keeps everything but the codec: a v2 batch's records are the
same bytes whatever the codec, so the records are decompressed and compressed again and only the
header's attributes, length and CRC change — offsets, timestamps, keys, values, headers, the producer
id, epoch and sequence stay as produced (a producer's retry is still a duplicate).
"""

from __future__ import annotations

from typing import NamedTuple

from broker.errors import RecordTooLargeError
from broker.records.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    CODEC_MASK,
    HEADER,
    LOG_OVERHEAD,
    compute_crc,
    decode_records,
)
from broker.records.compression import compress, decompress

Buffer = bytes | bytearray | memoryview

#: `PartitionLog.validate`'s answer per batch: position, size, record count, last offset delta, max timestamp
Validated = list[tuple[int, int, int, int, int]]


class OutOfWindow(NamedTuple):
    """A record whose CreateTime is too far from the broker's clock: its index in the record set."""

    index: int
    timestamp: int


def _timestamp(offset: int, timestamp: int, *_: object) -> int:
    return timestamp


def out_of_window(data: Buffer, validated: Validated, now_ms: int, max_diff_ms: int) -> list[OutOfWindow]:
    """The records whose timestamp is more than `max_diff_ms` from `now_ms` (Kafka checks each record of a
    CreateTime topic; -1, no timestamp, is never refused)."""
    bad: list[OutOfWindow] = []
    index = 0
    for pos, *_ in validated:
        for ts in decode_records(data, pos, make=_timestamp):
            if ts != -1 and abs(ts - now_ms) > max_diff_ms:
                bad.append(OutOfWindow(index, ts))
            index += 1
    return bad


def window_message(bad: OutOfWindow, now_ms: int, max_diff_ms: int) -> str:
    """Kafka's words for a refused timestamp (LogValidator.validateTimestamp)."""
    return (f"Timestamp {bad.timestamp} of message with offset {bad.index} is out of range. The timestamp should be "
            f"within [{now_ms - max_diff_ms}, {now_ms + max_diff_ms}]")  # fmt: skip


def recompress(data: Buffer, validated: Validated, codec: int, max_batch_bytes: int) -> tuple[Buffer, Validated]:
    """`data`'s batches with their records in `codec` (0: uncompressed), and their new positions and sizes;
    `data` itself when every batch already is. Raises RecordTooLargeError when a batch recompressed is over
    `max_batch_bytes` (Kafka checks the size again after recompression)."""
    mv = memoryview(data)
    if all(mv[pos + ATTRIBUTES_OFFSET + 1] & CODEC_MASK == codec for pos, *_ in validated):  # (the low byte)
        return data, validated
    out = bytearray()
    placed: Validated = []
    for pos, size, count, delta, max_ts in validated:
        h = HEADER.unpack_from(mv, pos)
        attributes = h[5]
        if attributes & CODEC_MASK == codec:
            body: Buffer = mv[pos + BATCH_HEADER_SIZE : pos + size]
        else:
            raw = mv[pos + BATCH_HEADER_SIZE : pos + size]
            plain = decompress(attributes & CODEC_MASK, raw) if attributes & CODEC_MASK else raw
            body = compress(codec, plain) if codec else bytes(plain)
        new_size = BATCH_HEADER_SIZE + len(body)
        if new_size > max_batch_bytes:
            raise RecordTooLargeError(f"record batch recompressed is {new_size} bytes, over max.message.bytes "
                                      f"({max_batch_bytes})")  # fmt: skip
        at = len(out)
        out += bytes(BATCH_HEADER_SIZE)
        HEADER.pack_into(out, at, h[0], new_size - LOG_OVERHEAD, h[2], h[3], 0, (attributes & ~CODEC_MASK) | codec,
                         *h[6:])  # fmt: skip
        out += body
        HEADER.pack_into(out, at, h[0], new_size - LOG_OVERHEAD, h[2], h[3], compute_crc(out, at, new_size),
                         (attributes & ~CODEC_MASK) | codec, *h[6:])  # fmt: skip
        placed.append((at, new_size, count, delta, max_ts))
    return out, placed
