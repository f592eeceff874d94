"""Unmodified third-party consumers in a consumer group coordinated by a live kafkactl broker (a real broker
process on a real ZooKeeper; no initial rebalance delay, sessions down to one second).

For each of kcat (-G), confluent-kafka, kafka-python and aiokafka: two members (subprocesses printing a JSON
line per event: tests/compat/group_member.py, or kcat -J itself) split a 6-partition topic into disjoint
assignments covering every partition; keyed messages are produced before they start and while they run;
once everything is consumed and committed one member is killed with SIGKILL, more messages are produced,
and the survivor must own every partition within the session timeout plus a rebalance, resuming the dead
member's partitions exactly at their committed offsets. Every produced message is consumed at least once
across both outputs, with its key and value; offsets increase strictly per partition within each member's
output; the committed offsets in ZooKeeper (/consumers/<g>/offsets/<t>/block-<n>) never run
ahead of what was consumed, and after the survivor's clean close (SIGTERM: commit and leave) they are its
last consumed offset + 1 on every partition.

With static membership (KIP-345, a group.instance.id each), a member killed and started again within its
session takes its old partitions back while the other member sees no rebalance at all.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from broker.client.sync import Producer
from broker.zk import consumers
from tests.fixtures import zk_client
from tests.integration.cluster import BrokerProcess

KCAT = "/usr/bin/kcat"
MEMBER_SCRIPT = Path(__file__).with_name("group_member.py")
CLIENTS = ["kcat", "confluent-kafka", "kafka-python", "aiokafka"]
GROUP_OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}
PARTITIONS = 6
SESSION_MS = 2000
DEADLINE = 30.0  # seconds for any one wait
TAKEOVER_SLACK = 6.0  # seconds past the session timeout for the survivor to rejoin and own every partition

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not os.path.exists(KCAT), reason="kcat is not installed")]

Offsets = dict[int, int]


# --- group members as subprocesses -------------------------------------------------------------------------

KCAT_REBALANCE = re.compile(r"rebalanced \(memberid [^)]*\): (assigned|revoked): ?(.*)$")


class Member:
    """A group member subprocess whose output is collected as events by reader threads."""

    def __init__(self, name: str, client: str, bootstrap: str, group: str, topic: str, auto_commit_ms: int = 200, *,
                 log_dir: Path, session_ms: int = SESSION_MS, instance: str | None = None) -> None:  # fmt: skip
        self.name, self.client = name, client
        self.events: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self._lock = threading.Lock()
        if client == "kcat":
            # kcat -X hands auto.commit.interval.ms to the (legacy) topic config: the group's periodic commit
            # stays librdkafka's default 5 s, whatever `auto_commit_ms` says
            argv = [KCAT, "-b", bootstrap, "-G", group, "-J", "-u",
                    "-X", "auto.offset.reset=earliest", "-X", f"session.timeout.ms={session_ms}",
                    "-X", f"heartbeat.interval.ms={session_ms // 6}",
                    *(["-X", f"group.instance.id={instance}"] if instance else []),
                    "-X", "fetch.wait.max.ms=100", "-X", "topic.metadata.refresh.interval.ms=1000", topic]  # fmt: skip
        else:
            argv = [sys.executable, str(MEMBER_SCRIPT), client, bootstrap, group, topic, str(session_ms),
                    str(auto_commit_ms), *([instance] if instance else [])]  # fmt: skip
        self.log_path = log_dir / f"{name}.stderr"
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        self._threads = [threading.Thread(target=self._read_stdout, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]  # fmt: skip
        for t in self._threads:
            t.start()

    def _add(self, event: dict[str, Any]) -> None:
        event["t"] = time.monotonic()
        with self._lock:
            self.events.append(event)

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if not line:
                continue
            j = json.loads(line)
            if self.client == "kcat":  # kcat -J prints messages only
                self._add({"ev": "msg", "p": j["partition"], "o": j["offset"], "k": j["key"], "v": j["payload"]})
            else:
                self._add(j)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        with open(self.log_path, "w") as log:
            for line in self.proc.stderr:
                log.write(line)
                log.flush()
                with self._lock:
                    self.stderr.append(line.rstrip("\n"))
                m = KCAT_REBALANCE.search(line) if self.client == "kcat" else None
                if m:
                    self._add(
                        {"ev": m.group(1), "partitions": sorted(int(p) for p in re.findall(r"\[(\d+)\]", m.group(2)))}
                    )

    # -- what it printed --------------------------------------------------------------------------------

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    def assignment(self) -> set[int] | None:
        """The partitions it owns now, as its last rebalance event tells (None: no assignment yet)."""
        current: set[int] | None = None
        for e in self.snapshot():
            if e["ev"] == "assigned":
                current = set(e["partitions"])
            elif e["ev"] == "revoked" and current is not None:
                current -= set(e["partitions"])
        return current

    def messages(self) -> list[dict[str, Any]]:
        return [e for e in self.snapshot() if e["ev"] == "msg"]

    def last_consumed(self) -> Offsets:
        out: Offsets = {}
        for e in self.messages():
            out[e["p"]] = max(out.get(e["p"], -1), e["o"])
        return out

    def describe(self) -> str:
        tail = "\n".join(self.stderr[-15:])
        events = [e for e in self.snapshot() if e["ev"] != "msg"]
        return (f"{self.name} ({self.client}, rc={self.proc.poll()}): {len(self.messages())} messages, "
                f"events {events[-10:]}\nstderr tail:\n{tail}")  # fmt: skip

    # -- ending it ---------------------------------------------------------------------------------------

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._join_readers()

    def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM: a clean close (commit, leave the group); the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not exit within {timeout}s of SIGTERM\n{self.describe()}") from None
        self._join_readers()
        return rc

    def _join_readers(self) -> None:
        for t in self._threads:
            t.join(5)


@pytest.fixture
def members(tmp_path: Path) -> Iterator[Callable[..., Member]]:
    """A factory for group member subprocesses; every one still running at the end is killed."""
    started: list[Member] = []

    def start(*args: Any, **kwargs: Any) -> Member:
        m = Member(*args, log_dir=tmp_path, **kwargs)
        started.append(m)
        return m

    yield start
    for m in started:
        try:
            m.kill()
        except Exception:
            pass


@pytest.fixture
def group_broker(start_broker) -> BrokerProcess:  # noqa: ANN001
    return start_broker(1, overrides=GROUP_OVERRIDES)


@pytest.fixture
def zk(group_broker: BrokerProcess) -> Iterator[KazooClient]:
    client = zk_client(group_broker.zk_connect)
    try:
        yield client
    finally:
        client.stop()
        client.close()


# --- helpers -------------------------------------------------------------------------------------------------


def wait_until(what: str, check: Callable[[], Any], *members: Member, timeout: float = DEADLINE) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            details = "\n".join(m.describe() for m in members)
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{details}")
        for m in members:
            if m.proc.poll() is not None and m.proc.returncode not in (0, -signal.SIGKILL):
                raise AssertionError(f"{m.name} exited with {m.proc.returncode}\n{m.describe()}")
        time.sleep(0.05)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    run = subprocess.run([sys.executable, "-m", "kafkactl", "topic", "create", topic, "-p", str(partitions),
                          "-b", bootstrap], capture_output=True, text=True, timeout=DEADLINE)  # fmt: skip
    assert run.returncode == 0, run.stderr


def produce(producer: Producer, topic: str, tag: str, per_partition: int,
            partitions: list[int] | None = None) -> dict[tuple[int, int], tuple[str, str]]:  # fmt: skip
    """Keyed messages to every partition (or to `partitions`); {(partition, offset): (key, value)} as the broker
    acknowledged them."""
    futures = []
    for i in range(per_partition):
        for p in range(PARTITIONS) if partitions is None else partitions:
            key, value = f"key-{tag}-{p}-{i}", f"value-{tag}-{p}-{i}"
            futures.append((key, value, producer.send(topic, value.encode(), key=key.encode(), partition=p)))
    out = {}
    for key, value, f in futures:
        md = f.result(timeout=DEADLINE)
        out[(md.partition, md.offset)] = (key, value)
    return out


def committed(zk: KazooClient, group: str, topic: str) -> Offsets:
    """The group's committed offsets in ZooKeeper's offset registry (its offset blocks: `consumers.committed`)."""
    return {p: c.offset for (_, p), c in consumers.committed(zk, group, [topic]).items()}


def ends(produced: dict[tuple[int, int], Any]) -> Offsets:
    out: Offsets = {}
    for p, o in produced:
        out[p] = max(out.get(p, 0), o + 1)
    return out


def split_evenly(a: Member, b: Member) -> bool:
    pa, pb = a.assignment(), b.assignment()
    return bool(pa and pb and not pa & pb and pa | pb == set(range(PARTITIONS)))


def check_strictly_increasing(m: Member) -> None:
    last: dict[int, int] = {}
    for e in m.messages():
        assert e["o"] > last.get(e["p"], -1), f"{m.name}: partition {e['p']} offset {e['o']} after {last[e['p']]}"
        last[e["p"]] = e["o"]


def check_no_commit_ahead(zk: KazooClient, group: str, topic: str, *ms: Member) -> Offsets:
    """Committed ≤ last consumed + 1 for every partition (nothing is committed that nobody consumed)."""
    got = committed(zk, group, topic)
    consumed: Offsets = {}
    for m in ms:
        for p, o in m.last_consumed().items():
            consumed[p] = max(consumed.get(p, -1), o)
    for p, off in got.items():
        assert off <= consumed.get(p, -1) + 1, f"partition {p}: committed {off}, last consumed {consumed.get(p)}"
    return got


# --- the test --------------------------------------------------------------------------------------------------


def consumed_all(produced: dict[tuple[int, int], Any], *ms: Member) -> Callable[[], bool]:
    return lambda: set(produced) <= {(e["p"], e["o"]) for m in ms for e in m.messages()}


@pytest.mark.parametrize("client", CLIENTS)
def test_two_member_group_split_kill_takeover_and_commits(client: str, group_broker: BrokerProcess,
                                                          zk: KazooClient, members) -> None:  # fmt: skip
    bootstrap = group_broker.bootstrap
    tag = uuid.uuid4().hex[:8]
    topic, group = f"grp-{client}-{tag}", f"group-{client}-{tag}"
    create_topic(bootstrap, topic, PARTITIONS)
    with Producer(bootstrap, acks="all") as producer:
        produced = produce(producer, topic, "before", 10)  # before anyone consumes

        # A alone owns and consumes everything; then B joins and the group splits the partitions
        a = members("member-a", client, bootstrap, group, topic)
        wait_until("A to own every partition", lambda: a.assignment() == set(range(PARTITIONS)), a)
        wait_until("A to consume the first messages", consumed_all(produced, a), a)
        # (A's commit on revocation is refused by the broker while the group prepares the rebalance — see
        # test_commit_on_revocation_is_kept — so wait for the periodic auto commit first)
        wait_until("A to commit them", lambda: committed(zk, group, topic) == ends(produced), a)
        b = members("member-b", client, bootstrap, group, topic)
        wait_until("A and B to split the partitions", lambda: split_evenly(a, b), a, b)
        b_parts = sorted(b.assignment() or ())
        a_parts = sorted(a.assignment() or ())

        produced |= produce(producer, topic, "during", 10)  # while both consume
        wait_until("every message to be consumed", consumed_all(produced, a, b), a, b)
        wait_until("the commits to catch up", lambda: committed(zk, group, topic) == ends(produced), a, b)
        assert split_evenly(a, b) and sorted(b.assignment() or ()) == b_parts  # no rebalance meanwhile
        check_no_commit_ahead(zk, group, topic, a, b)
        at_kill = committed(zk, group, topic)

        # B dies without a word; more messages for its partitions; A must take them over where B committed
        b.kill()
        killed_at = time.monotonic()
        produced |= produce(producer, topic, "after", 5, b_parts)
        wait_until("A to own every partition again", lambda: a.assignment() == set(range(PARTITIONS)), a,
                   timeout=SESSION_MS / 1000 + TAKEOVER_SLACK + 5)  # fmt: skip
        took = next(e["t"] for e in reversed(a.snapshot()) if e["ev"] == "assigned") - killed_at
        assert took <= SESSION_MS / 1000 + TAKEOVER_SLACK, f"takeover took {took:.1f}s"
        wait_until("A to consume the messages produced after the kill", consumed_all(produced, a, b), a)
        for p in b_parts:  # A resumes each of B's partitions exactly at B's committed offset
            first = min(e["o"] for e in a.messages() if e["p"] == p and e["t"] > killed_at)
            assert first == at_kill[p], f"partition {p}: A resumed at {first}, B had committed {at_kill[p]}"
        for p in a_parts:  # ...and its own where it was: nothing of them again
            assert not [e for e in a.messages() if e["p"] == p and e["t"] > killed_at], f"partition {p}"
        check_no_commit_ahead(zk, group, topic, a, b)

        # A closes cleanly: it commits its last consumed offset + 1 everywhere
        assert a.terminate() == 0, a.describe()
        if client != "kcat":
            assert a.snapshot()[-1]["ev"] == "closed", a.describe()

    # every message at least once across both members, each with its own key and value
    seen = set()
    for m in (a, b):
        check_strictly_increasing(m)
        for e in m.messages():
            key, value = produced.get((e["p"], e["o"]), (None, None))
            assert (e["k"], e["v"]) == (key, value), f"{m.name} got {e} for {key}/{value}"
            seen.add((e["p"], e["o"]))
    assert seen == set(produced), (sorted(set(produced) - seen)[:10], sorted(seen - set(produced))[:10])
    final = committed(zk, group, topic)
    last_a = a.last_consumed()
    assert final == {p: last_a[p] + 1 for p in range(PARTITIONS)} == ends(produced), (final, last_a)


@pytest.mark.parametrize("client", CLIENTS)
def test_commit_on_revocation_is_kept(client: str, group_broker: BrokerProcess, zk: KazooClient,
                                      members) -> None:  # fmt: skip
    """A consumes everything with no periodic commit due yet; B joins; A commits on revocation (all four clients
    do with auto commit on), so after the rebalance nobody consumes any message a second time."""
    bootstrap = group_broker.bootstrap
    tag = uuid.uuid4().hex[:8]
    topic, group = f"revoke-{client}-{tag}", f"revoke-{client}-{tag}"
    create_topic(bootstrap, topic, PARTITIONS)
    with Producer(bootstrap, acks="all") as producer:
        produced = produce(producer, topic, "before", 5)
    a = members("member-a", client, bootstrap, group, topic, 60_000)
    wait_until("A to consume everything", consumed_all(produced, a), a)
    b = members("member-b", client, bootstrap, group, topic, 60_000)
    wait_until("A and B to split the partitions", lambda: split_evenly(a, b), a, b)
    time.sleep(1.0)  # time for a second consumption of anything, if its commit was lost
    assert committed(zk, group, topic) == ends(produced)  # A's commit on revocation
    twice = [(e["p"], e["o"]) for e in b.messages() + a.messages()]
    assert len(twice) == len(set(twice)) == len(produced), sorted(twice)


STATIC_SESSION_MS = 10_000  # long enough for a killed member's restart to come back within it


@pytest.mark.parametrize("client", CLIENTS)
def test_a_static_member_restarted_within_its_session_takes_its_partitions_back_without_a_rebalance(
        client: str, group_broker: BrokerProcess, zk: KazooClient, members) -> None:  # fmt: skip
    """KIP-345: A and B, each with a group.instance.id, split the partitions; A is killed (SIGKILL: it never
    leaves) and started again under its instance id: it owns the same partitions again while B sees no
    rebalance at all, and what was produced meanwhile is consumed from where A's commits left off."""
    bootstrap = group_broker.bootstrap
    tag = uuid.uuid4().hex[:8]
    topic, group = f"static-{client}-{tag}", f"static-{client}-{tag}"
    create_topic(bootstrap, topic, PARTITIONS)
    kw = {"session_ms": STATIC_SESSION_MS}
    with Producer(bootstrap, acks="all") as producer:
        a = members("member-a", client, bootstrap, group, topic, instance=f"a-{tag}", **kw)
        wait_until("A to own every partition", lambda: a.assignment() == set(range(PARTITIONS)), a)
        b = members("member-b", client, bootstrap, group, topic, instance=f"b-{tag}", **kw)
        wait_until("A and B to split the partitions", lambda: split_evenly(a, b), a, b)
        before = produce(producer, topic, "before", 5)
        wait_until("everything consumed", consumed_all(before, a, b), a, b)
        wait_until("everything committed", lambda: committed(zk, group, topic) == ends(before), a, b)
        owned_by_a, b_events = a.assignment(), [e for e in b.snapshot() if e["ev"] != "msg"]
        a.kill()
        again = members("member-a-again", client, bootstrap, group, topic, instance=f"a-{tag}", **kw)
        wait_until("A's restart to own A's partitions", lambda: again.assignment() == owned_by_a, again, b)
        after = produce(producer, topic, "after", 5)
        wait_until("the new messages consumed", consumed_all(after, again, b), again, b)
    assert [e for e in b.snapshot() if e["ev"] != "msg"] == b_events  # B saw no rebalance
    assert b.assignment() == set(range(PARTITIONS)) - owned_by_a
    resumed = [(e["p"], e["o"]) for e in again.messages()]
    assert sorted(resumed) == sorted(k for k in after if k[0] in owned_by_a)  # from the commits: nothing again
    check_strictly_increasing(b)
    check_strictly_increasing(again)
