"""Symlinks out of a log dir, for the tests that recovery writes nothing outside the dir it is given
(import `tests.unit.log.outside_dirs`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def move_out(path: Path, outside: Path) -> Path:
    """Move `path` (a file or dir) into `outside` and leave a symlink to it in its place; returns where it went."""
    outside.mkdir(parents=True, exist_ok=True)
    target = outside / path.name
    shutil.move(path, target)
    os.symlink(target, path)
    return target


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under `root` (symlinks in it not followed) and its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
