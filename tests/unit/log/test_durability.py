"""Batched durability points: one syncfs(2) per log dir, else an fsync per file and per parent dir."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from broker.log import durability


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="syncfs(2) is Linux's")
def test_syncfs_flushes_the_file_system_of_a_dir(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    assert durability.syncfs(tmp_path) is True


def test_without_syncfs_each_file_and_its_dir_is_fsynced(tmp_path: Path, monkeypatch) -> None:
    part = tmp_path / "t-0"
    part.mkdir()
    files = [part / "a", part / "b"]
    for f in files:
        f.write_bytes(b"x")
    monkeypatch.setattr(durability, "_syncfs_fn", lambda: None)
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    durability.make_durable(tmp_path, [*files, part / "gone"])  # (one deleted meanwhile is skipped)
    assert sorted(synced) == sorted([str(files[0]), str(files[1]), str(part)])


def test_a_failed_syncfs_is_an_error_and_make_durable_falls_back(tmp_path: Path, monkeypatch) -> None:
    import errno

    class Failing:
        def __call__(self, fd: int) -> int:
            return -1

    monkeypatch.setattr(durability, "_syncfs_fn", lambda: Failing())
    monkeypatch.setattr(durability.ctypes, "get_errno", lambda: errno.EIO)
    with pytest.raises(OSError, match="syncfs"):
        durability.syncfs(tmp_path)
    (tmp_path / "f").write_bytes(b"x")
    durability.make_durable(tmp_path, [tmp_path / "f"])  # (fsyncs it instead; no error)
