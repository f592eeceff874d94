"""Fixtures for command-line tests: small real log dirs written through broker.log."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from broker.log.config import LogConfig
from broker.log.manager import LogManager
from broker.records.batch import Record, build_batch
from tests.cli_runner import run_cli

TS = 1_700_000_000_000


def make_log_dir(root: Path, *, partitions: int = 2, batches: int = 20, per_batch: int = 3) -> Path:
    """A cleanly shut-down log dir with topic `t`, small segments, keys, values and headers."""
    log_dir = root / "logs"
    mgr = LogManager([log_dir], LogConfig(segment_bytes=1200, index_interval_bytes=150, segment_ms=2**62))
    mgr.startup()
    for p in range(partitions):
        plog = mgr.get_or_create("t", p)
        for b in range(batches):
            recs = [
                Record(i, TS + b, f"k{b}-{i}".encode(), f"value {p}/{b}/{i}".encode(), (("h", b"x"),))
                for i in range(per_batch)
            ]
            plog.append(build_batch(recs))
    mgr.shutdown()
    return log_dir


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return make_log_dir(tmp_path)


def kafkactl(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    """`kafkactl ARGS` as a user runs it (in this process where it can be: tests/cli_runner.py)."""
    result = run_cli(list(args), timeout=120)
    if check:
        result.check_returncode()
    return result
