"""The paper's audit against real clusters: audited producers and an audited mirror publish per-window counts,
and `kafkactl audit` sets them against what each cluster holds. A message the broker refused (the
producing application ignored the error) is caught as a loss and located to its window; every other window
matches across produced, stored, mirrored and mirror-stored."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from broker.audit.counts import AUDIT_TOPIC, HOST_HEADER, AuditRecord
from broker.client.producer import AsyncProducer, ProduceError
from tests.integration.helpers import cli, cli_env, json_lines, ok
from tests.integration.test_mirror import read_all

WINDOW_MS = 10_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a window start


def produce(bootstrap: str, topic: str, timestamps: list[int], *, size: int = 20, host: str = "") -> list[str]:
    """Audited messages with these timestamps; returns the errors of those the broker refused."""

    async def main() -> list[str]:
        errors = []
        async with AsyncProducer(bootstrap, acks="all", audit_enabled=True, audit_window_ms=WINDOW_MS,
                                 max_request_size=10_000, linger_ms=0) as p:  # fmt: skip
            for i, ts in enumerate(timestamps):
                delivery = await p.send(topic, b"x" * size, key=b"k%d" % i, timestamp=ts)
                try:
                    await delivery
                except ProduceError as exc:
                    errors.append(str(exc))
        return errors

    return asyncio.run(main())


def test_audit_matches_every_tier_and_locates_a_message_lost_between_them(two_clusters, monkeypatch, tmp_path):
    source, target, _ = two_clusters
    monkeypatch.setenv("KAFKACTL_AUDIT_HOST", "web-7")
    ok(cli("topic", "create", "orders", "-p", 2, "--config", "max.message.bytes=2000", "-b", source))
    assert produce(source, "orders", [T0 + i for i in range(120)]) == []  # window 1
    assert produce(source, "orders", [T0 + WINDOW_MS + i for i in range(30)]) == []  # window 2 ...
    refused = produce(source, "orders", [T0 + WINDOW_MS + 500], size=3000)  # ... and one message the broker refuses
    assert len(refused) == 1 and "MESSAGE_TOO_LARGE" in refused[0]
    assert produce(source, "orders", [T0 + 3 * WINDOW_MS + i for i in range(7)]) == []  # window 4
    ok(cli("produce", "orders", "-b", source, input_text="not audited\n"))  # no stamp: no tier counts it

    # the stamp: the host on the first record of each audited batch (the creation time is the record's timestamp)
    stored = [r for rs in read_all(source, "orders").values() for r in rs]
    assert len(stored) == 158  # 157 audited (the refused one is not there) and one not
    (plain,) = [r for r in stored if r[3] == b"not audited"]
    assert dict(plain[4]).get(HOST_HEADER) is None
    assert {dict(r[4]).get(HOST_HEADER) for r in stored if r is not plain} <= {b"web-7", None}
    assert sum(1 for r in stored if dict(r[4]).get(HOST_HEADER) == b"web-7") >= 3
    published = [AuditRecord.decode(json_lines(line)[0]["value"].encode()) for line in
                 ok(cli("consume", AUDIT_TOPIC, "-b", source, "-e", "-o", "json")).splitlines()]  # fmt: skip
    assert {(r.tier, r.topic, r.window_start, r.host) for r in published} == {
        ("produced", "orders", T0 + k * WINDOW_MS, "web-7") for k in (0, 1, 3)}  # fmt: skip
    assert sum(r.count for r in published) == 158  # the refused one was sent, so it counts as produced

    r = cli("mirror", "start", "--from", source, "--to", target, "--audit", "--audit-window-ms", WINDOW_MS, "--exit")
    assert r.returncode == 0, r.stderr

    # the loaded tier: spark-load counts what each committed load holds (here, all but window 4: --until)
    load = subprocess.run([sys.executable, "-m", "kafkactl", "spark-load", "orders", "--to", str(tmp_path / "out"),
                           "-b", source, "--master", "local[1]", "--audit", "--audit-window-ms", str(WINDOW_MS),
                           "--until", f"@{T0 + 2 * WINDOW_MS}"], capture_output=True, text=True, timeout=300,
                          env=cli_env(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1"))  # fmt: skip
    assert load.returncode == 0, load.stderr
    assert "audit: published the loaded counts of 150 audited message(s)" in load.stderr

    r = cli("audit", "orders", "-b", source, "--mirror", target, "-o", "json")
    assert r.returncode == 1, r.stderr  # a settled window lost a message
    rows = {(row["window_start"] - T0) // WINDOW_MS: row for row in json_lines(r.stdout)}
    assert sorted(rows) == [0, 1, 3]
    tiers = ("produced", "stored", "mirrored", "mirror-stored", "loaded")
    assert [rows[0][t] for t in tiers] == [120] * 5 and rows[0]["status"] == "ok", rows[0]
    assert [rows[3][t] for t in tiers] == [7, 7, 7, 7, 0] and rows[3]["status"] == "ok (partly loaded)", rows[3]
    lost = rows[1]
    assert [lost[t] for t in tiers] == [31, 30, 30, 30, 30]
    assert lost["status"] == "lost" and lost["detail"] == "1 lost between produced and stored"

    text = cli("audit", "-b", source, "--mirror", target)
    assert text.returncode == 1
    assert "2026-01-01T00:00:10Z" in text.stdout and "1 lost between produced and stored" in text.stdout

    # the same disagreement in a window that ended less than --grace ago is messages still in flight
    r = cli("audit", "orders", "-b", source, "--grace", 10**10, "-o", "json")
    assert r.returncode == 0, r.stderr
    assert {row["status"] for row in json_lines(r.stdout)} == {"ok", "ok (partly loaded)", "in flight"}


def test_audit_of_an_unaudited_topic_is_one_line(two_clusters):
    source, _, _ = two_clusters
    ok(cli("produce", "plain", "-b", source, input_text="a\n"))
    produce(source, "orders", [T0])
    r = cli("audit", "plain", "-b", source)
    assert r.returncode == 1 and r.stderr.startswith("kafkactl: error: no audit counts of topic 'plain'"), r.stderr
