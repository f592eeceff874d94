"""`kafkactl bench tls`: what TLS and SASL cost the broker, plaintext against SSL and SASL_SSL in one run.

One scratch broker listens on PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512) at once, with throwaway
certificates (`broker.security.certs`). For each listener, kcat produces `--messages` 200-byte lines at
acks=1 into a fresh one-partition topic and reads them all back, as `bench broker` does; the median of
`--repeat` runs of each is reported with its ratio to plaintext. Over TLS the broker encrypts each fetch
answer in user space instead of handing the segment file to `sendfile`, so the fetch figure shows what
that costs.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

from broker.bench.broker import FETCH_PROPS, PRODUCE_PROPS, bench_broker, kcat_path, message_file, run_kcat
from broker.client.admin import Admin
from broker.daemon import free_port
from broker.errors import KafkactlError
from broker.security import credentials
from broker.security.certs import make_pki
from broker.security.scram import make_credential
from broker.zk import client as zkclient
from broker.zk.server import ZooKeeperServer

USER, PASSWORD = "bench", "bench-secret"
LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL")


def _kcat_props(listener: str, ca: Path) -> dict[str, str]:
    """kcat's settings for one listener."""
    if listener == "PLAINTEXT":
        return {}
    props = {"security.protocol": listener.lower(), "ssl.ca.location": str(ca)}
    if listener == "SASL_SSL":
        props.update({"sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": USER, "sasl.password": PASSWORD})
    return props


def run(messages: int = 1_000_000, size: int = 200, repeat: int = 3, workdir: Path | None = None,
        advance: Callable[[int], None] = lambda n: None) -> dict:  # fmt: skip
    """Produce and fetch throughput per listener; the median of `repeat` runs of each."""
    kcat_path()
    tmp = Path(tempfile.mkdtemp(prefix="kafkactl-bench-tls-", dir=workdir))
    try:
        pki = make_pki(tmp / "pki")
        lines = message_file(tmp / "messages.txt", messages, size)
        ports = {name: free_port() for name in LISTENERS}
        overrides = {
            "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.keystore("broker")),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca),
        }  # fmt: skip
        out: dict = {"bench": "tls", "load_generator": "kcat", "messages": messages, "message_bytes": size,
                     "acks": 1, "repeat": repeat}  # fmt: skip
        with ZooKeeperServer(tmp / "zookeeper", free_port()) as zk:
            with zkclient.session(zk.connect_string) as session:
                credentials.write_user(session, USER, {"SCRAM-SHA-512": make_credential("SCRAM-SHA-512", PASSWORD)})
            with bench_broker(tmp, zk.connect_string, port=ports["PLAINTEXT"], overrides=overrides) as servers, \
                    Admin(servers) as admin:  # fmt: skip
                for n, listener in enumerate(LISTENERS):
                    bootstrap = f"127.0.0.1:{ports[listener]}"
                    props = _kcat_props(listener, pki.ca)
                    produce_s, fetch_s = [], []
                    for i in range(repeat):
                        topic = f"bench-tls-{listener.lower()}-{i}"
                        admin.create_topic(topic, 1, 1)
                        argv = ["-P", "-b", bootstrap, "-t", topic, "-p", "0", "-l", str(lines)]
                        produce_s.append(run_kcat(argv, {**PRODUCE_PROPS, **props}))
                        end = admin.describe_topic(topic)[0].log_end_offset
                        if end != messages:
                            raise KafkactlError(f"{listener}: produced {messages} messages but the log ends at {end}")
                        argv = ["-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q"]
                        fetch_s.append(run_kcat(argv, {**FETCH_PROPS, **props}))
                        admin.delete_topic(topic)
                        advance(1)
                    key = listener.lower()
                    out[f"{key}_produce_msgs_per_s"] = round(messages / statistics.median(produce_s))
                    out[f"{key}_fetch_msgs_per_s"] = round(messages / statistics.median(fetch_s))
                    if n:
                        for what in ("produce", "fetch"):
                            ratio = out[f"{key}_{what}_msgs_per_s"] / out[f"plaintext_{what}_msgs_per_s"]
                            out[f"{key}_{what}_vs_plaintext"] = round(ratio, 2)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
