"""The topic-level configuration keys of Apache Kafka 2.8 (LogConfig), each with its type, Kafka's check and
the broker key whose value is its default (Kafka's TopicConfigSynonyms).

Checks and their wording are Kafka's ConfigDef ones (`Invalid value V for configuration K: …`), so a client
sees what a Kafka broker would tell it. What kafkactl does with each key is in docs/configuration.md: some
change behaviour (retention, rolls, `compression.type`, the timestamp keys, `max.message.bytes`, and
`cleanup.policy` with the compaction keys, which drive the log cleaner, broker/log/cleaner.py), and
`message.format.version` / `message.downconversion.enable` are accepted and checked only (kafkactl always
writes v2 batches).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

MAX_LONG = 2**63 - 1
MIN_LONG = -(2**63)
MAX_INT = 2**31 - 1
MIN_INT = -(2**31)

#: the values of `compression.type`, in Kafka's order (BrokerCompressionCodec.brokerCompressionOptions)
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

#: Kafka 2.8's ApiVersion strings (ApiVersion.allVersions): what `message.format.version` may name
_API_VERSIONS = (
    "0.8.0", "0.8.1", "0.8.2", "0.9.0", "0.10.0-IV0", "0.10.0-IV1", "0.10.1-IV0", "0.10.1-IV1", "0.10.1-IV2",
    "0.10.2-IV0", "0.11.0-IV0", "0.11.0-IV1", "0.11.0-IV2", "1.0-IV0", "1.1-IV0", "2.0-IV0", "2.0-IV1",
    "2.1-IV0", "2.1-IV1", "2.1-IV2", "2.2-IV0", "2.2-IV1", "2.3-IV0", "2.3-IV1", "2.4-IV0", "2.4-IV1",
    "2.5-IV0", "2.6-IV0", "2.7-IV0", "2.7-IV1", "2.7-IV2", "2.8-IV0", "2.8-IV1",
)  # fmt: skip
#: each version and its short form ("2.8", "0.10.0"), as ApiVersion.versionMap
_VERSION_NAMES = frozenset(_API_VERSIONS) | {v.split("-")[0] for v in _API_VERSIONS}

#: Kafka 2.8's default `log.message.format.version`
MESSAGE_FORMAT_VERSION = "2.8-IV1"

_THROTTLED = re.compile(r"\d+:\d+")


class TopicKey(NamedTuple):
    """One topic-level key: Kafka's type (INT, LONG, DOUBLE, BOOLEAN, STRING, LIST), the broker key that gives
    its default (None: none, the default is empty) and a check of the parsed value (a problem, or None)."""

    name: str
    type: str
    broker_key: str | None
    check: Callable[[object], str | None] | None = None


def _at_least(low: int) -> Callable[[object], str | None]:
    return lambda v: f"Value must be at least {low}" if v < low else None  # type: ignore[operator]


def _one_of(*allowed: str) -> Callable[[object], str | None]:
    return lambda v: None if v in allowed else f"String must be one of: {', '.join(allowed)}"


def _ratio(v: object) -> str | None:
    if v < 0:  # type: ignore[operator]
        return "Value must be at least 0"
    return "Value must be no more than 1" if v > 1 else None  # type: ignore[operator]


def _policy(v: object) -> str | None:
    items = v if isinstance(v, list) else []
    for item in items:
        if item not in ("compact", "delete"):
            return "String must be one of: compact, delete"  # (Kafka's ValidList wording)
    return None


def _throttled(v: object) -> str | None:
    items = v if isinstance(v, list) else []
    if items == ["*"] or all(_THROTTLED.fullmatch(i) for i in items):
        return None
    return ("must be the literal '*' or a list of replicas in the following format: "
            "[partitionId]:[brokerId],[partitionId]:[brokerId],...")  # fmt: skip


def _format_version(v: object) -> str | None:
    text = str(v)
    parts = text.split(".")
    key = ".".join(parts[: 3 if text.startswith("0.") else 2])
    return None if key in _VERSION_NAMES else f"Version `{text}` is not a valid version"


#: every topic-level key of Kafka 2.8, in LogConfig's order
KEYS: dict[str, TopicKey] = {k.name: k for k in (
    TopicKey("segment.bytes", "INT", "log.segment.bytes", _at_least(14)),
    TopicKey("segment.ms", "LONG", "log.roll.ms", _at_least(1)),
    TopicKey("segment.jitter.ms", "LONG", "log.roll.jitter.ms", _at_least(0)),
    TopicKey("segment.index.bytes", "INT", "log.index.size.max.bytes", _at_least(4)),
    TopicKey("flush.messages", "LONG", "log.flush.interval.messages", _at_least(1)),
    TopicKey("flush.ms", "LONG", "log.flush.interval.ms", _at_least(0)),
    TopicKey("retention.bytes", "LONG", "log.retention.bytes"),
    TopicKey("retention.ms", "LONG", "log.retention.ms", _at_least(-1)),
    TopicKey("max.message.bytes", "INT", "message.max.bytes", _at_least(0)),
    TopicKey("index.interval.bytes", "INT", "log.index.interval.bytes", _at_least(0)),
    TopicKey("delete.retention.ms", "LONG", "log.cleaner.delete.retention.ms", _at_least(0)),
    TopicKey("min.compaction.lag.ms", "LONG", "log.cleaner.min.compaction.lag.ms", _at_least(0)),
    TopicKey("max.compaction.lag.ms", "LONG", "log.cleaner.max.compaction.lag.ms", _at_least(1)),
    TopicKey("file.delete.delay.ms", "LONG", "log.segment.delete.delay.ms", _at_least(0)),
    TopicKey("min.cleanable.dirty.ratio", "DOUBLE", "log.cleaner.min.cleanable.ratio", _ratio),
    TopicKey("cleanup.policy", "LIST", "log.cleanup.policy", _policy),
    TopicKey("unclean.leader.election.enable", "BOOLEAN", "unclean.leader.election.enable"),
    TopicKey("min.insync.replicas", "INT", "min.insync.replicas", _at_least(1)),
    TopicKey("compression.type", "STRING", "compression.type", _one_of(*COMPRESSION_TYPES)),
    TopicKey("preallocate", "BOOLEAN", "log.preallocate"),
    TopicKey("message.format.version", "STRING", "log.message.format.version", _format_version),
    TopicKey("message.timestamp.type", "STRING", "log.message.timestamp.type", _one_of("CreateTime", "LogAppendTime")),
    TopicKey("message.timestamp.difference.max.ms", "LONG", "log.message.timestamp.difference.max.ms",
             _at_least(0)),
    TopicKey("leader.replication.throttled.replicas", "LIST", None, _throttled),
    TopicKey("follower.replication.throttled.replicas", "LIST", None, _throttled),
    TopicKey("message.downconversion.enable", "BOOLEAN", "log.message.downconversion.enable"),
)}  # fmt: skip

#: broker key → the topic key it is the default of
BROKER_SYNONYMS = {k.broker_key: k.name for k in KEYS.values() if k.broker_key}

_RANGES = {"INT": (MIN_INT, MAX_INT), "LONG": (MIN_LONG, MAX_LONG)}


def parse(key: TopicKey, value: object) -> object:
    """The value as Kafka's ConfigDef parses it (trimmed; numbers in their type's range); raises ValueError
    with Kafka's reason."""
    if not isinstance(value, str):
        raise ValueError(f"Not a value of type {key.type}")
    text = value.strip()
    if key.type in _RANGES:
        try:
            number = int(text)
        except ValueError:
            raise ValueError(f"Not a number of type {key.type}") from None
        low, high = _RANGES[key.type]
        if not low <= number <= high:
            raise ValueError(f"Not a number of type {key.type}")
        return number
    if key.type == "DOUBLE":
        try:
            return float(text)
        except ValueError:
            raise ValueError("Not a number of type DOUBLE") from None
    if key.type == "BOOLEAN":
        if text.lower() not in ("true", "false"):
            raise ValueError("Expected value to be either true or false")
        return text.lower() == "true"
    if key.type == "LIST":
        return [i.strip() for i in text.split(",")] if text else []
    return text


def value_error(name: str, value: object, label: str | None = None) -> str | None:
    """Why `value` is no good for the topic key `name` (Kafka's ConfigException text, naming `label` — the
    broker key, when checking the broker's default — or the key), or None."""
    key = KEYS[name]
    try:
        parsed = parse(key, value)
        why = key.check(parsed) if key.check is not None else None
    except ValueError as exc:
        why = str(exc)
    return None if why is None else f"Invalid value {value} for configuration {label or name}: {why}"


def config_error(config: dict[str, str], defaults: dict[str, str] | None = None) -> str | None:
    """Why a topic's overrides are unacceptable (an unknown key, a bad value, min.compaction.lag.ms over
    max.compaction.lag.ms with the `defaults` for the one not overridden), or None."""
    for name, value in config.items():
        if name not in KEYS:
            return f"Unknown topic config name: {name}"
        why = value_error(name, value)
        if why:
            return why
    merged = (defaults or {}) | config
    lags = [merged.get(k, d) for k, d in (("min.compaction.lag.ms", "0"), ("max.compaction.lag.ms", str(MAX_LONG)))]
    low, high = (int(v.strip()) for v in lags)
    if low > high:
        return f"conflict topic config setting min.compaction.lag.ms ({low}) > max.compaction.lag.ms ({high})"
    return None
