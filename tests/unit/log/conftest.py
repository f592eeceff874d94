"""Shared helpers of the broker/log unit tests: batches, an injectable clock, reading a log back.

Helpers reach the tests as fixtures (`make_batch`, `clock`, `open_log`, `read_all`, `layout`), so no
test module imports this file by name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from broker.log.config import LogConfig
from broker.log.log import PartitionLog
from broker.log.recovery import segment_files
from broker.log.scanner import Damage, ScannedBatch, open_segment, read_batch, scan
from broker.records.batch import Record, build_batch, iter_records
from broker.records.compression import Codec

#: a realistic "now" (2023-11-14), so segment.ms and retention.ms see sensible ages
T0 = 1_700_000_000_000


class FakeClock:
    """A clock for `PartitionLog(clock=...)`: seconds as a float, moved by hand in milliseconds."""

    def __init__(self, ms: int = T0) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000

    def advance(self, ms: int) -> None:
        self.ms += ms


def build(
    values: Sequence[bytes | None],
    *,
    offset: int = 0,
    timestamp: int = T0,
    timestamps: Sequence[int] | None = None,
    keys: Sequence[bytes | None] | None = None,
    codec: Codec = Codec.NONE,
) -> bytes:
    """One RecordBatch v2 of `values` with base offset `offset` (one timestamp, or one per record)."""
    stamps = list(timestamps) if timestamps is not None else [timestamp] * len(values)
    ks = list(keys) if keys is not None else [None] * len(values)
    records = [Record(offset + i, ts, k, v) for i, (ts, k, v) in enumerate(zip(stamps, ks, values, strict=True))]
    return build_batch(records, codec=codec)


def decode(data: bytes, min_offset: int = 0) -> list[Record]:
    """Every record of the whole batches in `data` at or after `min_offset`."""
    out: list[Record] = []
    pos = 0
    while pos < len(data):
        item = read_batch(data, pos, len(data))
        assert not isinstance(item, Damage), item
        assert item.crc_ok, f"batch at {pos} fails its CRC"
        out += [r for r in iter_records(data, pos, item.header) if r.offset >= min_offset]
        pos = item.end
    return out


def read_all(log: PartitionLog, start: int | None = None, max_bytes: int = 1) -> list[Record]:
    """Every record from `start` (the log start) to the log end, read through `PartitionLog.read`."""
    offset = log.log_start_offset if start is None else start
    out: list[Record] = []
    while True:
        sl = log.read(offset, max_bytes)
        if sl is None:
            return out
        records = decode(sl.read(), offset)
        assert records, f"read({offset}) returned no record"
        out += records
        offset = _last_offset(sl.read()) + 1


def _last_offset(data: bytes) -> int:
    pos, last = 0, -1
    while pos < len(data):
        item = read_batch(data, pos, len(data), verify_crc=False)
        last, pos = item.last_offset, item.end
    return last


def layout(directory: Path) -> list[tuple[int, list[ScannedBatch]]]:
    """(base offset, batches) of every segment file of a partition dir, scanned from disk."""
    out = []
    for base, path in segment_files(directory):
        with open_segment(path) as buf:
            items = list(scan(buf))
        assert not any(isinstance(i, Damage) for i in items), items
        out.append((base, items))
    return out


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="session")
def t0() -> int:
    return T0


@pytest.fixture(scope="session")
def make_batch() -> Callable[..., bytes]:
    return build


@pytest.fixture(name="read_all", scope="session")
def read_all_fixture() -> Callable[..., list[Record]]:
    return read_all


@pytest.fixture(name="layout", scope="session")
def layout_fixture() -> Callable[[Path], list[tuple[int, list[ScannedBatch]]]]:
    return layout


@pytest.fixture
def open_log(tmp_path: Path, clock: FakeClock):
    """`open_log(**config)` → a PartitionLog in `<tmp>/orders-0` on the fake clock; closed at teardown."""
    opened: list[PartitionLog] = []

    def _open(directory: Path | None = None, **kwargs) -> PartitionLog:
        cfg_fields = set(LogConfig.__dataclass_fields__)
        cfg = LogConfig(**{k: v for k, v in kwargs.items() if k in cfg_fields})
        rest = {k: v for k, v in kwargs.items() if k not in cfg_fields}
        rest.setdefault("clock", clock)
        log = PartitionLog(directory or tmp_path / "orders-0", cfg, **rest)
        opened.append(log)
        return log

    yield _open
    for log in opened:
        log.close()
