"""`kafkactl bench log`: append 1 GiB of 16 KiB batches to a partition log, validating each batch's
CRC as the broker does, then read it all back through the slice API with `sendfile`.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from broker.log.config import LogConfig
from broker.log.log import PartitionLog
from broker.records.batch import Record, build_batch
from broker.records.crc import BACKEND, crc32c


def template_batch(batch_bytes: int, record_bytes: int = 200) -> tuple[bytes, int]:
    """A valid uncompressed batch of about `batch_bytes` made of `record_bytes`-byte values."""
    per_record = record_bytes + 10
    count = max(1, (batch_bytes - 61) // per_record)
    ts = int(time.time() * 1000)
    value = os.urandom(record_bytes // 2).hex().encode()[:record_bytes]
    batch = build_batch([Record(i, ts, None, value) for i in range(count)])
    return batch, count


def crc_rate(data: bytes, seconds: float = 0.5) -> float:
    """MB/s of the CRC-32C backend in use over `data`, for at least `seconds`."""
    n, t0 = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds:
        for _ in range(100):
            crc32c(data)
        n += 100
    return n * len(data) / elapsed / 1e6


def _drain(sock: socket.socket) -> None:
    buf = bytearray(1 << 20)
    while sock.recv_into(buf):
        pass


def run(
    total_bytes: int = 1 << 30,
    batch_bytes: int = 16384,
    read_bytes: int = 1 << 20,
    directory: Path | None = None,
    fsync: bool = False,
    advance: Callable[[int], None] = lambda n: None,
) -> dict:
    """Measure append and read throughput; returns the figures as a dict."""
    tmp = Path(tempfile.mkdtemp(prefix="kafkactl-bench-", dir=directory))
    try:
        batch, per_batch = template_batch(batch_bytes)
        n = max(1, total_bytes // len(batch))
        plog = PartitionLog(tmp / "bench-0", LogConfig())
        t0 = time.perf_counter()
        for _ in range(n):
            plog.append(batch)
            advance(1)
        if fsync:
            plog.flush()
        append_s = time.perf_counter() - t0
        written = n * len(batch)

        # Slices go out with sendfile over a local socket that a thread drains, as a Fetch's would.
        out, sink = socket.socketpair()
        drained = threading.Thread(target=_drain, args=(sink,), daemon=True)
        drained.start()
        t0 = time.perf_counter()
        offset, read = 0, 0
        end = plog.log_end_offset
        whole = max(1, read_bytes // len(batch)) * len(batch)
        while offset < end:
            sl = plog.read(offset, whole)
            sent = 0
            while sent < sl.length:
                sent += os.sendfile(out.fileno(), sl.fd, sl.position + sent, sl.length - sent)
            read += sl.length
            offset = sl.first_offset + (sl.length // len(batch)) * per_batch
        out.shutdown(socket.SHUT_WR)
        drained.join()
        read_s = time.perf_counter() - t0
        out.close()
        sink.close()
        plog.close()
        return {
            "bench": "log",
            "crc_backend": BACKEND,
            "crc_mb_per_s": round(crc_rate(batch), 1),
            "batch_bytes": len(batch),
            "batches": n,
            "records": n * per_batch,
            "bytes": written,
            "fsync": fsync,
            "append_seconds": round(append_s, 3),
            "append_mb_per_s": round(written / append_s / 1e6, 1),
            "read_seconds": round(read_s, 3),
            "read_mb_per_s": round(read / read_s / 1e6, 1),
            "read_bytes": read,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def median(results: list[dict]) -> dict:
    """The run with the median append rate, with every run's append and read rates beside it."""
    ordered = sorted(results, key=lambda r: r["append_mb_per_s"])
    out = dict(ordered[len(ordered) // 2])
    if len(results) > 1:
        out["runs"] = len(results)
        out["append_mb_per_s_each"] = [r["append_mb_per_s"] for r in results]
        out["read_mb_per_s_each"] = [r["read_mb_per_s"] for r in results]
    return out
