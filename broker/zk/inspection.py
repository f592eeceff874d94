"""Reading ZooKeeper for people: znode data and stats, trees, the registries, and watching them change.

Everything here only reads (and sets watches). Results are plain dataclasses with `to_dict()` for JSON;
`follow()` yields a fresh result every time a znode the read touched changes.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar, cast

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.protocol.states import ZnodeStat

from broker.errors import KafkactlError, UsageError
from broker.zk import consumers, paths, registry

T = TypeVar("T")

SECTIONS = ("brokers", "topics", "controller", "groups")

Section = Literal["brokers", "topics", "controller", "groups"]


class NoZnodeError(KafkactlError):
    """The znode a command names does not exist."""


# --- pure conversions ------------------------------------------------------------------------------


def normalize_path(path: str) -> str:
    """An absolute znode path without a trailing slash; UsageError for anything ZooKeeper would refuse."""
    if not path.startswith("/"):
        raise UsageError(f"{path!r}: a znode path starts with '/'")
    trimmed = path.rstrip("/") or "/"
    if trimmed != "/" and any(part in ("", ".", "..") for part in trimmed[1:].split("/")):
        raise UsageError(f"{path!r}: not a valid znode path (empty, '.' or '..' component)")
    if "\x00" in trimmed:
        raise UsageError(f"{path!r}: not a valid znode path (NUL character)")
    return trimmed


def child_path(parent: str, name: str) -> str:
    """The path of child `name` of `parent`."""
    return f"/{name}" if parent == "/" else f"{parent}/{name}"


def session_hex(session_id: int) -> str | None:
    """A session id as ZooKeeper prints it (`0x…`, unsigned), or None for 0 (a persistent znode)."""
    if not session_id:
        return None
    return f"0x{session_id & 0xFFFF_FFFF_FFFF_FFFF:x}"


def iso_ms(epoch_ms: int | str | None) -> str | None:
    """Epoch milliseconds as an ISO-8601 UTC time with milliseconds; None for none or unparsable."""
    try:
        ms = int(epoch_ms)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class NodeStat:
    """A znode's stat, with times as ISO strings and the owner session in hex."""

    czxid: int
    mzxid: int
    pzxid: int
    ctime: str | None
    mtime: str | None
    version: int
    cversion: int
    aversion: int
    ephemeral_owner: str | None
    data_length: int
    num_children: int

    @property
    def ephemeral(self) -> bool:
        """True for an ephemeral znode (one owned by a session)."""
        return self.ephemeral_owner is not None

    def to_dict(self) -> dict[str, Any]:
        """ZooKeeper's own field names (camelCase), as zkCli prints them."""
        return {
            "czxid": self.czxid, "mzxid": self.mzxid, "pzxid": self.pzxid, "ctime": self.ctime, "mtime": self.mtime,
            "version": self.version, "cversion": self.cversion, "aversion": self.aversion,
            "ephemeralOwner": self.ephemeral_owner, "dataLength": self.data_length, "numChildren": self.num_children,
        }  # fmt: skip


def node_stat(stat: ZnodeStat) -> NodeStat:
    """A kazoo ZnodeStat as a NodeStat."""
    return NodeStat(
        czxid=stat.czxid, mzxid=stat.mzxid, pzxid=stat.pzxid, ctime=iso_ms(stat.ctime), mtime=iso_ms(stat.mtime),
        version=stat.version, cversion=stat.cversion, aversion=stat.aversion,
        ephemeral_owner=session_hex(stat.ephemeralOwner), data_length=stat.dataLength, num_children=stat.numChildren,
    )  # fmt: skip


DataFormat = Literal["empty", "json", "text", "binary"]


@dataclass(frozen=True)
class NodeData:
    """A znode's data, decoded as far as it goes: JSON, else UTF-8 text, else binary (see `decode_data`)."""

    raw: bytes
    format: DataFormat
    text: str | None  # the UTF-8 text, None for binary data
    value: Any = None  # the parsed JSON, when format is "json"

    def pretty(self) -> str:
        """For people: indented JSON, the text itself, or hex for binary data."""
        if self.format == "json":
            return json.dumps(self.value, indent=2, ensure_ascii=False)
        if self.format == "binary":
            return self.raw.hex(" ")
        return self.text or ""

    def to_dict(self) -> dict[str, Any]:
        """`data` as text (or base64 when binary) with its `encoding`, the parsed `json` when it is JSON."""
        out: dict[str, Any] = {"format": self.format}
        if self.text is None:
            out.update(encoding="base64", data=base64.b64encode(self.raw).decode("ascii"))
        else:
            out.update(encoding="utf-8", data=self.text)
        if self.format == "json":
            out["json"] = self.value
        return out


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def decode_data(raw: bytes | None) -> NodeData:
    """Classify and decode a znode's bytes once: empty, JSON, other UTF-8 text, or binary."""
    raw = bytes(raw or b"")
    if not raw:
        return NodeData(raw, "empty", "")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return NodeData(raw, "binary", None)
    try:
        return NodeData(raw, "json", text, json.loads(text, parse_constant=_not_json))
    except ValueError:
        return NodeData(raw, "text", text)


# --- single znodes ---------------------------------------------------------------------------------


def _no_znode(zk: KazooClient, path: str) -> NoZnodeError:
    """The error for a missing znode; a missing root means the connect string's chroot does not exist."""
    chroot = getattr(zk, "chroot", "") or ""
    if path == "/" and chroot:
        return NoZnodeError(f"no znode / (the chroot {chroot} does not exist)")
    return NoZnodeError(f"no znode {path}")


@dataclass(frozen=True)
class Znode:
    """One znode: path, data and stat."""

    path: str
    data: NodeData
    stat: NodeStat

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of `zk get`."""
        return {"path": self.path, **self.data.to_dict(), "stat": self.stat.to_dict()}


def get_node(zk: KazooClient, path: str) -> Znode:
    """A znode's data and stat (watching its data and children); NoZnodeError when it does not exist."""
    path = normalize_path(path)
    try:
        data, stat = zk.get(path)
        zk.get_children(path)  # a children watch too: numChildren and cversion are shown
    except NoNodeError:
        raise _no_znode(zk, path) from None
    except NoAuthError:
        raise KafkactlError(f"not allowed to read {path} (ZooKeeper ACL)") from None
    return Znode(path, decode_data(data), node_stat(stat))


@dataclass(frozen=True)
class Listing:
    """A znode's children, sorted."""

    path: str
    children: list[str]

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of `zk ls`."""
        return {"path": self.path, "children": self.children}


def list_children(zk: KazooClient, path: str) -> Listing:
    """The sorted children of a znode; NoZnodeError when it does not exist."""
    path = normalize_path(path)
    try:
        return Listing(path, sorted(zk.get_children(path)))
    except NoNodeError:
        raise _no_znode(zk, path) from None
    except NoAuthError:
        raise KafkactlError(f"not allowed to list {path} (ZooKeeper ACL)") from None


# --- trees -----------------------------------------------------------------------------------------


@dataclass
class TreeNode:
    """A znode in a tree walk; `truncated` when it has children the depth limit left out."""

    name: str
    path: str
    ephemeral_owner: str | None
    num_children: int
    children: list[TreeNode] = field(default_factory=list)
    truncated: bool = False

    @property
    def ephemeral(self) -> bool:
        """True for an ephemeral znode."""
        return self.ephemeral_owner is not None

    def to_dict(self) -> dict[str, Any]:
        """Nested JSON: name, path, ephemeral, ephemeralOwner, numChildren, truncated, children."""
        return {
            "name": self.name, "path": self.path, "ephemeral": self.ephemeral, "ephemeralOwner": self.ephemeral_owner,
            "numChildren": self.num_children, "truncated": self.truncated,
            "children": [c.to_dict() for c in self.children],
        }  # fmt: skip


def tree(zk: KazooClient, path: str = "/", depth: int | None = None) -> TreeNode:
    """The znodes under `path`, `depth` levels deep (all when None), read level by level with pipelined calls."""
    path = normalize_path(path)
    if depth is not None and depth < 0:
        raise UsageError(f"--depth {depth}: must be 0 or more")
    stat = zk.exists(path)
    if stat is None:
        raise _no_znode(zk, path)
    root = TreeNode(path.rsplit("/", 1)[-1] or "/", path, session_hex(stat.ephemeralOwner), stat.numChildren)
    level, d = [root], 0
    while level:
        if depth is not None and d >= depth:
            for node in level:
                node.truncated = node.num_children > 0
            break
        listings = [(node, zk.get_children_async(node.path)) for node in level]
        level = []
        for node, pending in listings:
            try:
                names = sorted(pending.get())
            except NoNodeError:  # deleted while walking (its parent's watch notices)
                names = []
            probes = [(name, zk.exists_async(child_path(node.path, name))) for name in names]
            for name, probe in probes:
                child_stat = probe.get()
                if child_stat is None:
                    continue
                child = TreeNode(name, child_path(node.path, name), session_hex(child_stat.ephemeralOwner),
                                 child_stat.numChildren)  # fmt: skip
                node.children.append(child)
                level.append(child)
            node.num_children = len(node.children)
        d += 1
    return root


def count_nodes(node: TreeNode) -> int:
    """How many znodes a tree shows."""
    return 1 + sum(count_nodes(c) for c in node.children)


# --- the registries --------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerEntry:
    """A live broker's registration (`/brokers/ids/<id>`)."""

    id: int
    host: str
    port: int
    rack: str | None
    endpoints: list[str]
    session: str | None
    registered: str | None

    @property
    def endpoint(self) -> str:
        """`host:port` of the PLAINTEXT listener."""
        return f"{self.host}:{self.port}"

    def to_dict(self) -> dict[str, Any]:
        """JSON of one broker."""
        return {"id": self.id, "endpoint": self.endpoint, "host": self.host, "port": self.port, "rack": self.rack,
                "endpoints": self.endpoints, "session": self.session, "registered": self.registered}  # fmt: skip


@dataclass(frozen=True)
class PartitionEntry:
    """A partition's assignment (replicas) and state (leader, ISR); leader None when no state znode exists."""

    partition: int
    replicas: list[int]
    leader: int | None
    leader_epoch: int | None
    isr: list[int]
    controller_epoch: int | None

    def to_dict(self) -> dict[str, Any]:
        """JSON of one partition."""
        return {
            "partition": self.partition, "replicas": self.replicas, "leader": self.leader,
            "leader_epoch": self.leader_epoch, "isr": self.isr, "controller_epoch": self.controller_epoch,
        }  # fmt: skip


@dataclass(frozen=True)
class TopicEntry:
    """A topic's partitions, from `/brokers/topics/<t>` and its partition state znodes."""

    name: str
    partitions: list[PartitionEntry]

    def to_dict(self) -> dict[str, Any]:
        """JSON of one topic."""
        return {"topic": self.name, "partitions": [p.to_dict() for p in self.partitions]}


@dataclass(frozen=True)
class ControllerEntry:
    """Who is controller (`/controller`, None when nobody) and the controller epoch (`/controller_epoch`)."""

    broker_id: int | None
    epoch: int | None
    session: str | None
    since: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON of the controller."""
        return {"broker_id": self.broker_id, "epoch": self.epoch, "session": self.session, "since": self.since}


@dataclass(frozen=True)
class GroupPartition:
    """One topic-partition of a group: its owner (ownership registry) and committed offset (offset registry)."""

    topic: str
    partition: int
    owner: str | None
    offset: int | None
    committed: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON of one group partition."""
        return {"topic": self.topic, "partition": self.partition, "owner": self.owner, "offset": self.offset,
                "committed": self.committed}  # fmt: skip


@dataclass(frozen=True)
class GroupEntry:
    """A consumer group under `/consumers`: live consumers (`ids/`), owners and committed offsets."""

    name: str
    kind: Literal["zookeeper", "broker"]
    members: dict[str, list[str]]
    partitions: list[GroupPartition]

    def to_dict(self) -> dict[str, Any]:
        """JSON of one group."""
        return {
            "group": self.name, "kind": self.kind,
            "members": [{"id": m, "subscription": t} for m, t in self.members.items()],
            "partitions": [p.to_dict() for p in self.partitions],
        }  # fmt: skip


@dataclass(frozen=True)
class Registries:
    """The registries a `zk registries` shows; a section not asked for is None."""

    brokers: list[BrokerEntry] | None = None
    topics: list[TopicEntry] | None = None
    controller: ControllerEntry | None = None
    groups: list[GroupEntry] | None = None
    sections: tuple[str, ...] = SECTIONS

    def to_dict(self) -> dict[str, Any]:
        """One JSON document with a key per section asked for."""
        out: dict[str, Any] = {}
        if "brokers" in self.sections:
            out["brokers"] = [b.to_dict() for b in self.brokers or []]
        if "topics" in self.sections:
            out["topics"] = [t.to_dict() for t in self.topics or []]
        if "controller" in self.sections:
            out["controller"] = self.controller.to_dict() if self.controller else None
        if "groups" in self.sections:
            out["groups"] = [g.to_dict() for g in self.groups or []]
        return out


def _children(zk: KazooClient, path: str) -> list[str]:
    try:
        return sorted(zk.get_children(path))
    except NoNodeError:
        return []


def brokers(zk: KazooClient) -> list[BrokerEntry]:
    """The broker registry: every live `/brokers/ids/<id>` with its endpoint and owning session."""
    out = []
    for broker_id in sorted(int(c) for c in _children(zk, paths.BROKER_IDS) if c.isdigit()):
        try:
            data, stat = zk.get(paths.broker(broker_id))
        except NoNodeError:
            continue
        host, port, rack, _ = registry.parse_registration(data)  # (a broker without PLAINTEXT: its first)
        obj = _json_object(data)
        out.append(BrokerEntry(broker_id, host, port, rack, [str(e) for e in obj.get("endpoints") or []],
                               session_hex(stat.ephemeralOwner), iso_ms(obj.get("timestamp"))))  # fmt: skip
    return out


def topics(zk: KazooClient) -> list[TopicEntry]:
    """Every topic's partitions: replicas from the assignment, leader and ISR from the partition states."""
    out = []
    for name in registry.topic_names(zk):
        assignment = registry.assignment(zk, name)
        if assignment is None:
            continue  # deleted meanwhile
        parts = []
        for p, replicas in sorted(assignment.items()):
            state = registry.partition_state(zk, name, p) or {}
            parts.append(PartitionEntry(p, replicas, _int(state.get("leader")), _int(state.get("leader_epoch")),
                                        [int(b) for b in state.get("isr") or []],
                                        _int(state.get("controller_epoch"))))  # fmt: skip
        out.append(TopicEntry(name, parts))
    return out


def controller(zk: KazooClient) -> ControllerEntry:
    """The controller's broker id, session and since when, and the controller epoch."""
    broker_id = session = since = None
    try:
        data, stat = zk.get(paths.CONTROLLER)
        obj = _json_object(data)
        broker_id, since = _int(obj.get("brokerid")), iso_ms(obj.get("timestamp"))
        session = session_hex(stat.ephemeralOwner)
    except NoNodeError:
        pass
    try:
        data, _ = zk.get(paths.CONTROLLER_EPOCH)
        epoch = _int((data or b"").decode("utf-8", "replace").strip())
    except NoNodeError:
        epoch = None
    return ControllerEntry(broker_id, epoch, session, since)


def groups(zk: KazooClient) -> list[GroupEntry]:
    """Every group under `/consumers`: its live consumers, partition owners and committed offsets."""
    out = []
    for name in consumers.groups(zk):
        kind: Literal["zookeeper", "broker"] = "zookeeper" if consumers.is_zookeeper_group(zk, name) else "broker"
        owners = consumers.owners(zk, name)
        committed = consumers.committed(zk, name)
        parts = [
            GroupPartition(t, p, owners.get((t, p)), committed[(t, p)].offset if (t, p) in committed else None,
                           iso_ms(committed[(t, p)].mtime_ms) if (t, p) in committed else None)
            for t, p in sorted(set(owners) | set(committed))
        ]  # fmt: skip
        out.append(GroupEntry(name, kind, consumers.members(zk, name), parts))
    return out


def registries(zk: KazooClient, only: Iterable[str] | None = None) -> Registries:
    """The sections asked for (all when `only` is empty), read from ZooKeeper."""
    chosen = tuple(s for s in SECTIONS if not only or s in set(only))
    unknown = set(only or ()) - set(SECTIONS)
    if unknown:
        raise UsageError(f"--only {sorted(unknown)[0]}: pick from {', '.join(SECTIONS)}")
    return Registries(
        brokers=brokers(zk) if "brokers" in chosen else None,
        topics=topics(zk) if "topics" in chosen else None,
        controller=controller(zk) if "controller" in chosen else None,
        groups=groups(zk) if "groups" in chosen else None,
        sections=chosen,
    )


def _json_object(data: bytes | None) -> dict[str, Any]:
    try:
        obj = paths.loads(data)
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _int(value: Any) -> int | None:
    try:
        return None if value is None or value == "" else int(value)
    except (TypeError, ValueError):
        return None


# --- watching --------------------------------------------------------------------------------------


class _Watching:
    """A KazooClient stand-in whose reads leave `on_change` as a watch on every znode they touch.

    A read of a missing znode leaves an exists watch instead, so its creation counts as a change too.
    Anything else is passed through to the real client.
    """

    def __init__(self, zk: KazooClient, on_change: Callable[[Any], None]) -> None:
        self._zk = zk
        self._on_change = on_change

    def _missing(self, path: str) -> None:
        if self._zk.exists(path, watch=self._on_change) is not None:
            self._on_change(None)  # created between the two calls: read again

    def get(self, path: str, watch: Any = None) -> tuple[bytes, ZnodeStat]:
        try:
            return self._zk.get(path, watch=self._on_change)
        except NoNodeError:
            self._missing(path)
            raise

    def get_children(self, path: str, watch: Any = None, include_data: bool = False) -> Any:
        try:
            return self._zk.get_children(path, watch=self._on_change, include_data=include_data)
        except NoNodeError:
            self._missing(path)
            raise

    def exists(self, path: str, watch: Any = None) -> ZnodeStat | None:
        return self._zk.exists(path, watch=self._on_change)

    def get_children_async(self, path: str, watch: Any = None, include_data: bool = False) -> Any:
        return self._zk.get_children_async(path, watch=self._on_change, include_data=include_data)

    def exists_async(self, path: str, watch: Any = None) -> Any:
        return self._zk.exists_async(path, watch=self._on_change)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._zk, name)


def follow(
    zk: KazooClient,
    read: Callable[[KazooClient], T],
    *,
    on_error: Callable[[KafkactlError], None] | None = None,
    settle_s: float = 0.05,
) -> Iterator[T]:
    """Yield `read(zk)` now, then again after every change to a znode that read touched (until closed).

    A KafkactlError of the first read propagates; later ones go to `on_error` (when given) and the
    watch goes on. A reconnection also triggers a read, as watches may have been lost with a session.
    """
    changed = threading.Event()

    def on_change(_event: Any) -> None:
        changed.set()

    def on_state(state: str) -> None:
        if state == KazooState.CONNECTED:
            changed.set()

    watching = cast(KazooClient, _Watching(zk, on_change))
    zk.add_listener(on_state)
    first = True
    try:
        while True:
            changed.clear()
            try:
                result = read(watching)
            except KafkactlError as exc:
                if first or on_error is None:
                    raise
                on_error(exc)
            else:
                yield result
            first = False
            while not changed.wait(0.5):
                pass
            time.sleep(settle_s)  # let a burst of changes land before reading again
    finally:
        zk.remove_listener(on_state)
