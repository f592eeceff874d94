"""The fetch purgatory: a wait wakes on an append to one of its partitions, times out otherwise, and
always leaves no waiter behind. Plain asyncio.run, no plugin."""

from __future__ import annotations

import asyncio

import pytest

from broker.server.purgatory import Purgatory

A, B, C = ("t", 0), ("t", 1), ("u", 0)


def run(coro):  # noqa: ANN001, ANN201 - a tiny helper
    return asyncio.run(asyncio.wait_for(coro, 10))


async def settle() -> None:
    """Let the tasks just created run up to their first await."""
    for _ in range(3):
        await asyncio.sleep(0)


def test_notify_wakes_a_waiter_on_its_partition() -> None:
    async def main() -> None:
        p = Purgatory()
        task = asyncio.create_task(p.wait([A, B], 5.0))
        await settle()
        assert p.waiting() == 2  # one future, registered under both partitions
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        p.notify(B)
        assert await task is True
        assert loop.time() - t0 < 1.0
        assert p.waiting() == 0
        assert not p._waiters

    run(main())


def test_times_out_without_a_notify_on_its_partitions() -> None:
    async def main() -> None:
        p = Purgatory()
        task = asyncio.create_task(p.wait([A], 0.3))
        await settle()
        p.notify(B)
        p.notify(C)
        assert not task.done()
        assert await task is False
        assert p.waiting() == 0
        assert not p._waiters

    run(main())


@pytest.mark.parametrize("timeout", [0, -1, 0.0])
def test_no_time_left_returns_at_once(timeout: float) -> None:
    async def main() -> None:
        p = Purgatory()
        assert await p.wait([A], timeout) is False
        assert p.waiting() == 0

    run(main())


def test_one_notify_wakes_every_waiter_of_the_partition() -> None:
    async def main() -> None:
        p = Purgatory()
        on_a = [asyncio.create_task(p.wait([A], 5.0)) for _ in range(3)]
        on_c = asyncio.create_task(p.wait([C], 0.5))
        await settle()
        assert p.waiting() == 4
        p.notify(A)
        assert await asyncio.gather(*on_a) == [True, True, True]
        assert p.waiting() == 1 and not on_c.done()
        assert await on_c is False
        assert p.waiting() == 0

    run(main())


def test_notify_twice_and_notify_without_waiters_are_harmless() -> None:
    async def main() -> None:
        p = Purgatory()
        p.notify(A)  # nobody waits: nothing happens, nothing is remembered
        assert p.waiting() == 0 and not p._waiters
        task = asyncio.create_task(p.wait([A], 5.0))
        await settle()
        assert not task.done()
        p.notify(A)
        p.notify(A)  # the future is already done: no InvalidStateError
        assert await task is True

    run(main())


def test_a_notify_before_the_wait_is_not_remembered() -> None:
    async def main() -> None:
        p = Purgatory()
        p.notify(A)
        assert await p.wait([A], 0.05) is False

    run(main())


def test_cancelled_waiter_is_cleaned_up() -> None:
    async def main() -> None:
        p = Purgatory()
        task = asyncio.create_task(p.wait([A, B], 5.0))
        other = asyncio.create_task(p.wait([B], 5.0))
        await settle()
        assert p.waiting() == 3
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert p.waiting() == 1
        assert set(p._waiters) == {B}
        p.notify(B)
        assert await other is True
        assert p.waiting() == 0 and not p._waiters

    run(main())


def test_waiting_again_after_a_wake() -> None:
    async def main() -> None:
        p = Purgatory()
        first = asyncio.create_task(p.wait([A], 5.0))
        await settle()
        p.notify(A)
        assert await first is True
        second = asyncio.create_task(p.wait([A], 0.3))
        await settle()
        assert p.waiting() == 1
        assert await second is False  # the earlier notify does not carry over

    run(main())


def test_same_partition_listed_twice() -> None:
    async def main() -> None:
        p = Purgatory()
        task = asyncio.create_task(p.wait([A, A], 5.0))
        await settle()
        p.notify(A)
        assert await task is True
        assert p.waiting() == 0 and not p._waiters

    run(main())


def test_a_watch_returns_what_was_woken_and_keeps_a_notify_that_came_between_its_waits() -> None:
    """A fetch registers once for its whole wait and re-reads only the partitions woken (`Watch.next`)."""

    async def main() -> None:
        p = Purgatory()
        with p.watch([A, B, C]) as w:
            assert p.waiting() == 3
            p.notify(B)  # (while the fetch reads: kept for the next wait)
            assert await w.next(5.0) == {B}
            task = asyncio.create_task(w.next(5.0))
            await settle()
            p.notify(A)
            p.notify(C)
            p.notify(("v", 9))  # (not its partition)
            assert await task == {A, C}
            assert await w.next(0.05) == set()  # nothing came: time is up
        assert p.waiting() == 0 and not p._waiters

    run(main())
