"""Helpers for the producer / consumer tests: the CLI with stdin bytes, topics, a producer writing in the
background, whole-topic reads through the Python client, and the batches a broker wrote to its segment files."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.client.admin import Admin
from broker.client.consumer import AsyncConsumer, ConsumerRecord
from broker.client.producer import AsyncProducer, Delivery
from broker.records.batch import BatchHeader, Record, decode_header, iter_records
from tests.cli_runner import run_cli
from tests.integration.helpers import cli_env

# --- the command line ------------------------------------------------------------------------------


@dataclass
class Run:
    returncode: int
    out: bytes
    err: str

    @property
    def stdout(self) -> str:
        return self.out.decode("utf-8", "replace")

    def __str__(self) -> str:
        return f"exit {self.returncode}\n--- stdout\n{self.stdout}--- stderr\n{self.err}"


def kcli(*args: object, input: bytes = b"", timeout: float = 60.0) -> Run:
    """`kafkactl ARGS` with `input` on stdin; stdout kept as bytes."""
    p = run_cli(list(args), cli_env(), input=input, text=False, timeout=timeout)
    return Run(p.returncode, p.stdout, p.stderr.decode("utf-8", "replace"))


def succeeded(r: Run) -> Run:
    assert r.returncode == 0, str(r)
    assert "Traceback" not in r.err, str(r)
    assert "error" not in r.err.lower(), str(r)
    return r


def one_error(r: Run, *needles: str, code: int | None = None, allow_summary: bool = False) -> str:
    """The single `kafkactl: error: ...` line of a failed run (no traceback); it contains every needle.

    With `allow_summary` a `produced ...` / `consumed ...` summary line may precede it; nothing else may be there.
    """
    assert r.returncode != 0, f"expected a failure\n{r}"
    if code is not None:
        assert r.returncode == code, str(r)
    assert "Traceback" not in r.err + r.stdout, str(r)
    lines = [ln for ln in r.err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("kafkactl: error: ")]
    assert len(errors) == 1, f"expected exactly one error line\n{r}"
    others = [ln for ln in lines if ln not in errors]
    if allow_summary:
        assert all(re.match(r"(produced|consumed) \d+ message\(s\)", ln) for ln in others), str(r)
        assert len(others) <= 1, str(r)
    else:
        assert not others, f"expected nothing but the error line on stderr\n{r}"
    for needle in needles:
        assert needle in errors[0], f"{needle!r} not in {errors[0]!r}"
    return errors[0]


#: (the rate is left out for under a second or a couple of messages; what the producer waited for ends it: "; ...")
_PRODUCED = re.compile(
    r"^produced (\d+) message\(s\), (\d+) bytes to (\S+) in [\d.]+s(?: \([^)]*\))?(?:: (.*?))?(?:; .*)?$", re.M
)


def produced_summary(err: str) -> tuple[int, dict[int, tuple[int, int]]]:
    """(messages, {partition: (first, last offset)}) of produce's summary line on stderr ((-1, -1) with acks=0)."""
    m = _PRODUCED.search(err)
    assert m, f"no produce summary in {err!r}"
    spans = {}
    for part in (m.group(4) or "").split(", "):
        if part:
            sm = re.fullmatch(r"p(\d+) (\d+)\.\.(\d+)", part) or re.fullmatch(r"p(\d+) \(acks=0: no offsets\)", part)
            assert sm, part
            spans[int(sm.group(1))] = (int(sm.group(2)), int(sm.group(3))) if sm.lastindex == 3 else (-1, -1)
    return int(m.group(1)), spans


def consumed_summary(err: str) -> int:
    m = re.search(r"^consumed (\d+) message\(s\)", err, re.M)
    assert m, f"no consume summary in {err!r}"
    return int(m.group(1))


# --- topics and reads ------------------------------------------------------------------------------


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> str:
    with Admin(bootstrap) as admin:
        admin.create_topic(name, partitions, 1, config)
        deadline = time.monotonic() + 15
        while True:  # until every partition has a leader
            md = admin.cluster.metadata([name])
            (t,) = [t for t in md["topics"] if t["name"] == name]
            if len(t["partitions"]) == partitions and all(p["leader_id"] >= 0 for p in t["partitions"]):
                return name
            assert time.monotonic() < deadline, f"topic {name} has no leaders: {t}"
            time.sleep(0.05)


class AckedProducer(threading.Thread):
    """Sends numbered messages (`m00000000`, ..., each its own key) with acks=all, `per_tick` of them every
    `tick_s`, until `stop` is set; keeps (partition, offset, value) of each acknowledged one in `acked` and the
    errors of the others in `failed`. For tests that kill brokers while a producer writes."""

    def __init__(self, bootstrap: str, topic: str, *, per_tick: int = 10, tick_s: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.per_tick = per_tick
        self.tick_s = tick_s
        self.acked: list[tuple[int, int, bytes]] = []
        self.failed: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        producer = await AsyncProducer(self.bootstrap, acks="all", linger_ms=5, delivery_timeout_ms=60000,
                                       request_timeout_ms=10000).start()  # fmt: skip
        pending: collections.deque = collections.deque()
        n = 0
        try:
            while not self.stop.is_set():
                for _ in range(self.per_tick):
                    value = b"m%08d" % n
                    n += 1
                    pending.append((value, await producer.send(self.topic, value, key=value)))
                await asyncio.sleep(self.tick_s)
                while pending and pending[0][1].done():
                    self._take(*pending.popleft())
            await producer.flush()
            for value, delivery in pending:
                with contextlib.suppress(Exception):
                    await delivery
                self._take(value, delivery)
        finally:
            await producer.close()

    def _take(self, value: bytes, delivery: Delivery) -> None:
        error = delivery.exception()
        if error is None:
            md = delivery.result()
            self.acked.append((md.partition, md.offset, value))
        else:
            self.failed.append(str(error))


async def read_all_async(bootstrap: str, topic: str, timeout: float = 20.0, **cfg) -> list[ConsumerRecord]:
    """Every record of every partition of `topic` up to the end offsets at the start, by (partition, offset)."""
    async with AsyncConsumer(bootstrap, fetch_max_wait_ms=100, **cfg) as c:
        parts = await c.partitions_for(topic)
        tps = [(topic, p) for p in parts]
        await c.assign(tps)
        await c.seek_to_beginning()
        ends = await c.end_offsets(tps)
        starts = await c.beginning_offsets(tps)
        out: list[ConsumerRecord] = []
        nxt = dict(starts)  # the offset after the last record handed out, per partition
        deadline = time.monotonic() + timeout
        while any(nxt[tp] < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"read {len(out)} records; next {nxt}, ends {ends}"
            for tp, recs in (await c.getmany(timeout_ms=200)).items():
                out.extend(recs)
                nxt[tp] = recs[-1].offset + 1
        return sorted(out, key=lambda r: (r.partition, r.offset))


def kafka_python_knows(consumer: Any, topic: str) -> set[int]:
    """Block until a subscribed kafka-python consumer's metadata lists `topic`'s partitions; call it before the
    first poll joins the group. Otherwise kafka-python 3.0.12's group leader may assign before it knows them,
    rejoin when they arrive, and lose that join's outcome if a poll times out meanwhile (it never looks at the
    finished join again): the member then owns nothing until the next rebalance."""
    return consumer.partitions_for_topic(topic)


def read_all(bootstrap: str, topic: str, timeout: float = 20.0, **cfg) -> list[ConsumerRecord]:
    return asyncio.run(read_all_async(bootstrap, topic, timeout, **cfg))


# --- segment files ---------------------------------------------------------------------------------


def disk_batches(log_dir: Path, topic: str, partition: int) -> list[tuple[BatchHeader, list[Record]]]:
    """Every whole batch in the partition's segment files, in order, with its records."""
    out = []
    for path in sorted((Path(log_dir) / f"{topic}-{partition}").glob("*.log")):
        buf = path.read_bytes()
        pos = 0
        while pos + 61 <= len(buf):
            h = decode_header(buf, pos)
            if h.length <= 0 or pos + h.size > len(buf):
                break
            out.append((h, list(iter_records(buf, pos, h))))
            pos += h.size
    return out
