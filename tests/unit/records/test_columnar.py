"""Columnar decoding of fetched record sets: the C and pure-Python versions agree buffer for buffer,
and both give exactly the records the consumer's row decoder gives."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.client.consumer import decode_records
from broker.errors import CorruptRecordError
from broker.records import batch
from broker.records.batch import CRC_OFFSET, LOG_APPEND_TIME, Record, build_batch, compute_crc
from broker.records.columnar import RecordColumns, decode_columns
from broker.records.compression import Codec

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # fmt: skip
TS = 1_700_000_000_000

maybe_bytes = st.none() | st.binary(max_size=50)
headers = st.lists(st.tuples(st.text(max_size=6), maybe_bytes), max_size=3).map(tuple)
record = st.tuples(st.integers(1, 3), st.integers(-1000, 1000), maybe_bytes, maybe_bytes, headers)
batch_spec = st.tuples(
    st.lists(record, min_size=1, max_size=8),
    st.sampled_from(list(Codec)),
    st.booleans(),  # LogAppendTime
    st.integers(0, 9),  # 0: a control batch
)


def record_set(specs: list) -> bytes:
    """Batches from hypothesis specs; offsets ascend, skipping some (compaction)."""
    out, offset = [], 0
    for recs, codec, log_append, kind in specs:
        rs = []
        for step, ts, key, value, hs in recs:
            offset += step
            rs.append(Record(offset, TS + ts, key, value, hs))
        out.append(build_batch(rs, codec=codec, control=kind == 0, timestamp_type=LOG_APPEND_TIME * log_append))
    return b"".join(out)


def columns(data: bytes, position: int, stop: int, *, pure: bool, monkeypatch) -> RecordColumns | tuple:
    with monkeypatch.context() as m:
        if pure:
            m.setattr(batch, "_codec", None)
        try:
            return decode_columns(data, position, stop)
        except CorruptRecordError as exc:
            return ("corrupt", str(exc))


def rows(cols: RecordColumns) -> list[tuple]:
    """The columns back as (offset, timestamp, timestamp type, key, value, headers) rows."""

    def values(col, n):
        offs = struct.unpack(f"{n + 1}i", col.offsets)
        return [bytes(col.data[offs[i] : offs[i + 1]]) if col.validity and col.validity[i >> 3] >> (i & 7) & 1
                or not col.nulls else None for i in range(n)]  # fmt: skip

    n = cols.count
    offsets = struct.unpack(f"{n}q", cols.offsets)
    stamps = struct.unpack(f"{n}q", cols.timestamps)
    types = struct.unpack(f"{n}i", cols.timestamp_types)
    keys, vals = values(cols.keys, n), values(cols.values, n)
    hs: list = [()] * n
    h = cols.headers
    if h is not None:
        entries = len(h.values.offsets) // 4 - 1
        names = [k.decode() for k in values(h.keys, entries)]
        hvals = values(h.values, entries)
        bounds = struct.unpack(f"{n + 1}i", h.offsets)
        hs = [tuple(zip(names[bounds[i] : bounds[i + 1]], hvals[bounds[i] : bounds[i + 1]], strict=True))
              for i in range(n)]  # fmt: skip
        for i in range(n):
            assert bool(h.validity[i >> 3] >> (i & 7) & 1) == bool(hs[i])  # null exactly when no headers
    return list(zip(offsets, stamps, types, keys, vals, hs, strict=True))


def expected_rows(data: bytes, position: int, stop: int) -> list[tuple]:
    return [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers)
            for r in decode_records(data, "t", 0, position) if r.offset < stop]  # fmt: skip


@pytest.mark.skipif(batch._codec is None, reason="the C codec is not built here")
@SETTINGS
@given(specs=st.lists(batch_spec, min_size=1, max_size=5), data=st.data())
def test_c_and_python_agree_with_the_row_decoder(specs, data, monkeypatch) -> None:
    buf = record_set(specs)
    last = decode_records(buf, "t", 0, 0)[-1].offset if decode_records(buf, "t", 0, 0) else 0
    position = data.draw(st.integers(0, last + 2))
    stop = data.draw(st.integers(position, last + 3))
    cut = data.draw(st.sampled_from([len(buf), len(buf) - 1, len(buf) // 2]))
    c = columns(buf[:cut], position, stop, pure=False, monkeypatch=monkeypatch)
    assert c == columns(buf[:cut], position, stop, pure=True, monkeypatch=monkeypatch)
    assert rows(c) == expected_rows(buf[:cut], position, stop)


@pytest.mark.parametrize("pure", [False, True])
def test_nulls_headers_and_log_append_time(pure, monkeypatch) -> None:
    recs = [Record(0, TS, None, b"v", ()), Record(1, TS + 5, b"k", None, (("a", b"1"), ("b", None))),
            Record(2, TS + 9, b"", b"", (("", b""),))]  # fmt: skip
    buf = build_batch(recs) + build_batch([r._replace(offset=r.offset + 3) for r in recs], codec=Codec.LZ4,
                                          timestamp_type=LOG_APPEND_TIME)  # fmt: skip
    cols = columns(buf, 0, 100, pure=pure, monkeypatch=monkeypatch)
    assert cols.keys.nulls == 2 and cols.values.nulls == 2 and cols.headers.nulls == 2
    assert rows(cols) == [
        (0, TS, 0, None, b"v", ()), (1, TS + 5, 0, b"k", None, (("a", b"1"), ("b", None))),
        (2, TS + 9, 0, b"", b"", (("", b""),)), (3, TS + 9, 1, None, b"v", ()),
        (4, TS + 9, 1, b"k", None, (("a", b"1"), ("b", None))), (5, TS + 9, 1, b"", b"", (("", b""),)),
    ]  # fmt: skip
    assert columns(buf, 0, 100, pure=pure, monkeypatch=monkeypatch).headers is not None
    assert columns(build_batch([Record(0, TS, b"k", b"v")]), 0, 9, pure=pure, monkeypatch=monkeypatch).headers is None


@pytest.mark.parametrize("pure", [False, True])
def test_a_header_name_that_is_not_utf8_is_replaced_as_the_row_decoder_does(pure, monkeypatch) -> None:
    buf = bytearray(build_batch([Record(0, TS, None, b"v", (("Zé", b"x"),))]))
    i = buf.index("Zé".encode())
    buf[i + 1 : i + 3] = b"\xc3\x28"  # an invalid two-byte sequence
    struct.pack_into(">I", buf, CRC_OFFSET, compute_crc(buf, 0, len(buf)))
    cols = columns(bytes(buf), 0, 1, pure=pure, monkeypatch=monkeypatch)
    assert rows(cols) == expected_rows(bytes(buf), 0, 1) == [(0, TS, 0, None, b"v", (("Z\ufffd(", b"x"),))]


@pytest.mark.parametrize("pure", [False, True])
def test_a_corrupt_batch_fails_only_when_the_read_reaches_it(pure, monkeypatch) -> None:
    first = build_batch([Record(o, TS, None, b"v%d" % o) for o in range(3)])
    second = bytearray(build_batch([Record(o, TS, None, b"v%d" % o) for o in range(3, 6)]))
    second[-2] ^= 1
    buf = first + bytes(second)
    assert columns(buf, 0, 3, pure=pure, monkeypatch=monkeypatch).count == 3
    assert columns(buf, 0, 4, pure=pure, monkeypatch=monkeypatch) == ("corrupt", "batch at offset 3 fails its CRC")
    bad_magic = bytearray(first)
    bad_magic[batch.MAGIC_OFFSET] = 1
    assert columns(bytes(bad_magic), 0, 3, pure=pure, monkeypatch=monkeypatch) == (
        "corrupt", "batch at offset 0 has magic 1")  # fmt: skip


@pytest.mark.parametrize("pure", [False, True])
def test_control_batches_and_records_outside_the_range_are_left_out(pure, monkeypatch) -> None:
    buf = (build_batch([Record(o, TS, None, b"v") for o in range(4)])
           + build_batch([Record(4, TS, b"\x00\x00\x00\x00", b"")], control=True)
           + build_batch([Record(o, TS, None, b"v") for o in range(5, 9)], codec=Codec.GZIP))  # fmt: skip
    got = columns(buf, 2, 7, pure=pure, monkeypatch=monkeypatch)
    assert struct.unpack(f"{got.count}q", got.offsets) == (2, 3, 5, 6)
    assert columns(buf, 9, 20, pure=pure, monkeypatch=monkeypatch).count == 0
    assert columns(b"", 0, 20, pure=pure, monkeypatch=monkeypatch).count == 0
