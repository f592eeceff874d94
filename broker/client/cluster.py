"""The client's view of a cluster: bootstrap, metadata, and one connection per broker id."""

from __future__ import annotations

from typing import Any

from broker.client.connection import Connection, parse_bootstrap
from broker.client.security import ClientSecurity, SecurityError
from broker.client.security import default as default_security
from broker.errors import KafkactlError
from broker.protocol.api import ApiKey


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

    def metadata(self, topics: list[str] | None = None, *, allow_create: bool = False) -> dict[str, Any]:
        """A Metadata answer for `topics` (None: all), remembering the brokers it names."""
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": allow_create}  # fmt: skip
        answer = self.any_connection().request(ApiKey.METADATA, body)
        self.brokers = {b["node_id"]: (b["host"], b["port"]) for b in answer["brokers"]}
        self.controller_id = answer.get("controller_id", -1)
        self.cluster_id = answer.get("cluster_id")
        return answer

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
