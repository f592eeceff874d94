"""The completion scripts in completions/ in real shells under a pseudo-terminal (issue 15): bash and zsh
complete subcommands, options and topic names from a live broker at the TAB key; fish (its own
`complete -C`, which runs the same script) too. A broker that cannot be reached completes nothing, fast.
"""

from __future__ import annotations

import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.helpers import cli, ok

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "completions"
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]|\r")


def shell_env(bootstrap: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKACTL_")}
    env.update(PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}", TERM="dumb",
               KAFKACTL_BOOTSTRAP_SERVER=bootstrap, HOME=env.get("HOME", "/root"))  # fmt: skip
    return env


class Terminal:
    """An interactive shell on a pseudo-terminal: type into it, read what it shows."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the shell
            os.execvpe(argv[0], argv, env)
        self.seen = ""

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def read_until(self, pattern: str, timeout: float = 20.0) -> str:
        """What the terminal showed since the last call, once it matches `pattern` (regex)."""
        deadline = time.monotonic() + timeout
        buf = ""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(self.fd, 65536).decode(errors="replace")
                except OSError:
                    break
                buf += ANSI.sub("", chunk)
                if re.search(pattern, buf):
                    self.seen += buf
                    return buf
        raise AssertionError(f"the terminal never showed {pattern!r}; it showed {buf[-2000:]!r}")

    def close(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(self.fd)


@pytest.fixture
def topics(shared_broker) -> str:
    for name in ("orders", "ordinal"):
        r = cli("topic", "create", name, "-p", 1, "-b", shared_broker.bootstrap)
        assert r.returncode == 0 or "already exists" in r.stderr, r.stderr
    return shared_broker.bootstrap


def start(shell: str, env: dict[str, str]) -> Terminal:
    if shell == "bash":
        term = Terminal(["bash", "--norc", "--noprofile", "-i"], env)
        term.type(f"PS1='READY> '; source {SCRIPTS / 'kafkactl.bash'}; echo SOURCED\n")
    else:
        term = Terminal(["zsh", "-f", "-i"], env)
        term.type(f"PROMPT='READY> '; autoload -U compinit; compinit -u; source {SCRIPTS / '_kafkactl'}; "
                  "echo SOURCED\n")  # fmt: skip
    term.read_until(r"SOURCED\s*\n.*READY> ")
    return term


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_tab_completes_commands_options_and_topic_names(shell, topics):
    if shutil.which(shell) is None:
        pytest.fail(f"{shell} is not installed (scripts/setup.sh installs it with the test extra)")
    term = start(shell, shell_env(topics))
    try:
        term.type("kafkactl to\t")  # one match: completed in place
        term.read_until(r"kafkactl topic ")
        term.type("desc\t")
        term.read_until(r"describe ")
        term.type("\x15")  # ^U: a new line
        term.type("kafkactl consume --max-m\t")
        term.read_until(r"--max-messages ")
        term.type("\x15kafkactl consume ord\t\t")  # two topics start with ord: both are listed
        shown = term.read_until(r"orders[\s\S]*ordinal|ordinal[\s\S]*orders")
        assert "Traceback" not in shown and "not supported" not in shown
    finally:
        term.close()


def test_fish_completes_through_the_same_script(topics):
    if shutil.which("fish") is None:
        pytest.fail("fish is not installed (scripts/setup.sh installs it with the test extra)")
    script = SCRIPTS / "kafkactl.fish"
    r = subprocess.run(["fish", "--no-config", "-c", f"source {script}; complete -C 'kafkactl to'; "
                        "complete -C 'kafkactl consume ord'"], capture_output=True, text=True, timeout=60,
                       env=shell_env(topics))  # fmt: skip
    names = [line.split("\t")[0] for line in r.stdout.splitlines()]
    assert names == ["topic", "orders", "ordinal"], (r.stdout, r.stderr)


def test_an_unreachable_broker_completes_nothing_and_fast(shared_broker):
    env = shell_env("127.0.0.1:1")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "kafkactl"], capture_output=True, text=True, timeout=30,
                       env={**env, "COMP_WORDS": "kafkactl consume o", "COMP_CWORD": "2",
                            "_KAFKACTL_COMPLETE": "complete_bash"})  # fmt: skip
    assert r.returncode == 0 and r.stdout.strip() == "" and r.stderr == "", r
    assert time.monotonic() - t0 < 10
    ok(cli("topic", "list", "-b", shared_broker.bootstrap))  # (the broker itself is fine)


def test_produce_on_a_terminal_shows_bytes_in_human_units_and_no_bar_for_typed_input(topics, tmp_path):
    big = tmp_path / "big.txt"
    big.write_text("".join(f"{i:07d}{'x' * 993}\n" for i in range(20000)))  # 20 MB
    env = {**shell_env(topics), "TERM": "xterm", "COLUMNS": "120"}  # (rich draws no live bar on a dumb terminal)
    term = Terminal([sys.executable, "-m", "kafkactl", "produce", "orders", "--file", str(big), "--acks", "1"], env)
    try:
        shown = term.read_until(r"produced 20000 message\(s\)", timeout=120)
        assert re.search(r"\d+(\.\d+)?/20\.0 MB", shown), shown[-2000:]  # a bar in MB, not a count of bytes
    finally:
        term.close()
    term = Terminal([sys.executable, "-m", "kafkactl", "produce", "orders", "--acks", "1"], env)
    try:
        term.type("typed-1\ntyped-2\n\x04")  # typed at the terminal, then ^D
        shown = term.read_until(r"produced 2 message\(s\)", timeout=60)
        assert "0/?" not in shown and "producing to" not in shown, shown
    finally:
        term.close()
