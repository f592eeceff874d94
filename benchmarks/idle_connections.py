"""Memory per idle client connection of one broker, and whether a new client is still served among them.

    .venv/bin/python benchmarks/idle_connections.py [--connections 5000 10000] [--bare]

Starts a private ZooKeeper (`broker.zk.server.ZooKeeperServer`) and one broker process under a temporary
directory, warms it with a produce+consume round trip, then for each `--connections` N: opens N sockets to
it, each sending one ApiVersions request and reading its answer as a client does on connecting (`--bare`:
connect only), and leaves them idle. It reads the broker's VmRSS from /proc/<pid>/status before, with them
open (after a settle pause) and after they closed, and times a produce+consume round trip of a new client
(confluent-kafka) while they are open. This process raises its own open-file limit to the hard maximum, as
the broker does. JSON on stdout; KB per connection is (with - before) / N.
"""

from __future__ import annotations

import argparse
import json
import resource
import socket
import struct
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from private_broker import private_broker, rss_kb

TOPIC = "idle-connections"
SETTLE_S = 3.0  # the pause before a reading of VmRSS (the broker's loop catches up with accepts and closes)


def api_versions_request(correlation_id: int) -> bytes:
    client = b"idle"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client)) + client
    return struct.pack(">i", len(body)) + body


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        got = sock.recv(n - len(data))
        if not got:
            raise ConnectionError("closed by the broker")
        data += got
    return data


def open_idle(port: int, n: int, bare: bool) -> list[socket.socket]:
    socks = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        if not bare:
            s.sendall(api_versions_request(i))
            size = struct.unpack(">i", recv_exactly(s, 4))[0]
            recv_exactly(s, size)
        socks.append(s)
    return socks


def round_trip(bootstrap: str, tag: str) -> float:
    """Seconds for a new producer and a new consumer to write and read back one message."""
    start = time.monotonic()
    value = f"{tag}-{time.time_ns()}".encode()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    producer.produce(TOPIC, value)
    if producer.flush(30) != 0:
        raise RuntimeError("produce not acknowledged within 30 s")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"idle-{tag}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([TOPIC])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None and msg.value() == value:
                return time.monotonic() - start
        raise RuntimeError("the message was not read back within 60 s")
    finally:
        consumer.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--connections", type=int, nargs="+", default=[5000, 10000])
    ap.add_argument("--bare", action="store_true", help="connect only (no ApiVersions request)")
    args = ap.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with private_broker() as (pid, port, _):
        bootstrap = f"127.0.0.1:{port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        del admin
        round_trip(bootstrap, "warm")
        results = []
        for n in args.connections:
            time.sleep(SETTLE_S)
            before = rss_kb(pid)
            t0 = time.monotonic()
            socks = open_idle(port, n, args.bare)
            opened_s = time.monotonic() - t0
            time.sleep(SETTLE_S)
            with_open = rss_kb(pid)
            rt = round_trip(bootstrap, f"n{n}")
            for s in socks:
                s.close()
            time.sleep(SETTLE_S)
            after = rss_kb(pid)
            results.append({"connections": n, "rss_before_kb": before, "rss_with_kb": with_open, "rss_after_kb": after,
                            "kb_per_connection": round((with_open - before) / n, 2),
                            "held_after_close_kb": after - before, "open_s": round(opened_s, 2),
                            "round_trip_with_open_s": round(rt, 3)})  # fmt: skip
        print(json.dumps({"bare": args.bare, "results": results}, indent=2))


if __name__ == "__main__":
    main()
