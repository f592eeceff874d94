"""Small CLI stumbles of issue 26, each as a user met it (no broker needed): one message and exit code for a
missing path across commands, plain `--help` in a pipe, `inspect cleaner` showing compacted partitions, one
default per option in the man pages, and the spinner `spark-load` shows on a terminal."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from broker.log.checkpoint import OffsetCheckpointFile
from broker.log.cleaner_progress import CHECKPOINT
from kafkactl import render
from kafkactl.docs import man_pages
from tests.cli.conftest import kafkactl, make_log_dir


@pytest.mark.parametrize(
    "argv",
    [
        ["recover", "{p}"],
        ["recover", "{p}", "--execute"],
        ["inspect", "segments", "{p}"],
        ["inspect", "cleaner", "{p}"],
        ["topic", "create", "--from-file", "{p}", "-b", "127.0.0.1:1"],
        ["topic", "reassign", "{p}", "-z", "127.0.0.1:1"],
        ["topic", "reassign", "{p}", "--execute", "-z", "127.0.0.1:1"],
    ],
)
def test_a_missing_path_is_one_usage_error_line_whatever_the_command(tmp_path: Path, argv: list[str]) -> None:
    missing = tmp_path / "nonexistent"
    r = kafkactl(*(a.replace("{p}", str(missing)) for a in argv))
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == f"kafkactl: error: {missing}: no such file or directory\n"


def test_a_directory_given_as_a_file_and_a_file_given_as_a_log_dir_are_usage_errors(tmp_path: Path) -> None:
    r = kafkactl("topic", "reassign", tmp_path, "-z", "127.0.0.1:1")
    assert r.returncode == 2 and r.stderr == f"kafkactl: error: {tmp_path}: is a directory, not a file\n"
    f = tmp_path / "plain"
    f.write_text("x")
    r = kafkactl("recover", f)
    assert r.returncode == 2 and r.stderr.startswith(f"kafkactl: error: {f}: not a directory")


def test_help_in_a_pipe_is_plain_text_without_box_drawing() -> None:
    for argv in (["--help"], ["topic", "--help"], ["topic", "reassign", "--help"], ["cluster", "up", "-h"]):
        r = kafkactl(*argv)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("Usage: kafkactl"), r.stdout[:200]
        assert not re.search("[\u2500-\u257f]", r.stdout), argv  # no box drawing
        assert "\x1b[" not in r.stdout  # no colours
    assert "--rollback-file" in kafkactl("topic", "reassign", "--help").stdout
    # a group called bare prints its help (plain) and exits 2, as before
    r = kafkactl("topic")
    assert r.returncode == 2 and r.stdout.startswith("Usage: kafkactl topic") and r.stderr == ""


def test_the_man_pages_show_one_default_per_option() -> None:
    for name, page in man_pages().items():
        for line in page.splitlines():
            assert not re.search(r"default.*\(default: ", line, re.IGNORECASE) or "mirror" in name, (name, line)
    create = man_pages()["kafkactl-topic-create.1"]
    assert "(default: \\-1)" not in create and "default.replication.factor" in create


def test_inspect_cleaner_shows_the_compacted_partitions_and_all_of_them_with_all(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, partitions=3)
    OffsetCheckpointFile(log_dir / CHECKPOINT).write({("t", 1): 6})  # only t-1 was ever cleaned
    r = kafkactl("inspect", "cleaner", log_dir)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == ["t-1"]
    assert lines[-1].endswith("2 not compacted left out (--all shows them)")
    rows = [json.loads(line) for line in kafkactl("inspect", "cleaner", log_dir, "--all", "-o", "json").stdout.split()]
    parts = {(e["topic"], e["partition"]): e["compacted"] for e in rows if e["type"] == "partition"}
    assert parts == {("t", 0): False, ("t", 1): True, ("t", 2): False}
    assert rows[-1]["type"] == "summary" and rows[-1]["not_compacted_hidden"] == 0
    text = kafkactl("inspect", "cleaner", log_dir, "--all").stdout
    assert "t-0: not compacted (no cleaner checkpoint)" in text and "t-1: cleaner checkpoint 6" in text


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_status_spinner_runs_on_a_terminal_only_and_steps_aside_for_a_progress_bar(monkeypatch) -> None:
    monkeypatch.setattr("sys.stderr", io.StringIO())
    with render.Status("quiet") as status:  # a pipe: nothing at all
        assert status._live is None
    tty = _Tty()
    monkeypatch.setattr("sys.stderr", tty)
    with render.Status("starting Spark") as status:
        assert status._live is not None
        with status.paused():
            assert status._live is None  # one live display at a time: the job's bar may start
            with render.progress("loading", 3) as advance:
                advance(3)
            status.update("committing the load")
        assert status._live is not None and status._text == "committing the load"
    assert status._live is None
