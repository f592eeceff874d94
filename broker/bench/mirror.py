"""`kafkactl bench mirror`: how fast `kafkactl mirror` copies a topic from one cluster to another.

A scratch ZooKeeper holds two clusters (chroots `/source` and `/target`), one broker process each.
kcat fills the source topic with 200-byte messages, spread evenly over its partitions, in batches of at
most `batch.size` bytes (16 KiB, the Java producer's default: the mirror's work is per batch); then each run
mirrors the whole topic into a new target topic (`--prefix rN.`) with `mirror start --exit`'s engine,
acks=all, from its start until the target acknowledged the last message. Each run is checked: the
target holds as many messages as the source.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from broker.bench.broker import PRODUCE_PROPS, bench_broker, kcat_path, message_file, run_kcat
from broker.client.admin import Admin
from broker.daemon import free_port
from broker.errors import KafkactlError
from broker.mirror.engine import Mirror, MirrorConfig
from broker.mirror.topics import Selection
from broker.protocol.messages.fetch import LATEST
from broker.zk import client as zkclient
from broker.zk.server import ZooKeeperServer


@contextmanager
def scratch_clusters(workdir: Path) -> Iterator[tuple[str, str]]:
    """A real ZooKeeper and two one-broker clusters in `workdir`; yields their bootstrap addresses."""
    with ExitStack() as stack:
        zk = stack.enter_context(ZooKeeperServer(workdir / "zookeeper", free_port()))
        with zkclient.session(zk.connect_string) as session:
            session.ensure_path("/source")
            session.ensure_path("/target")
        source = stack.enter_context(bench_broker(workdir, zk.connect_string + "/source", "source"))
        target = stack.enter_context(bench_broker(workdir, zk.connect_string + "/target", "target"))
        yield source, target


def run(messages: int = 2_000_000, size: int = 200, partitions: int = 4, repeat: int = 3, batch_bytes: int = 16384,
        workdir: Path | None = None, advance: Callable[[int], None] = lambda n: None) -> dict:  # fmt: skip
    """Mirror throughput between two local clusters: the median of `repeat` runs."""
    kcat_path()
    tmp = Path(tempfile.mkdtemp(prefix="kafkactl-bench-mirror-", dir=workdir))
    topic = "bench-mirror"
    try:
        with scratch_clusters(tmp) as (source, target):
            with Admin(source) as admin:
                admin.create_topic(topic, partitions, 1)
                for p in range(partitions):
                    share = messages // partitions + (p < messages % partitions)
                    lines = message_file(tmp / f"p{p}.txt", share, size)
                    run_kcat(
                        ["-P", "-b", source, "-t", topic, "-p", str(p), "-l", str(lines)],
                        {**PRODUCE_PROPS, "batch.size": str(batch_bytes)},
                    )
                    lines.unlink()
            seconds = []
            for i in range(repeat):
                cfg = MirrorConfig(source, target, Selection.parse(topic, prefix=f"r{i}."), exit_at_end=True,
                                   report_s=3600)  # fmt: skip
                t0 = time.perf_counter()
                summary = asyncio.run(_mirror(cfg))
                seconds.append(time.perf_counter() - t0)
                with Admin(target) as admin:
                    tps = [(f"r{i}.{topic}", p) for p in range(partitions)]
                    copied = sum(admin.list_offsets(tps, LATEST).values())
                if copied != messages or summary.mirrored != messages:
                    raise KafkactlError(f"run {i}: the target holds {copied} messages of {messages}")
                advance(1)
        s = statistics.median(seconds)
        return {
            "bench": "mirror", "messages": messages, "message_bytes": size, "partitions": partitions,
            "source_batch_bytes": batch_bytes, "acks": "all", "runs": repeat,
            "seconds": {"min": min(seconds), "median": s, "max": max(seconds)},
            "msgs_per_s": messages / s, "mb_per_s": messages * size / s / 1e6,
        }  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def _mirror(cfg: MirrorConfig):  # noqa: ANN202
    return await Mirror(cfg, lambda line: None).run(asyncio.Event())
