"""Recovery (broker start-up after an unclean stop, `kafkactl recover`) on logs as Apache Kafka wrote
them: message sets of magic 0 and 1, uncompressed or in gzip / snappy / lz4 wrappers, RecordBatch v2,
and a log that moves from one to the next as an upgraded cluster's does.

The rule: healthy data is never cut, in any format Kafka accepts in a log; only what fails its own
format's checks is (CRC-32 for magic 0/1 and the wrapper's records decoding, CRC-32C for v2), and a
wrapper counts as its inner records from its first inner offset, so reads find every offset.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from broker.log import recovery
from broker.log.config import LogConfig
from broker.log.inspection import verify_indexes
from broker.log.log import PartitionLog
from broker.log.scanner import ScannedBatch, open_segment, read_batch, scan
from broker.log.segment import segment_name
from broker.records.batch import Record, build_batch, iter_records
from broker.records.compression import Codec
from broker.records.legacy import inner_messages
from tests.unit.records.legacy_sets import (
    UPGRADED_CLUSTER,
    Spec,
    T,
    batch_bytes,
    message,
    stored_set,
    write_partition,
)

CONFIG = LogConfig(index_interval_bytes=64, segment_ms=1 << 60)  # write_partition's index interval
NONE, GZIP, SNAPPY, LZ4 = Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4


def files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.suffix == ".log"}


def records_of(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of the whole batches in `data`, of any magic."""
    out, pos = [], 0
    while pos < len(data):
        item = read_batch(data, pos, len(data))
        assert isinstance(item, ScannedBatch) and item.valid, item
        if item.magic == 2:
            out += [(r.offset, r.value) for r in iter_records(data, pos, item.header)]
        else:
            out += [(m.offset, m.value) for m in inner_messages(item.legacy)]
        pos = item.end
    return out


def read_every_offset(log: PartitionLog) -> list[tuple[int, bytes]]:
    """Each offset fetched on its own (max_bytes 1: the one batch holding it), as a consumer seeking there."""
    out = []
    for offset in range(log.log_start_offset, log.log_end_offset):
        sl = log.read(offset, 1)
        assert sl is not None, f"nothing served at {offset}"
        got = dict(records_of(sl.read()))
        assert offset in got, f"read({offset}) served a batch without it: {sorted(got)}"
        out.append((offset, got[offset]))
    return out


def read_on(log: PartitionLog) -> list[tuple[int, bytes]]:
    """Every record from the log start, batch after batch, as a consumer reads on (gaps skipped)."""
    out: list[tuple[int, bytes]] = []
    offset = log.log_start_offset
    while (sl := log.read(offset, 1)) is not None:
        got = [r for r in records_of(sl.read()) if r[0] >= offset]
        assert got, f"read({offset}) served nothing new"
        out += got
        offset = got[-1][0] + 1
    return out


CASES: dict[str, list[list[Spec]]] = {
    **{
        f"magic{m}-{c.name.lower()}": [[(m, c, 3), (m, c, 1), (m, c, 4)], [(m, c, 2), (m, c, 5)]]
        for m in (0, 1)
        for c in (NONE, GZIP, SNAPPY, LZ4)
    },
    "v2": [[(2, NONE, 3), (2, GZIP, 2)], [(2, SNAPPY, 4)]],
    "upgraded-cluster": UPGRADED_CLUSTER,
    "legacy-after-v2": [[(2, NONE, 2), (1, GZIP, 3), (2, GZIP, 1), (0, NONE, 1), (1, NONE, 2), (0, LZ4, 2)]],
}


@pytest.mark.parametrize("case", list(CASES))
def test_start_up_after_an_unclean_stop_keeps_a_healthy_kafka_log(tmp_path, case):
    d = tmp_path / "orders-0"
    records = write_partition(d, CASES[case])
    before = files(d)
    plan = recovery.plan_partition(d)
    assert [s.reason for s in plan.segments if s.needs_cut] == []
    assert (plan.needs_cut, plan.lost, plan.next_offset) == (False, [], len(records))
    log = PartitionLog(d, CONFIG, recovery_point=0, clean=False)
    try:
        assert log.log_end_offset == len(records)
        assert files(d) == before
        assert not [p.name for p in d.iterdir() if p.name.endswith(".quarantined")]
        assert read_every_offset(log) == records
        assert log.append(build_batch([Record(0, T, None, b"next")])).first_offset == len(records)
    finally:
        log.close()


@pytest.mark.parametrize("case", list(CASES))
def test_rebuilt_indexes_of_a_kafka_log_agree_with_it(tmp_path, case):
    """Start-up rebuilds lost indexes from the scan: offset entries at the batches' last offsets (a
    wrapper's own offset), time entries at their max timestamps (a wrapper's timestamp); the log's
    offsets have no gap (a wrapper starts at its first inner offset)."""
    d = tmp_path / "orders-0"
    records = write_partition(d, CASES[case])
    for p in d.glob("*index"):
        p.unlink()
    log = PartitionLog(d, CONFIG, recovery_point=0, clean=False)
    try:
        assert read_every_offset(log) == records
    finally:
        log.close()
    for base, path in recovery.segment_files(d):
        with open_segment(path) as buf:
            batches = [b for b in scan(buf)]
        assert list(verify_indexes(path, base, batches, path.stat().st_size)) == []


@pytest.mark.parametrize("salvage", [False, True], ids=["plain", "salvage"])
def test_a_torn_tail_after_legacy_data_cuts_only_the_torn_batch(tmp_path, salvage):
    d = tmp_path / "orders-0"
    records = write_partition(d, CASES["upgraded-cluster"][:2])
    torn, torn_records = batch_bytes(1, GZIP, len(records), 3)
    last = recovery.segment_files(d)[-1][1]
    kept = last.read_bytes()
    last.write_bytes(kept + torn[: len(torn) - 5])
    plan = recovery.plan_partition(d, salvage=salvage)
    [sp] = [s for s in plan.segments if s.needs_cut]
    assert (sp.first_bad_position, sp.kind, [(c.start, c.end) for c in sp.cuts]) == (
        len(kept),
        "tail",
        [(len(kept), len(kept) + len(torn) - 5)],
    )
    assert plan.next_offset == len(records)
    recovery.execute(plan)
    assert last.read_bytes() == kept
    log = PartitionLog(d, CONFIG)
    try:
        assert read_every_offset(log) == records
    finally:
        log.close()


def test_a_damaged_legacy_wrapper_is_cut_from_its_first_inner_offset(tmp_path):
    d = tmp_path / "orders-0"
    records = write_partition(d, [[(0, NONE, 2), (1, GZIP, 4), (1, SNAPPY, 3), (2, NONE, 2)]])
    path = recovery.segment_files(d)[0][1]
    data = bytearray(path.read_bytes())
    items = list(scan(data))
    wrapper = items[2]  # offsets 2..5
    assert (wrapper.base_offset, wrapper.last_offset) == (2, 5)
    data[wrapper.end - 2] ^= 0x55  # inside the compressed value: the wrapper's CRC-32 fails
    path.write_bytes(bytes(data))
    plan = recovery.plan_partition(d)
    [sp] = plan.segments
    assert sp.first_bad_position == wrapper.position and sp.reason.startswith("CRC-32 mismatch")
    assert plan.lost == [(2, 10)] and sp.kind == "mid-log" and plan.next_offset == 2
    salvaged = recovery.plan_partition(d, salvage=True)
    assert salvaged.lost == [(2, 5)] and salvaged.next_offset == len(records)
    recovery.execute(salvaged)
    log = PartitionLog(d, CONFIG)
    try:
        assert read_on(log) == [r for r in records if not 2 <= r[0] <= 5]
    finally:
        log.close()


def test_a_wrapper_whose_records_do_not_decode_is_damage(tmp_path):
    """Its CRC-32 holds, but no consumer could read it: cut, and with salvage only it."""
    d = tmp_path / "orders-0"
    d.mkdir()
    good = stored_set([(None, b"a", T)], 0, magic=1)
    bad = message(2, None, b"\x1f\x8b not really gzip", magic=1, attributes=GZIP)  # claims offsets ..2
    after = stored_set([(None, b"b", T), (None, b"c", T)], 3, magic=1, codec=GZIP)
    (d / segment_name(0)).write_bytes(good + bad + after)
    plan = recovery.plan_partition(d, salvage=True)
    [sp] = plan.segments
    assert [(c.start, c.end) for c in sp.cuts] == [(len(good), len(good) + len(bad))]
    assert "compressed message" in sp.reason and plan.next_offset == 5


@st.composite
def kafka_logs(draw) -> list[list[Spec]]:
    kinds = st.tuples(st.sampled_from([0, 1, 2]), st.sampled_from([NONE, GZIP, SNAPPY, LZ4]), st.integers(1, 5))
    specs = draw(st.lists(kinds, min_size=1, max_size=12))
    cuts = sorted(set(draw(st.lists(st.integers(1, len(specs) - 1), max_size=3)))) if len(specs) > 1 else []
    bounds = [0, *cuts, len(specs)]
    return [specs[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


@settings(max_examples=40, deadline=None)
@given(segments=kafka_logs(), first=st.integers(0, 1 << 40), tear=st.integers(1, 1 << 16))
# a torn magic-0 LZ4 wrapper whose frame stores its inner message uncompressed: that message checks, but it is
# the torn batch's own content, not a batch after the damage (it was classed mid-log)
@example(segments=[[(0, NONE, 2), (0, NONE, 5), (0, LZ4, 1)]], first=53651934, tear=3883)
def test_healthy_data_is_never_cut(segments, first, tear):
    """Any sequence of Kafka's batch formats, from any offset, over any segments: recovery cuts nothing;
    tear the last batch anywhere and it cuts exactly that batch."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "orders-0"
        records = write_partition(d, segments, first)
        for salvage in (False, True):
            plan = recovery.plan_partition(d, salvage=salvage, from_offset=first)
            assert not plan.needs_cut and plan.next_offset == first + len(records)
        last = recovery.segment_files(d)[-1][1]
        data = last.read_bytes()
        final = [i for i in scan(data)][-1]
        keep = final.position + 1 + tear % (final.size - 1)  # inside it: at least one byte kept, one lost
        last.write_bytes(data[:keep])
        plan = recovery.plan_partition(d, from_offset=first)
        assert [(s.first_bad_position, s.kind) for s in plan.segments if s.needs_cut] == [(final.position, "tail")]
        assert plan.next_offset == final.base_offset and plan.lost == [(final.base_offset, None)]


def test_offset_for_timestamp_finds_legacy_records(tmp_path):
    d = tmp_path / "orders-0"
    records = write_partition(d, CASES["magic1-gzip"])
    log = PartitionLog(d, CONFIG)
    try:
        for o, _ in records:
            assert log.offset_for_timestamp(T + o) == (o, T + o)
    finally:
        log.close()
