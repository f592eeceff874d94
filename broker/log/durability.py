"""Durability points for many files at once: one `syncfs(2)` per log dir instead of an fsync per file.

Control-path files (a new log's files, its topic id, the leader-epoch checkpoint, the minute's producer
snapshots) are written without fsync and made durable in batches: `syncfs` flushes every dirty page and
inode of the file system holding the dir in one call (and ext4 one journal commit). Python has no
`os.syncfs`, so it is called through ctypes; where it is missing or fails (errors are reported since
Linux 5.8), `make_durable` falls back to an fsync per file and per dir. A process kill (kill -9) keeps
the page cache, so only power loss is concerned: what a lost batch costs is told where each file is
written (a missing or stale epoch checkpoint is rebuilt or reconciled from the log, a missing snapshot
only lengthens the replay of the log, a missing topic id is written again).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from broker.log.checkpoint import fsync_dir

log = logging.getLogger(__name__)

_libc: ctypes.CDLL | None = None
_loaded = False


def _syncfs_fn():  # noqa: ANN202 (a ctypes function or None)
    global _libc, _loaded
    if not _loaded:
        _loaded = True
        with contextlib.suppress(OSError, AttributeError):
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
            _libc.syncfs.argtypes = [ctypes.c_int]
    return getattr(_libc, "syncfs", None) if _libc is not None else None


def syncfs(directory: Path) -> bool:
    """Flush the whole file system holding `directory` to disk: True once done, False where syncfs is
    unavailable (the caller then fsyncs file by file). OSError if it failed: a write-back error (reported
    since Linux 5.8), which an fsync on a newly opened descriptor might no longer report, so a clean
    shutdown must not count that dir as flushed."""
    fn = _syncfs_fn()
    if fn is None:
        return False
    fd = os.open(directory, os.O_RDONLY)
    try:
        if fn(fd) != 0:
            err = ctypes.get_errno()
            if err == errno.ENOSYS:
                return False
            raise OSError(err, f"syncfs: {os.strerror(err)}", str(directory))
        return True
    finally:
        os.close(fd)


def fsync_path(path: Path) -> None:
    """fsync a file or a dir by path (one gone meanwhile is skipped: nothing of it is left to keep)."""
    with contextlib.suppress(FileNotFoundError):
        fsync_dir(path)  # (opens read-only and fsyncs: a file as well as a dir)


def make_durable(directory: Path, paths: Iterable[Path]) -> None:
    """Make `paths` (files and dirs under the log dir `directory`, written without fsync) and the names in
    their parent dirs durable: one `syncfs`, else (unavailable, or it failed) an fsync of each and of each
    parent. OSError goes on."""
    try:
        if syncfs(directory):
            return
    except OSError as exc:
        log.warning("%s; fsyncing file by file", exc)
    paths = list(dict.fromkeys(paths))
    for p in paths:
        fsync_path(p)
    for parent in dict.fromkeys(p.parent for p in paths):
        fsync_path(parent)
