"""broker/log/manager.py: log dirs — lock, load, recover, spread, checkpoint, shut down."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import broker
from broker.errors import InconsistentClusterIdError, LogDirLockedError
from broker.log.checkpoint import CLEAN_SHUTDOWN, LOG_START, RECOVERY_POINT, REPLICATION, OffsetCheckpointFile
from broker.log.config import LogConfig
from broker.log.log import PartitionLog
from broker.log.manager import LogManager, is_locked, is_log_dir, read_topic_id
from broker.log.segment import segment_name

CONFIG = LogConfig(segment_bytes=400, segment_ms=1 << 60, retention_ms=-1)


@pytest.fixture
def managers():
    """Managers started by a test; any still holding their dirs shut down at teardown."""
    started: list[LogManager] = []
    yield started
    for m in started:
        if m.holds_dirs:
            m.shutdown()


def start(managers, dirs, clock, config=CONFIG, **kwargs) -> LogManager:
    m = LogManager(dirs, config, clock=clock, **kwargs)
    m.startup()
    managers.append(m)
    return m


def fill(log, make_batch, n, tag=b"m"):
    values = []
    for i in range(n):
        vals = [tag + b"-%d-%d" % (i, j) for j in range(1 + i % 2)]
        log.append(make_batch(vals))
        values += vals
    return values


def test_startup_and_shutdown_write_the_marker_and_checkpoints(tmp_path, managers, clock, make_batch, read_all):
    d = tmp_path / "data"
    assert not is_log_dir(d.parent) and not is_locked(d)
    m = start(managers, [d], clock, broker_id=7)
    assert (d / "meta.properties").read_text() == "version=0\nbroker.id=7\n"
    assert is_log_dir(d) and is_locked(d)
    assert m.unclean_dirs == []  # a new dir holds nothing to recover
    a = m.get_or_create("orders", 0)
    b = m.get_or_create("orders", 1)
    va = fill(a, make_batch, 12)
    vb = fill(b, make_batch, 3, b"b")
    a.delete_retained(0)  # nothing: retention off
    m.high_watermarks[("orders", 0)] = 5
    assert not (d / CLEAN_SHUTDOWN).exists()
    m.shutdown()
    assert (d / CLEAN_SHUTDOWN).exists() and not is_locked(d)
    assert OffsetCheckpointFile(d / RECOVERY_POINT).read() == {("orders", 0): len(va), ("orders", 1): len(vb)}
    assert OffsetCheckpointFile(d / LOG_START).read() == {("orders", 0): 0, ("orders", 1): 0}
    assert OffsetCheckpointFile(d / REPLICATION).read() == {("orders", 0): 5}

    again = start(managers, [d], clock)
    assert not (d / CLEAN_SHUTDOWN).exists()  # removed at start: a crash from now on is unclean
    assert again.unclean_dirs == [] and sorted(again.logs) == [("orders", 0), ("orders", 1)]
    assert again.high_watermarks == {("orders", 0): 5}
    a2 = again.get("orders", 0)
    assert a2.recovery_point == a2.log_end_offset == len(va) and a2.recovery_plan is None
    assert [r.value for r in read_all(a2)] == va
    assert [r.value for r in read_all(again.get("orders", 1))] == vb
    assert again.get("orders", 2) is None


def test_a_second_manager_is_locked_out(tmp_path, managers, clock):
    d = tmp_path / "data"
    first = start(managers, [d], clock)
    second = LogManager([d], CONFIG, clock=clock)
    with pytest.raises(LogDirLockedError, match=str(d)):
        second.startup()
    assert is_locked(d)
    assert second.logs == {} and not second.holds_dirs
    first.shutdown()
    assert not is_locked(d)
    third = start(managers, [d], clock)
    assert is_locked(d)
    third.shutdown()
    assert not is_locked(d)


def test_a_refused_start_holds_no_dir(tmp_path, managers, clock):
    d1, d2 = tmp_path / "a", tmp_path / "b"
    first = start(managers, [d2], clock)
    second = LogManager([d1, d2], CONFIG, clock=clock)
    with pytest.raises(LogDirLockedError, match=str(d2)):
        second.startup()
    assert not is_locked(d1) and is_locked(d2)
    first.shutdown()
    start(managers, [d1, d2], clock)
    assert is_locked(d1) and is_locked(d2)


def test_a_dir_locked_by_another_process(tmp_path, managers, clock):
    d = tmp_path / "data"
    m = start(managers, [d], clock)
    code = f"from broker.log.manager import is_locked; print(is_locked({str(d)!r}))"
    env = {**os.environ, "PYTHONPATH": str(Path(broker.__file__).parents[1])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "True"
    m.shutdown()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "False"


def test_unclean_restart_recovers_and_quarantines(tmp_path, managers, clock, make_batch, read_all):
    d = tmp_path / "data"
    m = start(managers, [d], clock)
    log = m.get_or_create("orders", 0)
    values = fill(log, make_batch, 20)
    m.high_watermarks[("orders", 0)] = len(values)
    m.shutdown()
    (d / CLEAN_SHUTDOWN).unlink()  # as if the broker had died
    seg = sorted((d / "orders-0").glob("*.log"))[-1]
    size = seg.stat().st_size
    # a torn final write: the first half of a batch, then garbage
    torn = make_batch([b"never acknowledged"])[:40] + b"\xde\xad" * 10
    with open(seg, "ab") as f:
        f.write(torn)

    again = start(managers, [d], clock)
    assert again.unclean_dirs == [d]
    log = again.get("orders", 0)
    assert log.log_end_offset == len(values)
    assert [r.value for r in read_all(log)] == values
    assert seg.stat().st_size == size
    q = d / "orders-0" / f"{seg.name}.{size}-{size + len(torn)}.quarantined"
    assert q.read_bytes() == torn
    assert log.recovery_plan.segments[-1].kind == "tail"
    assert log.append(make_batch([b"next"])).first_offset == len(values)


def test_unclean_restart_clamps_high_watermarks_to_what_survived(tmp_path, managers, clock, make_batch):
    d = tmp_path / "data"
    m = start(managers, [d], clock)
    log = m.get_or_create("orders", 0)
    fill(log, make_batch, 6)
    leo = log.log_end_offset
    m.high_watermarks[("orders", 0)] = leo
    m.shutdown()
    (d / CLEAN_SHUTDOWN).unlink()
    seg = sorted((d / "orders-0").glob("*.log"))[-1]
    os.truncate(seg, seg.stat().st_size - 3)  # the last batch did not reach the disk whole
    again = start(managers, [d], clock)
    survived = again.get("orders", 0).log_end_offset
    assert survived < leo
    assert again.high_watermarks[("orders", 0)] == survived


def test_crash_without_shutdown_in_another_process(tmp_path, managers, clock, read_all):
    """kill -9 in spirit: a broker process appends, checkpoints once, appends more and exits without shutdown."""
    d = tmp_path / "data"
    script = textwrap.dedent(
        f"""
        import os
        from pathlib import Path
        from broker.log.config import LogConfig
        from broker.log.manager import LogManager
        from broker.records.batch import build_batch, records_from_values
        m = LogManager([Path({str(d)!r})], LogConfig(segment_bytes=400, segment_ms=1 << 60))
        m.startup()
        log = m.get_or_create("orders", 0)
        for i in range(30):
            log.append(build_batch(records_from_values([b"c-%d" % i])))
            if i == 10:
                log.flush()
                m.checkpoint()
        os._exit(0)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(broker.__file__).parents[1])}
    subprocess.run([sys.executable, "-c", script], env=env, check=True)
    assert not is_locked(d) and not (d / CLEAN_SHUTDOWN).exists()
    assert OffsetCheckpointFile(d / RECOVERY_POINT).read() == {("orders", 0): 11}
    seg = sorted((d / "orders-0").glob("*.log"))[-1]
    with open(seg, "ab") as f:
        f.write(b"\x00" * 33)
    m = start(managers, [d], clock)
    assert m.unclean_dirs == [d]
    log = m.get("orders", 0)
    assert [r.value for r in read_all(log)] == [b"c-%d" % i for i in range(30)]
    assert (d / "orders-0" / f"{seg.name}.{seg.stat().st_size}-{seg.stat().st_size + 33}.quarantined").exists()


def test_get_or_create_spreads_partitions_over_log_dirs(tmp_path, managers, clock, make_batch, read_all):
    d1, d2 = tmp_path / "a", tmp_path / "b"
    m = start(managers, [d1, d2], clock)
    logs = {p: m.get_or_create("orders", p) for p in range(4)}
    assert m.get_or_create("orders", 2) is logs[2]
    homes = {p: log.dir.parent for p, log in logs.items()}
    assert homes == {0: d1, 1: d2, 2: d1, 3: d2}
    assert all((homes[p] / f"orders-{p}" / segment_name(0)).exists() for p in range(4))
    values = {p: fill(logs[p], make_batch, 2 + p, b"p%d" % p) for p in range(4)}
    m.shutdown()
    leo = {p: len(values[p]) for p in range(4)}
    assert leo == {0: 3, 1: 4, 2: 6, 3: 7}
    assert OffsetCheckpointFile(d1 / RECOVERY_POINT).read() == {("orders", 0): 3, ("orders", 2): 6}
    assert OffsetCheckpointFile(d2 / RECOVERY_POINT).read() == {("orders", 1): 4, ("orders", 3): 7}

    again = start(managers, [d1, d2], clock)
    assert sorted(again.logs) == [("orders", p) for p in range(4)]
    for p in range(4):
        assert again.get("orders", p).dir == homes[p] / f"orders-{p}"
        assert [r.value for r in read_all(again.get("orders", p))] == values[p]
    # the next new partition goes to the dir holding fewer
    m3 = again.get_or_create("clicks", 0)
    m4 = again.get_or_create("clicks", 1)
    assert {m3.dir.parent, m4.dir.parent} == {d1, d2}


def test_new_partitions_go_where_there_are_fewer(tmp_path, managers, clock):
    d1, d2 = tmp_path / "a", tmp_path / "b"
    m = start(managers, [d1], clock)
    m.get_or_create("t", 0)
    m.get_or_create("t", 1)
    m.shutdown()
    m = start(managers, [d1, d2], clock)
    assert [m.get_or_create("u", p).dir.parent for p in range(3)] == [d2, d2, d1]


def test_topic_configs_flush_retention_and_delete(tmp_path, managers, clock, make_batch):
    d = tmp_path / "data"
    m = start(managers, [d], clock, config=LogConfig(flush_ms=1000, segment_ms=1 << 60))
    log = m.get_or_create("orders", 0)
    log.append(make_batch([b"old"], timestamp=clock.ms - 10 * 86_400_000))
    log.roll()
    log.append(make_batch([b"new"], timestamp=clock.ms))
    assert m.flush_dirty() == 0
    clock.advance(1000)
    assert m.flush_dirty() == 1 and log.recovery_point == 2
    assert m.run_retention() == {("orders", 0): [0]}  # the default retention.ms is 7 days
    assert log.log_start_offset == 1
    m.shutdown()
    assert OffsetCheckpointFile(d / LOG_START).read() == {("orders", 0): 1}
    m = start(managers, [d], clock)
    assert m.get("orders", 0).log_start_offset == 1
    m.shutdown()
    m = LogManager([d], LogConfig(), clock=clock)
    m.startup({"orders": LogConfig(retention_ms=-1, segment_bytes=123)})
    managers.append(m)
    assert m.get("orders", 0).config.segment_bytes == 123
    m.delete("orders", 0)
    assert m.get("orders", 0) is None and not any(p.name.startswith("orders-0") for p in d.iterdir())
    m.delete("orders", 0)  # unknown: nothing to do


def test_a_log_of_an_earlier_topic_of_the_same_name_is_set_aside(tmp_path, managers, clock, make_batch, read_all):
    d = tmp_path / "data"
    m = start(managers, [d], clock)
    old = m.get_or_create("t", 0, topic_id=100)
    values = fill(old, make_batch, 3)
    assert read_topic_id(old.dir) == 100
    assert m.get_or_create("t", 0, topic_id=100) is old  # the same topic: the same log
    m.shutdown()
    m = start(managers, [d], clock)  # as after a restart: loaded from disk, then told the topic's id
    new = m.get_or_create("t", 0, topic_id=200)
    assert new.log_end_offset == 0 and read_topic_id(new.dir) == 200
    [stray] = [p for p in d.iterdir() if p.name.startswith("t-0.")]
    assert stray.name.endswith("-stray")  # kept, not deleted, and never loaded again
    kept = PartitionLog(stray, CONFIG)
    assert read_topic_id(stray) == 100 and [r.value for r in read_all(kept)] == values
    kept.close()
    m.shutdown()
    m = start(managers, [d], clock)
    assert sorted(m.logs) == [("t", 0)] and m.get("t", 0).log_end_offset == 0


def test_a_log_without_a_topic_id_is_adopted(tmp_path, managers, clock, make_batch):
    m = start(managers, [tmp_path / "data"], clock)
    plog = m.get_or_create("t", 0)  # no id known (as written before ids were kept)
    fill(plog, make_batch, 2)
    assert read_topic_id(plog.dir) is None
    assert m.get_or_create("t", 0, topic_id=7) is plog and read_topic_id(plog.dir) == 7


def test_a_log_dir_of_another_cluster_is_refused_and_left_unlocked(tmp_path, clock):
    """meta.properties records ZooKeeper's cluster id, as Kafka's does; a dir recorded for another cluster is
    refused (its ZooKeeper data was wiped, or it is another cluster's), with every dir unlocked again."""
    d1, d2 = tmp_path / "a", tmp_path / "b"
    d1.mkdir()
    (d1 / "meta.properties").write_text("version=0\nbroker.id=3\n")  # written before cluster ids were kept
    m = LogManager([d1, d2], CONFIG, clock=clock, broker_id=3)
    m.startup(cluster_id="cluster-A")
    m.shutdown()
    assert (d1 / "meta.properties").read_text() == "version=0\nbroker.id=3\ncluster.id=cluster-A\n"
    assert (d2 / "meta.properties").read_text() == "version=0\nbroker.id=3\ncluster.id=cluster-A\n"
    other = LogManager([d1, d2], CONFIG, clock=clock, broker_id=3)
    with pytest.raises(InconsistentClusterIdError, match=r"belongs to cluster cluster-A.*cluster-B"):
        other.startup(cluster_id="cluster-B")
    assert not is_locked(d1) and not is_locked(d2)
    again = LogManager([d1, d2], CONFIG, clock=clock, broker_id=3)
    again.startup(cluster_id="cluster-A")  # the right cluster, and without one (offline tools) still opens
    again.shutdown()
    unknown = LogManager([d1], CONFIG, clock=clock, broker_id=3)
    unknown.startup()
    unknown.shutdown()


@pytest.mark.parametrize("damage", ["empty", "torn", "binary"])
@pytest.mark.parametrize("name", [RECOVERY_POINT, LOG_START, REPLICATION])
def test_a_damaged_checkpoint_is_set_aside_and_rebuilt_not_fatal(tmp_path, managers, clock, make_batch, read_all,
                                                                 caplog, name, damage):  # fmt: skip
    """An empty, torn or binary checkpoint file neither fails the start nor is overwritten unseen: it is kept
    as `<name>.<ms>.corrupt`, a warning names it, the logs load whole (recovered from their beginnings if the
    stop was unclean) and the next checkpoint writes a good file."""
    d = tmp_path / "data"
    m = start(managers, [d], clock)
    values = fill(m.get_or_create("orders", 0), make_batch, 12)
    m.shutdown()
    (d / CLEAN_SHUTDOWN).unlink()  # an unclean stop too: recovery must not trust the lost recovery points
    bad = {"empty": b"", "torn": b"0\n2\norders 0 5\n", "binary": b"\x00\xff" * 8}[damage]
    (d / name).write_bytes(bad)
    again = start(managers, [d], clock)
    assert [r.value for r in read_all(again.get("orders", 0))] == values
    (kept,) = d.glob(f"{name}.*.corrupt")
    assert kept.read_bytes() == bad
    assert any(str(kept) in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    again.checkpoint()
    OffsetCheckpointFile(d / name).read()  # whole again


def test_a_shutdown_that_cannot_write_checkpoints_reports_it_and_leaves_no_marker(
    tmp_path, managers, clock, make_batch, monkeypatch
):
    """A full disk at shutdown: the failure is returned (the broker says the stop was not clean), the old
    checkpoints stay whole, no `.tmp` is left and no clean-shutdown marker is written."""
    d = tmp_path / "data"
    m = start(managers, [d], clock)
    fill(m.get_or_create("orders", 0), make_batch, 5)
    m.checkpoint()
    before = (d / RECOVERY_POINT).read_bytes()
    real_fsync = os.fsync

    def full(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".tmp"):
            raise OSError(28, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full)
    problems = m.shutdown()
    assert problems and "No space left on device" in problems[0]
    assert (d / RECOVERY_POINT).read_bytes() == before
    assert not list(d.glob("*.tmp")) and not (d / CLEAN_SHUTDOWN).exists()


def test_an_offline_dir_takes_no_new_partitions(tmp_path, managers, clock):
    a, b = tmp_path / "a", tmp_path / "b"
    m = start(managers, [a, b], clock)
    m.get_or_create("t", 0)
    m.mark_offline(("t", 0), OSError(28, "No space left on device"))
    offline = m.dir_of(("t", 0))
    for p in range(1, 4):
        m.get_or_create("t", p)
    assert m.is_offline(("t", 0)) and all(m.dir_of(("t", p)) != offline for p in range(1, 4))
    m.mark_offline(("t", 1), OSError(5, "Input/output error"))
    with pytest.raises(OSError, match="every log dir is offline"):
        m.get_or_create("t", 9)


def test_a_shutdown_flushes_by_one_syncfs_per_dir_else_file_by_file(tmp_path, managers, clock, make_batch,
                                                                     monkeypatch):  # fmt: skip
    """The clean-shutdown flush: every log written out, then one syncfs of the dir before the marker; where
    syncfs is unavailable, each segment and index is fsynced as before; the recovery points reach the log ends
    either way."""
    import broker.log.manager as manager

    calls: list[Path] = []
    fsynced: list[str] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        fsynced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    for available in (True, False):
        d = tmp_path / f"data-{available}"
        m = start(managers, [d], clock)
        values = fill(m.get_or_create("orders", 0), make_batch, 5)
        monkeypatch.setattr(manager, "syncfs", lambda p, ok=available: calls.append(p) or ok)
        monkeypatch.setattr(os, "fsync", counting_fsync)
        fsynced.clear()
        assert m.shutdown() == []
        monkeypatch.setattr(os, "fsync", real_fsync)
        assert calls[-1] == d and (d / CLEAN_SHUTDOWN).exists()
        assert OffsetCheckpointFile(d / RECOVERY_POINT).read() == {("orders", 0): len(values)}
        segment_fsyncs = [f for f in fsynced if f.endswith((".log", ".index", ".timeindex"))]
        assert bool(segment_fsyncs) is not available  # syncfs: no fsync per file


def test_a_failed_syncfs_leaves_no_marker(tmp_path, managers, clock, make_batch, monkeypatch):
    """syncfs reports a write-back error: data may be lost, so the dir is not counted clean (its next start
    recovers it), rather than trusting fsyncs on descriptors opened after the error."""
    import broker.log.manager as manager

    d = tmp_path / "data"
    m = start(managers, [d], clock)
    fill(m.get_or_create("orders", 0), make_batch, 5)

    def failing(p: Path) -> bool:
        raise OSError(5, "syncfs: Input/output error", str(p))

    monkeypatch.setattr(manager, "syncfs", failing)
    problems = m.shutdown()
    assert problems and "Input/output error" in problems[0]
    assert not (d / CLEAN_SHUTDOWN).exists()


def test_a_new_log_is_created_without_fsync(tmp_path, managers, clock, monkeypatch):
    """Topic creation at thousands of partitions: no fsync per new log; its dir and files are noted for the
    next durability point of the log dir."""
    d = tmp_path / "data"
    m = start(managers, [d], clock)
    fsynced: list[int] = []
    monkeypatch.setattr(os, "fsync", fsynced.append)
    m.get_or_create("orders", 0, topic_id=5)
    assert fsynced == [] and read_topic_id(d / "orders-0") == 5
    assert {p.name for p in m.unsynced[d]} >= {"orders-0", "topic.id", segment_name(0)}
