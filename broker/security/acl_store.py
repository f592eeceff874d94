"""ACLs in ZooKeeper, as ZooKeeper-mode Kafka stores them (so Kafka's own tools read what kafkactl writes).

Each resource pattern is one znode (paths in `broker.zk.paths`): `/kafka-acl/<ResourceType>/<name>` for a
literal pattern, `/kafka-acl-extended/prefixed/<ResourceType>/<name>` for a prefixed one, holding

    {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"}]}

with Kafka's names (`Topic`, `TransactionalId`; `Read`, `IdempotentWrite`; `Allow`, `Deny`). A change rewrites
the node conditionally on the version it read (retrying when another writer came in between), deletes it
once empty, then announces the pattern with a persistent sequential node: `/kafka-acl-changes/acl_changes_<seq>`
holding `<ResourceType>:<name>` for a literal pattern, `/kafka-acl-extended-changes/acl_changes_<seq>` holding
{"version":1,"resourceType":"TOPIC","name":"...","patternType":"PREFIXED"} for a prefixed one. Every broker
watches both and reloads the patterns they name (`AclWatcher`); notifications older than 15 minutes are
removed, as Kafka's listener does.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.recipe.watchers import ChildrenWatch

from broker.errors import KafkactlError
from broker.security.acl import (
    Binding,
    Entry,
    Filter,
    Operation,
    Pattern,
    PatternType,
    Permission,
    ResourceType,
    camel,
    parse_enum,
)
from broker.zk import paths

log = logging.getLogger(__name__)

#: a change notification older than this is deleted (Kafka's ZkNodeChangeNotificationListener default)
CHANGE_EXPIRY_S = 15 * 60

#: the resource types that have ACL nodes
STORED_TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID,
                ResourceType.DELEGATION_TOKEN)  # fmt: skip

Acls = dict[Pattern, frozenset[Entry]]


class AclStoreError(KafkactlError):
    """An ACL that cannot be stored (a name no znode can have) or a store that kept changing."""


def encode_acls(entries: Iterable[Entry]) -> bytes:
    acls = [{"principal": e.principal, "permissionType": camel(e.permission), "operation": camel(e.operation),
             "host": e.host} for e in sorted(entries, key=_entry_key)]  # fmt: skip
    return paths.dumps({"version": 1, "acls": acls})


def decode_acls(data: bytes | None) -> frozenset[Entry]:
    """The entries of a pattern's node; entries with names this broker does not know are skipped (logged)."""
    obj = paths.loads(data) or {}
    out = set()
    for a in obj.get("acls") or []:
        try:
            out.add(Entry(str(a["principal"]), str(a["host"]), Operation(parse_enum(Operation, a["operation"])),
                          Permission(parse_enum(Permission, a["permissionType"]))))  # fmt: skip
        except (KeyError, ValueError, TypeError) as exc:
            log.warning("skipping an unreadable ACL entry %r: %s", a, exc)
    return frozenset(out)


def encode_change(p: Pattern) -> bytes:
    if p.pattern_type == PatternType.LITERAL:
        return f"{camel(p.resource_type)}:{p.name}".encode()
    return paths.dumps({"version": 1, "resourceType": p.resource_type.name, "name": p.name,
                        "patternType": p.pattern_type.name})  # fmt: skip


def decode_change(data: bytes, prefixed: bool) -> Pattern:
    """The pattern a change notification names; ValueError if it names none."""
    text = data.decode()
    if not prefixed:
        kind, sep, name = text.partition(":")
        if not sep:
            raise ValueError(f"expected ResourceType:name, got {text!r}")
        return Pattern(ResourceType(parse_enum(ResourceType, kind)), name, PatternType.LITERAL)
    try:
        obj = json.loads(text)
        return Pattern(ResourceType(parse_enum(ResourceType, obj["resourceType"])), str(obj["name"]),
                       PatternType(parse_enum(PatternType, obj["patternType"])))  # fmt: skip
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"unreadable ACL change {text!r}: {exc}") from None


def _entry_key(e: Entry) -> tuple:
    return (e.principal, e.host, e.operation, e.permission)


def node(p: Pattern) -> str:
    if p.name in ("", ".", "..") or "/" in p.name:
        raise AclStoreError(f"resource name {p.name!r} cannot be stored in ZooKeeper (no '/', '.' or '..')")
    return paths.acl_resource(camel(p.resource_type), p.name, p.pattern_type == PatternType.PREFIXED)


def load(zk: KazooClient, p: Pattern) -> frozenset[Entry]:
    try:
        data, _ = zk.get(node(p))
    except NoNodeError:
        return frozenset()
    return decode_acls(data)


def load_all(zk: KazooClient) -> Acls:
    """Every stored pattern with its entries."""
    out: Acls = {}
    for prefixed in (False, True):
        pattern_type = PatternType.PREFIXED if prefixed else PatternType.LITERAL
        for rtype in STORED_TYPES:
            try:
                names = zk.get_children(paths.acl_type(camel(rtype), prefixed))
            except NoNodeError:
                continue
            for name in names:
                p = Pattern(rtype, name, pattern_type)
                entries = load(zk, p)
                if entries:
                    out[p] = entries
    return out


def _update(zk: KazooClient, p: Pattern, change: Callable[[frozenset[Entry]], frozenset[Entry]]) -> bool:
    """Apply `change` to a pattern's entries with a conditional write; True if they changed (then announced)."""
    path = node(p)
    for _ in range(20):
        try:
            data, stat = zk.get(path)
            before, version = decode_acls(data), stat.version
        except NoNodeError:
            before, version = frozenset(), -1
        after = change(before)
        if after == before:
            return False
        try:
            if version < 0:
                zk.create(path, encode_acls(after), makepath=True)
            elif after:
                zk.set(path, encode_acls(after), version=version)
            else:
                zk.delete(path, version=version)
        except (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError):
            continue  # another writer came in between: decide again on what it wrote
        prefixed = p.pattern_type == PatternType.PREFIXED
        zk.create(paths.acl_change(prefixed), encode_change(p), sequence=True, makepath=True)
        return True
    raise AclStoreError(f"the ACLs of {p} kept changing: try again")


def add(zk: KazooClient, bindings: Iterable[Binding]) -> None:
    """Store bindings (those already there are kept once)."""
    by_pattern: dict[Pattern, set[Entry]] = {}
    for b in bindings:
        by_pattern.setdefault(b.pattern, set()).add(b.entry)
    for p, entries in by_pattern.items():
        _update(zk, p, lambda before, entries=entries: before | entries)


def remove(zk: KazooClient, filters: list[Filter]) -> list[list[Binding]]:
    """Remove what each filter matches; the bindings each removed (a binding matched by several filters is
    reported by each, as Kafka does)."""
    stored = load_all(zk)
    found: list[list[Binding]] = [[Binding(p, e) for p, es in stored.items() for e in sorted(es, key=_entry_key)
                                   if f.matches(Binding(p, e))] for f in filters]  # fmt: skip
    for p in {b.pattern for bs in found for b in bs}:

        def kept(before: frozenset[Entry], p: Pattern = p) -> frozenset[Entry]:
            return frozenset(e for e in before if not any(f.matches(Binding(p, e)) for f in filters))

        _update(zk, p, kept)
    return found


def describe(acls: Acls, f: Filter) -> list[Binding]:
    return [Binding(p, e) for p, es in acls.items() for e in sorted(es, key=_entry_key) if f.matches(Binding(p, e))]


class AclWatcher:
    """Keeps `acls` current from ZooKeeper: a full load at start, then the patterns the change notifications
    name. `on_change(acls)` gets each new mapping (a fresh dict: readers never see one half-updated)."""

    def __init__(self, zk: KazooClient, on_change: Callable[[Acls], None]) -> None:
        self.zk = zk
        self.on_change = on_change
        self.acls: Acls = {}
        self._seen: dict[bool, str] = {}  # the last notification handled, by prefixed
        self._lock = threading.Lock()
        self._stopped = False

    def start(self) -> None:
        for prefixed in (False, True):
            self.zk.ensure_path(paths.acl_change_root(prefixed))
            children = sorted(self.zk.get_children(paths.acl_change_root(prefixed)))
            self._seen[prefixed] = children[-1] if children else ""
        self.acls = load_all(self.zk)
        self.on_change(self.acls)
        for prefixed in (False, True):
            ChildrenWatch(self.zk, paths.acl_change_root(prefixed),
                          lambda children, prefixed=prefixed: self._changed(prefixed, children))  # fmt: skip

    def stop(self) -> None:
        self._stopped = True

    def reload(self, patterns: Iterable[Pattern]) -> None:
        """Read these patterns again now (after this broker changed them: its next answer sees the change)."""
        with self._lock:
            acls = dict(self.acls)
            for p in patterns:
                entries = load(self.zk, p)
                if entries:
                    acls[p] = entries
                else:
                    acls.pop(p, None)
            self.acls = acls
        self.on_change(acls)

    def _changed(self, prefixed: bool, children: list[str]) -> bool | None:
        if self._stopped:
            return False
        try:
            self._process(prefixed, children)
        except Exception as exc:  # (the session dropping under the callback): the next change reloads
            log.warning("reading ACL changes failed: %s", str(exc) or type(exc).__name__)
        return None

    def _process(self, prefixed: bool, children: list[str]) -> None:
        root = paths.acl_change_root(prefixed)
        with self._lock:
            new = sorted(c for c in children if c > self._seen[prefixed])
            if not new:
                return
            acls = dict(self.acls)
            for child in new:
                try:
                    data, stat = self.zk.get(f"{root}/{child}")
                    p = decode_change(data, prefixed)
                except NoNodeError:
                    continue
                except ValueError as exc:
                    log.warning("ignoring ACL change %s: %s", child, exc)
                    continue
                entries = load(self.zk, p)
                if entries:
                    acls[p] = entries
                else:
                    acls.pop(p, None)
                if stat.ctime / 1000 < time.time() - CHANGE_EXPIRY_S:
                    try:
                        self.zk.delete(f"{root}/{child}")
                    except NoNodeError:
                        pass
            self._seen[prefixed] = new[-1]
            self.acls = acls
        self.on_change(acls)
