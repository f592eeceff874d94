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
or by a broker that lost it) gets one built from its batches' leader epochs; an empty log has none.

The file is written without fsync (a change of leader at 10,000 partitions would cost 20,000 fsyncs on the
event loop): `on_write` tells the log manager, whose next durability point of the log dir (the broker's
minutely checkpoint, or a clean shutdown: one `syncfs` per dir) makes it durable. A kill -9 keeps the page
cache; a power loss may leave an older, intact file, so `load` reconciles the file with the log's batches:
entries starting past the log end are dropped, and epochs the batches carry past the file's last entry are
added (from that entry's start on; the log's last batch tells cheaply whether any is missing). A file whose
last entry the log contradicts (a batch at or after its start carrying an older epoch) is rebuilt whole.

The file is rewritten in place (one `pwrite` of the whole text at its start, then a truncation to its length),
not through a new file renamed over it: on ext4 a rename over a file waits for the new one's data (about
0.8 ms here, against 14 µs), and every follower's first copy in a new epoch writes the file. A kill -9
between the two calls leaves the new text followed by the end of the old one, which `parse` ignores (it reads
the entries the count line announces); a power loss may tear it, and a file that does not parse is rebuilt.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from broker.log.checkpoint import overwrite

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


#: (base offset, leader epoch) of each batch of the log from the one holding the given offset (from the log
#: start for a lower one) to the log end, oldest first
BatchEpochs = Callable[[int], Iterable[tuple[int, int]]]


class LeaderEpochCache:
    """The (epoch, start offset) entries of one partition, written through to its checkpoint file."""

    def __init__(self, directory: Path, entries: list[tuple[int, int]] | None = None,
                 on_write: Callable[[Path], None] | None = None) -> None:  # fmt: skip
        self.path = Path(directory) / FILE
        self.entries: list[tuple[int, int]] = list(entries or [])
        #: told after each (unsynced) write of the file, with its path
        self.on_write = on_write

    @classmethod
    def load(cls, directory: Path, batch_epochs: BatchEpochs, log_end_offset: int,
             on_write: Callable[[Path], None] | None = None) -> LeaderEpochCache:  # fmt: skip
        """The partition's cache from its file reconciled with the log (see the module doc), else from
        `batch_epochs` (read only then), written to a new file unless the log carries no epoch."""
        path = Path(directory) / FILE
        try:
            entries = parse(path.read_text())
        except FileNotFoundError:
            entries = None
        except (OSError, ValueError) as exc:
            log.warning("%s: %s; rebuilding it from the log", path, exc)
            entries = None
        if entries is not None:
            cache = cls(directory, entries, on_write)
            if cache._reconcile(batch_epochs, log_end_offset):
                return cache
            log.warning("%s: contradicted by the log's batches; rebuilding it from the log", path)
        cache = cls(directory, on_write=on_write)
        for offset, epoch in batch_epochs(-1):
            cache.assign(epoch, offset, write=False)
        if cache.entries or path.exists():
            cache.write()
        return cache

    def _reconcile(self, batch_epochs: BatchEpochs, log_end_offset: int) -> bool:
        """Bring entries read from the file up to the log (a power loss may have kept an older file); False
        if the log contradicts them (the caller rebuilds them whole). Cheap when they agree: the log's
        batch epochs never decrease, so its last batch tells whether one is missing."""
        kept = [e for e in self.entries if e[1] <= log_end_offset]
        last = list(batch_epochs(log_end_offset - 1))[-1:] if log_end_offset > 0 else []
        last_epoch = last[0][1] if last else UNDEFINED
        latest = kept[-1][0] if kept else UNDEFINED
        if last_epoch > latest:  # epochs the file missed: from its last entry on
            tail = list(batch_epochs(kept[-1][1] if kept else -1))
            if kept and tail and kept[-1][1] < log_end_offset and tail[0][1] != kept[-1][0]:
                return False
            added = [(epoch, offset) for offset, epoch in tail if epoch > latest]
            for epoch, offset in added:
                if epoch > (kept[-1][0] if kept else UNDEFINED):
                    kept.append((epoch, offset))
            log.warning("%s was older than the log: %d epoch(s) added from its batches", self.path, len(added))
        elif kept and last_epoch != UNDEFINED and last_epoch < latest and kept[-1][1] < log_end_offset:
            return False  # (a batch at or after the latest epoch's start carries an older epoch)
        if kept != self.entries:
            self.entries = kept
            self.write()
        return True

    def write(self) -> None:
        try:
            overwrite(self.path, render(self.entries).encode())
        except OSError as exc:  # the next change writes it again; a lost file is rebuilt from the log
            log.warning("writing %s failed: %s", self.path, exc)
            return
        if self.on_write is not None:
            self.on_write(self.path)

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
