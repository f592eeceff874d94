"""The purgatory: fetches wait here until enough bytes arrive on one of their partitions or time runs out.

An append calls `notify(tp)`, which wakes every fetch waiting on that partition; the fetch then
re-reads its partitions and either answers or waits again for the rest of its `max_wait_ms`.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

TopicPartition = tuple[str, int]


class Purgatory:
    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[asyncio.Future]] = defaultdict(set)

    async def wait(self, tps: list[TopicPartition], timeout: float) -> bool:
        """Wait until one of `tps` gets an append or `timeout` seconds pass; True if woken by an append."""
        if timeout <= 0:
            return False
        fut = asyncio.get_running_loop().create_future()
        for tp in tps:
            self._waiters[tp].add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            for tp in tps:
                ws = self._waiters.get(tp)
                if ws is not None:
                    ws.discard(fut)
                    if not ws:
                        del self._waiters[tp]

    def notify(self, tp: TopicPartition) -> None:
        ws = self._waiters.get(tp)
        if ws:
            for fut in ws:
                if not fut.done():
                    fut.set_result(None)

    def waiting(self) -> int:
        return sum(len(ws) for ws in self._waiters.values())
