"""`kafkactl mirror` between two real clusters (two ZooKeeper chroots, real broker processes): every message,
key, header, timestamp and offset of the source comes out of the target, once, also when the mirror is
killed with kill -9 at random moments while the source keeps growing.

CI kills the mirror KAFKACTL_MIRROR_KILLS times (default 6); the full soak is
`KAFKACTL_MIRROR_KILLS=40 scripts/test.sh -m chaos tests/integration/test_mirror.py`.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from broker.client.consumer import AsyncConsumer
from broker.client.producer import AsyncProducer
from broker.mirror.stamp import HEADER_KEY
from broker.protocol.api import ApiKey
from tests.integration.helpers import cli, cli_env, connect, error_line, json_lines, ok, wait_until

KILLS = int(os.environ.get("KAFKACTL_MIRROR_KILLS", "6"))
SEED = int(os.environ.get("KAFKACTL_CHAOS_SEED", "20261126"))


def read_all(bootstrap: str, topic: str) -> dict[int, list[tuple]]:
    """Every record of `topic`, per partition: (offset, timestamp, key, value, headers without the stamp)."""

    async def main() -> dict[int, list[tuple]]:
        async with AsyncConsumer(bootstrap, auto_offset_reset="earliest") as c:
            parts = await c.partitions_for(topic)
            tps = [(topic, p) for p in parts]
            await c.assign(tps)
            ends = await c.end_offsets(tps)
            out: dict[int, list[tuple]] = {p: [] for p in parts}
            deadline = time.monotonic() + 60
            while any((c.position(tp) or 0) < ends[tp] for tp in tps):
                assert time.monotonic() < deadline, "reading took over 60s"
                for (_, p), recs in (await c.getmany(timeout_ms=200, max_records=100_000)).items():
                    out[p] += [(r.offset, r.timestamp, r.key, r.value,
                                tuple((k, v) for k, v in r.headers if k != HEADER_KEY)) for r in recs]  # fmt: skip
            return out

    return asyncio.run(main())


def stamps(bootstrap: str, topic: str) -> int:
    """How many records of `topic` carry a mirror stamp (one per target batch)."""

    async def main() -> int:
        async with AsyncConsumer(bootstrap, auto_offset_reset="earliest") as c:
            tps = [(topic, p) for p in await c.partitions_for(topic)]
            await c.assign(tps)
            ends = await c.end_offsets(tps)
            n = 0
            while any((c.position(tp) or 0) < ends[tp] for tp in tps):
                for recs in (await c.getmany(timeout_ms=200, max_records=100_000)).values():
                    n += sum(1 for r in recs for k, _ in r.headers if k == HEADER_KEY)
            return n

    return asyncio.run(main())


def produce(bootstrap: str, topic: str, count: int, *, start: int = 0, compression: str = "none") -> None:
    """`count` messages with keys, headers and explicit timestamps (one in 7 with a null key, one in 11 a
    tombstone)."""

    async def main() -> None:
        async with AsyncProducer(bootstrap, acks="all", compression_type=compression, linger_ms=2) as p:
            for i in range(start, start + count):
                await p.send(topic, None if i % 11 == 0 else b"value-%d" % i,
                             key=None if i % 7 == 0 else b"key-%d" % (i % 50), partition=None,
                             headers=[("n", str(i).encode()), ("empty", None)] if i % 3 else [],
                             timestamp=1_700_000_000_000 + i)  # fmt: skip
            await p.flush()

    asyncio.run(main())


def test_mirror_copies_selected_topics_exactly_and_says_where_it_is(two_clusters):
    source, target, _ = two_clusters
    ok(cli("topic", "create", "orders", "-p", 3, "--config", "retention.ms=86400000", "-b", source))
    ok(cli("topic", "create", "zipped", "-p", 2, "-b", source))
    ok(cli("topic", "create", "skip.me", "-p", 1, "-b", source))
    ok(cli("topic", "create", "renamed", "-p", 1, "-b", source))
    produce(source, "orders", 3000)
    produce(source, "zipped", 1000, compression="gzip")
    produce(source, "skip.me", 10)
    produce(source, "renamed", 10)

    r = cli("mirror", "start", "--from", source, "--to", target, "--exclude", r"skip\..*", "--rename", "renamed:copied",
            "-r", 2, "--exit")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "mirror: created orders (3 partitions, retention.ms=86400000)" in r.stderr
    assert "mirrored 4,010 messages of 6 partition(s)" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr

    topics = {t["topic"]: t for t in json_lines(ok(cli("topic", "list", "-o", "json", "-b", target)))}
    assert {"orders", "zipped", "copied"} <= set(topics) and "skip.me" not in topics and "renamed" not in topics
    described = ok(cli("topic", "describe", "orders", "-b", target))
    assert "retention.ms=86400000" in described
    for src, dst in (("orders", "orders"), ("zipped", "zipped"), ("renamed", "copied")):
        want, got = read_all(source, src), read_all(target, dst)
        assert sorted(got) == sorted(want)
        for p in want:
            assert len(got[p]) == len(want[p]) and got[p] == want[p], f"{dst} partition {p} differs"
    assert stamps(target, "orders") >= 3  # each partition's batches are stamped

    rows = json_lines(ok(cli("mirror", "status", "--from", source, "--to", target, "--exclude", r"skip\..*",
                             "--rename", "renamed:copied", "-o", "json")))  # fmt: skip
    assert len(rows) == 6 and all(r["lag"] == 0 and r["mirrored"] == r["source_end"] for r in rows), rows

    # more at the source: a second run carries on where the first stopped
    produce(source, "orders", 500, start=3000)
    ok(cli("mirror", "start", "--from", source, "--to", target, "--include", "orders", "--exit"))
    assert read_all(target, "orders") == read_all(source, "orders")

    # a target partition written by someone else is refused, not appended to
    ok(cli("produce", "orders", "-p", 0, "-b", target, input_text="stranger\n"))
    r = cli("mirror", "status", "--from", source, "--to", target, "--include", "orders", "-o", "json")
    assert r.returncode == 1 and [row["foreign"] for row in json_lines(r.stdout)] == [True, False, False]
    r = cli("mirror", "start", "--from", source, "--to", target, "--include", "orders", "--exit")
    assert r.returncode == 1
    error_line(r, "orders partition 0 holds messages the mirror did not write")


def test_bad_selections_are_one_line_and_exit_2(two_clusters):
    source, target, _ = two_clusters
    cases = [(["--include", "("], "bad topic expression"), (["--rename", "a"], "SOURCE:TARGET"),
             (["--rename", "a:b/c"], "characters other than"), (["--start", "middle"], "--start")]  # fmt: skip
    for args, words in cases:
        r = cli("mirror", "start", "--from", source, "--to", target, *args)
        assert r.returncode == 2, (args, r.stderr)
        error_line(r, words)


class Writer(threading.Thread):
    """Keeps producing numbered messages to the source until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.stop = threading.Event()
        self.sent = 0

    def run(self) -> None:
        async def main() -> None:
            async with AsyncProducer(self.bootstrap, acks="all", linger_ms=5) as p:
                while not self.stop.is_set():
                    for _ in range(500):
                        await p.send(self.topic, b"m%09d" % self.sent + b"." * 150, key=b"k%d" % (self.sent % 97),
                                     headers=[("seq", str(self.sent).encode())])  # fmt: skip
                        self.sent += 1
                    await asyncio.sleep(0.02)
                await p.flush()

        asyncio.run(main())


@pytest.mark.chaos
def test_a_mirror_killed_at_random_moments_loses_and_repeats_nothing(two_clusters, tmp_path: Path):
    source, target, brokers = two_clusters
    leader, follower = brokers[1], brokers[2]
    rng = random.Random(SEED)
    ok(cli("topic", "create", "events", "-p", 4, "-b", source))
    # broker 11 leads every target partition and 12 follows: pausing 12 holds batches past the high watermark
    # while the mirror's metadata, produce and tail reads all still go to 11
    with connect(leader.bootstrap) as conn:
        answer = conn.request(ApiKey.CREATE_TOPICS, {"topics": [{
            "name": "events", "num_partitions": -1, "replication_factor": -1, "configs": [],
            "assignments": [{"partition_index": p, "broker_ids": [11, 12]} for p in range(4)]}],
            "timeout_ms": 30000, "validate_only": False})  # fmt: skip
    assert answer["topics"][0]["error_code"] == 0, answer
    writer = Writer(source, "events")
    writer.start()
    log = tmp_path / "mirror.log"
    argv = [sys.executable, "-m", "kafkactl", "mirror", "start", "--from", source, "--to", leader.bootstrap,
            "--report-interval", "1"]  # fmt: skip
    stalled = False  # the follower is paused: the mirror started next reads a target tail short of what is there
    try:
        for kill in range(KILLS):
            said = log.stat().st_size if log.exists() else 0
            with open(log, "ab") as out:
                proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=cli_env())
            if stalled:
                time.sleep(rng.uniform(0.5, 1.5))
                os.kill(follower.proc.pid, signal.SIGCONT)
                stalled = False
            time.sleep(rng.uniform(0.5, 3.0) if kill else 4.0)
            # Every other kill, a target broker is paused first: its partners' batches wait uncommitted, past
            # the high watermark, when the mirror dies, and the next mirror starts before they commit. It must
            # resend them as duplicates, not store them twice.
            if kill % 2 == 1 and kill < KILLS - 1:
                os.kill(follower.proc.pid, signal.SIGSTOP)
                stalled = True
                time.sleep(rng.uniform(0.3, 1.0))
            sig = signal.SIGTERM if kill % 4 == 2 else signal.SIGKILL
            if sig == signal.SIGTERM:  # (a SIGTERM before its first report may come before its handler is set)
                wait_until(lambda: log.stat().st_size > said, 60, "the mirror's first report")  # noqa: B023
            proc.send_signal(sig)
            assert proc.wait(60) == (0 if sig == signal.SIGTERM else -9), log.read_text()[-2000:]
    finally:
        if stalled:
            os.kill(follower.proc.pid, signal.SIGCONT)
        writer.stop.set()
        writer.join(60)
    assert writer.sent > 0
    r = cli("mirror", "start", "--from", source, "--to", target, "--exit", timeout=300)
    assert r.returncode == 0, r.stderr
    want, got = read_all(source, "events"), read_all(target, "events")
    assert sum(map(len, want.values())) == writer.sent
    for p in want:
        assert len(got[p]) == len(want[p]), f"partition {p}: {len(got[p])} mirrored of {len(want[p])}"
        assert got[p] == want[p], f"partition {p} differs"
    assert "Traceback" not in log.read_text()


@pytest.mark.chaos
def test_the_mirror_rides_out_a_target_broker_killed_and_picks_up_new_topics(two_clusters, tmp_path: Path):
    """A target leader killed with kill -9 mid-run: the mirror's produce fails, it recovers each lane from the
    target's tail on the new leader, and the copy is still exact. A topic created at the source meanwhile
    is found and mirrored too."""
    source, target, brokers = two_clusters
    ok(cli("topic", "create", "events", "-p", 4, "-b", source))
    writer = Writer(source, "events")
    writer.start()
    log = tmp_path / "mirror.log"
    argv = [sys.executable, "-m", "kafkactl", "mirror", "start", "--from", source, "--to", target, "-r", "2",
            "--refresh-interval", "1", "--report-interval", "1"]  # fmt: skip
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=cli_env())
    try:
        time.sleep(3)
        brokers[1].kill()  # broker 11: kill -9
        ok(cli("topic", "create", "late", "-p", 2, "-b", source))
        produce(source, "late", 300)
        time.sleep(8)  # its session ends, broker 12 leads everything
        brokers[1].start()
        time.sleep(3)
    finally:
        writer.stop.set()
        writer.join(60)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(90)
    assert code == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert "created late (2 partitions)" in text and "Traceback" not in text, text[-3000:]
    r = cli("mirror", "start", "--from", source, "--to", target, "--exit", timeout=300)
    assert r.returncode == 0, r.stderr
    for topic in ("events", "late"):
        want, got = read_all(source, topic), read_all(target, topic)
        for p in want:
            assert got[p] == want[p], f"{topic} partition {p}: {len(got[p])} mirrored of {len(want[p])}"
