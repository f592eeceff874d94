"""Opening a kazoo session with one clear error when ZooKeeper does not answer, and with the process's
ZooKeeper credentials.

Credentials are ZooKeeper's `digest` scheme (`user:password`): the broker's `zookeeper.digest.auth`, a
command's `KAFKACTL_ZOOKEEPER_AUTH` or its context's `zookeeper-auth`. With `zookeeper.set.acl=true` the
broker creates its znodes readable by anyone and writable only by its own digest identity, as Kafka's
`zookeeper.set.acl` does; the users' SCRAM credentials (`/config/users`) are not readable by others at all.

Every client waits on its socket with `poll(2)` (`PollHandler`): kazoo's own handler builds, registers and
closes an epoll selector for each wait, twice per request, which was half of its connection thread's time,
and that one thread carries every request of a session (a failover's thousands of reads and writes).
"""

from __future__ import annotations

import contextlib
import os
import select
import warnings
from collections.abc import Iterator
from typing import Any

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError, SequentialThreadingHandler
from kazoo.retry import KazooRetry
from kazoo.security import ACL, make_acl, make_digest_acl

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


#: digest credentials "user:password" or None; whether znodes this process creates get ACLs (None, as for
#: commands: when it has credentials, as Kafka's tools secure what they create once they authenticate)
_auth: dict[str, object] = {"digest": None, "set_acl": None}


def configure(digest: str | None, set_acl: bool = False) -> None:
    """This process's ZooKeeper credentials (`user:password`) and whether its znodes are protected with them."""
    if digest is not None and ":" not in digest:
        raise KafkactlError("ZooKeeper digest credentials must be user:password")
    if set_acl and not digest:
        raise KafkactlError("zookeeper.set.acl=true needs ZooKeeper credentials (zookeeper.digest.auth=user:password)")
    _auth.update(digest=digest or None, set_acl=set_acl)


def use_credentials(digest: str) -> None:
    """A command's ZooKeeper credentials (`user:password`); what it creates is then protected with them."""
    if ":" not in digest:
        raise KafkactlError("ZooKeeper digest credentials must be user:password")
    _auth["digest"] = digest


def configure_from(props: dict[str, str]) -> None:
    """`configure` from a broker's `zookeeper.digest.auth` and `zookeeper.set.acl`."""
    set_acl = (props.get("zookeeper.set.acl") or "false").strip().lower()
    if set_acl not in ("true", "false"):
        raise KafkactlError(f"zookeeper.set.acl: expected true or false, not {set_acl!r}")
    configure(props.get("zookeeper.digest.auth"), set_acl == "true")


def _digest() -> str | None:
    return _auth["digest"] or os.environ.get("KAFKACTL_ZOOKEEPER_AUTH") or None  # type: ignore[return-value]


def znode_acl(sensitive: bool = False) -> list[ACL] | None:
    """The ACL for a znode this process creates: None (ZooKeeper's open default) unless `set_acl`; then all
    rights to our digest identity, and read to anyone unless `sensitive` (credentials)."""
    digest = _digest()
    set_acl = _auth["set_acl"]
    if not digest or set_acl is False:
        return None
    user, _, password = digest.partition(":")
    own = [make_digest_acl(user, password, all=True)]
    return own if sensitive else own + [make_acl("world", "anyone", read=True)]


_READABLE = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR | select.POLLNVAL
_WRITABLE = select.POLLOUT | select.POLLHUP | select.POLLERR | select.POLLNVAL


class PollHandler(SequentialThreadingHandler):
    """kazoo's threading handler, waiting with one `poll` call instead of a new epoll selector per wait."""

    def select(self, rlist: list[Any], wlist: list[Any], xlist: list[Any],
               timeout: float | None = None) -> tuple[list[Any], list[Any], list[Any]]:  # fmt: skip
        poller = select.poll()
        masks: dict[int, int] = {}
        for objs, mask in ((rlist, select.POLLIN), (wlist, select.POLLOUT)):
            for obj in objs:
                fd = obj if isinstance(obj, int) else obj.fileno()
                masks[fd] = masks.get(fd, 0) | mask
        for fd, mask in masks.items():
            poller.register(fd, mask)
        ready = dict(poller.poll(None if timeout is None else max(timeout, 0) * 1000))
        readable = [o for o in rlist if ready.get(o if isinstance(o, int) else o.fileno(), 0) & _READABLE]
        writable = [o for o in wlist if ready.get(o if isinstance(o, int) else o.fileno(), 0) & _WRITABLE]
        return readable, writable, []


def new_client(hosts: str, **kwargs: object) -> KazooClient:
    """A kazoo client (not started) with this process's credentials and default ACL."""
    digest = _digest()
    auth = [("digest", digest)] if digest else None
    kwargs.setdefault("handler", PollHandler())
    return KazooClient(hosts=hosts, auth_data=auth, default_acl=znode_acl(), **kwargs)  # type: ignore[arg-type]


def connect(hosts: str, *, session_timeout_s: float = 18.0, connect_timeout_s: float = 15.0) -> KazooClient:
    """A started client for `host:port[,...][/chroot]`; KafkactlError when nothing answers in time.

    A lost connection is retried at most a second apart, forever (kazoo's default backs off towards an
    hour): after an outage the session is back within about a second of ZooKeeper, before it expires."""
    retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0)
    zk = new_client(hosts, timeout=session_timeout_s, connection_retry=retry)
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
