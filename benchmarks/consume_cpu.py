"""CPU time per message of kafkactl's consumer, for `bench consume`'s workload.

    .venv/bin/python benchmarks/consume_cpu.py [-b 127.0.0.1:9092] [--messages 2000000] [--repeat 3]

Produces `--messages` 200-byte messages at batch 50 into a new one-partition topic of a running
broker, then reads them all back `--repeat` times with the consumer of `kafkactl bench consume`,
reporting for each read msg/s and the CPU seconds per message this process spent (getrusage, user
and system). On this noisy 2-core machine CPU per message moves less than msg/s between runs; compare
versions by alternating them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import time

from broker.bench.client import consume_messages, produce_messages
from broker.client.admin import Admin


def own_cpu() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-b", "--bootstrap-server", default="127.0.0.1:9092")
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    bootstrap, n = args.bootstrap_server, args.messages
    topic = f"consume-cpu-{os.getpid()}"
    with Admin(bootstrap) as admin:
        admin.create_topic(topic, 1, 1)
    try:
        asyncio.run(produce_messages(bootstrap, topic, n, 200, 50, 1, "none", lambda k: None))
        for _ in range(args.repeat):
            c0 = own_cpu()
            seconds = asyncio.run(consume_messages(bootstrap, topic, n, lambda k: None))
            c1 = own_cpu()
            print(json.dumps({"messages": n, "msgs_per_s": round(n / seconds),
                              "cpu_us_per_msg": round(1e6 * (sum(c1) - sum(c0)) / n, 3),
                              "user_us": round(1e6 * (c1[0] - c0[0]) / n, 3),
                              "system_us": round(1e6 * (c1[1] - c0[1]) / n, 3),
                              "at": time.strftime("%Y-%m-%dT%H:%M:%S")}), flush=True)  # fmt: skip
    finally:
        with Admin(bootstrap) as admin:
            admin.delete_topic(topic)


if __name__ == "__main__":
    main()
