"""Counting a tier from what a cluster holds, and publishing counts to its audit topic.

`count_ranges` reads offset ranges as raw batches and counts the stamped ones per window without
decoding their records (`broker.audit.counts.count_stamped`); only a batch cut by a range's edge is
decoded, to count the records inside the range. `kafkactl audit` counts the stored tiers with it,
and spark-load counts what it committed. It reads read_committed, as the mirror and spark-load do:
aborted transactions' records and the transaction markers are no messages of any tier.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict

from broker.audit.counts import AUDIT_TOPIC, AuditRecord, count_stamped, stamped, window_of
from broker.audit.topic import ensure_audit_topic_async
from broker.client.consumer import RawConsumer
from broker.client.producer import AsyncProducer
from broker.errors import KafkactlError
from broker.records.batch import decode_records
from broker.records.record_set import batches

TopicPartition = tuple[str, int]
#: (topic, partition, first offset, end offset exclusive)
Range = tuple[str, int, int, int]


async def count_ranges(bootstrap: str, ranges: list[Range], window_ms: int,
                       timeout_s: float = 300.0) -> dict[tuple[str, int], int]:  # fmt: skip
    """Stamped messages per (topic, window start) within the offset ranges."""
    counts: dict[tuple[str, int], int] = defaultdict(int)
    wanted = {(t, p): (s, e) for t, p, s, e in ranges if e > s}
    if not wanted:
        return counts
    async with RawConsumer(bootstrap, auto_offset_reset="earliest", client_id="kafkactl-audit",
                           max_partition_fetch_bytes=4 << 20, isolation_level=1) as c:  # fmt: skip
        await c.assign(list(wanted))
        done = {tp: s for tp, (s, _) in wanted.items()}
        for tp, s in done.items():
            c.seek(tp, s)
        deadline = time.monotonic() + timeout_s
        while any(done[tp] < wanted[tp][1] for tp in wanted):
            if time.monotonic() > deadline:
                raise KafkactlError(f"counting the audited messages at {bootstrap} took over {timeout_s:g}s")
            for tp, sets in (await c.getmany(timeout_ms=500)).items():
                start, end = wanted[tp]
                per_window: dict[int, int] = {}
                for rs in sets:
                    buf = rs.data
                    for pos, h in batches(buf):
                        if h.last_offset >= done[tp] and h.base_offset < end:
                            if h.base_offset >= start and h.last_offset < end:
                                count_stamped(per_window, buf, pos, h, window_ms)
                            elif stamped(buf, pos, h):  # cut by the range: count its records inside
                                inside = sum(1 for r in decode_records(buf, pos, h) if start <= r.offset < end)
                                w = window_of(h.base_timestamp, window_ms)
                                per_window[w] = per_window.get(w, 0) + inside
                            done[tp] = h.next_offset
                    done[tp] = max(done[tp], rs.next_offset)
                for w, n in per_window.items():
                    counts[(tp[0], w)] += n
            for tp in wanted:  # past record sets left with no batch (all aborted or markers): never handed out
                if tp not in c.buffers:
                    done[tp] = max(done[tp], c.position(tp) or 0)
    return counts


async def publish(bootstrap: str, records: list[AuditRecord]) -> None:
    """Send `records` to the cluster's audit topic (acks=all, idempotent) and wait until they are stored."""
    if not records:
        return
    with contextlib.suppress(KafkactlError):  # (refused: the producer's auto-creation is asked next)
        await ensure_audit_topic_async(bootstrap)
    async with AsyncProducer(bootstrap, acks="all", client_id="kafkactl-audit") as producer:
        for rec in records:
            await producer.send(AUDIT_TOPIC, rec.encode(), key=rec.topic.encode())
        await producer.flush()


def count_and_publish(bootstrap: str, tier: str, ranges: list[Range], window_ms: int, *, client: str) -> int:
    """Count the stamped messages of `ranges` per window and publish them as `tier`; returns how many."""
    from broker.audit.counts import records

    async def main() -> int:
        counts = await count_ranges(bootstrap, ranges, window_ms)
        await publish(bootstrap, records(tier, dict(counts), window_ms, client=client))
        return sum(counts.values())

    return asyncio.run(main())
