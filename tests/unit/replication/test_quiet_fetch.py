"""`ReplicaManager.quiet_fetch`: a follower's incremental fetch notes the session partitions it did not name and
that hold nothing new for it as caught up, without a read."""

from __future__ import annotations

from broker.records.batch import Record, build_batch
from tests.unit.replication.leader import TP, leader_manager


def test_a_quiet_session_partition_is_noted_caught_up_without_a_read(tmp_path):
    """`quiet_fetch`: a partition a follower's incremental fetch did not name is noted as caught up (no read,
    nothing answered) only while its copy is whole, in the ISR, at the leader's epoch, and told the current
    high watermark, last stable offset and log start; anything else is read the usual way."""
    m, plog = leader_manager(tmp_path)
    for i in range(10):
        plog.append(build_batch([Record(0, 0, None, b"v%d" % i)]))
    m.replica_fetched(TP, 2, 10, plog)
    m.replica_fetched(TP, 3, 10, plog)
    assert m.high_watermark(TP, plog) == 10
    told = (10, 10, 0)
    f = m.leaders[TP].followers[2]
    assert m.quiet_fetch(TP, 2, 10, 0, told, plog, f.caught_up_ms + 5000)
    assert f.caught_up_ms == f.last_fetch_ms  # (noted now: the ISR check does not take it for lagging)
    assert not m.quiet_fetch(TP, 2, 10, 0, (9, 9, 0), plog, 0)  # it was told an older high watermark
    assert not m.quiet_fetch(TP, 2, 10, 1, told, plog, 0)  # another leader epoch: fenced the usual way
    assert not m.quiet_fetch(TP, 2, 9, 0, told, plog, 0)  # (its copy is not where it said last)
    plog.append(build_batch([Record(0, 0, None, b"new")]))
    assert not m.quiet_fetch(TP, 2, 10, 0, told, plog, 0)  # records to send
    m.replica_fetched(TP, 2, 11, plog)
    m.replica_fetched(TP, 3, 11, plog)
    m.leaders[TP].isr = [1, 2]
    assert not m.quiet_fetch(TP, 3, 11, 0, (11, 11, 0), plog, 0)  # out of the ISR: read, so it can rejoin
    assert m.quiet_fetch(TP, 2, 11, 0, (11, 11, 0), plog, 0)
