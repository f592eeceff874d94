"""`kafkactl bench broker`: the broker alone under kcat's load, as in the paper's experiment.

kcat (librdkafka, C) is the load generator so the figures measure the broker, not a Python client:
`kcat -P -l FILE` produces 200-byte lines at acks=1 into one partition, and `kcat -C -o beginning
-e` reads 1 KiB messages back to /dev/null. The bench starts a real ZooKeeper and one broker process
in a scratch dir (or uses `--bootstrap-server`), and times each kcat run from start to exit.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from broker.client.admin import Admin
from broker.daemon import free_port, kafkactl_command, stop_process, wait_port
from broker.errors import KafkactlError
from broker.records.crc import BACKEND
from broker.zk.server import ZooKeeperServer

#: librdkafka settings that keep kcat from being the bottleneck: big queues and socket buffers
PRODUCE_PROPS = {
    "acks": "1", "linger.ms": "5", "queue.buffering.max.messages": "2000000",
    "queue.buffering.max.kbytes": "2000000", "socket.send.buffer.bytes": "4194304",
}  # fmt: skip
FETCH_PROPS = {"fetch.message.max.bytes": "8388608", "socket.receive.buffer.bytes": "4194304"}


def kcat_path() -> str:
    path = shutil.which("kcat") or shutil.which("kafkacat")
    if path is None:
        raise KafkactlError("kcat is not installed (apt-get install kcat): the broker bench uses it as load generator")
    return path


def message_file(path: Path, count: int, size: int) -> Path:
    """`count` lines of `size` bytes each (newline included in neither: kcat strips the delimiter)."""
    line = (os.urandom(size).hex()[:size]).encode() + b"\n"
    chunk = line * 10000
    with open(path, "wb") as f:
        for _ in range(count // 10000):
            f.write(chunk)
        f.write(line * (count % 10000))
    return path


@contextmanager
def bench_broker(workdir: Path, zookeeper: str, name: str = "", *, port: int | None = None,
                 overrides: dict[str, str] | None = None) -> Iterator[str]:  # fmt: skip
    """One broker process (id 1) registered in `zookeeper`, its files in `workdir` (suffixed `-name` when
    given), its first listener on `port` (else a free one), with config `overrides`; yields its bootstrap
    address and stops it at the end."""
    suffix = f"-{name}" if name else ""
    port = port or free_port()
    env = {**os.environ, "KAFKACTL_HOME": str(workdir / f"home{suffix}")}
    argv = kafkactl_command("broker", "start", "--broker-id", "1", "--port", str(port), "--log-dirs",
                            str(workdir / f"logs{suffix}"), "-z", zookeeper, "--no-embedded-zookeeper")  # fmt: skip
    for key, value in (overrides or {}).items():
        argv += ["--override", f"{key}={value}"]
    out_path = workdir / f"broker{suffix}.out"
    with open(out_path, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        if not wait_port("127.0.0.1", port, 30) or proc.poll() is not None:
            raise KafkactlError(f"the bench's {name or 'scratch'} broker did not start: {out_path.read_text()[-500:]}")
        yield f"127.0.0.1:{port}"
    finally:
        stop_process(proc.pid, 30)


@contextmanager
def scratch_broker(workdir: Path) -> Iterator[str]:
    """A real ZooKeeper and one broker process in `workdir`; yields the bootstrap address."""
    with ZooKeeperServer(workdir / "zookeeper", free_port()) as zk, bench_broker(workdir, zk.connect_string) as b:
        yield b


def run_kcat(args: list[str], props: dict[str, str], *, stdout=subprocess.DEVNULL) -> float:
    argv = [kcat_path(), *args]
    for k, v in props.items():
        argv += ["-X", f"{k}={v}"]
    t0 = time.perf_counter()
    done = subprocess.run(argv, stdout=stdout, stderr=subprocess.PIPE, timeout=600)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise KafkactlError(f"kcat failed ({done.returncode}): {done.stderr.decode(errors='replace').strip()[-300:]}")
    return elapsed


def run(messages: int = 5_000_000, size: int = 200, fetch_messages: int = 1_000_000, fetch_size: int = 1024,
        repeat: int = 3, bootstrap: str | None = None, workdir: Path | None = None,
        advance: Callable[[int], None] = lambda n: None) -> dict:  # fmt: skip
    """Produce and fetch throughput of one broker; the median of `repeat` runs of each."""
    kcat_path()
    tmp = Path(tempfile.mkdtemp(prefix="kafkactl-bench-broker-", dir=workdir))
    try:
        small = message_file(tmp / "small.txt", messages, size)
        big = message_file(tmp / "big.txt", fetch_messages, fetch_size)
        with maybe_scratch(bootstrap, tmp) as servers, Admin(servers) as admin:
            produce_s = []
            for i in range(repeat):
                topic = f"bench-produce-{os.getpid()}-{i}"
                admin.create_topic(topic, 1, 1)
                argv = ["-P", "-b", servers, "-t", topic, "-p", "0", "-l", str(small)]
                produce_s.append(run_kcat(argv, PRODUCE_PROPS))
                end = admin.describe_topic(topic)[0].log_end_offset
                if end != messages:
                    raise KafkactlError(f"produced {messages} messages but the log ends at offset {end}")
                admin.delete_topic(topic)
                advance(1)
            topic = f"bench-fetch-{os.getpid()}"
            admin.create_topic(topic, 1, 1)
            run_kcat(["-P", "-b", servers, "-t", topic, "-p", "0", "-l", str(big)], PRODUCE_PROPS)
            part = admin.describe_topic(topic)[0]
            log_bytes = part.size or 0
            fetch_s = []
            for _ in range(repeat):
                fetch_s.append(run_kcat(["-C", "-b", servers, "-t", topic, "-o", "beginning", "-e", "-q"], FETCH_PROPS))
                advance(1)
            admin.delete_topic(topic)
        p = statistics.median(produce_s)
        f = statistics.median(fetch_s)
        return {
            "bench": "broker", "crc_backend": BACKEND, "load_generator": "kcat",
            "produce_messages": messages, "produce_message_bytes": size, "acks": 1,
            "produce_seconds": round(p, 3), "produce_msgs_per_s": round(messages / p),
            "produce_mb_per_s": round(messages * size / p / 1e6, 1),
            "produce_msgs_per_s_each": [round(messages / s) for s in produce_s],
            "fetch_messages": fetch_messages, "fetch_message_bytes": fetch_size, "fetch_log_bytes": log_bytes,
            "fetch_seconds": round(f, 3), "fetch_mb_per_s": round(log_bytes / f / 1e6, 1),
            "fetch_payload_mb_per_s": round(fetch_messages * fetch_size / f / 1e6, 1),
            "fetch_mb_per_s_each": [round(log_bytes / s / 1e6, 1) for s in fetch_s],
            "kcat_produce_props": PRODUCE_PROPS, "kcat_fetch_props": FETCH_PROPS,
        }  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def maybe_scratch(bootstrap: str | None, tmp: Path) -> Iterator[str]:
    """The bootstrap servers to bench: `bootstrap` when given, else a scratch broker's under `tmp`."""
    if bootstrap:
        yield bootstrap
    else:
        with scratch_broker(tmp) as servers:
            yield servers
