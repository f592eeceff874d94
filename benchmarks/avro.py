"""Avro in `kafkactl produce` and `kafkactl consume`: messages per second with and without it.

    .venv/bin/python benchmarks/avro.py [--messages 200000] [--repeat 3]

Starts a scratch ZooKeeper, one broker and a schema registry (real processes), writes `--messages` JSON
lines of a user record (about 80 bytes), and times from start to exit:

- `produce --value-schema user.avsc` (each line parsed and encoded as Avro) against `produce` of the same
  lines as text;
- `consume -e --value-decoder avro` (each value decoded and printed as JSON) against `consume -e` of the
  text topic.

Reports the median of `--repeat` runs of each, in msg/s, and the codec alone (encode and decode in one
process, no I/O). The command-line runs include the interpreter's start (about 0.3 s).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from broker.daemon import free_port, stop_process, wait_port
from broker.schema_registry import wire
from broker.zk.server import ZooKeeperServer

SCHEMA = {"type": "record", "name": "User", "namespace": "bench",
          "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"},
                     {"name": "email", "type": ["null", "string"], "default": None},
                     {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []}]}  # fmt: skip
K = [sys.executable, "-m", "kafkactl"]


def timed(argv: list[str], stdin: Path | None, env: dict) -> float:
    t0 = time.perf_counter()
    with open(stdin or os.devnull, "rb") as f:
        done = subprocess.run(argv, stdin=f, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    elapsed = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(f"{' '.join(argv[2:5])} failed: {done.stderr.decode()[-400:]}")
    return elapsed


def codec_rates(lines: list[bytes]) -> tuple[float, float]:
    parsed = wire.parse(json.dumps(SCHEMA))
    t0 = time.perf_counter()
    values = [wire.encode(1, parsed, json.loads(line)) for line in lines]
    enc = len(lines) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for v in values:
        wire.to_json(wire.decode(v, parsed))
    dec = len(values) / (time.perf_counter() - t0)
    return enc, dec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    n = args.messages
    tmp = Path(tempfile.mkdtemp(prefix="kafkactl-bench-avro-"))
    data = tmp / "users.jsonl"
    lines = [json.dumps({"name": f"user-{i}", "age": i % 90, "email": f"u{i}@example.com", "tags": ["a", "b"]},
                        separators=(",", ":")).encode() for i in range(n)]  # fmt: skip
    data.write_bytes(b"\n".join(lines) + b"\n")
    (tmp / "user.avsc").write_text(json.dumps(SCHEMA))
    env = {**os.environ, "KAFKACTL_HOME": str(tmp / "home")}
    procs = []
    with ZooKeeperServer(tmp / "zk", free_port()) as zk:
        try:
            bport, rport = free_port(), free_port()
            procs.append(subprocess.Popen([*K, "broker", "start", "--port", str(bport), "--log-dirs", str(tmp / "logs"),
                                           "-z", zk.connect_string, "--no-embedded-zookeeper"], env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
            procs.append(subprocess.Popen([*K, "schema-registry", "start", "-z", zk.connect_string, "--port",
                                           str(rport)], env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))  # fmt: skip
            assert wait_port("127.0.0.1", bport, 30) and wait_port("127.0.0.1", rport, 30)
            time.sleep(1)
            b, r = f"127.0.0.1:{bport}", f"http://127.0.0.1:{rport}"
            runs: dict[str, list[float]] = {"produce_text": [], "produce_avro": [], "consume_text": [],
                                            "consume_avro": []}  # fmt: skip
            for i in range(args.repeat):
                runs["produce_text"].append(timed([*K, "produce", f"text{i}", "-b", b], data, env))
                avro = ["--value-schema", str(tmp / "user.avsc"), "--schema-registry", r]
                runs["produce_avro"].append(timed([*K, "produce", f"avro{i}", "-b", b, *avro], data, env))
                runs["consume_text"].append(timed([*K, "consume", f"text{i}", "-b", b, "-e"], None, env))
                runs["consume_avro"].append(timed([*K, "consume", f"avro{i}", "-b", b, "-e", "--value-decoder",
                                                   "avro", "--schema-registry", r], None, env))  # fmt: skip
            enc, dec = codec_rates(lines[: min(n, 100_000)])
            out = {"messages": n, "runs": args.repeat, "json_bytes_per_message": round(data.stat().st_size / n, 1)}
            out.update({f"{k}_msgs_per_s": round(n / statistics.median(v)) for k, v in runs.items()})
            out.update({"codec_encode_msgs_per_s": round(enc), "codec_decode_msgs_per_s": round(dec)})
            print(json.dumps(out, indent=2))
        finally:
            for p in procs:
                stop_process(p.pid, 30)


if __name__ == "__main__":
    main()
