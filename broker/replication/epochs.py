"""A partition's leader epochs: where each leader's writes begin, kept in `leader-epoch-checkpoint`.

A follower that takes a new leader asks it (OffsetsForLeaderEpoch) where the follower's latest epoch
ends in the leader's log, and truncates there rather than to its own high watermark (KIP-101, KIP-279):
what it holds past that point was never the leader's, and what it holds below it is, even if its high
watermark had not caught up yet.

The file, as Kafka writes it in each partition dir:

    0                 version
    2                 number of entries
    0 0               <leader epoch> <first offset written at that epoch>
    3 1458

Entries are in increasing epoch and offset order. A log without the file (written before it existed,
or by a broker that lost it) gets one built from its batches' leader epochs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from broker.log.checkpoint import write_atomically

log = logging.getLogger(__name__)

FILE = "leader-epoch-checkpoint"
UNDEFINED = -1


def parse(text: str) -> list[tuple[int, int]]:
    """The entries of a checkpoint's text; ValueError when it is not one."""
    lines = text.split("\n")
    if len(lines) < 2 or lines[0].strip() != "0":
        raise ValueError("not a version 0 leader-epoch-checkpoint")
    count = int(lines[1])
    entries = []
    for line in lines[2 : 2 + count]:
        epoch, offset = line.split()
        entries.append((int(epoch), int(offset)))
    if len(entries) != count:
        raise ValueError(f"{count} entries announced, {len(entries)} present")
    return entries


def render(entries: list[tuple[int, int]]) -> str:
    return "0\n" + f"{len(entries)}\n" + "".join(f"{e} {o}\n" for e, o in entries)


class LeaderEpochCache:
    """The (epoch, start offset) entries of one partition, written through to its checkpoint file."""

    def __init__(self, directory: Path, entries: list[tuple[int, int]] | None = None) -> None:
        self.path = Path(directory) / FILE
        self.entries: list[tuple[int, int]] = list(entries or [])

    @classmethod
    def load(cls, directory: Path, batch_epochs: Callable[[], Iterable[tuple[int, int]]]) -> LeaderEpochCache:
        """The partition's cache from its file, else from `batch_epochs()` ((base offset, leader epoch) of each
        batch, oldest first; read only then), written to a new file."""
        path = Path(directory) / FILE
        try:
            return cls(directory, parse(path.read_text()))
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            log.warning("%s: %s; rebuilding it from the log", path, exc)
        cache = cls(directory)
        for offset, epoch in batch_epochs():
            cache.assign(epoch, offset, write=False)
        cache.write()
        return cache

    def write(self) -> None:
        try:
            write_atomically(self.path, render(self.entries).encode())
        except OSError as exc:  # the next change writes it again; a lost file is rebuilt from the log
            log.warning("writing %s failed: %s", self.path, exc)

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED

    def assign(self, epoch: int, start_offset: int, *, write: bool = True) -> bool:
        """Note that `epoch` begins at `start_offset`, if it is newer than the latest; True if it was."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return False
        self.entries.append((epoch, start_offset))
        if write:
            self.write()
        return True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(the largest epoch ≤ `epoch`, the first offset after it) as OffsetsForLeaderEpoch answers; the latest
        epoch ends at the log end; (-1, -1) for an epoch past every known one or when nothing is known."""
        if epoch == UNDEFINED or not self.entries:
            return UNDEFINED, UNDEFINED
        if epoch == self.entries[-1][0]:
            return epoch, log_end_offset
        higher = next((e for e in self.entries if e[0] > epoch), None)
        if higher is None:
            return UNDEFINED, UNDEFINED
        floor = [e for e in self.entries if e[0] <= epoch]
        return (floor[-1][0] if floor else epoch), higher[1]

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was cut back to `end_offset`: forget the epochs that began at or past it."""
        kept = [e for e in self.entries if e[1] < end_offset]
        if kept != self.entries:
            self.entries = kept
            self.write()

    def clear(self) -> None:
        self.entries = []
        self.write()
