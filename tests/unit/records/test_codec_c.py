"""The C record codec agrees with the pure-Python one, byte for byte and error for error."""

from __future__ import annotations

import functools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.errors import CorruptRecordError
from broker.records import batch, builder
from broker.records.batch import crc_ok, decode_header, decode_records
from broker.records.compression import Codec

pytestmark = pytest.mark.skipif(batch._codec is None, reason="the C codec is not built here")

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # fmt: skip

maybe_bytes = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=40)), max_size=4)
records = st.lists(st.tuples(st.integers(-(2**40), 2**40), maybe_bytes, maybe_bytes, headers), min_size=1, max_size=40)


def build(recs, *, pure: bool, monkeypatch, codec: Codec = Codec.NONE, lead: bytes = b"") -> bytes:
    with monkeypatch.context() as m:
        if pure:
            m.setattr(builder, "_append", None)
            m.setattr(builder, "_build_batch", None)
        b = builder.BatchBuilder(codec)
        base = 1_700_000_000_000
        for ts, key, value, hs in recs:
            b.append(base + ts, key, value, hs)
        return b.build(producer_id=7, producer_epoch=1, base_sequence=3, lead=lead)


def decode(data: bytes, *, pure: bool, monkeypatch, make=batch.Record):
    with monkeypatch.context() as m:
        if pure:
            m.setattr(batch, "_codec", None)
        try:
            return decode_records(data, 0, decode_header(data), make)
        except CorruptRecordError as exc:
            return ("corrupt", type(exc))


@SETTINGS
@given(recs=records)
def test_encoder_and_decoder_agree_with_python(recs, monkeypatch) -> None:
    c_bytes = build(recs, pure=False, monkeypatch=monkeypatch)
    assert c_bytes == build(recs, pure=True, monkeypatch=monkeypatch)
    c_recs = decode(c_bytes, pure=False, monkeypatch=monkeypatch)
    assert c_recs == decode(c_bytes, pure=True, monkeypatch=monkeypatch)
    assert [(r.key, r.value, list(r.headers)) for r in c_recs] == [(k, v, list(h)) for _, k, v, h in recs]
    assert [r.offset for r in c_recs] == list(range(len(recs)))


@SETTINGS
@given(recs=records, data=st.data())
def test_damaged_records_fail_alike(recs, data, monkeypatch) -> None:
    good = bytearray(build(recs, pure=True, monkeypatch=monkeypatch))
    pos = data.draw(st.integers(61, len(good) - 1))
    good[pos] = data.draw(st.integers(0, 255))
    damaged = bytes(good)
    c = decode(damaged, pure=False, monkeypatch=monkeypatch)
    py = decode(damaged, pure=True, monkeypatch=monkeypatch)
    assert c == py


def test_named_tuples_with_leading_and_trailing_fields(monkeypatch) -> None:
    from broker.client.consumer import ConsumerRecord

    data = build([(0, b"k", b"v", [("h", None)])], pure=True, monkeypatch=monkeypatch)
    make = functools.partial(ConsumerRecord, "t", 3)
    c = decode(data, pure=False, monkeypatch=monkeypatch, make=make)
    py = decode(data, pure=True, monkeypatch=monkeypatch, make=make)
    assert c == py and type(c[0]) is ConsumerRecord
    first = c[0]
    assert (first.topic, first.partition, first.key, first.headers, first.timestamp_type) == (
        "t", 3, b"k", (("h", None),), 0,
    )  # fmt: skip


@SETTINGS
@given(recs=records, codec=st.sampled_from([Codec.NONE, Codec.GZIP, Codec.ZSTD]), lead=st.binary(max_size=40),
       pid=st.integers(-1, 2**62), epoch=st.integers(-1, 2**15 - 1), seq=st.integers(-1, 2**31 - 1))  # fmt: skip
def test_header_and_crc_built_alike_after_any_lead(recs, codec, lead, pid, epoch, seq, monkeypatch) -> None:
    """`build_batch` writes what the Python header packing writes, after the lead (a request head)."""

    def one(pure: bool) -> bytes:
        with monkeypatch.context() as m:
            if pure:
                m.setattr(builder, "_build_batch", None)
            b = builder.BatchBuilder(codec)
            for ts, key, value, hs in recs:
                b.append(1_700_000_000_000 + ts, key, value, hs)
            return b.build(producer_id=pid, producer_epoch=epoch, base_sequence=seq, lead=lead)

    c_bytes = one(False)
    assert c_bytes == one(True)
    assert c_bytes[: len(lead)] == lead
    data = c_bytes[len(lead) :]
    header = decode_header(data)
    assert crc_ok(data, 0, header)
    got = (header.producer_id, header.producer_epoch, header.base_sequence, header.record_count)
    assert got == (pid, epoch, seq, len(recs))
    assert [r.value for r in decode_records(data, 0, header)] == [v for _, _, v, _ in recs]
