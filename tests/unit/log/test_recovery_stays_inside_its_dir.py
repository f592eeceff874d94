"""Recovery never writes, truncates or moves anything that resolves outside the dir it was given: a
partition dir symlinked out of the log dir, a segment or index file symlinked out of its partition
dir. Such a partition is left as it is, with one WARNING line (start-up) — and the files outside are
byte-identical afterwards."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from broker.log import recovery
from broker.log.config import LogConfig
from broker.log.log import PartitionLog
from broker.log.manager import LogManager
from broker.log.segment import segment_name
from tests.unit.log.outside_dirs import move_out, snapshot

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=100, segment_ms=1 << 60)


@pytest.fixture
def log_dir(tmp_path, make_batch, clock) -> Path:
    """A cleanly closed log dir holding orders-0 over several segments (offsets 0..29)."""
    d = tmp_path / "logs" / "orders-0"
    log = PartitionLog(d, CONFIG, clock=clock)
    for i in range(30):
        log.append(make_batch([b"value-%03d" % i + b"~" * 20]))
    log.close()
    assert len(recovery.segment_files(d)) >= 3
    return d.parent


def tear(segment: Path, n: int = 7) -> None:
    data = segment.read_bytes()
    segment.write_bytes(data[:-n])


@pytest.mark.parametrize("what", ["last-segment", "dropped-segment", "index"])
def test_start_up_leaves_a_partition_with_a_file_symlinked_outside_alone(log_dir, tmp_path, caplog, what):
    d = log_dir / "orders-0"
    segs = [p for _, p in recovery.segment_files(d)]
    outside = tmp_path / "elsewhere"
    if what == "last-segment":  # the torn segment itself lives outside
        tear(move_out(segs[-1], outside))
    elif what == "dropped-segment":  # damage inside; Kafka's rule would move the later (outside) segment away
        move_out(segs[-1], outside)
        data = bytearray(segs[0].read_bytes())
        data[70] ^= 0xFF
        segs[0].write_bytes(bytes(data))
    else:  # an index outside that is garbage: recovery would rebuild it
        move_out(segs[1].with_suffix(".index"), outside).write_bytes(b"\xff" * 13)
        tear(segs[-1])
    before, inside = snapshot(outside), sorted(p.name for p in d.iterdir())
    caplog.set_level(logging.WARNING, logger="broker.log.recovery")
    log = PartitionLog(d, CONFIG, recovery_point=0, clean=False)
    try:
        assert snapshot(outside) == before
        assert log.recovery_plan.refused and log.recovery_plan.needs_cut
        if what == "index":  # opening the segment then finds the index garbage: the link (not its target) goes aside
            aside = segs[1].with_name(segs[1].stem + ".index.quarantined")
            assert aside.is_symlink() and aside.resolve() == outside / aside.name.removesuffix(".quarantined")
            inside = sorted([*inside, aside.name, segs[1].stem + ".timeindex.quarantined"])  # rebuilt too
        assert sorted(p.name for p in d.iterdir()) == inside  # no quarantine file, nothing moved
        lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(lines) == 1 and "orders-0: recovery left it as it is" in lines[0]
        assert str(outside) in lines[0]
    finally:
        log.close()
    assert snapshot(outside) == before


def test_start_up_leaves_a_partition_dir_symlinked_out_of_the_log_dir_alone(log_dir, tmp_path, caplog):
    outside = tmp_path / "other-disk"
    target = move_out(log_dir / "orders-0", outside)
    seg = [p for _, p in recovery.segment_files(target)][-1]
    data = bytearray(seg.read_bytes())
    data[70] ^= 0xFF  # a CRC mismatch in the last segment's first batch: recovery would cut it and after
    seg.write_bytes(bytes(data))
    before = snapshot(outside)
    caplog.set_level(logging.WARNING, logger="broker.log.recovery")
    mgr = LogManager([log_dir], CONFIG)
    mgr.startup()  # no clean-shutdown marker: every partition is recovered
    try:
        assert snapshot(outside) == before
        plan = mgr.get("orders", 0).recovery_plan
        assert plan.refused and plan.needs_cut and f"outside {log_dir}" in plan.refused
        assert any("orders-0: recovery left it as it is" in r.getMessage() for r in caplog.records)
        # nothing may be appended after damage left in place: produce to it is answered KAFKA_STORAGE_ERROR
        assert mgr.is_offline(("orders", 0)) and "left uncut" in mgr.why_offline(("orders", 0))
    finally:
        for plog in mgr.logs.values():
            plog.close()
        mgr._unlock()
    assert snapshot(outside) == before


def test_a_healthy_symlinked_segment_does_not_stop_the_recovery_of_the_rest(log_dir, tmp_path, read_all):
    """Only what recovery would touch counts: an old segment outside, damage in the active one inside."""
    d = log_dir / "orders-0"
    segs = [p for _, p in recovery.segment_files(d)]
    outside = tmp_path / "elsewhere"
    move_out(segs[0], outside)
    tear(segs[-1])
    before = snapshot(outside)
    log = PartitionLog(d, CONFIG, recovery_point=0, clean=False)
    try:
        plan = log.recovery_plan
        assert plan.needs_cut and not plan.refused
        assert [p for p, _ in plan.outside] == [segs[0]]
        assert len(read_all(log)) == log.log_end_offset == 29
    finally:
        log.close()
    assert snapshot(outside) == before


def test_quarantine_and_rewrite_never_write_through_a_link_left_in_their_place(log_dir, tmp_path):
    """A salvage rewrite's `.tmp` and a quarantine file's name may already be taken by a (dangling) link."""
    d = log_dir / "orders-0"
    seg = [p for _, p in recovery.segment_files(d)][0]
    data = bytearray(seg.read_bytes())
    data[70] ^= 0xFF  # the first batch only: salvage rewrites the segment without it
    seg.write_bytes(bytes(data))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    plan = recovery.plan_partition(d, salvage=True)
    [cut] = plan.segments[0].cuts
    os.symlink(outside / "tmp-target", seg.with_name(seg.name + ".tmp"))
    os.symlink(outside / "q-target", d / f"{seg.name}.{cut.start}-{cut.end}.quarantined")
    written = recovery.execute(plan)
    assert not any(outside.iterdir())  # neither dangling link was written through
    assert written and all(p.parent == d and not p.is_symlink() for p in written)
    assert segment_name(0) in {p.name for p in d.iterdir()}
