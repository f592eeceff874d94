"""`kafkactl zk`: browse ZooKeeper and show the registries kafkactl and Kafka keep there."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

import typer
from kazoo.client import KazooClient
from rich.text import Text
from rich.tree import Tree

from broker.errors import KafkactlError
from broker.zk import client as zkclient
from broker.zk import inspection
from kafkactl import contexts
from kafkactl.render import Output, json_line, stdout_console, table

app = typer.Typer(help="Browse ZooKeeper: ls, get, tree, and the broker/topic/consumer registries.",
                  no_args_is_help=True)  # fmt: skip


class Section(StrEnum):
    """`--only`: one section of `zk registries`."""

    brokers = "brokers"
    topics = "topics"
    controller = "controller"
    groups = "groups"


OutputOpt = Annotated[Output, typer.Option("-o", "--output", help="text or json.")]
WatchOpt = Annotated[
    bool, typer.Option("--watch", "-w", help="Show again on every change (JSON: one document per line); Ctrl-C stops.")
]
PathArg = Annotated[str, typer.Argument(help="Znode path, e.g. /brokers/ids (relative to the chroot).")]


@app.command("ls")
def ls(path: PathArg, zookeeper: contexts.ZooKeeper = None, output: OutputOpt = Output.text,
       watch: WatchOpt = False) -> None:  # fmt: skip
    """The children of a znode, sorted."""
    _show(zookeeper, lambda zk: inspection.list_children(zk, path), _render_ls, output, watch)


@app.command("get")
def get(path: PathArg, zookeeper: contexts.ZooKeeper = None, output: OutputOpt = Output.text,
        watch: WatchOpt = False) -> None:  # fmt: skip
    """A znode's data (JSON indented, text as is, binary in hex) and its stat."""
    _show(zookeeper, lambda zk: inspection.get_node(zk, path), _render_get, output, watch)


@app.command("tree")
def tree(
    path: Annotated[str, typer.Argument(help="Where to start (relative to the chroot).")] = "/",
    depth: Annotated[int | None, typer.Option("--depth", "-d", help="Levels below PATH (default: all).")] = None,
    zookeeper: contexts.ZooKeeper = None,
    output: OutputOpt = Output.text,
    watch: WatchOpt = False,
) -> None:
    """The znodes under PATH as a tree; ephemeral znodes are marked with their owning session."""
    _show(zookeeper, lambda zk: inspection.tree(zk, path, depth), _render_tree, output, watch)


@app.command("registries")
def registries(
    only: Annotated[
        list[Section] | None, typer.Option("--only", help="Show only this section (repeatable).", show_default=False)
    ] = None,
    zookeeper: contexts.ZooKeeper = None,
    output: OutputOpt = Output.text,
    watch: WatchOpt = False,
) -> None:
    """The registries: brokers, topics, the controller and consumer groups.

    Brokers with their endpoint and owning session; per topic partition the replicas, leader and ISR; the
    controller and its epoch; per consumer group the live consumers and their subscriptions, partition owners
    and committed offsets."""
    sections = [s.value for s in only or []]
    _show(zookeeper, lambda zk: inspection.registries(zk, sections), _render_registries, output, watch)


# --- running ---------------------------------------------------------------------------------------


def _show(zookeeper: str | None, read: Callable[[KazooClient], Any], render: Callable[[Any], None], output: Output,
          watch: bool) -> None:  # fmt: skip
    """Read once and render, or (with --watch) render again after every change until Ctrl-C."""
    with zkclient.session(contexts.zookeeper(zookeeper)) as zk:
        if not watch:
            result = read(zk)
            if output == Output.json:
                json_line(result.to_dict())
            else:
                render(result)
            return
        with contextlib.suppress(KeyboardInterrupt):
            _watch(zk, read, render, output)


def _watch(zk: KazooClient, read: Callable[[KazooClient], Any], render: Callable[[Any], None], output: Output) -> None:
    last: list[dict | None] = [None]

    def on_error(exc: KafkactlError) -> None:
        last[0] = None  # show it again when it comes back, even unchanged
        print(f"kafkactl: {exc} (still watching)", file=sys.stderr, flush=True)

    stream = inspection.follow(zk, read, on_error=on_error)
    with contextlib.closing(stream):
        for result in stream:
            doc = result.to_dict()
            if doc == last[0]:
                continue  # a watch fired, but nothing shown changed
            last[0] = doc
            if output == Output.json:
                json_line(doc)
            elif sys.stdout.isatty():
                stdout_console().clear()
                render(result)
                print(f"\n{_now()}  watching; Ctrl-C to stop", file=sys.stderr)
            else:
                print(f"# {_now()}")
                render(result)
                print()
            sys.stdout.flush()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


# --- rendering -------------------------------------------------------------------------------------


def _render_ls(listing: inspection.Listing) -> None:
    for name in listing.children:
        print(name)


def _render_get(node: inspection.Znode) -> None:
    fmt = node.data.format
    if fmt == "empty":
        print("(no data)")
    elif fmt == "binary":
        print(f"(binary data, {len(node.data.raw)} bytes, in hex)")
        print(node.data.pretty())
    else:
        print(node.data.pretty())
    s = node.stat
    rows = [
        ("czxid", f"0x{s.czxid:x}"), ("mzxid", f"0x{s.mzxid:x}"), ("pzxid", f"0x{s.pzxid:x}"),
        ("ctime", s.ctime), ("mtime", s.mtime), ("version", s.version), ("cversion", s.cversion),
        ("aversion", s.aversion), ("ephemeralOwner", s.ephemeral_owner or "none"), ("dataLength", s.data_length),
        ("numChildren", s.num_children),
    ]  # fmt: skip
    table(["STAT", "VALUE"], rows)


def _tree_label(node: inspection.TreeNode, name: str) -> Text:
    label = Text(name, style="bold" if node.children else "")
    if node.ephemeral:
        label.append(f"  [ephemeral {node.ephemeral_owner}]", style="yellow")
    if node.truncated:
        label.append(f"  (+{node.num_children} children)", style="dim")
    return label


def _render_tree(root: inspection.TreeNode) -> None:
    top = Tree(_tree_label(root, root.path))
    stack = [(top, root)]
    while stack:
        branch, node = stack.pop()
        for child in node.children:
            stack.append((branch.add(_tree_label(child, child.name)), child))
    stdout_console().print(top)


def _section(title: str, columns: list[str], rows: list[tuple]) -> None:
    if not sys.stdout.isatty():
        print(f"# {title}")
    table(columns, rows, title=title)
    print()


def _ids(values: list[int]) -> str:
    return ",".join(map(str, values))


def _dash(value: Any) -> Any:
    return "-" if value is None else value


def _render_registries(reg: inspection.Registries) -> None:
    if reg.brokers is not None:
        rows = [(b.id, b.endpoint, b.rack or "", _dash(b.session), _dash(b.registered)) for b in reg.brokers]
        _section("brokers", ["ID", "ENDPOINT", "RACK", "SESSION", "REGISTERED"], rows)
    if reg.topics is not None:
        rows = [(t.name, p.partition, _dash(p.leader), _ids(p.replicas), _ids(p.isr), _dash(p.leader_epoch))
                for t in reg.topics for p in t.partitions]  # fmt: skip
        _section("topics", ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "LEADER EPOCH"], rows)
    if reg.controller is not None:
        c = reg.controller
        _section("controller", ["BROKER", "EPOCH", "SESSION", "SINCE"],
                 [(_dash(c.broker_id), _dash(c.epoch), _dash(c.session), _dash(c.since))])  # fmt: skip
    if reg.groups is not None:
        _section("consumer groups", ["GROUP", "KIND", "CONSUMERS", "PARTITIONS"],
                 [(g.name, g.kind, len(g.members), len(g.partitions)) for g in reg.groups])  # fmt: skip
        _section("consumers", ["GROUP", "CONSUMER", "SUBSCRIPTION"],
                 [(g.name, m, ",".join(t)) for g in reg.groups for m, t in g.members.items()])  # fmt: skip
        _section("group partitions", ["GROUP", "TOPIC", "PARTITION", "OWNER", "OFFSET", "COMMITTED"],
                 [(g.name, p.topic, p.partition, _dash(p.owner), _dash(p.offset), _dash(p.committed))
                  for g in reg.groups for p in g.partitions])  # fmt: skip
