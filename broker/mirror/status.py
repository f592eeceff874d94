"""How far a mirror is, read from the two clusters alone: each source partition's end against the source
offset its target partition's last batch carries. It needs no running mirror and no state of its own."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from broker.client.admin import Admin
from broker.client.security import ClientSecurity
from broker.mirror.engine import read_tails
from broker.mirror.topics import Selection
from broker.protocol.messages.fetch import EARLIEST, LATEST


@dataclass
class PartitionStatus:
    topic: str
    partition: int
    target_topic: str
    source_start: int
    source_end: int
    #: the source offset mirrored up to (None: nothing yet)
    mirrored: int | None
    lag: int
    #: the target partition holds messages the mirror did not write
    foreign: bool = False


def mirror_status(source: str, target: str, selection: Selection, source_security: ClientSecurity | None = None,
                  target_security: ClientSecurity | None = None) -> list[PartitionStatus]:  # fmt: skip
    """One row per selected source partition (each cluster's security settings: None, the process default)."""
    with Admin(source, security=source_security) as src:
        topics = selection.pick(src.list_topics())
        tps = [(t, p) for t, n in topics.items() for p in range(n)]
        starts = src.list_offsets(tps, EARLIEST) if tps else {}
        ends = src.list_offsets(tps, LATEST) if tps else {}
    with Admin(target, security=target_security) as dst:
        existing = dst.list_topics()
    present = [(selection.target(t), p) for t, p in tps if p < existing.get(selection.target(t), 0)]
    tails = asyncio.run(read_tails(target, present, target_security)) if present else {}
    rows = []
    for t, p in tps:
        tail = tails.get((selection.target(t), p))
        mirrored = tail.resume.source_offset if tail is not None and tail.resume is not None else None
        foreign = tail is not None and tail.resume is None and tail.end > tail.start
        done = mirrored if mirrored is not None else starts[(t, p)]
        rows.append(PartitionStatus(t, p, selection.target(t), starts[(t, p)], ends[(t, p)], mirrored,
                                    max(0, ends[(t, p)] - done), foreign))  # fmt: skip
    return rows
