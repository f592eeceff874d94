"""Paths a user names on the command line: one wording and exit code for a missing one across commands.

A path that does not exist is a usage error (exit 2), `kafkactl: error: PATH: no such file or directory`,
whichever command was given it; other failures to read name the path and the system's reason (exit 1).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path

from broker.errors import KafkactlError, UsageError


def missing(path: Path | str) -> UsageError:
    """The error for a path that does not exist."""
    return UsageError(f"{path}: no such file or directory")


def require(paths: Iterable[Path | str]) -> None:
    """UsageError naming the first of `paths` that does not exist (a dangling symlink counts as existing:
    the command says what is wrong with it)."""
    for path in paths:
        if not os.path.lexists(path):
            raise missing(path)


def read_text(path: Path | str) -> str:
    """A file's text, or stdin's for `-`; UsageError for a missing file or a directory, KafkactlError naming
    the system's reason for any other failure."""
    if str(path) == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        raise missing(path) from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, not a file") from None
    except OSError as exc:
        raise KafkactlError(f"{path}: {(exc.strerror or str(exc)).lower()}") from None
    except UnicodeDecodeError as exc:
        raise KafkactlError(f"{path}: not text ({exc.reason} at byte {exc.start})") from None
