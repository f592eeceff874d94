"""The root command: version, help, and one-line errors with exit codes."""

from __future__ import annotations

from broker import __version__
from tests.cli.conftest import kafkactl


def test_version() -> None:
    r = kafkactl("--version")
    assert r.returncode == 0
    assert r.stdout.strip() == f"kafkactl {__version__}"


def test_help_lists_commands() -> None:
    r = kafkactl("--help")
    assert r.returncode == 0
    for noun in ("inspect", "recover", "bench"):
        assert noun in r.stdout


def test_unknown_option_is_one_line_exit_2() -> None:
    r = kafkactl("inspect", "segments", "--no-such-flag", "x")
    assert r.returncode == 2
    assert r.stderr.startswith("kafkactl: error: ")
    assert len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stderr


def test_unknown_command_exit_2() -> None:
    r = kafkactl("frobnicate")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [r.stderr.strip()]


def test_bad_choice_is_usage_error() -> None:
    r = kafkactl("inspect", "segments", "-o", "yaml", ".")
    assert r.returncode == 2
    assert "kafkactl: error:" in r.stderr and "Traceback" not in r.stderr


def test_user_error_is_one_line_and_debug_shows_traceback(tmp_path) -> None:
    r = kafkactl("recover", tmp_path / "missing")
    assert r.returncode == 2
    assert r.stderr.strip() == f"kafkactl: error: {tmp_path / 'missing'}: no such file or directory"
    r = kafkactl("--debug", "recover", tmp_path / "missing")
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_every_command_s_help_renders(capsys) -> None:
    """Help text goes through rich markup: a stray `[/...]` in one option's help made `--help` fail."""
    from kafkactl.app import command, run
    from kafkactl.docs import _walk

    for path, _cmd in _walk(command(), []):
        code = run([*path, "--help"])
        out = capsys.readouterr()
        assert code == 0, f"kafkactl {' '.join(path)} --help: {out.err[-300:]}"
        assert "Usage" in out.out, path
