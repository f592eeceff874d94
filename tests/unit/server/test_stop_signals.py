"""`on_stop_signals`: a SIGTERM reaches the loop even when other threads filled its wake-up pipe (asyncio's
handler alone loses it then). Run in a child interpreter: signal handlers belong to the process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

_CHILD = textwrap.dedent("""
    import asyncio, os, signal, sys, threading, time
    from broker.server.stop_signals import on_stop_signals

    async def main():
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        if sys.argv[1] == "ours":
            on_stop_signals(loop, stopping.set)
        else:
            loop.add_signal_handler(signal.SIGTERM, stopping.set)

        def busy():  # the loop is busy while another thread hands it many calls, each a byte in its pipe
            t = threading.Thread(target=lambda: [loop.call_soon_threadsafe(lambda: None) for _ in range(5000)])
            t.start()
            t.join()
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)

        loop.call_soon(busy)
        try:
            await asyncio.wait_for(stopping.wait(), 5)
            print("stopped")
        except TimeoutError:
            print("lost")

    asyncio.run(main())
""")


def _run(mode: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, timeout=60)


def test_a_stop_signal_reaches_a_loop_whose_wake_up_pipe_is_full():
    assert _run("asyncio").stdout.strip() == "lost"  # (Python 3.11's asyncio alone: what the module works around)
    ours = _run("ours")
    assert ours.stdout.strip() == "stopped", ours.stderr
    assert "wakeup fd" not in ours.stderr  # (a full pipe is expected: no warning printed per signal)
