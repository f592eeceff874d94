"""A topic's compression.type and timestamp window at the leader (broker/log/topic_policy.py)."""

from __future__ import annotations

import pytest

from broker.errors import RecordTooLargeError
from broker.log.log import validate_batches
from broker.log.topic_policy import out_of_window, recompress, window_message
from broker.records.batch import Record, build_batch, decode_header, decode_records
from broker.records.compression import Codec

NOW = 1_700_000_000_000


def _records(n: int, first_ts: int = NOW) -> list[Record]:
    return [
        Record(i, first_ts + (i * 7) % 50 - 20, f"k{i}".encode() if i % 3 else None, b"v" * (i % 40) + b"!",
               (("h", f"{i}".encode()), ("empty", None)) if i % 2 else ())
        for i in range(n)
    ]  # fmt: skip


@pytest.mark.parametrize("source", list(Codec))
@pytest.mark.parametrize("target", list(Codec))
def test_recompress_keeps_all_but_the_codec(source: Codec, target: Codec) -> None:
    first = build_batch(_records(30), base_offset=0, codec=source, producer_id=42, producer_epoch=3,
                        base_sequence=100)  # fmt: skip
    second = build_batch(_records(5, NOW + 1000), base_offset=0, codec=Codec.GZIP)
    data = first + second
    validated = validate_batches(data, 1 << 20)
    out, placed = recompress(memoryview(data), validated, int(target), 1 << 20)
    assert placed == validate_batches(out, 1 << 20)  # whole, checksummed, the headers true to their records
    for (old_pos, *old), (new_pos, *new) in zip(validated, placed, strict=True):
        before, after = decode_header(data, old_pos), decode_header(out, new_pos)
        assert after.codec == target
        assert after._replace(length=0, crc=0, attributes=0) == before._replace(length=0, crc=0, attributes=0)
        assert after.attributes & ~7 == before.attributes & ~7
        assert decode_records(out, new_pos) == decode_records(data, old_pos)
        assert (old[1:]) == (new[1:])  # count, last delta, max timestamp
    if source == target == Codec.GZIP:
        assert out is not None and bytes(out) == data  # nothing to do: the bytes as received


def test_recompressed_batch_over_max_message_bytes_is_refused() -> None:
    data = build_batch([Record(i, NOW, None, bytes(range(256)) * 4) for i in range(20)], codec=Codec.ZSTD)
    validated = validate_batches(data, 1 << 20)
    with pytest.raises(RecordTooLargeError, match="recompressed"):
        recompress(data, validated, int(Codec.NONE), 4000)


def test_out_of_window_names_each_record() -> None:
    recs = [Record(0, NOW, None, b"a"), Record(1, NOW - 5001, None, b"b"), Record(2, -1, None, b"c"),
            Record(3, NOW + 5000, None, b"d"), Record(4, NOW + 6000, None, b"e")]  # fmt: skip
    data = build_batch(recs, codec=Codec.LZ4)
    bad = out_of_window(data, validate_batches(data, 1 << 20), NOW, 5000)
    assert [(b.index, b.timestamp) for b in bad] == [(1, NOW - 5001), (4, NOW + 6000)]
    assert window_message(bad[0], NOW, 5000) == (
        f"Timestamp {NOW - 5001} of message with offset 1 is out of range. The timestamp should be within "
        f"[{NOW - 5000}, {NOW + 5000}]"
    )
    assert out_of_window(data, validate_batches(data, 1 << 20), NOW, 10_000) == []
