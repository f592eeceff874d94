"""Opening a kazoo session with one clear error when ZooKeeper does not answer."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from broker.errors import KafkactlError


def split_connect(connect: str) -> tuple[list[tuple[str, int]], str]:
    """(hosts, chroot) of `host:port[,host:port...][/chroot]`."""
    hosts_part, slash, chroot = connect.partition("/")
    hosts = []
    for item in hosts_part.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host:
            host, port = item.strip(), "2181"
        try:
            hosts.append((host, int(port)))
        except ValueError:
            raise KafkactlError(f"ZooKeeper address {item!r}: port is not a number") from None
    return hosts, ("/" + chroot.strip("/")) if slash and chroot.strip("/") else ""


def connect(hosts: str, *, session_timeout_s: float = 18.0, connect_timeout_s: float = 15.0) -> KazooClient:
    """A started client for `host:port[,...][/chroot]`; KafkactlError when nothing answers in time.

    A lost connection is retried at most a second apart, forever (kazoo's default backs off towards an
    hour): after an outage the session is back within about a second of ZooKeeper, before it expires."""
    retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0)
    zk = KazooClient(hosts=hosts, timeout=session_timeout_s, connection_retry=retry)
    try:
        with warnings.catch_warnings():  # kazoo warns of a missing chroot; callers that need it say so in one line
            warnings.simplefilter("ignore")
            zk.start(timeout=connect_timeout_s)
    except (KazooTimeoutError, ValueError) as exc:
        close(zk)
        reason = "no answer" if isinstance(exc, KazooTimeoutError) else str(exc)
        raise KafkactlError(f"cannot reach ZooKeeper at {hosts} within {connect_timeout_s:g}s: {reason}") from None
    return zk


def close(zk: KazooClient) -> None:
    with contextlib.suppress(Exception):
        zk.stop()
    with contextlib.suppress(Exception):
        zk.close()


#: how long a command waits for ZooKeeper to answer before it says it cannot reach it
COMMAND_CONNECT_TIMEOUT_S = 3.0


@contextlib.contextmanager
def session(hosts: str, *, connect_timeout_s: float = COMMAND_CONNECT_TIMEOUT_S) -> Iterator[KazooClient]:
    """A short-lived session for one command (a command must not hang for long on a ZooKeeper that is down)."""
    zk = connect(hosts, connect_timeout_s=connect_timeout_s)
    try:
        yield zk
    finally:
        close(zk)
