"""The controller: the one broker holding `/controller` elects partition leaders.

It wakes when the live brokers change (and when asked: a preferred-leader election request in
`/admin/preferred_replica_election`), reads every partition's state and writes the new ones
`broker.replication.election` decides, each conditional on the state znode's version and on
`/controller_epoch` not having moved (a controller whose session expired while it was paused cannot
overwrite its successor). The brokers learn the new states from their watches on the state znodes.

Becoming controller (`Controller.elect`, issue 26): one ZooKeeper multi creates `/controller` and raises
`/controller_epoch` (`registry.claim_controller`); the fence of every write is the epoch znode's version
that multi wrote, and the znode's creation zxid names the claim. A broker acts as controller exactly while
its own claim holds, and everything that decides it (the start, the `/controller` watch, a re-registration
after a lost session, a reconnect, a fence) goes through `elect` under one lock, so they cannot race each
other: a stale watch event (an older zxid) changes nothing, and a claim this session made whose answer was
lost is resigned and made anew. A controller fenced while `/controller` still names its claim resigns: it
deletes the znode (conditionally, `registry.resign_controller`) and stands again, so `/controller` never
names a broker that is not acting as controller for long.

It runs on a thread of its own: a pass reads every partition's state (pipelined, a few round trips for
thousands of partitions) and must not hold up the broker's event loop or kazoo's watch callbacks.

Each pass also takes every reassignment in `/admin/reassign_partitions` a step further
(`broker.replication.reassignment`); a new request or an ISR change notification (a new replica caught
up) wakes it for that step alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from broker.replication import election, reassignment
from broker.zk import registry

log = logging.getLogger(__name__)


class Controller:
    """Elections for the whole cluster, while this broker's claim on `/controller` holds."""

    def __init__(self, zk: KazooClient, broker_id: int, unclean: Callable[[str], bool],
                 auto_rebalance: bool = False, rebalance_interval_s: float = 300.0,
                 on_holder: Callable[[], None] | None = None,
                 known: Callable[[], dict[tuple[str, int], dict]] | None = None) -> None:  # fmt: skip
        self.zk = zk
        self.known = known  # the partition states this broker holds (its cache; maybe behind): a pass starts there
        self.broker_id = broker_id
        self.unclean = unclean  # topic → whether unclean election is enabled for it
        self.auto_rebalance = auto_rebalance  # leadership back to preferred replicas every `rebalance_interval_s`
        self.rebalance_interval_s = rebalance_interval_s
        self.on_holder = on_holder  # called (on the thread that learnt it) when `holder` may have changed
        self.epoch_version = -1  # of `/controller_epoch` as this broker's claim raised it: the fence of every write
        self.holder = -1  # the broker `/controller` names, as last seen (-1: none)
        self._claim: registry.ControllerClaim | None = None  # ours, while it holds
        self._seen_zxid = -1  # the creation zxid of the newest `/controller` seen: a watch's older sighting is stale
        self._claiming = threading.RLock()  # one claim, sighting or resignation at a time
        self._wake = threading.Event()
        self._flags = threading.Lock()  # guards `_preferred` and `_full`, set by pokes from other threads
        self._moves_pending = False  # a reassignment is in progress: look again every second
        self._preferred = False
        self._full = False  # a pass over every partition's leader is due (else only the reassignments' step)
        self._recheck = False  # stand again (a resignation or claim failed): the thread retries every second
        self._thread: threading.Thread | None = None
        self._active = False
        self._closed = False

    @property
    def active(self) -> bool:
        """This broker is acting as controller."""
        return self._active

    # -- who is controller ---------------------------------------------------------------------

    def elect(self) -> int:
        """Stand for controller: claim `/controller` if nobody holds it, else note who does (and stop acting
        if our claim is gone). Blocking (ZooKeeper); any thread. Returns the controller's id."""
        with self._claiming:
            for _ in range(5):
                if self._closed:
                    break
                seen = registry.claim_controller(self.zk, self.broker_id)
                if seen.fence >= 0:
                    self._won(seen)
                    break
                claim = self._claim
                if claim is not None and seen.zxid == claim.zxid:
                    break  # ours, and we are acting on it
                if seen.broker_id == self.broker_id and seen.session == registry.session_id(self.zk):
                    # a claim of this session whose answer was lost (or one we were fenced on): its fence is
                    # not ours to know, so resign it and claim anew
                    log.warning("broker %d resigns a claim on /controller it cannot act on; standing again",
                                self.broker_id)  # fmt: skip
                    registry.resign_controller(self.zk, self.broker_id, seen.zxid)
                    continue
                self._lost(seen)
                break
            else:  # every resignation was followed by another claim of ours it could not act on: try again soon
                self._recheck = True
                self._wake.set()
            return self.holder

    def observe(self, data: bytes | None, stat: Any) -> None:
        """The `/controller` watch fired: stand again when it is gone or is a znode newer than any seen."""
        if stat is not None and stat.czxid <= self._seen_zxid:
            return  # (a stale or already known sighting)
        self.elect()

    def session_lost(self) -> None:
        """The ZooKeeper session expired: our `/controller` went with it; stop acting at once (kazoo's thread:
        nothing here waits). `elect` on the new session decides anew."""
        self._claim = None
        self._seen_zxid = -1  # (a new session may be on a ZooKeeper whose zxids started again)
        if self._active:
            log.warning("broker %d is no longer the controller: its ZooKeeper session expired", self.broker_id)
        self._active = False

    def close(self) -> None:
        self._closed = True
        self._active = False
        self._wake.set()

    def _won(self, claim: registry.ControllerClaim) -> None:
        self._claim = claim
        self._seen_zxid = max(self._seen_zxid, claim.zxid)
        self.epoch_version = claim.fence
        self.holder = self.broker_id
        log.info("broker %d is the controller (epoch znode version %d)", self.broker_id, claim.fence)
        self._active = True
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="controller", daemon=True)
            self._thread.start()
        self.poke()
        self._holder_changed()

    def _lost(self, seen: registry.ControllerClaim) -> None:
        """Another znode holds `/controller` (read just now, under the lock): whoever it names is controller."""
        self._seen_zxid = seen.zxid
        if self._claim is not None or self._active:
            log.info("broker %d is no longer the controller (broker %d is)", self.broker_id, seen.broker_id)
        self._claim = None
        self._active = False
        self.holder = seen.broker_id
        self._holder_changed()

    def _holder_changed(self) -> None:
        if self.on_holder is not None:
            self.on_holder()

    def _fenced(self, fence: int) -> None:
        """A write found `/controller_epoch` past `fence`: resign the claim it was won with (if `/controller`
        still is that claim) and stand again; nothing when a newer claim of ours has replaced it meanwhile."""
        with self._claiming:
            claim = self._claim
            if claim is None or claim.fence != fence:
                return
            log.warning("broker %d was fenced as controller (the epoch znode moved past version %d); resigning",
                        self.broker_id, fence)  # fmt: skip
            self._claim = None
            self._active = False
            try:
                if registry.resign_controller(self.zk, self.broker_id, claim.zxid):
                    log.warning("broker %d deleted its /controller: a new election runs", self.broker_id)
                self.elect()
            except Exception as exc:  # (KazooException mostly: the thread retries until it is done)
                log.warning("resigning as controller failed (%s); trying again", type(exc).__name__)
                self._recheck = True
                self._wake.set()

    # -- the passes ----------------------------------------------------------------------------

    def poke(self, *, preferred: bool = False, moves_only: bool = False) -> None:
        """Look at every partition again (soon, on the controller's thread); with `moves_only`, only take the
        reassignments in progress a step further. Nothing while this broker is not the controller."""
        with self._flags:
            self._preferred = self._preferred or preferred
            self._full = self._full or not moves_only
        self._wake.set()

    def _run(self) -> None:
        next_rebalance = time.monotonic() + self.rebalance_interval_s
        while not self._closed:
            timeout = max(next_rebalance - time.monotonic(), 0.01) if self.auto_rebalance and self._active else None
            if self._moves_pending or self._recheck:
                timeout = 1.0 if timeout is None else min(timeout, 1.0)
            woken = self._wake.wait(timeout)
            self._wake.clear()
            if self._closed:
                return
            if self._recheck:
                self._recheck = False
                try:
                    self.elect()
                except Exception as exc:  # (KazooException mostly)
                    log.warning("standing for controller failed (%s); trying again", type(exc).__name__)
                    self._recheck = True
            if not self._active:
                continue
            fence = self.epoch_version
            with self._flags:
                preferred, self._preferred = self._preferred, False
                full, self._full = self._full, False
            if not woken and self._moves_pending and time.monotonic() < next_rebalance:
                woken = True  # (the reassignments' re-check, not the rebalance's timer)
            if not woken or time.monotonic() >= next_rebalance:
                preferred, full = preferred or self.auto_rebalance, True
                next_rebalance = time.monotonic() + self.rebalance_interval_s
            try:
                if full or preferred:
                    self.elect_all(preferred=preferred, fence=fence)
                else:
                    registry.clear_isr_change_notifications(self.zk)
                    registry.prune_state_changes(self.zk)
                wrote, self._moves_pending = reassignment.advance(self.zk, set(registry.live_brokers(self.zk)),
                                                                  fence)  # fmt: skip
                if wrote:  # a step was taken: the next may be due at once (nothing else would wake us for it)
                    self._wake.set()
            except registry.FencedError:
                self._fenced(fence)
            except KazooException as exc:
                log.warning("controller pass failed: %s; trying again", type(exc).__name__)
                with self._flags:
                    self._full = self._full or full
                    self._preferred = self._preferred or preferred
                self._wake.set()
                threading.Event().wait(0.5)
            except Exception:
                log.exception("controller pass failed")

    def elect_all(self, *, preferred: bool = False, fence: int | None = None) -> int:
        """One pass over every partition, each write fenced at `fence` (default: our claim's); returns how many
        states it changed. FencedError when a newer controller was elected. Pipelined: every state read at
        once, every change written at once, what a leader's ISR change raced is read and decided again (up to
        five passes): a few round trips per pass, not two per partition. With the broker's cached states
        (`known`), the first pass decides from them and writes before reading anything, and the next reads every
        partition it did not write (a cache may be behind): the leaders a failover needs come a read sooner."""
        zk = self.zk
        fence = self.epoch_version if fence is None else fence
        started = time.monotonic()
        live = set(registry.live_brokers(zk))
        wanted = registry.take_preferred_election_request(zk)  # None: none asked; else the partitions asked for
        pending: list[_Candidate] = []
        for topic, found in registry.topics_moves_and_ids(zk, registry.topic_names(zk)).items():
            if found is None:
                continue
            unclean = self.unclean(topic)
            for p, replicas in sorted(found[0][0].items()):
                want_preferred = preferred or (wanted is not None and (not wanted or (topic, p) in wanted))
                pending.append(_Candidate(topic, p, replicas, unclean, want_preferred, found[1]))
        tally = _Tally()
        cached = self._known_states()
        for attempt in range(6):
            if not pending or not self._active:
                break
            # the states decided from the cache are the topic's of `topic_id` (checked): their notification
            # carries them; one read during the pass may be of the topic made again since its id was read
            from_cache: set[tuple[str, int]] = set()
            if attempt == 0 and cached:  # decide from the cache first: its writes need no read before them
                states = [st if (st := cached.get((c.topic, c.partition))) and st.get("topic_id") == c.topic_id
                          else None for c in pending]  # (not a state of an earlier topic of the same name)  # fmt: skip
                unread = [i for i, st in enumerate(states) if st is None]
                from_cache = {(c.topic, c.partition) for c, st in zip(pending, states, strict=True) if st is not None}
                for i, st in zip(unread, registry.partition_states_of(
                        zk, [(pending[i].topic, pending[i].partition) for i in unread]), strict=True):  # fmt: skip
                    states[i] = st
            else:
                states = registry.partition_states_of(zk, [(c.topic, c.partition) for c in pending])
            changes: list[tuple[_Candidate, election.State, election.State, int]] = []
            for c, st in zip(pending, states, strict=True):
                if st is None:
                    continue
                state = election.State(st.get("leader", -1), st.get("leader_epoch", 0), list(st.get("isr", [])))
                new = election.on_brokers(c.replicas, state, live, unclean=c.unclean)
                if new is None and c.want_preferred:
                    new = election.preferred(c.replicas, state, live)
                if new is not None:
                    changes.append((c, state, new, st["zk_version"]))
            versions = registry.write_partition_states(zk, [
                (c.topic, c.partition, new.leader, new.leader_epoch, new.isr, was) for c, _, new, was in changes
            ], fence=fence, carry={(c.topic, c.partition): c.topic_id for c, _, _, _ in changes
                                   if (c.topic, c.partition) in from_cache})  # fmt: skip
            retry = [c for (c, _, _, _), version in zip(changes, versions, strict=True) if version is None]
            for (c, state, new, _), version in zip(changes, versions, strict=True):
                if version is not None:
                    tally.add(c, state, new)
            if attempt == 0 and cached:  # then every one it did not write is read: the cache may be behind
                written = {(c.topic, c.partition) for (c, _, _, _), v in zip(changes, versions, strict=True)
                           if v is not None}  # fmt: skip
                pending = [c for c in pending if (c.topic, c.partition) not in written]
            else:  # a leader's ISR change raced us: read again and decide anew
                pending = retry
        registry.clear_isr_change_notifications(zk)
        registry.prune_state_changes(zk)
        tally.log(time.monotonic() - started)
        return tally.changed

    def _known_states(self) -> dict[tuple[str, int], dict]:
        """The broker's cached states, if it offers them (empty if it cannot say within a second or two)."""
        if self.known is None:
            return {}
        try:
            return self.known()
        except Exception as exc:  # noqa: BLE001 - a pass without them reads every state
            log.debug("no cached states for the controller's pass: %s", type(exc).__name__)
            return {}


class _Candidate(NamedTuple):
    """A partition the controller's pass looks at."""

    topic: str
    partition: int
    replicas: list[int]
    unclean: bool
    want_preferred: bool
    topic_id: int | None


class _Tally:
    """What a controller pass changed, told in one line (and a line per partition at DEBUG): at thousands of
    partitions, a line each is most of the pass's time and says nothing more."""

    def __init__(self) -> None:
        self.changed = self.moved = 0
        self.offline: list[str] = []

    def add(self, c: _Candidate, state: election.State, new: election.State) -> None:
        self.changed += 1
        if new.leader == state.leader:
            return
        name = f"{c.topic}-{c.partition}"
        if new.leader < 0:
            self.offline.append(name)
            log.debug("%s is offline: no live replica in its ISR %s", name, state.isr)
        else:
            self.moved += 1
            log.debug("%s: leader %d -> %d at epoch %d, ISR %s", name, state.leader, new.leader, new.leader_epoch,
                      new.isr)  # fmt: skip

    def log(self, took_s: float) -> None:
        if self.offline:
            shown = ", ".join(self.offline[:10]) + (f" and {len(self.offline) - 10} more" if len(self.offline) > 10
                                                    else "")  # fmt: skip
            log.warning("%d partition(s) offline: no live replica in their ISR (unclean election is off): %s",
                        len(self.offline), shown)  # fmt: skip
        if self.changed:
            log.info("controller pass: %d leader(s) moved, %d state(s) changed in %.2f s", self.moved,
                     self.changed, took_s)  # fmt: skip


def move_leadership_away(zk: KazooClient, broker_id: int, topics: dict[str, dict[int, list[int]]],
                         live: set[int], known: dict[tuple[str, int], dict] | None = None,
                         ) -> list[tuple[str, int, dict]]:  # fmt: skip
    """A controlled shutdown: hand each partition `broker_id` leads to another ISR member and leave every ISR,
    where another live ISR member exists (the last in-sync replica stays: its partition goes offline with
    it). Written by the stopping broker itself, each conditional on the state's version, in pipelined passes
    (every change written at once; what someone else wrote first is read and decided again, up to three
    passes): a round trip per pass, not per partition. The first pass decides from the `known` states (the
    broker's cache, with their `zk_version`s) where it has them, reading only the others. Returns the states
    written, each with its new `zk_version` (for the broker's own cache)."""
    others = live - {broker_id}
    pending = [(t, p, replicas) for t, a in topics.items() for p, replicas in a.items() if broker_id in replicas]
    ids: dict[str, int | None] | None = None  # (the states written from the cache carry them: see `carry`)
    if known:  # a cached state of an earlier topic of the same name (a cache behind a re-create) is not used
        ids = {t: m[1] if m else None for t, m in registry.topics_moves_and_ids(zk, sorted(topics)).items()}
        known = {tp: st for tp, st in known.items() if st.get("topic_id") is not None
                 and st.get("topic_id") == ids.get(tp[0])}  # fmt: skip
    written: list[tuple[str, int, dict]] = []
    for attempt in range(3):
        if not pending:
            break
        cached = (known or {}) if attempt == 0 else {}  # (a stale one fails its write and is read)
        unknown = [(t, p) for t, p, _ in pending if (t, p) not in cached]
        read = dict(zip(unknown, registry.partition_states_of(zk, unknown), strict=True))
        found = [cached.get((t, p)) or read.get((t, p)) for t, p, _ in pending]
        changes: list[tuple[str, int, list[int], election.State, int]] = []
        for (t, p, replicas), st in zip(pending, found, strict=True):
            if st is None:
                continue
            state = election.State(st.get("leader", -1), st.get("leader_epoch", 0), list(st.get("isr", [])))
            new = election.without(replicas, state, broker_id, others)
            if new is not None:
                changes.append((t, p, replicas, new, st["zk_version"]))
        versions = registry.write_partition_states(
            zk,
            [(t, p, new.leader, new.leader_epoch, new.isr, was) for t, p, _, new, was in changes],
            carry={(t, p): ids.get(t) for t, p, *_ in changes if (t, p) in cached} if ids else None,
        )
        pending = []
        for (t, p, replicas, new, _), version in zip(changes, versions, strict=True):
            if version is None:
                pending.append((t, p, replicas))
            else:
                written.append((t, p, {"leader": new.leader, "leader_epoch": new.leader_epoch, "isr": list(new.isr),
                                       "zk_version": version}))  # fmt: skip
    return written
