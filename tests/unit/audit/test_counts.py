"""Audit counts: windows, publication records, stamped batches, and how a window's tiers are judged."""

from __future__ import annotations

import pytest

from broker.audit.counts import HOST_HEADER, AuditRecord, WindowCounts, count_stamped, stamped
from broker.audit.reconcile import WindowRow, _judge
from broker.errors import UsageError
from broker.records.batch import Record, build_batch, decode_header

W = 10_000


def test_counts_are_taken_by_closed_window_and_then_forgotten():
    c = WindowCounts(W)
    c.add("a", 5)
    c.add("a", 9_999, 2)
    c.add("a", 10_000)
    c.add("b", 25_000, 4)
    assert c.oldest == 0 and not c.due(9_999) and c.due(10_000)
    assert c.take(20_000) == {("a", 0): 3, ("a", 10_000): 1}
    assert c.oldest == 20_000 and c.take(20_000) == {}
    assert c.take() == {("b", 20_000): 4} and c.oldest is None
    with pytest.raises(UsageError):
        WindowCounts(0)


def test_an_audit_record_round_trips_and_anything_else_is_skipped():
    rec = AuditRecord("mirrored", "orders", 20_000, W, 7, "web-7", "kafkactl-mirror", 123, "dc1:9092", "dc1.orders")
    assert AuditRecord.decode(rec.encode()) == rec
    for junk in (None, b"", b"not json", b'{"tier": "eaten", "topic": "t", "window_start": 0, "window_ms": 1, '
                 b'"count": 1}', b'{"tier": "produced"}', b'{"tier": "produced", "topic": "t", "window_start": 0, '
                 b'"window_ms": 0, "count": 1}'):  # fmt: skip
        assert AuditRecord.decode(junk) is None


def test_a_stamped_batch_counts_whole_in_the_window_of_its_base_timestamp():
    recs = [Record(i, 12_000 + i, None, b"v", ((HOST_HEADER, b"h"),) if i == 0 else ()) for i in range(5)]
    batch = build_batch(recs)
    counts: dict[int, int] = {}
    count_stamped(counts, batch, 0, decode_header(batch), W)
    count_stamped(counts, batch, 0, decode_header(batch), W)
    assert counts == {10_000: 10}
    plain = build_batch([r._replace(headers=()) for r in recs])
    assert not stamped(plain, 0, decode_header(plain))
    later = build_batch([Record(0, 12_000, None, b"v"), Record(1, 12_001, None, b"v", ((HOST_HEADER, b"h"),))])
    assert not stamped(later, 0, decode_header(later))  # only the first record speaks for the batch


def row(**counts):
    full = {t: counts.get(t.replace("-", "_")) for t in ("produced", "stored", "mirrored", "mirror-stored", "loaded")}
    return WindowRow("t", 0, W, full)


@pytest.mark.parametrize(("counts", "status", "detail"), [
    (dict(produced=5, stored=5), "ok", ""),
    (dict(produced=5, stored=4), "lost", "1 lost between produced and stored"),
    (dict(produced=5, stored=6), "duplicated", "1 more stored than produced"),
    (dict(produced=5, stored=5, mirrored=5, mirror_stored=3), "lost", "2 lost between mirrored and mirror-stored"),
    (dict(produced=5, stored=5, mirrored=4, mirror_stored=4), "lost", "1 lost between stored and mirrored"),
    (dict(produced=5, stored=5, loaded=2), "ok (partly loaded)", ""),
    (dict(produced=5, stored=5, loaded=7), "duplicated", "2 more loaded than stored"),
])  # fmt: skip
def test_a_settled_window_is_judged_tier_by_tier(counts, status, detail):
    r = _judge(row(**counts), now_ms=10**9, grace_ms=1000)
    assert (r.status, r.detail) == (status, detail)
    assert (r.problem is not None) == (status in ("lost", "duplicated"))


def test_a_window_within_the_grace_is_in_flight_not_lost():
    r = _judge(row(produced=5, stored=4), now_ms=W + 500, grace_ms=1000)
    assert (r.status, r.problem) == ("in flight", None)


def test_a_loss_where_retention_cut_the_log_is_expired_and_other_mirrors_are_left_out(monkeypatch):
    """`_reconcile`'s rules over fake tiers: windows at or before the first one a cut log still holds are
    expired, not lost; mirrored counts of another source cluster into the same target are not summed in."""
    import asyncio

    from broker.audit import reconcile

    recs = [AuditRecord("produced", "t", w, W, 5) for w in (0, W, 2 * W, 3 * W)]
    mirrored = [AuditRecord("mirrored", "t", w, W, 5, source="dc1-id") for w in (2 * W, 3 * W)]
    mirrored.append(AuditRecord("mirrored", "t", 2 * W, W, 7, source="dc2-id"))

    async def audit_records(bootstrap):  # noqa: ANN001, ANN202
        return (recs, "dc1-id") if bootstrap == "dc1" else (mirrored, "agg-id")

    async def stored(bootstrap, topic, wms):  # noqa: ANN001, ANN202
        if bootstrap == "dc1":
            return {W: 2, 2 * W: 5, 3 * W: 4}, True  # retention cut the log inside window 1; window 3 lost one
        return {2 * W: 5, 3 * W: 5}, False

    monkeypatch.setattr(reconcile, "_audit_records", audit_records)
    monkeypatch.setattr(reconcile, "_stored", stored)
    rows = {r.window_start // W: r for r in asyncio.run(reconcile._reconcile("dc1", "agg", None, 0, 10**9))}
    assert rows[0].status == rows[1].status == "expired"
    assert rows[2].counts["mirrored"] == 5 and rows[2].status == "ok"  # dc2's 7 left out
    assert (rows[3].status, rows[3].detail) == ("lost", "1 lost between produced and stored")
