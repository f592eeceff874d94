"""The cost of making one new partition log, as topic creation pays it once per replica.

    .venv/bin/python benchmarks/log_create.py [--logs 2000] [--runs 5] [--dir /tmp]

Makes `--logs` new logs of one topic through `LogManager.get_or_create` (with a topic id, as the broker
does) in a fresh temporary log dir under `--dir`, `--runs` times; reports the milliseconds per log (min,
median, max) as one JSON line. In-process: no broker, no ZooKeeper; the time is Python's and the kernel's
(a directory and four files per log). At 10,000 partitions RF 3 each broker makes 10,000 of them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from broker.log.manager import LogManager


def one_run(parent: str, logs: int) -> float:
    """Milliseconds per new log in a fresh log dir (removed after)."""
    d = Path(tempfile.mkdtemp(prefix="kafkactl-logcreate-", dir=parent))
    try:
        manager = LogManager([d])
        t0 = time.perf_counter()
        for p in range(logs):
            manager.get_or_create("bench", p, topic_id=12345)
        took = time.perf_counter() - t0
        manager.shutdown()
        return took / logs * 1000
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    args = ap.parse_args()
    ms = [one_run(args.dir, args.logs) for _ in range(args.runs)]
    print(
        json.dumps(
            {
                "bench": "log_create",
                "logs": args.logs,
                "ms_per_log": {
                    "min": round(min(ms), 3),
                    "median": round(statistics.median(ms), 3),
                    "max": round(max(ms), 3),
                },
            }
        )
    )


if __name__ == "__main__":
    main()
