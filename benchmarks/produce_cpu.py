"""CPU time per message of kafkactl's producer and of the broker, for `bench produce`'s workload.

    .venv/bin/python benchmarks/produce_cpu.py --broker-pid PID [-b 127.0.0.1:9092] [--batch 1] [--messages 200000]

Runs the producer of `kafkactl bench produce` (one partition, 200-byte messages, `--batch` per
request) against a running broker and reports, besides msg/s, the CPU seconds per message spent by
this process (getrusage) and by the broker (`/proc/PID/stat`). On a 2-core machine the larger of the
two bounds the throughput; it says which side to profile.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import time

from broker.bench.client import _produce
from broker.client.admin import Admin


def broker_cpu(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--broker-pid", type=int, required=True)
    ap.add_argument("-b", "--bootstrap-server", default="127.0.0.1:9092")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--messages", type=int, default=200_000)
    args = ap.parse_args()
    topic = f"produce-cpu-{os.getpid()}"
    with Admin(args.bootstrap_server) as admin:
        admin.create_topic(topic, 1, 1)
    try:
        b0, c0 = broker_cpu(args.broker_pid), own_cpu()
        seconds = asyncio.run(_produce(args.bootstrap_server, topic, args.messages, 200, args.batch, 1, "none",
                                       lambda n: None))  # fmt: skip
        b1, c1 = broker_cpu(args.broker_pid), own_cpu()
    finally:
        with Admin(args.bootstrap_server) as admin:
            admin.delete_topic(topic)
    n = args.messages
    print(json.dumps({"batch": args.batch, "messages": n, "msgs_per_s": round(n / seconds),
                      "client_us_per_msg": round(1e6 * (c1 - c0) / n, 2),
                      "broker_us_per_msg": round(1e6 * (b1 - b0) / n, 2),
                      "cpu_bound_msgs_per_s": round(n / max(c1 - c0, b1 - b0, 1e-9)),
                      "at": time.strftime("%Y-%m-%dT%H:%M:%S")}))  # fmt: skip


if __name__ == "__main__":
    main()
