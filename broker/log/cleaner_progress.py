"""The log cleaner's progress: its checkpoint file, and what `kafkactl inspect cleaner` reads from the files.

The cleaner's progress is `cleaner-offset-checkpoint` in each log dir, in Kafka's checkpoint format
(`broker.log.checkpoint`): topic, partition, first dirty offset. A removed log's line goes from it (a topic
re-created under the same name starts dirty), and a truncation below a log's checkpoint lowers it to the
new log end (what is appended there again is dirty).
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from broker.log.checkpoint import CheckpointError, OffsetCheckpointFile, TopicPartition, read_or_set_aside
from broker.log.cleaner_io import segment_batches
from broker.log.cleaner_swap import CLEANED, DELETED, SWAP
from broker.log.log import parse_partition_dir
from broker.log.manager import is_log_dir
from broker.log.scanner import Damage
from broker.log.segment import parse_segment_name, segment_name

if TYPE_CHECKING:
    from broker.log.cleaner import CleanStats

CHECKPOINT = "cleaner-offset-checkpoint"


@dataclass
class PartitionProgress:
    """The cleaner's knowledge of one log, as `kafkactl inspect cleaner` shows it."""

    checkpoint: int | None = None
    last_clean: CleanStats | None = None
    last_clean_ms: int = -1
    last_error: str | None = None


def read_checkpoints(d: Path, clock: Callable[[], float]) -> dict[TopicPartition, int]:
    """The first dirty offsets of log dir `d`'s logs (a corrupt file is set aside: those logs start dirty)."""
    return read_or_set_aside(d / CHECKPOINT, clock, "the logs are cleaned from their start again")


def write_checkpoints(d: Path, offsets: dict[TopicPartition, int]) -> None:
    """Rewrite log dir `d`'s checkpoint file with `offsets` (one writer at a time: the caller's lock)."""
    OffsetCheckpointFile(d / CHECKPOINT).write(offsets)


def progress_events(paths: list[Path]) -> Iterator[dict]:
    """What `kafkactl inspect cleaner` reports, read from the files alone (a running broker's dirs too): per
    compacted-or-not partition under `paths` (log dirs or partition dirs), its cleaner checkpoint (first dirty
    offset), offsets, clean and dirty bytes and dirty ratio by segment (as the cleaner counts them, before
    `min.compaction.lag.ms`), when the checkpoint was last written, and any `.cleaned`/`.swap`/`.deleted`
    file a clean left (start-up finishes or removes them). Then a summary."""
    parts: list[Path] = []
    for path in paths:
        if path.is_dir() and parse_partition_dir(path.name) and any(parse_segment_name(n) for n in os.listdir(path)):
            parts.append(path)
        elif path.is_dir() and (is_log_dir(path) or (path / CHECKPOINT).exists()):
            parts += sorted(p for p in path.iterdir() if p.is_dir() and parse_partition_dir(p.name))
        else:
            yield {"type": "error", "path": str(path), "message": "not a log dir or partition dir"}
    total = {"type": "summary", "partitions": 0, "with_checkpoint": 0, "leftovers": 0}
    for part in parts:
        tp = parse_partition_dir(part.name)
        assert tp is not None
        ckpt_path = part.parent / CHECKPOINT
        try:
            checkpoint = OffsetCheckpointFile(ckpt_path).read().get(tp)
        except CheckpointError as exc:
            yield {"type": "error", "path": str(ckpt_path), "message": str(exc)}
            checkpoint = None
        bases = sorted(b for b in (parse_segment_name(n) for n in os.listdir(part)) if b is not None)
        sizes = [os.path.getsize(part / segment_name(b)) for b in bases]
        log_end = bases[-1] if bases else 0
        if bases:
            last_path = part / segment_name(bases[-1])
            for _, item in segment_batches(last_path, last_path.stat().st_size):
                if not isinstance(item, Damage):
                    log_end = item.last_offset + 1
        first_dirty = checkpoint if checkpoint is not None and bases and bases[0] <= checkpoint else (
            bases[0] if bases else 0)  # fmt: skip
        i = max(bisect.bisect_right(bases, first_dirty) - 1, 0)
        clean, dirty = sum(sizes[:i]), sum(sizes[i:-1])
        leftovers = sorted(n for n in os.listdir(part) if n.endswith((CLEANED, SWAP, DELETED)))
        total["partitions"] += 1
        total["with_checkpoint"] += checkpoint is not None
        total["leftovers"] += len(leftovers)
        yield {
            "type": "partition", "partition_dir": str(part), "topic": tp[0], "partition": tp[1],
            "cleaner_checkpoint": checkpoint, "log_start": bases[0] if bases else 0, "log_end": log_end,
            "segments": len(bases), "clean_bytes": clean, "dirty_bytes": dirty,
            "dirty_ratio": round(dirty / (clean + dirty), 4) if clean + dirty else 0.0,
            "checkpointed_ms": int(ckpt_path.stat().st_mtime * 1000) if checkpoint is not None else None,
            "leftovers": leftovers,
        }  # fmt: skip
    yield total
