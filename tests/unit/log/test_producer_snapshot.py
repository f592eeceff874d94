"""broker/log/producer_snapshot.py and the producer state a partition starts with (producer_state_io.load_states):
Kafka's snapshot layout, its CRC, which snapshot counts, and what the log after it adds."""

from __future__ import annotations

import struct
import time

from broker.log import producer_snapshot as ps
from broker.log.producer_snapshot import SnapshotEntry
from broker.log.producer_state import EXPIRATION_MS, MAX_SEQ, ProducerStates
from broker.log.producer_state_io import load_states
from broker.protocol.errors import ErrorCode
from broker.records.batch import Record, build_batch
from broker.records.crc import crc32c

NONE = ErrorCode.NONE


def test_the_layout_is_kafkas_version_1() -> None:
    entries = [SnapshotEntry(7, 3, 41, 1041, 4, 1_700_000_000_000), SnapshotEntry(2**40, 0, 0, 5, 0, 1)]
    data = ps.encode(entries)
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count, len(data)) == (1, 2, 10 + 2 * 46)
    assert crc == crc32c(data[6:])
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (7, 3, 41, 1041, 4, 1_700_000_000_000, -1, -1)
    assert ps.decode(data) == entries
    assert ps.decode(ps.encode([])) == []


def test_a_damaged_snapshot_is_no_snapshot() -> None:
    data = ps.encode([SnapshotEntry(7, 3, 41, 1041, 4, 0)])
    flipped = bytearray(data)
    flipped[20] ^= 1
    assert ps.decode(bytes(flipped)) is None  # its CRC
    assert ps.decode(data[:-1]) is None and ps.decode(data + b"\0") is None and ps.decode(data[:5]) is None
    assert ps.decode(b"\x00\x02" + data[2:]) is None  # another version


def test_write_keeps_one_snapshot_and_latest_skips_what_the_log_no_longer_reaches(tmp_path) -> None:
    ps.write(tmp_path, 10, [SnapshotEntry(1, 0, 0, 9, 0, 0)])
    ps.write(tmp_path, 20, [SnapshotEntry(1, 0, 1, 19, 0, 0)])
    assert [o for o, _ in ps.snapshots(tmp_path)] == [20]
    assert ps.latest(tmp_path, 25) == (20, [SnapshotEntry(1, 0, 1, 19, 0, 0)])
    assert ps.latest(tmp_path, 15) is None  # the log was cut back below it: deleted
    assert ps.snapshots(tmp_path) == []
    ps.snapshot_path(tmp_path, 5).write_bytes(b"junk")
    assert ps.latest(tmp_path, 25) is None and ps.snapshots(tmp_path) == []


def test_states_round_trip_through_a_snapshot_each_producers_last_batch() -> None:
    s = ProducerStates()
    s.record(7, 3, 10, 14, 100)
    s.record(7, 3, 15, 15, 105)
    s.record(8, 0, MAX_SEQ - 1, 1, 200)  # a batch across the sequence wrap
    now = int(time.time() * 1000)
    back = ProducerStates.from_snapshot(s.snapshot(now), now)
    assert back.check(7, 3, 15, 15) == (NONE, 105) and back.check(7, 3, 16, 16) == (NONE, -1)
    assert back.check(8, 0, MAX_SEQ - 1, 1) == (NONE, 200) and back.check(8, 0, 2, 2) == (NONE, -1)
    assert back.check(7, 3, 10, 14)[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # only the last batch is kept


def _append(log, pid: int, seq: int, n: int = 1) -> int:
    data = build_batch([Record(i, 1_700_000_000_000, None, b"v") for i in range(n)], producer_id=pid,
                       producer_epoch=0, base_sequence=seq)  # fmt: skip
    return log.append(data).first_offset


def test_load_states_after_a_clean_shutdown_and_after_a_crash(open_log, tmp_path) -> None:
    log = open_log()
    offsets = []
    for seq in range(30):
        if seq in (10, 20):
            log.roll()
        offsets.append(_append(log, 5, seq))
    assert log.bases == [0, 10, 20]
    # a clean shutdown's snapshot at the log end: nothing to read from the log
    s = ProducerStates()
    s.record(5, 0, 29, 29, offsets[29])
    ps.write(log.dir, log.log_end_offset, s.snapshot(0))
    loaded = load_states(log)
    assert loaded.check(5, 0, 29, 29) == (NONE, offsets[29]) and loaded.check(5, 0, 30, 30) == (NONE, -1)
    # more batches after the snapshot (a crash): they are read from the log
    more = [_append(log, 5, seq, 2) for seq in (30, 32)] + [_append(log, 6, 0)]
    loaded = load_states(log)
    assert loaded.check(5, 0, 32, 33) == (NONE, more[1]) and loaded.check(5, 0, 30, 31) == (NONE, more[0])
    assert loaded.check(6, 0, 0, 0) == (NONE, more[2])
    # no snapshot at all: the active segment's batches (the last five of them per producer)
    for _, path in ps.snapshots(log.dir):
        path.unlink()
    loaded = load_states(log)
    assert loaded.check(5, 0, 32, 33) == (NONE, more[1]) and loaded.check(5, 0, 28, 28) == (NONE, offsets[28])
    assert loaded.check(6, 0, 0, 0) == (NONE, more[2])
    # a snapshot from before the active segment is not used (what lies between is not read either)
    ps.write(log.dir, 15, ProducerStates().snapshot(0))
    assert load_states(log).check(5, 0, 32, 33) == (NONE, more[1])


def test_after_a_crash_without_a_snapshot_the_whole_log_is_read(open_log) -> None:
    log = open_log(index_interval_bytes=100)
    early = _append(log, 1, 0)  # producer 1 wrote only at the start
    late = [_append(log, 2, seq) for seq in range(100)]
    loaded = load_states(log)
    assert loaded.check(2, 0, 99, 99) == (NONE, late[99])  # the recent writer is known
    assert loaded.check(1, 0, 0, 0) == (NONE, early)  # and the early one (no range is skipped)


def test_producers_silent_for_the_expiration_time_are_neither_saved_nor_loaded() -> None:
    now = 1_800_000_000_000
    s = ProducerStates()
    s.record(1, 0, 0, 0, 10, when_ms=now - EXPIRATION_MS)  # silent for a day
    s.record(2, 0, 0, 0, 11, when_ms=now - 1000)
    assert [e.producer_id for e in s.snapshot(now)] == [2] and s.snapshot(now)[0].timestamp == now - 1000
    entries = [SnapshotEntry(1, 0, 0, 10, 0, now - EXPIRATION_MS), SnapshotEntry(2, 0, 0, 11, 0, now - 1000)]
    assert list(ProducerStates.from_snapshot(entries, now).entries) == [2]


def test_an_unlinked_snapshot_is_installed_and_a_left_one_pruned_off_the_loop_only(tmp_path) -> None:
    """A snapshot written off the event loop is read by no load until installed; a write on the loop (a roll's)
    leaves another one being written alone; the writer's prune removes what a crash left."""
    entry = ps.SnapshotEntry(1, 0, 5, 10, 0, 1000)
    left = ps.write_unlinked(tmp_path, 3, ps.encode([entry]))  # (a crash before its install)
    unlinked = ps.write_unlinked(tmp_path, 7, ps.encode([entry]))
    assert ps.snapshots(tmp_path) == []
    ps.write(tmp_path, 5, [entry])  # a roll's, on the loop, while the other is being written
    assert unlinked.exists() and left.exists()
    ps.install(unlinked, 7)
    ps.prune(tmp_path, 7, keep=lambda offset: False)
    assert [o for o, _ in ps.snapshots(tmp_path)] == [7] and not list(tmp_path.glob(f"*{ps.UNLINKED}"))
    assert ps.latest(tmp_path, 7) == (7, [entry])


def test_bytes_after_counts_the_log_past_an_offset(tmp_path):
    """What `snapshot_due` weighs: the bytes from the batch holding the offset to the log end (none at the
    log end, the whole log below its start)."""
    from broker.log.log import PartitionLog
    from broker.log.producer_state_io import bytes_after
    from broker.records.batch import Record, build_batch

    log = PartitionLog(tmp_path / "t-0")
    sizes = [log.size_bytes]
    for i in range(3):
        log.append(build_batch([Record(0, 0, b"k", b"v" * (10 + i))]))
        sizes.append(log.size_bytes)
    assert bytes_after(log, 0) == sizes[3]
    assert bytes_after(log, 1) == sizes[3] - sizes[1]
    assert bytes_after(log, 3) == 0
    log.close()
