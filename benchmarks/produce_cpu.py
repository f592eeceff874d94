"""CPU time per message of kafkactl's producer and of the broker, for `bench produce`'s workload.

    .venv/bin/python benchmarks/produce_cpu.py --broker-pid PID [-b 127.0.0.1:9092] [--batch 1] [--messages 200000]

Runs the producer of `kafkactl bench produce` (one partition, 200-byte messages, `--batch` per
request) against a running broker and reports, besides msg/s, the CPU seconds per message spent by
this process (getrusage) and by the broker (`/proc/PID/stat`), in all and split into user and system
(kernel: the sockets, the log writes) time. On a 2-core machine the larger of the two bounds the
throughput; it says which side to profile.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import time

from broker.bench.client import produce_messages
from broker.client.admin import Admin


def broker_cpu(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of process `pid`."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def own_cpu() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


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
        seconds = asyncio.run(produce_messages(args.bootstrap_server, topic, args.messages, 200, args.batch, 1,
                                               "none", lambda n: None))  # fmt: skip
        b1, c1 = broker_cpu(args.broker_pid), own_cpu()
    finally:
        with Admin(args.bootstrap_server) as admin:
            admin.delete_topic(topic)
    n = args.messages

    def us(a: float, b: float) -> float:
        return round(1e6 * (b - a) / n, 2)

    client, broker = sum(c1) - sum(c0), sum(b1) - sum(b0)
    print(json.dumps({"batch": args.batch, "messages": n, "msgs_per_s": round(n / seconds),
                      "client_us_per_msg": us(sum(c0), sum(c1)), "broker_us_per_msg": us(sum(b0), sum(b1)),
                      "client_user_us": us(c0[0], c1[0]), "client_system_us": us(c0[1], c1[1]),
                      "broker_user_us": us(b0[0], b1[0]), "broker_system_us": us(b0[1], b1[1]),
                      "cpu_bound_msgs_per_s": round(n / max(client, broker, 1e-9)),
                      "at": time.strftime("%Y-%m-%dT%H:%M:%S")}))  # fmt: skip


if __name__ == "__main__":
    main()
