"""The mirror's stamp: a restamped batch holds the same records, the mirror's producer fields and the
source offset after it; `read_stamp` gets back where to resume."""

from __future__ import annotations

import pytest

from broker.mirror.stamp import HEADER_KEY, read_stamp, restamp
from broker.records.batch import (
    LOG_APPEND_TIME,
    Record,
    build_batch,
    crc_ok,
    decode_header,
    decode_records,
)
from broker.records.compression import Codec

T0 = 1_790_000_000_000


def records(n: int, first: int = 100, gap: int = 1) -> list[Record]:
    return [Record(first + i * gap, T0 + i, None if i == 1 else f"k{i}".encode(), None if i == 2 else b"v" * i,
                   (("h", b"x"), ("n", None)) if i % 2 == 0 else ())
            for i in range(n)]  # fmt: skip


def without_stamp(recs: list[Record]) -> list[tuple]:
    return [(r.timestamp, r.key, r.value, tuple(h for h in r.headers if h[0] != HEADER_KEY)) for r in recs]


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.LZ4, Codec.ZSTD, Codec.SNAPPY])
def test_a_restamped_batch_keeps_its_records_and_carries_the_mirror_fields(codec: Codec) -> None:
    source = build_batch(records(5), codec=codec, producer_id=7, producer_epoch=1, base_sequence=40)
    h = decode_header(source)
    out = restamp(source, 0, h, 1234, 3, 77)
    oh = decode_header(out)
    assert crc_ok(out, 0, oh)
    assert (oh.producer_id, oh.producer_epoch, oh.base_sequence) == (1234, 3, 77)
    assert (oh.record_count, oh.last_offset_delta, oh.codec) == (5, 4, codec)
    assert (oh.base_timestamp, oh.max_timestamp, oh.timestamp_type) == (h.base_timestamp, h.max_timestamp, 0)
    got = decode_records(out, 0)
    assert without_stamp(got) == without_stamp(decode_records(source, 0))
    assert [h_ for h_ in got[0].headers if h_[0] == HEADER_KEY] == [(HEADER_KEY, b"105")]  # the first record only
    assert all(HEADER_KEY not in dict(r.headers) for r in got[1:])
    assert read_stamp(out, 0, oh) == (105, 1234, 3, 82)


def test_a_batch_mirrored_twice_resumes_from_the_latest_hop() -> None:
    source = build_batch(records(3, first=10))
    once = restamp(source, 0, decode_header(source), 1, 0, 0)
    # on the next cluster it sits at offset 500
    moved = bytearray(once)
    moved[0:8] = (500).to_bytes(8, "big")
    twice = restamp(moved, 0, decode_header(moved), 2, 0, 9)
    stamps = [v for k, v in decode_records(twice, 0)[0].headers if k == HEADER_KEY]
    assert stamps == [b"13", b"503"]
    assert read_stamp(twice, 0, decode_header(twice)).source_offset == 503


def test_gaps_log_append_time_and_a_start_inside_the_batch_are_rebuilt() -> None:
    compacted = build_batch(records(4, first=20, gap=3), timestamp_type=LOG_APPEND_TIME)
    h = decode_header(compacted)
    assert h.last_offset_delta == 9 and h.record_count == 4
    out = restamp(compacted, 0, h, 5, 0, 0, first_offset=23)  # the record at 20 was mirrored already
    oh = decode_header(out)
    assert (oh.record_count, oh.last_offset_delta, oh.timestamp_type) == (3, 2, 0)
    got = decode_records(out, 0)
    assert [r.key for r in got] == [None, b"k2", b"k3"]
    assert {r.timestamp for r in got} == {h.max_timestamp}  # LogAppendTime becomes each record's CreateTime
    assert read_stamp(out, 0, oh) == (30, 5, 0, 3)


def test_a_batch_the_mirror_did_not_write_has_no_stamp() -> None:
    plain = build_batch(records(2), producer_id=9, producer_epoch=0, base_sequence=0)
    assert read_stamp(plain, 0, decode_header(plain)) is None
    no_producer = build_batch(records(2))
    assert read_stamp(no_producer, 0, decode_header(no_producer)) is None
