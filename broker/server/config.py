"""Broker configuration: `server.properties` plus `--override key=value`, under Kafka's key names.

The keys and defaults are those of docs/configuration.md, plus Kafka's `connections.max.idle.ms` (default
600000: a connection idle that long is closed; -1: never). A key that Kafka has but kafkactl does not
need (JVM thread counts) is accepted and logged once as ignored; any other key is an error naming it.

Listeners are Kafka's: `listeners=NAME://host:port,...`, each NAME mapped to a security protocol by
`listener.security.protocol.map`; the TLS and SASL keys may be given per listener as
`listener.name.<lower-case name>.<key>`, which wins over the plain key (docs/security.md).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from broker.errors import KafkactlError, UsageError
from broker.home import default_log_dir
from broker.log.config import LogConfig
from broker.security.session import PROTOCOLS
from broker.server import topic_configs
from broker.server.topic_configs import MESSAGE_FORMAT_VERSION

log = logging.getLogger(__name__)

MAX_LONG = 2**63 - 1

#: key → default (as text, as a properties file would hold it); None: no default
DEFAULTS: dict[str, str | None] = {
    "broker.id": "0",
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    "port": None,
    "host.name": None,
    "advertised.listeners": None,
    "log.dirs": None,
    "log.dir": None,
    "zookeeper.connect": "localhost:2181",
    "zookeeper.session.timeout.ms": "18000",
    "zookeeper.connection.timeout.ms": None,
    "zookeeper.set.acl": "false",  # znodes the broker creates: writable by its digest identity only
    "zookeeper.digest.auth": None,  # kafkactl's own: the broker's ZooKeeper digest credentials, user:password
    "num.partitions": "1",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
    "auto.create.topics.enable": "true",
    "delete.topic.enable": "true",
    "log.segment.bytes": "1073741824",
    "log.roll.hours": "168",
    "log.roll.ms": None,
    "log.retention.hours": "168",
    "log.retention.minutes": None,
    "log.retention.ms": None,
    "log.retention.bytes": "-1",
    "log.retention.check.interval.ms": "300000",
    "log.flush.interval.messages": str(MAX_LONG),
    "log.flush.interval.ms": None,
    "log.flush.scheduler.interval.ms": str(MAX_LONG),
    "log.index.interval.bytes": "4096",
    "log.index.size.max.bytes": "10485760",
    "log.message.timestamp.type": "CreateTime",
    # the defaults of the other topic-level keys (broker/server/topic_configs.py; Kafka 2.8's values)
    "log.roll.jitter.hours": "0",
    "log.roll.jitter.ms": None,
    "log.message.timestamp.difference.max.ms": str(MAX_LONG),
    "compression.type": "producer",
    "log.cleanup.policy": "delete",
    "log.cleaner.delete.retention.ms": "86400000",
    "log.cleaner.min.compaction.lag.ms": "0",
    "log.cleaner.max.compaction.lag.ms": str(MAX_LONG),
    "log.cleaner.min.cleanable.ratio": "0.5",
    # the log cleaner (broker/log/cleaner.py), Kafka's keys and defaults
    "log.cleaner.enable": "true",
    "log.cleaner.threads": "1",
    "log.cleaner.backoff.ms": "15000",
    "log.cleaner.dedupe.buffer.size": "134217728",
    "log.cleaner.io.buffer.load.factor": "0.9",
    "log.cleaner.io.max.bytes.per.second": str(float(2**63 - 1)),
    "log.segment.delete.delay.ms": "60000",
    "log.preallocate": "false",
    "log.message.format.version": MESSAGE_FORMAT_VERSION,
    "log.message.downconversion.enable": "true",
    "num.recovery.threads.per.data.dir": "1",
    "message.max.bytes": "1048588",
    "socket.request.max.bytes": "104857600",
    "connections.max.idle.ms": "600000",
    "socket.send.buffer.bytes": "102400",
    "socket.receive.buffer.bytes": "102400",
    "queued.max.requests": "500",
    # bytes of big request frames being received at once, over all connections (Kafka's key; -1 there is no
    # bound, here a default of 2 × socket.request.max.bytes): past it, the broker stops reading those sockets
    "queued.max.request.bytes": "-1",
    # Kafka's keys; -1 (here the default): as many as the file limit allows, less a reserve for the broker's
    # own files and connections (logs, ZooKeeper, its fetchers)
    "max.connections": "-1",
    "max.connections.per.ip": "-1",
    "num.replica.fetchers": "1",
    "replica.lag.time.max.ms": "30000",
    "replica.fetch.max.bytes": "1048576",
    "replica.fetch.wait.max.ms": "500",
    "max.incremental.fetch.session.cache.slots": "1000",
    "unclean.leader.election.enable": "false",
    "controlled.shutdown.enable": "true",
    "auto.leader.rebalance.enable": "true",
    "leader.imbalance.check.interval.seconds": "300",
    "group.initial.rebalance.delay.ms": "3000",
    "group.min.session.timeout.ms": "6000",
    "group.max.session.timeout.ms": "1800000",
    "offset.metadata.max.bytes": "4096",  # longer commit metadata: OFFSET_METADATA_TOO_LARGE
    # the transaction coordinator (broker/coordinator/txn/coordinator.py), Kafka's keys and defaults
    "transaction.max.timeout.ms": "900000",
    "transactional.id.expiration.ms": "604800000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "10000",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "3600000",
    # the authorizer (broker/security/acl_authorizer.py): empty is none, everything allowed
    "authorizer.class.name": "",
    "super.users": None,
    "allow.everyone.if.no.acl.found": "false",
    # listeners and security (docs/security.md)
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
    "inter.broker.listener.name": None,
    "security.inter.broker.protocol": None,  # Kafka's default PLAINTEXT, applied when neither key is set
    "ssl.keystore.type": "PEM",
    "ssl.keystore.location": None,
    "ssl.key.password": None,
    "ssl.truststore.type": "PEM",
    "ssl.truststore.location": None,
    "ssl.client.auth": "none",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "ssl.cipher.suites": None,
    "ssl.endpoint.identification.algorithm": "https",  # the broker as a TLS client (its replica fetchers)
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "sasl.jaas.config": None,
}

#: keys a listener may override as `listener.name.<lower-case name>.<key>`
PER_LISTENER = frozenset(k for k in DEFAULTS if k.startswith("ssl.")) | {
    "sasl.enabled.mechanisms", "sasl.jaas.config",
}  # fmt: skip

#: `listener.name.<name>.<key>`, or `listener.name.<name>.<mechanism lower-case>.sasl.jaas.config`
_LISTENER_KEY = re.compile(r"listener\.name\.([a-z0-9_-]+)\.(?:([a-z0-9-]+)\.(sasl\.jaas\.config)|(.+))")

#: secrets: never shown as they are (DescribeConfigs marks them sensitive)
SENSITIVE = ("password", "sasl.jaas.config", "zookeeper.digest.auth")  # (by the key's end)

_WILDCARDS = ("", "0.0.0.0", "::")

#: accepted and ignored: one event loop does the work of Kafka's thread pools
IGNORED = frozenset({
    "num.network.threads", "num.io.threads", "background.threads", "num.recovery.threads.per.data.dir",
    "offsets.topic.replication.factor", "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr",
})  # fmt: skip


#: the key ends at the first `=`, `:` or blank; then blanks and at most one `=` or `:` separate it from the value
_PROPERTY = re.compile(r"([^=:\s]+)\s*[=:]?\s*(.*)")


def parse_properties(text: str, source: str = "properties") -> dict[str, str]:
    """Java properties: `key=value` or `key: value`, `#`/`!` comments, `\\` line continuations."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        lineno = i + 1
        i += 1
        if not line or line[0] in "#!":
            continue  # comments never continue onto the next line
        while line.endswith("\\") and i < len(lines):
            line = line[:-1] + lines[i].strip()
            i += 1
        m = _PROPERTY.match(line)
        if m is None:
            raise UsageError(f"{source}:{lineno}: expected key=value, got {line!r}")
        out[m.group(1)] = m.group(2).strip()
    return out


def parse_override(text: str, option: str = "--override") -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"{option} {text!r}: expected key=value")
    return key.strip(), value.strip()


def _int(props: dict[str, str], key: str) -> int:
    value = props[key]
    try:
        return int(value)
    except (TypeError, ValueError):
        raise KafkactlError(f"config {key}={value!r}: not an integer") from None


def _bool(props: dict[str, str], key: str) -> bool:
    value = (props[key] or "").lower()
    if value not in ("true", "false"):
        raise KafkactlError(f"config {key}={props[key]!r}: expected true or false")
    return value == "true"


def _idle_ms(props: dict[str, str], key: str) -> int:
    """A timeout in ms that may be off: a positive number, or negative for never (-1, as Kafka reads any negative)."""
    value = _int(props, key)
    if value == 0:
        raise KafkactlError(f"config {key}=0: expected a positive number of milliseconds, or -1 for never")
    return -1 if value < 0 else value


@dataclass(frozen=True)
class Listener:
    """One `NAME://host:port` of `listeners` (or `advertised.listeners`) with its security protocol."""

    name: str
    protocol: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return PROTOCOLS[self.protocol][0]

    @property
    def sasl(self) -> bool:
        return PROTOCOLS[self.protocol][1]

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@dataclass(frozen=True)
class TlsSettings:
    """A TLS listener's keys (PEM files only), after its `listener.name.<name>.` overrides."""

    keystore: str | None  # PEM: the certificate chain and the private key
    key_password: str | None
    truststore: str | None  # PEM CA bundle: what client certificates must chain to
    client_auth: str  # none | requested | required
    protocols: tuple[str, ...]  # TLSv1.2, TLSv1.3
    ciphers: str | None  # OpenSSL cipher names, comma-separated as Kafka lists them
    endpoint_identification: str  # "https" (check the server's name) or "" (do not), for the broker as a client


def parse_protocol_map(text: str) -> dict[str, str]:
    """`listener.security.protocol.map`: {listener name: security protocol}."""
    out: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        name, sep, proto = item.strip().partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if not sep or not name or proto not in PROTOCOLS:
            raise KafkactlError(f"listener.security.protocol.map: {item.strip()!r} is not NAME:PROTOCOL "
                                f"(protocols: {', '.join(PROTOCOLS)})")  # fmt: skip
        out[name] = proto
    return out


def parse_listeners(text: str, protocols: dict[str, str], key: str = "listeners") -> list[Listener]:
    """`NAME://host:port,...`: each a listener whose name `protocols` maps; names must not repeat."""
    out: list[Listener] = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        name, sep, rest = item.partition("://")
        name = name.upper()
        if not sep or not name:
            raise KafkactlError(f"{key}: {item!r} is not NAME://host:port")
        if name not in protocols:
            raise KafkactlError(f"{key}: listener {name} has no security protocol: add {name}:<protocol> to "
                                f"listener.security.protocol.map (protocols: {', '.join(PROTOCOLS)})")  # fmt: skip
        if any(lst.name == name for lst in out):
            raise KafkactlError(f"{key}: listener {name} is given twice")
        host, _, port = rest.rpartition(":")
        try:
            number = int(port)
        except ValueError:
            raise KafkactlError(f"{key}: listener {item!r}: port is not a number") from None
        if not 0 <= number < 65536:
            raise KafkactlError(f"{key}: listener {item!r}: port is not a TCP port")
        out.append(Listener(name, protocols[name], host.strip("[]") or "127.0.0.1", number))
    if not out:
        raise KafkactlError(f"{key}: no listener in {text!r}")
    return out


def with_first_port(listeners: str, port: int) -> str:
    """`listeners` with the first listener's port replaced (the broker CLI's `--port`)."""
    items = [i.strip() for i in listeners.split(",") if i.strip()]
    if not items:
        return f"PLAINTEXT://127.0.0.1:{port}"
    head, sep, _ = items[0].rpartition(":")
    if not sep or "://" not in head:
        raise KafkactlError(f"listeners: {items[0]!r} is not NAME://host:port")
    return ",".join([f"{head}:{port}", *items[1:]])


@dataclass
class BrokerConfig:
    """The broker's settings, typed; `props` keeps every key as given for DescribeConfigs."""

    props: dict[str, str] = field(default_factory=dict)
    broker_id: int = 0
    host: str = "127.0.0.1"
    port: int = 9092
    listeners: list[Listener] = field(default_factory=lambda: [Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)])
    #: what is registered in ZooKeeper, by listener name (a port 0 there: the port the listener was bound to)
    advertised: dict[str, Listener] = field(default_factory=dict)
    inter_broker_listener_name: str = "PLAINTEXT"
    log_dirs: list[Path] = field(default_factory=list)
    zookeeper_connect: str = "localhost:2181"
    zk_session_timeout_ms: int = 18000
    zk_connection_timeout_ms: int = 18000
    num_partitions: int = 1
    default_replication_factor: int = 1
    min_insync_replicas: int = 1
    auto_create_topics: bool = True
    delete_topic_enable: bool = True
    log: LogConfig = field(default_factory=LogConfig)
    retention_check_interval_ms: int = 300000
    flush_scheduler_interval_ms: int = MAX_LONG
    socket_request_max_bytes: int = 104857600
    connections_max_idle_ms: int = 600000  # -1: never
    socket_send_buffer_bytes: int = 102400
    socket_receive_buffer_bytes: int = 102400
    queued_max_requests: int = 500
    queued_max_request_bytes: int = -1
    max_connections: int = -1
    max_connections_per_ip: int = -1
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    offset_metadata_max_bytes: int = 4096
    replica_lag_time_max_ms: int = 30000
    replica_fetch_max_bytes: int = 1048576
    replica_fetch_wait_max_ms: int = 500
    max_incremental_fetch_session_cache_slots: int = 1000
    unclean_leader_election: bool = False
    controlled_shutdown: bool = True
    explicit: frozenset[str] = frozenset()

    @classmethod
    def load(cls, file: Path | None = None, overrides: dict[str, str] | None = None) -> BrokerConfig:
        given: dict[str, str] = {}
        if file is not None:
            try:
                text = Path(file).read_text()
            except OSError as exc:
                raise KafkactlError(f"cannot read config file {file}: {exc.strerror}") from None
            given.update(parse_properties(text, str(file)))
        given.update(overrides or {})
        for key in given:
            if key in IGNORED:
                log.info("config key %s is accepted and ignored (one event loop serves everything)", key)
            elif key not in DEFAULTS and not _listener_key(key):
                raise KafkactlError(f"unknown configuration key {key!r}")
        props = {k: v for k, v in DEFAULTS.items() if v is not None}
        props.update(given)
        return cls.from_props(props, frozenset(given))

    @classmethod
    def from_props(cls, props: dict[str, str], explicit: frozenset[str]) -> BrokerConfig:
        c = cls(props=props, explicit=explicit)
        c.broker_id = _int(props, "broker.id")
        c._listeners()
        dirs = props.get("log.dirs") or props.get("log.dir")
        c.log_dirs = [Path(d.strip()).expanduser() for d in dirs.split(",") if d.strip()] if dirs else [
            default_log_dir(c.broker_id)
        ]  # fmt: skip
        c.zookeeper_connect = props["zookeeper.connect"]
        c.zk_session_timeout_ms = _int(props, "zookeeper.session.timeout.ms")
        c.zk_connection_timeout_ms = (
            _int(props, "zookeeper.connection.timeout.ms") if props.get("zookeeper.connection.timeout.ms")
            else c.zk_session_timeout_ms
        )  # fmt: skip
        c.num_partitions = _int(props, "num.partitions")
        c.default_replication_factor = _int(props, "default.replication.factor")
        c.min_insync_replicas = _int(props, "min.insync.replicas")
        c.auto_create_topics = _bool(props, "auto.create.topics.enable")
        c.delete_topic_enable = _bool(props, "delete.topic.enable")
        c.retention_check_interval_ms = _int(props, "log.retention.check.interval.ms")
        c.flush_scheduler_interval_ms = _int(props, "log.flush.scheduler.interval.ms")
        c.socket_request_max_bytes = _int(props, "socket.request.max.bytes")
        c.connections_max_idle_ms = _idle_ms(props, "connections.max.idle.ms")
        # Only sizes set on purpose are applied: on Linux a fixed SO_SNDBUF/SO_RCVBUF turns off the kernel's
        # buffer autotuning, and Kafka's 100 KiB default then caps a sendfile fetch to ~100 KiB per wake-up.
        for key, attr in (("socket.send.buffer.bytes", "socket_send_buffer_bytes"),
                          ("socket.receive.buffer.bytes", "socket_receive_buffer_bytes")):  # fmt: skip
            setattr(c, attr, _int(props, key) if key in explicit else -1)
        c.queued_max_requests = _int(props, "queued.max.requests")
        c.queued_max_request_bytes = _int(props, "queued.max.request.bytes")
        c.max_connections = _int(props, "max.connections")
        c.max_connections_per_ip = _int(props, "max.connections.per.ip")
        c.group_initial_rebalance_delay_ms = _int(props, "group.initial.rebalance.delay.ms")
        c.group_min_session_timeout_ms = _int(props, "group.min.session.timeout.ms")
        c.group_max_session_timeout_ms = _int(props, "group.max.session.timeout.ms")
        c.offset_metadata_max_bytes = _int(props, "offset.metadata.max.bytes")
        c.replica_lag_time_max_ms = _int(props, "replica.lag.time.max.ms")
        c.replica_fetch_max_bytes = _int(props, "replica.fetch.max.bytes")
        c.replica_fetch_wait_max_ms = _int(props, "replica.fetch.wait.max.ms")
        c.max_incremental_fetch_session_cache_slots = _int(props, "max.incremental.fetch.session.cache.slots")
        c.unclean_leader_election = _bool(props, "unclean.leader.election.enable")
        c.controlled_shutdown = _bool(props, "controlled.shutdown.enable")
        c.log = c._log_config()
        return c

    def _listeners(self) -> None:
        """`listeners`, `advertised.listeners` and the inter-broker listener, checked as Kafka checks them."""
        p = self.props
        protocols = parse_protocol_map(p["listener.security.protocol.map"])
        if "listeners" in self.explicit or "port" not in p:
            self.listeners = parse_listeners(p["listeners"], protocols)
        else:  # legacy `port` / `host.name`
            host = p.get("host.name") or "127.0.0.1"
            self.listeners = [Listener("PLAINTEXT", "PLAINTEXT", host, _int(p, "port"))]
        self.host, self.port = self.listeners[0].host, self.listeners[0].port
        names = {lst.name: lst for lst in self.listeners}
        if p.get("advertised.listeners"):
            given = parse_listeners(p["advertised.listeners"], protocols, "advertised.listeners")
            for lst in given:
                if lst.name not in names:
                    raise KafkactlError(f"advertised.listeners: listener {lst.name} is not one of listeners "
                                        f"({', '.join(names)})")  # fmt: skip
            self.advertised = {lst.name: lst for lst in given}
        else:
            self.advertised = {
                x.name: Listener(x.name, x.protocol, "127.0.0.1" if x.host in _WILDCARDS else x.host, x.port)
                for x in self.listeners
            }
        for lst in self.listeners:
            tls = self.tls(lst.name)
            if lst.tls and not tls.keystore:
                raise KafkactlError(f"listener {lst.name} ({lst.protocol}) needs ssl.keystore.location (or "
                                    f"listener.name.{lst.name.lower()}.ssl.keystore.location): a PEM file with "
                                    "the broker's certificate chain and private key")  # fmt: skip
        for key in ("ssl.keystore.type", "ssl.truststore.type"):
            for lst in self.listeners:
                value = (self.listener_setting(lst.name, key) or "PEM").upper()
                if value != "PEM":
                    raise KafkactlError(f"{key}={value}: only PEM files are supported")
        by_name, by_protocol = p.get("inter.broker.listener.name"), p.get("security.inter.broker.protocol")
        if by_name and by_protocol:
            raise KafkactlError("set only one of inter.broker.listener.name and security.inter.broker.protocol")
        if by_name:
            name = by_name.strip().upper()
            if name not in self.advertised:
                raise KafkactlError(f"inter.broker.listener.name={by_name}: not an advertised listener "
                                    f"({', '.join(self.advertised)})")  # fmt: skip
        else:
            proto = (by_protocol or "PLAINTEXT").strip().upper()
            if proto not in PROTOCOLS:
                raise KafkactlError(f"security.inter.broker.protocol={by_protocol}: expected one of "
                                    f"{', '.join(PROTOCOLS)}")  # fmt: skip
            name = proto  # Kafka: the listener named after the protocol
            if name not in self.advertised:
                raise KafkactlError(f"no {name} listener for the brokers to talk to each other: add one, or set "
                                    f"inter.broker.listener.name to one of {', '.join(self.advertised)}")  # fmt: skip
        self.inter_broker_listener_name = name

    def listener_setting(self, name: str, key: str) -> str | None:
        """A security key for one listener: `listener.name.<name>.<key>` if given, else the plain key."""
        return self.props.get(f"listener.name.{name.lower()}.{key}", self.props.get(key))

    def tls(self, name: str) -> TlsSettings:
        """The TLS settings of the listener `name` (its overrides applied); errors name the bad key."""
        client_auth = (self.listener_setting(name, "ssl.client.auth") or "none").strip().lower()
        if client_auth not in ("none", "requested", "required"):
            raise KafkactlError(f"ssl.client.auth={client_auth}: expected none, requested or required")
        protocols = tuple(x.strip() for x in (self.listener_setting(name, "ssl.enabled.protocols") or "").split(",")
                          if x.strip())  # fmt: skip
        for proto in protocols:
            if proto not in ("TLSv1.2", "TLSv1.3"):
                raise KafkactlError(f"ssl.enabled.protocols: {proto!r} is not served (TLSv1.2, TLSv1.3)")
        return TlsSettings(
            keystore=self.listener_setting(name, "ssl.keystore.location") or None,
            key_password=self.listener_setting(name, "ssl.key.password") or None,
            truststore=self.listener_setting(name, "ssl.truststore.location") or None,
            client_auth=client_auth, protocols=protocols or ("TLSv1.2", "TLSv1.3"),
            ciphers=self.listener_setting(name, "ssl.cipher.suites") or None,
            endpoint_identification=(self.listener_setting(name, "ssl.endpoint.identification.algorithm") or ""),
        )  # fmt: skip

    def jaas_config(self, name: str, mechanism: str) -> str | None:
        """`sasl.jaas.config` for a listener and mechanism: `listener.name.<name>.<mechanism>.sasl.jaas.config`,
        else the plain key (None when neither is set)."""
        key = f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config"
        return self.props.get(key, self.props.get("sasl.jaas.config"))

    def sasl_mechanisms(self, name: str) -> list[str]:
        """`sasl.enabled.mechanisms` of a listener, upper-case."""
        value = self.listener_setting(name, "sasl.enabled.mechanisms") or ""
        return [m.strip().upper() for m in value.split(",") if m.strip()]

    @property
    def inter_broker_listener(self) -> Listener:
        """The advertised listener the brokers use among themselves (`inter.broker.listener.name`); its TLS
        client settings are `tls(name)`, its SASL mechanism `sasl.mechanism.inter.broker.protocol`."""
        return self.advertised[self.inter_broker_listener_name]

    @property
    def advertised_host(self) -> str:
        """The first advertised listener's host (what `broker start --daemon` and old readers print)."""
        return next(iter(self.advertised.values())).host

    @property
    def advertised_port(self) -> int:
        return next(iter(self.advertised.values())).port

    def _log_config(self) -> LogConfig:
        p = self.props
        if p.get("log.retention.ms"):
            retention = _int(p, "log.retention.ms")
        elif p.get("log.retention.minutes"):
            retention = _int(p, "log.retention.minutes") * 60_000
        else:
            retention = _int(p, "log.retention.hours") * 3_600_000
        roll = _int(p, "log.roll.ms") if p.get("log.roll.ms") else _int(p, "log.roll.hours") * 3_600_000
        flush_ms = _int(p, "log.flush.interval.ms") if p.get("log.flush.interval.ms") else MAX_LONG
        ts_type = p["log.message.timestamp.type"]
        if ts_type not in ("CreateTime", "LogAppendTime"):
            raise KafkactlError(f"config log.message.timestamp.type={ts_type!r}: expected CreateTime or LogAppendTime")
        jitter = (_int(p, "log.roll.jitter.ms") if p.get("log.roll.jitter.ms")
                  else _int(p, "log.roll.jitter.hours") * 3_600_000)  # fmt: skip
        lc = LogConfig(
            segment_bytes=_int(p, "log.segment.bytes"), segment_ms=roll,
            index_interval_bytes=_int(p, "log.index.interval.bytes"),
            index_max_bytes=_int(p, "log.index.size.max.bytes"),
            flush_messages=_int(p, "log.flush.interval.messages"), flush_ms=flush_ms,
            retention_ms=-1 if retention < 0 else retention, retention_bytes=_int(p, "log.retention.bytes"),
            max_message_bytes=_int(p, "message.max.bytes"), message_timestamp_type=ts_type,
            message_timestamp_difference_max_ms=_int(p, "log.message.timestamp.difference.max.ms"),
            compression_type=p["compression.type"].strip(), segment_jitter_ms=jitter,
        )  # fmt: skip
        for broker_key, topic_key in topic_configs.BROKER_SYNONYMS.items():  # each default, as its topic key
            if p.get(broker_key):
                why = topic_configs.value_error(topic_key, p[broker_key], broker_key)
                if why:
                    raise KafkactlError(f"config: {why}")
        for key, low in (("log.cleaner.threads", 1), ("log.cleaner.backoff.ms", 0),
                         ("log.cleaner.dedupe.buffer.size", 1)):  # fmt: skip
            if _int(p, key) < low:
                raise KafkactlError(f"config {key}={p[key]!r}: must be at least {low}")
        for key in ("log.cleaner.io.buffer.load.factor", "log.cleaner.io.max.bytes.per.second"):
            try:
                if float(p[key]) <= 0:
                    raise ValueError
            except ValueError:
                raise KafkactlError(f"config {key}={p[key]!r}: expected a positive number") from None
        return lc.with_overrides({k: p[b] for b, k in _CLEANER_DEFAULTS.items() if p.get(b)})

    #: topic-level key → the broker key whose value is its default (None: none, empty by default); every key
    #: of Kafka 2.8's LogConfig (broker/server/topic_configs.py)
    TOPIC_DEFAULTS = {name: key.broker_key for name, key in topic_configs.KEYS.items()}

    #: the broker keys that stand for a topic key's default besides its synonym (coarser units)
    _ALSO = {"segment.ms": ("log.roll.hours",), "segment.jitter.ms": ("log.roll.jitter.hours",),
             "retention.ms": ("log.retention.minutes", "log.retention.hours")}  # fmt: skip

    def topic_defaults(self) -> dict[str, str]:
        """Each topic-level key with the value a topic without overrides gets."""
        lc, p = self.log, self.props
        out = {name: p.get(key, "") if key else "" for name, key in self.TOPIC_DEFAULTS.items()}
        out |= {name: str(getattr(lc, attr)) for name, attr in LogConfig.KEYS.items()}
        out["min.insync.replicas"] = str(self.min_insync_replicas)
        out["unclean.leader.election.enable"] = str(self.unclean_leader_election).lower()
        return out

    def topic_default_synonyms(self, name: str) -> list[tuple[str, str, bool]]:
        """The broker keys behind a topic key's default, most precise first, each as the broker's config sets
        it and as its built-in default: (key, value, whether from the broker's config), as Kafka's
        DescribeConfigs lists a topic key's synonyms."""
        key = self.TOPIC_DEFAULTS.get(name)
        out = []
        for k in (key, *self._ALSO.get(name, ())) if key else ():
            if k in self.explicit:
                out.append((k, self.props[k], True))
            if DEFAULTS.get(k) is not None:  # (after a static value too, as Kafka lists each source)
                out.append((k, DEFAULTS[k] or "", False))
        return out

    def topic_default_is_static(self, name: str) -> bool:
        """Whether a topic key's default comes from the broker's config file or overrides (Kafka's
        STATIC_BROKER_CONFIG source) rather than from Kafka's built-in default."""
        key = self.TOPIC_DEFAULTS.get(name)
        return key is not None and any(k in self.explicit for k in (key, *self._ALSO.get(name, ())))


#: the broker keys of the log cleaner's topic-level keys (their defaults), as `_log_config` applies them
_CLEANER_DEFAULTS = {
    "log.cleanup.policy": "cleanup.policy", "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
}  # fmt: skip


def is_sensitive(key: str) -> bool:
    """Whether a key holds a secret (a key password, a JAAS configuration), plain or per listener."""
    return key.endswith(SENSITIVE)


def _listener_key(key: str) -> bool:
    """Whether `key` is a per-listener security key (`listener.name.<name>.ssl.…`, `…<mech>.sasl.jaas.config`)."""
    m = _LISTENER_KEY.fullmatch(key)
    return m is not None and (m.group(3) is not None or m.group(4) in PER_LISTENER)


def topic_config_error(config: dict[str, str], defaults: dict[str, str] | None = None) -> str | None:
    """Why a topic's overrides are unacceptable (an unknown key, a bad value, Kafka's words), or None;
    `defaults` (the broker's topic defaults) for the checks of one key against another."""
    return topic_configs.config_error(config, defaults)


def log_config_for(base: LogConfig, overrides: dict[str, str]) -> LogConfig:
    """A topic's LogConfig: the broker's with the topic's overrides (keys LogConfig does not hold skipped)."""
    return base.with_overrides({k: v for k, v in overrides.items() if k in LogConfig.KEYS})
