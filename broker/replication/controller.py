"""The controller: the one broker holding `/controller` elects partition leaders.

It wakes when the live brokers change (and when asked: a preferred-leader election request in
`/admin/preferred_replica_election`), reads every partition's state and writes the new ones
`broker.replication.election` decides, each conditional on the state znode's version and on
`/controller_epoch` not having moved (a controller whose session expired while it was paused cannot
overwrite its successor). The brokers learn the new states from their watches on the state znodes.

It runs on a thread of its own: a pass makes one ZooKeeper read per partition, and must not hold up
the broker's event loop or kazoo's watch callbacks.

Each pass also takes every reassignment in `/admin/reassign_partitions` a step further
(`broker.replication.reassignment`); a new request or an ISR change notification (a new replica caught
up) wakes it for that step alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from broker.replication import election, reassignment
from broker.zk import registry

log = logging.getLogger(__name__)


class Controller:
    """Elections for the whole cluster, while this broker is the controller."""

    def __init__(self, zk: KazooClient, broker_id: int, unclean: Callable[[str], bool],
                 auto_rebalance: bool = False, rebalance_interval_s: float = 300.0) -> None:  # fmt: skip
        self.zk = zk
        self.broker_id = broker_id
        self.unclean = unclean  # topic → whether unclean election is enabled for it
        self.auto_rebalance = auto_rebalance  # leadership back to preferred replicas every `rebalance_interval_s`
        self.rebalance_interval_s = rebalance_interval_s
        self.epoch_version = -1  # of `/controller_epoch` when this broker won: the fence of every write
        self._wake = threading.Event()
        self._flags = threading.Lock()  # guards `_preferred` and `_full`, set by pokes from other threads
        self._moves_pending = False  # a reassignment is in progress: look again every second
        self._preferred = False
        self._full = False  # a pass over every partition's leader is due (else only the reassignments' step)
        self._thread: threading.Thread | None = None
        self._active = False

    def activate(self) -> None:
        """This broker won `/controller`: start electing (on the controller's thread; nothing here waits)."""
        if self._active:
            self.poke()
            return
        self._active = True
        self.epoch_version = -1
        self._thread = threading.Thread(target=self._run, name="controller", daemon=True)
        self._thread.start()
        self.poke()

    def deactivate(self) -> None:
        if self._active:
            log.info("broker %d is no longer the controller", self.broker_id)
        self._active = False
        self._wake.set()

    def poke(self, *, preferred: bool = False, moves_only: bool = False) -> None:
        """Look at every partition again (soon, on the controller's thread); with `moves_only`, only take the
        reassignments in progress a step further."""
        with self._flags:
            self._preferred = self._preferred or preferred
            self._full = self._full or not moves_only
        self._wake.set()

    def _run(self) -> None:
        next_rebalance = time.monotonic() + self.rebalance_interval_s
        while self._active:
            timeout = max(next_rebalance - time.monotonic(), 0.01) if self.auto_rebalance else None
            if self._moves_pending:
                timeout = 1.0 if timeout is None else min(timeout, 1.0)
            woken = self._wake.wait(timeout)
            self._wake.clear()
            if not self._active:
                return
            with self._flags:
                preferred, self._preferred = self._preferred, False
                full, self._full = self._full, False
            if not woken and self._moves_pending and time.monotonic() < next_rebalance:
                woken = True  # (the reassignments' re-check, not the rebalance's timer)
            if not woken or time.monotonic() >= next_rebalance:
                preferred, full = preferred or self.auto_rebalance, True
                next_rebalance = time.monotonic() + self.rebalance_interval_s
            try:
                if self.epoch_version < 0:  # the fence of every write: the epoch znode's version when we won
                    self.epoch_version = registry.controller_epoch_version(self.zk)
                    log.info("broker %d is the controller (epoch znode version %d)", self.broker_id,
                             self.epoch_version)  # fmt: skip
                if full or preferred:
                    self.elect_all(preferred=preferred)
                else:
                    registry.clear_isr_change_notifications(self.zk)
                wrote, self._moves_pending = reassignment.advance(self.zk, set(registry.live_brokers(self.zk)),
                                                                  self.epoch_version)  # fmt: skip
                if wrote:  # a step was taken: the next may be due at once (nothing else would wake us for it)
                    self._wake.set()
            except registry.FencedError:
                log.warning("broker %d was fenced as controller: a newer one was elected", self.broker_id)
                self._active = False
            except KazooException as exc:
                log.warning("controller pass failed: %s; trying again", type(exc).__name__)
                with self._flags:
                    self._full = self._full or full
                self._wake.set()
                threading.Event().wait(0.5)
            except Exception:
                log.exception("controller pass failed")

    def elect_all(self, *, preferred: bool = False) -> int:
        """One pass over every partition; returns how many states it changed."""
        zk = self.zk
        live = set(registry.live_brokers(zk))
        wanted = registry.take_preferred_election_request(zk)  # None: none asked; else the partitions asked for
        changed = 0
        for topic in registry.topic_names(zk):
            assignment = registry.assignment(zk, topic)
            if assignment is None:
                continue
            unclean = self.unclean(topic)
            for p, replicas in sorted(assignment.items()):
                want_preferred = preferred or (wanted is not None and (not wanted or (topic, p) in wanted))
                changed += self._elect(topic, p, replicas, live, unclean, want_preferred)
        registry.clear_isr_change_notifications(zk)
        return changed

    def _elect(self, topic: str, p: int, replicas: list[int], live: set[int], unclean: bool,
               want_preferred: bool) -> int:  # fmt: skip
        for _ in range(5):  # a leader's ISR change may race us: read again and decide anew
            if not self._active:
                return 0
            st = registry.partition_state(self.zk, topic, p)
            if st is None:
                return 0
            state = election.State(st.get("leader", -1), st.get("leader_epoch", 0), list(st.get("isr", [])))
            new = election.on_brokers(replicas, state, live, unclean=unclean)
            if new is None and want_preferred:
                new = election.preferred(replicas, state, live)
            if new is None:
                return 0
            try:
                written = registry.write_partition_state(self.zk, topic, p, new.leader, new.leader_epoch, new.isr,
                                                         st["zk_version"], fence=self.epoch_version)  # fmt: skip
            except registry.FencedError:
                log.warning("broker %d was fenced as controller: a newer one was elected", self.broker_id)
                self._active = False
                return 0
            if written is not None:
                if new.leader != state.leader:
                    if new.leader < 0:
                        log.warning("%s-%d is offline: no live replica in its ISR %s (unclean election is off)",
                                    topic, p, state.isr)  # fmt: skip
                    else:
                        log.info("%s-%d: leader %d -> %d at epoch %d, ISR %s", topic, p, state.leader, new.leader,
                                 new.leader_epoch, new.isr)  # fmt: skip
                return 1
        return 0


def move_leadership_away(zk: KazooClient, broker_id: int, topics: dict[str, dict[int, list[int]]],
                         live: set[int]) -> int:  # fmt: skip
    """A controlled shutdown: hand each partition `broker_id` leads to another ISR member and leave every ISR,
    where another live ISR member exists (the last in-sync replica stays: its partition goes offline with
    it). Written by the stopping broker itself, each conditional on the state's version; returns the count."""
    moved = 0
    for topic, assignment in topics.items():
        for p, replicas in assignment.items():
            if broker_id not in replicas:
                continue
            for _ in range(3):
                st = registry.partition_state(zk, topic, p)
                if st is None:
                    break
                state = election.State(st.get("leader", -1), st.get("leader_epoch", 0), list(st.get("isr", [])))
                new = election.without(replicas, state, broker_id, live - {broker_id})
                if new is None:
                    break
                if registry.write_partition_state(zk, topic, p, new.leader, new.leader_epoch, new.isr,
                                                  st["zk_version"]) is not None:  # fmt: skip
                    moved += 1
                    break
    return moved
