"""The hand-written Produce codec of the hot paths is byte for byte the schema's, both directions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.protocol.framing import encode_response
from broker.protocol.messages.produce import (
    PRODUCE_REQUEST,
    PRODUCE_RESPONSE,
    PartitionResult,
    encode_produce_request,
    encode_produce_response,
    read_produce_request,
    read_produce_response,
)
from broker.protocol.primitives import DecodeError, Reader

names = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=1, max_size=12)
records = st.binary(max_size=64)
request_topics = st.dictionaries(names, st.lists(st.tuples(st.integers(0, 2**31 - 1), records), min_size=1, max_size=3),
                                 min_size=1, max_size=3)  # fmt: skip
messages = st.none() | st.text(max_size=20)
partition_answers = st.fixed_dictionaries({
    "index": st.integers(0, 2**31 - 1),
    "error_code": st.integers(-1, 120),
    "base_offset": st.integers(-1, 2**62),
    "log_append_time_ms": st.integers(-1, 2**42),
    "log_start_offset": st.integers(-1, 2**62),
    "record_errors": st.lists(st.fixed_dictionaries({"batch_index": st.integers(0, 99), "message": messages}),
                              max_size=2),
    "error_message": messages,
})  # fmt: skip
answers = st.fixed_dictionaries({
    "topics": st.lists(st.fixed_dictionaries({"name": names, "partitions": st.lists(partition_answers, max_size=3)}),
                       max_size=3),
    "throttle_time_ms": st.integers(0, 2**31 - 1),
})  # fmt: skip


def _as_schema_body(acks: int, timeout_ms: int, topics: dict) -> dict:
    return {"transactional_id": None, "acks": acks, "timeout_ms": timeout_ms,
            "topics": [{"name": t, "partitions": [{"index": i, "records": r} for i, r in ps]}
                       for t, ps in topics.items()]}  # fmt: skip


def _plain(body: dict) -> dict:
    """Record-set views as bytes, so bodies compare by value."""
    for t in body["topics"]:
        for p in t["partitions"]:
            if p["records"] is not None:
                p["records"] = bytes(p["records"])
    return body


@settings(max_examples=200, deadline=None)
@given(version=st.integers(0, 8), acks=st.sampled_from([-1, 0, 1]), timeout_ms=st.integers(0, 2**31 - 1),
       topics=request_topics)  # fmt: skip
def test_request_encode_and_read_match_the_schema(version: int, acks: int, timeout_ms: int, topics: dict) -> None:
    body = _as_schema_body(acks, timeout_ms, topics)
    fast = b"".join(bytes(p) for p in encode_produce_request(version, acks, timeout_ms, topics))
    assert fast == PRODUCE_REQUEST.encode(body, version)
    r = Reader(fast)
    assert _plain(read_produce_request(r, version)) == _plain(PRODUCE_REQUEST.read(Reader(fast), version))
    assert r.remaining() == 0


@settings(max_examples=200, deadline=None)
@given(version=st.integers(0, 8), answer=answers, cid=st.integers(-(2**31), 2**31 - 1))
def test_response_encode_and_read_match_the_schema(version: int, answer: dict, cid: int) -> None:
    generic = b"".join(bytes(p) for p in encode_response(cid, PRODUCE_RESPONSE, answer, version))
    fast = b"".join(encode_produce_response(cid, answer, version))
    assert fast == generic
    r = Reader(fast, 8)
    got = read_produce_response(r, version)
    assert r.remaining() == 0
    want = [PartitionResult(t["name"], p["index"], p["error_code"], p["base_offset"],
                            p["error_message"] if version >= 8 else None)
            for t in PRODUCE_RESPONSE.read(Reader(fast, 8), version)["topics"] for p in t["partitions"]]  # fmt: skip
    assert got == want


def test_response_defaults_for_fields_a_handler_leaves_out() -> None:
    answer = {"topics": [{"name": "t", "partitions": [{"index": 3, "error_code": 6}]}]}
    assert b"".join(encode_produce_response(9, answer, 8)) == b"".join(
        bytes(p) for p in encode_response(9, PRODUCE_RESPONSE, answer, 8)
    )


@pytest.mark.parametrize("cut", [1, 5, 11, 20])
def test_a_truncated_request_is_a_decode_error(cut: int) -> None:
    full = b"".join(bytes(p) for p in encode_produce_request(7, 1, 1000, {"topic": [(0, b"x" * 30)]}))
    with pytest.raises(DecodeError):
        read_produce_request(Reader(full[: len(full) - cut]), 7)


def test_an_absurd_topic_count_is_a_decode_error() -> None:
    frame = b"\xff\xff" + b"\x00\x01" + b"\x00\x00\x03\xe8" + b"\x7f\xff\xff\xff"
    with pytest.raises(DecodeError):
        read_produce_request(Reader(frame), 7)


@settings(max_examples=200, deadline=None)
@given(version=st.integers(0, 8), name=names, p=partition_answers, cid=st.integers(0, 2**31 - 1))
def test_a_one_partition_answer_reads_as_the_schema_reads_it(version: int, name: str, p: dict, cid: int) -> None:
    """The usual answer (one topic, one partition) has its own two-unpack path; with and without an error
    message or record errors it gives what the schema gives."""
    answer = {"topics": [{"name": name, "partitions": [p]}], "throttle_time_ms": 0}
    fast = b"".join(encode_produce_response(cid, answer, version))
    r = Reader(fast, 8)
    got = read_produce_response(r, version)
    assert r.remaining() == 0
    assert got == [PartitionResult(name, p["index"], p["error_code"], p["base_offset"],
                                   p["error_message"] if version >= 8 else None)]  # fmt: skip


@pytest.mark.parametrize("cut", [1, 4, 9, 30])
def test_a_truncated_one_partition_answer_is_a_decode_error(cut: int) -> None:
    answer = {"topics": [{"name": "topic", "partitions": [{"index": 0, "error_code": 0, "base_offset": 7}]}]}
    full = b"".join(encode_produce_response(1, answer, 8))
    with pytest.raises(DecodeError):
        read_produce_response(Reader(full[: len(full) - cut], 8), 8)


@settings(max_examples=200, deadline=None)
@given(acks=st.sampled_from([-1, 0, 1]), timeout_ms=st.integers(0, 2**31 - 1), topics=request_topics,
       tid=st.none() | names)  # fmt: skip
def test_the_broker_reads_a_v9_request_as_the_schema_does(acks: int, timeout_ms: int, topics: dict, tid) -> None:
    """Produce v9 (flexible): the broker's hand-written reader against the schema's bytes, with a tagged
    field it does not know in each struct (skipped) and none."""
    body = _as_schema_body(acks, timeout_ms, topics) | {"transactional_id": tid}
    data = PRODUCE_REQUEST.encode(body, 9)
    r = Reader(data)
    r.flex = True
    assert _plain(read_produce_request(r, 9)) == _plain(PRODUCE_REQUEST.decode(data, 9))
    assert r.remaining() == 0
    # the same body with one unknown tagged field (tag 7, 3 bytes) closing the request: read past, not lost
    tagged = data[:-1] + b"\x01\x07\x03abc"
    r = Reader(tagged)
    r.flex = True
    assert _plain(read_produce_request(r, 9)) == _plain(PRODUCE_REQUEST.decode(data, 9))
    assert r.remaining() == 0


@settings(max_examples=200, deadline=None)
@given(answer=answers, cid=st.integers(-(2**31), 2**31 - 1))
def test_a_v9_answer_is_the_schemas(answer: dict, cid: int) -> None:
    generic = b"".join(bytes(p) for p in encode_response(cid, PRODUCE_RESPONSE, answer, 9))
    assert b"".join(encode_produce_response(cid, answer, 9)) == generic
