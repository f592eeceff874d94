"""broker/server/broker_logging.py: one line per record, the repeat limiter, the rotating file stdio follows."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from broker.errors import KafkactlError
from broker.server.broker_logging import (
    OneLineFormatter,
    RepeatLimiter,
    describe_exception,
    parse_repeats,
)


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(OneLineFormatter("%(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_logger(handler: logging.Handler, name: str) -> logging.Logger:
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger


def warn_bad(logger: logging.Logger, n: int) -> None:
    logger.warning("closing connection from %s: %s", f"127.0.0.1:{n}", "unknown API key 99")


def test_a_repeated_template_logs_the_first_lines_then_one_summary_per_window() -> None:
    out, clock = ListHandler(), Clock()
    limiter = RepeatLimiter(out, 3, 60.0, clock, timer=False)
    logger = make_logger(limiter, "test.repeats")
    for i in range(1000):
        warn_bad(logger, i)
    assert out.lines == [f"WARNING closing connection from 127.0.0.1:{i}: unknown API key 99" for i in range(3)]
    clock.now += 61
    warn_bad(logger, 5000)  # the window ended: its summary first, then this one, in a new window
    assert out.lines[3:] == [
        "WARNING 997 similar message(s) suppressed in the last 60s: 'closing connection from %s: %s'",
        "WARNING closing connection from 127.0.0.1:5000: unknown API key 99",
    ]
    warn_bad(logger, 5001)
    warn_bad(logger, 5002)
    warn_bad(logger, 5003)  # the 4th of the new window
    assert len(out.lines) == 7
    limiter.close()  # at shutdown the open window's count is written
    assert out.lines[7] == "WARNING 1 similar message(s) suppressed in the last 1s: 'closing connection from %s: %s'"


def test_other_templates_and_places_have_their_own_count() -> None:
    out = ListHandler()
    logger = make_logger(RepeatLimiter(out, 1, 60.0, Clock(), timer=False), "test.places")
    for i in range(5):
        warn_bad(logger, i)
        logger.warning("another template %d", i)
        logger.warning("closing connection from %s: %s", "x", "from another line")
    assert out.lines == [
        "WARNING closing connection from 127.0.0.1:0: unknown API key 99",
        "WARNING another template 0",
        "WARNING closing connection from x: from another line",
    ]


def test_debug_records_are_never_suppressed() -> None:
    out = ListHandler()
    logger = make_logger(RepeatLimiter(out, 1, 60.0, Clock(), timer=False), "test.debug")
    for i in range(4):
        logger.debug("step %d", i)
    assert len(out.lines) == 4


def test_the_timer_writes_the_summary_when_the_window_ends() -> None:
    out = ListHandler()
    limiter = RepeatLimiter(out, 1, 0.2)
    logger = make_logger(limiter, "test.timer")
    for i in range(10):
        warn_bad(logger, i)
    deadline = time.monotonic() + 10
    while len(out.lines) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert out.lines[1].startswith("WARNING 9 similar message(s) suppressed in the last "), out.lines
    limiter.close()
    assert len(out.lines) == 2


def test_one_line_formatter_escapes_control_characters_and_summarises_exceptions() -> None:
    out = ListHandler()
    logger = make_logger(out, "test.format")
    logger.warning("client said %r then %s", b"x", "two\nlines\x00")
    try:
        {}["missing"]
    except KeyError:
        logger.exception("handler failed")
    assert out.lines[0] == "WARNING client said b'x' then two\\nlines\\x00"
    assert len(out.lines) == 2 and "\n" not in out.lines[1] and "Traceback" not in out.lines[1]
    assert out.lines[1].startswith("ERROR handler failed [KeyError: 'missing' at ")
    assert "test_broker_logging.py:" in out.lines[1]


def test_tracebacks_only_when_asked() -> None:
    handler = ListHandler()
    handler.setFormatter(OneLineFormatter("%(message)s", tracebacks=True))
    logger = make_logger(handler, "test.tracebacks")
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("failed")
    assert handler.lines[0].startswith("failed\nTraceback (most recent call last):")


def test_describe_exception_is_short() -> None:
    try:
        raise RuntimeError("x" * 5000 + "\n")
    except RuntimeError as exc:
        text = describe_exception(exc)
    assert text.startswith("RuntimeError: xxx") and len(text) < 300 and "\n" not in text


@pytest.mark.parametrize(("text", "want"), [("10/60", (10, 60.0)), ("0", (0, 60.0)), ("5", (5, 60.0)),
                                            ("3/0.5", (3, 0.5))])  # fmt: skip
def test_parse_repeats(text: str, want: tuple[int, float]) -> None:
    assert parse_repeats(text) == want


@pytest.mark.parametrize("text", ["x", "-1", "5/0", "5/-2", "a/b"])
def test_parse_repeats_refuses_nonsense(text: str) -> None:
    with pytest.raises(KafkactlError, match="KAFKACTL_LOG_REPEATS"):
        parse_repeats(text)


def test_the_rotating_file_takes_stdout_and_stderr_along(tmp_path: Path) -> None:
    """In a child process (its fds 1 and 2 are redirected): logs and prints all land in the current file,
    which is rotated at the size limit, keeping the configured number of older files."""
    log = tmp_path / "broker-1.log"
    script = textwrap.dedent(f"""
        import logging, os, sys
        os.environ["KAFKACTL_BROKER_LOG_MAX_BYTES"] = "2048"
        os.environ["KAFKACTL_BROKER_LOG_BACKUPS"] = "2"
        os.environ["KAFKACTL_LOG_REPEATS"] = "0"
        logging.basicConfig(level=logging.WARNING)
        from broker.server import broker_logging
        broker_logging.configure({str(log)!r})
        for i in range(200):
            logging.getLogger("x").warning("line %d %s", i, "y" * 40)
            if i % 50 == 0:
                print(f"printed {{i}}", flush=True)
                print(f"stderr {{i}}", file=sys.stderr, flush=True)
        print("the last print", flush=True)
        os.write(2, b"raw fd 2\\n")
    """)
    subprocess.run([sys.executable, "-c", script], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   cwd=Path(__file__).parents[3], timeout=60)  # fmt: skip
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["broker-1.log", "broker-1.log.1", "broker-1.log.2"]
    for name in files:
        assert (tmp_path / name).stat().st_size <= 2048 + 200, name
    current = log.read_text()
    assert current.endswith("the last print\nraw fd 2\n"), current[-200:]
    assert "line 199 " in current
    older = (tmp_path / "broker-1.log.1").read_text()
    assert "line " in older and "WARNING x: line" in older
