"""What a benchmark reads of a process from /proc (Linux): CPU seconds and resident memory.

`/proc/<pid>/stat` is one line, `pid (comm) state ppid …`; comm may hold spaces and parentheses, so the
fields are counted after the last ')': utime and stime are fields 14 and 15 of the line (in clock ticks).
`/proc/<pid>/status` has a `VmRSS:   123456 kB` line.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence


def cpu_ticks(stat_line: str) -> int:
    """utime + stime, in clock ticks, of a `/proc/<pid>/stat` line."""
    fields = stat_line.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # (fields[0] is the state, field 3 of the line)


def rss_kb(status_text: str) -> int | None:
    """VmRSS in kB of a `/proc/<pid>/status` text; None when it has none (a zombie)."""
    for line in status_text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds process `pid` has used; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return cpu_ticks(f.read()) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def rss_mb(pid: int) -> float | None:
    """Resident memory of process `pid` in MiB; None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            kb = rss_kb(f.read())
    except OSError:
        return None
    return None if kb is None else kb / 1024


def percentile(values: Sequence[float], q: float) -> float:
    """The `q` (0..1) percentile of `values` by the nearest rank (p50 of [1, 2, 3, 4] is 2); ValueError if empty."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = math.ceil(q * len(ordered) - 1e-9)  # (the epsilon: 0.95 * 20 is 19.000000000000004)
    return ordered[min(max(rank, 1), len(ordered)) - 1]
