"""The log cleaner's crash-safe swap of a cleaned segment into its log, and its completion at start-up.

The cleaned group is written as `<base>.log.cleaned` (and `.index.cleaned`, `.timeindex.cleaned`,
`.txnindex.cleaned`), fsynced, then, under the partition's lock (`run_locked`: the broker's event loop),
renamed to `.swap` — the indexes first, the `.log` last: the `.log.swap` is the commit point — the old
segments after the first renamed to `.deleted`, and the `.swap` files renamed over the first old segment's
files (Kafka's way). The swap checks first that the segments it replaces are still the log's, unchanged
(retention, DeleteRecords or a follower's truncation may have removed them meanwhile: the clean is then
dropped).

Start-up (`recover_swaps`, run by the log manager before it loads a partition's log) finishes a swap whose
`.log.swap` exists (the old segments it covers are removed), rolls back one without it (`.cleaned` files and
orphan index `.swap`s are removed, the old segments stay) and removes `.deleted` files; a `.log.swap` that does
not scan whole is moved to quarantine (`.quarantined`) and the `.deleted` segments it would have replaced are
renamed back. This module imports no other part of the cleaner but its aborts, so the manager needs no more.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from broker.log.checkpoint import fsync_dir
from broker.log.cleaner_io import CleanAborted
from broker.log.log import PartitionLog
from broker.log.recovery import QUARANTINE_SUFFIX
from broker.log.scanner import Damage, scan
from broker.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, LogSegment, parse_segment_name, segment_name

CLEANED = ".cleaned"
SWAP = ".swap"
DELETED = ".deleted"
TXNINDEX_SUFFIX = ".txnindex"
#: the files of a segment, the `.log` last (the order a swap renames them in: the `.log` commits it)
SUFFIXES = (INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX, LOG_SUFFIX)


@dataclass
class CleanedSegment:
    """A group's cleaned segment, written as `.cleaned` files, not yet swapped in."""

    base: int
    group: list[LogSegment]
    sizes: list[int]
    paths: dict[str, Path] = field(default_factory=dict)  # suffix → its `.cleaned` file


def cleaned_path(directory: Path, base: int, suffix: str, state: str = CLEANED) -> Path:
    """The `state` (`.cleaned`, `.swap`) file of the segment file `base` + `suffix` in `directory`."""
    return directory / (segment_name(base, suffix) + state)


def remove_deleted(seg: LogSegment) -> None:
    """Remove the `.deleted` files a swap left of a replaced segment (once its descriptors are closed)."""
    for suffix in SUFFIXES:
        Path(str(seg.dir / segment_name(seg.base_offset, suffix)) + DELETED).unlink(missing_ok=True)


def swap_in(plog: PartitionLog, cleaned: CleanedSegment) -> list[LogSegment]:
    """Replace the group's segments by the cleaned one (the caller holds the partition's lock); returns the old
    segments, whose descriptors the caller closes later. Raises CleanAborted (the `.cleaned` files removed)
    when the group is no longer the log's as it was cleaned."""
    d = plog.dir
    group = cleaned.group
    active = plog.bases[-1]
    for seg, size in zip(group, cleaned.sizes, strict=True):
        if plog.segments.get(seg.base_offset) is not seg or seg.size != size or seg.base_offset == active:
            for p in cleaned.paths.values():
                p.unlink(missing_ok=True)
            raise CleanAborted(f"segment {seg.base_offset} of {d.name} changed during the clean")
    base = cleaned.base
    for suffix in SUFFIXES:  # .cleaned -> .swap, the .log last: from there on the swap completes at start-up
        if suffix in cleaned.paths:
            os.replace(cleaned.paths[suffix], cleaned_path(d, base, suffix, SWAP))
    fsync_dir(d)
    for seg in group[1:]:
        for suffix in SUFFIXES:
            p = d / segment_name(seg.base_offset, suffix)
            if p.exists():
                os.replace(p, p.with_name(p.name + DELETED))
    if len(group) > 1:  # (durable before the old names are reused: a crash must not bring them back live)
        fsync_dir(d)
    jitter = plog._roll_jitter_ms
    first_txn = d / segment_name(base, TXNINDEX_SUFFIX)
    if TXNINDEX_SUFFIX not in cleaned.paths:
        first_txn.unlink(missing_ok=True)
    for suffix in SUFFIXES:
        swap = cleaned_path(d, base, suffix, SWAP)
        if swap.exists():
            os.replace(swap, d / segment_name(base, suffix))
    fsync_dir(d)
    for seg in group:
        del plog.segments[seg.base_offset]
        plog.bases.remove(seg.base_offset)
    txn = getattr(plog, "txn_index", None)  # the aborted transactions in memory (broker/log/txn_index.py)
    if txn is not None:
        merged = [e for seg in group for e in txn.by_segment.pop(seg.base_offset, [])]
        if merged:
            txn.by_segment[base] = merged
    plog._open_segment(base)
    plog._roll_jitter_ms = jitter
    return group


def recover_swaps(directory: Path, clock: Callable[[], float] = time.time) -> list[str]:
    """Start-up: finish or roll back a swap the broker was stopped in; returns what it did (for the log)."""
    d = Path(directory)
    done: list[str] = []
    names = sorted(os.listdir(d))
    for name in names:
        if name.endswith(CLEANED):
            os.unlink(d / name)
            done.append(f"removed {name} (a clean that did not finish)")
    swaps = sorted(n for n in names if n.endswith(LOG_SUFFIX + SWAP))
    for name in swaps:
        base = parse_segment_name(name[: -len(SWAP)])
        assert base is not None
        path = d / name
        items = list(scan(path.read_bytes(), 0, verify_crc=True))
        bad = next((i for i in items if isinstance(i, Damage) or not i.crc_ok), None)
        if bad is not None:  # roll back: the old segments come back, the swap goes to quarantine
            for suffix in SUFFIXES:
                swap = cleaned_path(d, base, suffix, SWAP)
                if swap.exists():
                    os.replace(swap, swap.with_name(f"{swap.name}.{int(clock() * 1000)}{QUARANTINE_SUFFIX}"))
            # only the old segments this swap covers come back: those `.deleted` above its base, below the next
            # live segment (an earlier group's swap completed: its `.deleted` segments stay deleted)
            live = [b for b in (parse_segment_name(n) for n in os.listdir(d)) if b is not None and b > base]
            upto = min(live, default=None)
            for deleted in sorted(n for n in os.listdir(d) if n.endswith(DELETED)):
                b = parse_segment_name(deleted[: -len(DELETED)].rsplit(".", 1)[0] + LOG_SUFFIX)
                if b is not None and base < b and (upto is None or b < upto):
                    os.replace(d / deleted, d / deleted[: -len(DELETED)])
            done.append(f"{name} does not scan whole: quarantined, the swap rolled back")
            continue
        next_offset = max((i.last_offset + 1 for i in items), default=base)
        for other in list(os.listdir(d)):
            b = parse_segment_name(other)
            if b is not None and base < b < next_offset:
                for suffix in SUFFIXES:
                    (d / segment_name(b, suffix)).unlink(missing_ok=True)
        for suffix in SUFFIXES:
            swap = cleaned_path(d, base, suffix, SWAP)
            if swap.exists():
                os.replace(swap, d / segment_name(base, suffix))
        done.append(f"completed the swap of cleaned segment {base} (offsets up to {next_offset - 1})")
    for name in sorted(os.listdir(d)):
        if name.endswith(SWAP):  # an index .swap whose .log never reached .swap: the swap had not begun
            os.unlink(d / name)
            done.append(f"removed {name} (a swap that had not begun)")
        elif name.endswith(DELETED):
            os.unlink(d / name)
    if done:
        fsync_dir(d)
    return done
