"""`kafkactl mirror` of a source holding transactions (KIP-98), between two real clusters: the mirror reads
read_committed, so the target holds exactly the committed records, in order, none of an aborted transaction;
`--exit` ends although the source partitions end in markers, aborted records or an open transaction;
`mirror status` says lag 0 then; the audit finds every tier in agreement; transaction markers at the end of a
target partition (written there by someone else) do not hide the mirror's last batch from a restarted mirror.
"""

from __future__ import annotations

import asyncio
import time

from confluent_kafka import Producer

from broker.audit.counts import HOST_HEADER, records
from broker.audit.scan import publish
from broker.client.consumer import AsyncConsumer
from tests.integration.helpers import cli, connect, json_lines, leaders, metadata, ok
from tests.integration.test_audit import T0, WINDOW_MS
from tests.integration.test_audit import produce as produce_audited
from tests.integration.test_mirror import read_all
from tests.integration.txn_raw import write_markers

TOPIC = "txns"
HOST = b"web-7"


def read_committed(bootstrap: str, topic: str) -> dict[int, list[tuple[bytes | None, bytes | None]]]:
    """(key, value) of every committed record of `topic` per partition, below its last stable offset."""

    async def main() -> dict[int, list[tuple[bytes | None, bytes | None]]]:
        async with AsyncConsumer(bootstrap, auto_offset_reset="earliest", isolation_level=1) as c:
            tps = [(topic, p) for p in await c.partitions_for(topic)]
            await c.assign(tps)
            ends = await c.end_offsets(tps)  # (read_committed: the last stable offsets)
            out: dict[int, list[tuple[bytes | None, bytes | None]]] = {p: [] for _, p in tps}
            deadline = time.monotonic() + 30
            while any((c.position(tp) or 0) < ends[tp] for tp in tps):
                assert time.monotonic() < deadline, "reading took over 30s"
                for (_, p), recs in (await c.getmany(timeout_ms=200, max_records=100_000)).items():
                    out[p] += [(r.key, r.value) for r in recs]
            return out

    return asyncio.run(main())


def transactional(bootstrap: str, txn_id: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5})
    p.init_transactions(30)
    return p


def send(p: Producer, kind: str, count: int, *, ts: int) -> list[bytes]:
    """`count` records stamped as an audited producer's (the host header), over both partitions; their values."""
    values = [b"%s-%d" % (kind.encode(), i) for i in range(count)]
    for i, v in enumerate(values):
        p.produce(TOPIC, v, key=b"k%d" % (i % 13), partition=i % 2, timestamp=ts + i, headers=[(HOST_HEADER, HOST)])
    assert p.flush(30) == 0  # (in the log before the commit or abort)
    return values


def publish_produced(bootstrap: str, count: int) -> None:
    """The produced tier of the transactional records a test commits (their producer publishes no counts)."""
    recs = records("produced", {(TOPIC, T0 + WINDOW_MS): count}, WINDOW_MS, client="it-tests")
    asyncio.run(publish(bootstrap, recs))


def mirror(source: str, target: str) -> str:
    r = cli("mirror", "start", "--from", source, "--to", target, "--include", TOPIC, "--audit", "--audit-window-ms",
            WINDOW_MS, "--exit", timeout=90)  # fmt: skip
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    return r.stderr


def status(source: str, target: str) -> list[dict]:
    return json_lines(ok(cli("mirror", "status", "--from", source, "--to", target, "--include", TOPIC, "-o", "json")))


def audit(source: str, target: str) -> dict[int, dict]:
    r = cli("audit", TOPIC, "-b", source, "--mirror", target, "-o", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    return {(row["window_start"] - T0) // WINDOW_MS: row for row in json_lines(r.stdout)}


def target_values(target: str) -> dict[int, list[tuple[bytes | None, bytes | None]]]:
    return {p: [(rec[2], rec[3]) for rec in recs] for p, recs in read_all(target, TOPIC).items()}


def test_the_mirror_copies_committed_transactions_only_and_ends(two_clusters, monkeypatch):
    source, target, _ = two_clusters
    monkeypatch.setenv("KAFKACTL_AUDIT_HOST", HOST.decode())
    ok(cli("topic", "create", TOPIC, "-p", 2, "--config", "retention.ms=-1", "-b", source))
    assert produce_audited(source, TOPIC, [T0 + i for i in range(40)]) == []  # window 0: plain audited records

    ts = T0 + WINDOW_MS  # window 1: transactions, each record stamped as audited
    p = transactional(source, "mirror-txn")
    p.begin_transaction()
    committed = send(p, "commit-a", 60, ts=ts)
    p.commit_transaction(30)
    p.begin_transaction()
    aborted = send(p, "abort-b", 25, ts=ts)
    p.abort_transaction(30)
    p.begin_transaction()
    committed += send(p, "commit-c", 15, ts=ts)
    p.commit_transaction(30)
    p.begin_transaction()
    aborted += send(p, "abort-d", 10, ts=ts)  # each partition ends in aborted records and their marker ...
    p.abort_transaction(30)
    publish_produced(source, len(committed))
    other = transactional(source, "mirror-txn-open")
    other.begin_transaction()
    still_open = send(other, "open-e", 6, ts=ts)  # ... and then an open transaction: its LSO below its end

    out = mirror(source, target)
    assert "mirrored 115 messages of 2 partition(s)" in out, out  # 40 plain and 75 committed
    want = read_committed(source, TOPIC)
    got = target_values(target)
    assert got == want  # in order, per partition
    values = sorted(v for recs in got.values() for _, v in recs)
    assert len(values) == 115 and set(committed) <= set(values)
    assert not set(values) & set(aborted + still_open)
    rows = status(source, target)
    assert [(r["partition"], r["lag"], r["foreign"]) for r in rows] == [(0, 0, False), (1, 0, False)], rows
    assert all(r["mirrored"] < r["source_end"] for r in rows), rows  # markers/aborted records after the last copied

    # the audit: nothing aborted or open counted as stored, so every tier agrees
    rows = audit(source, target)
    tiers = ("produced", "stored", "mirrored", "mirror-stored")
    assert [rows[0][t] for t in tiers] == [40] * 4 and [rows[1][t] for t in tiers] == [75] * 4, rows
    assert {r["status"] for r in rows.values()} == {"ok"}, rows

    # the open transaction commits: the next run copies it, and only it
    other.commit_transaction(30)
    publish_produced(source, len(still_open))
    assert "mirrored 6 messages of 2 partition(s)" in mirror(source, target)
    assert target_values(target) == read_committed(source, TOPIC)
    assert [r["status"] for r in audit(source, target).values()] == ["ok", "ok"]

    # markers at the end of a target partition (another producer's, no data of it) are stepped over: the mirror's
    # last batch before them still says where it is
    md = metadata(target.split(",")[0], [TOPIC])
    leader = next(b for b in md["brokers"] if b["node_id"] == leaders(md, TOPIC)[0])
    with connect(f"{leader['host']}:{leader['port']}") as conn:
        for pid in range(900_000, 900_004):
            assert write_markers(conn, pid, 0, False, 0, [(TOPIC, 0)]) == {(TOPIC, 0): 0}
    rows = status(source, target)
    assert [(r["lag"], r["foreign"]) for r in rows] == [(0, False), (0, False)], rows
    p.begin_transaction()
    committed = send(p, "commit-f", 4, ts=ts)
    p.commit_transaction(30)
    publish_produced(source, len(committed))
    assert "mirrored 4 messages of 2 partition(s)" in mirror(source, target)
    assert target_values(target) == read_committed(source, TOPIC)
    assert [r["status"] for r in audit(source, target).values()] == ["ok", "ok"]
