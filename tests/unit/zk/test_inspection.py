"""Pure logic of broker.zk.inspection: conversions, JSON shapes, the tree walk and the registries over a fake
ZooKeeper, and `follow()`'s watch loop."""

from __future__ import annotations

import base64
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooState
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import ZnodeStat

from broker.errors import KafkactlError, UsageError
from broker.zk import consumers, inspection, paths, registry
from broker.zk.inspection import NoZnodeError

# --- a fake ZooKeeper (pure logic only: the integration tests use a real server) -------------------


class _Done:
    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn = fn

    def get(self) -> Any:
        return self._fn()


class FakeZk:
    """Just enough of KazooClient: znodes in a dict, watches fired on set/create/delete."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, int]] = {"/": (b"", 0)}
        self.mtimes: dict[str, int] = {}
        self.data_watches: dict[str, list[Callable]] = defaultdict(list)
        self.child_watches: dict[str, list[Callable]] = defaultdict(list)
        self.listeners: list[Callable] = []
        self.client_id = (0x1234, b"")
        self.zxid = 0

    # writes
    def create(self, path: str, data: bytes = b"", ephemeral: bool = False, makepath: bool = False) -> None:
        parent = path.rsplit("/", 1)[0] or "/"
        if parent not in self.nodes:
            if not makepath:
                raise NoNodeError(parent)
            self.create(parent, makepath=True)
        self.nodes[path] = (data, self.client_id[0] if ephemeral else 0)
        self._touch(path)
        self._fire(self.data_watches, path)
        self._fire(self.child_watches, parent)

    def ensure_path(self, path: str, acl: object = None) -> None:
        if path not in self.nodes:
            self.create(path, makepath=True)

    def set(self, path: str, data: bytes) -> None:
        if path not in self.nodes:
            raise NoNodeError(path)
        self.nodes[path] = (data, self.nodes[path][1])
        self._touch(path)
        self._fire(self.data_watches, path)

    def delete(self, path: str, recursive: bool = False) -> None:
        for p in sorted((p for p in self.nodes if p == path or p.startswith(path + "/")), reverse=True):
            del self.nodes[p]
            self._fire(self.data_watches, p)
            self._fire(self.child_watches, p)
        self._fire(self.child_watches, path.rsplit("/", 1)[0] or "/")

    def _touch(self, path: str) -> None:
        self.zxid += 1
        self.mtimes[path] = 1_700_000_000_000 + self.zxid

    @staticmethod
    def _fire(watches: dict[str, list[Callable]], path: str) -> None:
        for fn in watches.pop(path, []):
            fn(None)

    # reads
    def _kids(self, path: str) -> list[str]:
        prefix = "/" if path == "/" else path + "/"
        return [
            p[len(prefix) :] for p in self.nodes if p != path and p.startswith(prefix) and "/" not in p[len(prefix) :]
        ]

    def _stat(self, path: str) -> ZnodeStat:
        data, owner = self.nodes[path]
        mtime = self.mtimes.get(path, 1_700_000_000_000)
        kids = len(self._kids(path))
        return ZnodeStat(czxid=1, mzxid=2, ctime=1_700_000_000_000, mtime=mtime, version=0, cversion=0, aversion=0,
                         ephemeralOwner=owner, dataLength=len(data), numChildren=kids, pzxid=3)  # fmt: skip

    def get(self, path: str, watch: Callable | None = None) -> tuple[bytes, ZnodeStat]:
        if path not in self.nodes:
            raise NoNodeError(path)
        if watch:
            self.data_watches[path].append(watch)
        return self.nodes[path][0], self._stat(path)

    def get_children(self, path: str, watch: Callable | None = None, include_data: bool = False) -> list[str]:
        if path not in self.nodes:
            raise NoNodeError(path)
        if watch:
            self.child_watches[path].append(watch)
        return self._kids(path)

    def exists(self, path: str, watch: Callable | None = None) -> ZnodeStat | None:
        if watch:
            self.data_watches[path].append(watch)
        return self._stat(path) if path in self.nodes else None

    def get_children_async(self, path: str, watch: Callable | None = None, include_data: bool = False) -> _Done:
        return _Done(lambda: self.get_children(path, watch))

    def exists_async(self, path: str, watch: Callable | None = None) -> _Done:
        return _Done(lambda: self.exists(path, watch))

    def add_listener(self, fn: Callable) -> None:
        self.listeners.append(fn)

    def remove_listener(self, fn: Callable) -> None:
        self.listeners.remove(fn)


@pytest.fixture
def fake() -> FakeZk:
    return FakeZk()


# --- conversions -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("given", "expected"), [("/", "/"), ("/a", "/a"), ("/a/b/", "/a/b"), ("//", "/")])
def test_normalize_path(given: str, expected: str) -> None:
    assert inspection.normalize_path(given) == expected


@pytest.mark.parametrize("bad", ["", "a", "a/b", "/a//b", "/a/./b", "/a/..", "/a\x00"])
def test_normalize_path_refuses(bad: str) -> None:
    with pytest.raises(UsageError):
        inspection.normalize_path(bad)


def test_child_path() -> None:
    assert inspection.child_path("/", "a") == "/a"
    assert inspection.child_path("/a", "b") == "/a/b"


def test_session_hex_is_unsigned_and_none_for_persistent() -> None:
    assert inspection.session_hex(0) is None
    assert inspection.session_hex(0x100009293650001) == "0x100009293650001"
    assert inspection.session_hex(-1) == "0xffffffffffffffff"  # a Java long with the top bit set


def test_iso_ms() -> None:
    assert inspection.iso_ms(0) == "1970-01-01T00:00:00.000Z"
    assert inspection.iso_ms(1_700_000_000_123) == "2023-11-14T22:13:20.123Z"
    assert inspection.iso_ms("1700000000123") == "2023-11-14T22:13:20.123Z"
    assert inspection.iso_ms(None) is None and inspection.iso_ms("soon") is None


def test_node_stat_uses_zookeeper_names() -> None:
    stat = ZnodeStat(czxid=10, mzxid=11, ctime=0, mtime=1_000, version=2, cversion=3, aversion=4,
                     ephemeralOwner=0xABC, dataLength=5, numChildren=6, pzxid=12)  # fmt: skip
    s = inspection.node_stat(stat)
    assert s.ephemeral
    assert s.to_dict() == {
        "czxid": 10, "mzxid": 11, "pzxid": 12, "ctime": "1970-01-01T00:00:00.000Z", "mtime": "1970-01-01T00:00:01.000Z",
        "version": 2, "cversion": 3, "aversion": 4, "ephemeralOwner": "0xabc", "dataLength": 5, "numChildren": 6,
    }  # fmt: skip
    assert not inspection.node_stat(stat._replace(ephemeralOwner=0)).ephemeral


@pytest.mark.parametrize(
    ("raw", "fmt", "pretty", "as_json"),
    [
        (b"", "empty", "", {"format": "empty", "encoding": "utf-8", "data": ""}),
        (b'{"a":[1]}', "json", '{\n  "a": [\n    1\n  ]\n}',
         {"format": "json", "encoding": "utf-8", "data": '{"a":[1]}', "json": {"a": [1]}}),
        (b"42", "json", "42", {"format": "json", "encoding": "utf-8", "data": "42", "json": 42}),
        ("consumer-ä".encode(), "text", "consumer-ä", {"format": "text", "encoding": "utf-8", "data": "consumer-ä"}),
        (b"{not json", "text", "{not json", {"format": "text", "encoding": "utf-8", "data": "{not json"}),
        (b"NaN", "text", "NaN", {"format": "text", "encoding": "utf-8", "data": "NaN"}),
        (b"\x00\xff", "binary", "00 ff",
         {"format": "binary", "encoding": "base64", "data": base64.b64encode(b"\x00\xff").decode()}),
    ],
    ids=["empty", "json", "json-scalar", "text", "almost-json", "nan", "binary"],
)  # fmt: skip
def test_node_data(raw: bytes, fmt: str, pretty: str, as_json: dict) -> None:
    data = inspection.decode_data(raw)
    assert data.format == fmt
    assert data.pretty() == pretty
    assert data.to_dict() == as_json


# --- single znodes and trees -----------------------------------------------------------------------


def test_get_and_ls(fake: FakeZk) -> None:
    fake.create("/a/b", b'{"x":1}', makepath=True)
    fake.create("/a/c", b"", ephemeral=True)
    node = inspection.get_node(fake, "/a/b/")  # type: ignore[arg-type]
    assert node.to_dict()["path"] == "/a/b" and node.to_dict()["json"] == {"x": 1}
    assert inspection.get_node(fake, "/a/c").stat.ephemeral_owner == "0x1234"  # type: ignore[arg-type]
    assert inspection.list_children(fake, "/a").to_dict() == {"path": "/a", "children": ["b", "c"]}  # type: ignore[arg-type]
    for fn in (inspection.get_node, inspection.list_children, inspection.tree):
        with pytest.raises(NoZnodeError, match="^no znode /nope$"):
            fn(fake, "/nope")  # type: ignore[operator]


def test_tree_depth_and_ephemerals(fake: FakeZk) -> None:
    fake.create("/a/b/c/d", makepath=True)
    fake.create("/a/e", ephemeral=True)
    full = inspection.tree(fake, "/")  # type: ignore[arg-type]
    assert inspection.count_nodes(full) == 6
    (a,) = full.children
    assert [c.name for c in a.children] == ["b", "e"] and a.children[1].ephemeral
    assert a.children[0].children[0].children[0].path == "/a/b/c/d"

    shallow = inspection.tree(fake, "/a", depth=1)  # type: ignore[arg-type]
    assert [(c.name, c.truncated, c.num_children, c.children) for c in shallow.children] == [
        ("b", True, 1, []), ("e", False, 0, [])
    ]  # fmt: skip
    root_only = inspection.tree(fake, "/a", depth=0)  # type: ignore[arg-type]
    assert root_only.truncated and root_only.children == [] and root_only.num_children == 2
    assert root_only.to_dict() == {"name": "a", "path": "/a", "ephemeral": False, "ephemeralOwner": None,
                                   "numChildren": 2, "truncated": True, "children": []}  # fmt: skip
    with pytest.raises(UsageError):
        inspection.tree(fake, "/", depth=-1)  # type: ignore[arg-type]


# --- the registries --------------------------------------------------------------------------------


def test_registries_over_the_registry_functions(fake: FakeZk) -> None:
    z: Any = fake
    registry.ensure_roots(z)
    registry.register_broker(z, 2, [registry.Endpoint("PLAINTEXT", "PLAINTEXT", "h2", 9093)])
    registry.register_broker(z, 10, [registry.Endpoint("PLAINTEXT", "PLAINTEXT", "h10", 9094)], rack="r1")
    fake.create(paths.CONTROLLER, paths.controller_json(10))
    fake.create(paths.CONTROLLER_EPOCH, b"7")
    fake.create(paths.topic("t"), paths.assignment_json({0: [2, 10], 1: [10, 2]}))
    fake.create(paths.partition_state("t", 0), paths.state_json(2, 3, [2, 10]), makepath=True)  # p1: no state yet
    consumers.register(z, "g", "c1", ["t"])
    fake.create(paths.group_owner("g", "t", 1), b"c1", makepath=True)
    consumers.commit(z, "g", {("t", 0): 5})
    consumers.commit(z, "h", {("t", 1): 9})

    reg = inspection.registries(z)
    doc = reg.to_dict()
    assert [(b["id"], b["endpoint"], b["rack"], b["session"]) for b in doc["brokers"]] == [
        (2, "h2:9093", None, "0x1234"), (10, "h10:9094", "r1", "0x1234")
    ]  # fmt: skip
    assert doc["topics"] == [{"topic": "t", "partitions": [
        {"partition": 0, "replicas": [2, 10], "leader": 2, "leader_epoch": 3, "isr": [2, 10], "controller_epoch": 1},
        {"partition": 1, "replicas": [10, 2], "leader": None, "leader_epoch": None, "isr": [],
         "controller_epoch": None},
    ]}]  # fmt: skip
    assert (doc["controller"]["broker_id"], doc["controller"]["epoch"], doc["controller"]["session"]) == (10, 7, None)
    g, h = doc["groups"]
    assert (g["group"], g["kind"], g["members"]) == ("g", "zookeeper", [{"id": "c1", "subscription": ["t"]}])
    assert [(p["partition"], p["owner"], p["offset"]) for p in g["partitions"]] == [(0, None, 5), (1, "c1", None)]
    assert g["partitions"][0]["committed"] is not None and g["partitions"][1]["committed"] is None
    assert (h["kind"], h["members"], [(p["partition"], p["offset"]) for p in h["partitions"]]) == (
        "broker",
        [],
        [(1, 9)],
    )

    only = inspection.registries(z, ["controller", "topics"])
    assert only.brokers is None and only.groups is None
    assert list(only.to_dict()) == ["topics", "controller"]
    with pytest.raises(UsageError):
        inspection.registries(z, ["nosuch"])


def test_registries_of_an_empty_zookeeper(fake: FakeZk) -> None:
    assert inspection.registries(fake).to_dict() == {  # type: ignore[arg-type]
        "brokers": [], "topics": [], "controller": {"broker_id": None, "epoch": None, "session": None, "since": None},
        "groups": [],
    }  # fmt: skip


# --- follow ----------------------------------------------------------------------------------------


def test_follow_reads_again_after_a_change_and_after_a_reconnect(fake: FakeZk) -> None:
    fake.create("/a")
    stream = inspection.follow(fake, lambda zk: inspection.list_children(zk, "/a").children, settle_s=0)  # type: ignore[arg-type]
    assert next(stream) == []
    assert fake.child_watches["/a"]  # the read left a watch
    fake.create("/a/x")
    assert next(stream) == ["x"]
    (listener,) = fake.listeners
    listener(KazooState.SUSPENDED)
    listener(KazooState.CONNECTED)
    assert next(stream) == ["x"]
    stream.close()
    assert fake.listeners == []


def test_follow_reports_a_vanished_znode_and_waits_for_it(fake: FakeZk) -> None:
    fake.create("/a/x", makepath=True)
    errors: list[KafkactlError] = []
    stream = inspection.follow(fake, lambda zk: inspection.get_node(zk, "/a/x").data.text,  # type: ignore[arg-type]
                               on_error=errors.append, settle_s=0)  # fmt: skip
    assert next(stream) == ""
    fake.delete("/a/x")
    timer = threading.Timer(0.2, lambda: fake.create("/a/x", b"back"))
    timer.start()
    try:
        assert next(stream) == "back"  # the missing znode got an exists watch, so its creation counts
    finally:
        timer.cancel()
        stream.close()
    assert [str(e) for e in errors] == ["no znode /a/x"]


def test_follow_raises_when_the_first_read_fails(fake: FakeZk) -> None:
    stream = inspection.follow(fake, lambda zk: inspection.get_node(zk, "/nope"), on_error=print)  # type: ignore[arg-type]
    with pytest.raises(NoZnodeError):
        next(stream)
    assert fake.listeners == []


def test_a_missing_root_names_the_chroot(fake: FakeZk) -> None:
    del fake.nodes["/"]
    fake.chroot = "/nochroot"  # type: ignore[attr-defined]
    with pytest.raises(NoZnodeError, match=r"^no znode / \(the chroot /nochroot does not exist\)$"):
        inspection.list_children(fake, "/")  # type: ignore[arg-type]
