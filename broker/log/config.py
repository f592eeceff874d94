"""The per-partition settings of a log, under the topic-level names of Kafka's configuration."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

MAX_LONG = 2**63 - 1

#: `compression.type` → the batch codec a leader writes (compression.Codec's numbers); `producer`: as produced
CODECS = {"producer": -1, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@dataclass(frozen=True, slots=True)
class LogConfig:
    """What a partition log needs to know: roll, index, flush, retention and size limits."""

    segment_bytes: int = 1073741824  # segment.bytes / log.segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000  # segment.ms / log.roll.ms
    index_interval_bytes: int = 4096  # index.interval.bytes
    index_max_bytes: int = 10485760  # segment.index.bytes / log.index.size.max.bytes
    flush_messages: int = MAX_LONG  # flush.messages / log.flush.interval.messages
    flush_ms: int = MAX_LONG  # flush.ms / log.flush.interval.ms
    retention_ms: int = 7 * 24 * 3600 * 1000  # retention.ms (-1: forever)
    retention_bytes: int = -1  # retention.bytes (-1: no limit)
    max_message_bytes: int = 1048588  # max.message.bytes / message.max.bytes
    message_timestamp_type: str = "CreateTime"  # or LogAppendTime
    message_timestamp_difference_max_ms: int = MAX_LONG  # CreateTime records further from the clock: refused
    compression_type: str = "producer"  # compression.type: the codec the leader stores batches in
    segment_jitter_ms: int = 0  # segment.jitter.ms / log.roll.jitter.ms: a segment rolls up to this much early
    # the log cleaner's keys (broker/log/cleaner.py): cleanup.policy is "delete", "compact" or "compact,delete"
    cleanup_policy: str = "delete"  # cleanup.policy / log.cleanup.policy
    delete_retention_ms: int = 86400000  # delete.retention.ms / log.cleaner.delete.retention.ms
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms / log.cleaner.min.compaction.lag.ms
    max_compaction_lag_ms: int = MAX_LONG  # max.compaction.lag.ms / log.cleaner.max.compaction.lag.ms
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio / log.cleaner.min.cleanable.ratio
    #: the codec batches are recompressed to (-1: kept as produced)
    target_codec: int = field(init=False, compare=False, default=-1)
    #: whether a leader must look into produced batches beyond validation (a timestamp window, a codec to
    #: enforce, LogAppendTime, keys a compacted log needs): one attribute the produce paths read, so the usual
    #: case costs no more
    checks_batches: bool = field(init=False, compare=False, default=False)

    #: topic-level key → field
    KEYS = {
        "segment.bytes": "segment_bytes",
        "segment.ms": "segment_ms",
        "index.interval.bytes": "index_interval_bytes",
        "segment.index.bytes": "index_max_bytes",
        "flush.messages": "flush_messages",
        "flush.ms": "flush_ms",
        "retention.ms": "retention_ms",
        "retention.bytes": "retention_bytes",
        "max.message.bytes": "max_message_bytes",
        "message.timestamp.type": "message_timestamp_type",
        "message.timestamp.difference.max.ms": "message_timestamp_difference_max_ms",
        "compression.type": "compression_type",
        "segment.jitter.ms": "segment_jitter_ms",
        "cleanup.policy": "cleanup_policy",
        "delete.retention.ms": "delete_retention_ms",
        "min.compaction.lag.ms": "min_compaction_lag_ms",
        "max.compaction.lag.ms": "max_compaction_lag_ms",
        "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    }

    def __post_init__(self) -> None:
        codec = CODECS.get(self.compression_type, -1)
        object.__setattr__(self, "target_codec", codec)
        checks = (codec >= 0 or self.message_timestamp_difference_max_ms < MAX_LONG
                  or self.message_timestamp_type != "CreateTime" or self.compact)  # fmt: skip
        object.__setattr__(self, "checks_batches", checks)

    def with_overrides(self, overrides: dict[str, Any]) -> LogConfig:
        """A copy with topic-level keys applied; an unknown key raises KeyError naming it."""
        changes: dict[str, Any] = {}
        types = {f.name: f.type for f in fields(self)}
        for key, value in overrides.items():
            if key not in self.KEYS:
                raise KeyError(key)
            name = self.KEYS[key]
            if name == "cleanup_policy":
                changes[name] = ",".join(i.strip() for i in value.split(","))
            elif types[name] == "str":
                changes[name] = value.strip()
            else:
                changes[name] = float(value) if types[name] == "float" else int(value)
        return replace(self, **changes)

    @property
    def compact(self) -> bool:
        """Whether the log cleaner compacts this log (cleanup.policy holds `compact`)."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """Whether retention (time and size) deletes old segments (cleanup.policy holds `delete`)."""
        return "delete" in self.cleanup_policy.split(",")
