"""The offset grammar every command shares, and its resolution against a partition's offsets.

beginning | earliest          the log start
end | latest                  the log end (only new messages)
N                             offset N
-N                            N before the end
+N / -N with a group          relative to the committed offset (the groups issue)
@1700000000000                the first offset stamped at or after this epoch-ms
2024-05-01T12:00:00[+02:00]   the same for an ISO-8601 date-time (no zone: local time)
10m, 2h, 1d12h, 90s, 500ms    that long ago
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import NamedTuple

from broker.errors import UsageError

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


class OffsetSpec(NamedTuple):
    kind: str  # beginning | end | absolute | from_end | relative | timestamp
    value: int = 0

    def describe(self) -> str:
        return {"beginning": "beginning", "end": "end"}.get(self.kind, f"{self.kind} {self.value}")


BEGINNING = OffsetSpec("beginning")
END = OffsetSpec("end")


def parse_duration_ms(text: str) -> int | None:
    """Milliseconds of '10m', '1h30m', '500ms', '2.5h'; None when it is not a duration."""
    pos, total = 0, Decimal(0)
    s = text.strip().lower()
    if not s:
        return None
    for m in _DURATION.finditer(s):
        if m.start() != pos:
            return None
        total += Decimal(m.group(1)) * _UNITS[m.group(2)]  # decimal: '1.15h' is exactly 4,140,000 ms
        pos = m.end()
    return int(total) if pos == len(s) and pos > 0 else None


def parse_offset(text: str, *, relative_to_committed: bool = False, now_ms: int | None = None) -> OffsetSpec:
    """Parse one offset expression; UsageError with the grammar when it is none of them."""
    s = text.strip()
    low = s.lower()
    if low in ("beginning", "earliest", "start", "first"):
        return BEGINNING
    if low in ("end", "latest", "last"):
        return END
    if re.fullmatch(r"\d+", s):
        return OffsetSpec("absolute", int(s))
    if re.fullmatch(r"[+-]\d+", s):
        n = int(s)
        if relative_to_committed:
            return OffsetSpec("relative", n)
        if s.startswith("+"):
            raise UsageError(f"offset {text!r}: +N is relative to a group's committed offset (needs --group)")
        return OffsetSpec("from_end", -n)
    if re.fullmatch(r"@-?\d+", s):
        ts = int(s[1:])
        if ts < 0:
            raise UsageError(f"offset {text!r}: a timestamp cannot be negative")
        return OffsetSpec("timestamp", ts)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    ago = parse_duration_ms(s)
    if ago is not None:
        return OffsetSpec("timestamp", max(0, now - ago))
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00") if s.endswith("Z") else s)
    except ValueError:
        raise UsageError(
            f"invalid offset {text!r}: expected beginning, end, N, -N, @epoch-ms, an ISO-8601 date-time "
            "or a duration such as 10m"
        ) from None
    if dt.tzinfo is None:
        dt = dt.astimezone()  # no zone given: the local one
    return OffsetSpec("timestamp", (dt - _EPOCH) // timedelta(milliseconds=1))  # exact: no float rounding


def resolve(spec: OffsetSpec, start: int, end: int, committed: int | None = None) -> int:
    """The offset to read from for specs that need no lookup by time, clamped to [start, end]."""
    if spec.kind == "beginning":
        return start
    if spec.kind == "end":
        return end
    if spec.kind == "absolute":
        return min(max(spec.value, start), end)
    if spec.kind == "from_end":
        return max(start, end - spec.value)
    if spec.kind == "relative":
        if committed is None:
            raise UsageError("a relative offset needs a committed offset (a group)")
        return min(max(committed + spec.value, start), end)
    raise ValueError(f"{spec.kind} offsets are resolved by timestamp lookup")
