"""The C codec of Produce runs (`broker/protocol/_produce_run.c`) against the general Python codec:
the requests it frames, the answers it writes and reads, and where its scanner stops a run."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.protocol.api import APIS, ApiKey
from broker.protocol.framing import encode_request
from broker.protocol.messages.produce import (
    encode_produce_response,
    one_partition_head,
    one_partition_lead,
    read_produce_response,
)
from broker.protocol.primitives import Reader
from broker.records.batch import Record, build_batch
from broker.records.builder import BatchBuilder
from broker.records.crc import crc32c

run = pytest.importorskip("broker.protocol._produce_run")

SETTINGS = settings(max_examples=120, deadline=None)
versions = st.integers(3, 8)
topics = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=1, max_size=12)
client_ids = st.none() | st.text(max_size=10)
one_record = st.tuples(
    st.integers(0, 2**41),
    st.none() | st.binary(max_size=20),
    st.none() | st.binary(max_size=300),
    st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=4)), max_size=2),
)
batches = st.lists(st.lists(one_record, min_size=1, max_size=4), min_size=1, max_size=6)


def _client_field(client_id: str | None) -> bytes:
    if client_id is None:
        return b"\xff\xff"
    encoded = client_id.encode()
    return struct.pack(">h", len(encoded)) + encoded


def _builder(records: list) -> BatchBuilder:
    b = BatchBuilder()
    for ts, key, value, headers in records:
        b.append(ts, key, value, headers)
    return b


@SETTINGS
@given(version=versions, topic=topics, partition=st.integers(0, 2**31 - 1), client_id=client_ids,
       acks=st.sampled_from([1, -1]), first_cid=st.integers(0, 2**31 - 1), recs=batches)  # fmt: skip
def test_build_requests_frames_what_the_general_path_frames(version, topic, partition, client_id, acks, first_cid,
                                                            recs) -> None:  # fmt: skip
    builders = [_builder(r) for r in recs]
    head = one_partition_head(version, acks, 5000, topic)
    client = _client_field(client_id)
    got = run.build_requests(version, first_cid, client, head, partition, builders, -1, -1, -1, crc32c)
    want = []
    for i, b in enumerate(builders):
        body = b.build()
        lead = one_partition_lead(version, acks, 5000, topic, partition, len(body))
        cid = (first_cid + i) & 0x7FFFFFFF
        head = struct.pack(">ihhi", 8 + len(_client_field(client_id)) + len(lead) + len(body), 0, version, cid)
        want.append(head + _client_field(client_id) + lead + body)
    assert got == b"".join(want)
    # and the general request codec reads each of them back
    pos = 0
    for b in builders:
        size = struct.unpack_from(">i", got, pos)[0]
        frame = memoryview(got)[pos + 4 : pos + 4 + size]
        r = Reader(frame, 8)
        r.nullable_string()
        req = APIS[ApiKey.PRODUCE].request.read(r, version)
        assert req["topics"][0]["name"] == topic
        assert bytes(req["topics"][0]["partitions"][0]["records"]) == b.build()
        pos += 4 + size


def _answer_frames(version: int, topic: str, partition: int, first_cid: int, parts: list[dict]) -> bytes:
    out = []
    for i, p in enumerate(parts):
        answer = {"topics": [{"name": topic, "partitions": [{"index": partition, **p}]}]}
        out.append(b"".join(encode_produce_response((first_cid + i) & 0x7FFFFFFF, answer, version)))
    return b"".join(out)


@SETTINGS
@given(version=versions, topic=topics, partition=st.integers(0, 2**31 - 1), first=st.integers(0, 2**60),
       log_start=st.integers(-1, 2**60), first_cid=st.integers(0, 2**31 - 1),
       counts=st.lists(st.integers(1, 500), min_size=1, max_size=8))  # fmt: skip
def test_answers_write_what_the_general_encoder_writes(version, topic, partition, first, log_start, first_cid,
                                                       counts) -> None:  # fmt: skip
    info = b"".join(
        struct.pack("=qqiiii", 0, 0, (first_cid + i) & 0x7FFFFFFF, 61, n - 1, n) for i, n in enumerate(counts)
    )  # fmt: skip (the C Item: position, max_ts, cid, size, delta, count)
    offsets = [first + sum(counts[:i]) for i in range(len(counts))]
    got = run.answers(info, version, topic.encode(), partition, first, log_start)
    want = _answer_frames(
        version,
        topic,
        partition,
        first_cid,
        [{"error_code": 0, "base_offset": o, "log_start_offset": log_start} for o in offsets],
    )
    assert got == want
    # and the client's scanner reads the offsets back, all of them
    pos, read = run.scan_answers(got, 0, len(got), first_cid, len(counts), version, topic.encode(), partition)
    assert (pos, read) == (len(got), offsets)


@SETTINGS
@given(version=versions, codes=st.lists(st.sampled_from([0, 0, 0, 6, 2]), min_size=1, max_size=10),
       cut=st.integers(0, 40), max_count=st.integers(1, 12))  # fmt: skip
def test_scan_answers_stops_at_the_first_answer_that_is_not_a_plain_no_error(version, codes, cut, max_count) -> None:
    parts = [{"error_code": c, "base_offset": 10 * i if c == 0 else -1} for i, c in enumerate(codes)]
    data = _answer_frames(version, "t", 3, 77, parts)
    data = data[: len(data) - cut] if cut else data  # a partial last frame is never read
    pos, offsets = run.scan_answers(data, 0, len(data), 77, max_count, version, b"t", 3)
    whole = []
    r = 0
    while len(data) - r >= 4 and len(data) - r - 4 >= struct.unpack_from(">i", data, r)[0]:
        whole.append(data[r : r + 4 + struct.unpack_from(">i", data, r)[0]])
        r += len(whole[-1])
    expect = []
    for i, frame in enumerate(whole[:max_count]):
        [p] = read_produce_response(Reader(memoryview(frame), 8), version)
        if p.error_code:
            break
        expect.append(10 * i)
    assert offsets == expect
    assert pos == sum(len(f) for f in whole[: len(expect)])


def test_scan_answers_stops_at_another_id_partition_or_topic() -> None:
    ok = [{"error_code": 0, "base_offset": i} for i in range(3)]
    data = _answer_frames(8, "t", 0, 5, ok)
    assert run.scan_answers(data, 0, len(data), 5, 9, 8, b"t", 0)[1] == [0, 1, 2]
    assert run.scan_answers(data, 0, len(data), 6, 9, 8, b"t", 0) == (0, [])  # ids out of step
    assert run.scan_answers(data, 0, len(data), 5, 9, 8, b"t", 1) == (0, [])
    assert run.scan_answers(data, 0, len(data), 5, 9, 8, b"u", 0) == (0, [])
    assert run.scan_answers(data, 0, len(data), 5, 9, 7, b"t", 0) == (0, [])  # v7 answers are 6 bytes shorter
    gap = data + _answer_frames(8, "t", 0, 9, ok)  # 8 is missing
    assert run.scan_answers(gap, 0, len(gap), 5, 9, 8, b"t", 0)[1] == [0, 1, 2]


def _request(cid: int, topic: str = "t", partition: int = 0, records: bytes | None = None, *, version: int = 8,
             acks: int = 1, client_id: str | None = "c", transactional_id: str | None = None) -> bytes:  # fmt: skip
    if records is None:
        records = build_batch([Record(0, 1_700_000_000_000 + cid, None, b"v%d" % cid)])
    body = {"transactional_id": transactional_id, "acks": acks, "timeout_ms": 100,
            "topics": [{"name": topic, "partitions": [{"index": partition, "records": records}]}]}  # fmt: skip
    return b"".join(bytes(p) for p in encode_request(0, version, cid, client_id, APIS[0].request, body))


def _scan(data: bytes, max_frames: int = 64) -> tuple | None:
    return run.scan(bytearray(data), 0, len(data), max_frames, 1 << 20, 8, crc32c)


def test_scan_takes_a_run_and_says_what_it_holds() -> None:
    frames = [_request(i) for i in range(5)]
    got = _scan(b"".join(frames))
    assert got is not None
    n, pos, version, acks, topic, partition, info, total, records, largest, pid, epoch, sequence = got
    assert (pid, epoch, sequence) == (-1, -1, -1)
    assert (n, pos, version, acks, topic, partition, records) == (5, sum(map(len, frames)), 8, 1, b"t", 0, 5)
    sizes = [len(build_batch([Record(0, 1_700_000_000_000 + i, None, b"v%d" % i)])) for i in range(5)]
    assert (total, largest, len(info)) == (sum(sizes), max(sizes), 5 * 32)
    items = [struct.unpack_from("=qqiiii", info, 32 * i)[2:] for i in range(5)]  # (cid, size, delta, count)
    assert items == [(i, sizes[i], 0, 1) for i in range(5)]
    assert _scan(b"".join(frames), max_frames=2)[0] == 2
    assert _scan(b"".join(frames)[:-1])[0] == 4  # the last frame is not whole yet


@pytest.mark.parametrize("reason, second", [
    ("another topic", _request(1, topic="u")),
    ("another partition", _request(1, partition=1)),
    ("another version", _request(1, version=7)),
    ("other acks", _request(1, acks=-1)),
    ("a transactional id", _request(1, transactional_id="tx")),
    ("another producer", _request(1, records=build_batch([Record(0, 1, None, b"x")], producer_id=3,
                                                         producer_epoch=0, base_sequence=0))),
    ("two batches", _request(1, records=build_batch([Record(0, 1, None, b"x")]) * 2)),
    ("a control batch", _request(1, records=build_batch([Record(0, 1, None, b"x")], control=True))),
    ("a bad CRC", _request(1, records=build_batch([Record(0, 1, None, b"x")])[:-1] + b"y")),
    ("no records", _request(1, records=b"")),
    ("a Fetch", b"".join(bytes(p) for p in encode_request(1, 11, 1, "c", APIS[1].request, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 100, "isolation_level": 0, "session_id": 0,
        "session_epoch": -1, "topics": [], "forgotten_topics_data": [], "rack_id": ""}))),
    ("Produce v2", _request(1, version=2)),
])  # fmt: skip
def test_scan_ends_a_run_before_a_request_that_is_not_one_of_it(reason, second) -> None:
    first = _request(0)
    assert _scan(first + second + _request(2))[:2] == (1, len(first)), reason
    if reason not in ("another topic", "another partition", "another version", "other acks", "another producer"):
        assert _scan(second + first) is None, reason  # and no run starts with it


def _idempotent(cid: int, sequence: int, records: int = 2, *, pid: int = 3, epoch: int = 0) -> bytes:
    recs = [Record(i, 1, None, b"x%d" % i) for i in range(records)]
    return _request(cid, records=build_batch(recs, producer_id=pid, producer_epoch=epoch, base_sequence=sequence))


def test_an_idempotent_run_chains_its_sequences_and_says_where_they_start() -> None:
    frames = [_idempotent(0, 2**31 - 3), _idempotent(1, 2**31 - 1), _idempotent(2, 1, records=1), _idempotent(3, 2)]
    got = _scan(b"".join(frames))
    assert got[0] == 4 and got[-3:] == (3, 0, 2**31 - 3)  # producer id, epoch, first sequence (wrapping past 2**31-1)
    assert _scan(b"".join(frames[:2]) + _idempotent(2, 2))[0] == 2  # a sequence gap ends the run
    assert _scan(b"".join(frames[:2]) + _idempotent(2, 1, epoch=1))[0] == 2  # so does another epoch
    assert _scan(b"".join(frames[:2]) + _idempotent(2, 1, pid=4))[0] == 2  # and another producer
    assert _scan(_request(0) + frames[0])[0] == 1  # no mix of idempotent and not
    assert _scan(_idempotent(0, -1)) is None  # a producer id with no sequence is for the general path to refuse


def test_a_client_id_that_is_not_utf8_is_left_to_the_general_path_which_refuses_it() -> None:
    good = _request(0, client_id="ab")
    bad = good[:14] + b"\xff\xfe" + good[16:]  # the client id's two bytes
    other = _request(1, client_id="zz")
    assert _scan(bad) is None
    assert _scan(good + bad)[0] == 1
    assert _scan(good + other + good)[0] == 3  # any valid client ids, mixed
