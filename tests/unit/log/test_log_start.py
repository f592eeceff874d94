"""Moving a log's start offset up (DeleteRecords, a follower taking its leader's start): what readers see,
which segments go, and what a restart from the checkpoint keeps."""

from __future__ import annotations

import pytest

from broker.errors import OffsetOutOfRangeError


def _fill(log, make_batch, n: int) -> list[bytes]:
    values = [b"v%03d" % i + b"." * 40 for i in range(n)]
    for v in values:
        log.append(make_batch([v]))
    return values


def test_whole_segments_below_the_new_start_go_and_the_one_holding_it_stays(open_log, make_batch, read_all):
    log = open_log(segment_bytes=300)
    values = _fill(log, make_batch, 30)
    bases = list(log.bases)
    assert len(bases) > 4
    target = bases[2] + 1  # inside the third segment
    assert log.advance_log_start(target) == bases[:2]
    assert log.bases == bases[2:] and log.log_start_offset == target
    assert [r.value for r in read_all(log)] == values[target:]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(target - 1, 10)
    assert log.offset_for_timestamp(0)[0] == target


def test_a_start_on_a_segment_base_deletes_every_segment_before_it(open_log, make_batch):
    log = open_log(segment_bytes=300)
    _fill(log, make_batch, 30)
    bases = list(log.bases)
    assert log.advance_log_start(bases[3]) == bases[:3] and log.bases[0] == bases[3]


def test_the_start_never_moves_back_nor_past_the_log_end(open_log, make_batch, read_all):
    log = open_log(segment_bytes=300)
    _fill(log, make_batch, 30)
    log.advance_log_start(10)
    assert log.advance_log_start(5) == [] and log.log_start_offset == 10
    log.advance_log_start(10**9)
    assert log.log_start_offset == log.log_end_offset == 30
    assert log.bases == [log.bases[-1]]  # the active segment stays, whatever it holds
    assert read_all(log) == []
    assert log.append(make_batch([b"next"])).first_offset == 30
    assert [r.value for r in read_all(log)] == [b"next"]


def test_the_new_start_survives_a_restart_through_the_checkpoint(open_log, make_batch, read_all):
    log = open_log(segment_bytes=300)
    values = _fill(log, make_batch, 30)
    log.advance_log_start(17)
    log.close()
    again = open_log(segment_bytes=300, log_start_offset=17)
    assert again.log_start_offset == 17 and [r.value for r in read_all(again)] == values[17:]
