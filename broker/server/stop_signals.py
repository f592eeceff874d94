"""SIGTERM and SIGINT that always reach the broker's event loop, however busy its wake-up pipe.

asyncio's `add_signal_handler` hears a signal only through one byte written to the loop's self-pipe, the
same pipe `call_soon_threadsafe` writes a byte to for every call from another thread. An AF_UNIX socket
counts each one-byte write at its full buffer cost, so a few hundred such calls while the loop is busy fill it;
a signal arriving then loses its byte, and asyncio never calls its handler (a broker under load that ignored
SIGTERM for minutes). Here the Python-level handler, which the interpreter runs in the main thread whatever
became of that byte, hands the stop to the loop as well; the loop's own handler stays for a prompt wake-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from types import FrameType

SIGNALS = (signal.SIGTERM, signal.SIGINT)


def on_stop_signals(loop: asyncio.AbstractEventLoop, stop: Callable[[], None]) -> None:
    """Call `stop` on the loop at SIGTERM or SIGINT (from the main thread, with `loop` running there)."""

    def heard(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(RuntimeError):  # (the loop closed meanwhile)
            loop.call_soon_threadsafe(stop)

    for sig in SIGNALS:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop)  # (sets the loop's self-pipe as the wake-up fd)
            signal.signal(sig, heard)  # (replaces asyncio's no-op Python handler; the wake-up fd stays)
    with contextlib.suppress(ValueError, OSError):  # a full pipe is expected here: no warning for each signal
        fd = signal.set_wakeup_fd(-1)
        if fd != -1:
            signal.set_wakeup_fd(fd, warn_on_full_buffer=False)
