"""BatchBuilder (the producer's incremental batch) against build_batch, the reference encoder."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.records.batch import BATCH_HEADER_SIZE, Record, build_batch, crc_ok, decode_header, iter_records
from broker.records.builder import BatchBuilder
from broker.records.compression import Codec

TS = 1_700_000_000_000

maybe_bytes = st.none() | st.binary(max_size=64)
headers = st.lists(st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=24)), max_size=4)
records = st.lists(
    st.tuples(st.integers(min_value=-100_000, max_value=100_000), maybe_bytes, maybe_bytes, headers),
    min_size=1, max_size=40,
)  # fmt: skip


def _both(rows, codec=Codec.NONE, **ids):
    builder = BatchBuilder(codec)
    deltas = [builder.append(TS + dt, k, v, tuple(h)) for dt, k, v, h in rows]
    assert deltas == list(range(len(rows)))
    assert builder.count == len(rows)
    ref = [Record(i, TS + dt, k, v, tuple(h)) for i, (dt, k, v, h) in enumerate(rows)]
    return builder, builder.build(**ids), build_batch(ref, codec=codec, **ids), ref


@given(records)
def test_uncompressed_batches_are_byte_identical(rows):
    builder, got, want, _ = _both(rows)
    assert got == want
    assert len(builder) == len(got)  # BATCH_HEADER_SIZE + the records


@given(records, st.integers(min_value=0, max_value=2**62), st.integers(min_value=0, max_value=32767),
       st.integers(min_value=0, max_value=2**31 - 1))  # fmt: skip
def test_producer_id_epoch_and_sequence(rows, pid, epoch, seq):
    ids = {"producer_id": pid, "producer_epoch": epoch, "base_sequence": seq}
    _, got, want, _ = _both(rows, **ids)
    assert got == want
    h = decode_header(got)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (pid, epoch, seq)


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
@settings(max_examples=25, deadline=None)
@given(rows=records)
def test_compressed_batches_decode_to_the_same_records(codec, rows):
    _, got, want, ref = _both(rows, codec)
    hg, hw = decode_header(got), decode_header(want)
    assert hg.codec == hw.codec == int(codec)
    assert hg._replace(crc=0, length=0) == hw._replace(crc=0, length=0)
    assert crc_ok(got, 0, hg)
    assert hg.size == len(got)
    assert list(iter_records(got)) == list(iter_records(want)) == ref


@given(records)
def test_header_fields(rows):
    _, got, _, ref = _both(rows)
    h = decode_header(got)
    assert h.base_offset == 0
    assert h.magic == 2
    assert h.record_count == len(rows)
    assert h.last_offset_delta == len(rows) - 1
    assert h.base_timestamp == ref[0].timestamp
    assert h.max_timestamp == max(r.timestamp for r in ref)
    assert h.partition_leader_epoch == -1
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (-1, -1, -1)
    assert crc_ok(got, 0, h)


@pytest.mark.parametrize(("key", "value", "dt"), [
    (b"k" * 20_000, b"v" * 70_000, 0),  # lengths past the precomputed small-varint table
    (None, b"", 20_000),  # a timestamp delta past the table
    (b"", None, -20_000),  # a negative timestamp delta
    (None, None, 2**40),
])  # fmt: skip
def test_large_lengths_and_deltas(key, value, dt):
    rows = [(0, b"first", b"x", []), (dt, key, value, [("h", value), ("n", None)])]
    _, got, want, ref = _both(rows)
    assert got == want
    assert list(iter_records(got)) == ref


def test_more_records_than_the_varint_table():
    rows = [(i % 3, None, b"%d" % i, []) for i in range(17_000)]
    _, got, want, ref = _both(rows)
    assert got == want
    out = list(iter_records(got))
    assert out[-1].offset == 16_999
    assert out[-1].value == b"16999"


def test_len_grows_with_each_record():
    b = BatchBuilder()
    assert len(b) == BATCH_HEADER_SIZE
    sizes = []
    for i in range(5):
        b.append(TS, None, b"x" * i)
        sizes.append(len(b))
    assert sizes == sorted(sizes) and len(set(sizes)) == 5
    assert len(b.build()) == len(b)


values_lists = st.lists(maybe_bytes, min_size=1, max_size=60)


@pytest.mark.parametrize("compiled", [True, False], ids=["c-encoder", "python"])
@settings(max_examples=60, deadline=None)
@given(values=values_lists, key=maybe_bytes, hdrs=headers, max_bytes=st.integers(1, 3000),
       max_count=st.integers(1, 70))  # fmt: skip
def test_append_many_equals_appending_one_by_one_up_to_its_limits(compiled, values, key, hdrs, max_bytes, max_count):
    with pytest.MonkeyPatch.context() as mp:
        if not compiled:
            mp.setattr("broker.records.builder._append", None)
            mp.setattr("broker.records.builder._append_many", None)
        batches, start = [], 0
        while start < len(values):  # as send_many fills and seals batches
            b = BatchBuilder()
            added = b.append_many(TS, key, values, start, tuple(hdrs), max_bytes, max_count)
            assert added == b.count >= 1
            start += added
            batches.append(b)
    rebuilt = 0
    for i, b in enumerate(batches):
        ref = BatchBuilder()
        for _ in range(b.count - 1):
            ref.append(TS, key, values[rebuilt], tuple(hdrs))
            rebuilt += 1
        if b.count > 1:  # without its last record the batch was below both limits
            assert ref.count < max_count and len(ref) < max_bytes
        ref.append(TS, key, values[rebuilt], tuple(hdrs))
        rebuilt += 1
        if i < len(batches) - 1:  # every batch but the last stopped at a limit
            assert ref.count == max_count or len(ref) >= max_bytes
        assert b.build() == ref.build()
    assert rebuilt == len(values)


def test_append_many_stops_at_the_byte_limit_and_continues_a_batch():
    b = BatchBuilder()
    b.append(TS, None, b"first", ())
    added = b.append_many(TS + 5, b"k", [b"v" * 100] * 10, 2, (), BATCH_HEADER_SIZE + 340, 100)
    assert added == 3  # 8 values from index 2 were offered; each record is ~110 bytes
    assert b.count == 4
    rows = list(iter_records(b.build()))
    assert [r.offset for r in rows] == [0, 1, 2, 3]
    assert [r.timestamp for r in rows] == [TS, TS + 5, TS + 5, TS + 5]
    assert rows[1].key == b"k" and rows[3].value == b"v" * 100


@pytest.mark.parametrize("compiled", [True, False], ids=["c-encoder", "python"])
def test_append_many_with_a_bad_value_appends_nothing(monkeypatch, compiled):
    if not compiled:
        monkeypatch.setattr("broker.records.builder._append", None)
        monkeypatch.setattr("broker.records.builder._append_many", None)
    b = BatchBuilder()
    b.append(TS, None, b"kept", ())
    before = bytes(b.buf)
    with pytest.raises(TypeError, match="bytes or None"):
        b.append_many(TS, None, [b"ok", b"ok", "not bytes", b"ok"], 0, (), 1 << 20, 100)
    assert (bytes(b.buf), b.count) == (before, 1)
