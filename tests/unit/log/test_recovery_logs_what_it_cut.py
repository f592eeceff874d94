"""Start-up after an unclean stop logs, per partition whose recovery cut something, one WARNING line:
the offsets lost, and per segment the byte range cut, why, and the quarantine file it went to."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from broker.log import recovery
from broker.log.config import LogConfig
from broker.log.log import PartitionLog
from broker.log.manager import LogManager
from broker.log.scanner import open_segment, scan

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=100, segment_ms=1 << 60)


def fill(d: Path, make_batch, clock, n: int = 30) -> None:
    log = PartitionLog(d, CONFIG, clock=clock)
    for i in range(n):
        log.append(make_batch([b"value-%03d" % i + b"~" * 20]))
    log.close()


def recovery_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "broker.log.recovery" and r.levelno == logging.WARNING]


@pytest.fixture(autouse=True)
def _capture(caplog):
    caplog.set_level(logging.INFO)


def test_a_torn_tail_is_logged_with_its_range_offsets_and_quarantine_file(tmp_path, make_batch, clock, caplog):
    d = tmp_path / "orders-0"
    fill(d, make_batch, clock)
    base, last = recovery.segment_files(d)[-1]
    with open_segment(last) as buf:
        final = list(scan(buf))[-1]
    data = last.read_bytes()
    last.write_bytes(data[:-5])  # the last batch (offset 29) torn
    log = PartitionLog(d, CONFIG, recovery_point=0, clean=False, clock=clock)
    log.close()
    [line] = recovery_lines(caplog)
    q = d / f"{last.name}.{final.position}-{len(data) - 5}.quarantined"
    assert line == (
        f"orders-0: recovery after an unclean stop cut offsets 29-… (log end offset now 29): "
        f"{last.name} bytes {final.position}-{len(data) - 5} (tail damage: truncated: batch length "
        f"{final.size - 12} runs 5 bytes past the end) -> {q}"
    )
    assert q.read_bytes() == data[final.position : -5]


def test_mid_log_damage_names_the_cut_and_every_segment_moved_away(tmp_path, make_batch, clock, caplog):
    d = tmp_path / "orders-0"
    fill(d, make_batch, clock)
    segs = recovery.segment_files(d)
    (b1, s1) = segs[1]
    data = bytearray(s1.read_bytes())
    with open_segment(s1) as buf:
        second = list(scan(buf))[1]
    data[second.position + 70] ^= 0xFF  # CRC-32C mismatch in the segment's second batch
    s1.write_bytes(bytes(data))
    log = PartitionLog(d, CONFIG, recovery_point=0, clean=False, clock=clock)
    leo = log.log_end_offset
    log.close()
    [line] = recovery_lines(caplog)
    assert leo == second.base_offset
    assert line.startswith(
        f"orders-0: recovery after an unclean stop cut offsets {leo}-29 (log end offset now {leo}): "
    )
    cut = d / f"{s1.name}.{second.position}-{len(data)}.quarantined"
    assert f"{s1.name} bytes {second.position}-{len(data)} (mid-log damage: CRC-32C mismatch" in line
    assert f"-> {cut}" in line and cut.exists()
    for _, later in segs[2:]:
        moved = d / f"{later.name}.quarantined"
        assert f"{later.name} bytes 0-{moved.stat().st_size} (whole segment after the damage) -> {moved}" in line
    # every quarantine file the line names exists
    assert all(Path(p).exists() for p in re.findall(r"-> ([^;\s]+)", line))


def test_log_manager_start_up_logs_one_line_per_partition_that_was_cut(tmp_path, make_batch, clock, caplog):
    log_dir = tmp_path / "logs"
    for p in range(3):
        fill(log_dir / f"orders-{p}", make_batch, clock, n=10)
    for p in (0, 2):  # two of three partitions torn
        last = recovery.segment_files(log_dir / f"orders-{p}")[-1][1]
        last.write_bytes(last.read_bytes()[:-3])
    mgr = LogManager([log_dir], CONFIG)
    mgr.startup()  # no clean-shutdown marker
    try:
        lines = recovery_lines(caplog)
        assert [line.split(":")[0] for line in lines] == ["orders-0", "orders-2"]
        assert all("cut offsets 9-… (log end offset now 9)" in line for line in lines)
        assert mgr.get("orders", 1).log_end_offset == 10
    finally:
        mgr.shutdown()
    caplog.clear()
    LogManager([log_dir], CONFIG).startup()  # a clean start: nothing recovered, nothing logged
    assert recovery_lines(caplog) == []


def test_a_long_run_of_segments_moved_away_is_counted_not_listed(tmp_path, make_batch, clock, caplog, monkeypatch):
    monkeypatch.setattr(recovery, "MAX_LOGGED_SEGMENTS", 2)
    d = tmp_path / "orders-0"
    fill(d, make_batch, clock)
    segs = recovery.segment_files(d)
    sizes = {p: p.stat().st_size for _, p in segs}
    first = segs[0][1]
    data = bytearray(first.read_bytes())
    data[70] ^= 0xFF
    first.write_bytes(bytes(data))
    PartitionLog(d, CONFIG, recovery_point=0, clean=False, clock=clock).close()
    [line] = recovery_lines(caplog)
    rest = [p for _, p in segs[3:]]
    assert line.count("(whole segment after the damage)") == 2
    assert line.endswith(
        f"; {len(rest)} more whole segments ({sum(sizes[p] for p in rest)} bytes, "
        f"{rest[0].name} to {rest[-1].name}) -> {d}"
    )
