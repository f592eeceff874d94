"""The client's view of a cluster: bootstrap, metadata, and one connection per broker id."""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Callable
from typing import Any

from broker.client.connection import Connection, parse_bootstrap
from broker.client.security import ClientSecurity, SecurityError
from broker.client.security import default as default_security
from broker.errors import KafkactlError
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, error_name

TopicPartition = tuple[str, int]


class Cluster:
    def __init__(self, bootstrap: str, *, client_id: str = "kafkactl", timeout: float = 30.0,
                 security: ClientSecurity | None = None) -> None:  # fmt: skip
        self.bootstrap = parse_bootstrap(bootstrap)
        self.client_id, self.timeout = client_id, timeout
        self.security = security if security is not None else default_security()  # (fixed when it is made)
        self.brokers: dict[int, tuple[str, int]] = {}
        self.controller_id = -1
        self.cluster_id: str | None = None
        self._conns: dict[int, Connection] = {}
        self._any: Connection | None = None

    def any_connection(self) -> Connection:
        if self._any is not None:
            return self._any
        errors = []
        for host, port in self.bootstrap:
            try:
                self._any = Connection(host, port, client_id=self.client_id, timeout=self.timeout,
                                       security=self.security)  # fmt: skip
                return self._any
            except SecurityError:
                raise  # a wrong password or an untrusted certificate is so on every broker: said as it is
            except KafkactlError as exc:
                errors.append(str(exc))
        raise KafkactlError(f"no bootstrap server answered ({'; '.join(errors)})")

    def connection(self, node_id: int) -> Connection:
        conn = self._conns.get(node_id)
        if conn is None:
            if node_id not in self.brokers:
                self.metadata([])
            if node_id not in self.brokers:
                raise KafkactlError(f"broker {node_id} is not in the cluster's metadata")
            host, port = self.brokers[node_id]
            conn = self._conns[node_id] = Connection(host, port, client_id=self.client_id, timeout=self.timeout,
                                                     security=self.security)  # fmt: skip
        return conn

    def drop(self, node_id: int) -> None:
        """Forget the connection to `node_id` (it failed): the next `connection` connects anew."""
        conn = self._conns.pop(node_id, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.close()

    def metadata(self, topics: list[str] | None = None, *, allow_create: bool = False) -> dict[str, Any]:
        """A Metadata answer for `topics` (None: all), remembering the brokers it names. A broker that was
        answering and is gone (killed) is replaced by the next bootstrap server that answers."""
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": allow_create}  # fmt: skip
        try:
            answer = self.any_connection().request(ApiKey.METADATA, body)
        except SecurityError:
            raise
        except KafkactlError:
            if self._any is not None:
                with contextlib.suppress(OSError):
                    self._any.close()
            self._any = None
            answer = self.any_connection().request(ApiKey.METADATA, body)
        self.brokers = {b["node_id"]: (b["host"], b["port"]) for b in answer["brokers"]}
        self.controller_id = answer.get("controller_id", -1)
        self.cluster_id = answer.get("cluster_id")
        return answer

    def list_offsets(self, tps: list[TopicPartition], timestamp: int, *, isolation_level: int = 0,
                     wait_s: float | None = None,
                     on_wait: Callable[[list[TopicPartition], str], None] | None = None,
                     ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, str]]:  # fmt: skip
        """ListOffsets (EARLIEST, LATEST or epoch ms) of each partition's leader. A leader that cannot be
        reached (killed, not yet replaced by the controller), one being elected, or a retriable answer (a
        leader that moved) is asked again with fresh metadata and backoff for up to `wait_s` (default: the
        timeout); `on_wait(partitions, why)` is told once when some wait. Partitions whose every replica's
        broker is down are not waited for. Returns ({tp: offset}, {tp: why} of those without an answer)."""
        deadline = time.monotonic() + (self.timeout if wait_s is None else wait_s)
        found: dict[TopicPartition, int] = {}
        why: dict[TopicPartition, str] = {}
        pending, delay, told = list(dict.fromkeys(tps)), 0.1, False
        while True:
            why, final = self._offsets_round(pending, timestamp, isolation_level, found)
            pending = [tp for tp in why if tp not in final]
            if not pending or time.monotonic() >= deadline:
                return found, why
            if on_wait is not None and not told:
                told = True
                on_wait(pending, "; ".join(dict.fromkeys(why[tp] for tp in pending)))
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 1.0)

    def _offsets_round(
        self, tps: list[TopicPartition], timestamp: int, isolation_level: int, found: dict[TopicPartition, int]
    ) -> tuple[dict[TopicPartition, str], set[TopicPartition]]:
        """One round of `list_offsets` into `found`: ({tp: why} not answered, those of them not worth asking again)."""
        why: dict[TopicPartition, str] = {}
        final: set[TopicPartition] = set()
        try:
            md = self.metadata(sorted({t for t, _ in tps}))
        except SecurityError:
            raise
        except KafkactlError as exc:
            return {tp: str(exc) for tp in tps}, set()
        parts = {(t["name"], p["partition_index"]): p for t in md["topics"] for p in t["partitions"]}
        by_leader: dict[int, dict[str, list[int]]] = collections.defaultdict(lambda: collections.defaultdict(list))
        for tp in tps:
            p = parts.get(tp)
            if p is None or p["leader_id"] < 0:
                why[tp] = "no leader"
                replicas = set(p["replica_nodes"]) if p is not None else set()
                if replicas and replicas <= set(p.get("offline_replicas") or []):  # nothing to wait for
                    why[tp] = "no leader (every replica's broker is down)"
                    final.add(tp)
                continue
            by_leader[p["leader_id"]][tp[0]].append(tp[1])
        for leader, topics in by_leader.items():
            body = {"replica_id": -1, "isolation_level": isolation_level, "topics": [
                {"name": t, "partitions": [{"partition_index": p, "timestamp": timestamp} for p in ps]}
                for t, ps in topics.items()]}  # fmt: skip
            try:
                answer = self.connection(leader).request(ApiKey.LIST_OFFSETS, body)
            except SecurityError:
                raise
            except KafkactlError as exc:  # refused, reset, no answer in time: asked again with fresh metadata
                self.drop(leader)
                why.update({(t, p): f"broker {leader} unreachable: {exc}" for t, ps in topics.items() for p in ps})
                continue
            for t in answer["topics"]:
                for x in t["partitions"]:
                    tp, code = (t["name"], x["partition_index"]), x["error_code"]
                    if not code:
                        found[tp] = x["offset"] if "offset" in x else (x["old_style_offsets"] or [-1])[0]
                        continue
                    why[tp] = error_name(code)
                    if code not in ErrorCode._value2member_map_ or not ErrorCode(code).retriable:
                        final.add(tp)
        return why, final

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        if self._any is not None:
            self._any.close()
        self._conns.clear()
        self._any = None

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
