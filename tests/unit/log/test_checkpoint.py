"""broker/log/checkpoint.py: Kafka's offset checkpoint files, written tmp → fsync → rename."""

from __future__ import annotations

import pytest

from broker.log.checkpoint import RECOVERY_POINT, CheckpointError, OffsetCheckpointFile, write_atomically


@pytest.fixture
def cp(tmp_path) -> OffsetCheckpointFile:
    return OffsetCheckpointFile(tmp_path / RECOVERY_POINT)


def test_round_trip_in_kafkas_text_format(cp):
    offsets = {("orders", 1): 1180, ("orders", 0): 1234, ("my-topic.v2", 12): 0, ("a_b", 3): 2**62}
    cp.write(offsets)
    assert cp.read() == offsets
    assert cp.path.read_text() == "0\n4\na_b 3 4611686018427387904\nmy-topic.v2 12 0\norders 0 1234\norders 1 1180\n"
    assert not cp.path.with_name(cp.path.name + ".tmp").exists()


def test_empty_and_missing(cp):
    assert cp.read() == {}  # no file yet
    cp.write({})
    assert cp.path.read_text() == "0\n0\n"
    assert cp.read() == {}


def test_rewrite_replaces_the_old_content(cp):
    cp.write({("t", 0): 5, ("t", 1): 6})
    cp.write({("t", 0): 7})
    assert cp.read() == {("t", 0): 7}


def test_a_crash_before_the_rename_leaves_the_old_checkpoint(cp):
    cp.write({("orders", 0): 10, ("orders", 1): 20})
    tmp = cp.path.with_name(cp.path.name + ".tmp")
    tmp.write_bytes(b"0\n2\norders 0 999\norders 1")  # the new content, half written, never renamed
    assert cp.read() == {("orders", 0): 10, ("orders", 1): 20}
    cp.write({("orders", 0): 11})  # the next write goes through the same tmp name
    assert cp.read() == {("orders", 0): 11} and not tmp.exists()


def test_write_atomically_any_file(tmp_path):
    target = tmp_path / "meta.properties"
    write_atomically(target, b"version=0\n")
    write_atomically(target, b"version=0\nbroker.id=3\n")
    assert target.read_bytes() == b"version=0\nbroker.id=3\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.properties"]


@pytest.mark.parametrize(
    "content",
    [
        b"",  # empty
        b"0\n",  # no count
        b"zero\n1\nt 0 1\n",  # version not a number
        b"1\n1\nt 0 1\n",  # unknown version
        b"0\n2\nt 0 1\n",  # fewer entries than the count
        b"0\n1\nt 0 1\nt 1 2\n",  # more entries than the count
        b"0\n1\nt 0\n",  # an entry without its offset
        b"0\n1\nt 0 1 2\n",  # an entry with too many fields
        b"0\n1\nt zero 1\n",  # partition not a number
        b"0\n1\nt 0 1.5\n",  # offset not an integer
        b"\xff\xfe\x00garbage",  # not text
    ],
)
def test_malformed_files_raise_checkpoint_error(cp, content):
    cp.path.write_bytes(content)
    with pytest.raises(CheckpointError, match=RECOVERY_POINT):
        cp.read()
