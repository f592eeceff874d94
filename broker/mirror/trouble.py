"""What keeps the mirror's partitions from moving, told without flooding stderr.

Each distinct error (NOT_ENOUGH_REPLICAS, a partition with no leader, a throttling quota, a refused
authorization, a broker that does not answer) is said once, the first time it happens, and counted
after that; the final summary gives the counts. A partition that an error holds back is *stuck* until
the next batch of it is stored: the progress line names the stuck partitions, grouped by topic and
error, with how long the oldest has been stuck, e.g.
`stuck: orders[0,1,2] NOT_ENOUGH_REPLICAS (for 42 s), source events[3] LEADER_NOT_AVAILABLE (for 8 s)`.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass

#: the side of the mirror an error came from
SOURCE, TARGET = "source", "target"
#: stuck groups named in a progress line (the others are counted)
SHOWN_GROUPS = 4
#: partition numbers named per group (then "+N")
SHOWN_PARTITIONS = 12


@dataclass
class Stuck:
    error: str
    since: float


class Troubles:
    """The errors met so far (said once, counted) and the partitions they hold back."""

    def __init__(self, say: Callable[[str], None], clock: Callable[[], float] = time.monotonic) -> None:
        self.say = say
        self.clock = clock
        self.counts: collections.Counter[str] = collections.Counter()
        #: (side, topic, partition) -> what holds it back, since when
        self.stuck: dict[tuple[str, str, int], Stuck] = {}

    def note(self, error: str, detail: str | None = None) -> None:
        """Count an error; the first of its kind is said (`detail`, else its name)."""
        self.counts[error] += 1
        if self.counts[error] == 1:
            self.say(f"{detail or error}; retrying (said once: more of {error} are counted)")

    def hit(self, side: str, topic: str, partition: int, error: str, detail: str | None = None) -> None:
        """A partition held back by `error`: counted, said if new, and stuck until `clear`."""
        self.note(error, detail)
        key = (side, topic, partition)
        s = self.stuck.get(key)
        if s is None:
            self.stuck[key] = Stuck(error, self.clock())
        else:  # still stuck, maybe now for another reason: since its first
            s.error = error

    def clear(self, side: str, topic: str, partition: int) -> None:
        self.stuck.pop((side, topic, partition), None)

    def clear_all(self, side: str, keep: set[tuple[str, int]]) -> None:
        """Unstick every partition of `side` but those in `keep` (for errors polled as a whole)."""
        for key in [k for k in self.stuck if k[0] == side and (k[1], k[2]) not in keep]:
            del self.stuck[key]

    def stuck_line(self) -> str:
        """The stuck partitions grouped by side, topic and error ("" when none)."""
        if not self.stuck:
            return ""
        now = self.clock()
        groups: dict[tuple[str, str, str], list[tuple[int, float]]] = collections.defaultdict(list)
        for (side, topic, p), s in self.stuck.items():
            groups[(side, topic, s.error)].append((p, s.since))
        ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        parts = []
        for (side, topic, error), members in ordered[:SHOWN_GROUPS]:
            since = min(t for _, t in members)
            where = "source " if side == SOURCE else ""
            parts.append(f"{where}{topic}[{partition_list(sorted(p for p, _ in members))}] {error} "
                         f"(for {max(0, now - since):.0f} s)")  # fmt: skip
        rest = sum(len(m) for _, m in ordered[SHOWN_GROUPS:])
        if rest:
            parts.append(f"{rest} more partition{'s' if rest != 1 else ''}")
        return ", ".join(parts)

    def tally(self) -> str:
        """Every error met, with how often: "NOT_ENOUGH_REPLICAS 57, LEADER_NOT_AVAILABLE 2" ("" when none)."""
        return ", ".join(f"{error} {n:,}" for error, n in self.counts.most_common())


def partition_list(partitions: list[int]) -> str:
    """ "0,1,2" for a few; runs of four or more as "3-9"; past SHOWN_PARTITIONS items, "+N"."""
    items: list[str] = []
    i = 0
    while i < len(partitions):
        j = i
        while j + 1 < len(partitions) and partitions[j + 1] == partitions[j] + 1:
            j += 1
        if j - i >= 3:
            items.append(f"{partitions[i]}-{partitions[j]}")
        else:
            items.extend(str(p) for p in partitions[i : j + 1])
        i = j + 1
    if len(items) > SHOWN_PARTITIONS:
        shown = items[:SHOWN_PARTITIONS]
        hidden = len(partitions) - sum(_size(x) for x in shown)
        return ",".join(shown) + f",+{hidden}"
    return ",".join(items)


def _size(item: str) -> int:
    low, _, high = item.partition("-")
    return int(high) - int(low) + 1 if high else 1
