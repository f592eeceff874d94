"""`kafkactl ARGS` called in this process, for the tests that check what a command prints rather than how a
new process starts: a Python start-up (~0.3 s of CPU) per call adds minutes to a suite of hundreds of calls.

The result is a `subprocess.CompletedProcess` as `subprocess.run(..., capture_output=True, text=True)` gives,
so a test does not know which way its command ran. Commands that fork daemons, start a JVM or run until a
signal (`IN_SUBPROCESS`) always get a process of their own, as does a call from a thread other than the main
one or from inside an event loop. A command in this process cannot be killed at its `timeout`: pytest-timeout
is the backstop. KAFKACTL_TEST_CLI=subprocess runs every call in a process of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import io
import os
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterator, Mapping

from kafkactl.app import _command_named

#: the top-level commands that start daemons (broker, zookeeper, cluster), a JVM (spark-load), long-running
#: loops (mirror, bench): a process of their own, killable by pid and with their own signal handlers
IN_SUBPROCESS = frozenset({"bench", "broker", "cluster", "zookeeper", "spark-load", "mirror"})


def in_process_allowed(argv: list[str]) -> bool:
    """Whether `argv` may run here: a command of its end, called from the main thread outside an event loop
    (asyncio.run and signal handlers need both)."""
    if os.environ.get("KAFKACTL_TEST_CLI") == "subprocess" or _command_named(argv) in IN_SUBPROCESS:
        return False
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return True
    return False


@contextlib.contextmanager
def _swapped_environ(env: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _process_state() -> Iterator[None]:
    """What a command sets for its whole process, put back afterwards: the default security of every client
    connection, the ZooKeeper credentials, the wait reporter, the root and command `-X` settings (a command in
    this process must not leave its SASL user to the test's own clients)."""
    from broker.client import aio, security
    from broker.zk import client as zk_client
    from kafkactl import app, contexts

    saved = (security._default, dict(zk_client._auth), list(aio._default_wait_report),
             copy.deepcopy(contexts._security_props), dict(app._state))  # fmt: skip
    try:
        yield
    finally:
        security.set_default(saved[0])
        zk_client._auth.clear()
        zk_client._auth.update(saved[1])
        aio._default_wait_report[:] = saved[2]
        contexts._security_props.clear()
        contexts._security_props.update(saved[3])
        app._state.clear()
        app._state.update(saved[4])


def run_in_process(argv: list[str], env: Mapping[str, str], input: str | bytes | None = None,
                   text: bool = True) -> subprocess.CompletedProcess:  # fmt: skip
    """kafkactl's `run(argv)` with `env` as the environment, standard input `input` (else empty) and its
    output captured (as text, or bytes if not `text`), as `subprocess.run` would return it."""
    from kafkactl.app import run

    data = input.encode() if isinstance(input, str) else input or b""
    raw_in = tempfile.TemporaryFile()  # (a real file: commands read standard input by its descriptor)
    raw_in.write(data)
    raw_in.seek(0)
    stdin = io.TextIOWrapper(raw_in, encoding="utf-8")
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="")
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="")
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = stdin, out, err
    try:
        with _swapped_environ(env), _process_state():
            code = run(argv)
    except SystemExit as exc:  # (click's own exits, outside `run`'s handling)
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception:  # what `run` lets through (--debug): Python's traceback and exit code, as a process gives
        traceback.print_exc()
        code = 1
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
        stdin.close()
    outputs: list[str | bytes] = []
    for stream in (out, err):
        stream.flush()
        raw = stream.buffer.getvalue()  # type: ignore[attr-defined]
        outputs.append(raw.decode("utf-8", "replace") if text else raw)
    return subprocess.CompletedProcess(["kafkactl", *argv], code, outputs[0], outputs[1])


def run_cli(argv: list[object], env: Mapping[str, str] | None = None, *, input: str | bytes | None = None,
            text: bool = True, timeout: float = 60.0) -> subprocess.CompletedProcess:  # fmt: skip
    """`kafkactl ARGS` in this process where it can be (see the module's docstring), else `python -m kafkactl`
    (standard input `input`, else none)."""
    args = [str(a) for a in argv]
    env = dict(os.environ if env is None else env)
    if in_process_allowed(args):
        return run_in_process(args, env, input, text)
    return subprocess.run(
        [sys.executable, "-m", "kafkactl", *args], capture_output=True, text=text, timeout=timeout,
        env=env, input=input, stdin=subprocess.DEVNULL if input is None else None,
    )  # fmt: skip
