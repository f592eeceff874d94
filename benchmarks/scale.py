"""Scale: a 3-broker local cluster with many partitions, phase by phase, each measured from the user's side.

    .venv/bin/python benchmarks/scale.py [--partitions 3000] [--topics N] [--rf 3] [--session-ms 18000]
                                         [--phases create,produce,...] [--json-only]

Starts a private cluster (`kafkactl cluster up -n 3` under a temporary KAFKACTL_HOME; the brokers run with
`zookeeper.session.timeout.ms` = --session-ms), creates --topics topics holding --partitions partitions in all
(`-r --rf`), and runs the phases in this order (the targets are issue 28's, most of them stated at 10,000
partitions, and are compared as they are whatever --partitions is):

    create      first CreateTopics until every live broker's Metadata shows each partition led, ISR full (<= 20 s)
    produce     one acks=all message to every partition with confluent-kafka, idempotent, 2 rounds; the same
                without idempotence: the slower idempotent round (<= 3 s and <= 3x the slower plain round)
    metadata    all-topics Metadata, 10 times (confluent-kafka list_topics; ours as an extra): p50 (<= 1 s)
    offsets     --groups groups each commit an offset of every partition, 2 rounds, OffsetCommit outside a
                generation: partition offsets/s until ZooKeeper holds them all (the last offset block's
                modification time; read back untimed) (>= 50,000/s; benchmarks/offset_commits.py: 1,000 groups)
    txn         one transactional producer, one partition, 10 records per transaction, ~10 s (>= 200/s)
    shutdown    SIGTERM to a non-controller (a controlled shutdown): until its partitions are led elsewhere
                (<= 3 s); the exit is an extra figure
    restart     it starts again (`cluster up`): until every ISR is full (<= 15 s); registered is an extra
    kill        kill -9 of a non-controller: until all it led is led by a live broker (<= session + 3 s); then
                its restart until every ISR is full (<= 30 s)
    controller  kill -9 of the controller (ZooKeeper /controller): until every partition is led (<= session + 5 s)
    rss         each broker's VmRSS after create and now (<= 400 MB)
    conns       --conns idle TCP connections to one broker: RSS delta per connection (<= 10 KB); a new client
                is still served; the RSS after closing them is an extra

Output: one JSON line per phase on stdout, {"phase", "value", "unit", "target", "met", ...}, with each broker's
CPU seconds in the phase ("cpu_s"); then (unless --json-only) a table on stderr. A wait that passes
--timeout reports met false with what it last saw. The cluster is always torn down (every pid it started,
then its directory). Figures are reported, never asserted; the waits poll Metadata about 5 times a second,
so a time is late by up to one poll (one all-topics Metadata of each live broker, itself slow at 10k).

How long it takes, on the idle 2-core development machine: about 4 minutes at 3,000 partitions, and 5 at
10,000 without the offsets, txn and conns phases (`--topics 10 --timeout 400`; the 10,000-partition offsets
phase alone takes minutes while ZooKeeper's writes lag). Don't run two at once. Progress goes to stderr.
Leave a minute between runs on ext4: the teardown deletes tens of thousands of files, and for about half a
minute after that ext4 skips the recently freed inodes one by one when it allocates new ones, which makes the
next run's create phase up to three times slower (`perf` shows the time in the kernel's `recently_deleted`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from broker.bench.proc import cpu_seconds, percentile, rss_mb
from broker.client.admin import Admin
from broker.client.cluster import Cluster
from broker.client.group_admin import _commit_offsets
from broker.daemon import is_alive
from broker.zk import batch, consumers, paths, registry
from broker.zk import client as zkclient

NAME = "scale"
PREFIX = "scale-p"
TXN_TOPIC = "scale-txn"
PHASES = ["create", "produce", "metadata", "offsets", "txn", "shutdown", "restart", "kill", "controller", "rss",
          "conns"]  # fmt: skip
POLL_S = 0.2

TP = tuple[str, int]
State = tuple[int, tuple[int, ...], tuple[int, ...]]  # leader, isr (sorted), replicas (preferred first)


def states(address: str) -> dict[TP, State]:
    """{(topic, partition): (leader, isr, replicas)} of the benchmark's topics in `address`'s Metadata."""
    with Cluster(address, client_id="scale-bench", timeout=15) as c:
        md = c.metadata(None)
    return {(t["name"], p["partition_index"]): (p["leader_id"], tuple(sorted(p["isr_nodes"])),
                                                 tuple(p["replica_nodes"]))
            for t in md["topics"] if t["name"].startswith(PREFIX) for p in t["partitions"]}  # fmt: skip


def lacking(seen: dict[TP, State], want: list[TP], ok: Callable[[State], bool]) -> list[TP]:
    """Those of `want` missing from `seen` or whose state is not `ok`."""
    return [tp for tp in want if tp not in seen or not ok(seen[tp])]


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.session_s = args.session_ms / 1000
        self.overrides = {"zookeeper.session.timeout.ms": str(args.session_ms)}
        self.results: list[dict[str, Any]] = []
        self.tps: list[TP] = []
        self.status: dict[str, Any] = {}
        self.ports: dict[int, int] = {}
        self.dead: set[int] = set()
        self.started_pids: set[int] = set()
        self.rss_after_create: dict[int, float | None] = {}

    # --- the cluster -------------------------------------------------------------------------------

    def up(self) -> dict[str, Any]:
        from broker import local_cluster  # (reads KAFKACTL_HOME)

        self.status = local_cluster.up(NAME, 3, overrides=self.overrides)
        self.ports = {b["id"]: b["port"] for b in self.status["brokers"]}
        self.started_pids |= {b["pid"] for b in self.status["brokers"] if b["pid"]}
        self.started_pids |= {p for p in (self.status["zookeeper"]["pid"], self.status["zookeeper"]["java_pid"]) if p}
        self.dead = {b["id"] for b in self.status["brokers"] if not b["alive"]}
        return self.status

    def pids(self) -> dict[int, int]:
        return {b["id"]: b["pid"] for b in self.status["brokers"] if b["pid"] and b["id"] not in self.dead}

    def cpu_pids(self) -> dict[int | str, int]:
        """The live brokers' pids by id, and ZooKeeper's JVM as "zk"."""
        zk = self.status["zookeeper"]["java_pid"]
        return {**self.pids(), **({"zk": zk} if zk else {})}

    def live(self) -> list[str]:
        return [f"127.0.0.1:{port}" for i, port in sorted(self.ports.items()) if i not in self.dead]

    def controller(self) -> int:
        with zkclient.session(self.status["zookeeper"]["address"]) as zk:
            return registry.controller_id(zk)

    def non_controller(self) -> int:
        c = self.controller()
        return max(i for i in self.ports if i != c and i not in self.dead)

    def teardown(self) -> None:
        from broker import local_cluster

        with contextlib.suppress(Exception):
            local_cluster.down(NAME, purge=not self.args.keep, timeout=30)
        for pid in self.started_pids:  # whatever the clean stop left, if it is still ours (pids are reused)
            with contextlib.suppress(OSError):
                cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
                if is_alive(pid) and (b"kafkactl" in cmdline or b"zookeeper" in cmdline):
                    os.kill(pid, signal.SIGKILL)

    # --- waiting and reporting ---------------------------------------------------------------------

    def wait(self, want: list[TP], ok: Callable[[State], bool], since: float) -> tuple[float | None, list[TP]]:
        """Seconds from `since` until every live broker's Metadata shows each of `want` `ok` (None after
        --timeout), and what it saw lacking last (all of it when a broker did not answer)."""
        left = want
        while time.monotonic() - since < self.args.timeout:
            left = []
            for address in self.live():
                try:
                    left = lacking(states(address), want, ok)
                except Exception:
                    left = want
                if left:
                    break
            if not left:
                return time.monotonic() - since, []
            time.sleep(POLL_S)
        return None, left

    def full(self, state: State) -> bool:
        leader, isr, replicas = state
        return leader >= 0 and leader not in self.dead and isr == tuple(sorted(replicas)) and len(isr) == self.args.rf

    def led(self, state: State) -> bool:
        return state[0] >= 0 and state[0] not in self.dead

    def preferred(self, state: State) -> bool:
        return bool(state[2]) and state[0] == state[2][0]

    def balance(self) -> float | None:
        """Untimed preparation of a kill: a preferred leader election of every partition (a restarted broker
        leads nothing until then), waited for in Metadata; its seconds (None: not within --timeout)."""
        t0 = time.monotonic()
        with zkclient.session(self.status["zookeeper"]["address"]) as zk:
            while not registry.request_preferred_election(zk, self.tps):  # (one pending: the controller takes it)
                if time.monotonic() - t0 > self.args.timeout:
                    return None
                time.sleep(POLL_S)
        took, _ = self.wait(self.tps, self.preferred, t0)
        return took

    def exited(self, pid: int) -> None:
        """Wait (up to 30 s) until a killed process is gone: until then it holds its port, which `up` would
        replace by another."""
        deadline = time.monotonic() + 30
        while is_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def note(self, text: str) -> None:
        """Progress on stderr (not with --json-only)."""
        if not self.args.json_only:
            print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    def emit(self, phase: str, value: float | None, unit: str, target: str, met: bool, **extra: Any) -> None:
        line = {"phase": phase, "value": None if value is None else round(value, 3), "unit": unit, "target": target,
                "met": bool(met), "partitions": self.args.partitions, **extra}  # fmt: skip
        self.results.append(line)  # (printed by `run`, with the phase's CPU seconds)

    # --- phases ------------------------------------------------------------------------------------

    def create(self) -> None:
        per = [self.args.partitions // self.args.topics] * self.args.topics
        for i in range(self.args.partitions % self.args.topics):
            per[i] += 1
        names = [f"{PREFIX}{i}" for i in range(self.args.topics)]
        self.tps = [(t, p) for t, n in zip(names, per, strict=True) for p in range(n)]
        t0 = time.monotonic()
        with Admin(self.live()[0], timeout=120) as admin:
            for name, n in zip(names, per, strict=True):
                admin.create_topic(name, n, self.args.rf)
        created = time.monotonic() - t0
        took, left = self.wait(self.tps, self.full, t0)
        self.rss_after_create = {i: rss_mb(pid) for i, pid in self.pids().items()}
        self.emit("create", took, "s", "<= 20 s at 10k", took is not None and took <= 20,
                  create_calls_s=round(created, 3), topics=self.args.topics, not_full=len(left),
                  example=left[:3])  # fmt: skip

    def produce(self) -> None:
        from confluent_kafka import Producer

        def rounds(idempotent: bool) -> tuple[list[float], int]:
            conf = {"bootstrap.servers": ",".join(self.live()), "acks": "all", "linger.ms": 5,
                    "enable.idempotence": idempotent, "message.timeout.ms": int(self.args.timeout * 1000),
                    "queue.buffering.max.messages": max(100000, 2 * len(self.tps))}  # fmt: skip
            producer = Producer(conf)
            failed = 0

            def delivered(err: Any, _msg: Any) -> None:
                nonlocal failed
                failed += err is not None

            md = producer.list_topics(timeout=30)  # warm-up: a producer id, and a connection to every leader
            first = {p.leader: (name, p.id) for name, t in md.topics.items() if name.startswith(PREFIX)
                     for p in t.partitions.values()}  # fmt: skip
            for t, p in first.values():
                producer.produce(t, b"warm-up", partition=p, on_delivery=delivered)
            producer.flush(self.args.timeout)
            times = []
            for r in range(2):
                self.note(f"produce: {'idempotent' if idempotent else 'plain'} round {r + 1}")
                t0 = time.monotonic()
                for i, (t, p) in enumerate(self.tps):
                    producer.produce(t, b"x" * 100, partition=p, on_delivery=delivered)
                    if i % 1000 == 0:
                        producer.poll(0)
                left = producer.flush(self.args.timeout)
                times.append(time.monotonic() - t0)
                failed += left
            return times, failed

        idem, idem_failed = rounds(True)
        plain, plain_failed = rounds(False)
        worst, base = max(idem), max(plain)
        met = worst <= 3 and worst <= 3 * base and not idem_failed
        self.emit("produce", worst, "s/round", "<= 3 s at 10k and <= 3x non-idempotent", met,
                  idempotent_rounds_s=[round(x, 3) for x in idem], plain_rounds_s=[round(x, 3) for x in plain],
                  ratio=round(worst / base, 2) if base else None, failed=idem_failed + plain_failed)  # fmt: skip

    def metadata(self) -> None:
        from confluent_kafka.admin import AdminClient

        client = AdminClient({"bootstrap.servers": self.live()[0]})
        times = []
        for _ in range(10):
            t0 = time.monotonic()
            md = client.list_topics(timeout=30)
            times.append(time.monotonic() - t0)
        ours = []
        for _ in range(10):
            t0 = time.monotonic()
            states(self.live()[0])
            ours.append(time.monotonic() - t0)
        p50 = percentile(times, 0.5)
        self.emit("metadata", p50, "s", "p50 <= 1 s at 100k", p50 <= 1, max_s=round(max(times), 3),
                  partitions_seen=sum(len(t.partitions) for n, t in md.topics.items() if n.startswith(PREFIX)),
                  ours_p50_s=round(percentile(ours, 0.5), 3), ours_max_s=round(max(ours), 3))  # fmt: skip

    def offsets(self) -> None:
        groups = [f"scale-g{i}" for i in range(self.args.groups)]
        errors: list[str] = []

        def commit_all(group: str) -> None:
            try:
                with Admin(self.live()[0], timeout=120) as admin:
                    for r in range(2):
                        _commit_offsets(admin, group, {tp: r + 1 for tp in self.tps})
            except Exception as exc:
                errors.append(f"{group}: {exc}")

        t0, wall0 = time.monotonic(), time.time()
        threads = [threading.Thread(target=commit_all, args=(g,)) for g in groups]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        answered = time.monotonic() - t0
        # every block of every group read back (untimed), until each holds the second round's offsets; the
        # time is the last of their modification times (ZooKeeper's clock, this machine's) less the start
        todo = {
            path: set(part) for g in groups for path, part in consumers.by_block(g, dict.fromkeys(self.tps)).items()
        }
        written = None
        last_ms = 0
        pending: dict[str, int] = {}
        with zkclient.session(self.status["zookeeper"]["address"]) as zk:
            while time.monotonic() - t0 < self.args.timeout:
                names = list(todo)
                for path, node in zip(names, batch.get_many(zk, names), strict=True):
                    entries = paths.parse_offset_block(node[0]) if node is not None else {}
                    todo[path] = {p for p in todo[path] if p not in entries or entries[p].stored.offset != 2}
                    if not todo[path]:
                        del todo[path]
                        last_ms = max(last_ms, node[1].mtime)
                if not todo:
                    written = last_ms / 1000 - wall0
                    break
                time.sleep(POLL_S)
        pending = {"partitions_not_written": sum(map(len, todo.values()))} if todo else {}
        count = 2 * len(groups) * len(self.tps)
        rate = count / written if written else None
        self.emit("offsets", rate, "offsets/s", ">= 50,000/s", bool(rate and rate >= 50000 and not errors),
                  groups=len(groups), commits=count, answered_s=round(answered, 3),
                  answered_per_s=round(count / answered), written_s=None if written is None else round(written, 3),
                  **pending, errors=errors[:3])  # fmt: skip

    def txn(self) -> None:
        from confluent_kafka import Producer

        with Admin(self.live()[0], timeout=60) as admin:
            admin.create_topic(TXN_TOPIC, 1, self.args.rf)
        producer = Producer({"bootstrap.servers": ",".join(self.live()), "transactional.id": "scale-txn",
                             "linger.ms": 0})  # fmt: skip
        producer.init_transactions(60)
        done = 0
        error = None
        t0 = time.monotonic()
        try:
            while time.monotonic() - t0 < 10:
                producer.begin_transaction()
                for _ in range(10):
                    producer.produce(TXN_TOPIC, b"x" * 100, partition=0)
                producer.commit_transaction(60)
                done += 1
        except Exception as exc:
            error = str(exc)
        took = time.monotonic() - t0
        rate = done / took
        self.emit("txn", rate, "txn/s", ">= 200/s", rate >= 200 and error is None, transactions=done, error=error)

    def shutdown(self) -> None:
        victim = self.non_controller()
        pid = self.pids()[victim]
        before = {tp: s for tp, s in states(self.live()[0]).items() if s[0] == victim}
        exited: list[float] = []
        t0 = time.monotonic()
        os.kill(pid, signal.SIGTERM)

        def watch() -> None:
            while is_alive(pid) and time.monotonic() - t0 < self.args.timeout:
                time.sleep(0.02)
            if not is_alive(pid):
                exited.append(time.monotonic() - t0)

        watcher = threading.Thread(target=watch)
        watcher.start()
        self.dead.add(victim)
        took, left = self.wait(list(before), self.led, t0)
        watcher.join()
        exit_s = exited[0] if exited else None
        self.emit("shutdown", took, "s", "<= 3 s", took is not None and took <= 3, broker=victim,
                  led_before=len(before), exit_s=None if exit_s is None else round(exit_s, 3),
                  exit_met=exit_s is not None and exit_s <= 3, not_moved=len(left))  # fmt: skip

    def restart(self, phase: str = "restart", target_s: float = 15) -> None:
        t0 = time.monotonic()
        error = None
        try:
            self.up()
        except Exception as exc:
            error = str(exc)
        registered = time.monotonic() - t0
        took, left = self.wait(self.tps, self.full, t0)
        self.emit(phase, took, "s", f"ISR full <= {target_s:g} s", took is not None and took <= target_s and not error,
                  registered_s=round(registered, 3), not_full=len(left), error=error)  # fmt: skip

    def kill(self) -> None:
        balanced = self.balance()
        victim = self.non_controller()
        before = [tp for tp, s in states(self.live()[0]).items() if s[0] == victim]
        pid = self.pids()[victim]
        t0 = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        self.dead.add(victim)
        took, left = self.wait(before, self.led, t0)
        limit = self.session_s + 3
        self.emit("kill", took, "s", f"<= session + 3 s ({limit:g} s)", took is not None and took <= limit,
                  broker=victim, led_before=len(before), not_moved=len(left),
                  preferred_election_s=balanced and round(balanced, 3))  # fmt: skip
        self.exited(pid)
        self.restart("kill.restart", 30)

    def controller_kill(self) -> None:
        balanced = self.balance()
        victim = self.controller()
        led = sum(s[0] == victim for s in states(self.live()[0]).values())
        pid = self.pids()[victim]
        t0 = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        self.dead.add(victim)
        took, left = self.wait(self.tps, self.led, t0)
        limit = self.session_s + 5
        self.emit("controller", took, "s", f"<= session + 5 s ({limit:g} s)", took is not None and took <= limit,
                  broker=victim, led_before=led, unled=len(left), new_controller=self.controller(),
                  preferred_election_s=balanced and round(balanced, 3))  # fmt: skip
        self.exited(pid)
        self.restart("controller.restart", 30)

    def rss(self) -> None:
        now = {i: rss_mb(pid) for i, pid in self.pids().items()}
        worst = max((v for v in [*now.values(), *self.rss_after_create.values()] if v is not None), default=None)
        self.emit("rss", worst, "MB", "<= 400 MB", worst is not None and worst <= 400,
                  after_create_mb={i: v and round(v) for i, v in self.rss_after_create.items()},
                  end_mb={i: v and round(v) for i, v in now.items()})  # fmt: skip

    def conns(self) -> None:
        target = max(self.ports)
        pid = self.pids()[target]
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = self.args.conns + 100
        if soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
        before = rss_mb(pid) or 0
        socks = []
        error = None
        try:
            for _ in range(self.args.conns):
                socks.append(socket.create_connection(("127.0.0.1", self.ports[target]), timeout=10))
        except OSError as exc:
            error = f"after {len(socks)}: {exc}"
        time.sleep(2)  # (the broker accepts them)
        opened = rss_mb(pid) or 0
        try:
            served = len(states(f"127.0.0.1:{self.ports[target]}")) == len(self.tps)
        except Exception:
            served = False
        for s in socks:
            s.close()
        time.sleep(2)
        closed = rss_mb(pid) or 0
        per_kb = (opened - before) * 1024 / len(socks) if socks else None
        self.emit("conns", per_kb, "KB/conn", "<= 10 KB", per_kb is not None and per_kb <= 10 and served,
                  broker=target, opened=len(socks), rss_before_mb=round(before, 1), rss_open_mb=round(opened, 1),
                  rss_closed_mb=round(closed, 1), new_client_served=served, error=error)  # fmt: skip

    def run(self, phase: str) -> None:
        """One phase, with each broker's CPU seconds in it; an exception is reported as the phase unmet."""
        pid0 = self.cpu_pids()
        cpu0 = {i: cpu_seconds(pid) for i, pid in pid0.items()}
        n = len(self.results)
        self.note(f"{phase} ...")
        try:
            getattr(self, {"controller": "controller_kill"}.get(phase, phase))()
        except Exception as exc:
            self.emit(phase, None, "", "", False, error=f"{type(exc).__name__}: {exc}")
        cpu = {}
        for i, pid in self.cpu_pids().items():
            now = cpu_seconds(pid)
            was = cpu0.get(i) if pid0.get(i) == pid else 0.0  # (a restarted broker: its new process from birth)
            cpu[i] = None if now is None or was is None else round(now - was, 2)
        for line in self.results[n:]:
            line["cpu_s"] = cpu
            print(json.dumps(line), flush=True)


def table(results: list[dict[str, Any]]) -> str:
    rows = [("phase", "value", "unit", "target", "met")]
    rows += [(r["phase"], "-" if r["value"] is None else f"{r['value']:g}", r["unit"], r["target"],
              "yes" if r["met"] else "NO") for r in results]  # fmt: skip
    widths = [max(len(str(row[i])) for row in rows) for i in range(5)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=3000, help="partitions in all (default 3000)")
    ap.add_argument("--topics", type=int, help="topics they are spread over (default partitions / 1000)")
    ap.add_argument("--rf", type=int, default=3, help="replication factor (default 3)")
    ap.add_argument("--session-ms", type=int, default=18000, help="zookeeper.session.timeout.ms (default 18000)")
    ap.add_argument("--phases", default=",".join(PHASES), help=f"comma list (default all: {','.join(PHASES)})")
    ap.add_argument("--groups", type=int, default=10, help="groups of the offsets phase (default 10)")
    ap.add_argument("--conns", type=int, default=2000, help="idle connections of the conns phase (default 2000)")
    ap.add_argument("--timeout", type=float, default=300, help="longest wait of a phase, s (default 300)")
    ap.add_argument("--json-only", action="store_true", help="no table at the end")
    ap.add_argument("--keep", action="store_true", help="keep the cluster's directory (its broker logs) at the end")
    args = ap.parse_args()
    args.topics = args.topics or max(1, args.partitions // 1000)
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = [p for p in phases if p not in PHASES]
    if unknown:
        ap.error(f"unknown phase(s) {', '.join(unknown)}; known: {', '.join(PHASES)}")
    home = os.environ["KAFKACTL_HOME"] = tempfile.mkdtemp(prefix="kafkactl-scale-")
    bench = Bench(args)
    try:
        bench.up()
        for phase in ["create", *(p for p in PHASES if p in phases and p != "create")]:  # (the others need topics)
            bench.run(phase)
    except KeyboardInterrupt:
        pass
    finally:
        bench.teardown()
        if args.keep:
            print(f"the cluster's directory (broker logs under it): {home}", file=sys.stderr)
        else:
            shutil.rmtree(home, ignore_errors=True)
    if not args.json_only:
        print(table(bench.results), file=sys.stderr)


if __name__ == "__main__":
    main()
