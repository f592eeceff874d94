"""Message schemas, framing and the API table: every request and response schema round-trips at every
advertised version, absent fields take their defaults, frames carry the right size and headers, and the
advertised versions are the design's (docs/formats.md lists them all)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.protocol import framing
from broker.protocol.api import APIS, Api, ApiKey, api_versions_table
from broker.protocol.messages import admin, fetch, metadata, produce
from broker.protocol.primitives import DecodeError, Reader, Writer
from broker.protocol.schema import Array, Struct

# --- helpers ----------------------------------------------------------------------------------

PRIMS = {
    "int8": st.integers(-(2**7), 2**7 - 1),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "boolean": st.booleans(),
    "string": st.text(max_size=8),
    "nullable_string": st.none() | st.text(max_size=8),
    "nullable_bytes": st.none() | st.binary(max_size=24),
    "uuid": st.binary(min_size=16, max_size=16),
    "float64": st.floats(allow_nan=False),
}
PRIMS |= {"compact_" + name: PRIMS[name] for name in ("string", "nullable_string", "nullable_bytes")}


def fields_of(t: Struct, v: int) -> list[tuple[str, Any, Any]]:
    """Every field at `v`: the untagged ones in wire order, then the tagged ones (flexible versions)."""
    return [*t.at(v), *t.tagged(v).values()]


def body_strategy(t: Any, v: int) -> st.SearchStrategy:
    """Bodies holding exactly the fields present at version `v`, with nulls only where `v` allows them."""
    if isinstance(t, Struct):
        return st.fixed_dictionaries({name: body_strategy(tt, v) for name, tt, _ in fields_of(t, v)})
    if isinstance(t, Array):
        items = st.lists(body_strategy(t.item, v), max_size=3)
        return st.none() | items if v >= t.nullable_from else items
    return PRIMS[t.name]


def plain(value: Any) -> Any:
    """Views as bytes, tuples as lists: what a body looks like once read back."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    return value


def encode(schema: Struct, body: dict, v: int) -> bytes:
    return schema.encode(body, v)


def decode(schema: Struct, data: bytes, v: int) -> dict:
    return schema.decode(data, v)  # leftover bytes raise DecodeError


def defaults_of(t: Any, v: int) -> Any:
    """What reading a body written from `{}` must give: every field's default, arrays empty."""
    out = {}
    for name, tt, default in fields_of(t, v):
        if isinstance(tt, Struct):
            out[name] = plain(tt.defaults(v))
        elif isinstance(tt, Array):
            out[name] = [] if default == () else plain(default)
        else:
            out[name] = plain(default)
    return out


CASES = [
    pytest.param(api, which, v, id=f"{api.key.name}-{which}-v{v}")
    for api in APIS.values()
    for which in ("request", "response")
    for v in range(api.advertised[0], api.advertised[1] + 1)
]


# --- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize(("api", "which", "v"), CASES)
def test_round_trip_generated_bodies(api: Api, which: str, v: int) -> None:
    schema = getattr(api, which)

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(body=body_strategy(schema, v))
    def check(body: dict) -> None:
        data = encode(schema, body, v)
        got = decode(schema, data, v)
        assert plain(got) == plain(body)
        assert encode(schema, got, v) == data

    check()


@pytest.mark.parametrize(("api", "which", "v"), CASES)
def test_absent_fields_take_defaults(api: Api, which: str, v: int) -> None:
    schema = getattr(api, which)
    assert plain(decode(schema, encode(schema, {}, v), v)) == defaults_of(schema, v)


@pytest.mark.parametrize(("api", "which", "v"), CASES)
def test_fields_of_other_versions_are_ignored_when_writing(api: Api, which: str, v: int) -> None:
    """A handler may hand the writer a body with every field it knows; only those of `v` go out."""
    schema = getattr(api, which)
    names_at_v = {n for n, _, _ in fields_of(schema, v)}
    extra = {f.name: object() for f in schema.fields if f.name not in names_at_v}  # unwritable if used
    assert encode(schema, extra, v) == encode(schema, {}, v)


# --- hand-built bodies with known bytes -------------------------------------------------------


def test_metadata_request_bytes() -> None:
    s = metadata.METADATA_REQUEST
    assert encode(s, {"topics": [{"name": "a"}]}, 0) == b"\x00\x00\x00\x01\x00\x01a"
    assert encode(s, {"topics": None}, 1) == b"\xff\xff\xff\xff"
    assert decode(s, b"\xff\xff\xff\xff", 1) == {"topics": None}
    with pytest.raises(DecodeError):  # v0 has no "all topics" null
        s.read(Reader(b"\xff\xff\xff\xff"), 0)
    # v4 adds allow_auto_topic_creation, which defaults to true; v8 two more booleans
    assert encode(s, {"topics": []}, 4) == b"\x00\x00\x00\x00\x01"
    assert encode(s, {"topics": [], "allow_auto_topic_creation": False}, 8) == b"\x00\x00\x00\x00\x00\x00\x00"


def test_api_versions_bodies() -> None:
    assert encode(metadata.API_VERSIONS_REQUEST, {}, 2) == b""
    table = api_versions_table()
    body = {"error_code": 0, "api_keys": table, "throttle_time_ms": 0}
    data = encode(metadata.API_VERSIONS_RESPONSE, body, 0)
    assert data[:6] == b"\x00\x00" + len(table).to_bytes(4, "big")
    assert len(data) == 6 + 6 * len(table)  # no throttle_time_ms at v0
    assert decode(metadata.API_VERSIONS_RESPONSE, data, 0) == {"error_code": 0, "api_keys": table}
    assert len(encode(metadata.API_VERSIONS_RESPONSE, body, 1)) == 6 + 6 * len(table) + 4


def test_produce_request_v3_with_records() -> None:
    records = bytes(range(256)) * 20  # larger than the Writer's copy limit: kept as a part
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 1500,
            "topics": [{"name": "t", "partitions": [{"index": 2, "records": records}]}]}  # fmt: skip
    w = Writer()
    produce.PRODUCE_REQUEST.write(w, body, 3)
    parts = w.finish()
    assert any(p is records for p in parts)
    data = b"".join(bytes(p) for p in parts)
    assert data[:12] == b"\xff\xff" + b"\xff\xff" + b"\x00\x00\x05\xdc" + b"\x00\x00\x00\x01"
    got = decode(produce.PRODUCE_REQUEST, data, 3)
    assert plain(got) == body
    # v2 has no transactional_id: the same body is two bytes shorter
    assert len(encode(produce.PRODUCE_REQUEST, body, 2)) == len(data) - 2


def test_produce_response_versions() -> None:
    part = {"index": 0, "error_code": 0, "base_offset": 42, "log_append_time_ms": -1, "log_start_offset": 0,
            "record_errors": [{"batch_index": 3, "message": None}], "error_message": "boom"}  # fmt: skip
    body = {"topics": [{"name": "t", "partitions": [part]}], "throttle_time_ms": 9}
    sizes = {v: len(encode(produce.PRODUCE_RESPONSE, body, v)) for v in range(9)}
    base = 4 + 2 + 1 + 4 + 4 + 2 + 8  # topics, name "t", partitions, index, error, base_offset
    assert sizes[0] == base
    assert sizes[1] == base + 4  # throttle_time_ms
    assert sizes[2] == sizes[3] == sizes[4] == base + 4 + 8  # log_append_time_ms
    assert sizes[5] == sizes[6] == sizes[7] == base + 4 + 16  # log_start_offset
    assert sizes[8] == base + 4 + 16 + (4 + 4 + 2) + (2 + 4)  # record_errors + error_message
    assert plain(decode(produce.PRODUCE_RESPONSE, encode(produce.PRODUCE_RESPONSE, body, 8), 8)) == body


def test_fetch_response_v11_defaults_and_nulls() -> None:
    body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
            "topics": [{"topic": "t", "partitions": [{"partition_index": 0, "error_code": 0, "high_watermark": 5,
                                                      "aborted_transactions": None, "records": None}]}]}  # fmt: skip
    got = decode(fetch.FETCH_RESPONSE, encode(fetch.FETCH_RESPONSE, body, 11), 11)
    p = got["topics"][0]["partitions"][0]
    assert p == {"partition_index": 0, "error_code": 0, "high_watermark": 5, "last_stable_offset": -1,
                 "log_start_offset": -1, "aborted_transactions": None, "preferred_read_replica": -1,
                 "records": None}  # fmt: skip


def test_fetch_request_defaults() -> None:
    got = decode(fetch.FETCH_REQUEST, encode(fetch.FETCH_REQUEST, {}, 11), 11)
    assert got == {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 0x7FFFFFFF,
                   "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [],
                   "forgotten_topics_data": [], "rack_id": ""}  # fmt: skip
    part = {"partition": 1, "fetch_offset": 10, "partition_max_bytes": 100}
    got = decode(fetch.FETCH_REQUEST, encode(fetch.FETCH_REQUEST, {"topics": [{"topic": "t", "partitions": [part]}]},
                                             9), 9)  # fmt: skip
    assert got["topics"][0]["partitions"][0] == {**part, "current_leader_epoch": -1, "log_start_offset": -1}


def test_list_offsets_v0_and_v1() -> None:
    req = {"replica_id": -1, "topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1}]}]}
    v0 = decode(fetch.LIST_OFFSETS_REQUEST, encode(fetch.LIST_OFFSETS_REQUEST, req, 0), 0)
    assert v0["topics"][0]["partitions"][0] == {"partition_index": 0, "timestamp": -1, "max_num_offsets": 1}
    v1 = decode(fetch.LIST_OFFSETS_REQUEST, encode(fetch.LIST_OFFSETS_REQUEST, req, 1), 1)
    assert v1["topics"][0]["partitions"][0] == {"partition_index": 0, "timestamp": -1}
    part = {"partition_index": 0, "error_code": 0, "old_style_offsets": [7], "timestamp": 1, "offset": 7}
    resp = {"topics": [{"name": "t", "partitions": [part]}]}
    r0 = decode(fetch.LIST_OFFSETS_RESPONSE, encode(fetch.LIST_OFFSETS_RESPONSE, resp, 0), 0)
    assert r0["topics"][0]["partitions"][0] == {"partition_index": 0, "error_code": 0, "old_style_offsets": [7]}
    r4 = decode(fetch.LIST_OFFSETS_RESPONSE, encode(fetch.LIST_OFFSETS_RESPONSE, resp, 4), 4)
    assert r4["throttle_time_ms"] == 0
    assert r4["topics"][0]["partitions"][0] == {"partition_index": 0, "error_code": 0, "timestamp": 1, "offset": 7,
                                                "leader_epoch": -1}  # fmt: skip
    assert (fetch.EARLIEST, fetch.LATEST) == (-2, -1)


def test_create_topics_defaults() -> None:
    got = decode(admin.CREATE_TOPICS_REQUEST, encode(admin.CREATE_TOPICS_REQUEST, {"topics": [{"name": "x"}]}, 1), 1)
    assert got == {"topics": [{"name": "x", "num_partitions": -1, "replication_factor": -1, "assignments": [],
                               "configs": []}], "timeout_ms": 30000, "validate_only": False}  # fmt: skip


def test_describe_configs_nullable_keys_and_versions() -> None:
    req = {"resources": [{"resource_type": admin.TOPIC_RESOURCE, "resource_name": "t", "configuration_keys": None}]}
    assert decode(admin.DESCRIBE_CONFIGS_REQUEST, encode(admin.DESCRIBE_CONFIGS_REQUEST, req, 0), 0) == req
    cfg = {"name": "retention.ms", "value": None, "read_only": False, "is_default": True, "config_source": 5,
           "is_sensitive": False, "synonyms": [], "config_type": 5, "documentation": None}  # fmt: skip
    resp = {"throttle_time_ms": 0, "results": [{"error_code": 0, "error_message": None, "resource_type": 2,
                                                "resource_name": "t", "configs": [cfg]}]}  # fmt: skip
    c0 = decode(admin.DESCRIBE_CONFIGS_RESPONSE, encode(admin.DESCRIBE_CONFIGS_RESPONSE, resp, 0), 0)
    assert list(c0["results"][0]["configs"][0]) == ["name", "value", "read_only", "is_default", "is_sensitive"]
    c1 = decode(admin.DESCRIBE_CONFIGS_RESPONSE, encode(admin.DESCRIBE_CONFIGS_RESPONSE, resp, 1), 1)
    assert list(c1["results"][0]["configs"][0]) == ["name", "value", "read_only", "config_source", "is_sensitive",
                                                    "synonyms"]  # fmt: skip
    c3 = decode(admin.DESCRIBE_CONFIGS_RESPONSE, encode(admin.DESCRIBE_CONFIGS_RESPONSE, resp, 3), 3)
    assert c3["results"][0]["configs"][0] == {k: v for k, v in cfg.items() if k != "is_default"}
    absent = decode(
        admin.DESCRIBE_CONFIGS_RESPONSE,
        encode(admin.DESCRIBE_CONFIGS_RESPONSE, {"results": [{"configs": [{"name": "n"}]}]}, 1),
        1,
    )
    assert absent["results"][0]["configs"][0]["config_source"] == -1


def test_describe_log_dirs_null_topics() -> None:
    assert encode(admin.DESCRIBE_LOG_DIRS_REQUEST, {"topics": None}, 0) == b"\xff\xff\xff\xff"
    assert decode(admin.DESCRIBE_LOG_DIRS_REQUEST, b"\xff\xff\xff\xff", 1) == {"topics": None}


def test_init_producer_id_bytes() -> None:
    assert encode(produce.INIT_PRODUCER_ID_REQUEST, {"transaction_timeout_ms": 60000}, 0) == (
        b"\xff\xff" + (60000).to_bytes(4, "big")
    )
    assert decode(produce.INIT_PRODUCER_ID_RESPONSE, encode(produce.INIT_PRODUCER_ID_RESPONSE, {}, 1), 1) == {
        "throttle_time_ms": 0,
        "error_code": 0,
        "producer_id": -1,
        "producer_epoch": -1,
    }


def test_metadata_response_v8_defaults() -> None:
    part = {"partition_index": 0, "replica_nodes": [1], "isr_nodes": [1]}
    body = {"brokers": [{"node_id": 1, "host": "h", "port": 9092}], "topics": [{"name": "t", "partitions": [part]}]}
    got = decode(metadata.METADATA_RESPONSE, encode(metadata.METADATA_RESPONSE, body, 8), 8)
    assert got == {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
        "cluster_id": None,
        "controller_id": -1,
        "topics": [{"error_code": 0, "name": "t", "is_internal": False,
                    "partitions": [{"error_code": 0, "partition_index": 0, "leader_id": -1, "leader_epoch": -1,
                                    "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": []}],
                    "topic_authorized_operations": -(2**31)}],
        "cluster_authorized_operations": -(2**31),
    }  # fmt: skip


# --- framing ----------------------------------------------------------------------------------


def join(parts: list[Any]) -> bytes:
    return b"".join(bytes(p) for p in parts)


def test_encode_request_and_read_header() -> None:
    parts = framing.encode_request(3, 1, 42, "cli", metadata.METADATA_REQUEST, {"topics": [{"name": "t"}]})
    frame = join(parts)
    assert int.from_bytes(frame[:4], "big", signed=True) == len(frame) - 4
    assert frame[4:] == b"\x00\x03\x00\x01\x00\x00\x00\x2a\x00\x03cli" + b"\x00\x00\x00\x01\x00\x01t"
    r = Reader(frame, 4)
    header = framing.read_request_header(r)
    assert header == framing.RequestHeader(3, 1, 42, "cli")
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (3, 1, 42, "cli")
    assert decode(metadata.METADATA_REQUEST, bytes(r.buf[r.pos :]), 1) == {"topics": [{"name": "t"}]}


def test_request_with_null_client_id() -> None:
    frame = join(framing.encode_request(18, 0, -7, None, metadata.API_VERSIONS_REQUEST, {}))
    assert frame == b"\x00\x00\x00\x0a" + b"\x00\x12\x00\x00\xff\xff\xff\xf9\xff\xff"
    assert framing.read_request_header(Reader(frame, 4)) == (18, 0, -7, None)


def test_read_request_header_short_input() -> None:
    full = b"\x00\x03\x00\x01\x00\x00\x00\x2a\x00\x03cli"
    for cut in range(len(full)):
        with pytest.raises(DecodeError):
            framing.read_request_header(Reader(full[:cut]))


def test_encode_response_with_a_big_record_part() -> None:
    records = b"r" * 10000
    body = {"topics": [{"topic": "t", "partitions": [{"partition_index": 0, "high_watermark": 1,
                                                      "records": records}]}]}  # fmt: skip
    parts = framing.encode_response(99, fetch.FETCH_RESPONSE, body, 4)
    assert any(p is records for p in parts)  # the payload is not copied
    frame = join(parts)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert frame[4:8] == (99).to_bytes(4, "big")
    got = decode(fetch.FETCH_RESPONSE, frame[8:], 4)
    assert bytes(got["topics"][0]["partitions"][0]["records"]) == records


class FakeSlice:
    def __init__(self, length: int) -> None:
        self.length = length


def test_framed() -> None:
    assert framing.framed([]) == [b"\x00\x00\x00\x00"]
    assert framing.framed([b"abc", b"de"]) == [b"\x00\x00\x00\x05abc", b"de"]
    s = FakeSlice(1000)
    out = framing.framed([s, b"x"])
    assert out[0] == (1001).to_bytes(4, "big") and out[1] is s and out[2] == b"x"
    mv = memoryview(b"12345")
    out = framing.framed([mv])
    assert out[0] == b"\x00\x00\x00\x05" and out[1] is mv


# --- the API table ----------------------------------------------------------------------------

#: the highest version ZooKeeper-mode Apache Kafka 2.8 serves of each API kafkactl speaks
KAFKA_2_8 = {
    0: 9, 1: 12, 2: 6, 3: 11, 8: 8, 9: 7, 10: 3, 11: 7, 12: 4, 13: 4, 14: 5, 15: 5, 16: 4, 17: 1, 18: 3,
    19: 7, 20: 6, 21: 2, 22: 4, 23: 4, 29: 2, 30: 2, 31: 2, 32: 4, 33: 2, 35: 2, 36: 2, 37: 3, 42: 2, 43: 2,
    44: 1, 47: 0, 48: 1, 49: 1, 50: 0, 51: 0, 60: 0, 61: 0, 24: 3, 25: 3, 26: 3, 28: 3,
    27: 1,  # WriteTxnMarkers
    65: 0, 66: 0,  # (DescribeTransactions and ListTransactions: Kafka 3.0's, for `kafkactl txn`)
}  # fmt: skip

#: APIs kafkactl serves below Kafka 2.8's highest version, and why
BELOW_KAFKA_2_8: dict[int, tuple[int, str]] = {}


def test_every_api_is_served_up_to_kafka_2_8() -> None:
    """Each API's versions reach Kafka 2.8's, or stop where BELOW_KAFKA_2_8 says (and why)."""
    for key, api in APIS.items():
        want = BELOW_KAFKA_2_8.get(key, (KAFKA_2_8[key], ""))[0]
        assert api.advertised[1] == want, f"{api.key.name}: v{api.advertised[1]}, expected v{want}"
    assert {0, 1, 2, 3, 18, 19, 20, 22, 32} <= set(APIS)
    assert set(BELOW_KAFKA_2_8) <= set(KAFKA_2_8)


def test_the_api_table_in_docs_is_the_one_served() -> None:
    """docs/formats.md lists every API with the versions ApiVersions advertises: kept current by this test."""
    text = (Path(__file__).resolve().parents[3] / "docs" / "formats.md").read_text()
    section = text[text.index("## Kafka protocol") :]
    documented: dict[int, tuple[int, int]] = {}
    for line in section.splitlines():
        m = re.match(r"\| [A-Za-z]+ \| (\d+) \| (\d+)–(\d+)", line)
        if m:
            documented[int(m[1])] = (int(m[2]), int(m[3]))
    assert documented == {int(k): a.advertised for k, a in APIS.items()}
    assert "3–9 served" in section


def test_produce_is_advertised_from_0_and_served_from_3() -> None:
    p = APIS[ApiKey.PRODUCE]
    assert p.advertised == (0, 9) and p.served == (3, 9)
    assert [v for v in range(-1, 11) if p.serves(v)] == [3, 4, 5, 6, 7, 8, 9]


def test_every_other_api_serves_what_it_advertises() -> None:
    for key, api in APIS.items():
        if key == ApiKey.PRODUCE:
            continue
        assert api.served == api.advertised, api.key.name
        lo, hi = api.advertised
        assert api.serves(lo) and api.serves(hi) and not api.serves(lo - 1) and not api.serves(hi + 1)


def test_api_table_keys() -> None:
    for key, api in APIS.items():
        assert api.key == key and isinstance(api.key, ApiKey)
        assert isinstance(api.request, Struct) and isinstance(api.response, Struct)
    expected_keys = {"PRODUCE": 0, "FETCH": 1, "LIST_OFFSETS": 2, "METADATA": 3, "OFFSET_COMMIT": 8,
                     "OFFSET_FETCH": 9, "FIND_COORDINATOR": 10, "JOIN_GROUP": 11, "HEARTBEAT": 12,
                     "LEAVE_GROUP": 13, "SYNC_GROUP": 14, "DESCRIBE_GROUPS": 15, "LIST_GROUPS": 16,
                     "SASL_HANDSHAKE": 17, "API_VERSIONS": 18, "DESCRIBE_ACLS": 29, "CREATE_ACLS": 30,
                     "DELETE_ACLS": 31, "SASL_AUTHENTICATE": 36, "CREATE_TOPICS": 19,
                     "DELETE_TOPICS": 20, "DELETE_RECORDS": 21, "INIT_PRODUCER_ID": 22, "OFFSET_FOR_LEADER_EPOCH": 23,
                     "DESCRIBE_CONFIGS": 32, "ALTER_CONFIGS": 33, "CREATE_PARTITIONS": 37, "ELECT_LEADERS": 43,
                     "DELETE_GROUPS": 42, "OFFSET_DELETE": 47, "DESCRIBE_CLUSTER": 60, "DESCRIBE_PRODUCERS": 61,
                     "INCREMENTAL_ALTER_CONFIGS": 44, "DESCRIBE_CLIENT_QUOTAS": 48, "ALTER_CLIENT_QUOTAS": 49,
                     "DESCRIBE_USER_SCRAM_CREDENTIALS": 50, "ALTER_USER_SCRAM_CREDENTIALS": 51,
                     "DESCRIBE_LOG_DIRS": 35, "ADD_PARTITIONS_TO_TXN": 24, "ADD_OFFSETS_TO_TXN": 25,
                     "END_TXN": 26, "WRITE_TXN_MARKERS": 27, "TXN_OFFSET_COMMIT": 28, "DESCRIBE_TRANSACTIONS": 65,
                     "LIST_TRANSACTIONS": 66}  # fmt: skip
    assert {k.name: int(k) for k in ApiKey} == expected_keys


def test_api_versions_table() -> None:
    table = api_versions_table()
    assert [row["api_key"] for row in table] == sorted(int(k) for k in APIS)
    for row in table:
        api = APIS[row["api_key"]]
        assert (row["min_version"], row["max_version"]) == api.advertised
        assert set(row) == {"api_key", "min_version", "max_version"}
    assert {"api_key": 0, "min_version": 0, "max_version": 9} in table


def test_absent_tagged_structs_read_as_fresh_defaults_and_defaults_stay_off_the_wire() -> None:
    """Fetch v12's per-partition tagged structs: absent, each reads as a dict of its own holding Kafka's
    defaults (-1s); at their defaults (or empty), they are not written, as Kafka leaves them out."""
    s = fetch.FETCH_RESPONSE
    part = {"partition_index": 0, "error_code": 0, "high_watermark": 5, "records": None}
    body = {"topics": [{"topic": "t", "partitions": [part, dict(part, partition_index=1)]}]}
    plain_bytes = encode(s, body, 12)
    a, b = (p["diverging_epoch"] for p in decode(s, plain_bytes, 12)["topics"][0]["partitions"])
    assert a == b == {"epoch": -1, "end_offset": -1} and a is not b
    at_defaults = dict(part, diverging_epoch={"epoch": -1, "end_offset": -1}, current_leader={})
    assert encode(s, {"topics": [{"topic": "t", "partitions": [at_defaults, dict(part, partition_index=1)]}]},
                  12) == plain_bytes  # fmt: skip
    diverged = dict(part, diverging_epoch={"epoch": 3, "end_offset": 42})
    got = decode(s, encode(s, {"topics": [{"topic": "t", "partitions": [diverged]}]}, 12), 12)
    assert got["topics"][0]["partitions"][0]["diverging_epoch"] == {"epoch": 3, "end_offset": 42}
    assert got["topics"][0]["partitions"][0]["current_leader"] == {"leader_id": -1, "leader_epoch": -1}
