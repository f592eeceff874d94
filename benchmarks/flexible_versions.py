"""What the flexible (KIP-482) versions cost on the hot paths, in one process: Fetch v11 against v12, and
Produce v8 (the hand-written codec) against v9 (the schemas).

    .venv/bin/python benchmarks/flexible_versions.py [--api fetch|produce] [--partitions 1,8,64] [--rounds 20000]
    farm-bench -n 9 --vs '.venv/bin/python benchmarks/flexible_versions.py --only 11 --partitions 64' \
        -- .venv/bin/python benchmarks/flexible_versions.py --only 12 --partitions 64

For each partition count, times the broker's per-request protocol work of a fetch: decoding the request
and encoding the answer (record sets stay separate parts, as the broker sends them with sendfile, so
their size does not matter here) — at v11, the last non-flexible version, and at v12, the first flexible
one. Reports the median of `--repeat` runs in microseconds per request and the v12/v11 ratio; with
`--only V`, runs that version alone once (for farm-bench, whose paired runs resist a noisy machine). The record
bytes themselves are never touched by either version, so this is the whole difference between them.

Produce v3-8 is read and answered by hand-written codecs (and pipelined runs by the C codec of
`broker/protocol/_produce_run.c`); v9, flexible only, goes through the schemas: `--api produce` times
a one-partition request (a producer's usual one) both ways.
"""

from __future__ import annotations

import argparse
import statistics
import time

from broker.protocol.api import APIS, ApiKey
from broker.protocol.framing import encode_request, encode_response, read_header_tags, read_request_header
from broker.protocol.primitives import Reader

FETCH = APIS[ApiKey.FETCH]
PRODUCE = APIS[ApiKey.PRODUCE]
RECORDS = bytes(64 * 1024)  # a record set large enough to travel as its own part


def fetch_request(partitions: int) -> dict:
    return {
        "replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 52428800, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": "bench", "partitions": [
            {"partition": p, "current_leader_epoch": 0, "fetch_offset": 123456, "log_start_offset": -1,
             "partition_max_bytes": 1048576} for p in range(partitions)]}],
    }  # fmt: skip


def fetch_answer(partitions: int) -> dict:
    return {
        "throttle_time_ms": 0, "error_code": 0, "session_id": 0,
        "topics": [{"topic": "bench", "partitions": [
            {"partition_index": p, "error_code": 0, "high_watermark": 999999, "last_stable_offset": 999999,
             "log_start_offset": 0, "aborted_transactions": [], "records": RECORDS} for p in range(partitions)]}],
    }  # fmt: skip


def per_request_us(version: int, partitions: int, rounds: int) -> float:
    frame = b"".join(bytes(p) for p in encode_request(1, version, 7, "bench", FETCH.request, fetch_request(partitions)))
    body = memoryview(frame)[4:]
    answer = fetch_answer(partitions)
    start = time.perf_counter()
    for _ in range(rounds):
        r = Reader(body)
        header = read_request_header(r)
        if FETCH.request.flexible(version):
            read_header_tags(r)
        FETCH.request.read(r, version)
        encode_response(header.correlation_id, FETCH.response, answer, version)
    return (time.perf_counter() - start) / rounds * 1e6


def produce_request(partitions: int) -> dict:
    return {"transactional_id": None, "acks": 1, "timeout_ms": 30000, "topics": [
        {"name": "bench", "partitions": [{"index": p, "records": RECORDS} for p in range(partitions)]}]}  # fmt: skip


def produce_answer(partitions: int) -> dict:
    return {"throttle_time_ms": 0, "topics": [{"name": "bench", "partitions": [
        {"index": p, "error_code": 0, "base_offset": 123456, "log_append_time_ms": -1, "log_start_offset": 0,
         "record_errors": [], "error_message": None} for p in range(partitions)]}]}  # fmt: skip


def produce_per_request_us(version: int, partitions: int, rounds: int) -> float:
    from broker.protocol.messages.produce import encode_produce_response, read_produce_request

    request = produce_request(partitions)
    frame = b"".join(bytes(p) for p in encode_request(0, version, 7, "bench", PRODUCE.request, request))
    body = memoryview(frame)[4:]
    answer = produce_answer(partitions)
    start = time.perf_counter()
    for _ in range(rounds):
        r = Reader(body)
        header = read_request_header(r)
        if PRODUCE.request.flexible(version):
            read_header_tags(r)
        read_produce_request(r, version)
        encode_produce_response(header.correlation_id, answer, version)
    return (time.perf_counter() - start) / rounds * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", default="1,8,64")
    ap.add_argument("--rounds", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--api", choices=("fetch", "produce"), default="fetch")
    ap.add_argument("--only", type=int, help="time this version alone, once (fetch: 11 or 12; produce: 8 or 9)")
    args = ap.parse_args()
    timer, (old, new) = (per_request_us, (11, 12)) if args.api == "fetch" else (produce_per_request_us, (8, 9))
    if args.only:
        for n in (int(x) for x in args.partitions.split(",")):
            print(f"v{args.only}, {n} partitions: {timer(args.only, n, max(args.rounds // n, 200)):.1f} µs")
        return
    print(f"{args.api}: {'partitions':>10} {f'v{old} µs':>9} {f'v{new} µs':>9} {f'v{new}/v{old}':>8}")
    for n in (int(x) for x in args.partitions.split(",")):
        rounds = max(args.rounds // n, 200)
        runs = {v: statistics.median(timer(v, n, rounds) for _ in range(args.repeat)) for v in (old, new)}
        print(f"{args.api}: {n:>10} {runs[old]:>9.1f} {runs[new]:>9.1f} {runs[new] / runs[old]:>8.2f}")


if __name__ == "__main__":
    main()
