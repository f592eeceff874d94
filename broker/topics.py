"""Topic rules shared by the broker and the tools: legal names, internal names and replica assignment (Kafka's)."""

from __future__ import annotations

import json
import random
import re
from typing import NamedTuple

MAX_NAME_LENGTH = 249
#: more partitions than this in one topic is refused: one request must not stall the broker building them
MAX_PARTITIONS = 10000
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
_RANDOM = random.Random()
#: Kafka's internal topics (its `Topic.isInternal`: the group and transaction coordinators' state, KRaft's
#: metadata log). kafkactl keeps that state in ZooKeeper, and never lets a client create or delete them: a
#: ZooKeeper shared with a Kafka cluster may hold the real ones.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__cluster_metadata"})


def is_internal(name: str) -> bool:
    """Whether `name` is one of Kafka's internal topics."""
    return name in INTERNAL_TOPICS


def internal_topic_error(name: str, action: str) -> str | None:
    """Why `action` ("created", "deleted") is refused for `name`, or None when it is not an internal topic."""
    if name not in INTERNAL_TOPICS:
        return None
    return f"topic {name} is a Kafka internal topic and is not allowed to be {action}"


def topic_name_error(name: str) -> str | None:
    """Why `name` is not a legal Kafka topic name, or None when it is."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > MAX_NAME_LENGTH:
        return f"topic name is {len(name)} characters long; the limit is {MAX_NAME_LENGTH}"
    if not _LEGAL.fullmatch(name):
        return f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_' and '-'"
    return None


def assign_replicas(
    brokers: list[int],
    partitions: int,
    replication_factor: int,
    start_index: int | None = None,
    *,
    start_partition: int = 0,
    replica_shift: int | None = None,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Replicas for partitions `start_partition` .. `start_partition + partitions - 1` over `brokers`, placed as
    Kafka's rack-unaware `AdminUtils.assignReplicasToBrokers` places them.

    Over the sorted broker list, partition p's first replica (its preferred leader) is broker
    `(start_index + p) % n`: leaders go round-robin. Its followers come after it at a distance that depends on
    a shift, and the shift grows by one each time p wraps around the broker count, so the followers of the
    partitions a broker leads differ from round to round: when that broker dies, its leaderships spread over
    the others instead of all falling to its neighbour.

    `start_index` is random when None (Kafka's `fixedStartIndex` -1); `replica_shift` is random when both are
    None, else `start_index` as in Kafka (a fixed start index fixes the shift too). Adding partitions passes the
    topic's partition count as `start_partition` and partition 0's leader's index as `start_index`, so the new
    ones continue the layout. ValueError when there are fewer live brokers than replicas.
    """
    ids = sorted(brokers)
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise ValueError(f"number of partitions must be between 1 and {MAX_PARTITIONS}, not {partitions}")
    if replication_factor < 1:
        raise ValueError(f"replication factor must be at least 1, not {replication_factor}")
    if replication_factor > len(ids):
        raise ValueError(f"replication factor {replication_factor} is larger than the {len(ids)} live broker(s)")
    n = len(ids)
    rng = rng or _RANDOM
    if replica_shift is None:
        replica_shift = start_index if start_index is not None else rng.randrange(n)
    if start_index is None:
        start_index = rng.randrange(n)
    first, followers = max(0, start_partition), range(replication_factor - 1)
    out: dict[int, list[int]] = {}
    for p in range(first, first + partitions):
        if p > 0 and p % n == 0:
            replica_shift += 1
        leader = (p + start_index) % n
        out[p] = [ids[leader], *(ids[follower_index(leader, replica_shift, j, n)] for j in followers)]
    return out


def follower_index(leader: int, shift: int, j: int, n: int) -> int:
    """The broker index of follower `j` (0-based) of a partition led by index `leader`, under `shift`: never
    the leader's own (the distance is 1 .. n-1), a different one for each j < n - 1."""
    return (leader + 1 + (shift + j) % (n - 1)) % n


def leader_index(brokers: list[int], leader: int) -> int:
    """Where the layout of a topic whose partition 0 is led by `leader` started in `brokers` (sorted): the index of
    the first broker with an id >= `leader` (0 if none), as Kafka takes it when adding partitions."""
    return next((i for i, b in enumerate(sorted(brokers)) if b >= leader), 0)


class TopicSpec(NamedTuple):
    """A topic to create: name, partitions and replication factor (-1: the broker's defaults), overrides."""

    name: str
    partitions: int = -1
    replication_factor: int = -1
    config: dict[str, str] = {}


def parse_topic_specs(text: str) -> list[TopicSpec]:
    """Topics to create from JSON: `{"topics": [{"name", "partitions", "replication_factor", "config"}]}` or
    the list alone; ValueError naming the first fault (an illegal or repeated name, a bad number)."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    entries = doc.get("topics") if isinstance(doc, dict) else doc
    if not isinstance(entries, list) or not entries:
        raise ValueError('expected {"topics": [{"name": ..., "partitions": ..., "replication_factor": ...}]}')
    out: list[TopicSpec] = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not isinstance(e.get("name"), str):
            raise ValueError(f'topics[{i}] has no "name" string')
        name = e["name"]
        why = topic_name_error(name) or internal_topic_error(name, "created")
        if why:
            raise ValueError(f"topics[{i}]: {why}")
        unknown = sorted(set(e) - {"name", "partitions", "replication_factor", "config"})
        if unknown:
            raise ValueError(f"topics[{i}] ({name}): unknown field(s) {', '.join(unknown)}")
        numbers = []
        for key in ("partitions", "replication_factor"):
            value = e.get(key, -1)
            if not isinstance(value, int) or isinstance(value, bool) or value == 0 or value < -1:
                raise ValueError(f"topics[{i}] ({name}): {key} must be a positive integer")
            numbers.append(value)
        config = e.get("config") or {}
        if not isinstance(config, dict):
            raise ValueError(f"topics[{i}] ({name}): config must be an object of key: value")
        if any(s.name == name for s in out):
            raise ValueError(f"topic {name} is in the file twice")
        out.append(TopicSpec(name, numbers[0], numbers[1], {str(k): str(v) for k, v in config.items()}))
    return out
