"""The ZooKeeper half of the broker: the watches that feed its metadata cache (live brokers, topics, partition
states, topic and broker configs, the controller's admin znodes) and what each change does to the broker's
replicas, logs and coordinators. A mixin of `broker.server.broker.Broker`, which holds the state it reads
(declared below); the callbacks run on kazoo's thread and hand their work to the event loop (`_call`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import KazooException
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from broker.coordinator.group.coordinator import coordinator_for
from broker.server.config import log_config_for
from broker.topics import topic_name_error
from broker.zk import batch, paths, registry
from broker.zk.batch import Node
from broker.zk.node_watches import NodeWatches

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from broker.coordinator.group.coordinator import GroupCoordinator
    from broker.coordinator.txn.coordinator import TxnCoordinator
    from broker.log.cleaner_threads import LogCleaner
    from broker.log.manager import LogManager
    from broker.replication.controller import Controller
    from broker.replication.manager import ReplicaManager
    from broker.server.cache import MetadataCache
    from broker.server.config import BrokerConfig
    from broker.server.purgatory import Purgatory

log = logging.getLogger(__name__)

#: a watched partition state: (topic, partition, id of the topic it was read for)
StateKey = tuple[str, int, int]


class ZkWatches:
    """ZooKeeper → metadata cache: the broker's watches and what they apply (mixed into `Broker`)."""

    # what the broker holds (set by `Broker.__init__`)
    id: int
    config: BrokerConfig
    zk: KazooClient | None
    loop: asyncio.AbstractEventLoop | None
    cache: MetadataCache
    logs: LogManager
    replicas: ReplicaManager
    purgatory: Purgatory
    controller: Controller | None
    coordinator: GroupCoordinator
    txn_coordinator: TxnCoordinator
    cleaner: LogCleaner | None
    _closing: bool
    _states: NodeWatches[StateKey] | None
    _state_changes_seen: set[str]
    _state_changes_through: int
    _assignment_watched: set[str]
    _config_watched: set[str]
    _call: Callable[..., None]
    _poke_controller: Callable[..., None]
    blocking: Callable[..., Any]

    def _fill(self) -> None:
        """(an executor thread, at start-up) Fill the metadata cache with every topic in one pipelined pass, which
        also watches each partition state (the loop applies it all in one step, before the start goes on)."""
        zk = self.zk
        assert zk is not None and self._states is not None
        started = time.monotonic()
        # what the notifications there name was written before the reads below: they find it
        self._state_changes_seen = set(zk.get_children(paths.STATE_CHANGES))
        self._state_changes_through = max(registry.state_changes_pruned_through(zk),
                                          paths.highest_state_change(self._state_changes_seen))  # fmt: skip
        self._call(self.cache.set_brokers, registry.registered_brokers(zk))
        topics = self._load_topics(registry.topic_names(zk))
        log.info("read %d topics and their %d partition states from ZooKeeper in %.2f s", len(topics),
                 sum(1 for key in self._states.keys() if key[0] in topics), time.monotonic() - started)  # fmt: skip

    def _watch(self) -> None:
        """(an executor thread, at start-up, once `_fill` is applied) Watch what changes the cache."""
        zk = self.zk
        assert zk is not None
        ChildrenWatch(zk, paths.BROKER_IDS, self._guarded(self._on_brokers))
        ChildrenWatch(zk, paths.TOPICS, self._guarded(self._on_topics))
        DataWatch(zk, paths.CONTROLLER, self._guarded(self._on_controller))
        DataWatch(zk, paths.PREFERRED_ELECTION, self._guarded(self._on_preferred_request))
        DataWatch(zk, paths.REASSIGN, self._guarded(self._on_reassign_request))
        ChildrenWatch(zk, paths.ISR_CHANGE, self._guarded(self._on_isr_change))
        ChildrenWatch(zk, paths.STATE_CHANGES, self._guarded(self._on_state_changes))
        DataWatch(zk, paths.broker_config(self.id), self._guarded(self._on_broker_config))

    def _on_state_changes(self, children: list[str]) -> None:
        """(kazoo's thread) New state-change notifications: read them, then the partition states they name, each
        in one pipelined pass, and have the loop apply what changed. When one went before it was read (this
        broker fell a minute behind: the highest sequence number deleted is above the highest it read, or a
        listed one is gone), every state is read again."""
        zk = self.zk
        assert zk is not None and self._states is not None
        new = [c for c in children if c not in self._state_changes_seen]
        # (a read that fails leaves them unseen: the next event, or the reconnect's full read, has them)
        pruned = registry.state_changes_pruned_through(zk)  # after the listing: covers what went before it
        found = batch.get_many(zk, [f"{paths.STATE_CHANGES}/{c}" for c in new]) if new else []
        if pruned > self._state_changes_through or any(node is None for node in found):
            log.warning("state-change notifications went before this broker read them: reading every state")
            self._states.rearm()
        elif found:
            try:
                to_read = self._tell_states(found)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:  # (not written by a broker of ours)
                log.warning("a state-change notification is malformed (%s): reading every state", exc)
                self._states.rearm()
            else:
                self._states.reread(to_read)
        self._state_changes_seen = set(children)
        self._state_changes_through = max(self._state_changes_through, pruned, paths.highest_state_change(children))

    def _tell_states(self, notes: list[Node | None]) -> list[str]:
        """The states these notifications carry, applied without a read (in the order they were written); returns
        the paths of the states they only name, or that cannot be placed (a topic this broker has not loaded
        yet, or loads now), to be read."""
        assert self._states is not None
        named: set[tuple[str, int]] = set()
        newest: dict[StateKey, tuple[int, int, paths.CarriedState]] = {}  # key -> (zxid, version, state): the last
        for node in notes:
            if node is None:
                continue
            only_named, carried = paths.parse_state_changes(node[0])
            named |= only_named
            zxid = node[1].czxid  # (the multi's: the states were written at the notification's own zxid)
            for c in carried:
                key = (c.topic, c.partition, c.topic_id)
                if key not in newest or newest[key][:2] < (zxid, c.zk_version):
                    newest[key] = (zxid, c.zk_version, c)
        told = sorted(newest.items(), key=lambda item: item[1][:2])
        unplaced = self._states.tell((key, paths.partition_state(c.topic, c.partition), paths.dumps(c.state), zxid,
                                      version) for key, (zxid, version, c) in told)  # fmt: skip
        return [*dict.fromkeys([*(paths.partition_state(t, p) for t, p in sorted(named)), *unplaced])]

    def _rewatch_states(self) -> None:
        """(a thread of its own, after a reconnect) Read every partition state again (one pipelined pass) and
        apply what changed meanwhile (the cache ignores versions it has seen): the safety net behind the
        state-change notifications."""
        if self._states is None or self._closing:
            return
        try:
            self._states.rearm()
        except KazooException as e:  # (dropped again: the next reconnect reads them again)
            if not self._closing:
                log.warning("reading the partition states again failed: %s", type(e).__name__)

    def _guarded(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Wrap a watch callback: stop watching once shutting down, and turn a ZooKeeper error
        (the session dropping under the callback) into one warning line, not a kazoo traceback."""

        def callback(*args: Any) -> Any:
            if self._closing:
                return False
            try:
                return fn(*args)
            except KazooException as e:
                if not self._closing:
                    log.warning("ZooKeeper watch %s failed: %s", fn.__name__, type(e).__name__)
                return None

        return callback

    def _on_brokers(self, children: list[str]) -> None:
        brokers = registry.registered_brokers(self.zk)  # type: ignore[arg-type]
        self._call(self._set_brokers, brokers)

    def _set_brokers(self, registered: dict[int, registry.Registration]) -> None:
        """A new live set: groups whose coordinator is now another broker are handed over (forgotten); the
        controller elects leaders for what the lost brokers led."""
        self.cache.set_brokers(registered)
        brokers = self.cache.brokers
        if self.controller is not None and self.controller.active:
            self.controller.poke()
        for gid in [g for g in self.coordinator.groups if coordinator_for(g, brokers) != self.id]:
            log.info("group %s moved to broker %d", gid, coordinator_for(gid, brokers))
            self.coordinator.unload(gid)
        self.txn_coordinator.brokers_changed()

    def _on_topics(self, children: list[str]) -> None:
        zk = self.zk
        assert zk is not None
        names = set(children)
        known = set(self.cache.topics)
        both = sorted(names & known)
        ids = registry.topics_moves_and_ids(zk, both) if both else {}
        again = [t for t in both if (ids[t] or (None, None))[1] != self.cache.topic_ids.get(t)]  # deleted and
        self._load_topics(sorted(names - known) + again)  # created again between two looks at the list
        for topic in sorted(known - names):
            self._call(self.forget_topic, topic)

    def _on_controller(self, data: bytes | None, stat: Any) -> None:
        """`/controller` changed: stand for controller when it is gone (the controller decides, under its lock)."""
        if self.controller is not None and not self._closing:
            self.controller.observe(data, stat)

    def _on_preferred_request(self, data: bytes | None, stat: Any) -> None:
        """`/admin/preferred_replica_election` was written (`kafkactl topic elect-leaders`): the controller
        takes it on its next pass, now."""
        if data is not None:
            self._call(self._poke_controller)

    def _on_reassign_request(self, data: bytes | None, stat: Any) -> None:
        """`/admin/reassign_partitions` was written (`kafkactl topic reassign --execute`): the controller's
        next step of it, now."""
        if data is not None:
            self._call(self._poke_controller, True)

    def _on_isr_change(self, children: list[str]) -> None:
        """A leader changed an ISR: a reassignment's new replica may have caught up."""
        if children:
            self._call(self._poke_controller, True)

    def _on_broker_config(self, data: bytes | None, stat: Any) -> None:
        rate = paths.parse_config(data).get("follower.replication.throttled.rate")
        self._call(self.replicas.throttle.set_rate, int(rate) if rate and rate.isdigit() else None)

    def _load_topic(self, topic: str) -> bool:
        """(blocking) Read a topic's assignment, states and config from ZooKeeper and have the loop apply them,
        watching its partition states; False if it does not exist."""
        return topic in self._load_topics([topic])

    def _load_topics(self, topics: list[str]) -> set[str]:
        """(blocking) `_load_topic` of many topics: their assignments, configs and partition states each read in
        one pipelined pass (which sets the state watches), applied by the loop in one step; the topics found."""
        zk = self.zk
        assert zk is not None and self._states is not None
        if not topics:
            return set()
        moves = registry.topics_moves_and_ids(zk, topics)
        found = {t: m for t, m in moves.items() if m is not None}
        configs = registry.topic_configs(zk, list(found))
        nodes = {(t, p, tid): paths.partition_state(t, p) for t, ((a, _, _), tid) in found.items() for p in a}

        def apply(read: dict[StateKey, Node | None]) -> None:  # (before any later state change is reported)
            loaded = []
            for t, ((assignment, _, removing), tid) in found.items():
                states = {p: registry.state_of(*node) if (node := read[(t, p, tid)]) else None for p in assignment}
                loaded.append((t, assignment, states, configs[t], tid, removing))
            self._call(self._apply_topics, loaded)

        self._states.watch(nodes, then=apply)
        for topic in found:
            self._watch_topic(topic)
        return set(found)

    def _watch_topic(self, topic: str) -> None:
        """Watch a topic's config and its assignment (partitions added or reassigned)."""
        zk = self.zk
        assert zk is not None
        if topic not in self._config_watched:
            self._config_watched.add(topic)
            DataWatch(zk, paths.topic_config(topic), self._guarded(self._config_watcher(topic)))
        if topic not in self._assignment_watched:
            self._assignment_watched.add(topic)
            DataWatch(zk, paths.topic(topic), self._guarded(self._assignment_watcher(topic)))

    def _watch_new_topic(self, topic: str, partitions: list[int], topic_id: int) -> None:
        """(blocking) Watch the states of a topic this broker created and applied already (what changed since
        is applied as a change)."""
        assert self._states is not None
        nodes = {(topic, p, topic_id): paths.partition_state(topic, p) for p in partitions}

        def report(read: dict[StateKey, Node | None]) -> None:
            self._on_states([(key, node[0], node[1]) for key, node in read.items() if node is not None])

        self._states.watch(nodes, then=report)
        self._watch_topic(topic)

    def _apply_topics(self, loaded: list[tuple]) -> None:
        for found in loaded:
            self._apply_topic(*found)

    def _assignment_watcher(self, topic: str) -> Callable[[bytes | None, Any], bool | None]:
        def on_change(data: bytes | None, stat: Any) -> bool | None:
            if topic not in self._assignment_watched:
                return False
            parts = self.cache.topics.get(topic)
            if data is None or parts is None:
                return None
            replicas, _, removing = paths.parse_moves(data)
            known = {p: (info.replicas, info.removing) for p, info in parts.items()}
            if {p: (r, removing.get(p, [])) for p, r in replicas.items()} != known:
                self._load_topic(topic)  # partitions added or reassigned: replicas start (or stop) here
            return None

        return on_change

    def _on_states(self, changes: list[tuple[StateKey, bytes, Any]]) -> None:
        """(kazoo's threads) Partition states changed (a leader elected, an ISR changed): the loop applies them."""
        if changes and not self._closing:
            self._call(self._apply_states, [(t, p, tid, registry.state_of(data, stat))
                                            for (t, p, tid), data, stat in changes])  # fmt: skip

    def _apply_states(self, changes: list[tuple[str, int, int, dict]]) -> None:
        for topic, p, topic_id, state in changes:
            self._apply_state(topic, p, state, topic_id)

    def _apply_state(self, topic: str, p: int, state: dict, topic_id: int | None) -> None:
        """A partition's new state, if it belongs to the topic the cache holds (a state of a topic deleted and
        created again under the same name waits for the topics watch to load that topic whole)."""
        if topic_id is None or topic_id != self.cache.topic_ids.get(topic):
            return
        info = self.cache.set_state(topic, p, state)
        if info is not None:
            self.replicas.apply((topic, p), info)

    def _config_watcher(self, topic: str) -> Callable[[bytes | None, Any], bool | None]:
        def on_change(data: bytes | None, stat: Any) -> bool | None:
            if topic not in self._config_watched:
                return False  # the topic went away: stop watching
            if data is not None:
                self._call(self.apply_config, topic, paths.parse_config(data))
            return None

        return on_change

    def _apply_topic(self, topic: str, assignment: dict[int, list[int]], states: dict[int, dict | None],
                     config: dict[str, str], topic_id: int | None,
                     removing: dict[int, list[int]] | None = None) -> None:  # fmt: skip
        """Take a topic's ZooKeeper state; the logs of an earlier topic of the same name are deleted."""
        known = self.cache.topic_ids.get(topic)
        if known is not None and topic_id is not None and known != topic_id:
            self._drop_logs(topic)
        before = self.cache.topics.get(topic, {}) if known == topic_id else {}
        if topic_id is not None:
            self.cache.topic_ids[topic] = topic_id
        self.cache.set_topic(topic, assignment, states, removing)
        self.apply_config(topic, config)
        for p, info in self.cache.topics[topic].items():
            self.replicas.apply((topic, p), info)
        for p, old in before.items():  # reassigned away from this broker: the copy goes (Kafka's StopReplica)
            if self.id in old.replicas and self.id not in assignment.get(p, [self.id]):
                self._drop_replica(topic, p)

    def _drop_replica(self, topic: str, p: int) -> None:
        if self.logs.get(topic, p) is None:
            return
        self.logs.delete(topic, p)
        self.purgatory.notify((topic, p))
        log.info("%s-%d was reassigned to brokers %s: deleted this broker's copy", topic, p,
                 self.cache.topics[topic][p].replicas)  # fmt: skip

    def apply_config(self, topic: str, config: dict[str, str]) -> None:
        self.cache.configs[topic] = config
        lc = log_config_for(self.config.log, config)
        for p in self.cache.topics.get(topic, {}):
            plog = self.logs.get(topic, p)
            if plog is not None:
                plog.config = lc
        if self.cleaner is not None and lc.compact:
            self.cleaner.wake()

    def forget_topic(self, topic: str) -> None:
        self._assignment_watched.discard(topic)
        if self._states is not None:
            keys = [key for key in self._states.keys() if key[0] == topic]
            self._states.unwatch(keys)
            for p in {*(key[1] for key in keys), *self.cache.topics.get(topic, {})}:
                self.replicas.forget((topic, p))
        self.cache.drop_topic(topic)
        self._config_watched.discard(topic)
        self._drop_logs(topic)

    def _drop_logs(self, topic: str) -> None:
        """Delete this broker's logs of a deleted topic (and forget their producers, wake their fetches)."""
        for t, p in [tp for tp in self.logs.logs if tp[0] == topic]:
            self.replicas.forget((t, p))  # (a topic of the same name may follow: its replicas start afresh)
            self.logs.delete(t, p)
            self.purgatory.notify((t, p))
        log.info("deleted the local logs of topic %s", topic)

    async def refresh_topic(self, topic: str) -> bool:
        """Fill a cache miss from ZooKeeper; True if the topic exists (an illegal name is never looked up: it
        cannot exist, and as a znode path it could name another node, or none)."""
        if self.zk is None or self._states is None or topic_name_error(topic):
            return False
        return await self.blocking(self._load_topic, topic)  # (applied by the loop before this returns)

    async def take_new_topic(self, topic: str, assignment: dict[int, list[int]], config: dict[str, str],
                             topic_id: int | None) -> None:  # fmt: skip
        """A topic this broker just created: its first replica leads each partition with every replica in sync
        (as written), served at once, before the topics watch reports it (which then finds it known)."""
        states: dict[int, dict | None] = {
            p: {"leader": r[0], "leader_epoch": 0, "isr": list(r), "zk_version": 0} for p, r in assignment.items()
        }
        self._apply_topic(topic, assignment, states, config, topic_id)
        if topic_id is not None and self._states is not None:
            await self.blocking(self._watch_new_topic, topic, list(assignment), topic_id)
