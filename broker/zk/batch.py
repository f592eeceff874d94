"""Pipelined ZooKeeper reads and chunked multis: many requests in flight on one session instead of one
round trip each.

ZooKeeper answers a session's requests in the order they were sent, so issuing a window of kazoo `*_async`
calls and then collecting their results costs about one round trip per window, not one per znode. Blocking:
run them off the event loop (an executor thread or kazoo's callback thread, whose waits the connection
thread settles). Paths come from `broker.zk.paths`; `broker.zk.registry` builds its bulk reads on these.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError, NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat

#: requests in flight at once (ZooKeeper's default globalOutstandingLimit is 1,000)
WINDOW = 1000
#: a multi's bounds: jute.maxbuffer (1 MiB by default) caps a request, so a chunk stays well under it
MULTI_OPS = 500
MULTI_BYTES = 512 * 1024
#: a rough per-op overhead in a multi request (op header, lengths, version, ACL, flags)
_OP_OVERHEAD = 64

Node = tuple[bytes, ZnodeStat]


def get_many(zk: KazooClient, paths: Sequence[str], *, watch: Callable[[Any], None] | None = None,
             window: int = WINDOW, stop: Callable[[], bool] | None = None) -> list[Node | None]:  # fmt: skip
    """(data, stat) of each path, in order, None for a missing znode; `watch` (as `zk.get`'s) is left on each
    znode that exists. Other errors (the connection dropping) are raised once the window's answers are in.
    `stop()` true before a window: ConnectionClosedError (a kazoo callback reading while its client closes
    must end: the client's stop waits for that thread, and a request sent after the connection thread is gone
    can block it for good)."""
    return _pipelined([lambda path=path: zk.get_async(path, watch=watch) for path in paths], lambda node: node,
                      (NoNodeError,), window, stop)  # fmt: skip


def stats_many(zk: KazooClient, paths: Sequence[str], *, window: int = WINDOW) -> list[ZnodeStat | None]:
    """The stat of each path (`exists`), in order, None for a missing znode; pipelined as `get_many`."""
    return _pipelined([lambda path=path: zk.exists_async(path) for path in paths], lambda stat: stat, (), window)


def delete_many(zk: KazooClient, paths: Sequence[str], *, window: int = WINDOW) -> None:
    """Delete each path (any version), pipelined; one already gone is fine. Other errors are raised once the
    window's answers are in."""
    _pipelined([lambda path=path: zk.delete_async(path) for path in paths], lambda _: None, (NoNodeError,), window)


def _pipelined(calls: Sequence[Callable[[], Any]], answer: Callable[[Any], Any], absent: tuple[type[Exception], ...],
               window: int, stop: Callable[[], bool] | None = None) -> list[Any]:  # fmt: skip
    """Issue `calls` (kazoo `*_async`) a window at a time and collect `answer(result)` of each, in order, None
    for an `absent` error; any other error is raised once its window has settled (no answer left behind)."""
    out: list[Any] = []
    for start in range(0, len(calls), window):
        if stop is not None and stop():
            raise ConnectionClosedError("stopped reading: the client is closing")
        pending = [call() for call in calls[start : start + window]]
        error: BaseException | None = None
        for result in pending:
            try:
                out.append(answer(result.get()))
            except absent:
                out.append(None)
            except Exception as exc:  # noqa: BLE001 - raised after the window settles
                error = error or exc
                out.append(None)
        if error is not None:
            raise error
    return out


class Op(NamedTuple):
    """One operation of a multi: `kind` is "create", "set_data", "delete" or "check" (kazoo's transaction
    methods); `version` -1 means any version (not allowed for "check"); `sequence`: a sequential create."""

    kind: str
    path: str
    data: bytes = b""
    version: int = -1
    sequence: bool = False


def chunks(ops: Sequence[Op], *, max_ops: int = MULTI_OPS, max_bytes: int = MULTI_BYTES) -> list[Sequence[Op]]:
    """`ops` cut, in order, into runs of at most `max_ops` operations and about `max_bytes` bytes each."""
    out: list[Sequence[Op]] = []
    start = size = 0
    for i, op in enumerate(ops):
        cost = len(op.path) + len(op.data) + _OP_OVERHEAD
        if i > start and (i - start >= max_ops or size + cost > max_bytes):
            out.append(ops[start:i])
            start, size = i, 0
        size += cost
    if start < len(ops):
        out.append(ops[start:])
    return out


def multi_chunks(zk: KazooClient, ops: Sequence[Op], *, max_ops: int = MULTI_OPS, max_bytes: int = MULTI_BYTES,
                 window: int = 8) -> list[Any]:  # fmt: skip
    """Commit `ops` as consecutive multis of bounded size, up to `window` of them in flight; the result of
    each op, in order (kazoo's: a path, a stat, True, or the exception of an op that failed, RolledBackError
    for the others of its chunk). Each chunk is atomic; the whole is not (a chunk after a failed one is still
    committed): callers that need all-or-nothing check a version in every chunk. A connection error is raised
    as it comes, and then the chunks in flight may or may not have been committed (read to find out)."""
    out: list[Any] = []
    parts = chunks(ops, max_ops=max_ops, max_bytes=max_bytes)
    for start in range(0, len(parts), window):
        pending = [_transaction(zk, part).commit_async() for part in parts[start : start + window]]
        for result in pending:
            out.extend(result.get())
    return out


def ensure_parents(zk: KazooClient, leaves: Iterable[str], *, window: int = WINDOW) -> None:
    """Create the missing ancestors of the znodes `leaves`, a level at a time with its creates pipelined (kazoo's
    `makepath` walks each path alone, a round trip per level per znode: thousands of first commits at once)."""
    levels: dict[int, set[str]] = {}
    for leaf in leaves:
        parts = leaf.strip("/").split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            levels.setdefault(depth, set()).add("/" + "/".join(parts[:depth]))
    for depth in sorted(levels):
        _pipelined([lambda p=p: zk.create_async(p, b"") for p in sorted(levels[depth])], lambda path: path,
                   (NodeExistsError,), window)  # fmt: skip


#: `try_multis`' result for an op of a multi ZooKeeper refused (that op, or another of its chunk, failed)
REFUSED = object()


def try_multis(zk: KazooClient, ops: Sequence[Op], *, max_ops: int = MULTI_OPS, max_bytes: int = MULTI_BYTES,
               window: int = 64) -> list[Any]:  # fmt: skip
    """Commit `ops` as multis of bounded size, up to `window` of them in flight, for the one request per many
    writes (ZooKeeper's cost, and kazoo's, is per request); per op: its result when its chunk was committed,
    `REFUSED` when ZooKeeper refused the chunk (nothing of it was done: the caller does those ops another way),
    or the exception a chunk's request raised (connection loss: it may or may not have been committed)."""
    out: list[Any] = []
    parts = chunks(ops, max_ops=max_ops, max_bytes=max_bytes)
    for start in range(0, len(parts), window):
        sent = parts[start : start + window]
        pending = [_transaction(zk, part).commit_async() for part in sent]
        for part, result in zip(sent, pending, strict=True):
            try:
                results = result.get()
            except Exception as exc:  # noqa: BLE001 - the chunk's answer, given per op
                out.extend([exc] * len(part))
                continue
            if any(isinstance(r, Exception) for r in results):
                out.extend([REFUSED] * len(part))
            else:
                out.extend(results)
    return out


def multis(zk: KazooClient, transactions: Sequence[Sequence[Op]], *, window: int = WINDOW) -> list[list[Any]]:
    """Commit each of `transactions` as a multi of its own, pipelined: the results of each (as `multi_chunks`
    gives them), in order. Connection errors are raised once the window's answers are in."""
    calls = [lambda ops=ops: _transaction(zk, ops).commit_async() for ops in transactions]
    return _pipelined(calls, list, (), window)


def _transaction(zk: KazooClient, ops: Iterable[Op]) -> Any:
    tx = zk.transaction()
    for op in ops:
        if op.kind == "create":
            tx.create(op.path, op.data, sequence=op.sequence)
        elif op.kind == "set_data":
            tx.set_data(op.path, op.data, version=op.version)
        elif op.kind == "delete":
            tx.delete(op.path, version=op.version)
        elif op.kind == "check":
            tx.check(op.path, op.version)
        else:
            raise ValueError(f"unknown multi operation {op.kind!r}")
    return tx
