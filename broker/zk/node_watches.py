"""Data watches on many znodes, armed with pipelined reads: what kazoo's `DataWatch` does for one znode, without
a synchronous `get` (and a session listener) per znode.

A watch is set by `get_async(path, watch=...)`; when it fires, the znode is read again the same way (which
sets the next watch) and the new data goes to `on_change`, in batches. kazoo forgets its watches when the
connection drops, so after a reconnect the owner calls `rearm()`, which reads every watched znode again (one
pipelined pass) and reports them all. A znode deleted, or deleted and created again (another `czxid`: another
incarnation, say a topic of the same name), stops being watched: its owner learns of that through its own
watch on the parent and calls `watch()` again.

Unarmed (`armed=False`), no ZooKeeper watch is set: the owner learns of changes another way (the broker's
state-change notifications) and calls `reread(paths)`, which reads those znodes in one pipelined pass and reports
what is newer, with the same incarnation and ordering rules. Thousands of data watches cost ZooKeeper a
notification and a read each per broker; one read pass per batch of changes costs a round trip.

Reads and their reports are ordered: a change seen while `watch()` reads the same znode is folded into what
`watch()` returns (and reports through `then`), never reported before it, so an owner that applies what
`watch()` returned cannot overwrite a newer change with an older read; and a change is reported only if it is
newer (by `mzxid`) than the last one reported or returned for its key.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, Generic, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import EventType, WatchedEvent, ZnodeStat

from broker.zk.batch import Node, get_many

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)


class NodeWatches(Generic[K]):
    """Watches on znodes, each under a key of the owner's. `on_change(changes)` gets [(key, data, stat)] on
    kazoo's threads: it must not block (hand the work to the event loop)."""

    def __init__(self, zk: KazooClient, on_change: Callable[[list[tuple[K, bytes, Any]]], None], *,
                 armed: bool = True) -> None:  # fmt: skip
        self._zk = zk
        self._on_change = on_change
        self._armed = armed
        self._lock = threading.Lock()
        self._keys: dict[K, tuple[str, int, int]] = {}  # key -> (path, czxid of the znode watched, last mzxid told)
        self._paths: dict[str, K] = {}
        self._arming: dict[K, int] = {}  # key -> watch() calls reading it now
        self._held: dict[K, Node] = {}  # changes seen while a watch() reads the key (folded into its result)
        self.closed = False

    def __len__(self) -> int:
        return len(self._keys)

    def keys(self) -> list[K]:
        with self._lock:
            return list(self._keys)

    def watch(self, nodes: Mapping[K, str], then: Callable[[dict[K, Node | None]], None] | None = None
              ) -> dict[K, Node | None]:  # fmt: skip
        """Watch each znode (again: a key may be watched already, or name a new incarnation of its znode) and
        return its (data, stat), None when it does not exist (then it is not watched). Blocking (one pipelined
        pass); `then(result)` runs before any change seen after the reads is reported."""
        keys = list(nodes)
        with self._lock:
            for key in keys:
                self._arming[key] = self._arming.get(key, 0) + 1
                self._claim(nodes[key], key)
        try:
            found = get_many(
                self._zk, [nodes[k] for k in keys], watch=self._fired if self._armed else None, stop=self._stopped
            )
        except BaseException:
            with self._lock:
                for key in keys:
                    if key not in self._keys and self._paths.get(nodes[key]) == key:
                        del self._paths[nodes[key]]
                self._disarm(keys)
            raise
        with self._lock:
            out: dict[K, Node | None] = {}
            for key, node in zip(keys, found, strict=True):
                held = self._held.get(key)
                if node is not None and held is not None and held[1].czxid == node[1].czxid \
                        and held[1].mzxid > node[1].mzxid:  # fmt: skip
                    node = held
                out[key] = node
                if node is None:
                    self._forget(key)
                    if self._paths.get(nodes[key]) == key:
                        del self._paths[nodes[key]]
                elif self._paths.get(nodes[key]) == key:
                    self._keys[key] = (nodes[key], node[1].czxid, node[1].mzxid)
            self._disarm(keys)
            if then is not None:
                then(out)
        return out

    def unwatch(self, keys: Iterable[K]) -> None:
        """Stop reporting these keys (ZooKeeper's one-shot watch left on each goes off unheard)."""
        with self._lock:
            for key in keys:
                self._forget(key)

    def reread(self, paths: Iterable[str]) -> None:
        """Read these znodes again (those watched; one pipelined pass) and report what is newer than what was
        reported for each. Blocking."""
        with self._lock:
            keyed = [(path, self._paths[path]) for path in dict.fromkeys(paths) if path in self._paths]
        if not keyed:
            return
        found = get_many(
            self._zk, [path for path, _ in keyed], watch=self._fired if self._armed else None, stop=self._stopped
        )
        with self._lock:
            changes = [c for (path, key), node in zip(keyed, found, strict=True) if (c := self._newer(key, path, node))]
            if changes:
                self._on_change(changes)

    def tell(self, changes: Iterable[tuple[K, str, bytes, int, int]]) -> list[str]:
        """Report changes learnt without reading: (key, path, data, zxid it was written at, its version), in
        zxid order, each if it is newer than what was reported for its key, for the incarnation watched (one
        created before that zxid). Returns the paths it cannot place (a key not watched for that path, or being
        read by `watch()`): the caller reads those (`reread`)."""
        unplaced: list[str] = []
        with self._lock:
            out: list[tuple[K, bytes, Any]] = []
            for key, path, data, zxid, version in changes:
                known = self._keys.get(key)
                if self.closed or known is None or known[0] != path or key in self._arming:
                    unplaced.append(path)
                elif known[1] < zxid and known[2] < zxid:  # (not an older write, nor one of an earlier incarnation)
                    self._keys[key] = (path, known[1], zxid)
                    out.append((key, data, _told_stat(known[1], zxid, version, len(data))))
            if out:
                self._on_change(out)
        return unplaced

    def rearm(self) -> None:
        """After a reconnect: read every watched znode again (setting its watch) and report them all."""
        with self._lock:
            nodes = {key: known[0] for key, known in self._keys.items()}
        if not nodes:
            return

        def report(found: dict[K, Node | None]) -> None:
            changes = [(key, node[0], node[1]) for key, node in found.items() if node is not None]
            if changes:
                self._on_change(changes)

        self.watch(nodes, then=report)

    def _stopped(self) -> bool:
        return self.closed

    # -- kazoo's threads ----------------------------------------------------------------------------

    def _fired(self, event: WatchedEvent) -> None:
        if event.type == EventType.NONE or self.closed:
            return  # the connection dropped: kazoo forgot its watches, `rearm()` sets them again
        with self._lock:
            key = self._paths.get(event.path)
        if key is None:
            return
        self._zk.get_async(event.path, watch=self._fired).rawlink(lambda result: self._read(key, event.path, result))

    def _read(self, key: K, path: str, result: Any) -> None:
        try:
            node = result.get(block=False)
        except NoNodeError:
            node = None
        except Exception as exc:  # noqa: BLE001 - the connection dropped: `rearm()` reads it again
            log.debug("reading %s failed: %s", path, type(exc).__name__)
            return
        with self._lock:
            change = self._newer(key, path, node)
            if change is not None:
                self._on_change([change])

    def _newer(self, key: K, path: str, node: Node | None) -> tuple[K, bytes, Any] | None:
        """(under the lock) What a fresh read of `key`'s znode has to report: the change if it is newer than the
        last one reported for the same incarnation; None otherwise (a deleted znode is no longer watched)."""
        known = self._keys.get(key)
        if self.closed or (known is not None and known[0] != path):
            return None
        if node is None:
            self._forget(key)
            return None
        data, stat = node
        if key in self._arming:  # a watch() is reading it: its result carries this change
            held = self._held.get(key)
            if held is None or held[1].mzxid < stat.mzxid:
                self._held[key] = (data, stat)
            return None
        if known is None:
            return None
        if known[1] != stat.czxid:  # deleted and made again: not the znode this key watched
            self._forget(key)
            return None
        if stat.mzxid <= known[2]:  # (a read issued before the one its owner has: nothing newer)
            return None
        self._keys[key] = (path, known[1], stat.mzxid)
        return key, data, stat

    def _claim(self, path: str, key: K) -> None:
        """`path` is watched under `key` now (a key that named it before, for an older incarnation, is dropped)."""
        old = self._paths.get(path)
        if old is not None and old != key:
            self._keys.pop(old, None)
        self._paths[path] = key

    def _forget(self, key: K) -> None:
        known = self._keys.pop(key, None)
        if known is not None and self._paths.get(known[0]) == key:
            del self._paths[known[0]]

    def _disarm(self, keys: Iterable[K]) -> None:
        for key in keys:
            n = self._arming.get(key, 0) - 1
            if n > 0:
                self._arming[key] = n
            else:
                self._arming.pop(key, None)
                self._held.pop(key, None)


def _told_stat(czxid: int, mzxid: int, version: int, length: int) -> ZnodeStat:
    """The stat a read would have given for a change told by `NodeWatches.tell` (what it does not know: 0)."""
    return ZnodeStat(czxid, mzxid, 0, 0, version, 0, 0, 0, length, 0, 0)
