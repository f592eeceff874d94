"""`kafkactl inspect segments`: every batch and record reported, damage reported and skipped."""

from __future__ import annotations

import json
from pathlib import Path

from broker.records.compression import Codec
from tests.cli.conftest import TS, kafkactl
from tests.unit.log.outside_dirs import move_out
from tests.unit.records.legacy_sets import UPGRADED_CLUSTER, message, write_partition


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_json_batches_cover_every_offset(log_dir: Path) -> None:
    r = kafkactl("inspect", "segments", log_dir, "-o", "json")
    assert r.returncode == 0, r.stderr
    evs = _events(r.stdout)
    for p in (0, 1):
        batches = [e for e in evs if e["type"] == "batch" and f"/t-{p}/" in e["file"]]
        assert [b["base_offset"] for b in batches] == list(range(0, 60, 3))
        assert all(b["valid"] and b["crc"] == b["computed_crc"] and b["count"] == 3 for b in batches)
        assert all(b["magic"] == 2 and b["codec"] == "none" and b["producer_id"] == -1 for b in batches)
        assert [b["create_time"] for b in batches] == [TS + i for i in range(20)]
    summary = evs[-1]
    assert summary == {"type": "summary", "files": summary["files"], "batches": 40, "records": 120,
                       "invalid": 0, "errors": 0, "outside": 0, "unreadable": 0}  # fmt: skip
    assert summary["files"] > 2  # the small segment size rolled several segments


def test_deep_print_data_shows_every_record(log_dir: Path) -> None:
    r = kafkactl("inspect", "segments", log_dir / "t-1", "-o", "json", "--print-data")
    evs = [e for e in _events(r.stdout) if e["type"] == "record"]
    assert [e["offset"] for e in evs] == list(range(60))
    for e in evs:
        b, i = divmod(e["offset"], 3)
        assert e["key"] == f"k{b}-{i}" and e["value"] == f"value 1/{b}/{i}"
        assert e["headers"] == [["h", "x"]] and e["timestamp"] == TS + b


def test_decode_hex_and_base64(log_dir: Path) -> None:
    seg = sorted((log_dir / "t-0").glob("*.log"))[0]
    r = kafkactl("inspect", "segments", seg, "-o", "json", "--print-data", "--decode", "hex")
    rec = next(e for e in _events(r.stdout) if e["type"] == "record")
    assert rec["value"] == b"value 0/0/0".hex()
    r = kafkactl("inspect", "segments", seg, "-o", "json", "--print-data", "--decode", "base64")
    rec = next(e for e in _events(r.stdout) if e["type"] == "record")
    assert rec["key"] == "azAtMA=="


def test_text_output_has_a_line_per_batch(log_dir: Path) -> None:
    r = kafkactl("inspect", "segments", log_dir / "t-0", "--deep")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert sum(line.startswith("base_offset: ") for line in lines) == 20
    assert sum(line.startswith("| offset: ") for line in lines) == 60
    assert lines[-1].startswith("Summary: ")


def test_verify_index_clean_then_garbage(log_dir: Path) -> None:
    r = kafkactl("inspect", "segments", log_dir, "--verify-index", "-o", "json")
    assert r.returncode == 0 and not [e for e in _events(r.stdout) if e["type"] == "index"]
    idx = sorted((log_dir / "t-0").glob("*.index"))[0]
    idx.write_bytes(b"\xff" * 13)
    r = kafkactl("inspect", "segments", log_dir / "t-0", "--verify-index", "-o", "json")
    assert r.returncode == 3
    kinds = {e["kind"] for e in _events(r.stdout) if e["type"] == "index"}
    assert "garbage" in kinds


def test_crc_damage_is_reported_and_scan_goes_on(log_dir: Path) -> None:
    seg = sorted((log_dir / "t-0").glob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    data[70] ^= 0xFF  # inside the first batch's records: CRC mismatch, framing intact
    seg.write_bytes(bytes(data))
    r = kafkactl("inspect", "segments", seg, "-o", "json")
    assert r.returncode == 3
    batches = [e for e in _events(r.stdout) if e["type"] == "batch"]
    assert batches[0]["valid"] is False and all(b["valid"] for b in batches[1:])
    assert len(batches) > 1


def test_framing_damage_skips_to_next_batch(log_dir: Path) -> None:
    seg = sorted((log_dir / "t-0").glob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    n_before = len(
        [e for e in _events(kafkactl("inspect", "segments", seg, "-o", "json").stdout) if e["type"] == "batch"]
    )
    data[8:12] = (2**31 - 1).to_bytes(4, "big")  # first batch length points past the file
    seg.write_bytes(bytes(data))
    r = kafkactl("inspect", "segments", seg, "-o", "json")
    evs = _events(r.stdout)
    errors = [e for e in evs if e["type"] == "error"]
    assert errors and "past the end" in errors[0]["message"] and errors[0]["position"] == 0
    assert len([e for e in evs if e["type"] == "batch"]) == n_before - 1
    assert r.returncode == 3


def test_bad_inputs_are_reported_and_inspect_keeps_going(tmp_path: Path, log_dir: Path) -> None:
    good = sorted((log_dir / "t-0").glob("*.log"))[0]
    empty = tmp_path / "00000000000000000000.log"
    empty.write_bytes(b"")
    truncated = tmp_path / "00000000000000000099.log"
    truncated.write_bytes(good.read_bytes()[:50])
    badname = tmp_path / "notanoffset.log"
    badname.write_bytes(good.read_bytes())
    negative = tmp_path / "00000000000000000007.log"
    negative.write_bytes(b"\0" * 8 + (-5).to_bytes(4, "big", signed=True) + b"\0" * 60)
    notalog = tmp_path / "empty-dir"
    notalog.mkdir()
    r = kafkactl("inspect", "segments", empty, truncated, badname, negative, notalog, good, "-o", "json")
    assert r.returncode == 3 and "Traceback" not in r.stderr
    evs = _events(r.stdout)
    msgs = {Path(e["file"]).name: e["message"] for e in evs if e["type"] == "error"}
    assert "truncated" in msgs["00000000000000000099.log"]
    assert "not a 20-digit offset" in msgs["notanoffset.log"]
    assert "negative batch length" in msgs["00000000000000000007.log"]
    assert "not a log dir" in msgs["empty-dir"]
    assert "00000000000000000000.log" not in msgs  # an empty segment is valid
    assert any(e["type"] == "batch" and e["file"] == str(good) for e in evs)  # kept going to the end


# -- logs as Apache Kafka wrote them: magic 0 and 1 message sets, then v2 ---------------------------


def _kafka_log_dir(root: Path) -> tuple[Path, list[tuple[int, bytes]]]:
    log_dir = root / "kafka-logs"
    records = write_partition(log_dir / "orders-0", UPGRADED_CLUSTER)
    return log_dir, records


def test_kafka_log_of_every_format_is_counted_as_kafka_counts_it(tmp_path: Path) -> None:
    log_dir, records = _kafka_log_dir(tmp_path)
    r = kafkactl("inspect", "segments", log_dir, "-o", "json", "--print-data", "--verify-index")
    assert r.returncode == 0, r.stdout + r.stderr
    evs = _events(r.stdout)
    batches = [(e["magic"], e["codec"], e["base_offset"], e["last_offset"], e["count"], e["valid"])
               for e in evs if e["type"] == "batch"]  # fmt: skip
    expected, offset = [], 0
    for magic, codec, n in (spec for segment in UPGRADED_CLUSTER for spec in segment):
        if magic < 2 and codec == Codec.NONE:  # one message, one record each
            expected += [(magic, "none", o, o, 1, True) for o in range(offset, offset + n)]
        else:  # a wrapper or a v2 batch: from its first record to its last
            expected.append((magic, codec.name.lower(), offset, offset + n - 1, n, True))
        offset += n
    assert batches == expected
    assert [(e["offset"], e["value"]) for e in evs if e["type"] == "record"] == [(o, v.decode()) for o, v in records]
    assert not [e for e in evs if e["type"] in ("error", "index")]  # no offset gap, indexes agree
    assert evs[-1] == {"type": "summary", "files": 3, "batches": len(expected), "records": len(records),
                       "invalid": 0, "errors": 0, "outside": 0, "unreadable": 0}  # fmt: skip


def test_a_wrapper_whose_records_do_not_decode_is_reported_invalid(tmp_path: Path) -> None:
    seg = tmp_path / "00000000000000000000.log"
    bad = message(0, None, b"\x1f\x8b but not gzip", magic=1, attributes=Codec.GZIP)  # its CRC-32 holds
    seg.write_bytes(bad + message(1, None, b"fine", magic=1))
    r = kafkactl("inspect", "segments", seg)
    assert r.returncode == 3 and "Traceback" not in r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("base_offset")]
    assert len(lines) == 2
    assert "valid: false problem: compressed message: gzip block does not decompress" in lines[0]
    assert lines[1].endswith("valid: true")


def test_entries_resolving_outside_the_dir_given_are_reported(log_dir: Path, tmp_path: Path) -> None:
    """A partition dir symlinked out of the log dir, a segment and an index symlinked out of their
    partition dir: each is reported (recover leaves them alone), and still read."""
    outside = tmp_path / "elsewhere"
    moved = {}
    for path in (
        log_dir / "t-1",
        sorted((log_dir / "t-0").glob("*.log"))[0],
        sorted((log_dir / "t-0").glob("*.index"))[1],
    ):
        moved[path] = move_out(path, outside)
    r = kafkactl("inspect", "segments", log_dir, "-o", "json", "--verify-index")
    assert r.returncode == 0, r.stdout + r.stderr  # nothing is damaged
    evs = _events(r.stdout)
    reported = {(e["file"], e["target"], e["root"]) for e in evs if e["type"] == "outside"}
    assert reported == {
        (str(log_dir / "t-1"), str(moved[log_dir / "t-1"]), str(log_dir)),
        *((str(p), str(t), str(log_dir / "t-0")) for p, t in moved.items() if p.parent.name == "t-0"),
    }
    assert evs[-1]["outside"] == 3 and evs[-1]["batches"] == 40  # every batch still read
    text = kafkactl("inspect", "segments", log_dir / "t-0").stdout
    assert sum(line.startswith("OUTSIDE ") for line in text.splitlines()) == 2
    assert "2 entries resolving outside the dir given" in text.splitlines()[-1]


def test_a_path_that_is_not_a_log_is_a_usage_error_not_damage(tmp_path: Path) -> None:
    r = kafkactl("inspect", "segments", tmp_path / "nonexistent")
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr
    assert r.stderr == f"kafkactl: error: {tmp_path / 'nonexistent'}: no such file or directory\n"
    r = kafkactl("inspect", "segments", "/dev/null", "-o", "json")
    assert r.returncode == 2
    (error,) = [e for e in _events(r.stdout) if e["type"] == "error"]
    assert error["message"] == "not a regular file, log dir or partition dir"
    assert _events(r.stdout)[-1]["unreadable"] == 1
