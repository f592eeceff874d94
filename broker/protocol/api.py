"""The APIs kafkactl speaks: key, schemas, the versions advertised in ApiVersions and those served.

A version advertised but not served (Produce 0-2, kept so old librdkafka keeps compression on)
is answered with UNSUPPORTED_VERSION. DescribeGroups and ListGroups go beyond the paper's APIs:
`kafkactl group` (like Kafka's own group tool) asks the coordinators with them.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

from broker.protocol.messages import admin, fetch, groups, metadata, produce, security
from broker.protocol.messages import configs as configs_msgs
from broker.protocol.messages import quotas as quotas_msgs
from broker.protocol.messages import records as records_msgs
from broker.protocol.messages import transactions as txn_msgs
from broker.protocol.messages import txn_markers as txn_markers_msgs
from broker.protocol.schema import Struct


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


class Api(NamedTuple):
    key: ApiKey
    request: Struct
    response: Struct
    advertised: tuple[int, int]
    served: tuple[int, int]

    def serves(self, version: int) -> bool:
        return self.served[0] <= version <= self.served[1]


def _api(key: ApiKey, request: Struct, response: Struct, lo: int, hi: int, served_lo: int | None = None) -> Api:
    return Api(key, request, response, (lo, hi), (lo if served_lo is None else served_lo, hi))


APIS: dict[int, Api] = {
    a.key: a
    for a in (
        _api(ApiKey.PRODUCE, produce.PRODUCE_REQUEST, produce.PRODUCE_RESPONSE, 0, 9, served_lo=3),
        _api(ApiKey.FETCH, fetch.FETCH_REQUEST, fetch.FETCH_RESPONSE, 4, 12),
        _api(ApiKey.LIST_OFFSETS, fetch.LIST_OFFSETS_REQUEST, fetch.LIST_OFFSETS_RESPONSE, 0, 6),
        _api(ApiKey.METADATA, metadata.METADATA_REQUEST, metadata.METADATA_RESPONSE, 0, 11),
        _api(ApiKey.OFFSET_COMMIT, groups.OFFSET_COMMIT_REQUEST, groups.OFFSET_COMMIT_RESPONSE, 0, 8),
        _api(ApiKey.OFFSET_FETCH, groups.OFFSET_FETCH_REQUEST, groups.OFFSET_FETCH_RESPONSE, 0, 7),
        _api(ApiKey.FIND_COORDINATOR, groups.FIND_COORDINATOR_REQUEST, groups.FIND_COORDINATOR_RESPONSE, 0, 3),
        _api(ApiKey.JOIN_GROUP, groups.JOIN_GROUP_REQUEST, groups.JOIN_GROUP_RESPONSE, 0, 7),
        _api(ApiKey.HEARTBEAT, groups.HEARTBEAT_REQUEST, groups.HEARTBEAT_RESPONSE, 0, 4),
        _api(ApiKey.LEAVE_GROUP, groups.LEAVE_GROUP_REQUEST, groups.LEAVE_GROUP_RESPONSE, 0, 4),
        _api(ApiKey.SYNC_GROUP, groups.SYNC_GROUP_REQUEST, groups.SYNC_GROUP_RESPONSE, 0, 5),
        _api(ApiKey.DESCRIBE_GROUPS, groups.DESCRIBE_GROUPS_REQUEST, groups.DESCRIBE_GROUPS_RESPONSE, 0, 5),
        _api(ApiKey.LIST_GROUPS, groups.LIST_GROUPS_REQUEST, groups.LIST_GROUPS_RESPONSE, 0, 4),
        _api(ApiKey.DELETE_GROUPS, groups.DELETE_GROUPS_REQUEST, groups.DELETE_GROUPS_RESPONSE, 0, 2),
        _api(ApiKey.OFFSET_DELETE, groups.OFFSET_DELETE_REQUEST, groups.OFFSET_DELETE_RESPONSE, 0, 0),
        _api(ApiKey.API_VERSIONS, metadata.API_VERSIONS_REQUEST, metadata.API_VERSIONS_RESPONSE, 0, 3),
        _api(ApiKey.CREATE_TOPICS, admin.CREATE_TOPICS_REQUEST, admin.CREATE_TOPICS_RESPONSE, 0, 7),
        _api(ApiKey.DELETE_TOPICS, admin.DELETE_TOPICS_REQUEST, admin.DELETE_TOPICS_RESPONSE, 0, 6),
        _api(ApiKey.DELETE_RECORDS, records_msgs.DELETE_RECORDS_REQUEST, records_msgs.DELETE_RECORDS_RESPONSE, 0, 2),
        _api(ApiKey.INIT_PRODUCER_ID, produce.INIT_PRODUCER_ID_REQUEST, produce.INIT_PRODUCER_ID_RESPONSE, 0, 4),
        _api(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            fetch.OFFSET_FOR_LEADER_EPOCH_REQUEST,
            fetch.OFFSET_FOR_LEADER_EPOCH_RESPONSE,
            0,
            4,
        ),
        _api(ApiKey.DESCRIBE_CONFIGS, admin.DESCRIBE_CONFIGS_REQUEST, admin.DESCRIBE_CONFIGS_RESPONSE, 0, 4),
        _api(ApiKey.ALTER_CONFIGS, admin.ALTER_CONFIGS_REQUEST, admin.ALTER_CONFIGS_RESPONSE, 0, 2),
        _api(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            configs_msgs.INCREMENTAL_ALTER_CONFIGS_REQUEST,
            configs_msgs.INCREMENTAL_ALTER_CONFIGS_RESPONSE,
            0,
            1,
        ),
        _api(
            ApiKey.DESCRIBE_CLIENT_QUOTAS,
            quotas_msgs.DESCRIBE_CLIENT_QUOTAS_REQUEST,
            quotas_msgs.DESCRIBE_CLIENT_QUOTAS_RESPONSE,
            0,
            1,
        ),  # fmt: skip
        _api(
            ApiKey.ALTER_CLIENT_QUOTAS,
            quotas_msgs.ALTER_CLIENT_QUOTAS_REQUEST,
            quotas_msgs.ALTER_CLIENT_QUOTAS_RESPONSE,
            0,
            1,
        ),  # fmt: skip
        _api(
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
            security.DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST,
            security.DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE,
            0,
            0,
        ),  # fmt: skip
        _api(
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
            security.ALTER_USER_SCRAM_CREDENTIALS_REQUEST,
            security.ALTER_USER_SCRAM_CREDENTIALS_RESPONSE,
            0,
            0,
        ),  # fmt: skip
        _api(ApiKey.DESCRIBE_LOG_DIRS, admin.DESCRIBE_LOG_DIRS_REQUEST, admin.DESCRIBE_LOG_DIRS_RESPONSE, 0, 2),
        _api(ApiKey.CREATE_PARTITIONS, admin.CREATE_PARTITIONS_REQUEST, admin.CREATE_PARTITIONS_RESPONSE, 0, 3),
        _api(ApiKey.ELECT_LEADERS, admin.ELECT_LEADERS_REQUEST, admin.ELECT_LEADERS_RESPONSE, 0, 2),
        _api(ApiKey.DESCRIBE_PRODUCERS, produce.DESCRIBE_PRODUCERS_REQUEST, produce.DESCRIBE_PRODUCERS_RESPONSE, 0, 0),
        _api(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            txn_msgs.ADD_PARTITIONS_TO_TXN_REQUEST,
            txn_msgs.ADD_PARTITIONS_TO_TXN_RESPONSE,
            0,
            3,
        ),  # fmt: skip
        _api(
            ApiKey.ADD_OFFSETS_TO_TXN, txn_msgs.ADD_OFFSETS_TO_TXN_REQUEST, txn_msgs.ADD_OFFSETS_TO_TXN_RESPONSE, 0, 3
        ),  # fmt: skip
        _api(ApiKey.END_TXN, txn_msgs.END_TXN_REQUEST, txn_msgs.END_TXN_RESPONSE, 0, 3),
        _api(
            ApiKey.WRITE_TXN_MARKERS,
            txn_markers_msgs.WRITE_TXN_MARKERS_REQUEST,
            txn_markers_msgs.WRITE_TXN_MARKERS_RESPONSE,
            0,
            1,
        ),  # fmt: skip
        _api(ApiKey.TXN_OFFSET_COMMIT, txn_msgs.TXN_OFFSET_COMMIT_REQUEST, txn_msgs.TXN_OFFSET_COMMIT_RESPONSE, 0, 3),
        _api(
            ApiKey.DESCRIBE_TRANSACTIONS,
            txn_msgs.DESCRIBE_TRANSACTIONS_REQUEST,
            txn_msgs.DESCRIBE_TRANSACTIONS_RESPONSE,
            0,
            0,
        ),  # fmt: skip
        _api(ApiKey.LIST_TRANSACTIONS, txn_msgs.LIST_TRANSACTIONS_REQUEST, txn_msgs.LIST_TRANSACTIONS_RESPONSE, 0, 0),
        _api(ApiKey.DESCRIBE_CLUSTER, metadata.DESCRIBE_CLUSTER_REQUEST, metadata.DESCRIBE_CLUSTER_RESPONSE, 0, 0),
        _api(ApiKey.SASL_HANDSHAKE, security.SASL_HANDSHAKE_REQUEST, security.SASL_HANDSHAKE_RESPONSE, 0, 1),
        _api(ApiKey.SASL_AUTHENTICATE, security.SASL_AUTHENTICATE_REQUEST, security.SASL_AUTHENTICATE_RESPONSE, 0, 2),
        _api(ApiKey.DESCRIBE_ACLS, security.DESCRIBE_ACLS_REQUEST, security.DESCRIBE_ACLS_RESPONSE, 0, 2),
        _api(ApiKey.CREATE_ACLS, security.CREATE_ACLS_REQUEST, security.CREATE_ACLS_RESPONSE, 0, 2),
        _api(ApiKey.DELETE_ACLS, security.DELETE_ACLS_REQUEST, security.DELETE_ACLS_RESPONSE, 0, 2),
    )
}


def api_versions_table() -> list[dict[str, int]]:
    """The `api_keys` list of an ApiVersions answer."""
    return [
        {"api_key": int(a.key), "min_version": a.advertised[0], "max_version": a.advertised[1]}
        for a in sorted(APIS.values(), key=lambda a: a.key)
    ]
