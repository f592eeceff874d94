"""How results reach a person or a program: tables and progress bars on a terminal, JSON lines otherwise."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table


class Output(StrEnum):
    """`-o/--output`: text for people, json for programs."""

    text = "text"
    json = "json"


def stdout_console() -> Console:
    return Console(soft_wrap=True, highlight=False)


def error_line(message: str) -> None:
    """The one line a failure prints: `kafkactl: error: …` on stderr."""
    first = " ".join(str(message).split("\n")).strip()
    print(f"kafkactl: error: {first}", file=sys.stderr)


def json_line(obj: dict[str, Any]) -> None:
    """One JSON object on its own line (bytes as text where they decode)."""
    sys.stdout.write(json.dumps(obj, default=_json_default, separators=(",", ":")) + "\n")


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "backslashreplace")
    if isinstance(value, set | tuple):
        return list(value)
    return str(value)


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], *, title: str | None = None,
          stderr: bool = False) -> None:  # fmt: skip
    """A table on a terminal, tab-separated columns in a pipe; on stderr with `stderr` (when stdout carries
    something else, e.g. a plan for a program)."""
    rows = list(rows)
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        t = Table(*columns, title=title, header_style="bold")
        for row in rows:
            t.add_row(*("" if v is None else str(v) for v in row))
        (Console(stderr=True, soft_wrap=True, highlight=False) if stderr else stdout_console()).print(t)
    else:
        print("\t".join(columns), file=stream)
        for row in rows:
            print("\t".join("" if v is None else str(v) for v in row), file=stream)


@contextmanager
def progress(description: str, total: int | None, *, unit: str = "", enabled: bool = True) -> Iterator:
    """A transient progress bar on a terminal (stderr); a no-op advance function in a pipe or when not
    `enabled`. With `unit="bytes"` the counts show in human units (KB, MB) with a rate."""
    if not enabled or not sys.stderr.isatty():
        yield lambda n=1: None
        return
    counts = (DownloadColumn(), TransferSpeedColumn()) if unit == "bytes" else (MofNCompleteColumn(),)
    with Progress(
        TextColumn("{task.description}"), BarColumn(), *counts, TimeRemainingColumn(),
        console=Console(stderr=True), transient=True,
    ) as bar:  # fmt: skip
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)


class Status:
    """A one-line spinner with elapsed seconds on stderr (a terminal only): what a long command is doing
    while nothing else shows. `update` changes its text; `paused()` hides it while a progress bar runs
    (rich shows one live display at a time)."""

    def __init__(self, text: str, *, enabled: bool = True) -> None:
        self._on = enabled and sys.stderr.isatty()
        self._text = text
        self._live: Progress | None = None

    def _start(self) -> None:
        if self._on and self._live is None:
            from rich.progress import SpinnerColumn, TimeElapsedColumn

            self._live = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                  console=Console(stderr=True), transient=True)  # fmt: skip
            self._live.start()
            self._task = self._live.add_task(self._text, total=None)

    def _stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def update(self, text: str) -> None:
        self._text = text
        if self._live is not None:
            self._live.update(self._task, description=text)

    @contextmanager
    def paused(self) -> Iterator[None]:
        self._stop()
        try:
            yield
        finally:
            self._start()

    def __enter__(self) -> Status:
        self._start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()
