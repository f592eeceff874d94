"""Planning the `kafkactl` data source's reads: the offset range of each topic partition, and its splits.

`plan_ranges` asks the cluster once, on the driver, and resolves the options into one closed-open range
``[start, end)`` of offsets per assigned topic partition; `split_ranges` cuts those into the input
partitions, the way Spark's Kafka source does.
"""

from __future__ import annotations

import heapq
import logging
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from broker.client.admin import Admin
from broker.protocol.errors import ErrorCode, error_name
from broker.protocol.messages.fetch import EARLIEST, LATEST
from broker.spark.errors import DataLossError
from broker.spark.options import OffsetBound, SourceError, SourceOptions, TopicPartition, parse_options

log = logging.getLogger("broker.spark.source")  # the data source's warnings, under the name they always had


class OffsetRange(NamedTuple):
    """Offsets ``[start, end)`` of one topic partition: what one input partition reads."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def wait_offsets(admin: Admin, tps: list[TopicPartition], timestamp: int, error: type[Exception], *,
                 isolation_level: int = 0) -> dict[TopicPartition, int]:  # fmt: skip
    """Each partition's offset at `timestamp` from its leader; a leader that cannot be reached (killed, not
    yet replaced by the controller) or moved is waited for, with fresh metadata and backoff, within the
    admin's timeout; then `error` names the partitions still without an answer and why."""
    found, why = admin.cluster.list_offsets(tps, timestamp, isolation_level=isolation_level)
    if why:
        names = ", ".join(f"{t}-{p}" for t, p in sorted(why))
        raise error(f"cannot list offsets of {names}: {'; '.join(dict.fromkeys(why.values()))}")
    return found


def plan_ranges(bootstrap: str | None, options: Mapping[str, str] | SourceOptions) -> list[OffsetRange]:
    """Resolve the options into one ``[start, end)`` per assigned topic partition, sorted by (topic, partition).

    Asks the cluster (metadata, ListOffsets) once; `bootstrap` may be None when the options carry
    ``bootstrap.servers``. Empty ranges are kept. A start below the partition's log start is a
    DataLossError, or with ``failOnDataLoss=false`` a warning and the log start (at most the end).
    Raises SourceError for options that do not fit the cluster (unknown topic, JSON that does not
    name exactly the assigned partitions, a start after the end, an end past the log end).
    """
    opts = options if isinstance(options, SourceOptions) else parse_options(options)
    bootstrap = bootstrap or opts.bootstrap
    if not bootstrap:
        raise SourceError("option bootstrap.servers is required")
    with Admin(bootstrap) as admin:
        tps = _assigned_partitions(admin, opts)
        if not tps:
            return []
        earliest = wait_offsets(admin, tps, EARLIEST, SourceError)
        latest = wait_offsets(admin, tps, LATEST, SourceError, isolation_level=1)  # committed data: up to the LSO
        starts = _resolve(admin, opts.starting, tps, earliest, latest, "starting", opts.starting_by_timestamp_strategy)
        ends = _resolve(admin, opts.ending, tps, earliest, latest, "ending", "latest")
    out = []
    for tp in tps:
        start, end, first, last = starts[tp], ends[tp], earliest[tp], latest[tp]
        name = f"{tp[0]}-{tp[1]}"
        if end > last:
            raise SourceError(f"{name}: the planned end {end} is past the partition's end {last}")
        if start < first:
            if opts.fail_on_data_loss:
                raise DataLossError(
                    f"{name}: offsets [{start}, {first}) are gone (the log starts at {first}, removed by retention?);"
                    f" set failOnDataLoss=false to start at the log start"
                )
            log.warning("%s: offsets [%d, %d) are gone (the log starts at %d); starting at %d (failOnDataLoss=false)",
                        name, start, first, first, min(first, end))  # fmt: skip
            start = min(first, end)
        if start > end:
            raise SourceError(f"{name}: the planned start {start} is after the planned end {end}")
        out.append(OffsetRange(tp[0], tp[1], start, end))
    return out


def _assigned_partitions(admin: Admin, opts: SourceOptions) -> list[TopicPartition]:
    """The topic partitions the options subscribe to, sorted; SourceError for a topic that does not exist."""
    if opts.subscribe_pattern is not None:
        md = admin.cluster.metadata(None)
        regex = re.compile(opts.subscribe_pattern)
        topics = [t for t in md["topics"]
                  if not t.get("is_internal") and not t["error_code"] and regex.fullmatch(t["name"])]  # fmt: skip
    else:
        names = list(opts.subscribe) if opts.subscribe is not None else sorted({t for t, _ in opts.assign or ()})
        md = admin.cluster.metadata(names)
        topics = md["topics"]
        by_name = {t["name"]: t for t in topics}
        for name in names:
            t = by_name.get(name)
            if t is None or t["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise SourceError(f"topic {name!r} does not exist")
            if t["error_code"]:
                raise SourceError(f"topic {name!r}: {error_name(t['error_code'])}")
    tps = sorted((t["name"], p["partition_index"]) for t in topics for p in t["partitions"])
    if opts.assign is not None:
        missing = sorted(set(opts.assign) - set(tps))
        if missing:
            raise SourceError(f"assign: topic {missing[0][0]!r} has no partition {missing[0][1]}")
        return list(opts.assign)
    return tps


def _check_named(given: dict[TopicPartition, Any], tps: list[TopicPartition], option: str) -> None:
    """Spark's rule: JSON offsets name every assigned partition and nothing else."""
    missing = sorted(set(tps) - set(given))
    extra = sorted(set(given) - set(tps))
    if missing or extra:
        parts = []
        if missing:
            parts.append("missing " + ", ".join(f"{t}-{p}" for t, p in missing))
        if extra:
            parts.append("not assigned " + ", ".join(f"{t}-{p}" for t, p in extra))
        raise SourceError(f"{option} must name every assigned partition and no other ({'; '.join(parts)});"
                          " use -2 for earliest, -1 for latest")  # fmt: skip


def _resolve(admin: Admin, spec: OffsetBound, tps: list[TopicPartition], earliest: dict[TopicPartition, int],
             latest: dict[TopicPartition, int], which: str, no_match: str) -> dict[TopicPartition, int]:  # fmt: skip
    """Offsets for a bound; `no_match` says what a timestamp after the last record means (error | latest)."""
    if spec.kind == "earliest":
        return dict(earliest)
    if spec.kind == "latest":
        return dict(latest)
    if spec.kind == "offsets":
        _check_named(spec.value, tps, f"{which}Offsets")
        return {tp: earliest[tp] if off == EARLIEST else latest[tp] if off == LATEST else off
                for tp, off in ((tp, spec.value[tp]) for tp in tps)}  # fmt: skip
    if spec.kind == "timestamp":
        stamps = dict.fromkeys(tps, spec.value)
        option = f"{which}Timestamp"
    else:
        _check_named(spec.value, tps, f"{which}OffsetsByTimestamp")
        stamps = {tp: spec.value[tp] for tp in tps}
        option = f"{which}OffsetsByTimestamp"
    by_stamp: dict[int, list[TopicPartition]] = {}
    for tp, ts in stamps.items():
        by_stamp.setdefault(ts, []).append(tp)
    out: dict[TopicPartition, int] = {}
    for ts, group in by_stamp.items():
        for tp, off in admin.list_offsets(group, ts).items():
            if off < 0:
                if no_match == "error":
                    raise SourceError(f"{option}: {tp[0]}-{tp[1]} has no record stamped at or after {ts} "
                                      "(startingOffsetsByTimestampStrategy=latest starts at the end)")  # fmt: skip
                off = latest[tp]
            out[tp] = off
    return out


# --- splitting -------------------------------------------------------------------------------------


def split_ranges(ranges: Sequence[OffsetRange], min_partitions: int | None = None,
                 max_records: int | None = None) -> list[OffsetRange]:  # fmt: skip
    """The input partitions for `ranges`: Spark's KafkaOffsetRangeCalculator, made to keep its promise.

    Empty ranges are dropped. With `max_records`, a range of n offsets becomes ceil(n / max_records)
    pieces. With `min_partitions` and fewer pieces than that, Spark's proportional split follows:
    pieces smaller than 1.5 ideal shares stay whole, each other piece gets
    max(1, round(size / big_total * (min_partitions - whole pieces))) parts. Where rounding leaves
    fewer than `min_partitions`, the piece with the largest parts is split once more, repeatedly
    (while any piece spans two offsets or more). A piece of n offsets in k parts is cut Spark's way:
    part i takes remaining // (k - i) offsets. Deterministic; sorted by (topic, partition, start);
    the union of the output is exactly the union of the non-empty input ranges.
    """
    if min_partitions is not None and min_partitions <= 0:
        raise ValueError("min_partitions must be positive")
    if max_records is not None and max_records <= 0:
        raise ValueError("max_records must be positive")
    pieces = sorted(r for r in ranges if r.size > 0)
    if max_records is not None:
        pieces = [p for r in pieces for p in _divide(r, math.ceil(r.size / max_records))]
    if min_partitions is not None and len(pieces) < min_partitions:
        total = sum(r.size for r in pieces)
        whole = [r.size / total * min_partitions < 1.5 for r in pieces]
        big_total = total - sum(r.size for r, w in zip(pieces, whole, strict=True) if w)
        big_min = max(min_partitions - sum(whole), 1)
        parts = [1 if w else max(_round_half_up(r.size / big_total * big_min), 1)
                 for r, w in zip(pieces, whole, strict=True)]  # fmt: skip
        parts = [min(k, r.size) for r, k in zip(pieces, parts, strict=True)]
        _top_up(pieces, parts, min_partitions)
        pieces = [p for r, k in zip(pieces, parts, strict=True) for p in _divide(r, k)]
    return sorted(pieces)


def _round_half_up(x: float) -> int:
    """Scala's math.round (half up), not Python's round (half to even)."""
    return math.floor(x + 0.5)


def _top_up(pieces: list[OffsetRange], parts: list[int], want: int) -> None:
    """Add parts, one at a time to the piece whose parts are largest, until `want` (or nothing splits)."""
    have = sum(parts)
    heap = [(-(r.size / k), i) for i, (r, k) in enumerate(zip(pieces, parts, strict=True)) if k < r.size]
    heapq.heapify(heap)
    while have < want and heap:
        _, i = heapq.heappop(heap)
        parts[i] += 1
        have += 1
        if parts[i] < pieces[i].size:
            heapq.heappush(heap, (-(pieces[i].size / parts[i]), i))


def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """`r` in `parts` consecutive pieces (Spark's getDividedPartition: the later pieces take the remainder)."""
    out = []
    remaining, start = r.size, r.start
    for i in range(parts):
        n = remaining // (parts - i)
        remaining -= n
        end = min(start + n, r.end)
        if end > start:
            out.append(OffsetRange(r.topic, r.partition, start, end))
        start = end
    return out
