"""broker/log/recovery.py: CRC recovery, in the manner of Kafka's LogSegmentTest — damage files on purpose.

Every test checks the two promises: exactly the valid data survives, and nothing is deleted (every
byte cut sits in a `*.quarantined` file).
"""

from __future__ import annotations

import random
import re
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.log import recovery
from broker.log.config import LogConfig
from broker.log.log import PartitionLog
from broker.log.scanner import open_segment, scan
from broker.log.segment import segment_name

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=100, segment_ms=1 << 60)
# quarantine files holding bytes of a `.log`: `<seg>.log.quarantined` or `<seg>.log.<start>-<end>[.<ms>].quarantined`
LOG_QUARANTINE = re.compile(r"^\d{20}\.log(\.\d+-\d+)?(\.\d+)?\.quarantined$")


@dataclass(frozen=True)
class Placed:
    """Where a batch sits on disk."""

    segment: int  # index in the segment list
    base: int  # segment base offset
    position: int
    size: int
    first: int
    last: int

    @property
    def end(self) -> int:
        return self.position + self.size


@dataclass
class Pristine:
    dir: Path
    values: list[bytes]
    batches: list[Placed]
    files: dict[str, bytes]  # segment name -> content

    @property
    def leo(self) -> int:
        return len(self.values)

    def segment_names(self) -> list[str]:
        return sorted(self.files)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory, make_batch, t0) -> Pristine:
    """A closed log of 45 batches (1-3 records each, batch i stamped t0 + i) over several segments."""
    d = tmp_path_factory.mktemp("pristine") / "orders-0"
    log = PartitionLog(d, CONFIG, clock=lambda: t0 / 1000)
    values: list[bytes] = []
    for i in range(45):
        vals = [b"value-%03d-%d" % (i, j) + b"~" * (i % 7) for j in range(1 + i % 3)]
        log.append(make_batch(vals, timestamp=t0 + i))
        values += vals
    log.flush()
    log.close()
    batches, files = [], {}
    for n, (base, path) in enumerate(recovery.segment_files(d)):
        files[path.name] = path.read_bytes()
        with open_segment(path) as buf:
            for b in scan(buf):
                batches.append(Placed(n, base, b.position, b.size, b.base_offset, b.last_offset))
    assert len(files) >= 5
    return Pristine(d, values, batches, files)


def copy_of(pristine: Pristine, dest: Path) -> Path:
    d = dest / "orders-0"
    shutil.copytree(pristine.dir, d)
    return d


def log_bytes(d: Path) -> tuple[int, int]:
    """(bytes in `.log` segments, bytes of `.log` data in quarantine files) of a partition dir."""
    segs = sum(p.stat().st_size for _, p in recovery.segment_files(d))
    quarantined = sum(p.stat().st_size for p in d.iterdir() if LOG_QUARANTINE.match(p.name))
    return segs, quarantined


def damage_plan(rng: random.Random, pristine: Pristine) -> tuple[str, int, int, list[Placed]]:
    """A random garbage range in a random segment that damages at least one batch for certain.

    Returns (segment name, start, end, damaged batches). Garbage only in a batch's baseOffset or
    partitionLeaderEpoch (outside the CRC) is not damage the format can see, so a range ending there
    is stretched over that batch's magic byte; a range touching nothing checked is drawn again.
    """
    names = pristine.segment_names()
    while True:
        n = rng.randrange(len(names))
        in_seg = [b for b in pristine.batches if b.segment == n]
        if not in_seg:
            continue
        size = in_seg[-1].end
        start = rng.randrange(size)
        end = size if rng.random() < 0.25 else min(size, start + rng.randint(1, 80))  # Kafka's test: to the end
        last = next(b for b in in_seg if b.position <= end - 1 < b.end)
        if end - 1 < last.position + 17:
            if start >= last.position and (end <= last.position + 8 or start >= last.position + 12):
                continue  # only bytes outside the checks of one batch: draw again
            end = last.position + 17  # over the magic byte: the batch no longer frames as a v2 batch
        touched = [b for b in in_seg if b.position < end and start < b.end]
        return names[n], start, end, touched


def apply_garbage(rng: random.Random, path: Path, start: int, end: int) -> None:
    data = bytearray(path.read_bytes())
    for i in range(start, end):
        data[i] ^= rng.randint(1, 255)  # every byte changes
    path.write_bytes(bytes(data))


# -- plain recovery: Kafka's rule --------------------------------------------------------------


def test_random_damage_keeps_exactly_the_offsets_before_the_damaged_batch(tmp_path, pristine, make_batch, read_all):
    rng = random.Random(20240601)
    for it in range(50):
        d = copy_of(pristine, tmp_path / f"it{it}")
        name, start, end, touched = damage_plan(rng, pristine)
        apply_garbage(rng, d / name, start, end)
        damaged_files = {p.name: p.read_bytes() for _, p in recovery.segment_files(d)}
        total = sum(len(v) for v in damaged_files.values())
        first_bad = touched[0]
        later = [b for b in pristine.batches if b.first > first_bad.first and not any(b is t for t in touched)]
        ctx = f"iteration {it}: garbage {name}[{start}:{end}] over offsets {first_bad.first}..{touched[-1].last}"

        log = PartitionLog(d, CONFIG, recovery_point=0, clean=False)
        try:
            assert log.log_end_offset == first_bad.first, ctx
            assert [(r.offset, r.value) for r in read_all(log)] == [
                (o, pristine.values[o]) for o in range(first_bad.first)
            ], ctx
            plan = log.recovery_plan
            assert plan.lost == [(first_bad.first, max((b.last for b in later), default=None))], ctx
            bad_seg = next(s for s in plan.segments if s.first_bad_position is not None)
            assert bad_seg.path.name == name and bad_seg.first_bad_position == first_bad.position, ctx
            assert bad_seg.kind == ("mid-log" if later else "tail"), ctx
            # nothing deleted: what is left plus what is quarantined is every byte there was
            segs, quarantined = log_bytes(d)
            assert segs + quarantined == total, ctx
            cut = d / f"{name}.{first_bad.position}-{len(damaged_files[name])}.quarantined"
            assert cut.read_bytes() == damaged_files[name][first_bad.position :], ctx
            assert (d / name).read_bytes() == damaged_files[name][: first_bad.position], ctx
            for later_name in (n for n in damaged_files if n > name):
                assert not (d / later_name).exists(), ctx
                assert (d / f"{later_name}.quarantined").read_bytes() == damaged_files[later_name], ctx
            # the log goes on from the cut
            res = log.append(make_batch([b"after"]))
            assert res.first_offset == first_bad.first, ctx
        finally:
            log.close()


def test_reopening_after_recovery_finds_nothing_more_to_do(tmp_path, pristine):
    rng = random.Random(7)
    d = copy_of(pristine, tmp_path)
    name, start, end, touched = damage_plan(rng, pristine)
    apply_garbage(rng, d / name, start, end)
    PartitionLog(d, CONFIG, clean=False).close()
    before = sorted(p.name for p in d.iterdir())
    log = PartitionLog(d, CONFIG, clean=False)
    assert not log.recovery_plan.needs_cut and not log.recovery_plan.needs_index_rebuild
    assert sorted(p.name for p in d.iterdir()) == before
    assert log.log_end_offset == touched[0].first
    log.close()


# -- salvage -----------------------------------------------------------------------------------


def merged_ranges(batches: list[Placed], leo: int) -> list[tuple[int, int | None]]:
    out: list[tuple[int, int | None]] = []
    for b in batches:
        if out and out[-1][1] == b.first - 1:
            out[-1] = (out[-1][0], b.last)
        else:
            out.append((b.first, b.last))
    if out and out[-1][1] == leo - 1:
        out[-1] = (out[-1][0], None)  # no kept batch follows: the end is unknown
    return out


def test_salvage_keeps_every_undamaged_batch(tmp_path, pristine, read_all):
    rng = random.Random(99)
    for it in range(30):
        d = copy_of(pristine, tmp_path / f"it{it}")
        damaged: list[Placed] = []
        used: set[str] = set()
        for _ in range(rng.randint(1, 2)):  # one or two damaged regions, in different segments
            name, start, end, touched = damage_plan(rng, pristine)
            if name in used:
                continue
            used.add(name)
            apply_garbage(rng, d / name, start, end)
            damaged += touched
        damaged.sort(key=lambda b: b.first)
        total = sum(p.stat().st_size for _, p in recovery.segment_files(d))
        ctx = f"iteration {it}: damaged offsets {[(b.first, b.last) for b in damaged]}"

        plan = recovery.plan_partition(d, salvage=True)
        assert plan.lost == merged_ranges(damaged, pristine.leo), ctx
        written = recovery.execute(plan)
        assert all(p.exists() and p.name.endswith(".quarantined") for p in written), ctx
        segs, quarantined = log_bytes(d)
        assert segs + quarantined == total, ctx
        assert quarantined == sum(b.size for b in damaged), ctx

        lost = {o for b in damaged for o in range(b.first, b.last + 1)}
        log = PartitionLog(d, CONFIG)
        try:
            got = [(r.offset, r.value) for r in read_all(log)]
            assert got == [(o, v) for o, v in enumerate(pristine.values) if o not in lost], ctx
        finally:
            log.close()


def test_salvage_skips_garbage_inserted_between_batches(tmp_path, pristine, read_all):
    d = copy_of(pristine, tmp_path)
    name = pristine.segment_names()[1]
    seg = [b for b in pristine.batches if b.segment == 1]
    at = seg[1].position
    data = (d / name).read_bytes()
    junk = b"\x02" * 30 + bytes(range(100))
    (d / name).write_bytes(data[:at] + junk + data[at:])
    plan = recovery.plan_partition(d, salvage=True)
    assert plan.lost == []  # no offset is missing: only bytes that were never a batch
    [sp] = [s for s in plan.segments if s.cuts]
    assert [(c.start, c.end) for c in sp.cuts] == [(at, at + len(junk))] and sp.kind == "mid-log"
    recovery.execute(plan)
    assert (d / f"{name}.{at}-{at + len(junk)}.quarantined").read_bytes() == junk
    assert (d / name).read_bytes() == data
    log = PartitionLog(d, CONFIG)
    assert [r.value for r in read_all(log)] == pristine.values
    log.close()


# -- classification and special cases ----------------------------------------------------------


def last_segment(d: Path) -> Path:
    return recovery.segment_files(d)[-1][1]


def test_truncated_last_batch_is_tail_damage(tmp_path, pristine, read_all):
    d = copy_of(pristine, tmp_path)
    path = last_segment(d)
    last = pristine.batches[-1]
    data = path.read_bytes()
    path.write_bytes(data[: last.position + 30])
    plan = recovery.plan_partition(d)
    [bad] = [s for s in plan.segments if s.first_bad_position is not None]
    assert bad.kind == "tail" and "truncated" in bad.reason
    assert plan.lost == [(last.first, None)] and plan.next_offset == last.first
    log = PartitionLog(d, CONFIG, clean=False)
    assert log.log_end_offset == last.first
    assert [r.value for r in read_all(log)] == pristine.values[: last.first]
    q = d / f"{path.name}.{last.position}-{last.position + 30}.quarantined"
    assert q.read_bytes() == data[last.position : last.position + 30]
    log.close()


def test_garbage_appended_at_the_end_is_tail_damage(tmp_path, pristine):
    d = copy_of(pristine, tmp_path)
    path = last_segment(d)
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(b"\x00" * 100)  # a torn write: zeros past the last batch
    plan = recovery.plan_partition(d)
    [bad] = [s for s in plan.segments if s.first_bad_position is not None]
    assert (bad.kind, bad.first_bad_position, bad.valid_bytes) == ("tail", size, size)
    assert plan.next_offset == pristine.leo
    recovery.execute(plan)
    assert path.stat().st_size == size
    assert (d / f"{path.name}.{size}-{size + 100}.quarantined").read_bytes() == b"\x00" * 100


def test_damage_followed_only_by_garbage_is_tail_damage(tmp_path, pristine):
    d = copy_of(pristine, tmp_path)
    names = pristine.segment_names()
    last = d / names[-1]
    last.write_bytes(b"\x02" * 300)  # the newest segment holds nothing that frames and checksums
    prev = [b for b in pristine.batches if b.segment == len(names) - 2][-1]
    apply_garbage(random.Random(6), d / names[-2], prev.position + 20, prev.position + 21)
    plan = recovery.plan_partition(d)
    assert plan.segments[-2].kind == "tail" and plan.segments[-1].dropped
    assert plan.lost == [(prev.first, None)]


def test_damage_before_more_batches_is_mid_log(tmp_path, pristine):
    d = copy_of(pristine, tmp_path)
    first_seg = [b for b in pristine.batches if b.segment == 0]
    # in the middle of a segment
    b = first_seg[1]
    apply_garbage(random.Random(1), d / pristine.segment_names()[0], b.position + 40, b.position + 41)
    plan = recovery.plan_partition(d)
    [bad] = [s for s in plan.segments if s.first_bad_position is not None]
    assert (bad.kind, bad.first_bad_position) == ("mid-log", b.position) and "CRC" in bad.reason
    assert [s.dropped for s in plan.segments] == [False] + [True] * (len(plan.segments) - 1)
    # in the last batch of a segment that is not the last
    d2 = copy_of(pristine, tmp_path / "second")
    b = first_seg[-1]
    apply_garbage(random.Random(2), d2 / pristine.segment_names()[0], b.end - 3, b.end)
    plan = recovery.plan_partition(d2)
    assert plan.segments[0].kind == "mid-log"
    assert plan.lost == [(b.first, pristine.leo - 1)]


def test_lost_range_reaches_into_dropped_single_batch_segments(tmp_path, make_batch):
    d = tmp_path / "orders-0"
    log = PartitionLog(d, LogConfig(segment_bytes=100, segment_ms=1 << 60))
    for i in range(4):
        log.append(make_batch([b"one-%d" % i, b"two-%d" % i]))
    assert log.bases == [0, 2, 4, 6]
    log.close()
    apply_garbage(random.Random(5), d / segment_name(2), 30, 31)
    plan = recovery.plan_partition(d)
    assert plan.lost == [(2, 7)]
    assert [s.dropped for s in plan.segments] == [False, False, True, True]
    assert plan.segments[1].kind == "mid-log"


def test_offsets_going_backwards_are_damage(tmp_path, pristine, read_all):
    d = copy_of(pristine, tmp_path)
    b = pristine.batches[5]
    path = d / pristine.segment_names()[b.segment]
    data = bytearray(path.read_bytes())
    struct.pack_into(">q", data, b.position, 1)  # outside the CRC: only the offset check sees it
    path.write_bytes(bytes(data))
    log = PartitionLog(d, CONFIG, clean=False)
    assert "backwards" in next(s.reason for s in log.recovery_plan.segments if s.reason)
    assert log.log_end_offset == b.first
    assert [r.value for r in read_all(log)] == pristine.values[: b.first]
    log.close()


def test_dry_run_plan_changes_nothing(tmp_path, pristine):
    d = copy_of(pristine, tmp_path)
    name = pristine.segment_names()[2]
    apply_garbage(random.Random(3), d / name, 70, 90)
    (d / segment_name(10_000)).touch()  # a zero-length segment without its indexes
    (d / pristine.segment_names()[1]).with_suffix(".index").write_bytes(b"junk")
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in d.iterdir()}
    for salvage in (False, True):
        plan = recovery.plan_partition(d, salvage=salvage)
        assert plan.needs_cut
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in d.iterdir()} == before


def test_quarantine_dir(tmp_path, pristine):
    d = copy_of(pristine, tmp_path / "logs")
    name = pristine.segment_names()[-2]
    apply_garbage(random.Random(4), d / name, 100, 101)
    qdir = tmp_path / "quarantine"
    plan = recovery.plan_partition(d)
    written = recovery.execute(plan, quarantine_dir=qdir)
    assert written and all(p.parent == qdir / "orders-0" for p in written)
    assert not any(p.name.endswith(".quarantined") for p in d.iterdir())
    segs, _ = log_bytes(d)
    moved = sum(p.stat().st_size for p in written if LOG_QUARANTINE.match(p.name))
    assert segs + moved == sum(len(v) for v in pristine.files.values())


def test_zero_length_segments(tmp_path, make_batch, read_all, clock):
    d = tmp_path / "orders-0"
    log = PartitionLog(d, CONFIG, clock=clock)
    log.append(make_batch([b"a", b"b"]))
    log.roll()  # an empty active segment at offset 2
    log.close()
    empty = d / segment_name(2)
    assert empty.stat().st_size == 0
    for p in (empty.with_suffix(".index"), empty.with_suffix(".timeindex")):
        p.unlink()  # a crash between creating the segment and its indexes
    plan = recovery.plan_partition(d)
    assert not plan.needs_cut and plan.next_offset == 2 and plan.lost == []
    log = PartitionLog(d, CONFIG, clean=False, clock=clock)
    assert log.bases == [0, 2] and log.log_end_offset == 2
    assert log.append(make_batch([b"c"])).first_offset == 2
    assert [r.value for r in read_all(log)] == [b"a", b"b", b"c"]
    log.close()
    # a partition whose only segment is empty
    d2 = tmp_path / "orders-1"
    d2.mkdir()
    (d2 / segment_name(0)).touch()
    log = PartitionLog(d2, CONFIG, clean=False, clock=clock)
    assert log.log_end_offset == 0 and log.read(0, 10) is None
    log.close()


# -- indexes -----------------------------------------------------------------------------------


def index_entries(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in d.iterdir() if p.suffix in (".index", ".timeindex")}


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
@pytest.mark.parametrize(
    "garbage",
    [
        bytes(range(37)),  # not a multiple of the entry size
        b"\xff" * 64,  # whole entries, all out of range
        struct.pack(">ii", 3, 5),  # in order and in range, but pointing inside a batch
    ],
    ids=["odd-size", "out-of-range", "inside-a-batch"],
)
def test_garbage_offset_index_is_quarantined_and_rebuilt(tmp_path, pristine, read_all, clean, garbage):
    d = copy_of(pristine, tmp_path)
    good = index_entries(d)
    victim = (d / pristine.segment_names()[1]).with_suffix(".index")
    assert good[victim.name], "the pristine index has entries"
    victim.write_bytes(garbage)
    log = PartitionLog(d, CONFIG, recovery_point=0, clean=clean)
    assert index_entries(d) == good
    assert (d / f"{victim.name}.quarantined").read_bytes() == garbage
    assert [r.value for r in read_all(log)] == pristine.values
    for b in pristine.batches:
        for off in range(b.first, b.last + 1):
            assert log.read(off, 1).first_offset == b.first
    log.close()


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_missing_index_is_rebuilt(tmp_path, pristine, read_all, suffix):
    d = copy_of(pristine, tmp_path)
    good = index_entries(d)
    victim = (d / pristine.segment_names()[2]).with_suffix(suffix)
    victim.unlink()
    sibling = {p.name: p.read_bytes() for p in victim.parent.glob(victim.stem + ".*index")}
    log = PartitionLog(d, CONFIG)
    assert index_entries(d) == good
    for q in (p for p in d.iterdir() if p.name.endswith(".quarantined")):  # at most the surviving index, whole
        assert q.read_bytes() == sibling[q.name.removesuffix(".quarantined")]
    assert [r.value for r in read_all(log)] == pristine.values
    seg2 = [b for b in pristine.batches if b.segment == 2]
    assert log.offset_for_timestamp(log.segments[seg2[0].base].max_timestamp)[0] == seg2[-1].first
    log.close()


def test_garbage_time_index_is_quarantined_and_rebuilt(tmp_path, pristine, t0):
    d = copy_of(pristine, tmp_path)
    good = index_entries(d)
    victim = (d / pristine.segment_names()[0]).with_suffix(".timeindex")
    victim.write_bytes(struct.pack(">qiqi", 50, 3, 40, 4))  # goes backwards
    log = PartitionLog(d, CONFIG)
    assert index_entries(d) == good
    assert (d / f"{victim.name}.quarantined").exists()
    for i, b in enumerate(pristine.batches):
        assert log.offset_for_timestamp(t0 + i) == (b.first, t0 + i)
    log.close()


def test_rebuild_indexes_function(tmp_path, pristine):
    d = copy_of(pristine, tmp_path)
    good = index_entries(d)
    base = next(b.base for b in pristine.batches if b.segment == 1)
    idx = d / segment_name(base, ".index")
    idx.write_bytes(b"\x01" * 8)
    moved = recovery.rebuild_indexes(d, base, quarantine_dir=tmp_path / "q", index_interval_bytes=100)
    assert [p.name for p in moved] == [f"{idx.name}.quarantined", f"{segment_name(base, '.timeindex')}.quarantined"]
    assert moved[0].read_bytes() == b"\x01" * 8
    assert index_entries(d) == good
