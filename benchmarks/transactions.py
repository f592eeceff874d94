"""What transactions cost: transactional against idempotent produce, and read_committed against
read_uncommitted consume, in the same run, with confluent-kafka (librdkafka) as the client.

    .venv/bin/python benchmarks/transactions.py [-b HOST:PORT] [--messages 200000] [--size 200]
        [--txn-messages 1000] [--repeat 3]

Without `-b`, a scratch ZooKeeper and broker are started in a temporary dir (as `kafkactl bench broker`).
Produce: one topic of one partition per run, acks=all; `idempotent` is enable.idempotence with one flush at
the end, `transactional` commits a transaction every `--txn-messages` messages (the issue's case: 1,000
messages of 200 bytes). Consume: the transactional topic read whole by one consumer with each isolation
level (read_committed also has the control batches to drop and waits for the last stable offset). The
median of `--repeat` runs is reported, with the ratios the issue targets (transactional ≥ 0.5 of
idempotent, read_committed ≥ 0.9 of read_uncommitted). Reported, not asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer

from broker.bench.broker import maybe_scratch
from broker.client.admin import Admin


def produce(servers: str, topic: str, n: int, size: int, txn_messages: int, transactional: bool) -> float:
    """Seconds to produce `n` messages (transactions of `txn_messages` when `transactional`)."""
    conf = {"bootstrap.servers": servers, "enable.idempotence": True, "linger.ms": 5, "acks": "all"}
    if transactional:
        conf["transactional.id"] = f"bench-{topic}"
    p = Producer(conf)
    value = b"x" * size
    if transactional:
        p.init_transactions(30)
    start = time.perf_counter()
    sent = 0
    while sent < n:
        if transactional:
            p.begin_transaction()
        for _ in range(min(txn_messages, n - sent)):
            while True:
                try:
                    p.produce(topic, value, partition=0)
                    break
                except BufferError:
                    p.poll(0.01)
            sent += 1
        if transactional:
            p.commit_transaction(30)
        else:
            p.poll(0)
    p.flush(60)
    return time.perf_counter() - start


def consume(servers: str, topic: str, expect: int, isolation: str) -> float:
    """Seconds to read `expect` messages of `topic` from its start with `isolation`."""
    c = Consumer({"bootstrap.servers": servers, "group.id": f"bench-{isolation}-{os.getpid()}-{time.time()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": isolation,
                  "fetch.max.bytes": 52428800, "enable.partition.eof": False})  # fmt: skip
    c.subscribe([topic])
    got = 0
    start = None
    deadline = time.monotonic() + 120
    while got < expect and time.monotonic() < deadline:
        batch = c.consume(10000, 1.0)
        if batch and start is None:
            start = time.perf_counter()
        got += sum(1 for m in batch if m.error() is None)
    took = time.perf_counter() - (start or time.perf_counter())
    c.close()
    assert got == expect, f"{topic} ({isolation}): {got} of {expect} messages"
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-b", "--bootstrap-server", default=None)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--txn-messages", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kafkactl-bench-txn-"))
    runs: dict[str, list[float]] = {"idempotent": [], "transactional": [], "read_uncommitted": [],
                                    "read_committed": []}  # fmt: skip
    try:
        with maybe_scratch(args.bootstrap_server, tmp) as servers, Admin(servers) as admin:
            for i in range(args.repeat):
                for mode in ("idempotent", "transactional"):
                    topic = f"bench-txn-{mode}-{os.getpid()}-{i}"
                    admin.create_topic(topic, 1, 1)
                    secs = produce(servers, topic, args.messages, args.size, args.txn_messages,
                                   mode == "transactional")  # fmt: skip
                    runs[mode].append(args.messages / secs)
                    if mode == "transactional":
                        for isolation in ("read_uncommitted", "read_committed"):
                            runs[isolation].append(args.messages / consume(servers, topic, args.messages, isolation))
                    admin.delete_topic(topic)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: round(statistics.median(v)) for k, v in runs.items()}
    print(json.dumps({"bench": "transactions", "messages": args.messages, "message_bytes": args.size,
                      "txn_messages": args.txn_messages, "repeat": args.repeat,
                      "msgs_per_s": med, "msgs_per_s_each": {k: [round(x) for x in v] for k, v in runs.items()},
                      "transactional_vs_idempotent": round(med["transactional"] / med["idempotent"], 2),
                      "read_committed_vs_uncommitted": round(med["read_committed"] / med["read_uncommitted"], 2),
                      "at": time.strftime("%Y-%m-%dT%H:%M:%S")}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
