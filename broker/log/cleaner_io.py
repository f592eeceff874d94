"""How the log cleaner reads a segment: in bounded chunks through its own descriptor, throttled, abortable.

The cleaner reads only non-active segments, through descriptors of its own (appends never wait for it),
`_READ_BYTES` at a time (more for a batch larger than that), so its memory stays bounded whatever
`segment.bytes` is. Its reads are throttled to `log.cleaner.io.max.bytes.per.second` (Kafka's Throttler), and
a clean looks at its stop flag at least every read chunk and every 50 ms throttle slice: an abort (the
cleaner stopping, a log removed or truncated) reaches it within one of those.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from broker.log.scanner import Damage, ScannedBatch, read_batch
from broker.records.batch import LOG_OVERHEAD

_READ_BYTES = 4 << 20  # what the cleaner reads of a segment at once (more for a batch larger than that)
_FRAME_LENGTH = struct.Struct(">i")


class CleanAborted(Exception):
    """A clean given up: the log changed under it (segments removed or cut), or it was told to stop."""


class CleanDamage(CleanAborted):
    """A clean given up on damage in a segment (a framing break, a CRC mismatch): the log is left uncleaned
    until the broker restarts (Kafka's uncleanable partitions); `kafkactl recover` mends it."""


class Throttler:
    """Kafka's cleaner throttler: sleeps so that the cleaner's I/O stays under `bytes_per_second`."""

    def __init__(self, bytes_per_second: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = bytes_per_second
        self.clock = clock
        self.start = clock()
        self.done = 0

    #: the longest sleep between two looks at `stop` (an abort waits no longer than about this)
    SLICE_S = 0.05

    def tick(self, n: int, stop: Callable[[], bool] | None = None) -> None:
        """Account for `n` bytes and sleep as long as the cleaner is ahead of its rate, in slices of at most
        `SLICE_S` that check `stop` (raising CleanAborted when it says so)."""
        if self.rate >= 1e18:
            return
        self.done += n
        ahead = self.done / self.rate - (self.clock() - self.start)
        if ahead > 0.01:
            until = time.monotonic() + ahead
            while (left := until - time.monotonic()) > 0:
                if stop is not None and stop():
                    raise CleanAborted("stopped")
                time.sleep(min(left, self.SLICE_S))
        if self.clock() - self.start > 1.0:  # a new window, so that a pause is not made up for by a burst
            self.start, self.done = self.clock(), 0


def segment_batches(path: Path, size: int, on_read: Callable[[int], None] | None = None, *, verify: bool = False
             ) -> Iterator[tuple[bytes, ScannedBatch | Damage]]:  # fmt: skip
    """(chunk, batch) for each batch of the first `size` bytes of a segment file, read in chunks of about
    `_READ_BYTES` through the cleaner's own descriptor: memory stays bounded whatever segment.bytes is, a
    segment deleted meanwhile cannot turn into another file under a reused descriptor number, and a file cut
    under the cleaner (a follower's truncation) is a short read, not the SIGBUS a mapping would get. A
    `Damage` ends it; `on_read(n)` hears of each read (stats, the throttle)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise CleanAborted(f"{path.name} is gone") from None
    try:
        pos, want = 0, _READ_BYTES
        while pos < size:
            n = min(want, size - pos)
            data = os.pread(fd, n, pos)
            if len(data) < n:
                raise CleanAborted(f"{path.name} was cut under the cleaner")
            p, want = 0, _READ_BYTES
            while p < n:
                item = read_batch(data, p, n, verify_crc=verify)
                if isinstance(item, Damage):
                    if pos + n < size:  # the chunk ends before the file does: the batch may run past it
                        fits = p + LOG_OVERHEAD <= n
                        need = _FRAME_LENGTH.unpack_from(data, p + 8)[0] + LOG_OVERHEAD if fits else n + 1
                        if p > 0 or need > n:
                            want = max(_READ_BYTES, need)
                            break
                    yield data, Damage(pos + item.position, item.reason)
                    return
                if not item.crc_ok:
                    yield data, Damage(pos + p, f"CRC mismatch in the batch at offset {item.base_offset}")
                    return
                yield data, item
                p = item.end
            pos += p
            if on_read is not None and p:
                on_read(p)
            if p == 0 and want == _READ_BYTES:
                return
    finally:
        os.close(fd)
