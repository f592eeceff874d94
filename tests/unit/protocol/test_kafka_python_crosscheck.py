"""Our message codec against kafka-python's two independent ones, for every advertised (API, version).

kafka-python 3 carries two codecs:

* the JSON-driven classes (`kafka.protocol.metadata.MetadataRequest` …), built from copies of Apache
  Kafka's message JSON files (`kafka/protocol/schemas/resources/*.json`) — Kafka's own field names,
  types, version ranges and nullability;
* the hand-written classes of kafka-python 2 (`kafka.protocol.old.*`, `MetadataRequest_v5` …).

For each we check, in both directions, that bytes written by one side read back on the other side as
the same values, field by field in wire order, and that re-encoding gives the identical bytes. Against
the JSON we also compare the layouts statically: field count, order, type, nullability per version,
and field names (up to the few names kafkactl spells differently, listed in RENAMES).
"""

from __future__ import annotations

import importlib
import io
import struct
from typing import Any

import kafka.protocol.admin as kp_admin
import kafka.protocol.consumer as kp_consumer
import kafka.protocol.metadata as kp_metadata
import kafka.protocol.producer as kp_producer
import kafka.protocol.sasl as kp_sasl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.old import types as old_types
from kafka.protocol.schemas.fields.codecs.types import BitField as NewBitField

from broker.protocol import framing
from broker.protocol.api import APIS, Api, ApiKey, api_versions_table
from broker.protocol.messages import metadata
from broker.protocol.primitives import Reader
from broker.protocol.schema import BYTES, Array, Struct

# --- the kafka-python classes for each API ------------------------------------------------------

KP = {
    ApiKey.PRODUCE: (kp_producer.ProduceRequest, kp_producer.ProduceResponse),
    ApiKey.FETCH: (kp_consumer.FetchRequest, kp_consumer.FetchResponse),
    ApiKey.LIST_OFFSETS: (kp_consumer.ListOffsetsRequest, kp_consumer.ListOffsetsResponse),
    ApiKey.METADATA: (kp_metadata.MetadataRequest, kp_metadata.MetadataResponse),
    ApiKey.API_VERSIONS: (kp_metadata.ApiVersionsRequest, kp_metadata.ApiVersionsResponse),
    ApiKey.DESCRIBE_CLUSTER: (kp_admin.DescribeClusterRequest, kp_admin.DescribeClusterResponse),
    ApiKey.DESCRIBE_PRODUCERS: (kp_admin.DescribeProducersRequest, kp_admin.DescribeProducersResponse),
    ApiKey.ADD_PARTITIONS_TO_TXN: (kp_producer.AddPartitionsToTxnRequest, kp_producer.AddPartitionsToTxnResponse),
    ApiKey.ADD_OFFSETS_TO_TXN: (kp_producer.AddOffsetsToTxnRequest, kp_producer.AddOffsetsToTxnResponse),
    ApiKey.END_TXN: (kp_producer.EndTxnRequest, kp_producer.EndTxnResponse),
    ApiKey.WRITE_TXN_MARKERS: (kp_producer.WriteTxnMarkersRequest, kp_producer.WriteTxnMarkersResponse),
    ApiKey.TXN_OFFSET_COMMIT: (kp_producer.TxnOffsetCommitRequest, kp_producer.TxnOffsetCommitResponse),
    ApiKey.DESCRIBE_TRANSACTIONS: (kp_admin.DescribeTransactionsRequest, kp_admin.DescribeTransactionsResponse),
    ApiKey.LIST_TRANSACTIONS: (kp_admin.ListTransactionsRequest, kp_admin.ListTransactionsResponse),
    ApiKey.CREATE_TOPICS: (kp_admin.CreateTopicsRequest, kp_admin.CreateTopicsResponse),
    ApiKey.DELETE_TOPICS: (kp_admin.DeleteTopicsRequest, kp_admin.DeleteTopicsResponse),
    ApiKey.DELETE_RECORDS: (kp_admin.DeleteRecordsRequest, kp_admin.DeleteRecordsResponse),
    ApiKey.INIT_PRODUCER_ID: (kp_producer.InitProducerIdRequest, kp_producer.InitProducerIdResponse),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (kp_consumer.OffsetForLeaderEpochRequest, kp_consumer.OffsetForLeaderEpochResponse),
    ApiKey.DESCRIBE_CONFIGS: (kp_admin.DescribeConfigsRequest, kp_admin.DescribeConfigsResponse),
    ApiKey.ALTER_CONFIGS: (kp_admin.AlterConfigsRequest, kp_admin.AlterConfigsResponse),
    ApiKey.DESCRIBE_LOG_DIRS: (kp_admin.DescribeLogDirsRequest, kp_admin.DescribeLogDirsResponse),
    ApiKey.CREATE_PARTITIONS: (kp_admin.CreatePartitionsRequest, kp_admin.CreatePartitionsResponse),
    ApiKey.ELECT_LEADERS: (kp_admin.ElectLeadersRequest, kp_admin.ElectLeadersResponse),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (kp_admin.DescribeClientQuotasRequest, kp_admin.DescribeClientQuotasResponse),
    ApiKey.ALTER_CLIENT_QUOTAS: (kp_admin.AlterClientQuotasRequest, kp_admin.AlterClientQuotasResponse),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (
        kp_admin.DescribeUserScramCredentialsRequest,
        kp_admin.DescribeUserScramCredentialsResponse,
    ),  # fmt: skip
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (
        kp_admin.AlterUserScramCredentialsRequest,
        kp_admin.AlterUserScramCredentialsResponse,
    ),  # fmt: skip
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (
        kp_admin.IncrementalAlterConfigsRequest,
        kp_admin.IncrementalAlterConfigsResponse,
    ),  # fmt: skip
    # the group APIs, checked as soon as they join the API table
    ApiKey.OFFSET_COMMIT: (kp_consumer.OffsetCommitRequest, kp_consumer.OffsetCommitResponse),
    ApiKey.OFFSET_FETCH: (kp_consumer.OffsetFetchRequest, kp_consumer.OffsetFetchResponse),
    ApiKey.FIND_COORDINATOR: (kp_metadata.FindCoordinatorRequest, kp_metadata.FindCoordinatorResponse),
    ApiKey.JOIN_GROUP: (kp_consumer.JoinGroupRequest, kp_consumer.JoinGroupResponse),
    ApiKey.HEARTBEAT: (kp_consumer.HeartbeatRequest, kp_consumer.HeartbeatResponse),
    ApiKey.LEAVE_GROUP: (kp_consumer.LeaveGroupRequest, kp_consumer.LeaveGroupResponse),
    ApiKey.SYNC_GROUP: (kp_consumer.SyncGroupRequest, kp_consumer.SyncGroupResponse),
    ApiKey.DESCRIBE_GROUPS: (kp_admin.DescribeGroupsRequest, kp_admin.DescribeGroupsResponse),
    ApiKey.LIST_GROUPS: (kp_admin.ListGroupsRequest, kp_admin.ListGroupsResponse),
    ApiKey.DELETE_GROUPS: (kp_admin.DeleteGroupsRequest, kp_admin.DeleteGroupsResponse),
    ApiKey.OFFSET_DELETE: (kp_consumer.OffsetDeleteRequest, kp_consumer.OffsetDeleteResponse),
    ApiKey.SASL_HANDSHAKE: (kp_sasl.SaslHandshakeRequest, kp_sasl.SaslHandshakeResponse),
    ApiKey.SASL_AUTHENTICATE: (kp_sasl.SaslAuthenticateRequest, kp_sasl.SaslAuthenticateResponse),
    ApiKey.DESCRIBE_ACLS: (kp_admin.DescribeAclsRequest, kp_admin.DescribeAclsResponse),
    ApiKey.CREATE_ACLS: (kp_admin.CreateAclsRequest, kp_admin.CreateAclsResponse),
    ApiKey.DELETE_ACLS: (kp_admin.DeleteAclsRequest, kp_admin.DeleteAclsResponse),
}

OLD = {
    ApiKey.PRODUCE: ("produce", "ProduceRequest", "ProduceResponse"),
    ApiKey.FETCH: ("fetch", "FetchRequest", "FetchResponse"),
    ApiKey.LIST_OFFSETS: ("list_offsets", "ListOffsetsRequest", "ListOffsetsResponse"),
    ApiKey.METADATA: ("metadata", "MetadataRequest", "MetadataResponse"),
    ApiKey.API_VERSIONS: ("api_versions", "ApiVersionsRequest", "ApiVersionsResponse"),
    ApiKey.CREATE_TOPICS: ("admin", "CreateTopicsRequest", "CreateTopicsResponse"),
    ApiKey.DELETE_TOPICS: ("admin", "DeleteTopicsRequest", "DeleteTopicsResponse"),
    ApiKey.DELETE_RECORDS: ("admin", "DeleteRecordsRequest", "DeleteRecordsResponse"),
    ApiKey.INIT_PRODUCER_ID: ("init_producer_id", "InitProducerIdRequest", "InitProducerIdResponse"),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (
        "offset_for_leader_epoch",
        "OffsetForLeaderEpochRequest",
        "OffsetForLeaderEpochResponse",
    ),  # fmt: skip
    ApiKey.DESCRIBE_CONFIGS: ("admin", "DescribeConfigsRequest", "DescribeConfigsResponse"),
    ApiKey.ALTER_CONFIGS: ("admin", "AlterConfigsRequest", "AlterConfigsResponse"),
    ApiKey.DESCRIBE_LOG_DIRS: ("admin", "DescribeLogDirsRequest", "DescribeLogDirsResponse"),
    ApiKey.CREATE_PARTITIONS: ("admin", "CreatePartitionsRequest", "CreatePartitionsResponse"),
    ApiKey.ELECT_LEADERS: ("admin", "ElectLeadersRequest", "ElectLeadersResponse"),  # (IncrementalAlterConfigs: none)
    ApiKey.DESCRIBE_CLIENT_QUOTAS: ("admin", "DescribeClientQuotasRequest", "DescribeClientQuotasResponse"),
    # (AlterClientQuotas: none)
    ApiKey.OFFSET_COMMIT: ("commit", "OffsetCommitRequest", "OffsetCommitResponse"),
    ApiKey.OFFSET_FETCH: ("commit", "OffsetFetchRequest", "OffsetFetchResponse"),
    ApiKey.FIND_COORDINATOR: ("find_coordinator", "FindCoordinatorRequest", "FindCoordinatorResponse"),
    ApiKey.JOIN_GROUP: ("group", "JoinGroupRequest", "JoinGroupResponse"),
    ApiKey.HEARTBEAT: ("group", "HeartbeatRequest", "HeartbeatResponse"),
    ApiKey.LEAVE_GROUP: ("group", "LeaveGroupRequest", "LeaveGroupResponse"),
    ApiKey.SYNC_GROUP: ("group", "SyncGroupRequest", "SyncGroupResponse"),
    ApiKey.DESCRIBE_GROUPS: ("admin", "DescribeGroupsRequest", "DescribeGroupsResponse"),
    ApiKey.LIST_GROUPS: ("admin", "ListGroupsRequest", "ListGroupsResponse"),
    ApiKey.DELETE_GROUPS: ("admin", "DeleteGroupsRequest", "DeleteGroupsResponse"),  # (OffsetDelete: none)
    ApiKey.SASL_HANDSHAKE: ("sasl_handshake", "SaslHandshakeRequest", "SaslHandshakeResponse"),
    ApiKey.SASL_AUTHENTICATE: ("sasl_authenticate", "SaslAuthenticateRequest", "SaslAuthenticateResponse"),
    ApiKey.DESCRIBE_ACLS: ("admin", "DescribeAclsRequest", "DescribeAclsResponse"),
    ApiKey.CREATE_ACLS: ("admin", "CreateAclsRequest", "CreateAclsResponse"),
    ApiKey.DELETE_ACLS: ("admin", "DeleteAclsRequest", "DeleteAclsResponse"),
    ApiKey.ADD_PARTITIONS_TO_TXN: ("add_partitions_to_txn", "AddPartitionsToTxnRequest", "AddPartitionsToTxnResponse"),
    ApiKey.ADD_OFFSETS_TO_TXN: ("add_offsets_to_txn", "AddOffsetsToTxnRequest", "AddOffsetsToTxnResponse"),
    ApiKey.END_TXN: ("end_txn", "EndTxnRequest", "EndTxnResponse"),
    ApiKey.TXN_OFFSET_COMMIT: ("txn_offset_commit", "TxnOffsetCommitRequest", "TxnOffsetCommitResponse"),
}

#: hand-written kafka-python classes that are themselves wrong (checked against Kafka's JSON): left out.
#: DescribeLogDirsRequest_v0 declares `partitions` as a single INT32; Kafka's DescribeLogDirsRequest.json
#: (and kafka-python's own JSON class) has `Partitions: []int32`.
OLD_KNOWN_WRONG = {
    (ApiKey.DESCRIBE_LOG_DIRS, "request", 0),
    # CreatePartitionsRequest_v0/v1 nest count and assignment in a `new_partitions` struct ("not compatible
    # with new protocol", its own comment): the same bytes in another shape; its JSON class is checked instead
    (ApiKey.CREATE_PARTITIONS, "request", 0),
    (ApiKey.CREATE_PARTITIONS, "request", 1),
    # WriteTxnMarkers v0 (Kafka 2.8's, dropped by Kafka 4) has no kafka-python class at all: it is v1's fields
    # unflexible, checked against v1 in tests/unit/protocol/test_txn_markers.py
    (ApiKey.WRITE_TXN_MARKERS, "request", 0),
    (ApiKey.WRITE_TXN_MARKERS, "response", 0),
}

#: our field path → Kafka's (JSON) name where kafkactl names a field differently. The metadata
#: authorized-operations entries are kafka-python's own renames (its json_patch); Kafka's JSON names
#: them TopicAuthorizedOperations / ClusterAuthorizedOperations, as we do.
RENAMES = {
    (ApiKey.PRODUCE, "request"): {"topics": "topic_data", "topics.partitions": "partition_data"},
    (ApiKey.PRODUCE, "response"): {
        "topics": "responses",
        "topics.partitions": "partition_responses",
        "topics.partitions.record_errors.message": "batch_index_error_message",
    },
    (ApiKey.FETCH, "response"): {"topics": "responses"},
    (ApiKey.OFFSET_COMMIT, "request"): {"generation_id": "generation_id_or_member_epoch"},
    (ApiKey.DESCRIBE_CLUSTER, "response"): {"cluster_authorized_operations": "authorized_operations"},
    (ApiKey.ADD_PARTITIONS_TO_TXN, "request"): {
        "transactional_id": "v3_and_below_transactional_id",
        "producer_id": "v3_and_below_producer_id",
        "producer_epoch": "v3_and_below_producer_epoch",
        "topics": "v3_and_below_topics",
    },
    (ApiKey.ADD_PARTITIONS_TO_TXN, "response"): {
        "results": "results_by_topic_v3_and_below",
        "results.results": "results_by_partition",
        "results.results.error_code": "partition_error_code",
    },
    (ApiKey.METADATA, "response"): {
        "topics.topic_authorized_operations": "authorized_operations",
        "cluster_authorized_operations": "authorized_operations",
    },
}


def kp_class(api: Api, which: str) -> Any:
    return KP[api.key][0 if which == "request" else 1]


def old_class(api: Api, which: str, v: int) -> Any:
    if api.key not in OLD:
        return None
    mod, req, resp = OLD[api.key]
    module = importlib.import_module(f"kafka.protocol.old.{mod}")
    return getattr(module, f"{req if which == 'request' else resp}_v{v}", None)


def old_speaks_flexible(cls: Any, ours: Struct, v: int) -> bool:
    """Some hand-written classes of a flexible version are written in the non-flexible forms (DescribeAcls
    v2 …): those are wrong by Kafka's JSON, which the JSON-driven cases check instead."""
    return not ours.flexible(v) or cls.SCHEMA.fields[-1] is old_types.TaggedFields


CASES = [
    pytest.param(api, which, v, id=f"{api.key.name}-{which}-v{v}")
    for api in APIS.values()
    if api.key in KP  # an API without a reference fails test_every_api_has_a_reference
    for which in ("request", "response")
    for v in range(api.advertised[0], api.advertised[1] + 1)
]

OLD_CASES = [
    pytest.param(api, which, v, id=f"{api.key.name}-{which}-v{v}")
    for api in APIS.values()
    for which in ("request", "response")
    for v in range(api.advertised[0], api.advertised[1] + 1)
    if old_class(api, which, v) is not None
    and (api.key, which, v) not in OLD_KNOWN_WRONG
    and old_speaks_flexible(old_class(api, which, v), getattr(api, which), v)
]

HYPOTHESIS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- our side -----------------------------------------------------------------------------------

PRIMS = {
    "int8": st.integers(-(2**7), 2**7 - 1),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "boolean": st.booleans(),
    "uuid": st.binary(min_size=16, max_size=16),
    "float64": st.floats(allow_nan=False),
}
TEXT = st.text(max_size=8)
BINARY = st.binary(max_size=24)


def ours_strategy(t: Any, v: int) -> st.SearchStrategy:
    if isinstance(t, Struct):
        return st.fixed_dictionaries({name: ours_strategy(tt, v) for name, tt, _ in t.at(v)})
    if isinstance(t, Array):
        items = st.lists(ours_strategy(t.item, v), max_size=3)
        return st.none() | items if v >= t.nullable_from else items
    if t.name == "string":
        return TEXT
    if t.name == "nullable_string":
        return st.none() | TEXT
    if t.name == "nullable_bytes":
        return BINARY if t is BYTES else st.none() | BINARY
    return PRIMS[t.name]


def body_for(api: Api, which: str, v: int) -> st.SearchStrategy:
    s = ours_strategy(getattr(api, which), v)
    if api.key == ApiKey.API_VERSIONS and which == "response" and v > 0:
        # both kafka-python codecs read an ApiVersions answer carrying an error as v0 (Kafka's rule for
        # the UNSUPPORTED_VERSION fallback, tested on its own below): keep the versioned path error-free
        s = s.map(lambda b: {**b, "error_code": 0})
    return s


def ours_encode(schema: Struct, body: dict, v: int) -> bytes:
    return schema.encode(body, v)


def ours_decode(schema: Struct, data: bytes, v: int) -> dict:
    return schema.decode(data, v)  # leftover bytes raise DecodeError


def ours_values(t: Any, value: Any, v: int) -> Any:
    """Values in wire order, as nested lists: comparable with any other codec's, whatever the names."""
    if isinstance(t, Struct):
        return [ours_values(tt, value[name], v) for name, tt, _ in t.at(v)]
    if isinstance(t, Array):
        return None if value is None else [ours_values(t.item, x, v) for x in value]
    return bytes(value) if isinstance(value, memoryview | bytearray) else value


# --- kafka-python's JSON-driven codec -------------------------------------------------------------


def kp_values(field: Any, value: Any, v: int) -> Any:
    if field.is_struct_array():
        return None if value is None else [kp_struct_values(field.array_of, x, v) for x in value]
    if field.is_array():
        return None if value is None else [kp_values(field.array_of, x, v) for x in value]
    if field.is_struct():
        return kp_struct_values(field, value, v)
    if field.type_str == "bitfield":
        return struct.unpack(">i", NewBitField.encode(value))[0]
    if field.type_str == "uuid":  # kafka-python: a uuid.UUID, None for the all-zero one
        return bytes(16) if value is None else value.bytes
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    return value


def kp_struct_values(sf: Any, obj: Any, v: int) -> list:
    return [kp_values(f, getattr(obj, f.name), v) for f in sf.untagged_fields(v)]


def kp_field_strategy(field: Any, v: int) -> st.SearchStrategy:
    nullable = field.nullable_for_version_q(v)
    if field.is_struct_array():
        items = st.lists(kp_struct_strategy(field.array_of, v, field.array_of.data_class), max_size=3)
        return st.none() | items if nullable else items
    if field.is_array():
        items = st.lists(kp_simple_strategy(field.array_of, False), max_size=3)
        return st.none() | items if nullable else items
    assert not field.is_struct(), "no plain nested structs in the non-flexible versions we speak"
    return kp_simple_strategy(field, nullable)


def kp_simple_strategy(field: Any, nullable: bool) -> st.SearchStrategy:
    t = field.type_str
    if t == "string":
        return st.none() | TEXT if nullable else TEXT
    if t in ("bytes", "records"):
        return st.none() | BINARY if nullable else BINARY
    if t == "bitfield":
        return st.none() | st.sets(st.integers(0, 30), max_size=4)
    if t == "uuid":
        return st.uuids()
    return PRIMS["boolean" if t == "bool" else t]


def kp_struct_strategy(sf: Any, v: int, cls: Any) -> st.SearchStrategy:
    fields = {f.name: kp_field_strategy(f, v) for f in sf.untagged_fields(v)}
    return st.fixed_dictionaries(fields).map(lambda kw: cls(version=v, **kw))


def kp_layout(field: Any, v: int) -> Any:
    """(name, type) per field at `v`, types as (kind, nullable)."""
    if field.is_struct_array():
        return ("array", field.nullable_for_version_q(v), [(f.name, kp_layout(f, v)) for f in field.untagged_fields(v)])
    if field.is_array():
        # kafka-python copies the array's nullableVersions onto its element; Kafka has no nullable elements
        return ("array", field.nullable_for_version_q(v), (kp_simple_type(field.array_of), False))
    if field.is_struct():
        return [(f.name, kp_layout(f, v)) for f in field.untagged_fields(v)]
    return (kp_simple_type(field), field.nullable_for_version_q(v))


def kp_simple_type(field: Any) -> str:
    return {"records": "bytes", "bitfield": "int32"}.get(field.type_str, field.type_str)


OUR_TYPES = {"int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "boolean": "bool", "uuid": "uuid",
             "float64": "float64"}  # fmt: skip


def ours_layout(t: Any, v: int, path: str, renames: dict[str, str]) -> Any:
    if isinstance(t, Struct):
        out = []
        for name, tt, _ in t.at(v):
            p = f"{path}.{name}" if path else name
            out.append((renames.get(p, name), ours_layout(tt, v, p, renames)))
        return out
    if isinstance(t, Array):
        inner = ours_layout(t.item, v, path, renames)
        return ("array", v >= t.nullable_from, inner)
    if t.name in ("string", "nullable_string"):
        return ("string", t.name == "nullable_string")
    if t.name == "nullable_bytes":
        return ("bytes", t is not BYTES)
    return (OUR_TYPES[t.name], False)


def strip_names(layout: Any) -> Any:
    if isinstance(layout, list):
        return [strip_names(t) for _, t in layout]
    if isinstance(layout, tuple) and layout[0] == "array":
        return ("array", layout[1], strip_names(layout[2]))
    return layout


# --- static checks against Kafka's JSON -----------------------------------------------------------


def test_every_api_has_a_reference() -> None:
    assert set(APIS) <= set(KP), "add the kafka-python classes of the new API to KP (and OLD)"


@pytest.mark.parametrize("api", [a for a in APIS.values() if a.key in KP], ids=lambda a: a.key.name)
def test_api_keys_and_flexible_versions(api: Api) -> None:
    for cls, ours in zip(KP[api.key], (api.request, api.response), strict=True):
        assert cls.API_KEY == int(api.key)
        # our first flexible (tagged-field) version is Kafka's, for every version we advertise (-1: it has none)
        first_flexible = cls._flexible_versions[0]
        for v in range(api.advertised[0], api.advertised[1] + 1):
            assert ours.flexible(v) == (0 <= first_flexible <= v), (cls.__name__, v)
        assert cls.max_version >= api.advertised[1]


@pytest.mark.parametrize(("api", "which", "v"), CASES)
def test_layout_types_match_kafka_json(api: Api, which: str, v: int) -> None:
    ours = strip_names(ours_layout(getattr(api, which), v, "", {}))
    theirs = strip_names(kp_layout(kp_class(api, which)._struct, v))
    assert ours == theirs


@pytest.mark.parametrize(("api", "which", "v"), CASES)
def test_layout_names_match_kafka_json(api: Api, which: str, v: int) -> None:
    ours = ours_layout(getattr(api, which), v, "", RENAMES.get((api.key, which), {}))
    theirs = kp_layout(kp_class(api, which)._struct, v)
    assert ours == theirs


# --- round trips with the JSON-driven codec ---------------------------------------------------------


@pytest.mark.parametrize(("api", "which", "v"), CASES)
def test_ours_to_kafka_python(api: Api, which: str, v: int) -> None:
    schema, cls = getattr(api, which), kp_class(api, which)

    @HYPOTHESIS
    @given(body=body_for(api, which, v))
    def check(body: dict) -> None:
        data = ours_encode(schema, body, v)
        obj = cls.decode(data, version=v)
        assert kp_struct_values(cls._struct, obj, v) == ours_values(schema, body, v)
        assert obj.version == v
        # re-encode with the codec itself (a decoded message has no header for ApiMessage.encode to update)
        flex = schema.flexible(v)
        assert bytes(cls._struct.encode(obj, version=v, compact=flex, tagged=flex)) == data

    check()


@pytest.mark.parametrize(("api", "which", "v"), CASES)
def test_kafka_python_to_ours(api: Api, which: str, v: int) -> None:
    schema, cls = getattr(api, which), kp_class(api, which)

    @HYPOTHESIS
    @given(obj=kp_struct_strategy(cls._struct, v, cls))
    def check(obj: Any) -> None:
        data = bytes(obj.encode(version=v))
        got = ours_decode(schema, data, v)
        assert ours_values(schema, got, v) == kp_struct_values(cls._struct, obj, v)
        assert ours_encode(schema, got, v) == data

    check()


# --- round trips with the hand-written codec ------------------------------------------------------


def old_values(t: Any, value: Any) -> Any:
    if isinstance(t, old_types.Schema):
        fields = untagged(t)  # the old codec reads a tagged-field section into nothing, and writes one from {}
        return [old_values(f, x) for f, x in zip(fields, value[: len(fields)], strict=True)]
    if isinstance(t, old_types.Array):
        return None if value is None else [old_values(t.array_of, x) for x in value]
    if t is old_types.BitField:
        return struct.unpack(">i", old_types.BitField.encode(value))[0]
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    return value


def untagged(old_t: Any) -> list[Any]:
    """The old codec's fields of a struct without its closing tagged-field section (flexible versions)."""
    fields = list(old_t.fields)
    if fields and fields[-1] is old_types.TaggedFields:
        fields.pop()
    return fields


def ours_as_old(our_t: Any, old_t: Any, value: Any, v: int) -> Any:
    """Our values in the old codec's shape: it spells Metadata's `[{name}]` topics as a bare `[string]`."""
    if isinstance(our_t, Struct):
        fields = our_t.at(v)
        if not isinstance(old_t, old_types.Schema):
            assert len(fields) == 1
            name, tt, _ = fields[0]
            return ours_as_old(tt, old_t, value[name], v)
        old_fields = untagged(old_t)
        assert len(fields) == len(old_fields)
        return [ours_as_old(tt, ot, value[name], v) for (name, tt, _), ot in zip(fields, old_fields, strict=True)]
    if isinstance(our_t, Array):
        assert isinstance(old_t, old_types.Array)
        return None if value is None else [ours_as_old(our_t.item, old_t.array_of, x, v) for x in value]
    return bytes(value) if isinstance(value, memoryview | bytearray) else value


def old_strategy(old_t: Any, our_t: Any, v: int) -> st.SearchStrategy:
    """Values shaped by the old codec's schema; nullability (which it does not record) from ours."""
    if isinstance(our_t, Struct):
        fields = our_t.at(v)
        if not isinstance(old_t, old_types.Schema):
            assert len(fields) == 1
            return old_strategy(old_t, fields[0][1], v)
        old_fields = untagged(old_t)
        assert len(fields) == len(old_fields)
        values = [old_strategy(ot, tt, v) for ot, (_, tt, _) in zip(old_fields, fields, strict=True)]
        return st.tuples(*values, *([st.just({})] if len(old_fields) < len(old_t.fields) else []))
    if isinstance(old_t, old_types.Array):
        items = st.lists(old_strategy(old_t.array_of, our_t.item, v), max_size=3)
        return st.none() | items if v >= our_t.nullable_from else items
    if isinstance(old_t, old_types.String):
        return st.none() | TEXT if our_t.name == "nullable_string" else TEXT
    if old_t is old_types.Bytes or isinstance(old_t, old_types.CompactBytes):
        return BINARY if our_t is BYTES else st.none() | BINARY
    if old_t is old_types.BitField:
        return st.none() | st.sets(st.integers(0, 30), max_size=4)
    kinds = {old_types.Int8: "int8", old_types.Int16: "int16", old_types.Int32: "int32", old_types.Int64: "int64",
             old_types.Boolean: "boolean", old_types.Float64: "float64"}  # fmt: skip
    return PRIMS[kinds[old_t]]


@pytest.mark.parametrize(("api", "which", "v"), OLD_CASES)
def test_ours_to_kafka_python_old(api: Api, which: str, v: int) -> None:
    schema, old = getattr(api, which), old_class(api, which, v).SCHEMA

    @HYPOTHESIS
    @given(body=body_for(api, which, v))
    def check(body: dict) -> None:
        data = ours_encode(schema, body, v)
        stream = io.BytesIO(data)
        decoded = old.decode(stream)
        assert stream.tell() == len(data), "kafka-python read a different length"
        assert old_values(old, decoded) == ours_as_old(schema, old, body, v)
        assert old.encode(decoded) == data

    check()


@pytest.mark.parametrize(("api", "which", "v"), OLD_CASES)
def test_kafka_python_old_to_ours(api: Api, which: str, v: int) -> None:
    schema, old = getattr(api, which), old_class(api, which, v).SCHEMA

    @HYPOTHESIS
    @given(values=old_strategy(old, schema, v))
    def check(values: tuple) -> None:
        data = old.encode(values)
        got = ours_decode(schema, data, v)
        assert ours_as_old(schema, old, got, v) == old_values(old, values)
        assert ours_encode(schema, got, v) == data

    check()


def test_old_cases_cover_every_version_the_json_codec_cannot_vouch_for() -> None:
    """Versions below a JSON file's validVersions (Kafka 4 dropped them) are covered by the old codec."""
    for api in APIS.values():
        if api.key not in KP:
            continue
        for which in ("request", "response"):
            valid_lo = kp_class(api, which)._valid_versions[0]
            for v in range(api.advertised[0], min(valid_lo, api.advertised[1] + 1)):
                if (api.key, which, v) in OLD_KNOWN_WRONG:
                    continue
                assert old_class(api, which, v) is not None, (api.key.name, which, v)


# --- frames and headers -----------------------------------------------------------------------------


@pytest.mark.parametrize("client_id", ["kafka-python", None, "é"])
def test_request_frame_from_kafka_python(client_id: str | None) -> None:
    req = kp_metadata.MetadataRequest(version=4, topics=[kp_metadata.MetadataRequest.MetadataRequestTopic(name="t")],
                                      allow_auto_topic_creation=False)  # fmt: skip
    req.with_header(correlation_id=123, client_id=client_id)
    frame = bytes(req.encode(header=True, framed=True))
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    r = Reader(frame, 4)
    assert framing.read_request_header(r) == (3, 4, 123, client_id)
    body = metadata.METADATA_REQUEST.read(r, 4)
    assert body == {"topics": [{"name": "t"}], "allow_auto_topic_creation": False}
    assert r.remaining() == 0
    ours = b"".join(framing.encode_request(3, 4, 123, client_id, metadata.METADATA_REQUEST, body))
    assert ours == frame


def test_request_frame_to_kafka_python() -> None:
    body = {"topics": None, "allow_auto_topic_creation": True}
    frame = b"".join(framing.encode_request(3, 5, 77, "me", metadata.METADATA_REQUEST, body))
    got = kp_metadata.MetadataRequest.decode(frame, version=5, header=True, framed=True)
    assert got.header.request_api_key == 3 and got.header.request_api_version == 5
    assert got.header.correlation_id == 77 and got.header.client_id == "me"
    assert got.topics is None and got.allow_auto_topic_creation is True


def test_response_frame_to_kafka_python() -> None:
    records = bytes(range(256)) * 40  # big enough to travel as its own part
    body = {"throttle_time_ms": 5, "error_code": 0, "session_id": 0,
            "topics": [{"topic": "t", "partitions": [{"partition_index": 1, "error_code": 0, "high_watermark": 9,
                                                      "last_stable_offset": 9, "log_start_offset": 0,
                                                      "aborted_transactions": None, "records": records}]}]}  # fmt: skip
    parts = framing.encode_response(31337, APIS[ApiKey.FETCH].response, body, 11)
    frame = b"".join(bytes(p) for p in parts)
    got = kp_consumer.FetchResponse.decode(frame, version=11, header=True, framed=True)
    assert got.header.correlation_id == 31337
    assert got.throttle_time_ms == 5 and got.session_id == 0
    p = got.responses[0].partitions[0]
    assert (p.partition_index, p.high_watermark, p.last_stable_offset, p.preferred_read_replica) == (1, 9, 9, -1)
    assert p.aborted_transactions is None
    assert bytes(p.records) == records


def test_api_versions_error_answer_is_read_as_v0_by_kafka_python() -> None:
    """DESIGN: an ApiVersions request above v2 gets a v0-format body with error 35 and the list."""
    table = api_versions_table()
    data = ours_encode(APIS[ApiKey.API_VERSIONS].response, {"error_code": 35, "api_keys": table}, 0)
    for v in (0, 1, 2, 3):
        got = kp_metadata.ApiVersionsResponse.decode(data, version=v)
        assert got.error_code == 35
        assert [(k.api_key, k.min_version, k.max_version) for k in got.api_keys] == [
            (row["api_key"], row["min_version"], row["max_version"]) for row in table
        ]
    old = importlib.import_module("kafka.protocol.old.api_versions")
    got = old.ApiVersionsResponse_v2.decode(data)
    assert got.error_code == 35 and len(got.api_keys) == len(table)
