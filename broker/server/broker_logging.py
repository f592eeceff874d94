"""The broker's log: one line per record, repeated lines rate-limited, the daemon's file rotated by size.

A client decides what the broker logs about it (a malformed request, a connection closed idle), so no
client can make the log grow without bound:

- `OneLineFormatter`: every record is one line. Control characters in a message are escaped, and an
  exception is summarised as ``[ExcType: message at broker/x.py:12]`` (full tracebacks only at DEBUG,
  i.e. `kafkactl --debug broker start`).
- `RepeatLimiter`: the records of one message template from one place in the code (logger, file, line,
  unformatted message) log at most `limit` lines per `window` seconds; the rest are counted, and when
  the window ends one line says ``N similar message(s) suppressed in the last Ss: <template>``.
  `KAFKACTL_LOG_REPEATS` sets ``LIMIT/SECONDS`` (default ``10/60``; ``0`` logs every line).
- Replication's changes (leaders elected, ISRs shrunk and expanded, copies truncated) are logged at INFO
  even when the rest logs WARNING and up: an operator reads who led what, and when, in each broker's log.
- `RotatingLogFile`: the log file of a broker started with `--daemon`
  (``$KAFKACTL_HOME/logs/broker-<id>.log``) is rotated at 10 MiB, keeping 5 older files
  (``.log.1`` … ``.log.5``); `KAFKACTL_BROKER_LOG_MAX_BYTES` and `KAFKACTL_BROKER_LOG_BACKUPS` change
  that. The process's stdout and stderr follow the current file, so what is printed rather than
  logged (the serving line, a last error line) rotates with it.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from broker.errors import KafkactlError

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_PATH_ENV = "KAFKACTL_BROKER_LOG"  # set by `broker start --daemon` for the detached broker: its log file
MAX_BYTES_ENV = "KAFKACTL_BROKER_LOG_MAX_BYTES"
BACKUPS_ENV = "KAFKACTL_BROKER_LOG_BACKUPS"
REPEATS_ENV = "KAFKACTL_LOG_REPEATS"
DEFAULT_MAX_BYTES = 10 << 20
DEFAULT_BACKUPS = 5
DEFAULT_REPEATS = (10, 60.0)
MAX_MESSAGE = 1000  # characters of one message kept in a line
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _escape(text: str) -> str:
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def describe_exception(exc: BaseException, tb: TracebackType | None = None) -> str:
    """``ExcType: message at file:line``: the innermost frame in kafkactl's own code (else the innermost)."""
    tb = tb if tb is not None else exc.__traceback__
    where = ""
    ours = None
    last = None
    while tb is not None:
        last = tb
        if f"{os.sep}broker{os.sep}" in tb.tb_frame.f_code.co_filename:
            ours = tb
        tb = tb.tb_next
    pick = ours or last
    if pick is not None:
        path = pick.tb_frame.f_code.co_filename
        cut = path.rfind(f"{os.sep}broker{os.sep}")
        where = f" at {path[cut + 1 :] if cut >= 0 else os.path.basename(path)}:{pick.tb_lineno}"
    text = _escape(str(exc))
    if len(text) > 200:
        text = text[:200] + "…"
    return f"{type(exc).__name__}: {text}{where}" if text else f"{type(exc).__name__}{where}"


class OneLineFormatter(logging.Formatter):
    """Each record on one line; tracebacks only when `tracebacks` (debug), else a one-line summary."""

    def __init__(self, fmt: str = FORMAT, *, tracebacks: bool = False) -> None:
        super().__init__(fmt)
        self.tracebacks = tracebacks

    def format(self, record: logging.LogRecord) -> str:
        message = _escape(record.getMessage())
        if len(message) > MAX_MESSAGE:
            message = f"{message[:MAX_MESSAGE]}… ({len(message)} characters)"
        record.message = message
        record.asctime = self.formatTime(record, self.datefmt)
        line = self.formatMessage(record)
        if record.exc_info and record.exc_info[1] is not None:
            if self.tracebacks:
                line += "\n" + self.formatException(record.exc_info)
            else:
                line += f" [{describe_exception(record.exc_info[1], record.exc_info[2])}]"
        elif record.stack_info and self.tracebacks:
            line += "\n" + self.formatStack(record.stack_info)
        return line


class _Window:
    __slots__ = ("start", "logged", "suppressed", "level", "name", "template")

    def __init__(self, start: float, record: logging.LogRecord) -> None:
        self.start = start
        self.logged = self.suppressed = 0
        self.level, self.name = record.levelno, record.name
        self.template = record.msg if isinstance(record.msg, str) else type(record.msg).__name__


class RepeatLimiter(logging.Handler):
    """Hands records to `target`, at most `limit` per message template and place per `window` seconds.

    The suppressed records of a window are counted and reported in one line when it ends (by a timer
    thread, or at the next record, or at close). DEBUG records are never suppressed.
    """

    def __init__(self, target: logging.Handler, limit: int, window: float,
                 clock: Callable[[], float] = time.monotonic, *, timer: bool = True) -> None:  # fmt: skip
        super().__init__()
        self.target, self.limit, self.window, self.clock = target, limit, window, clock
        self._windows: dict[tuple, _Window] = {}
        self._cond = threading.Condition(self.lock or threading.RLock())
        self._timer = timer
        self._thread: threading.Thread | None = None
        self._closed = False

    def emit(self, record: logging.LogRecord) -> None:
        # the handler's lock is held (Handler.handle): records are counted and written in order
        now = self.clock()
        self._report_ended(now)
        if record.levelno <= logging.DEBUG:
            self.target.handle(record)
            return
        key = (record.name, record.pathname, record.lineno, record.msg if isinstance(record.msg, str) else None)
        w = self._windows.get(key)
        if w is None:
            w = self._windows[key] = _Window(now, record)
        if w.logged < self.limit:
            w.logged += 1
            self.target.handle(record)
            return
        w.suppressed += 1
        if w.suppressed == 1:
            self._wake()

    def _report_ended(self, now: float) -> None:
        """Write the summary of every window that ended with suppressed records; forget ended windows."""
        ended = [k for k, w in self._windows.items() if now - w.start >= self.window]
        for key in ended:
            w = self._windows.pop(key)
            if w.suppressed:
                self.target.handle(self._summary(w, now))

    def _summary(self, w: _Window, now: float) -> logging.LogRecord:
        seconds = max(1, round(min(now - w.start, self.window)))
        record = logging.LogRecord(
            w.name, w.level, __file__, 0, "%d similar message(s) suppressed in the last %ds: %r",
            (w.suppressed, seconds, w.template), None,
        )  # fmt: skip
        return record

    def _wake(self) -> None:
        if not self._timer:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="log-repeat-limiter", daemon=True)
            self._thread.start()
        self._cond.notify_all()

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                due = [w.start + self.window for w in self._windows.values() if w.suppressed]
                if not due:
                    self._cond.wait()
                    continue
                delay = min(due) - self.clock()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                try:
                    self._report_ended(self.clock())
                except Exception:  # never let logging kill the process
                    return

    def flush(self) -> None:
        self.target.flush()

    def close(self) -> None:
        with self._cond:
            if not self._closed:
                now = self.clock()
                for w in self._windows.values():
                    if w.suppressed:
                        self.target.handle(self._summary(w, now))
                self._windows.clear()
                self._closed = True
                self._cond.notify_all()
        self.target.close()
        super().close()


class RotatingLogFile(logging.handlers.RotatingFileHandler):
    """A size-rotated log file; with `capture_stdio`, fds 1 and 2 are pointed at the current file too."""

    def __init__(self, path: Path | str, max_bytes: int, backups: int, *, capture_stdio: bool = False) -> None:
        self.capture_stdio = capture_stdio
        super().__init__(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        self.errors = "backslashreplace"

    def _open(self):  # noqa: ANN202 - logging's own signature
        stream = super()._open()
        if self.capture_stdio:
            for f in (sys.stdout, sys.stderr):
                try:
                    f.flush()
                except (OSError, ValueError):
                    pass
            os.dup2(stream.fileno(), 1)
            os.dup2(stream.fileno(), 2)
        return stream


def _env_int(name: str, default: int, low: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise KafkactlError(f"{name}={text!r}: expected a whole number of at least {low}")
    return value


def parse_repeats(text: str) -> tuple[int, float]:
    """`LIMIT/SECONDS` (or `LIMIT`, over 60 s): lines of one template per window; LIMIT 0 turns it off."""
    limit, _, seconds = text.strip().partition("/")
    try:
        n, s = int(limit), float(seconds) if seconds else DEFAULT_REPEATS[1]
    except ValueError:
        n, s = -1, 0.0
    if n < 0 or (n and s <= 0):
        raise KafkactlError(f"{REPEATS_ENV}={text!r}: expected LIMIT/SECONDS, e.g. 10/60 (0: no limit)")
    return n, s


def configure(log_path: Path | str | None = None) -> logging.Handler:
    """Route the root logger (at its current level) through the repeat limiter, to stderr or, with a
    `log_path`, to a rotating file that stdout and stderr follow. Returns the root's new handler."""
    root = logging.getLogger()
    debug = root.getEffectiveLevel() <= logging.DEBUG
    limit, window = parse_repeats(os.environ.get(REPEATS_ENV, "")) if os.environ.get(REPEATS_ENV) else DEFAULT_REPEATS
    if log_path is not None:
        out: logging.Handler = RotatingLogFile(
            log_path, _env_int(MAX_BYTES_ENV, DEFAULT_MAX_BYTES, 1024), _env_int(BACKUPS_ENV, DEFAULT_BACKUPS, 1),
            capture_stdio=True,
        )  # fmt: skip
    else:
        out = logging.StreamHandler(sys.stderr)
    out.setFormatter(OneLineFormatter(tracebacks=debug))
    handler = out if limit == 0 else RepeatLimiter(out, limit, window)
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    if root.getEffectiveLevel() > logging.INFO:  # leaders elected, ISRs changed: what Kafka's state-change log says
        logging.getLogger("broker.replication").setLevel(logging.INFO)
        # and the broker's own few (shutting down, shut down cleanly, controlled shutdown moved N, producers
        # loaded, retention): a stop that hangs shows where it got to
        logging.getLogger("broker.server.broker").setLevel(logging.INFO)
    return handler
