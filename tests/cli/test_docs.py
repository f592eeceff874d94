"""man/ and completions/ are generated from the command tree; this fails when they are stale."""

from __future__ import annotations

from pathlib import Path

from kafkactl.docs import completions, man_pages

ROOT = Path(__file__).resolve().parents[2]
HINT = "stale: run `python scripts/gen_docs.py` and commit man/ and completions/"


def test_man_pages_are_current() -> None:
    expected = man_pages()
    on_disk = {p.name: p.read_text() for p in (ROOT / "man").iterdir()}
    assert sorted(on_disk) == sorted(expected), HINT
    for name, text in expected.items():
        assert on_disk[name] == text, f"man/{name} {HINT}"


def test_completions_are_current() -> None:
    expected = completions()
    on_disk = {p.name: p.read_text() for p in (ROOT / "completions").iterdir()}
    assert on_disk == expected, HINT


def test_every_command_has_a_man_page() -> None:
    pages = man_pages()
    for name in ("kafkactl.1", "kafkactl-inspect-segments.1", "kafkactl-recover.1", "kafkactl-bench-log.1"):
        assert name in pages
        assert ".SH OPTIONS" in pages[name]
    assert all(".SH ENVIRONMENT" in page and "KAFKACTL_BOOTSTRAP_SERVER" in page for page in pages.values())
    # the README's examples of a command, and its whole first paragraph as its summary (not its first line)
    reassign = pages["kafkactl-topic-reassign.1"]
    assert ".SH EXAMPLES" in reassign and "kafkactl topic reassign plan.json \\-\\-verify" in reassign
    assert "kafkactl consume" not in reassign
    assert "kafka\\-reassign\\-partitions does through ZooKeeper." in reassign.split(".SH SYNOPSIS")[0]
