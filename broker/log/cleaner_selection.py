"""What the log cleaner cleans: a log's dirty section, its dirty ratio, the compaction lags, the dirtiest log.

A log's cleanable section runs from its first dirty offset (its cleaner checkpoint) to the first
*uncleanable* offset: the active segment's base, or the base of the first segment holding a record younger
than `min.compaction.lag.ms`, whichever is lower (and never the segment holding the high watermark, or
above). Dirty ratio = cleanable bytes / (clean + cleanable bytes) (whole segments, as Kafka counts them). The
log with the highest ratio over `min.cleanable.dirty.ratio` goes first; a log whose oldest dirty record is past
`max.compaction.lag.ms` is cleaned whatever its ratio.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from broker.log.checkpoint import TopicPartition
from broker.log.log import PartitionLog


@dataclass
class Cleanable:
    """Where a log's dirty section lies and how dirty it is (Kafka's LogToClean)."""

    first_dirty: int
    uncleanable: int  # the first offset the cleaner may not touch
    clean_bytes: int
    cleanable_bytes: int
    must_clean: bool  # max.compaction.lag.ms passed for its oldest dirty record

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


def cleanable(plog: PartitionLog, checkpoint: int | None, now_ms: int, stable_end: int | None = None) -> Cleanable:
    """The cleanable section of `plog` given its checkpointed first dirty offset (None: none yet). With
    `stable_end` (the high watermark), no segment holding it or anything above is cleaned or mapped, as
    Kafka's cleaner stops below it: a record a new leader may truncate away must not replace an older one."""
    bases = list(plog.bases)
    segments = dict(plog.segments)
    start = plog.log_start_offset
    first_dirty = checkpoint if checkpoint is not None and start <= checkpoint <= plog.log_end_offset else start
    cfg = plog.config
    uncleanable = bases[-1]  # the active segment
    if stable_end is not None:
        uncleanable = min(uncleanable, bases[max(bisect.bisect_right(bases, stable_end) - 1, 0)])
    lag = cfg.min_compaction_lag_ms
    i = max(bisect.bisect_right(bases, first_dirty) - 1, 0)
    must = False
    for base in bases[i:-1]:
        seg = segments[base]
        if lag > 0 and seg.max_timestamp > now_ms - lag:
            uncleanable = base
            break
        if seg.size and 0 <= seg.first_timestamp < now_ms - cfg.max_compaction_lag_ms:
            must = True
    uncleanable = max(uncleanable, first_dirty)
    clean = sum(segments[b].size for b in bases[:i])
    dirty = sum(segments[b].size for b in bases[i:] if b < uncleanable)
    return Cleanable(first_dirty, uncleanable, clean, dirty, must and dirty > 0)


def dirtiest(logs: Iterable[tuple[TopicPartition, PartitionLog]], checkpoint_of: Callable[[TopicPartition], int | None],
             now_ms: int, stable_end: Callable[[PartitionLog], int] | None = None,
             ) -> tuple[TopicPartition, PartitionLog, Cleanable] | None:  # fmt: skip
    """The log of `logs` (the compacted ones the cleaner may take) to clean next, with its cleanable section
    (Kafka's grabFilthiestCompactedLog), or None. `checkpoint_of`: a log's first dirty offset, or None;
    `stable_end`: its high watermark as stored (None: the whole log is stable)."""
    best = None
    for tp, plog in logs:
        end = stable_end(plog) if stable_end is not None else None
        c = cleanable(plog, checkpoint_of(tp), now_ms, end)
        if c.cleanable_bytes <= 0:
            continue
        if (c.must_clean or c.ratio > plog.config.min_cleanable_dirty_ratio) and (
                best is None or c.ratio > best[2].ratio):  # fmt: skip
            best = (tp, plog, c)
    return best
