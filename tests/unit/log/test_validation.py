"""`validate_batches`: a client's batch header must tell the truth about its records (Kafka's LogValidator),
with the C record walk and the pure-Python one alike; and a segment rolls before relative offsets overflow."""

from __future__ import annotations

import struct

import pytest

from broker.errors import CorruptRecordError, InvalidRecordError
from broker.log.log import validate_batches
from broker.records import batch as batch_module
from broker.records.batch import HEADER, Record, build_batch, compute_crc, decode_header
from broker.records.compression import Codec

T = 1_700_000_000_000
MAX = 1 << 20


def forge(data: bytes, **fields: int) -> bytes:
    """`data` with header fields replaced and its CRC recomputed."""
    buf = bytearray(data)
    HEADER.pack_into(buf, 0, *decode_header(data)._replace(**fields))
    struct.pack_into(">I", buf, 17, compute_crc(buf, 0, len(buf)))
    return bytes(buf)


def three(codec: Codec = Codec.NONE, **kw) -> bytes:
    return build_batch([Record(i, T + 10 * i, b"k%d" % i, b"v%d" % i, (("h", b"x"),)) for i in range(3)],
                       codec=codec, **kw)  # fmt: skip


@pytest.fixture(params=["c", "python"])
def walker(request, monkeypatch):
    """Each test runs with the C record walk and with the pure-Python reference."""
    if request.param == "python":
        monkeypatch.setattr(batch_module, "_codec", None)
    elif batch_module._codec is None:
        pytest.skip("the C record codec is not built")
    return request.param


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.ZSTD])
def test_an_honest_batch_passes_and_reports_its_own_fields(walker, codec):
    data = three(codec) + three(codec, producer_id=4, producer_epoch=0, base_sequence=3)
    got = validate_batches(data, MAX)
    size = len(three(codec))
    assert got == [(0, size, 3, 2, T + 20), (size, len(data) - size, 3, 2, T + 20)]


LIES = {
    "a billion records": {"record_count": 10**9},
    "offset delta 2**31-1": {"last_offset_delta": 2**31 - 1},
    "count and delta agree but lie": {"record_count": 5, "last_offset_delta": 4},
    "fewer than it holds": {"record_count": 2, "last_offset_delta": 1},
    "control": {"attributes": 0x20},
    "transactional, no producer id": {"attributes": 0x10},  # (a producer's transactional batches pass: below)
    "LogAppendTime": {"attributes": 0x08},
    "producer id, no sequence": {"producer_id": 9, "producer_epoch": 0, "base_sequence": -1},
}


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP])
@pytest.mark.parametrize("lie", sorted(LIES))
def test_a_header_that_lies_is_an_invalid_record(walker, lie, codec):
    fields = dict(LIES[lie])
    if "attributes" in fields:
        fields["attributes"] |= int(codec)
    good = three(codec)
    with pytest.raises(InvalidRecordError):
        validate_batches(good + forge(good, **fields), MAX)


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP])
@pytest.mark.parametrize("fields", [{"max_timestamp": T + 21}, {"max_timestamp": T + 19}, {"max_timestamp": -1},
                                    {"base_timestamp": T + 1}])  # fmt: skip
def test_a_max_timestamp_none_of_its_records_has_is_taken_as_their_largest(walker, codec, fields):
    """As Kafka's LogValidator: the batch is valid, and its max timestamp is its records' largest."""
    good = three(codec)
    largest = T + 20 + (fields.get("base_timestamp", T) - T)
    assert [b[4] for b in validate_batches(good + forge(good, **fields), MAX)] == [T + 20, largest]


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.ZSTD])
def test_append_writes_the_records_largest_timestamp_into_the_header_and_checksums_it(open_log, codec):
    """librdkafka's batches of records stamped -1 under a max timestamp of 0: stored, the header saying -1,
    its CRC right; an honest batch after it is stored byte for byte but for its offset."""
    log = open_log()
    unstamped = build_batch([Record(i, -1, b"k", b"v%d" % i) for i in range(3)], codec=codec)
    lying = forge(unstamped, max_timestamp=0)
    assert log.append(lying).max_timestamp == -1
    log.append(three(codec))
    stored = log.read(0, 1 << 20).read()
    first = decode_header(stored)
    assert (first.max_timestamp, first.crc) == (-1, compute_crc(stored, 0, first.size))
    assert stored[first.size + 8 :] == three(codec)[8:]  # (the second: only its offset set)
    assert validate_batches(stored, MAX, client=False)[0][4] == -1


def test_a_transactional_producers_batch_passes(walker):
    data = three(producer_id=4, producer_epoch=0, base_sequence=3)
    assert validate_batches(forge(data, attributes=0x10), MAX)[0][2] == 3


def _records_tail(offset_deltas: list[int]) -> bytes:
    return build_batch([Record(d, T, None, b"v") for d in offset_deltas], base_offset=0)


@pytest.mark.parametrize("deltas", [[0, 0, 1], [1, 2, 3], [0, 2, 1], [0, 1, 3]])
def test_record_offset_deltas_must_count_up_from_zero(walker, deltas):
    data = forge(_records_tail(deltas), record_count=3, last_offset_delta=2)
    with pytest.raises(InvalidRecordError, match="offset delta"):
        validate_batches(data, MAX)


def test_records_that_do_not_decompress_are_corrupt_not_invalid(walker):
    data = forge(three(), attributes=int(Codec.GZIP))
    with pytest.raises(CorruptRecordError) as exc:
        validate_batches(data, MAX)
    assert not isinstance(exc.value, InvalidRecordError)


def test_a_replica_copy_is_only_framed_and_checksummed(walker):
    """A leader's stamped batch (LogAppendTime, its own offsets) is not a client's: `client=False` takes it."""
    stamped = forge(three(), attributes=0x08, max_timestamp=T + 99)
    assert validate_batches(stamped, MAX, client=False)[0][2] == 3
    with pytest.raises(InvalidRecordError):
        validate_batches(stamped, MAX)


def test_a_segment_rolls_before_a_relative_offset_overflows_int32(open_log, make_batch):
    """A follower's copy may jump far ahead (a compacted leader): the index holds int32 relative offsets, so
    a batch whose last offset is more than 2**31 - 1 past the segment's base goes into a new segment."""
    log = open_log()
    log.append(make_batch([b"a"]), assign_offsets=False)
    far = 2**31 + 5
    log.append(make_batch([b"b"], offset=far), assign_offsets=False)
    assert log.bases == [0, far]
    assert [r.offset for r in log.read_records(far)] == [far]
