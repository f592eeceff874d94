"""The paper's audit (§ 4): counts of messages per topic and time window, published by every tier.

A producer with `audit.enabled` stamps what it sends and counts it per (topic, window of
`audit.window.ms`). Each message carries its creation time as its record timestamp (CreateTime), and
the first record of each batch carries a header `kafkactl.audit.host` naming the producing host for
the whole batch. An audited batch never spans two windows: the producer closes a batch when the next
message belongs to the next window. A stamped batch therefore counts as a whole, in the window of its
base timestamp, without decoding its records. Stamping every record instead cost a 200-byte message
57 bytes and a quarter of the producer's throughput.

The mirror counts per window the stamped batches the target acknowledged, and spark-load counts what
it committed. Each tier publishes its counts to the topic `kafkactl-audit` of the cluster it wrote to
(or read from, for spark-load). There is one JSON message per (topic, window) and publication, keyed
by topic:

    {"tier": "produced" | "mirrored" | "loaded", "topic": "orders", "window_start": 1790000040000,
     "window_ms": 60000, "count": 1234, "host": "web-7", "client": "kafkactl-producer", "sent_ms": ...,
     "source": "<cluster id>", "target_topic": "dc1.orders"}  # the mirror's source cluster, target name

A window's counts may come in several messages, from several producers; `kafkactl audit` adds them
up and sets them against what the cluster holds (`broker.audit.reconcile`). Counts are published
when a window closes and at flush or close. A process killed before publishing loses its last
counts, and audit then reports more stored than produced.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from broker.errors import UsageError
from broker.records.batch import CONTROL_BIT, BatchHeader, Buffer, first_record_headers

AUDIT_TOPIC = "kafkactl-audit"
HOST_HEADER = "kafkactl.audit.host"
DEFAULT_WINDOW_MS = 60_000
TIERS = ("produced", "mirrored", "loaded")


def hostname() -> str:
    return os.environ.get("KAFKACTL_AUDIT_HOST") or socket.gethostname()


def window_of(timestamp: int, window_ms: int) -> int:
    """The start of the window holding `timestamp` (epoch ms)."""
    return timestamp - timestamp % window_ms


def stamped(buf: Buffer, pos: int, header: BatchHeader) -> bool:
    """Whether the batch at `pos` is an audited producer's (its first record names the host)."""
    if header.attributes & CONTROL_BIT:
        return False
    return any(k == HOST_HEADER for k, _ in first_record_headers(buf, pos, header))


def count_stamped(counts: dict[int, int], buf: Buffer, pos: int, header: BatchHeader, window_ms: int) -> None:
    """Add the batch at `pos` to `counts` (per window start) when it is stamped."""
    if stamped(buf, pos, header):
        w = window_of(header.base_timestamp, window_ms)
        counts[w] = counts.get(w, 0) + header.record_count


class WindowCounts:
    """Messages counted per (topic, window start), until taken for publishing."""

    __slots__ = ("window_ms", "counts", "oldest")

    def __init__(self, window_ms: int = DEFAULT_WINDOW_MS) -> None:
        if window_ms <= 0:
            raise UsageError(f"audit.window.ms must be positive, not {window_ms}")
        self.window_ms = window_ms
        self.counts: dict[tuple[str, int], int] = defaultdict(int)
        self.oldest: int | None = None  # the earliest window counted and not taken

    def add(self, topic: str, timestamp: int, count: int = 1) -> None:
        w = window_of(timestamp, self.window_ms)
        self.counts[(topic, w)] += count
        if self.oldest is None or w < self.oldest:
            self.oldest = w

    def add_windows(self, topic: str, windows: dict[int, int]) -> None:
        """Add counts already split by window start."""
        for w, n in windows.items():
            self.counts[(topic, w)] += n
            if self.oldest is None or w < self.oldest:
                self.oldest = w

    def due(self, now_ms: int) -> bool:
        """Whether a counted window has closed."""
        return self.oldest is not None and self.oldest + self.window_ms <= now_ms

    def take(self, now_ms: int | None = None) -> dict[tuple[str, int], int]:
        """The counts of windows closed by `now_ms` (all of them when None), forgotten here."""
        if now_ms is None:
            out, self.counts, self.oldest = dict(self.counts), defaultdict(int), None
            return out
        out = {k: n for k, n in self.counts.items() if k[1] + self.window_ms <= now_ms}
        for k in out:
            del self.counts[k]
        self.oldest = min((w for _, w in self.counts), default=None)
        return out


@dataclass(frozen=True)
class AuditRecord:
    """One published count."""

    tier: str
    topic: str
    window_start: int
    window_ms: int
    count: int
    host: str = ""
    client: str = ""
    sent_ms: int = 0
    source: str | None = None
    target_topic: str | None = None

    def encode(self) -> bytes:
        doc: dict[str, Any] = {"tier": self.tier, "topic": self.topic, "window_start": self.window_start,
                               "window_ms": self.window_ms, "count": self.count, "host": self.host,
                               "client": self.client, "sent_ms": self.sent_ms}  # fmt: skip
        if self.source is not None:
            doc["source"] = self.source
        if self.target_topic is not None:
            doc["target_topic"] = self.target_topic
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes | None) -> AuditRecord | None:
        """The record in an audit message; None for anything else (a stray message is skipped, not fatal)."""
        try:
            doc = json.loads(value or b"")
            rec = cls(str(doc["tier"]), str(doc["topic"]), int(doc["window_start"]), int(doc["window_ms"]),
                      int(doc["count"]), str(doc.get("host", "")), str(doc.get("client", "")),
                      int(doc.get("sent_ms", 0)), doc.get("source"), doc.get("target_topic"))  # fmt: skip
        except (ValueError, KeyError, TypeError):
            return None
        return rec if rec.tier in TIERS and rec.window_ms > 0 else None


def records(tier: str, counts: dict[tuple[str, int], int], window_ms: int, *, client: str,
            source: str | None = None, targets: dict[str, str] | None = None) -> list[AuditRecord]:  # fmt: skip
    """The audit records publishing `counts`; `targets` maps a mirrored topic to its name on the target."""
    now, host = int(time.time() * 1000), hostname()
    return [AuditRecord(tier, topic, w, window_ms, n, host, client, now, source, (targets or {}).get(topic))
            for (topic, w), n in sorted(counts.items()) if n]  # fmt: skip
