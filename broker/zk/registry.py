"""The broker registry, topic assignments, partition states, topic configs and ids, kept in ZooKeeper.

Blocking kazoo calls over `broker.zk.paths`; the broker runs them off its event loop or on cache
misses. Each function does one registry operation, atomically where ZooKeeper allows it.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, ConnectionLoss, NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat
from kazoo.security import Permissions

from broker.errors import KafkactlError
from broker.zk import batch, paths
from broker.zk import client as zkclient

log = logging.getLogger(__name__)


class BrokerIdTakenError(KafkactlError):
    """Another live broker already holds this id."""


class TopicExistsError(KafkactlError):
    pass


class UnknownTopicError(KafkactlError):
    pass


class ConfigChangingError(KafkactlError):
    """A config znode changed under every one of `update_config`'s tries."""


class Endpoint(NamedTuple):
    """One advertised listener of a broker, as `/brokers/ids/<id>` lists it."""

    listener: str
    protocol: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.listener}://{f'[{self.host}]' if ':' in self.host else self.host}:{self.port}"


class Registration(NamedTuple):
    """A live broker: (host, port) of its PLAINTEXT listener (else of its first one), rack, and every endpoint
    by listener name."""

    host: str
    port: int
    rack: str | None
    endpoints: dict[str, Endpoint]


def ensure_roots(zk: KazooClient) -> None:
    """Create the cluster's persistent parents, as Kafka does at start-up: the registries, the ACL trees
    (every resource type, literal and prefixed, and their change roots) and the users' credentials (readable
    by the broker's identity only). Made by a broker with `zookeeper.set.acl`, none of them is writable by
    others, so nobody without credentials can plant an ACL or a user; one made before is named in a warning."""
    acl_paths = [paths.acl_type(t, prefixed) for t in paths.ACL_RESOURCE_TYPES for prefixed in (False, True)]
    acl_paths += [paths.acl_change_root(False), paths.acl_change_root(True)]
    for path in (*paths.ROOTS, *acl_paths):
        zk.ensure_path(path)
    zk.ensure_path(paths.CONFIG_USERS, acl=zkclient.znode_acl(sensitive=True))
    if zkclient.znode_acl() is None:
        return
    for path in (paths.CONFIG_USERS, *acl_paths, paths.acl_root(False), paths.acl_root(True)):
        acls, _ = zk.get_acls(path)
        if any(a.id.scheme == "world" and a.perms & (Permissions.WRITE | Permissions.CREATE | Permissions.DELETE)
               for a in acls):  # fmt: skip
            log.warning("%s is writable by anyone (made before zookeeper.set.acl was on): set its ACL by hand", path)


def cluster_id(zk: KazooClient) -> str:
    """The cluster's id, created on first use."""
    try:
        zk.create(paths.CLUSTER_ID, paths.cluster_id_json(paths.new_cluster_id()), makepath=True)
    except NodeExistsError:
        pass
    data, _ = zk.get(paths.CLUSTER_ID)
    return paths.loads(data)["id"]


def register_broker(zk: KazooClient, broker_id: int, endpoints: list[Endpoint], rack: str | None = None, *,
                    wait_s: float = 0.0) -> None:  # fmt: skip
    """Create the ephemeral `/brokers/ids/<id>` with an endpoint per advertised listener; refuse an id another
    live broker holds.

    A registration left at our own endpoints by another session is an earlier incarnation of this broker,
    killed without a clean stop (we hold those ports now): ZooKeeper removes it when its session expires, so
    wait for that, up to `wait_s` (about the session timeout), saying so once, then register.
    """
    path = paths.broker(broker_id)
    data = paths.broker_json("", -1, rack, endpoints=[tuple(e) for e in endpoints])  # type: ignore[misc]
    ours = sorted(str(e) for e in endpoints)
    deadline = time.monotonic() + wait_s
    announced = False
    while True:
        try:
            zk.create(path, data, ephemeral=True, makepath=True)
            return
        except NodeExistsError:
            pass
        try:
            data, stat = zk.get(path)
        except NoNodeError:  # it expired meanwhile: try again
            continue
        if stat.ephemeralOwner == session_id(zk):
            return  # ours already (a re-registration after a reconnect)
        theirs = sorted(str(Endpoint(*e)) for e in paths.parse_endpoints(data))
        session = f"ZooKeeper session {stat.ephemeralOwner:#x}"
        if theirs != ours:
            raise BrokerIdTakenError(
                f"broker id {broker_id} is held by a live broker at {','.join(theirs)} ({session}): pick "
                "another --broker-id (if that broker was killed, its registration goes when its session times out)"
            ) from None
        left = deadline - time.monotonic()
        if left <= 0:
            raise BrokerIdTakenError(
                f"broker id {broker_id} is still registered at {','.join(ours)} by an earlier run of this broker "
                f"({session}, not stopped cleanly) and ZooKeeper has not expired it within {wait_s:g}s; try "
                "again once that session's timeout has passed"
            ) from None
        if not announced:
            log.warning("broker id %d is still registered by an earlier run of this broker (%s, not stopped "
                        "cleanly): waiting up to %.0fs for ZooKeeper to expire that session",
                        broker_id, session, left)  # fmt: skip
            announced = True
        gone = threading.Event()
        if zk.exists(path, watch=lambda _event, gone=gone: gone.set()) is not None:
            gone.wait(min(left, 1.0))


def deregister_broker(zk: KazooClient, broker_id: int) -> None:
    try:
        zk.delete(paths.broker(broker_id))
    except NoNodeError:
        pass


def live_brokers(zk: KazooClient) -> dict[int, tuple[str, int, str | None]]:
    """{id: (host, port, rack)} of the registered brokers (the PLAINTEXT endpoint, else the first one)."""
    return {i: (r.host, r.port, r.rack) for i, r in registered_brokers(zk).items()}


def registered_brokers(zk: KazooClient) -> dict[int, Registration]:
    """{id: registration} of the registered brokers, with every endpoint by listener name."""
    out = {}
    try:
        children = zk.get_children(paths.BROKER_IDS)
    except NoNodeError:  # a ZooKeeper (or chroot) no broker has used yet
        return {}
    for child in children:
        try:
            data, _ = zk.get(paths.broker(int(child)))
        except (NoNodeError, ValueError):
            continue
        out[int(child)] = parse_registration(data)
    return dict(sorted(out.items()))


def parse_registration(data: bytes) -> Registration:
    """A `/brokers/ids/<id>` registration, its address the PLAINTEXT endpoint's, else the first endpoint's."""
    host, port, rack = paths.parse_broker(data)
    endpoints = {e[0]: Endpoint(*e) for e in paths.parse_endpoints(data)}
    if "PLAINTEXT" not in endpoints and endpoints:
        first = next(iter(endpoints.values()))
        host, port = first.host, first.port
    return Registration(host, port, rack, endpoints)


def topic_names(zk: KazooClient) -> list[str]:
    try:
        return sorted(zk.get_children(paths.TOPICS))
    except NoNodeError:
        return []


def assignment(zk: KazooClient, topic: str) -> dict[int, list[int]] | None:
    """{partition: replicas} of a topic, or None when it does not exist."""
    found = moves_and_id(zk, topic)
    return None if found is None else found[0][0]


def moves_and_id(zk: KazooClient, topic: str) -> tuple[paths.Moves, int] | None:
    """A topic's (replicas, adding, removing) by partition (the last two: a reassignment in progress) and its
    id, or None when it does not exist.

    The id is the creation zxid of `/brokers/topics/<t>`: a topic deleted and created again under the
    same name gets a new one, so a broker can tell the new topic from logs of the old one.
    """
    try:
        data, stat = zk.get(paths.topic(topic))
    except NoNodeError:
        return None
    return paths.parse_moves(data), stat.czxid


def topics_moves_and_ids(zk: KazooClient, topics: list[str]) -> dict[str, tuple[paths.Moves, int] | None]:
    """`moves_and_id` of many topics in one pipelined pass."""
    found = batch.get_many(zk, [paths.topic(t) for t in topics])
    return {
        t: None if node is None else (paths.parse_moves(node[0]), node[1].czxid)
        for t, node in zip(topics, found, strict=True)
    }


def topic_id(zk: KazooClient, topic: str) -> int | None:
    """The id (creation zxid) of a topic, or None when it does not exist."""
    stat = zk.exists(paths.topic(topic))
    return None if stat is None else stat.czxid


def partition_state(zk: KazooClient, topic: str, partition: int) -> dict | None:
    """A partition's state (leader, leader_epoch, isr, ...) with its znode version as `zk_version`."""
    try:
        data, stat = zk.get(paths.partition_state(topic, partition))
    except NoNodeError:
        return None
    return state_of(data, stat)


def partition_states(zk: KazooClient, topic: str, partitions: list[int]) -> dict[int, dict | None]:
    """`partition_state` of many partitions of a topic in one pipelined pass."""
    found = batch.get_many(zk, [paths.partition_state(topic, p) for p in partitions])
    return {p: None if node is None else state_of(*node) for p, node in zip(partitions, found, strict=True)}


def partition_states_of(zk: KazooClient, tps: list[tuple[str, int]]) -> list[dict | None]:
    """`partition_state` of partitions of any topics, in order, in one pipelined pass."""
    found = batch.get_many(zk, [paths.partition_state(t, p) for t, p in tps])
    return [None if node is None else state_of(*node) for node in found]


def state_of(data: bytes | None, stat: ZnodeStat) -> dict:
    """A partition state znode's content, with its version as `zk_version`."""
    state = paths.loads(data) or {}
    state["zk_version"] = stat.version
    return state


#: one partition state to write: (topic, partition, leader, leader_epoch, isr, the znode version it replaces)
StateWrite = tuple[str, int, int, int, list[int], int]


#: partition states written by one multi, with the state-change notification that names them
STATES_PER_MULTI = 400


def write_partition_states(zk: KazooClient, writes: list[StateWrite], *, fence: int | None = None,
                           carry: Mapping[tuple[str, int], int | None] | None = None) -> list[int | None]:  # fmt: skip
    """Write many partition states, each conditional on its znode version: the new version of each, None when
    someone wrote it first (read it again and decide anew). Multis of up to `STATES_PER_MULTI` states, pipelined,
    each creating the state-change notification with its partitions (how brokers learn of them): it carries the
    new states of the partitions `carry` gives the topic id of (brokers apply them without reading: give it only
    where the state decided on is known to be of that topic), and names the others. A multi that one stale write
    spoiled is sent again without it. With `fence`, each multi also checks `/controller_epoch`: FencedError when
    a newer controller was elected (multis that went in before stand)."""
    out: list[int | None] = [None] * len(writes)
    todo = list(range(len(writes)))
    head = [batch.Op("check", paths.CONTROLLER_EPOCH, version=fence)] if fence is not None else []
    epoch = {} if fence is None else {"controller_epoch": fence + 1}
    made_root = False
    while todo:
        parts = [todo[i : i + STATES_PER_MULTI] for i in range(0, len(todo), STATES_PER_MULTI)]
        transactions = []
        for part in parts:
            sets, named, carried = [], [], []
            for t, p, leader, le, isr, v in (writes[i] for i in part):
                state = paths.state_dict(leader, le, isr, **epoch)
                sets.append(batch.Op("set_data", paths.partition_state(t, p), paths.dumps(state), v))
                tid = carry.get((t, p)) if carry is not None else None
                if tid is not None and v >= 0:  # (the version a conditional set makes is the next one)
                    carried.append(paths.CarriedState(t, p, tid, v + 1, state))
                else:
                    named.append((t, p))
            note = batch.Op("create", paths.state_change_prefix(), paths.state_changes_json(named, carried),
                            sequence=True)  # fmt: skip
            transactions.append([*head, *sets, note])
        todo = []
        for part, results in zip(parts, batch.multis(zk, transactions), strict=True):
            if head and isinstance(results[0], Exception) and not _rolled_back(results[0]):
                raise FencedError("the controller epoch moved")
            stale = [isinstance(r, Exception) and not _rolled_back(r) for r in results[len(head) : -1]]
            if not any(isinstance(r, Exception) for r in results):
                for i, stat in zip(part, results[len(head) : -1], strict=True):
                    out[i] = stat.version
            elif any(stale):
                todo += [i for i, bad in zip(part, stale, strict=True) if not bad]
            elif isinstance(results[-1], NoNodeError) and not made_root:  # a ZooKeeper older than the notifications
                zk.ensure_path(paths.STATE_CHANGES)
                made_root = True
                todo += part
            else:  # the notification itself was refused
                raise results[-1] if isinstance(results[-1], Exception) else KafkactlError("a state write failed")
        if todo:  # ZooKeeper names only the first stale write of a multi: drop every other one before sending again
            found = batch.get_many(zk, [paths.partition_state(writes[i][0], writes[i][1]) for i in todo])
            todo = [i for i, node in zip(todo, found, strict=True) if node and node[1].version == writes[i][5]]
    return out


class FencedError(KafkactlError):
    """`/controller_epoch` moved: another broker was elected controller since this one was."""


def write_partition_state(zk: KazooClient, topic: str, partition: int, leader: int, leader_epoch: int,
                          isr: list[int], version: int, *, fence: int | None = None,
                          topic_id: int | None = None) -> int | None:  # fmt: skip
    """Replace a partition's state if its znode is still at `version` (the conditional update that fences
    a leader's ISR change against the controller's election, and the other way round); returns the new
    version, or None when someone wrote it first (read it again and decide anew). With `fence` (the
    version of `/controller_epoch` a controller won at), the write also requires that no controller was
    elected since: FencedError otherwise. `write_partition_states` of one."""
    return write_partition_states(zk, [(topic, partition, leader, leader_epoch, isr, version)], fence=fence,
                                  carry={(topic, partition): topic_id})[0]  # fmt: skip


def take_preferred_election_request(zk: KazooClient) -> set[tuple[str, int]] | None:
    """Read and delete `/admin/preferred_replica_election` (Kafka's ZooKeeper-mode request for preferred
    leaders): None when there is none, else the partitions it names (empty: all of them)."""
    try:
        data, _ = zk.get(paths.PREFERRED_ELECTION)
    except NoNodeError:
        return None
    with contextlib.suppress(NoNodeError):
        zk.delete(paths.PREFERRED_ELECTION)
    return paths.parse_partitions(data)


def request_preferred_election(zk: KazooClient, tps: list[tuple[str, int]]) -> bool:
    """Ask the controller for preferred leaders of `tps` (empty: every partition); False if a request is
    still pending."""
    try:
        zk.create(paths.PREFERRED_ELECTION, paths.partitions_json(tps), makepath=True)
    except NodeExistsError:
        return False
    return True


def elect_preferred_leaders(zk: KazooClient, topics: list[str] | None, timeout_s: float = 15.0
                            ) -> dict[tuple[str, int], tuple[int, int]]:  # fmt: skip
    """Ask the controller for preferred leaders of every partition of `topics` (None: every topic) and wait
    (up to `timeout_s`) until it took the request and each partition is led by its first replica; {tp: (leader,
    preferred replica)} as it then stands (a preferred replica out of the ISR or down keeps its partition
    where it is). KafkactlError when another request is pending, a topic is unknown, or no controller took
    the request in time."""
    tps = []
    for topic in topics or topic_names(zk):
        found = assignment(zk, topic)
        if found is None:
            raise UnknownTopicError(f"unknown topic {topic!r}")
        tps += [(topic, p) for p in sorted(found)]
    if not tps:
        raise KafkactlError("no topics to elect leaders for")
    if not request_preferred_election(zk, tps):
        raise KafkactlError(f"a preferred leader election is pending already ({paths.PREFERRED_ELECTION})")
    deadline = time.monotonic() + timeout_s
    while zk.exists(paths.PREFERRED_ELECTION) is not None:
        if time.monotonic() > deadline:
            raise KafkactlError(f"no controller took the request within {timeout_s:g}s (is a broker running?); "
                                f"it stays in {paths.PREFERRED_ELECTION}")  # fmt: skip
        time.sleep(0.05)
    out: dict[tuple[str, int], tuple[int, int]] = {}
    deadline = min(deadline, time.monotonic() + 2)  # (taken: its pass writes the states within moments)
    while True:
        for topic, p in tps:
            replicas = (assignment(zk, topic) or {}).get(p) or [-1]
            out[(topic, p)] = ((partition_state(zk, topic, p) or {}).get("leader", -1), replicas[0])
        if all(leader == first for leader, first in out.values()) or time.monotonic() > deadline:
            return out
        time.sleep(0.05)


def clear_isr_change_notifications(zk: KazooClient) -> None:
    """The controller has read every state anew: the leaders' ISR change notifications are done with."""
    try:
        children = zk.get_children(paths.ISR_CHANGE)
    except NoNodeError:
        return
    batch.delete_many(zk, [f"{paths.ISR_CHANGE}/{child}" for child in children])


#: how long a state-change notification stays after a newer one was written: brokers read each within moments,
#: and one that falls this far behind learns it from the highest sequence number deleted, and reads every state
STATE_CHANGE_TTL_S = 60.0


def prune_state_changes(zk: KazooClient, ttl_s: float = STATE_CHANGE_TTL_S) -> int:
    """Delete the state-change notifications created `ttl_s` or more before the newest one (ZooKeeper's
    ctimes, no broker's clock), oldest first, each multi also setting STATE_CHANGES' data to the highest sequence
    number it deleted (the controller does, on its passes); how many went."""
    try:
        children = zk.get_children(paths.STATE_CHANGES)
    except NoNodeError:
        return 0
    named = [(seq, c) for c in children if (seq := paths.state_change_seq(c)) is not None]
    stats = batch.stats_many(zk, [f"{paths.STATE_CHANGES}/{c}" for _, c in named])
    stamped = [(seq, c, st.ctime) for (seq, c), st in zip(named, stats, strict=True) if st is not None]
    if not stamped:
        return 0
    cutoff = max(ctime for _, _, ctime in stamped) - ttl_s * 1000
    old = sorted((seq, c) for seq, c, ctime in stamped if ctime < cutoff)
    parts = [old[i : i + STATES_PER_MULTI] for i in range(0, len(old), STATES_PER_MULTI)]
    results = batch.multis(zk, [[*(batch.Op("delete", f"{paths.STATE_CHANGES}/{c}") for _, c in part),
                                 batch.Op("set_data", paths.STATE_CHANGES, str(part[-1][0]).encode())]
                                for part in parts])  # fmt: skip
    return sum(len(part) for part, res in zip(parts, results, strict=True)
               if not any(isinstance(r, Exception) for r in res))  # fmt: skip


def state_changes_pruned_through(zk: KazooClient) -> int:
    """The highest sequence number of the state-change notifications deleted so far (-1: none)."""
    try:
        data, _ = zk.get(paths.STATE_CHANGES)
    except NoNodeError:
        return -1
    return paths.parse_pruned_through(data)


#: partitions named by one ISR change notification (Kafka's leaders cut theirs the same way)
ISR_CHANGES_PER_NOTIFICATION = 1000


def notify_isr_change(zk: KazooClient, tps: list[tuple[str, int]]) -> None:
    """Sequential `/isr_change_notification/isr_change_<n>` znodes naming the partitions whose ISR a leader
    changed, as Kafka's leaders write them (the controller reads and deletes them): one per thousand."""
    step = ISR_CHANGES_PER_NOTIFICATION
    for start in range(0, len(tps), step):
        zk.create(paths.ISR_CHANGE + "/isr_change_", paths.partitions_json(tps[start : start + step]),
                  sequence=True, makepath=True)  # fmt: skip


def controller_epoch(zk: KazooClient) -> int:
    try:
        data, _ = zk.get(paths.CONTROLLER_EPOCH)
    except NoNodeError:
        return 0
    return int(data or b"0")


def topic_config(zk: KazooClient, topic: str) -> dict[str, str]:
    try:
        data, _ = zk.get(paths.topic_config(topic))
    except NoNodeError:
        return {}
    return paths.parse_config(data)


def topic_configs(zk: KazooClient, topics: list[str]) -> dict[str, dict[str, str]]:
    """`topic_config` of many topics in one pipelined pass."""
    found = batch.get_many(zk, [paths.topic_config(t) for t in topics])
    return {t: {} if node is None else paths.parse_config(node[0]) for t, node in zip(topics, found, strict=True)}


def is_being_deleted(zk: KazooClient, topic: str) -> bool:
    return zk.exists(paths.delete_topic(topic)) is not None


def create_topic(zk: KazooClient, topic: str, replicas: dict[int, list[int]], config: dict[str, str]) -> int | None:
    """Write a topic's config, assignment and partition states in one transaction; returns the topic id.

    Each partition's leader is its first replica and its ISR all its replicas (they are live: the
    assignment was made over the live brokers), at leader epoch 0.
    """
    if zk.exists(paths.topic(topic)) is not None or is_being_deleted(zk, topic):
        raise TopicExistsError(f"topic {topic!r} already exists")
    zk.ensure_path(paths.CONFIG_TOPICS)
    tx = zk.transaction()
    cfg_path = paths.topic_config(topic)
    if zk.exists(cfg_path) is None:
        tx.create(cfg_path, paths.config_json(config))
    else:
        tx.set_data(cfg_path, paths.config_json(config))
    tx.create(paths.topic(topic), paths.assignment_json(replicas))
    tx.create(f"{paths.topic(topic)}/partitions")
    for p, reps in sorted(replicas.items()):
        tx.create(f"{paths.topic(topic)}/partitions/{p}")
        tx.create(paths.partition_state(topic, p), paths.state_json(reps[0], 0, list(reps)))
    results = tx.commit()
    for res in results:
        if isinstance(res, NodeExistsError):
            raise TopicExistsError(f"topic {topic!r} already exists")
        if isinstance(res, Exception) and not _rolled_back(res):
            raise res
    return topic_id(zk, topic)


def add_partitions(zk: KazooClient, topic: str, added: dict[int, list[int]], version: int) -> bool:
    """Add partitions to a topic: its assignment znode (if still at `version`) and the new partitions' state
    znodes (first replica leads, every replica in sync), in one transaction. False when the assignment
    changed meanwhile (read it again)."""
    data, stat = zk.get(paths.topic(topic))
    if stat.version != version:
        return False
    assignment, adding, removing = paths.parse_moves(data)  # (a reassignment in progress keeps its record)
    assignment.update(added)
    tx = zk.transaction()
    tx.set_data(paths.topic(topic), paths.assignment_json(assignment, adding, removing), version=version)
    for p, reps in sorted(added.items()):
        tx.create(f"{paths.topic(topic)}/partitions/{p}")
        tx.create(paths.partition_state(topic, p), paths.state_json(reps[0], 0, list(reps)))
    results = tx.commit()
    if isinstance(results[0], BadVersionError):
        return False
    for res in results:
        if isinstance(res, Exception) and not _rolled_back(res):
            raise res
    return True


def assignment_version(zk: KazooClient, topic: str) -> tuple[dict[int, list[int]], int] | None:
    """A topic's assignment and its znode version (for `add_partitions`), or None when it does not exist."""
    try:
        data, stat = zk.get(paths.topic(topic))
    except NoNodeError:
        return None
    return paths.parse_assignment(data), stat.version


def _rolled_back(exc: Exception) -> bool:
    """An op of a failed multi that was not at fault: before the failing op ZooKeeper says it was rolled back,
    after it that it was not run (RuntimeInconsistency)."""
    return type(exc).__name__ in ("RolledBackError", "RuntimeInconsistency")


def delete_topic(zk: KazooClient, topic: str) -> None:
    """Mark the topic for deletion, remove its znodes, then the mark; brokers drop its logs on the watch."""
    if zk.exists(paths.topic(topic)) is None:
        raise UnknownTopicError(f"topic {topic!r} does not exist")
    zk.ensure_path(paths.delete_topic(topic))
    zk.delete(paths.topic(topic), recursive=True)
    try:
        zk.delete(paths.topic_config(topic))
    except NoNodeError:
        pass
    zk.delete(paths.delete_topic(topic))


def set_topic_config(zk: KazooClient, topic: str, config: dict[str, str]) -> None:
    """Replace a topic's overrides (the whole map, as AlterConfigs does)."""
    if zk.exists(paths.topic(topic)) is None:
        raise UnknownTopicError(f"topic {topic!r} does not exist")
    data = paths.config_json(config)
    try:
        zk.set(paths.topic_config(topic), data)
    except NoNodeError:
        zk.create(paths.topic_config(topic), data, makepath=True)


def broker_config(zk: KazooClient, broker_id: int) -> dict[str, str]:
    """A broker's dynamic config overrides (`/config/brokers/<id>`)."""
    try:
        data, _ = zk.get(paths.broker_config(broker_id))
    except NoNodeError:
        return {}
    return paths.parse_config(data)


def set_broker_config(zk: KazooClient, broker_id: int, config: dict[str, str]) -> None:
    data = paths.config_json(config)
    try:
        zk.set(paths.broker_config(broker_id), data)
    except NoNodeError:
        zk.create(paths.broker_config(broker_id), data, makepath=True)


def config_with_version(zk: KazooClient, path: str) -> tuple[dict[str, str], int]:
    """A config znode's overrides and version (-1: no znode yet), for `set_config_if`."""
    try:
        data, stat = zk.get(path)
    except NoNodeError:
        return {}, -1
    return paths.parse_config(data), stat.version


def topic_config_with_version(zk: KazooClient, topic: str) -> tuple[dict[str, str], int] | None:
    """`config_with_version` of a topic, or None when the topic does not exist."""
    if zk.exists(paths.topic(topic)) is None:
        return None
    return config_with_version(zk, paths.topic_config(topic))


def set_config_if(zk: KazooClient, path: str, config: dict[str, str], version: int) -> bool:
    """Write a config znode only if it is still at `version` (-1: still absent); False when another
    writer changed it since it was read (read again, decide again)."""
    data = paths.config_json(config)
    try:
        if version < 0:
            zk.create(path, data, makepath=True)
        else:
            zk.set(path, data, version=version)
    except (BadVersionError, NodeExistsError, NoNodeError):
        return False
    return True


#: tries of read, change, conditional write of a config znode before giving up on one that keeps changing (each
#: lost race means another writer's change landed; a short random pause spreads the writers out)
CONFIG_TRIES = 50


def update_config(zk: KazooClient, path: str, change: Callable[[dict[str, str] | None], dict[str, str] | None], *,
                  topic: str | None = None, tries: int = CONFIG_TRIES) -> dict[str, str] | None:  # fmt: skip
    """Change a config znode without losing another writer's change (IncrementalAlterConfigs, `topic reassign
    --throttle`): read it (`config_with_version`), `change` the overrides, write them only if the znode is still
    at the version read (`set_config_if`), else read and decide again. `change` returns the new overrides, or
    None to write nothing; it may raise. With `topic` (the znode is that topic's config) `change` is given None
    when the topic does not exist, and UnknownTopicError is raised if it returns overrides all the same.
    Returns what was written (None: nothing); ConfigChangingError after `tries` lost races."""
    for _ in range(tries):
        found = topic_config_with_version(zk, topic) if topic is not None else config_with_version(zk, path)
        new = change(None if found is None else dict(found[0]))
        if new is None:
            return None
        if found is None:
            raise UnknownTopicError(f"topic {topic!r} does not exist")
        if set_config_if(zk, path, new, found[1]):
            return new
        time.sleep(random.uniform(0, 0.02))
    raise ConfigChangingError(f"the config in {path} kept changing: try again")


def topic_moves(zk: KazooClient, topic: str) -> tuple[paths.Moves, int] | None:
    """((replicas, adding, removing) by partition, znode version) of a topic, or None when it does not exist."""
    try:
        data, stat = zk.get(paths.topic(topic))
    except NoNodeError:
        return None
    return paths.parse_moves(data), stat.version


def write_moves(zk: KazooClient, topic: str, replicas: dict[int, list[int]], adding: dict[int, list[int]],
                removing: dict[int, list[int]], version: int, *, fence: int) -> bool:  # fmt: skip
    """Rewrite a topic's assignment (a reassignment's step) if its znode is still at `version` and no controller
    was elected since the one that won at `fence`; False when the assignment changed meanwhile."""
    tx = zk.transaction()
    tx.check(paths.CONTROLLER_EPOCH, fence)
    tx.set_data(paths.topic(topic), paths.assignment_json(replicas, adding, removing), version=version)
    results = tx.commit()
    if isinstance(results[0], Exception) and not _rolled_back(results[0]):
        raise FencedError("the controller epoch moved")
    return not isinstance(results[1], Exception)


def reassignment_request(zk: KazooClient) -> tuple[dict[tuple[str, int], list[int]], int] | None:
    """The reassignments in progress (`/admin/reassign_partitions`) and the znode's version, or None."""
    try:
        data, stat = zk.get(paths.REASSIGN)
    except NoNodeError:
        return None
    try:
        return paths.parse_reassignment(data), stat.version
    except (ValueError, KeyError, TypeError):
        log.warning("%s is not a reassignment request; ignored", paths.REASSIGN)
        return {}, stat.version


def request_reassignment(zk: KazooClient, moves: dict[tuple[str, int], list[int]]) -> bool:
    """Ask the controller to move partitions; False while an earlier request is in progress."""
    try:
        zk.create(paths.REASSIGN, paths.reassignment_json(moves), makepath=True)
    except NodeExistsError:
        return False
    return True


def finish_reassignment(zk: KazooClient, done: set[tuple[str, int]], version: int) -> None:
    """Take finished partitions out of the request (the whole znode with the last), if it is still at `version`."""
    found = reassignment_request(zk)
    if found is None or found[1] != version:
        return
    left = {tp: r for tp, r in found[0].items() if tp not in done}
    with contextlib.suppress(BadVersionError, NoNodeError):
        if left:
            zk.set(paths.REASSIGN, paths.reassignment_json(left), version=version)
        else:
            zk.delete(paths.REASSIGN, version=version)


class ControllerClaim(NamedTuple):
    """`/controller` as a claim left it: the broker it names, the znode's creation zxid (tells one incarnation of
    the znode from the next), its session, and `fence`: when this claim created it, the version the same multi
    raised `/controller_epoch` to (the fence of the new controller's writes), else -1."""

    broker_id: int
    zxid: int
    session: int
    fence: int = -1


def claim_controller(zk: KazooClient, broker_id: int) -> ControllerClaim:
    """Try to become controller: create the ephemeral `/controller` and raise `/controller_epoch` in ONE multi,
    as Kafka's `registerControllerAndIncrementControllerEpoch` does, so no other claim can come between the two
    and the fence is the epoch znode's version the multi itself wrote (never read afterwards). Returns the won
    claim (`fence` >= 0), or who holds `/controller` when another claim got there first."""
    while True:
        try:
            data, stat = zk.get(paths.CONTROLLER)
            return ControllerClaim(_controller_of(data), stat.czxid, stat.ephemeralOwner)
        except NoNodeError:
            pass
        try:
            epoch, estat = zk.get(paths.CONTROLLER_EPOCH)
        except NoNodeError:  # Kafka's initial epoch is 0: the first claim raises it to 1
            with contextlib.suppress(NodeExistsError):
                zk.create(paths.CONTROLLER_EPOCH, b"0")
            continue
        tx = zk.transaction()
        tx.create(paths.CONTROLLER, paths.controller_json(broker_id), ephemeral=True)
        tx.set_data(paths.CONTROLLER_EPOCH, str(int(epoch or b"0") + 1).encode(), version=estat.version)
        created, raised = tx.commit()
        if not isinstance(created, Exception) and not isinstance(raised, Exception):
            # (one multi, one zxid: the epoch's mzxid is the new `/controller`'s czxid)
            return ControllerClaim(broker_id, raised.mzxid, session_id(zk), raised.version)
        # NodeExists: another claim won first; BadVersion: a claim came (and went) meanwhile: look again


def session_id(zk: KazooClient) -> int:
    """This client's ZooKeeper session id; ConnectionLoss while disconnected (kazoo has none then)."""
    client_id = zk.client_id
    if client_id is None:
        raise ConnectionLoss("no ZooKeeper session while disconnected")
    return client_id[0]


def resign_controller(zk: KazooClient, broker_id: int, zxid: int) -> bool:
    """Delete `/controller` if it is still the znode created at `zxid` and names `broker_id` (a fenced controller
    resigning, so that a new election runs); conditional on its version and on `/controller_epoch` not having
    moved since it was read, so a newer claim is never deleted. True when it was deleted."""
    estat = zk.exists(paths.CONTROLLER_EPOCH)  # (read first: a claim after this read fails the check below)
    try:
        data, stat = zk.get(paths.CONTROLLER)
    except NoNodeError:
        return False
    if stat.czxid != zxid or _controller_of(data) != broker_id:
        return False
    tx = zk.transaction()
    if estat is not None:
        tx.check(paths.CONTROLLER_EPOCH, estat.version)
    tx.delete(paths.CONTROLLER, version=stat.version)
    return not any(isinstance(r, Exception) for r in tx.commit())


def _controller_of(data: bytes | None) -> int:
    try:
        return int((paths.loads(data) or {}).get("brokerid", -1))
    except (ValueError, TypeError, AttributeError):
        return -1


def controller_id(zk: KazooClient) -> int:
    try:
        data, _ = zk.get(paths.CONTROLLER)
    except NoNodeError:
        return -1
    return _controller_of(data)


def allocate_producer_ids(zk: KazooClient, broker_id: int, size: int = 1000) -> tuple[int, int]:
    """Claim the next block of producer ids cluster-wide; returns (first, last)."""
    while True:
        try:
            data, stat = zk.get(paths.PRODUCER_ID_BLOCK)
        except NoNodeError:
            try:
                zk.create(paths.PRODUCER_ID_BLOCK, paths.producer_block_json(broker_id, 0, size - 1))
                return 0, size - 1
            except NodeExistsError:
                continue
        prev = paths.loads(data) if data else None
        start = int(prev["block_end"]) + 1 if prev else 0
        try:
            zk.set(paths.PRODUCER_ID_BLOCK, paths.producer_block_json(broker_id, start, start + size - 1),
                   version=stat.version)  # fmt: skip
            return start, start + size - 1
        except BadVersionError:
            continue
