"""`kafkactl recover`: dry run by default, quarantine on --execute, salvage, exit codes, locked dirs."""

from __future__ import annotations

import json
from pathlib import Path

from broker.log import producer_snapshot
from broker.log.checkpoint import RECOVERY_POINT, OffsetCheckpointFile
from broker.log.log import PartitionLog
from broker.log.manager import LogManager
from broker.log.producer_snapshot import SnapshotEntry
from tests.cli.conftest import kafkactl
from tests.unit.log.outside_dirs import move_out, snapshot
from tests.unit.records.legacy_sets import UPGRADED_CLUSTER, write_partition


def _segments(part: Path) -> list[Path]:
    return sorted(part.glob("*.log"))


def _corrupt(seg: Path, pos: int) -> None:
    data = bytearray(seg.read_bytes())
    data[pos] ^= 0xFF
    seg.write_bytes(bytes(data))


def _offsets(part: Path) -> list[int]:
    plog = PartitionLog(part)
    try:
        out, off = [], plog.log_start_offset
        while off < plog.log_end_offset:
            recs = plog.read_records(off)
            if not recs:
                break
            out += [r.offset for r in recs]
            off = recs[-1].offset + 1
        return out
    finally:
        plog.close()


def _total_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.log*"))


def test_clean_log_exit_0(log_dir: Path) -> None:
    r = kafkactl("recover", log_dir)
    assert r.returncode == 0, r.stderr
    assert "2 partitions scanned" in r.stdout


def test_dry_run_changes_nothing_and_exits_3(log_dir: Path) -> None:
    part = log_dir / "t-0"
    seg = _segments(part)[1]
    _corrupt(seg, 70)
    before = {p: p.read_bytes() for p in part.iterdir()}
    r = kafkactl("recover", part, "-o", "json")
    assert r.returncode == 3
    assert {p: p.read_bytes() for p in part.iterdir()} == before
    evs = [json.loads(line) for line in r.stdout.splitlines()]
    seg_ev = next(e for e in evs if e["type"] == "segment" and e["segment"] == seg.name)
    assert seg_ev["first_bad_position"] == 0 and seg_ev["damage"] == "mid-log" and "CRC" in seg_ev["reason"]
    assert evs[-1]["executed"] is False and evs[-1]["needs_cut"] is True


def test_execute_quarantines_everything_it_cuts(log_dir: Path) -> None:
    part = log_dir / "t-0"
    segs = _segments(part)
    first_lost = int(segs[1].name[:20])
    _corrupt(segs[1], 70)
    total = _total_bytes(part)
    r = kafkactl("recover", part, "--execute")
    assert r.returncode == 3, r.stderr
    assert f"offsets lost {first_lost}-59" in r.stdout
    assert _offsets(part) == list(range(first_lost))
    assert _total_bytes(part) == total  # every cut byte is in a .quarantined file
    assert list(part.glob("*.quarantined"))
    assert OffsetCheckpointFile(log_dir / RECOVERY_POINT).read()[("t", 0)] == first_lost
    assert kafkactl("recover", part).returncode == 0  # nothing left to cut


def test_salvage_keeps_batches_after_the_damage(log_dir: Path, tmp_path: Path) -> None:
    part = log_dir / "t-1"
    seg = _segments(part)[0]
    producer_snapshot.write(part, 60, [SnapshotEntry(7, 0, 4, 4, 0, 0)])  # may name a batch the salvage cuts
    # damage the second batch only: its offsets are 3..5
    second = int.from_bytes(seg.read_bytes()[8:12], "big") + 12
    _corrupt(seg, second + 70)
    qdir = tmp_path / "q"
    r = kafkactl("recover", part, "--execute", "--salvage", "--quarantine-dir", qdir, "-o", "json")
    assert r.returncode == 3, r.stderr
    evs = [json.loads(line) for line in r.stdout.splitlines()]
    assert next(e for e in evs if e["type"] == "partition")["lost"] == [[3, 5]]
    assert _offsets(part) == [o for o in range(60) if o not in (3, 4, 5)]
    quarantined = list((qdir / "t-1").iterdir())
    assert len(quarantined) == 1 and quarantined[0].stat().st_size > 0
    assert producer_snapshot.snapshots(part) == []  # start-up reads the producers from the log instead


def test_refuses_a_dir_held_by_a_running_broker(log_dir: Path) -> None:
    mgr = LogManager([log_dir])
    mgr.startup()
    try:
        r = kafkactl("recover", log_dir / "t-0", "--execute")
        assert r.returncode == 1
        assert "held by a running broker" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    finally:
        mgr.shutdown()


def test_not_a_log_dir_is_usage_error(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    r = kafkactl("recover", tmp_path / "x")
    assert r.returncode == 2 and "neither a partition dir nor a log dir" in r.stderr


def test_a_kafka_log_of_every_format_needs_no_recovery(tmp_path: Path) -> None:
    """magic 0 and 1 message sets (uncompressed, gzip, snappy, lz4) then v2, as an upgraded Apache Kafka
    cluster leaves a log: nothing is damage; a torn last batch is all that is cut."""
    log_dir = tmp_path / "kafka-logs"
    records = write_partition(log_dir / "orders-0", UPGRADED_CLUSTER)
    before = {p: p.read_bytes() for p in (log_dir / "orders-0").iterdir()}
    r = kafkactl("recover", log_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 partitions scanned; would quarantine 0 bytes" in r.stdout
    r = kafkactl("recover", log_dir, "--execute")
    assert r.returncode == 0, r.stdout + r.stderr
    assert {p: p.read_bytes() for p in (log_dir / "orders-0").iterdir()} == before
    last = _segments(log_dir / "orders-0")[-1]
    data = last.read_bytes()
    last.write_bytes(data[:-4])  # the last v2 batch (offsets 24-26) torn
    r = kafkactl("recover", log_dir, "--execute")
    assert r.returncode == 3, r.stdout + r.stderr
    assert f"orders-0: offsets lost {len(records) - 3}-…; log end offset becomes {len(records) - 3}" in r.stdout
    assert kafkactl("recover", log_dir).returncode == 0


def test_execute_writes_nothing_through_a_symlinked_segment(log_dir: Path, tmp_path: Path) -> None:
    """A torn segment that is a symlink to a file outside: the file outside is not truncated, the partition
    is left as it is with one line, the other partition is recovered."""
    outside = tmp_path / "elsewhere"
    target = move_out(_segments(log_dir / "t-0")[-1], outside)
    target.write_bytes(target.read_bytes()[:-9])  # torn
    seg1 = _segments(log_dir / "t-1")[-1]
    seg1.write_bytes(seg1.read_bytes()[:-9])  # torn too, but inside
    before = snapshot(outside)
    r = kafkactl("recover", log_dir, "--execute")
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert snapshot(outside) == before
    [line] = [line for line in r.stdout.splitlines() if line.startswith("t-0:")]
    assert line.startswith("t-0: left as it is") and f"resolves to {target}" in line
    assert not list((log_dir / "t-0").glob("*.quarantined"))
    assert list((log_dir / "t-1").glob("*.quarantined"))  # recovered
    assert "t-1: offsets lost" in r.stdout


def test_execute_writes_nothing_into_a_partition_dir_symlinked_out(log_dir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "other-disk"
    target = move_out(log_dir / "t-0", outside)
    _corrupt(_segments(target)[1], 70)
    for p in target.glob("*.index"):
        p.write_bytes(b"\xff" * 13)  # indexes it would rebuild
    before = snapshot(outside)
    r = kafkactl("recover", log_dir, "--execute", "-o", "json")
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert snapshot(outside) == before  # no quarantine file, no index written there
    evs = [json.loads(line) for line in r.stdout.splitlines()]
    part = next(e for e in evs if e["type"] == "partition" and e["partition"] == "t-0")
    assert f"resolves to {target}, outside {log_dir}" in part["refused"]
    assert evs[-1]["refused"] == [str(log_dir / "t-0")] and evs[-1]["quarantined"] == []
    # given the real path, it is recovered there
    r = kafkactl("recover", outside, "--execute")
    assert r.returncode == 3 and list(target.glob("*.quarantined")), r.stdout + r.stderr
