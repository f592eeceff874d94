"""The follower's replication throttle: a byte rate for the copies a reassignment makes.

Kafka's `follower.replication.throttled.rate` (bytes/s, a broker's dynamic config) caps what a broker
fetches for the replicas `follower.replication.throttled.replicas` names; the fetcher leaves those
partitions out of its fetches while the rate is spent, so the ones not throttled go on at full speed.
"""

from __future__ import annotations

import time


class Throttle:
    """A byte budget refilled at `rate` bytes/s, at most one second's worth ahead."""

    def __init__(self, rate: int | None = None) -> None:
        self.rate = rate  # None: no throttle
        self._budget = 0.0
        self._at = time.monotonic()

    def set_rate(self, rate: int | None) -> None:
        self.rate = rate if rate is not None and rate > 0 else None
        self._budget, self._at = 0.0, time.monotonic()

    def _refill(self, now: float) -> None:
        if self.rate is not None:
            self._budget = min(self._budget + (now - self._at) * self.rate, float(self.rate))
        self._at = now

    def took(self, nbytes: int, now: float | None = None) -> None:
        """`nbytes` of throttled copies were fetched."""
        if self.rate is not None:
            self._refill(time.monotonic() if now is None else now)
            self._budget -= nbytes

    def wait_s(self, now: float | None = None) -> float:
        """How long throttled partitions must sit out before the next fetch (0: they may go now)."""
        if self.rate is None:
            return 0.0
        self._refill(time.monotonic() if now is None else now)
        return 0.0 if self._budget >= 0 else -self._budget / self.rate
