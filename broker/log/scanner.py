"""The one parser of segment files: broker start-up recovery, `inspect segments` and `recover` all
consume what it yields.

A segment (`.log`) is a plain concatenation of batches, each framed by its first 12 bytes (base
offset int64, length int32 of the bytes that follow) with the magic byte at position 16 — the same
for RecordBatch v2 (`broker.records.batch`) and the legacy message sets v0/v1
(`broker.records.legacy`), which may follow one another in any order (a log carried over from an
Apache Kafka cluster that was upgraded holds both). `scan` walks the framing and yields one
`ScannedBatch` per batch, checked by its own format's rule: CRC-32C for v2, CRC-32 for magic 0/1,
whose compressed wrappers must also decode; a legacy batch is counted as Kafka counts it (a wrapper
is its inner records, from its first inner offset to the wrapper's offset). Where the framing itself
breaks (truncation, impossible length, unknown magic) it yields a `Damage` and stops, because nothing
after it can be located without guessing. `find_next_batch` is that guess, made safely: the next
position where a batch of any magic frames and checks, which is how salvage keeps the valid batches
after a damaged region.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

from broker.errors import CorruptRecordError
from broker.records.batch import (
    BATCH_HEADER_SIZE,
    HEADER,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    BatchHeader,
    compute_crc,
)
from broker.records.legacy import MIN_MESSAGE_SIZE as MIN_LEGACY_SIZE
from broker.records.legacy import LegacyMessage, decode_message, span

Buffer = bytes | bytearray | memoryview | mmap.mmap

_PREFIX = struct.Struct(">qib")  # baseOffset, batchLength, (epoch skipped by offset) magic
_FRAME = struct.Struct(">qi")
# where a magic 0/1 message may start: a size of 14 bytes to 16 MiB, magic 0 or 1, attributes 0-15
_LEGACY_START = re.compile(
    rb"(?s)(?=.{8}"  # offset
    rb"\x00(?:[\x01-\xff]..|\x00[\x01-\xff].|\x00\x00[\x0e-\xff])"  # size
    rb".{4}[\x00\x01][\x00-\x0f])"  # crc, magic, attributes
)


class ScannedBatch(NamedTuple):
    """A batch whose framing holds; `crc_ok` says whether its contents match its CRC, `valid` whether
    they pass every check of their format (`problem` says what else failed: a legacy wrapper's records)."""

    position: int
    size: int
    magic: int
    base_offset: int
    last_offset: int
    record_count: int
    max_timestamp: int
    stored_crc: int
    computed_crc: int | None  # None when the scan did not verify CRCs
    header: BatchHeader | None  # magic 2
    legacy: LegacyMessage | None  # magic 0 and 1
    problem: str | None = None  # besides the CRC, why the batch is invalid

    @property
    def crc_ok(self) -> bool:
        return self.computed_crc is None or self.computed_crc == self.stored_crc

    @property
    def valid(self) -> bool:
        return self.crc_ok and self.problem is None

    @property
    def invalid_reason(self) -> str | None:
        """Why the batch fails its format's checks, or None."""
        if not self.crc_ok:
            kind = "CRC-32C" if self.magic == 2 else "CRC-32"
            return f"{kind} mismatch (stored {self.stored_crc:#010x}, computed {self.computed_crc:#010x})"
        return self.problem

    @property
    def end(self) -> int:
        return self.position + self.size


class Damage(NamedTuple):
    """Where the framing of a segment breaks, and why."""

    position: int
    reason: str


def scan(
    buf: Buffer, start: int = 0, end: int | None = None, *, verify_crc: bool = True
) -> Iterator[ScannedBatch | Damage]:
    """Yield every framed batch of `buf[start:end]`, then a `Damage` if the framing breaks before the end."""
    end = len(buf) if end is None else end
    pos = start
    while pos < end:
        item = read_batch(buf, pos, end, verify_crc=verify_crc)
        yield item
        if isinstance(item, Damage):
            return
        pos = item.end


def read_batch(buf: Buffer, pos: int, end: int, *, verify_crc: bool = True) -> ScannedBatch | Damage:
    """Frame and decode the batch at `pos`, or say why it does not frame."""
    remaining = end - pos
    if remaining < LOG_OVERHEAD + 5:
        return Damage(pos, f"truncated: {remaining} trailing bytes, too few for a batch header")
    base_offset, length = _FRAME.unpack_from(buf, pos)
    magic = buf[pos + MAGIC_OFFSET]
    size = length + LOG_OVERHEAD
    if length < 0:
        return Damage(pos, f"negative batch length {length}")
    if magic == 2:
        if size < BATCH_HEADER_SIZE:
            return Damage(pos, f"batch length {length} is shorter than a batch header")
        if size > remaining:
            return Damage(pos, f"truncated: batch length {length} runs {size - remaining} bytes past the end")
        header = BatchHeader._make(HEADER.unpack_from(buf, pos))
        if header.last_offset_delta < 0 or header.record_count < 0:
            return Damage(pos, "batch header with a negative offset delta or record count")
        computed = compute_crc(buf, pos, size) if verify_crc else None
        return ScannedBatch(
            pos, size, 2, base_offset, header.last_offset, header.record_count,
            header.max_timestamp, header.crc, computed, header, None,
        )  # fmt: skip
    if magic in (0, 1):
        if length < MIN_LEGACY_SIZE:
            return Damage(pos, f"message size {length} is shorter than a message header")
        if size > remaining:
            return Damage(pos, f"truncated: message size {length} runs {size - remaining} bytes past the end")
        try:
            msg = decode_message(memoryview(buf)[pos : pos + size])
        except CorruptRecordError as exc:
            return Damage(pos, str(exc))
        computed = msg.computed_crc if verify_crc else None
        if computed is not None and computed != msg.crc:  # garbage: its payload is not decompressed
            return ScannedBatch(pos, size, magic, base_offset, base_offset, 1, msg.timestamp, msg.crc, computed,
                                None, msg)  # fmt: skip
        sp = span(msg)
        return ScannedBatch(
            pos, size, magic, sp.base_offset, sp.last_offset, sp.record_count, msg.timestamp, msg.crc, computed,
            None, msg, sp.problem,
        )  # fmt: skip
    return Damage(pos, f"unknown magic {magic}")


def find_next_batch(buf: Buffer, start: int, end: int | None = None, *, min_offset: int = 0) -> int | None:
    """The first position after `start` where a batch of any magic frames, passes its checks and has
    offsets >= min_offset."""
    end = len(buf) if end is None else end
    v2 = _next_v2_batch(buf, start, end, min_offset)
    legacy = _next_legacy_batch(buf, start, end if v2 is None else v2, end, min_offset)
    return v2 if legacy is None else legacy


def _next_v2_batch(buf: Buffer, start: int, end: int, min_offset: int) -> int | None:
    search = start + 1 + MAGIC_OFFSET
    while True:
        hit = buf.find(b"\x02", search, end)
        if hit < 0:
            return None
        pos = hit - MAGIC_OFFSET
        search = hit + 1
        if pos + BATCH_HEADER_SIZE > end:
            return None
        item = read_batch(buf, pos, end, verify_crc=False)
        if isinstance(item, Damage) or item.base_offset < min_offset:
            continue
        if compute_crc(buf, pos, item.size) == item.stored_crc:
            return pos


def _next_legacy_batch(buf: Buffer, start: int, before: int, end: int, min_offset: int) -> int | None:
    """The first position in (start, before) where a valid magic 0/1 batch with offsets >= min_offset starts."""
    window = min(end, before + MAGIC_OFFSET + 2)  # a match needs 18 bytes: none starts at `before` or later
    for m in _LEGACY_START.finditer(buf, max(start + 1, 0), window):
        pos = m.start()
        if pos >= before:
            return None
        item = read_batch(buf, pos, end)
        if isinstance(item, ScannedBatch) and item.valid and item.base_offset >= min_offset:
            return pos
    return None


@contextmanager
def open_segment(path: str | os.PathLike[str]) -> Iterator[Buffer]:
    """Map a segment file read-only (an empty file maps to b"")."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            yield b""
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            yield mm
