"""The purgatory: fetches wait here until enough bytes arrive on one of their partitions or time runs out.

A fetch registers once on all its partitions (`watch`) for the whole of its wait. An append (or a moved high
watermark) calls `notify(tp)`, which notes `tp` on every watch of that partition and wakes it; the fetch then
re-reads only the partitions that were woken, so a wait over thousands of partitions costs per append, not
per partition (a follower's fetch names every partition its leader leads). An incremental fetch session keeps
one watch for its life (`add` and `discard` follow its partitions): what was woken between two of its fetches
tells the next one what may have changed, so it does not look at the others.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from types import TracebackType

TopicPartition = tuple[str, int]


class Watch:
    """One fetch's registration on its partitions: `next` waits until some are woken and returns them."""

    __slots__ = ("_purgatory", "_tps", "_fut", "woken")

    def __init__(self, purgatory: Purgatory, tps: list[TopicPartition]) -> None:
        self._purgatory = purgatory
        self._tps: set[TopicPartition] = set()
        self._fut: asyncio.Future | None = None
        self.woken: set[TopicPartition] = set()
        self.add(tps)

    def add(self, tps: list[TopicPartition]) -> None:
        waiters = self._purgatory._waiters
        for tp in tps:
            if tp not in self._tps:
                self._tps.add(tp)
                waiters[tp].add(self)

    def discard(self, tps: list[TopicPartition]) -> None:
        waiters = self._purgatory._waiters
        for tp in tps:
            if tp in self._tps:
                self._tps.discard(tp)
                self.woken.discard(tp)
                ws = waiters.get(tp)
                if ws is not None:
                    ws.discard(self)
                    if not ws:
                        del waiters[tp]

    def drain(self) -> set[TopicPartition]:
        """The partitions woken since the last call (or `next`), without waiting."""
        woken, self.woken = self.woken, set()
        return woken

    async def next(self, timeout: float) -> set[TopicPartition]:
        """The partitions woken since the last call, waiting up to `timeout` seconds for one (empty: none came)."""
        if not self.woken and timeout > 0:
            self._fut = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(self._fut, timeout)
            except TimeoutError:
                pass
            finally:
                self._fut = None
        woken, self.woken = self.woken, set()
        return woken

    def wake(self, tp: TopicPartition) -> None:
        self.woken.add(tp)
        if self._fut is not None and not self._fut.done():
            self._fut.set_result(None)

    def close(self) -> None:
        self.discard(list(self._tps))

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class Purgatory:
    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[Watch]] = defaultdict(set)

    def watch(self, tps: list[TopicPartition]) -> Watch:
        """Register on `tps` until the watch is closed (use it as a context manager)."""
        return Watch(self, tps)

    async def wait(self, tps: list[TopicPartition], timeout: float) -> bool:
        """Wait until one of `tps` gets an append or `timeout` seconds pass; True if woken by an append."""
        if timeout <= 0:
            return False
        with self.watch(tps) as w:
            return bool(await w.next(timeout))

    def notify(self, tp: TopicPartition) -> None:
        ws = self._waiters.get(tp)
        if ws:
            for w in ws:
                w.wake(tp)

    def waiting(self) -> int:
        return sum(len(ws) for ws in self._waiters.values())
