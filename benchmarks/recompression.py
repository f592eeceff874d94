"""What a topic's `compression.type` costs the broker: produce msg/s into a `producer` topic (batches kept as
sent) against topics that make the leader recompress every batch, with kcat (librdkafka) as the load.

    .venv/bin/python benchmarks/recompression.py [-b HOST:PORT] [--messages 1000000] [--size 200] [--repeat 3]

Without `-b`, a scratch ZooKeeper and broker are started in a temporary dir (as `kafkactl bench broker`).
Each case is one topic of one partition created with its `compression.type`, filled by one kcat run with
its `compression.codec`, acks=1; the median of `--repeat` runs is reported per case, with the ratio to the
first case (`producer` topic, uncompressed batches). A topic whose codec is not `producer` also leaves the
pipelined-run path (`LogConfig.checks_batches`), so `lz4 ← lz4` measures that path change alone, with
nothing recompressed. Reported, not asserted.
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

from broker.bench.broker import PRODUCE_PROPS, maybe_scratch, message_file, run_kcat
from broker.client.admin import Admin

#: (topic compression.type, the producer's compression.codec)
CASES = [("producer", "none"), ("producer", "lz4"), ("lz4", "lz4"), ("zstd", "none"), ("zstd", "lz4"),
         ("gzip", "none"), ("uncompressed", "lz4")]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-b", "--bootstrap-server", default=None)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kafkactl-bench-recompression-"))
    results = []
    try:
        data = message_file(tmp / "messages.txt", args.messages, args.size)
        with maybe_scratch(args.bootstrap_server, tmp) as servers, Admin(servers) as admin:
            for topic_codec, producer_codec in CASES:
                runs = []
                for i in range(args.repeat):
                    topic = f"bench-recompress-{topic_codec}-{producer_codec}-{os.getpid()}-{i}"
                    admin.create_topic(topic, 1, 1, {"compression.type": topic_codec})
                    argv = ["-P", "-b", servers, "-t", topic, "-p", "0", "-l", str(data)]
                    runs.append(run_kcat(argv, {**PRODUCE_PROPS, "compression.codec": producer_codec}))
                    end = admin.describe_topic(topic)[0].log_end_offset
                    assert end == args.messages, f"{topic}: {end} of {args.messages} messages"
                    admin.delete_topic(topic)
                seconds = statistics.median(runs)
                results.append({"topic_compression_type": topic_codec, "producer_codec": producer_codec,
                                "msgs_per_s": round(args.messages / seconds),
                                "msgs_per_s_each": [round(args.messages / s) for s in runs]})  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base = results[0]["msgs_per_s"]
    for r in results:
        r["vs_producer_uncompressed"] = round(r["msgs_per_s"] / base, 2)
    print(json.dumps({"bench": "recompression", "messages": args.messages, "message_bytes": args.size,
                      "repeat": args.repeat, "cases": results, "at": time.strftime("%Y-%m-%dT%H:%M:%S")},
                     indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
