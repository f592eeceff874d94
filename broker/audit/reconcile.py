"""`kafkactl audit`: the tiers' counts set against each other, per topic and window.

The tiers, in the order messages pass them:

    produced       counts the producers published to the source cluster's audit topic
    stored         messages of the topic the source cluster holds, counted here by reading them
    mirrored       counts a mirror published to the target cluster's audit topic (with --mirror)
    mirror-stored  messages of the topic's copy the target holds, counted here (with --mirror)
    loaded         counts spark-load published after each committed load (to the cluster it read)

A window is settled once it ended more than `grace` ago. A settled window whose tiers disagree is
a loss (a tier has fewer than the one before it) or a duplication (more), named with the two tiers
between which it happened; but where retention has cut a log, a loss at or before the first window the
log still holds is "expired", since that log no longer holds all of it. Loads run now and then, so
fewer loaded than stored is a load still to come, not a loss. Every tier counts only the batches an
audited producer stamped (`broker.audit.counts`), each in the window of its base timestamp: messages of
producers without `audit.enabled` are left out. The stored tiers count committed data only, below the
last stable offset (as the mirror copies it): aborted transactions' records and markers are not messages.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from dataclasses import dataclass, field

from broker.audit.counts import AUDIT_TOPIC, AuditRecord
from broker.audit.scan import count_ranges
from broker.client.consumer import AsyncConsumer, RawConsumer
from broker.errors import KafkactlError

TIER_ORDER = ("produced", "stored", "mirrored", "mirror-stored", "loaded")


@dataclass
class WindowRow:
    topic: str
    window_start: int
    window_ms: int
    counts: dict[str, int | None] = field(default_factory=dict)
    status: str = "ok"
    problem: str | None = None  # "lost" or "duplicated" (settled windows only)
    detail: str = ""

    def to_json(self) -> dict:
        counts = {t: self.counts.get(t) for t in TIER_ORDER}
        return {
            "topic": self.topic,
            "window_start": self.window_start,
            "window_ms": self.window_ms,
            **counts,
            "status": self.status,
            "detail": self.detail,
        }


async def _audit_records(bootstrap: str) -> tuple[list[AuditRecord], str | None]:
    """Every count published to the cluster's audit topic (none when it has no audit topic), and the cluster's
    id."""
    out: list[AuditRecord] = []
    async with AsyncConsumer(bootstrap, auto_offset_reset="earliest", client_id="kafkactl-audit") as c:
        cluster_id = c.cluster.cluster_id
        try:
            parts = await c.partitions_for(AUDIT_TOPIC)
        except KafkactlError as exc:
            if "UNKNOWN_TOPIC" in str(exc):
                return out, cluster_id
            raise
        tps = [(AUDIT_TOPIC, p) for p in parts]
        await c.assign(tps)
        ends = await c.end_offsets(tps)
        while any((c.position(tp) or 0) < ends[tp] for tp in tps):
            for recs in (await c.getmany(timeout_ms=500, max_records=100_000)).values():
                for r in recs:
                    rec = AuditRecord.decode(r.value) if r.offset < ends[(r.topic, r.partition)] else None
                    if rec is not None:
                        out.append(rec)
    return out, cluster_id


async def _stored(bootstrap: str, topic: str, window_ms: int) -> tuple[dict[int, int], bool]:
    """Stamped messages of `topic` per window (none when the cluster has no such topic), and whether retention
    has removed the start of its log."""
    async with RawConsumer(bootstrap, client_id="kafkactl-audit", isolation_level=1) as c:  # ends: last stable
        try:
            parts = await c.partitions_for(topic)
        except KafkactlError as exc:
            if "UNKNOWN_TOPIC" in str(exc):
                return {}, False
            raise
        tps = [(topic, p) for p in parts]
        starts, ends = await c.beginning_offsets(tps), await c.end_offsets(tps)
    counts = await count_ranges(bootstrap, [(t, p, starts[(t, p)], ends[(t, p)]) for t, p in tps], window_ms)
    return {w: n for (_, w), n in counts.items()}, any(starts.values())


async def _reconcile(source: str, mirror: str | None, topics: list[str] | None, grace_ms: int,
                     now_ms: int) -> list[WindowRow]:  # fmt: skip
    published, source_id = await _audit_records(source)
    downstream = (await _audit_records(mirror))[0] if mirror else []
    tiers: dict[tuple[str, int], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    window_ms: dict[str, int] = {}
    targets: dict[str, str] = {}
    own = [(rec, False) for rec in published] + [(rec, True) for rec in downstream]
    for rec, from_mirror in own:
        if topics is not None and rec.topic not in topics:
            continue
        if rec.tier == "mirrored" and (not from_mirror or rec.source not in (source_id, source)):
            continue  # a mirror out of this cluster into another, or into the target from another cluster
        if rec.tier == "produced" and from_mirror:
            continue  # producers writing to the target itself: another pipeline
        window_ms.setdefault(rec.topic, rec.window_ms)
        if rec.window_ms != window_ms[rec.topic]:
            continue  # counted in other windows than the topic's first audit record: not comparable
        tiers[(rec.topic, rec.window_start)][rec.tier] += rec.count
        if rec.tier == "mirrored" and rec.target_topic:
            targets[rec.topic] = rec.target_topic
    for topic in topics or []:
        if topic not in window_ms:
            raise KafkactlError(f"no audit counts of topic {topic!r} in {AUDIT_TOPIC} at {source}")
    expired: dict[str, int] = {}  # per topic: windows before this one were partly removed by retention
    for topic, wms in sorted(window_ms.items()):
        stored, trimmed = await _stored(source, topic, wms)
        copy, copy_trimmed = (await _stored(mirror, targets.get(topic, topic), wms)) if mirror else ({}, False)
        for w, n in stored.items():
            tiers[(topic, w)]["stored"] += n
        for w, n in copy.items():
            tiers[(topic, w)]["mirror-stored"] += n
        firsts = [min(c) if c else None for c, t in ((stored, trimmed), (copy, copy_trimmed)) if t]
        if firsts:
            expired[topic] = max((f for f in firsts if f is not None), default=now_ms)
    loaded = {topic for (topic, _), found in tiers.items() if "loaded" in found}
    rows = []
    for (topic, w), found in sorted(tiers.items()):
        counts: dict[str, int | None] = {t: found.get(t, 0) for t in ("produced", "stored")}
        for t in ("mirrored", "mirror-stored"):
            counts[t] = found.get(t, 0) if mirror else None
        counts["loaded"] = found.get("loaded", 0) if topic in loaded else None
        row = _judge(WindowRow(topic, w, window_ms[topic], counts), now_ms, grace_ms)
        if row.problem == "lost" and w <= expired.get(topic, -1):  # the log no longer holds it all: not a loss
            row.status, row.problem = "expired", None
            row.detail = "retention removed the start of the log; this window is no longer all there"
        rows.append(row)
    return rows


def _judge(row: WindowRow, now_ms: int, grace_ms: int) -> WindowRow:
    """Set the row's status: ok, in flight (not settled yet), lost or duplicated (with where)."""
    chain = [(t, n) for t, n in row.counts.items() if n is not None and t != "loaded"]
    for (a, na), (b, nb) in zip(chain, chain[1:], strict=False):
        if nb != na:
            row.problem = "lost" if nb < na else "duplicated"
            row.detail = (f"{na - nb} lost between {a} and {b}" if nb < na
                          else f"{nb - na} more {b} than {a}")  # fmt: skip
            break
    loaded = row.counts.get("loaded")
    last = chain[-1][1] if chain else 0
    if row.problem is None and loaded is not None and loaded > last:
        row.problem, row.detail = "duplicated", f"{loaded - last} more loaded than {chain[-1][0]}"
    if row.problem is None:
        row.status = "ok" if loaded is None or loaded == last else "ok (partly loaded)"
    elif row.window_start + row.window_ms + grace_ms > now_ms:
        row.status, row.problem = "in flight", None
    else:
        row.status = row.problem
    return row


def reconcile(source: str, *, mirror: str | None = None, topics: list[str] | None = None,
              grace_ms: int = 120_000, now_ms: int | None = None) -> list[WindowRow]:  # fmt: skip
    """One row per audited (topic, window), oldest first."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return asyncio.run(_reconcile(source, mirror, topics, grace_ms, now))
