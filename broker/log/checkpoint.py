"""Offset checkpoint files of a log dir and the clean-shutdown marker.

`recovery-point-offset-checkpoint`, `replication-offset-checkpoint` and `log-start-offset-checkpoint`
share Kafka's text format::

    0                      version
    2                      number of entries
    orders 0 1234          topic, partition, offset
    orders 1 1180

A checkpoint is written to `<name>.tmp`, fsynced, renamed over the old file and the directory
fsynced, so a crash at any moment leaves either the old or the new file whole.
`.kafka_cleanshutdown` exists only between a clean shutdown and the next start.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

from broker.errors import KafkactlError

RECOVERY_POINT = "recovery-point-offset-checkpoint"
REPLICATION = "replication-offset-checkpoint"
LOG_START = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
VERSION = 0

TopicPartition = tuple[str, int]


class CheckpointError(KafkactlError):
    """A checkpoint file that does not parse."""


def write_atomically(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace `path` with `data` so that a crash leaves the old or the new content, never a mix. A failed
    write (a full disk) leaves the old file and no `.tmp` behind, and the OSError goes on. `sync=False`:
    no fsync (a process crash still leaves one whole file; the caller makes it durable against power loss
    in a batch, `broker.log.durability`)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if sync:
        fsync_dir(path.parent)


def overwrite(path: Path, data: bytes) -> None:
    """Rewrite `path` in place with `data`, without fsync: for a file whose reader takes what its own header
    announces and ignores what follows (a crash between the write and the truncation leaves the old text's
    end behind the new one). Far cheaper than `write_atomically`'s rename on ext4."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        at = 0
        while at < len(data):
            at += os.pwrite(fd, view[at:], at)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class OffsetCheckpointFile:
    """One `topic partition offset` checkpoint file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, offsets: dict[TopicPartition, int]) -> None:
        lines = [str(VERSION), str(len(offsets))]
        lines += [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
        write_atomically(self.path, ("\n".join(lines) + "\n").encode())

    def read(self) -> dict[TopicPartition, int]:
        """The checkpointed offsets ({} when the file does not exist)."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        except UnicodeDecodeError:
            raise CheckpointError(f"{self.path}: not a text checkpoint file") from None
        lines = text.splitlines()
        try:
            version, count = int(lines[0]), int(lines[1])
            if version != VERSION:
                raise CheckpointError(f"{self.path}: unknown checkpoint version {version}")
            entries = lines[2:]
            while entries and not entries[-1].strip():  # trailing blank lines are no entries
                entries.pop()
            if len(entries) != count:  # fewer or more: a torn or foreign file (Kafka refuses both)
                raise CheckpointError(f"{self.path}: expected {count} entries, found {len(entries)}")
            out: dict[TopicPartition, int] = {}
            for line in entries:
                topic, partition, offset = line.split(" ")
                out[(topic, int(partition))] = int(offset)
            return out
        except (IndexError, ValueError):
            raise CheckpointError(f"{self.path}: malformed checkpoint file") from None


def read_or_set_aside(path: Path, clock: Callable[[], float], consequence: str) -> dict[TopicPartition, int]:
    """A checkpoint's offsets; one that does not parse (empty, torn, foreign) is set aside as
    `<name>.<ms>.corrupt`, never overwritten in place, and read as none (`consequence` says what that costs,
    in the warning logged)."""
    try:
        return OffsetCheckpointFile(path).read()
    except CheckpointError as exc:
        aside = path.with_name(f"{path.name}.{int(clock() * 1000)}.corrupt")
        os.replace(path, aside)
        logging.getLogger(__name__).warning("%s; kept as %s: %s", exc, aside, consequence)
        return {}
