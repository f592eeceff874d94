"""Making the audit topic (`kafkactl-audit`) replicated like Kafka's internal topics.

Its counts are what `kafkactl audit` sets the tiers against: losing them with one broker would make
every window of the dead broker's partitions look lost. Kafka replicates its own internal topics with
`offsets.topic.replication.factor` (default 3); the audit topic is made the same way, with
min(3, live brokers) replicas: 3 on a cluster of three or more, all brokers on a smaller one. Whoever
publishes counts first makes it: the mirror and `kafkactl audit`'s publishing ask for it explicitly
(CreateTopics), and a broker auto-creating it for a producer asks `audit_replication_factor` too.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from broker.audit.counts import AUDIT_TOPIC

if TYPE_CHECKING:  # (the broker imports this module for `audit_replication_factor`: no client code at import)
    from broker.client.admin import Admin
    from broker.client.security import ClientSecurity

#: the audit topic's replicas on a cluster with enough brokers (Kafka's offsets.topic.replication.factor default)
AUDIT_REPLICATION_FACTOR = 3


def audit_replication_factor(live_brokers: int) -> int:
    """min(3, live brokers), at least 1."""
    return max(1, min(AUDIT_REPLICATION_FACTOR, live_brokers))


def ensure_audit_topic(admin: Admin) -> bool:
    """Create the audit topic if the cluster has none (the broker's num.partitions); True when created.
    AdminError when the cluster refuses (no Create permission: the producer's auto-creation may still do)."""
    from broker.client.admin import AdminError

    if AUDIT_TOPIC in admin.list_topics():
        return False
    rf = audit_replication_factor(len(admin.cluster.brokers))
    try:
        admin.create_topic(AUDIT_TOPIC, -1, rf)
    except AdminError as exc:
        if "TOPIC_ALREADY_EXISTS" in str(exc):  # another publisher made it meanwhile
            return False
        raise
    return True


async def ensure_audit_topic_async(bootstrap: str, security: ClientSecurity | None = None) -> bool:
    """`ensure_audit_topic` from async code (the admin client blocks: it runs in a thread)."""

    from broker.client.admin import Admin

    def make() -> bool:
        with Admin(bootstrap, security=security) as admin:
            return ensure_audit_topic(admin)

    return await asyncio.to_thread(make)
