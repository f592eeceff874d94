"""Building a RecordBatch v2 one record at a time, for producers: the hot path of every send.

`BatchBuilder.append` encodes a record straight into the batch's buffer with a lookup table for
small varints, so a 200-byte record costs a handful of bytearray appends; `build` fills in the
header and CRC once (`broker.records.batch` documents the format).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from broker.records.batch import (
    BATCH_HEADER_SIZE,
    CRC_OFFSET,
    HEADER,
    LOG_OVERHEAD,
    MAGIC_V2,
    _codec,
    compute_crc,
)
from broker.records.compression import Codec, compress
from broker.records.crc import crc32c
from broker.records.varint import encode_varint

_SMALL = [encode_varint(i) for i in range(1 << 14)]  # zigzag varints of 0..16383, precomputed
_NULL = b"\x01"  # zigzag(-1): a null key or value
_CRC = struct.Struct(">I")
_append = _codec.append if _codec is not None else None  # the C encoder of one record, when built
_append_many = getattr(_codec, "append_many", None)  # ... and of a run of records of one key
_build_batch = getattr(_codec, "build_batch", None)  # ... and of the header and CRC


def _varint(n: int) -> bytes:
    return _SMALL[n] if 0 <= n < 16384 else encode_varint(n)


def _encode_headers(headers: tuple[tuple[str, bytes | None], ...] | list) -> bytes:
    parts = [_varint(len(headers))]
    for hk, hv in headers:
        kb = hk.encode()
        parts.append(_varint(len(kb)))
        parts.append(kb)
        if hv is None:
            parts.append(_NULL)
        else:
            parts.append(_varint(len(hv)))
            parts.append(hv)
    return b"".join(parts)


class BatchBuilder:
    """Records of one future batch; offsets are deltas from 0, timestamps from the first record's."""

    __slots__ = ("buf", "count", "base_ts", "max_ts", "codec", "size_estimate")

    def __init__(self, codec: Codec | int = Codec.NONE) -> None:
        self.buf = bytearray()
        self.count = 0
        self.base_ts = -1
        self.max_ts = -1
        self.codec = codec if type(codec) is Codec else Codec(codec)

    def append(self, timestamp: int, key: bytes | None, value: bytes | None,
               headers: tuple[tuple[str, bytes | None], ...] | list = ()) -> int:  # fmt: skip
        """Add a record; returns its offset delta within the batch."""
        delta = self.count
        ts_delta = self._stamp(timestamp)
        if _append is not None:
            _append(self.buf, ts_delta, delta, key, value, headers)
            self.count = delta + 1
            return delta
        tsd = _SMALL[ts_delta] if 0 <= ts_delta < 16384 else encode_varint(ts_delta)
        od = _SMALL[delta] if delta < 16384 else encode_varint(delta)
        if key is None:
            kl, key = _NULL, b""
        else:
            kl = _varint(len(key))
        if value is None:
            vl, value = _NULL, b""
        else:
            vl = _varint(len(value))
        hdr = _encode_headers(headers) if headers else b"\x00"
        length = 1 + len(tsd) + len(od) + len(kl) + len(key) + len(vl) + len(value) + len(hdr)
        self.buf += b"".join((_varint(length), b"\x00", tsd, od, kl, key, vl, value, hdr))
        self.count = delta + 1
        return delta

    def _stamp(self, timestamp: int) -> int:
        """Note a record's timestamp (the first one is the batch's base); returns its delta."""
        if self.count == 0:
            self.base_ts = self.max_ts = timestamp
        elif timestamp > self.max_ts:
            self.max_ts = timestamp
        return timestamp - self.base_ts

    def append_many(self, timestamp: int, key: bytes | None, values: Sequence[bytes | None], start: int,
                    headers: tuple[tuple[str, bytes | None], ...] | list, max_bytes: int,
                    max_count: int) -> int:  # fmt: skip
        """Add `values[start:]` (one timestamp, key and headers) until the batch holds `max_bytes` bytes or
        `max_count` records (at least one record always goes in); returns how many were added."""
        i, n = start, len(values)
        if _append_many is None or i >= n:
            if any(v is not None and not isinstance(v, bytes) for v in values[start : start + max_count]):
                raise TypeError("value must be bytes or None")  # before any record goes in, as in C
            while i < n and (i == start or (len(self) < max_bytes and self.count < max_count)):
                self.append(timestamp, key, values[i], headers)
                i += 1
            return i - start
        delta = self.count
        ts_delta = self._stamp(timestamp)
        stop = min(n, start + max(1, max_count - delta))
        added = _append_many(self.buf, ts_delta, delta, key, values, start, stop, max_bytes - BATCH_HEADER_SIZE,
                             headers)  # fmt: skip
        self.count = delta + added
        return added

    def __len__(self) -> int:
        """Bytes of the batch so far (before compression)."""
        return BATCH_HEADER_SIZE + len(self.buf)

    def build(self, *, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
              lead: bytes = b"") -> bytes:  # fmt: skip
        """The whole batch: header, (compressed) records, CRC; after `lead` (a request's head, say), so
        that a request of one batch is one buffer."""
        body = compress(self.codec, bytes(self.buf)) if self.codec else self.buf
        if _build_batch is not None:
            return _build_batch(lead, body, self.count, self.base_ts, self.max_ts, producer_id, producer_epoch,
                                base_sequence, int(self.codec) & 0x07, crc32c)  # fmt: skip
        size = BATCH_HEADER_SIZE + len(body)
        out = bytearray(len(lead) + size)
        out[: len(lead)] = lead
        HEADER.pack_into(
            out, len(lead), 0, size - LOG_OVERHEAD, -1, MAGIC_V2, 0, int(self.codec) & 0x07, self.count - 1,
            self.base_ts, self.max_ts, producer_id, producer_epoch, base_sequence, self.count,
        )  # fmt: skip
        out[len(lead) + BATCH_HEADER_SIZE :] = body
        _CRC.pack_into(out, len(lead) + CRC_OFFSET, compute_crc(out, len(lead), size))
        return bytes(out)
