"""How far a mirror is, read from the two clusters alone: each source partition's end against the source
offset its target partition's last batch carries. It needs no running mirror and no state of its own.

The source's end is its last stable offset, as far as the mirror copies (read_committed). Where the
offsets after the mirrored one hold no committed data (transaction markers, aborted records), the lag
is 0: the mirror has nothing left to copy; else it counts from the first committed batch not mirrored.

A target partition that cannot take the mirror's batches now says why (`problem`), as a running mirror's
progress line names it stuck: no leader, or fewer in-sync replicas than its min.insync.replicas (every
acks=all produce is refused NOT_ENOUGH_REPLICAS). One Metadata and one DescribeConfigs request for all
the target topics."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from broker.client.admin import Admin
from broker.client.consumer import ConsumerConfig
from broker.client.security import ClientSecurity
from broker.errors import KafkactlError
from broker.mirror.engine import CLIENT_ID, CommittedSource, TopicPartition, read_tails
from broker.mirror.topics import Selection
from broker.protocol.api import ApiKey
from broker.protocol.messages.admin import TOPIC_RESOURCE
from broker.protocol.messages.fetch import EARLIEST, LATEST
from broker.records.record_set import batches


@dataclass
class PartitionStatus:
    topic: str
    partition: int
    target_topic: str
    source_start: int
    source_end: int  # its last stable offset: where committed data ends (the high watermark but for open transactions)
    #: the source offset mirrored up to (None: nothing yet)
    mirrored: int | None
    lag: int
    #: the target partition holds messages the mirror did not write
    foreign: bool = False
    #: why the target partition cannot take batches now (None: it can, as far as the target tells)
    problem: str | None = None


def mirror_status(source: str, target: str, selection: Selection, source_security: ClientSecurity | None = None,
                  target_security: ClientSecurity | None = None) -> list[PartitionStatus]:  # fmt: skip
    """One row per selected source partition (each cluster's security settings: None, the process default)."""
    with Admin(source, security=source_security) as src:
        topics = selection.pick(src.list_topics())
        tps = [(t, p) for t, n in topics.items() for p in range(n)]
        starts = src.list_offsets(tps, EARLIEST) if tps else {}
        ends = src.list_offsets(tps, LATEST, isolation_level=1) if tps else {}
    with Admin(target, security=target_security) as dst:
        existing = dst.list_topics()
        problems = target_problems(dst, sorted({selection.target(t) for t in topics} & set(existing)))
    present = [(selection.target(t), p) for t, p in tps if p < existing.get(selection.target(t), 0)]
    tails = asyncio.run(read_tails(target, present, target_security)) if present else {}
    rows = []
    for t, p in tps:
        tail = tails.get((selection.target(t), p))
        mirrored = tail.resume.source_offset if tail is not None and tail.resume is not None else None
        foreign = tail is not None and tail.resume is None and tail.end > tail.start
        done = max(mirrored if mirrored is not None else starts[(t, p)], starts[(t, p)])
        rows.append(PartitionStatus(t, p, selection.target(t), starts[(t, p)], ends[(t, p)], mirrored,
                                    max(0, ends[(t, p)] - done), foreign,
                                    problems.get((selection.target(t), p))))  # fmt: skip
    lagging = {(r.topic, r.partition): (r.source_end - r.lag, r.source_end) for r in rows if r.lag and not r.foreign}
    if lagging:
        firsts = asyncio.run(first_committed(source, lagging, source_security))
        for r in rows:
            if (r.topic, r.partition) in firsts:
                first = firsts[(r.topic, r.partition)]
                r.lag = 0 if first is None else r.source_end - first
    return rows


def target_problems(admin: Admin, topics: list[str]) -> dict[TopicPartition, str]:
    """{target partition: why it refuses produce requests now}: no leader, or fewer in-sync replicas than
    min.insync.replicas. Empty when the target does not tell (its answers are a diagnosis, not the copy)."""
    if not topics:
        return {}
    try:
        md = admin.cluster.metadata(topics)
        body = {"resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": t,
                               "configuration_keys": ["min.insync.replicas"]} for t in topics],
                "include_synonyms": False, "include_documentation": False}  # fmt: skip
        answer = admin.cluster.any_connection().request(ApiKey.DESCRIBE_CONFIGS, body)
    except KafkactlError:
        return {}
    minimum: dict[str, int] = {}
    for res in answer["results"]:
        for c in res["configs"] if not res["error_code"] else ():
            if c["name"] == "min.insync.replicas" and c["value"] and c["value"].isdigit():
                minimum[res["resource_name"]] = int(c["value"])
    out: dict[TopicPartition, str] = {}
    for t in md["topics"]:
        for p in t["partitions"] if not t["error_code"] else ():
            tp = (t["name"], p["partition_index"])
            isr, need = len(p["isr_nodes"]), minimum.get(t["name"], 1)
            if p["leader_id"] < 0:
                out[tp] = "LEADER_NOT_AVAILABLE: no leader"
            elif isr < need:
                out[tp] = f"NOT_ENOUGH_REPLICAS: {isr} in sync, min.insync.replicas={need}"
    return out


async def first_committed(bootstrap: str, ranges: dict[TopicPartition, tuple[int, int]],
                          security: ClientSecurity | None = None,
                          timeout_s: float = 30.0) -> dict[TopicPartition, int | None]:  # fmt: skip
    """Per partition, the offset of the first committed record in [from, end) (None: there is none, only markers
    and aborted records), read read_committed up to the first data batch."""
    out: dict[TopicPartition, int | None] = {}
    cfg = ConsumerConfig(client_id=CLIENT_ID, auto_offset_reset="earliest", fetch_max_wait_ms=50, security=security)
    consumer = CommittedSource(bootstrap, cfg)
    try:
        await consumer.start()
        await consumer.assign(list(ranges))
        for tp, (first, _) in ranges.items():
            consumer.seek(tp, first)
        deadline = time.monotonic() + timeout_s
        while len(out) < len(ranges):
            if time.monotonic() > deadline:
                raise KafkactlError(f"reading the source's committed offsets took over {timeout_s:g}s")
            for tp, record_sets in (await consumer.getmany(timeout_ms=200)).items():
                first, end = ranges[tp]
                for rs in record_sets:
                    if tp in out:
                        break
                    found = _first_data(rs.data, first, end)
                    if found is not None or rs.next_offset >= end:
                        out[tp] = found
    finally:
        await consumer.close()
    return out


def _first_data(data: memoryview, first: int, end: int) -> int | None:
    """The first offset in [first, end) of a data batch of the record set (None: none there)."""
    for _, h in batches(data):
        if h.base_offset >= end:
            break
        if not h.is_control and h.last_offset >= first:
            return max(h.base_offset, first)
    return None
