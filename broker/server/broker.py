"""A broker's lifecycle: load the logs, join ZooKeeper, serve the wire protocol, shut down cleanly.

Start-up order: listen on every listener (a busy port or a bad TLS file fails before anything else is
touched), connect to ZooKeeper,
read topic configs, load and recover the logs, accept connections, register `/brokers/ids/<id>`,
try for `/controller`, watch brokers and topics. Shutdown reverses it: deregister, stop serving,
flush, write the checkpoints and the clean-shutdown marker, close the ZooKeeper session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException

from broker.coordinator.group.coordinator import GroupCoordinator, coordinator_for
from broker.coordinator.group.store import GroupStore
from broker.coordinator.txn.coordinator import TxnCoordinator
from broker.coordinator.txn.producer_ids import ProducerIdPool, take_producer_id
from broker.errors import KafkactlError
from broker.log import producer_snapshot
from broker.log.cleaner import producers_last_batches
from broker.log.cleaner_threads import LogCleaner
from broker.log.log import PartitionLog
from broker.log.manager import LogManager
from broker.log.producer_state import ProducerStates
from broker.log.producer_state_io import (
    SnapshotJob,
    changed,
    forget_states,
    load_states,
    prepare_snapshot,
    prune_all,
    snapshot_due,
    take_snapshot,
    write_unlinked_all,
)
from broker.protocol.errors import ErrorCode
from broker.quota.manager import QuotaManager
from broker.replication.controller import Controller, move_leadership_away
from broker.replication.manager import ReplicaManager
from broker.security.acl_authorizer import Authorizer
from broker.server.cache import MetadataCache, PartitionInfo
from broker.server.config import BrokerConfig, log_config_for
from broker.server.fetch_sessions import FetchSessions
from broker.server.limits import default_max_connections, file_limit
from broker.server.network import Server
from broker.server.purgatory import Purgatory
from broker.server.stop_signals import on_stop_signals
from broker.server.tls import server_context
from broker.server.zk_watches import StateKey, ZkWatches
from broker.zk import client as zkclient
from broker.zk import registry
from broker.zk.node_watches import NodeWatches

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class Broker(ZkWatches):
    """One broker process's state; the handlers in `broker.server.handlers` act on it through the narrow
    interface `broker.server.services.Services`."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.id = config.broker_id
        self.cache = MetadataCache()
        self.logs = LogManager(config.log_dirs, config.log, broker_id=self.id)
        self.logs.on_roll = self._snapshot_at_roll
        self.purgatory = Purgatory()
        self.fetch_sessions = FetchSessions(config.max_incremental_fetch_session_cache_slots, self.purgatory)
        self.deferred_logs: set[PartitionLog] = set()  # logs with appends deferred until `write_deferred`
        self.pid_pool = ProducerIdPool()
        # the groups' committed offsets and generations in ZooKeeper, written behind on a session of its own
        self.group_store = GroupStore(
            config.zookeeper_connect, session_timeout_s=config.zk_session_timeout_ms / 1000,
            connect_timeout_s=config.zk_connection_timeout_ms / 1000,
            owns=lambda g: coordinator_for(g, self.cache.brokers) == self.id,
            live=lambda g: g in self.coordinator.groups, moves=lambda: self.cache.brokers_set,
        )  # fmt: skip
        self.coordinator = GroupCoordinator(
            initial_delay_ms=config.group_initial_rebalance_delay_ms,
            min_session_ms=config.group_min_session_timeout_ms, max_session_ms=config.group_max_session_timeout_ms,
            store=self.group_store.store_generation, on_drop=self.group_store.forget,
        )  # fmt: skip
        self.zk: KazooClient | None = None
        self.authorizer = Authorizer.from_props(config.props)
        self.quotas = QuotaManager()
        self.cleaner: LogCleaner | None = None  # the log cleaner's threads (log.cleaner.enable)
        self.txn_coordinator = TxnCoordinator(  # (tells the group store the offsets a commit wrote to ZooKeeper)
            self.id, config, self.cache, zk=lambda: self.zk, blocking=self.blocking,
            new_producer_id=lambda: take_producer_id(self),
            committed=self.group_store.note_committed,
            endpoint=self.inter_broker_endpoint,
        )  # fmt: skip
        self.replicas = ReplicaManager(
            self.id, config, self.cache, self.logs, self.purgatory,
            log_for=self._replica_log, blocking=self.blocking, zk=lambda: self.zk,
        )  # fmt: skip
        self.controller: Controller | None = None
        self._states: NodeWatches[StateKey] | None = None  # the partition state znodes watched (`_watch`)
        self._assignment_watched: set[str] = set()
        self._state_changes_seen: set[str] = set()  # the state-change notifications read (`_on_state_changes`)
        self._state_changes_through = -1  # the highest sequence number of those read (or deleted before the start)
        self.servers: dict[str, Server] = {}  # by listener name, in `listeners` order
        self.server: Server | None = None  # the first listener's (its port is the one `--port` sets)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._handed: list[tuple[Callable, tuple]] = []  # calls from kazoo's threads for the loop (`_call`)
        self._handed_lock = threading.Lock()
        self.stopping: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []
        self._snapshots: asyncio.Task | None = None  # the minute's producer snapshots being written
        self._config_watched: set[str] = set()
        self._session_lost = False
        self._zk_down = False  # the ZooKeeper connection is lost (logged once, and once when it is back)
        self._registered = False
        self._closing = False
        #: after `shutdown`, what kept it from being clean (None: it was clean)
        self.unclean_shutdown: str | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        from broker.server.handlers import dispatcher
        from broker.server.handlers.produce_run import run_dispatcher

        self.loop = asyncio.get_running_loop()
        self.stopping = asyncio.Event()
        cfg = self.config
        files = file_limit()
        dispatch, run = dispatcher(self), run_dispatcher(self)
        contexts = {x.name: server_context(x.name, cfg.tls(x.name)) for x in cfg.listeners if x.tls}
        for x in cfg.listeners:
            self.servers[x.name] = Server(
                x.host, x.port, dispatch, max_request_bytes=cfg.socket_request_max_bytes,
                listener=(x.name, x.protocol), context=contexts.get(x.name),
                send_buffer=cfg.socket_send_buffer_bytes, receive_buffer=cfg.socket_receive_buffer_bytes,
                settle=self.write_deferred, run=run, max_idle_ms=cfg.connections_max_idle_ms,
                max_connections=cfg.max_connections if cfg.max_connections > 0 else default_max_connections(files),
                max_connections_per_ip=cfg.max_connections_per_ip,
                max_queued_bytes=(cfg.queued_max_request_bytes if cfg.queued_max_request_bytes > 0
                                  else 2 * cfg.socket_request_max_bytes),
            )  # fmt: skip
        self.server = self.servers[cfg.listeners[0].name]
        try:
            for server in self.servers.values():
                server.bind()
        except BaseException:
            await self._abort_start()
            raise
        try:
            self._connect_zookeeper()
            zk = self.zk
            assert zk is not None
            self._states = NodeWatches(zk, self._on_states, armed=False)  # changes come as notifications
            registry.ensure_roots(zk)
            self.cache.cluster_id = registry.cluster_id(zk)
            if self.authorizer is not None:  # the ACLs are there before the first request is
                self.authorizer.start(zk)
            self.quotas.start(zk, self._call)  # (the quotas too)
            topic_configs = {t: log_config_for(cfg.log, registry.topic_config(zk, t)) for t in registry.topic_names(zk)}
            self.logs.startup(topic_configs, cluster_id=self.cache.cluster_id)
            self._load_producer_states()
            for server in self.servers.values():
                server.start()
            # a registration of this broker's own killed run goes when its session does: wait for that
            registry.register_broker(zk, self.id, self.endpoints(), wait_s=cfg.zk_session_timeout_ms / 1000 + 5)
            self._registered = True
            zk.add_listener(self._on_zk_state)
            self.replicas.start()
            self.controller = Controller(
                zk, self.id, self._unclean_election,
                auto_rebalance=_flag(cfg.props.get("auto.leader.rebalance.enable")),
                rebalance_interval_s=float(cfg.props.get("leader.imbalance.check.interval.seconds", 300)),
                on_holder=lambda: self._call(self._controller_changed),
                known=self._cached_states,
            )  # fmt: skip
            await self.blocking(self._fill)  # (applied by the loop before this returns)
            await self.blocking(self._watch)  # (so the topics watch finds every topic known)
            self.controller.elect()
            self._controller_changed()
        except BaseException:
            await self._abort_start()
            raise
        self.group_store.start(self.loop)
        self.coordinator.start()
        self.txn_coordinator.start()
        self._tasks = [
            self.loop.create_task(self._every(cfg.retention_check_interval_ms, self._retention)),
            self.loop.create_task(self._every(min(cfg.flush_scheduler_interval_ms, 2**31), self._flush)),
            self.loop.create_task(self._every(60_000, self.checkpoint)),
        ]
        if _flag(cfg.props.get("log.cleaner.enable", "true")):
            self.cleaner = LogCleaner.from_props(
                self.logs,
                cfg.props,
                self.loop,
                stable_end=lambda plog: self.replicas.stable_end((plog.topic, plog.partition), plog),
            )  # (read only: another thread)
            self.logs.before_removal = self.cleaner.abort
            self.logs.on_truncate = self.cleaner.truncated
            self.cleaner.producers_last = lambda plog: producers_last_batches(  # (Kafka's active producers')
                plog.producer_states
            )
            self.cleaner.start()
        stray = sorted({t for t, _ in self.logs.logs} - set(self.cache.topics))
        if stray:
            log.warning("logs of topics unknown to ZooKeeper are kept but not served: %s", ", ".join(stray))

    def endpoints(self) -> list[registry.Endpoint]:
        """What this broker registers: each advertised listener, a port 0 there being the port it was bound to."""
        out = []
        for x in self.config.advertised.values():
            server = self.servers.get(x.name)
            port = server.port if x.port == 0 and server is not None else x.port
            out.append(registry.Endpoint(x.name, x.protocol, x.host, port))
        return out

    def inter_broker_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """(host, port) where this broker reaches broker `broker_id` (its `inter.broker.listener.name`
        endpoint; the TLS/SASL settings for it: `config.inter_broker_listener`), or None when that broker is
        not live or has no such listener."""
        return self.cache.endpoint(broker_id, self.config.inter_broker_listener_name)

    async def _abort_start(self) -> None:
        for server in self.servers.values():
            await server.close()
        if self.logs.holds_dirs:
            self.logs.shutdown()
        if self.zk is not None:
            zkclient.close(self.zk)

    def _connect_zookeeper(self) -> None:
        cfg = self.config
        zkclient.configure_from(cfg.props)
        self.zk = zkclient.connect(cfg.zookeeper_connect, session_timeout_s=cfg.zk_session_timeout_ms / 1000,
                                   connect_timeout_s=cfg.zk_connection_timeout_ms / 1000)  # fmt: skip

    async def run(self, on_ready: Callable[[Broker], None] | None = None) -> None:
        """Start, serve until SIGTERM/SIGINT or `stop()`, then shut down cleanly (a signal during the start-up
        ends the process at once, as before it serves anything)."""
        await self.start()
        assert self.loop is not None and self.stopping is not None
        on_stop_signals(self.loop, self.stopping.set)
        if on_ready is not None:
            on_ready(self)
        try:
            await self.stopping.wait()
        finally:
            await self.shutdown()

    def stop(self) -> None:
        if self.loop is not None and self.stopping is not None:
            self.loop.call_soon_threadsafe(self.stopping.set)

    async def shutdown(self) -> None:
        log.info("broker %d shutting down", self.id)
        if self.config.controlled_shutdown and self._registered and not self._closing:
            try:  # (bounded: a stop must end even when ZooKeeper or the other brokers do not answer)
                await asyncio.wait_for(self._controlled_shutdown(), 15)
            except TimeoutError:
                log.warning("controlled shutdown: gave up after 15s; stopping anyway")
        self._closing = True
        if self._states is not None:
            self._states.closed = True
        if self.authorizer is not None:
            self.authorizer.stop()
        self.quotas.stop()
        for task in self._tasks:
            task.cancel()
        if self._snapshots is not None:  # (the shutdown writes the changed ones itself)
            self._snapshots.cancel()
        if self.controller is not None:
            self.controller.close()
        await _bounded("closing the replicas", self.replicas.close(), 10)
        self.coordinator.close()
        await _bounded("closing the transaction coordinator", self.txn_coordinator.close(), 10)
        await self.group_store.close(5)  # what it holds written, for the coordinators taking over
        zk = self.zk
        if zk is not None and self._registered:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.blocking(registry.deregister_broker, zk, self.id), 5)
        for name, server in self.servers.items():
            await _bounded(f"closing the {name} listener", server.close(), 10)
        if self.cleaner is not None:  # (off the loop: a clean waiting for its swap there gives up)
            await self.blocking(self.cleaner.stop)
        self._record_high_watermarks()
        self._save_producer_states()
        problems = self.logs.shutdown()
        if zk is not None:
            zkclient.close(zk)
        if problems:
            self.unclean_shutdown = "; ".join(problems)
            log.error("broker %d did not shut down cleanly: %s; its next start recovers those logs",
                      self.id, self.unclean_shutdown)  # fmt: skip
        else:
            log.info("broker %d shut down cleanly", self.id)

    async def _controlled_shutdown(self, wait_s: float = 10.0) -> None:
        """Before stopping: hand every partition this broker leads to another in-sync replica and leave the
        ISRs, so producers and consumers move on at once instead of after the ZooKeeper session expires."""
        zk = self.zk
        if zk is None or not zk.connected:
            return
        await self.replicas.stop_fetching()
        topics = {t: {p: info.replicas for p, info in parts.items()} for t, parts in self.cache.topics.items()}
        try:
            written = await asyncio.wait_for(self.blocking(move_leadership_away, zk, self.id, topics,
                                                           set(self.cache.brokers), self.cache.states(self.id)),
                                             wait_s)  # fmt: skip
        except (TimeoutError, KazooException) as exc:
            log.warning("controlled shutdown: moving leadership away failed (%s)", type(exc).__name__)
            return
        for topic, p, state in written:  # what it wrote is its own cache at once (the watches bring the same later)
            info = self.cache.set_state(topic, p, state)
            if info is not None:
                self.replicas.apply((topic, p), info)
        if written:
            log.info("controlled shutdown: moved %d partition(s) to other replicas", len(written))

    async def _every(self, interval_ms: int, fn: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                fn()
            except Exception:
                log.exception("background task %s failed", getattr(fn, "__name__", fn))

    def checkpoint(self) -> None:
        """Write the log dirs' checkpoints, high watermarks included; start the pass (`_write_snapshots`, off
        the event loop) that writes the producer snapshots due (`snapshot_due`) and makes what was written
        without fsync since the last pass (new logs, topic ids, epoch checkpoints) durable."""
        self._record_high_watermarks()
        for problem in self.logs.checkpoint():
            log.error("%s: the log dir is offline until the broker restarts", problem)
        if self.loop is None or (self._snapshots is not None and not self._snapshots.done()):
            return
        now_ms = int(time.time() * 1000)  # start-up after a crash reads from there on
        jobs = [(tp, plog, states, prepare_snapshot(plog, states, now_ms, self.high_watermark(plog)))
                for tp, plog in self.logs.logs.items()
                if snapshot_due(plog, states := plog.producer_states)]  # fmt: skip
        unsynced = self.logs.take_unsynced()
        if jobs or unsynced:
            self._snapshots = self.loop.create_task(self._write_snapshots(jobs, unsynced))

    async def _write_snapshots(self, jobs: list[tuple[TopicPartition, PartitionLog, ProducerStates, SnapshotJob]],
                               unsynced: dict[Path, set[Path]] | None = None) -> None:  # fmt: skip
        """The minute's pass, in one executor job however many partitions: write every due snapshot under a
        name no load reads, then make them (and `unsynced`) durable with one `syncfs` per log dir; back on the
        loop install each only if the partition still has that log and that state (no truncation, deletion or
        failed load meanwhile) and its log still reaches the offset; then delete the older ones in one more
        job (deleting is always safe)."""
        unsynced = unsynced or {}
        try:
            dirs_jobs = [(plog.dir, job) for _, plog, _, job in jobs]
            written, problems = await self.blocking(self._write_durably, dirs_jobs, unsynced)
        except asyncio.CancelledError:  # (a shutdown: its own durability point covers them)
            for paths in unsynced.values():
                for p in paths:
                    self.logs.note_unsynced(p)
            raise
        for problem in problems:
            log.warning("%s", problem)
            for paths in unsynced.values():  # (tried again at the next pass)
                for p in paths:
                    self.logs.note_unsynced(p)
        installed = []
        for (tp, plog, states, job), unlinked in zip(jobs, written, strict=True):
            if isinstance(unlinked, OSError):
                if self.logs.logs.get(tp) is plog:
                    log.warning("writing the producer snapshot of %s-%d failed: %s", tp[0], tp[1], unlinked)
                continue
            current = self.logs.logs.get(tp) is plog and plog.producer_states is states
            if problems or not current or states.unknown or plog.log_end_offset < job.offset:
                unlinked.unlink(missing_ok=True)
                continue
            try:
                producer_snapshot.install(unlinked, job.offset)
            except OSError as exc:
                if self.logs.logs.get(tp) is plog:  # (not for a log deleted meanwhile)
                    log.warning("writing the producer snapshot of %s-%d failed: %s", tp[0], tp[1], exc)
                continue
            states.saved = max(states.saved, job.changes)
            states.saved_offset = max(states.saved_offset, job.offset)
            installed.append((plog.dir, job))
        if installed:
            for directory, exc in await self.blocking(prune_all, installed):
                log.warning("deleting the older producer snapshots in %s failed: %s", directory, exc)

    def _write_durably(self, jobs: list[tuple[Path, SnapshotJob]], unsynced: dict[Path, set[Path]]
                       ) -> tuple[list[Path | OSError], list[str]]:  # fmt: skip
        """(Off the event loop.) Write the snapshots, then one durability point per log dir for them and for
        `unsynced`: the paths written (or why not) and what failed to be made durable."""
        written = write_unlinked_all(jobs)
        dirs = {d: set(paths) for d, paths in unsynced.items()}
        for (directory, _), path in zip(jobs, written, strict=True):
            if not isinstance(path, OSError):
                dirs.setdefault(directory.parent, set()).add(path)
        return written, self.logs.make_durable(dirs)

    def _record_high_watermarks(self) -> None:
        for tp, plog in self.logs.logs.items():
            if self.cache.partition(*tp) is not None:
                self.logs.high_watermarks[tp] = self.high_watermark(plog)

    def _retention(self) -> None:
        for (topic, p), bases in self.logs.run_retention().items():
            log.info("retention deleted %d segment(s) of %s-%d", len(bases), topic, p)

    def _flush(self) -> None:
        self.logs.flush_dirty()

    # -- ZooKeeper ---------------------------------------------------------------------------------

    def _on_zk_state(self, state: str) -> None:
        """kazoo's thread: say once that ZooKeeper went away and once that it came back; after a lost session,
        register again at once (the ephemerals died with it)."""
        if self._closing:
            return
        if state == KazooState.SUSPENDED and not self._zk_down:
            self._zk_down = True
            log.warning("lost the connection to ZooKeeper at %s: produce and fetch go on, topic changes wait for it",
                        self.config.zookeeper_connect)  # fmt: skip
        elif state == KazooState.LOST:
            self._session_lost = self._zk_down = True
            log.warning("ZooKeeper session expired; will register again when it reconnects")
            if self.controller is not None:
                self.controller.session_lost()
        elif state == KazooState.CONNECTED:
            if self._zk_down:
                self._zk_down = False
                log.warning("ZooKeeper at %s is back", self.config.zookeeper_connect)
            if self.zk is not None and self._states is not None:
                self.zk.handler.spawn(self._rewatch_states)
            if self._session_lost and self.zk is not None:
                self._session_lost = False
                self.zk.handler.spawn(self._reregister)
            elif self.zk is not None and self._registered:  # (a watch's claim may have failed while it was down)
                self.zk.handler.spawn(self._stand_for_controller)

    def _reregister(self) -> None:
        """Register this broker again (and stand for controller), retrying while the new session settles."""
        zk = self.zk
        assert zk is not None
        for attempt in range(60):
            if self._closing:
                return
            try:
                registry.register_broker(zk, self.id, self.endpoints())
                if self.controller is not None:  # (under the controller's lock: no race with its watch)
                    self.controller.elect()
            except (KazooException, KafkactlError) as exc:
                if attempt == 0:
                    log.warning("registering again in ZooKeeper failed (%s); retrying",
                                str(exc) or type(exc).__name__)  # fmt: skip
                time.sleep(0.5)
                continue
            log.warning("registered broker %d in ZooKeeper again", self.id)
            return
        log.error("could not register broker %d in ZooKeeper again; restart it", self.id)

    def _call(self, fn: Callable, *args: Any) -> None:
        """Run `fn(*args)` on the event loop (from kazoo's threads), after every call handed over before it.
        A burst (thousands of state changes after a failover) wakes the loop once, not once per call."""
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        with self._handed_lock:
            self._handed.append((fn, args))
            first = len(self._handed) == 1
        if first:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._run_handed)

    def _run_handed(self) -> None:
        """(the loop) The calls `_call` handed over, in order."""
        with self._handed_lock:
            calls, self._handed = self._handed, []
        for fn, args in calls:
            try:
                fn(*args)
            except Exception:
                log.exception("%s failed", getattr(fn, "__qualname__", fn))

    def _stand_for_controller(self) -> None:
        """Back on the same session: a claim a watch tried while ZooKeeper was away may have failed; try again."""
        if self.controller is not None and not self._closing:
            try:
                self.controller.elect()
            except (KazooException, KafkactlError) as exc:
                log.warning("standing for controller failed (%s)", type(exc).__name__)

    def _poke_controller(self, moves_only: bool = False) -> None:
        if self.controller is not None and self.controller.active:
            self.controller.poke(moves_only=moves_only)

    def _controller_changed(self) -> None:
        """The controller's id as last seen, for Metadata answers (read when run: a late call is never stale)."""
        if self.controller is not None:
            self.cache.controller_id = self.controller.holder

    def _unclean_election(self, topic: str) -> bool:
        value = self.cache.configs.get(topic, {}).get("unclean.leader.election.enable")
        return self.config.unclean_leader_election if value is None else _flag(value)

    # -- what handlers ask -------------------------------------------------------------------------

    def _cached_states(self) -> dict[tuple[str, int], dict]:
        """(the controller's thread) The metadata cache's partition states, copied on the event loop."""
        loop = self.loop
        if loop is None or self._closing:
            return {}

        async def copy() -> dict[tuple[str, int], dict]:
            return self.cache.states()

        return asyncio.run_coroutine_threadsafe(copy(), loop).result(timeout=2)

    async def blocking(self, fn: Callable, *args: Any) -> Any:
        """Run a blocking call (ZooKeeper) off the event loop."""
        assert self.loop is not None
        return await self.loop.run_in_executor(None, fn, *args)

    async def leader_log(
        self, topic: str, partition: int
    ) -> tuple[ErrorCode, PartitionLog | None, PartitionInfo | None]:
        """The local log of a partition this broker leads, or the error to answer."""
        if topic not in self.cache.topics:
            await self.refresh_topic(topic)
        return self.leader_log_now(topic, partition)

    def leader_log_now(self, topic: str, partition: int) -> tuple[ErrorCode, PartitionLog | None, PartitionInfo | None]:
        """`leader_log` without looking in ZooKeeper: a topic not in the metadata cache is unknown."""
        info = self.cache.partition(topic, partition)
        if info is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, None
        if info.leader != self.id:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, None, info
        plog = self.logs.get(topic, partition)
        if plog is None:
            plog = self._replica_log(topic, partition)
            if plog is None:
                return ErrorCode.KAFKA_STORAGE_ERROR, None, info
        return ErrorCode.NONE, plog, info

    def _replica_log(self, topic: str, partition: int) -> PartitionLog | None:
        """The local log of a partition this broker holds a replica of, created if it is new (None when no
        log dir can take it). A log of an earlier topic of the same name is set aside as stray, never reused."""
        try:
            return self.logs.get_or_create(
                topic, partition, lambda: log_config_for(self.config.log, self.cache.configs.get(topic, {})),
                topic_id=self.cache.topic_ids.get(topic),
            )  # fmt: skip
        except OSError as exc:
            log.error("cannot create the log of %s-%d: %s", topic, partition, exc)
            return None

    def write_deferred(self) -> None:
        """Write the appends the Produce handler deferred; the server calls this before it answers or waits.

        A log whose write fails is cut back to what its file holds and its producers' sequences are read
        back from it (the answers are never sent: a retry of a lost batch must not pass for a duplicate);
        its log dir goes offline (retries are answered KAFKA_STORAGE_ERROR); then the OSError goes on.
        """
        if not self.deferred_logs:
            return
        logs, self.deferred_logs = self.deferred_logs, set()
        error: OSError | None = None
        for plog in logs:
            try:
                plog.write_deferred()
            except OSError as exc:
                log.error("writing to %s-%d failed, its unanswered appends are dropped: %s",
                          plog.topic, plog.partition, exc)  # fmt: skip
                self.reload_producer_states(plog)
                self.logs.mark_offline((plog.topic, plog.partition), exc)
                error = exc
        if error is not None:
            raise error

    def _load_producer_states(self) -> None:
        """At start-up: every partition's idempotent producers, from its snapshot and the log after it."""
        started = time.monotonic()
        for tp, plog in self.logs.logs.items():
            try:
                states = load_states(plog)
            except Exception as exc:  # the producers are taken as new: duplicates of retries possible, no loss
                log.error("loading the producers of %s-%d failed (%s): their state is unknown until a restart reads "
                          "the whole log (its snapshots deleted)", tp[0], tp[1], exc)  # fmt: skip
                plog.producer_states = forget_states(plog)
                continue
            plog.producer_states = states
        if time.monotonic() - started > 1:
            log.info("loaded the producers of %d partitions in %.1f s", len(self.logs.logs), time.monotonic() - started)

    def _save_producer_states(self) -> None:
        """At a clean shutdown: a snapshot of the producers at its log end of every partition whose producers
        changed since its last one, without fsync (`LogManager.shutdown` makes the log dir durable at once)."""
        now_ms = int(time.time() * 1000)
        for tp, plog in self.logs.logs.items():
            if not changed(plog.producer_states):
                continue
            try:
                path = take_snapshot(plog, plog.producer_states, now_ms, self.high_watermark(plog), sync=False)
                if path is not None:
                    self.logs.note_unsynced(path)
            except OSError as exc:
                log.warning("writing the producer snapshot of %s-%d failed: %s", tp[0], tp[1], exc)

    def _snapshot_at_roll(self, plog: PartitionLog) -> None:
        """A log rolled: snapshot its producers at the new segment's base (Kafka's onSegmentRoll), so that
        start-up and a truncation read at most the segments after it. The roll comes inside an append whose
        batch may yet fail to be written: the high watermark is only peeked at here, never kept (a kept one
        would count that batch, and stay above the log end once the failed append is dropped)."""
        try:
            take_snapshot(plog, plog.producer_states, int(time.time() * 1000),
                          self.replicas.stable_end((plog.topic, plog.partition), plog))  # fmt: skip
        except OSError as exc:  # (start-up then reads from an older snapshot: slower, as correct)
            log.warning("writing the producer snapshot of %s-%d failed: %s", plog.topic, plog.partition, exc)

    def reload_producer_states(self, plog: PartitionLog, since: int | None = None) -> None:
        """After a write or fsync failed, make a partition's sequence state what its file holds: a retry of
        a batch the file kept is answered as a duplicate, one of a batch it lost is appended. `since`: the
        log end offset before the failed append (its batches may be in the file, unrecorded). If the file
        cannot be read, the state is forgotten (a retry may then be stored twice, but none is lost)."""
        try:
            written = plog.batch_headers_from(since) if since is not None else []
            plog.producer_states.repair(plog.log_end_offset, written)
        except Exception as exc:  # (OSError, or a file shorter than the log thinks)
            log.error("reading back the producers of %s-%d failed (%s): their state is unknown until a restart "
                      "reads the whole log (its snapshots deleted)", plog.topic, plog.partition, exc)  # fmt: skip
            plog.producer_states = forget_states(plog)

    def zookeeper_problem(self) -> str | None:
        """Why a topic change cannot be written now: the ZooKeeper session is down (it would wait for it)."""
        if self.zk is None or not self.zk.connected:
            where = self.config.zookeeper_connect
            return f"broker {self.id} cannot reach ZooKeeper at {where}; try again once it is back"
        return None

    def coordinates(self, group_id: str) -> bool:
        """Whether this broker is the group's coordinator now (not once it is shutting down)."""
        return not self._closing and coordinator_for(group_id, self.cache.brokers) == self.id

    async def load_group(self, group_id: str) -> None:
        """Before a group request to the coordinator: take over the group's stored generation if this
        broker does not know the group (it just became its coordinator, or restarted)."""
        if group_id in self.coordinator.groups or self.zk is None or self.loop is None or self._closing:
            return
        self.coordinator.begin_load(group_id)
        state = None
        try:  # (within a short bound; ZooKeeper unreachable: the group starts afresh, at once)
            state = await self.group_store.load_generation(group_id)
        finally:
            self.coordinator.end_load(group_id, state if self.coordinates(group_id) else None)

    def high_watermark(self, plog: PartitionLog) -> int:
        """The offset below which the partition's ISR holds every record: what consumers may read."""
        return self.replicas.high_watermark((plog.topic, plog.partition), plog)

    def min_insync(self, topic: str) -> int:
        value = self.cache.configs.get(topic, {}).get("min.insync.replicas")
        return int(value) if value is not None else self.config.min_insync_replicas


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


async def _bounded(what: str, step: Awaitable[Any], timeout_s: float) -> None:
    """A step of the shutdown, given up (logged) after `timeout_s`: a stop must end whatever one part waits for."""
    try:
        await asyncio.wait_for(step, timeout_s)
    except TimeoutError:
        log.warning("shutdown: %s took over %g s; going on without it", what, timeout_s)
