"""The `kafkactl` data source's options: read, checked and turned into a SourceOptions.

The options themselves are listed in `broker.spark.source`. Names are case-insensitive, as in Spark's Kafka
source; an unknown name is an error (SourceError names the first bad option).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from broker.client.security import KEYS as SECURITY_KEYS
from broker.client.security import ClientSecurity
from broker.errors import KafkactlError
from broker.protocol.messages.fetch import EARLIEST, LATEST

TopicPartition = tuple[str, int]


class SourceError(KafkactlError):
    """Options that cannot be read, or a range that cannot be planned or read."""

    __module__ = "broker.spark.source"  # the data source's public name, as users see and catch it


class OffsetBound(NamedTuple):
    """Where a read starts or ends, as an option gave it.

    kind: ``earliest`` | ``latest`` | ``offsets`` ({tp: offset, -2 earliest, -1 latest}) |
    ``timestamp`` (epoch ms for all partitions) | ``timestamps`` ({tp: epoch ms}).
    """

    kind: str
    value: Any = None


#: Consumer settings a `kafka.*` option may set (Kafka's name → ConsumerConfig field, type).
CONSUMER_OPTIONS: dict[str, tuple[str, type]] = {
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", int),
    "fetch.max.bytes": ("fetch_max_bytes", int),
    "fetch.min.bytes": ("fetch_min_bytes", int),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", int),
    "request.timeout.ms": ("request_timeout_ms", int),
    "client.id": ("client_id", str),
}

#: Options of Spark's Kafka source that mean nothing to a batch read here: accepted, ignored.
IGNORED_OPTIONS = frozenset(k.lower() for k in (
    "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "groupIdPrefix", "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs", "kafka.group.id", "path",
))  # fmt: skip

KNOWN_OPTIONS = (
    "bootstrap.servers", "kafka.bootstrap.servers", "subscribe", "subscribePattern", "assign", "startingOffsets",
    "endingOffsets", "startingTimestamp", "endingTimestamp", "startingOffsetsByTimestamp", "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy", "failOnDataLoss", "minPartitions", "maxRecordsPerPartition",
    "includeHeaders", "kafkaConsumer.pollTimeoutMs",
)  # fmt: skip
_KNOWN = frozenset(k.lower() for k in KNOWN_OPTIONS)


@dataclass(frozen=True)
class SourceOptions:
    """The source's options, parsed and checked (`parse_options`); what planning and reading act on."""

    bootstrap: str | None = None
    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    assign: tuple[TopicPartition, ...] | None = None
    starting: OffsetBound = OffsetBound("earliest")
    ending: OffsetBound = OffsetBound("latest")
    starting_by_timestamp_strategy: str = "error"
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    include_headers: bool = True
    poll_timeout_ms: int = 120_000
    consumer: dict[str, Any] = field(default_factory=dict)


_OFFSETS_HELP = 'JSON like {"topic":{"0":23,"1":-2}} (-2 earliest, -1 latest)'


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Read the source's options (keys case-insensitive); SourceError names the first bad one."""
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    unknown = sorted(k for k in opts if k not in _KNOWN and k not in IGNORED_OPTIONS and not k.startswith("kafka."))
    if unknown:
        raise SourceError(f"unknown option {unknown[0]!r} (known: {', '.join(KNOWN_OPTIONS)})")

    bootstrap = opts.get("bootstrap.servers") or opts.get("kafka.bootstrap.servers")
    if bootstrap is not None and not bootstrap.strip():
        raise SourceError("bootstrap.servers is empty")

    given = [name for name in ("subscribe", "subscribePattern", "assign") if name.lower() in opts]
    if len(given) != 1:
        which = ", ".join(given) if given else "none"
        raise SourceError(f"give exactly one of the options subscribe, subscribePattern, assign (got: {which})")
    subscribe = pattern = assign = None
    if "subscribe" in opts:
        subscribe = tuple(dict.fromkeys(t.strip() for t in opts["subscribe"].split(",") if t.strip()))
        if not subscribe:
            raise SourceError("subscribe: no topic named (expected comma-separated topic names)")
    elif "subscribepattern" in opts:
        pattern = opts["subscribepattern"].strip()
        if not pattern:
            raise SourceError("subscribePattern is empty")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SourceError(f"subscribePattern {pattern!r} is not a valid regular expression: {exc}") from None
    else:
        assign = _parse_assign(opts["assign"])

    starting = _parse_bound(opts, "starting")
    ending = _parse_bound(opts, "ending")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise SourceError(f"startingOffsetsByTimestampStrategy: expected error or latest, got {strategy!r}")

    consumer: dict[str, Any] = {}
    secured: dict[str, str] = {}
    for key, value in opts.items():
        if key.startswith("kafka.") and key[6:] in CONSUMER_OPTIONS:
            name, kind = CONSUMER_OPTIONS[key[6:]]
            consumer[name] = _positive_int(value, key) if kind is int else value
        elif key.startswith("kafka.") and key[6:] in SECURITY_KEYS:
            secured[key[6:]] = value
    if secured:  # kafka.security.protocol=SASL_SSL, ...: the driver's planning and every executor connect so
        try:
            consumer["security"] = ClientSecurity.from_properties(secured)
        except KafkactlError as exc:
            raise SourceError(f"kafka.{exc}") from None
    return SourceOptions(
        bootstrap=bootstrap.strip() if bootstrap else None,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        starting_by_timestamp_strategy=strategy,
        fail_on_data_loss=_bool(opts.get("failondataloss", "true"), "failOnDataLoss"),
        min_partitions=_positive_int(opts["minpartitions"], "minPartitions") if "minpartitions" in opts else None,
        max_records_per_partition=(
            _positive_int(opts["maxrecordsperpartition"], "maxRecordsPerPartition")
            if "maxrecordsperpartition" in opts
            else None
        ),  # fmt: skip
        include_headers=_bool(opts.get("includeheaders", "true"), "includeHeaders"),
        poll_timeout_ms=_positive_int(opts.get("kafkaconsumer.polltimeoutms", "120000"), "kafkaConsumer.pollTimeoutMs"),
        consumer=consumer,
    )


def _bool(text: str, name: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise SourceError(f"{name}: expected true or false, got {text!r}")
    return value == "true"


def _positive_int(text: str, name: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise SourceError(f"{name}: expected a positive whole number, got {text!r}") from None
    if value <= 0:
        raise SourceError(f"{name}: expected a positive whole number, got {text!r}")
    return value


def _timestamp(text: Any, name: str) -> int:
    if isinstance(text, bool) or not isinstance(text, int | str):
        raise SourceError(f"{name}: expected a timestamp in epoch milliseconds, got {text!r}")
    try:
        value = int(text.strip()) if isinstance(text, str) else text
    except ValueError:
        raise SourceError(f"{name}: expected a timestamp in epoch milliseconds, got {text!r}") from None
    if value < 0:
        raise SourceError(f"{name}: expected a timestamp in epoch milliseconds (>= 0), got {text!r}")
    return value


def _json_object(text: str, name: str, example: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict):
        raise SourceError(f"{name}: expected {example}, got {text!r}")
    return doc


def _parse_assign(text: str) -> tuple[TopicPartition, ...]:
    example = 'JSON like {"topic":[0,1]}'
    doc = _json_object(text, "assign", example)
    out: list[TopicPartition] = []
    for topic, parts in doc.items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0
                                                  for p in parts):  # fmt: skip
            raise SourceError(f"assign: expected {example}, got {text!r}")
        out.extend((topic, p) for p in parts)
    if not out:
        raise SourceError("assign: no partition named")
    return tuple(sorted(set(out)))


def _partition_map(text: str, name: str, example: str) -> dict[TopicPartition, Any]:
    """{"t": {"0": v}} → {("t", 0): v}, values unchecked."""
    doc = _json_object(text, name, example)
    out: dict[TopicPartition, Any] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise SourceError(f"{name}: expected {example}, got {text!r}")
        for p, value in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise SourceError(f"{name}: partition {p!r} of topic {topic!r} is not a number") from None
            if partition < 0:
                raise SourceError(f"{name}: partition {p!r} of topic {topic!r} is negative")
            out[(topic, partition)] = value
    if not out:
        raise SourceError(f"{name}: no partition named")
    return out


def _parse_bound(opts: dict[str, str], which: str) -> OffsetBound:
    """startingX / endingX: timestamp beats byTimestamp beats offsets (Spark's precedence)."""
    name = f"{which}Timestamp"
    if name.lower() in opts:
        return OffsetBound("timestamp", _timestamp(opts[name.lower()], name))
    name = f"{which}OffsetsByTimestamp"
    if name.lower() in opts:
        found = _partition_map(opts[name.lower()], name, 'JSON like {"topic":{"0":1700000000000}}')
        stamps = {tp: _timestamp(ts, f"{name} for {tp[0]}-{tp[1]}") for tp, ts in found.items()}
        return OffsetBound("timestamps", stamps)
    name = f"{which}Offsets"
    default = "earliest" if which == "starting" else "latest"
    text = opts.get(name.lower(), default).strip()
    if text.lower() == "earliest":
        if which == "ending":
            raise SourceError("endingOffsets cannot be earliest for a batch read")
        return OffsetBound("earliest")
    if text.lower() == "latest":
        if which == "starting":
            raise SourceError("startingOffsets cannot be latest for a batch read")
        return OffsetBound("latest")
    example = f"earliest, latest or {_OFFSETS_HELP}"
    if not text.startswith("{"):
        raise SourceError(f"{name}: expected {example}, got {text!r}")
    offsets = _partition_map(text, name, example)
    for (t, p), off in offsets.items():
        if isinstance(off, bool) or not isinstance(off, int) or off < EARLIEST:
            raise SourceError(f"{name} for {t}-{p}: expected an offset, -2 (earliest) or -1 (latest), got {off!r}")
        if which == "starting" and off == LATEST:
            raise SourceError(f"{name} for {t}-{p} cannot be -1 (latest) for a batch read")
        if which == "ending" and off == EARLIEST:
            raise SourceError(f"{name} for {t}-{p} cannot be -2 (earliest) for a batch read")
    return OffsetBound("offsets", offsets)
