"""CRC recovery of a partition log: plan what to cut, then cut it into quarantine files.

Broker start-up after an unclean stop and `kafkactl recover` share this module, and both read the
segments through the one scanner (`broker.log.scanner`). Planning walks every segment from the
recovery point; a batch is valid when its framing holds, it passes its own format's checks (RecordBatch
v2: CRC-32C; magic 0/1 message sets, as Apache Kafka wrote them before 0.11 and an upgraded cluster's
logs still hold: CRC-32, and a compressed wrapper's records decode) and its offsets move forward; magic
0, 1 and 2 batches may follow one another in any order. Healthy data is never cut. At the first
invalid batch:

- plain recovery (Kafka's rule) keeps the valid prefix and cuts the rest of that segment and every
  later segment;
- salvage cuts only the damaged region, up to the next batch that frames, checksums and continues
  the offsets, and goes on from there.

Damage is "tail" when no valid batch follows it anywhere in the partition (a torn final write) and
"mid-log" otherwise. Executing a plan never deletes a byte: every cut range is first copied to a
quarantine file, `<segment>.log.<start>-<end>.quarantined` beside the segment or under a chosen
quarantine dir, and whole segments are moved there; indexes of touched segments are rebuilt.

Recovery stays inside the dir it was given (the log dir holding the partition, or a dir passed as
`root`): a partition dir that resolves outside it, or a segment or index file it would write, truncate
or move that resolves outside its partition dir (a symlink), makes the plan `refused` — executing it
leaves the whole partition as it is, and says so in one line.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from broker.log.index import IndexCorruptError
from broker.log.scanner import Damage, ScannedBatch, find_next_batch, open_segment, scan
from broker.log.segment import INDEX_SUFFIX, TIMEINDEX_SUFFIX, LogSegment, parse_segment_name, segment_name
from broker.records.batch import LOG_OVERHEAD, Buffer

log = logging.getLogger(__name__)
QUARANTINE_SUFFIX = ".quarantined"
DEFAULT_INDEX_INTERVAL = 4096  # index.interval.bytes when the partition's own setting is not known
MAX_LOGGED_SEGMENTS = 10  # whole segments a start-up line names one by one; the rest are counted


@dataclass
class Cut:
    """A byte range of a segment to move into quarantine, and why."""

    start: int
    end: int
    reason: str
    quarantine: Path | None = None  # where its bytes went, once executed


@dataclass
class SegmentPlan:
    """What recovery found in one segment and what it would do."""

    path: Path
    base_offset: int
    size: int
    valid_bytes: int = 0  # length of the valid prefix
    first_bad_position: int | None = None
    reason: str | None = None
    kind: str | None = None  # "tail" or "mid-log"
    cuts: list[Cut] = field(default_factory=list)
    kept: list[ScannedBatch] = field(default_factory=list)
    dropped: bool = False  # the whole segment follows damage and goes to quarantine
    index_problem: str | None = None
    moved: list[Path] = field(default_factory=list)  # a dropped segment's files in quarantine (.log first)

    @property
    def cut_bytes(self) -> int:
        return self.size if self.dropped else sum(c.end - c.start for c in self.cuts)

    @property
    def needs_cut(self) -> bool:
        return self.dropped or bool(self.cuts)


@dataclass
class PartitionPlan:
    """The recovery plan of one partition dir."""

    dir: Path
    salvage: bool
    segments: list[SegmentPlan] = field(default_factory=list)
    lost: list[tuple[int, int | None]] = field(default_factory=list)  # inclusive ranges; None: open end
    next_offset: int = 0  # log end offset after recovery
    outside: list[tuple[Path, Path]] = field(default_factory=list)  # (entry, where it resolves) outside the dir
    refused: str | None = None  # why executing leaves this partition alone (it would write outside)

    @property
    def needs_cut(self) -> bool:
        return any(s.needs_cut for s in self.segments)

    @property
    def needs_index_rebuild(self) -> bool:
        return any(s.index_problem for s in self.segments)


def segment_files(directory: Path) -> list[tuple[int, Path]]:
    """The segments of a partition dir as (base offset, path), sorted."""
    out = []
    for entry in os.scandir(directory):
        base = parse_segment_name(entry.name)
        if base is not None and entry.is_file():
            out.append((base, Path(entry.path)))
    return sorted(out)


def plan_partition(
    directory: Path, *, salvage: bool = False, from_offset: int = 0, root: Path | None = None
) -> PartitionPlan:
    """Scan the segments holding offsets >= `from_offset` and plan their recovery. The plan is refused
    when it would write outside `root` (default: the dir holding `directory`) or outside `directory`."""
    directory = Path(directory)
    plan = PartitionPlan(directory, salvage)
    segments = segment_files(directory)
    start = 0
    for i, (base, _) in enumerate(segments):
        if base <= from_offset:
            start = i
    expected = segments[start][0] if segments else from_offset
    damaged_at: int | None = None  # plain recovery: everything after the first damage goes
    highest_cut = -1
    lost = _LostRanges(plan.lost)
    for base, path in segments[start:]:
        sp = SegmentPlan(path, base, path.stat().st_size)
        plan.segments.append(sp)
        if damaged_at is not None and not salvage:
            sp.dropped = True
            with open_segment(path) as buf:
                highest_cut = max(highest_cut, _highest_offset(buf, 0, sp.size))
            continue
        expected = max(expected, base)
        with open_segment(path) as buf:
            expected = _plan_segment(sp, buf, expected, lost, salvage)
            if sp.first_bad_position is not None and not salvage:
                damaged_at = expected
                highest_cut = _highest_offset(buf, sp.first_bad_position, sp.size)
        sp.index_problem = None if sp.cuts else _check_indexes(sp, path)  # a cut segment is reindexed anyway
    lost.finish()
    if damaged_at is not None:
        plan.lost.append((damaged_at, highest_cut if highest_cut >= damaged_at else None))
    _classify(plan)
    plan.next_offset = expected
    _confine(plan, directory.parent if root is None else Path(root))
    return plan


def recover(directory: Path, *, from_offset: int, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL) -> PartitionPlan:
    """Start-up recovery of a partition after an unclean stop: plan from the recovery point, carry the
    plan out, and log one WARNING line if it cut anything (what, where it went, the offsets lost)."""
    plan = plan_partition(directory, from_offset=from_offset)
    if plan.needs_cut or plan.needs_index_rebuild:
        execute(plan, index_interval_bytes=index_interval_bytes)
        if plan.needs_cut and not plan.refused:
            log.warning("%s", describe_cuts(plan))
    return plan


def format_lost(ranges: list[tuple[int, int | None]]) -> str:
    """Inclusive offset ranges as `a-b, c-…` (an open end: no whole batch told where the cut data ended)."""
    return ", ".join(f"{a}-{b}" if b is not None else f"{a}-…" for a, b in ranges if b is None or b >= a) or "none"


def describe_cuts(plan: PartitionPlan) -> str:
    """One line saying what an executed plan cut: offsets lost, and per segment the byte ranges, why, and
    the quarantine file each went to."""
    parts, dropped = [], [sp for sp in plan.segments if sp.dropped and sp.moved]
    for sp in plan.segments:
        for cut in sp.cuts:
            kind = f"{sp.kind} damage" if sp.kind else "damage"
            parts.append(f"{sp.path.name} bytes {cut.start}-{cut.end} ({kind}: {cut.reason}) -> {cut.quarantine}")
    for sp in dropped[:MAX_LOGGED_SEGMENTS]:
        parts.append(f"{sp.path.name} bytes 0-{sp.size} (whole segment after the damage) -> {sp.moved[0]}")
    if len(dropped) > MAX_LOGGED_SEGMENTS:
        rest = dropped[MAX_LOGGED_SEGMENTS:]
        parts.append(f"{len(rest)} more whole segments ({sum(sp.size for sp in rest)} bytes, "
                     f"{rest[0].path.name} to {rest[-1].path.name}) -> {rest[0].moved[0].parent}")  # fmt: skip
    return (
        f"{plan.dir.name}: recovery after an unclean stop cut offsets {format_lost(plan.lost)} "
        f"(log end offset now {plan.next_offset}): " + "; ".join(parts)
    )


def resolves_outside(path: Path, root: Path) -> Path | None:
    """Where `path` resolves when that is outside `root` (both through every symlink), else None."""
    real, top = Path(os.path.realpath(path)), Path(os.path.realpath(root))
    return None if real.is_relative_to(top) else real


def _confine(plan: PartitionPlan, root: Path) -> None:
    """Note the entries that resolve outside, and refuse the plan if it would touch one of them."""
    d = plan.dir
    target = resolves_outside(d, root)
    if target is not None:
        plan.outside.append((d, target))
        plan.refused = f"{d} resolves to {target}, outside {root}"
        return
    for sp in plan.segments:
        touched = sp.needs_cut or sp.index_problem
        for p in (sp.path, *_index_paths(sp)):
            if not os.path.lexists(p) or (target := resolves_outside(p, d)) is None:
                continue
            plan.outside.append((p, target))
            if touched and plan.refused is None:
                plan.refused = f"{p} resolves to {target}, outside {d}"


class _LostRanges:
    """The offsets salvage loses: a range opens at a damage and closes at the next kept batch, which may
    sit in a later segment; a range still open at the end of the partition has no known end (None)."""

    def __init__(self, out: list[tuple[int, int | None]]) -> None:
        self.out = out
        self.start: int | None = None

    def damage(self, expected: int) -> None:
        if self.start is None:
            self.start = expected

    def kept(self, base_offset: int) -> None:
        if self.start is not None:
            if base_offset > self.start:
                self.out.append((self.start, base_offset - 1))
            self.start = None

    def finish(self) -> None:
        if self.start is not None:
            self.out.append((self.start, None))
            self.start = None


def _plan_segment(sp: SegmentPlan, buf, expected: int, lost: _LostRanges, salvage: bool) -> int:
    """Fill `sp` from a scan of `buf`; returns the next offset expected after the kept batches.

    With salvage, scanning resumes after each damaged region and each region's lost offsets go to `lost`.
    """
    pos = 0
    while pos < sp.size:
        bad_reason = None
        for item in scan(buf, pos):
            if isinstance(item, Damage):
                bad_reason, pos = item.reason, item.position
                break
            problem = _invalid(item, expected)
            if problem:
                bad_reason, pos = problem, item.position
                break
            sp.kept.append(item)
            if salvage:
                lost.kept(item.base_offset)
            expected = item.last_offset + 1
            pos = item.end
        if bad_reason is None:
            break
        if sp.first_bad_position is None:
            sp.first_bad_position, sp.reason, sp.valid_bytes = pos, bad_reason, pos
        resume = find_next_batch(buf, pos, sp.size, min_offset=expected) if salvage else None
        sp.cuts.append(Cut(pos, sp.size if resume is None else resume, bad_reason))
        if salvage:
            lost.damage(expected)  # closed by the next kept batch, in this segment or a later one
        if resume is None:
            break
        pos = resume
    if sp.first_bad_position is None:
        sp.valid_bytes = sp.size
    return expected


def _highest_offset(buf, start: int, end: int) -> int:
    """The highest offset of any checksummed batch in buf[start:end] (-1 if none): what a cut loses."""
    if _runs_past_the_end(buf, start, end):
        return -1  # a torn final write: what checks inside it is its own content
    highest, pos = -1, start - 1  # find_next_batch looks after `pos`: a batch at `start` counts
    while (found := find_next_batch(buf, pos, end)) is not None:
        item = next(scan(buf, found, end))  # a batch that frames and checks: find_next_batch saw to it
        highest = max(highest, item.last_offset)
        pos = item.end - 1  # the search starts one byte after `pos`
    return highest


def _invalid(item: ScannedBatch, expected: int) -> str | None:
    """Why a batch may not stay: it fails its own format's checks (any magic may follow any other, as in
    Kafka's logs), or its offsets go backwards."""
    reason = item.invalid_reason
    if reason:
        return reason
    if item.base_offset < expected:
        return f"offset {item.base_offset} goes backwards (expected >= {expected})"
    return None


def _check_indexes(sp: SegmentPlan, path: Path) -> str | None:
    if not all(p.exists() for p in _index_paths(sp)):  # checked first: planning creates no file
        return "index missing" if sp.valid_bytes else None
    seg = LogSegment(path.parent, sp.base_offset)
    try:
        seg.size = sp.valid_bytes
        seg.load_indexes()
        return None
    except IndexCorruptError as exc:
        return str(exc)
    finally:
        seg.close()


def _classify(plan: PartitionPlan) -> None:
    """Mark each damage tail or mid-log: mid-log when any valid batch follows it."""
    for i, sp in enumerate(plan.segments):
        if sp.first_bad_position is None:
            continue
        later_data = any(_holds_a_valid_batch(s) for s in plan.segments[i + 1 :])
        valid_after = len(sp.cuts) > 1 or (sp.cuts and sp.cuts[-1].end < sp.size)
        if not valid_after and not plan.salvage:
            with open_segment(sp.path) as buf:
                valid_after = (not _runs_past_the_end(buf, sp.first_bad_position, sp.size)
                               and find_next_batch(buf, sp.first_bad_position, sp.size) is not None)  # fmt: skip
        sp.kind = "mid-log" if later_data or valid_after else "tail"


def _runs_past_the_end(buf: Buffer, pos: int, size: int) -> bool:
    """Whether the batch at `pos` frames a length that runs past the segment's end: a torn final write. What
    looks valid inside it is its own content (a legacy wrapper's uncompressed inner messages), not a later
    batch."""
    if pos + LOG_OVERHEAD > size:
        return True
    length = int.from_bytes(buf[pos + 8 : pos + LOG_OVERHEAD], "big", signed=True)
    return length >= 0 and pos + LOG_OVERHEAD + length > size


def _holds_a_valid_batch(sp: SegmentPlan) -> bool:
    if sp.kept:
        return True
    if not sp.size or not sp.dropped:
        return False
    with open_segment(sp.path) as buf:
        return find_next_batch(buf, -1, sp.size) is not None


def _quarantine_path(directory: Path, quarantine_dir: Path | None, name: str) -> Path:
    target_dir = quarantine_dir / directory.name if quarantine_dir else directory
    target_dir.mkdir(parents=True, exist_ok=True)
    path = target_dir / (name + QUARANTINE_SUFFIX)
    if os.path.lexists(path):  # a dangling symlink too: never written through
        path = target_dir / f"{name}.{int(time.time() * 1000)}{QUARANTINE_SUFFIX}"
    return path


def _copy_range(src: Path, start: int, end: int, dest: Path) -> None:
    with open(src, "rb") as f, open(dest, "xb") as out:  # a new file: never through a link left there
        f.seek(start)
        remaining = end - start
        while remaining:
            chunk = f.read(min(remaining, 1 << 20))
            if not chunk:
                break
            out.write(chunk)
            remaining -= len(chunk)
        out.flush()
        os.fsync(out.fileno())


def execute(
    plan: PartitionPlan, *, quarantine_dir: Path | None = None, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL
) -> list[Path]:
    """Carry out `plan`; returns the quarantine files written. Indexes of touched segments are rebuilt
    (one entry per `index_interval_bytes`: the partition's `index.interval.bytes`). A refused plan
    changes nothing (a WARNING says why)."""
    written: list[Path] = []
    d = plan.dir
    if plan.refused:
        log.warning("%s: recovery left it as it is: %s", d.name, plan.refused)
        return written
    for sp in plan.segments:
        if sp.dropped:
            for suffix_path in (sp.path, *_index_paths(sp)):
                if suffix_path.exists():
                    q = _quarantine_path(d, quarantine_dir, suffix_path.name)
                    _move(suffix_path, q)
                    sp.moved.append(q)
            written += sp.moved
            continue
        if sp.cuts:
            for cut in sp.cuts:
                cut.quarantine = _quarantine_path(d, quarantine_dir, f"{sp.path.name}.{cut.start}-{cut.end}")
                _copy_range(sp.path, cut.start, cut.end, cut.quarantine)
                written.append(cut.quarantine)
            _keep_only(sp)
        if sp.index_problem:
            written += rebuild_indexes(
                d, sp.base_offset, quarantine_dir=quarantine_dir, index_interval_bytes=index_interval_bytes
            )
        elif sp.cuts:
            _rebuild(sp, index_interval_bytes)
    return written


def _index_paths(sp: SegmentPlan) -> tuple[Path, Path]:
    stem = sp.path.with_suffix("")
    return stem.with_suffix(INDEX_SUFFIX), stem.with_suffix(TIMEINDEX_SUFFIX)


def _move(src: Path, dest: Path) -> None:
    try:
        os.replace(src, dest)
    except OSError:  # another file system: copy, fsync, then remove the original
        _copy_range(src, 0, src.stat().st_size, dest)
        src.unlink()


def _keep_only(sp: SegmentPlan) -> None:
    """Rewrite the segment to hold just its kept batches (a plain truncation for a tail cut)."""
    if len(sp.cuts) == 1 and sp.cuts[0].end == sp.size:
        with open(sp.path, "r+b") as f:
            f.truncate(sp.cuts[0].start)
            f.flush()
            os.fsync(f.fileno())
        return
    tmp = sp.path.with_name(sp.path.name + ".tmp")
    if os.path.lexists(tmp):
        os.unlink(tmp)  # a leftover of an interrupted rewrite (or a link): never written through
    with open(sp.path, "rb") as src, open(tmp, "xb") as out:
        for b in _merge_ranges(sp.kept):
            src.seek(b[0])
            out.write(src.read(b[1] - b[0]))
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, sp.path)


def _merge_ranges(batches: Iterable[ScannedBatch]) -> list[tuple[int, int]]:
    ranges: list[tuple[int, int]] = []
    for b in batches:
        if ranges and ranges[-1][1] == b.position:
            ranges[-1] = (ranges[-1][0], b.end)
        else:
            ranges.append((b.position, b.end))
    return ranges


def rebuild_indexes(
    directory: Path,
    base_offset: int,
    *,
    quarantine_dir: Path | None = None,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL,
) -> list[Path]:
    """Move a segment's existing (suspect) index files to quarantine and rebuild both from the log. A
    symlinked index is moved aside whatever its size (the link, not its target), so nothing is written
    through it."""
    sp = SegmentPlan(directory / segment_name(base_offset), base_offset, 0)
    moved = []
    for p in _index_paths(sp):
        if p.is_symlink() or (p.exists() and p.stat().st_size):
            q = _quarantine_path(directory, quarantine_dir, p.name)
            _move(p, q)
            moved.append(q)
    _rebuild(sp, index_interval_bytes)
    return moved


def _rebuild(sp: SegmentPlan, index_interval_bytes: int) -> None:
    seg = LogSegment(sp.path.parent, sp.base_offset, index_interval_bytes=index_interval_bytes)
    try:
        with open_segment(sp.path) as buf:
            seg.rebuild_indexes(item for item in scan(buf, verify_crc=False) if not isinstance(item, Damage))
    finally:
        seg.close()
