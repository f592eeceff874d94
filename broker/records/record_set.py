"""The one walk over the whole batches of a record set (its format: `broker.records.batch`).

A fetched record set may end in a batch its size limit cut: every reader walks the whole batches and
stops at that tail, as Kafka's `MemoryRecords.batches()` and aiokafka's `MemoryRecords` do. `batches`
yields each whole batch's decoded header, for the readers of v2 batches (the consumer, the mirror, the
audit, the columnar reader, the produce handler); `frames` yields only the framing, of any magic, for
a copier (the replica fetcher). A segment file is walked by `broker.log.scanner.scan`, which checks
each batch by its own format's rule and says where the framing breaks.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from broker.records.batch import BATCH_HEADER_SIZE, HEADER, LOG_OVERHEAD, BatchHeader, Buffer

_LENGTH = struct.Struct(">i")  # batchLength, at byte 8 of a frame


def batches(buf: Buffer, start: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each whole batch of `buf[start:end]`, in order.

    The walk stops at a partial tail: fewer bytes left than a batch header (61), or a batch whose length
    runs past the end. Every header is decoded as v2's, whatever its magic (a legacy message's offset,
    size and magic are where a batch has them): the caller checks the magic, CRC and length it needs. A
    header whose length is negative is yielded (the caller's checks refuse it as any forged header) and
    ends the walk, since nothing after it can be located.
    """
    if end is None:
        end = len(buf)
    unpack, make = HEADER.unpack_from, BatchHeader._make
    pos = start
    while end - pos >= BATCH_HEADER_SIZE:
        h = make(unpack(buf, pos))
        size = h.length + LOG_OVERHEAD
        if pos + size > end:
            return
        yield pos, h
        if size < LOG_OVERHEAD:
            return
        pos += size


def frames(buf: Buffer, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int]]:
    """(position, size) of each whole frame of `buf[start:end]`, of any magic, read from its first 12 bytes only.

    The walk stops at a partial tail (fewer than 12 bytes left, or a length running past the end) or at a
    negative length, which no batch has."""
    if end is None:
        end = len(buf)
    unpack = _LENGTH.unpack_from
    pos = start
    while end - pos >= LOG_OVERHEAD:
        size = unpack(buf, pos + 8)[0] + LOG_OVERHEAD
        if size < LOG_OVERHEAD or pos + size > end:
            return
        yield pos, size
        pos += size


def whole_length(buf: Buffer) -> int:
    """How many leading bytes of `buf` are whole frames (what is left is a tail a size limit cut)."""
    last = 0
    for pos, size in frames(buf):
        last = pos + size
    return last
