"""Bounds that keep hostile or runaway clients from exhausting the broker: connections and request memory.

- `max.connections` / `max.connections.per.ip` (Kafka's keys): a connection past either is closed as soon
  as it is accepted (the newest is refused, the ones being served go on), logged once per interval with
  how many were refused. By default the total is what the file limit allows less a reserve for the
  broker's own files and connections (segments, ZooKeeper, replica fetchers, its admin clients), and the
  file limit is raised to its hard maximum first.
- `queued.max.request.bytes` (Kafka's key): the bytes of big request frames being received at once over
  all connections. A connection whose next frame does not fit waits before reading it, so the kernel's
  socket buffers, not the broker's memory, hold what the clients send meanwhile.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import resource
import time

log = logging.getLogger(__name__)

#: how often a refusal is logged at most (with the count since the last line)
LOG_INTERVAL_S = 10.0


def file_limit() -> int:
    """The process's open-file limit, raised to its hard maximum if it is below."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def default_max_connections(files: int) -> int:
    """Connections a broker with `files` descriptors takes: a tenth of them (at least 256) stays in reserve."""
    return max(files - max(256, files // 10), 16)


class ConnectionLimits:
    """Counts open connections, in all and per client address, and says which new one to refuse."""

    def __init__(self, max_total: int, max_per_ip: int) -> None:
        self.max_total = max_total
        self.max_per_ip = max_per_ip if max_per_ip > 0 else 1 << 62
        self.total = 0
        self.per_ip: collections.Counter[str] = collections.Counter()
        self._refused = 0
        self._logged_at = 0.0

    def admit(self, ip: str) -> bool:
        """Count a new connection from `ip` in, or refuse it (False: close it; the refusal is logged)."""
        if self.total >= self.max_total:
            self._refuse(f"max.connections={self.max_total} reached")
            return False
        if self.per_ip[ip] >= self.max_per_ip:
            self._refuse(f"max.connections.per.ip={self.max_per_ip} reached for {ip}")
            return False
        self.total += 1
        self.per_ip[ip] += 1
        return True

    def release(self, ip: str) -> None:
        self.total -= 1
        self.per_ip[ip] -= 1
        if self.per_ip[ip] <= 0:
            del self.per_ip[ip]

    def _refuse(self, why: str) -> None:
        self._refused += 1
        now = time.monotonic()
        if now - self._logged_at >= LOG_INTERVAL_S:
            log.warning("refused %d new connection(s): %s (%d open)", self._refused, why, self.total)
            self._refused, self._logged_at = 0, now


class BytePool:
    """A budget of bytes for request frames being received; `acquire` waits until enough is free."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.free = capacity
        self._waiters: collections.deque[tuple[int, asyncio.Future]] = collections.deque()

    async def acquire(self, n: int) -> int:
        """Take `n` bytes (at most the whole budget), waiting in turn; returns what was taken."""
        n = min(n, self.capacity)
        if not self._waiters and self.free >= n:
            self.free -= n
            return n
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((n, fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(n)  # granted just as it was cancelled
            else:
                self._waiters = collections.deque(w for w in self._waiters if w[1] is not fut)
                self.release(0)  # (the ones behind it may fit now)
            raise
        return n

    def release(self, n: int) -> None:
        self.free += n
        while self._waiters and self._waiters[0][0] <= self.free:
            need, fut = self._waiters.popleft()
            if not fut.done():
                self.free -= need
                fut.set_result(None)
