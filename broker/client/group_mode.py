"""Which way kafkactl's group operations go, and that the ZooKeeper they use is the `-b` cluster's.

Design (issue 26). kafkactl's own group consumer coordinates through ZooKeeper (the paper's Algorithm 1,
`broker.client.group`) and the group commands read and write the offset registry there. ZooKeeper knows
nothing of Kafka's ACLs, so with an authorizer on the brokers that path went around it: a principal without
Read on a group could consume as that group and commit its offsets. So:

- With an authorizer, every group operation of kafkactl goes through the brokers, over the Kafka protocol,
  and the broker's authorizer decides exactly as for any other client: `consume --group` is a member of the
  broker's group coordinator (`broker.client.kafka_group`: JoinGroup/SyncGroup/Heartbeat/OffsetCommit, Read on
  the group; Fetch, Read on the topic), `group describe` asks DescribeGroups and OffsetFetch (Describe), a
  rewind commits with OffsetCommit as Kafka's AdminClient does (Read on the group and on each topic), list,
  delete and delete-offsets are ListGroups, DeleteGroups and OffsetDelete. No ZooKeeper is touched, so none
  can be used around the broker. This is enforcement, not a check before a ZooKeeper path.
- Without an authorizer there is nothing to enforce: the ZooKeeper-coordinated consumer stays (the paper's
  design), and the commands keep reading ZooKeeper's registries.

The probe is one DescribeAcls round trip: a broker without an authorizer answers SECURITY_DISABLED (as
Kafka's); with one it answers the bindings, or CLUSTER_AUTHORIZATION_FAILED to a principal without Describe on
the cluster. Any answer but SECURITY_DISABLED counts as "an authorizer": when unsure, the broker decides.

Where kafkactl does use ZooKeeper with a broker (`-b` and `-z` together), `check_zookeeper` compares
ZooKeeper's `/cluster/id` with the cluster id in the bootstrap broker's Metadata answer and refuses another
cluster's ZooKeeper, once per command (one ZooKeeper read, the Metadata the command asks anyway); a topic that
ZooKeeper does not have is an error there too, not an empty assignment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from broker.client.aio import AsyncCluster
from broker.client.cluster import Cluster
from broker.errors import KafkactlError
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError, error_name
from broker.security.acl import Operation, PatternType, Permission, ResourceType
from broker.zk import paths

#: DescribeAcls of the bindings of one group that nobody names (an answer of few bytes, whatever the cluster has)
_PROBE = {"resource_type_filter": ResourceType.GROUP, "resource_name_filter": "kafkactl-authorizer-probe",
          "pattern_type_filter": PatternType.LITERAL, "principal_filter": None, "host_filter": None,
          "operation": Operation.ANY, "permission_type": Permission.ANY}  # fmt: skip


def _has_authorizer(answer: dict[str, Any]) -> bool:
    return answer["error_code"] != ErrorCode.SECURITY_DISABLED


def has_authorizer(cluster: Cluster) -> bool:
    """Whether the brokers check ACLs (one DescribeAcls round trip)."""
    return _has_authorizer(cluster.any_connection().request(ApiKey.DESCRIBE_ACLS, _PROBE))


async def has_authorizer_async(cluster: AsyncCluster) -> bool:
    """`has_authorizer` over an AsyncCluster (asked of any broker that answers)."""
    conn = await cluster.any_connection()  # (not a fixed broker: it may be the one that died)
    return _has_authorizer(await conn.request(ApiKey.DESCRIBE_ACLS, _PROBE))


def zookeeper_cluster_id(zk: KazooClient) -> str | None:
    """The cluster id stored in this ZooKeeper (chroot included), None when it holds no cluster."""
    try:
        data, _ = zk.get(paths.CLUSTER_ID)
    except NoNodeError:
        return None
    try:
        return str(paths.loads(data)["id"])
    except (ValueError, KeyError, TypeError):
        return None


def check_zookeeper(zk: KazooClient, zookeeper: str, bootstrap: str, cluster_id: str | None,
                    topics: Sequence[str] = ()) -> None:  # fmt: skip
    """Refuse a ZooKeeper that is not the cluster's of `bootstrap` (its Metadata's `cluster_id`), and topics it
    does not have, each with one line naming what to check."""
    held = zookeeper_cluster_id(zk)
    if cluster_id is not None and held != cluster_id:
        what = f"belongs to cluster {held}" if held is not None else "holds no cluster (no /cluster/id)"
        raise KafkactlError(f"ZooKeeper {zookeeper} {what}, not to the cluster of -b {bootstrap} ({cluster_id}); "
                            "check -z / KAFKACTL_ZOOKEEPER")  # fmt: skip
    for topic in topics:
        if zk.exists(paths.topic(topic)) is None:
            raise KafkactlError(f"topic {topic!r} is not in ZooKeeper {zookeeper}, though the brokers of -b "
                                f"{bootstrap} have it; check -z / KAFKACTL_ZOOKEEPER")  # fmt: skip


class GroupAuthorizationError(KafkaError):
    """The broker's authorizer refused a group or topic operation (Kafka's error named in the message)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message, code)


def refusal(code: int, group: str, doing: str = "read", topic: str | None = None) -> GroupAuthorizationError | None:
    """The error for an authorization failure code (None for any other code)."""
    if code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
        return GroupAuthorizationError(f"not authorized to {doing} group {group!r} ({error_name(code)})", code)
    if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
        what = f"topic {topic!r}" if topic else "a topic"
        return GroupAuthorizationError(f"not authorized to read {what} of group {group!r} ({error_name(code)})", code)
    return None
