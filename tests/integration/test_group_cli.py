"""`kafkactl group list | describe | rewind | delete` against one real broker and the real ZooKeeper.

One broker serves the whole module (no initial rebalance delay, short sessions allowed, retention checked
often); every test uses topic and group names of its own. Broker-coordinated groups are made with
kafka-python's KafkaConsumer; ZooKeeper-coordinated ones by writing the consumer, ownership and offset
registries with `broker.zk.consumers` (the members' ephemeral nodes live as long as that kazoo session).
What the commands print is checked against what was produced and committed and against ZooKeeper's own
znodes, read with kazoo.
"""

from __future__ import annotations

import contextlib
import csv
import io
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest
from kafka import KafkaConsumer, TopicPartition

from broker.client.admin import Admin
from broker.client.sync import Producer
from broker.protocol.messages.fetch import EARLIEST
from broker.zk import consumers
from tests.integration.clientkit import create_topic, kafka_python_knows, unique
from tests.integration.cluster import BrokerProcess, new_chroot
from tests.integration.helpers import cli, error_line, json_lines, ok, tsv, wait_until, zk_session

OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "log.retention.check.interval.ms": "200",
}
PLAN_HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT", "NEW"]
DESCRIBE_HEADER = ["TOPIC", "PARTITION", "COMMITTED", "LOG-END", "LAG", "OWNER", "HOST"]
HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def b(zk_server, tmp_path_factory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("group-cli-broker")
    with BrokerProcess(1, new_chroot(zk_server.connect_string), root, overrides=OVERRIDES) as broker:
        yield broker


# --- helpers ---------------------------------------------------------------------------------------


def group(b: BrokerProcess, *args: object) -> subprocess.CompletedProcess:
    return cli("group", *args, "-b", b.bootstrap, "-z", b.zk_connect)


def concurrently(b: BrokerProcess, calls: list[tuple[object, ...]]) -> list[subprocess.CompletedProcess]:
    """`kafkactl group ARGS` for each ARGS, a few at a time (each is a fresh interpreter)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda args: group(b, *args), calls))


def produce(b: BrokerProcess, topic: str, counts: dict[int, int], *, timestamp: int | None = None,
            one_batch_each: bool = False) -> dict[int, list[int]]:  # fmt: skip
    """`counts[p]` messages to each partition p (stamped `timestamp` if given); {partition: offsets}."""
    out: dict[int, list[int]] = {}
    with Producer(b.bootstrap, linger_ms=2) as producer:
        for p, n in counts.items():
            futures = []
            for i in range(n):
                f = producer.send(topic, f"{topic}/{p}/{i}".encode(), partition=p, timestamp=timestamp)
                if one_batch_each:
                    f.result(timeout=30)
                futures.append(f)
            out[p] = [f.result(timeout=30).offset for f in futures]
    return out


def zk_offsets(b: BrokerProcess, g: str) -> dict[tuple[str, int], int]:
    """The group's offset registry as ZooKeeper holds it: {(topic, partition): offset}."""
    with zk_session(b.zk_connect) as zk:
        return {tp: c.offset for tp, c in consumers.committed(zk, g).items()}


def zk_commit(b: BrokerProcess, g: str, offsets: dict[tuple[str, int], int]) -> None:
    with zk_session(b.zk_connect) as zk:
        consumers.commit(zk, g, offsets)


def group_exists(b: BrokerProcess, g: str) -> bool:
    with zk_session(b.zk_connect) as zk:
        return zk.exists(f"/consumers/{g}") is not None


@contextlib.contextmanager
def kp_consumer(b: BrokerProcess, topic: str, g: str, **extra: object) -> Iterator[KafkaConsumer]:
    """A kafka-python group member of `g` subscribed to `topic` (no auto commit), closed (leaving) at the end."""
    cfg: dict[str, object] = dict(bootstrap_servers=b.bootstrap, group_id=g, client_id="it-group-cli",
                                  enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=100,
                                  session_timeout_ms=6000, heartbeat_interval_ms=500)  # fmt: skip
    cfg.update(extra)
    c = KafkaConsumer(topic, **cfg)
    try:
        kafka_python_knows(c, topic)
        yield c
    finally:
        c.close(autocommit=False)


def consume(c: KafkaConsumer, n: int, timeout: float = 30.0) -> dict[int, list[int]]:
    """Poll until `n` records arrived; {partition: offsets in the order received}."""
    got: dict[int, list[int]] = {}
    total = 0
    deadline = time.monotonic() + timeout
    while total < n:
        assert time.monotonic() < deadline, f"only {total} of {n} records after {timeout:g}s: {got}"
        for tp, records in c.poll(timeout_ms=200).items():
            got.setdefault(tp.partition, []).extend(r.offset for r in records)
            total += len(records)
    assert total == n, got
    return dict(sorted(got.items()))


def member_id(c: KafkaConsumer) -> str:
    return c._coordinator._generation.member_id


def listed(b: BrokerProcess) -> dict[str, dict]:
    rows = json_lines(ok(group(b, "list", "-o", "json")))
    for row in rows:
        assert set(row) == {"group", "kind", "state", "members"}, row
    names = [r["group"] for r in rows]
    assert names == sorted(names) and len(names) == len(set(names)), names
    return {r["group"]: r for r in rows}


def describe_json(b: BrokerProcess, g: str) -> dict:
    """The document without each commit's leader epoch and metadata (test_offset_metadata.py checks those)."""
    (doc,) = json_lines(ok(group(b, "describe", g, "-o", "json")))
    for p in doc["partitions"]:
        assert p.keys() >= {"leader_epoch", "metadata"}, p
        del p["leader_epoch"], p["metadata"]
    return doc


def describe_text(b: BrokerProcess, g: str) -> tuple[str, list[list[str]]]:
    """(the summary line, the table rows without header)."""
    first, _, rest = ok(group(b, "describe", g)).partition("\n")
    rows = tsv(rest)
    assert rows[0] == DESCRIBE_HEADER
    return first, rows[1:]


def lag(topic: str, p: int, committed: int | None, end: int, owner: str | None = None, host: str | None = None):
    return {"topic": topic, "partition": p, "committed": committed, "log_end": end,
            "lag": None if committed is None else end - committed, "owner": owner, "host": host}  # fmt: skip


def text_plan(r: subprocess.CompletedProcess, g: str) -> dict[tuple[str, int], tuple[int | None, int]]:
    """The rewind plan table: {(topic, partition): (current, new)}."""
    rows = tsv(ok(r))
    assert rows[0] == PLAN_HEADER, rows
    plan = {}
    for row in rows[1:]:
        assert len(row) == 5 and row[0] == g, row
        plan[(row[1], int(row[2]))] = (None if row[3] == "-" else int(row[3]), int(row[4]))
    return plan


def json_plan(r: subprocess.CompletedProcess, g: str) -> dict[tuple[str, int], tuple[int | None, int]]:
    plan = {}
    for doc in json_lines(ok(r)):
        assert set(doc) == {"group", "topic", "partition", "current", "new"} and doc["group"] == g, doc
        plan[(doc["topic"], doc["partition"])] = (doc["current"], doc["new"])
    return plan


def dry_run_note(n: int, g: str) -> str:
    return f"dry run: would rewind {n} partition(s) of group {g}; add --execute to apply it\n"


def usage_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    line = error_line(r, *needles)
    assert r.returncode == 2, f"exit {r.returncode}: {line}"
    assert r.stdout == ""
    return line


def iso(ms: int, *, z: bool = False) -> str:
    text = datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z") if z else text


# --- list and describe -----------------------------------------------------------------------------


def test_broker_group_while_live_and_after_it_closed(b):
    t, g = create_topic(b.bootstrap, unique("bk"), 3), unique("bkg")
    produce(b, t, {0: 5, 1: 3, 2: 7})
    with kp_consumer(b, t, g) as c:
        got = consume(c, 15)
        assert got == {0: list(range(5)), 1: list(range(3)), 2: list(range(7))}
        c.commit()
        produce(b, t, {0: 2, 2: 1})
        member = member_id(c)
        assert member.startswith("it-group-cli-")
        assert zk_offsets(b, g) == {(t, 0): 5, (t, 1): 3, (t, 2): 7}

        assert listed(b)[g] == {"group": g, "kind": "broker", "state": "Stable", "members": 1}
        rows = tsv(ok(group(b, "list")))
        assert rows[0] == ["GROUP", "KIND", "STATE", "MEMBERS"]
        assert [g, "broker", "Stable", "1"] in rows[1:]
        # without -z the broker says which ZooKeeper it uses (its chroot included), as -b is all other commands need
        assert tsv(ok(cli("group", "list", "-b", b.bootstrap))) == rows

        doc = describe_json(b, g)
        assert doc == {
            "group": g, "kind": "broker", "state": "Stable",
            "members": [{"member_id": member, "client_id": "it-group-cli", "host": "127.0.0.1",
                         "partitions": [[t, 0], [t, 1], [t, 2]]}],
            "partitions": [lag(t, 0, 5, 7, member, "127.0.0.1"), lag(t, 1, 3, 3, member, "127.0.0.1"),
                           lag(t, 2, 7, 8, member, "127.0.0.1")],
        }  # fmt: skip
        first, rows = describe_text(b, g)
        assert first == f"group {g} (broker-coordinated): Stable, 1 member(s)"
        assert rows == [[t, "0", "5", "7", "2", member, "127.0.0.1"], [t, "1", "3", "3", "0", member, "127.0.0.1"],
                        [t, "2", "7", "8", "1", member, "127.0.0.1"]]  # fmt: skip

    # closed (it left the group): only the committed offsets remain
    assert listed(b)[g] == {"group": g, "kind": "broker", "state": "Empty", "members": 0}
    assert [g, "broker", "Empty", "0"] in tsv(ok(group(b, "list")))[1:]
    doc = describe_json(b, g)
    assert doc == {"group": g, "kind": "broker", "state": "Empty", "members": [],
                   "partitions": [lag(t, 0, 5, 7), lag(t, 1, 3, 3), lag(t, 2, 7, 8)]}  # fmt: skip
    assert {(p["topic"], p["partition"]): p["committed"] for p in doc["partitions"]} == zk_offsets(b, g)
    first, rows = describe_text(b, g)
    assert first == f"group {g} (broker-coordinated): Empty, 0 member(s)"
    assert rows == [
        [t, "0", "5", "7", "2", "-", "-"],
        [t, "1", "3", "3", "0", "-", "-"],
        [t, "2", "7", "8", "1", "-", "-"],
    ]


def test_zookeeper_group_while_registered_and_after_its_session_ended(b):
    t, g = create_topic(b.bootstrap, unique("zk"), 3), unique("zkg")
    produce(b, t, {0: 4, 1: 2, 2: 6})
    a, z = f"{g}_host-a-1700000000000-0a1b2c3d", f"{g}_hostb-1700000000001-4e5f6a7b"  # <group>_<host>-<ms>-<uuid8>
    with zk_session(b.zk_connect) as zk:
        consumers.register(zk, g, a, [t])
        consumers.register(zk, g, z, [t])
        assert consumers.claim(zk, g, t, 0, a) and consumers.claim(zk, g, t, 1, a) and consumers.claim(zk, g, t, 2, z)
        consumers.commit(zk, g, {(t, 0): 1, (t, 1): 2})  # partition 2 is owned but has no commit yet

        assert listed(b)[g] == {"group": g, "kind": "zookeeper", "state": "Stable", "members": 2}
        assert [g, "zookeeper", "Stable", "2"] in tsv(ok(group(b, "list")))[1:]
        doc = describe_json(b, g)
        assert doc == {
            "group": g, "kind": "zookeeper", "state": "Stable",
            "members": [{"member_id": a, "client_id": a, "host": "host-a", "partitions": [[t, 0], [t, 1]]},
                        {"member_id": z, "client_id": z, "host": "hostb", "partitions": [[t, 2]]}],
            "partitions": [lag(t, 0, 1, 4, a, "host-a"), lag(t, 1, 2, 2, a, "host-a"), lag(t, 2, None, 6, z, "hostb")],
        }  # fmt: skip
        # the same as ZooKeeper's own registries
        assert sorted(zk.get_children(f"/consumers/{g}/ids")) == [m["member_id"] for m in doc["members"]]
        for p in doc["partitions"]:
            data, stat = zk.get(f"/consumers/{g}/owners/{t}/{p['partition']}")
            assert (data.decode(), stat.ephemeralOwner) == (p["owner"], zk.client_id[0])
        assert zk_offsets(b, g) == {(t, 0): 1, (t, 1): 2}
        first, rows = describe_text(b, g)
        assert first == f"group {g} (zookeeper-coordinated): Stable, 2 member(s)"
        assert rows == [[t, "0", "1", "4", "3", a, "host-a"], [t, "1", "2", "2", "0", a, "host-a"],
                        [t, "2", "-", "6", "-", z, "hostb"]]  # fmt: skip

        # a member gone while its ownership remains: the group is mid-rebalance
        consumers.deregister(zk, g, z)
        assert listed(b)[g] == {"group": g, "kind": "zookeeper", "state": "Rebalancing", "members": 1}

    # the session ended: its ephemeral members and owners are gone, the offsets stay
    doc = describe_json(b, g)
    assert doc == {"group": g, "kind": "zookeeper", "state": "Empty", "members": [],
                   "partitions": [lag(t, 0, 1, 4), lag(t, 1, 2, 2)]}  # fmt: skip
    assert listed(b)[g] == {"group": g, "kind": "zookeeper", "state": "Empty", "members": 0}
    first, rows = describe_text(b, g)
    assert first == f"group {g} (zookeeper-coordinated): Empty, 0 member(s)"
    assert rows == [[t, "0", "1", "4", "3", "-", "-"], [t, "1", "2", "2", "0", "-", "-"]]
    with zk_session(b.zk_connect) as zk:
        assert zk.get_children(f"/consumers/{g}/ids") == []
        assert consumers.owners(zk, g) == {}


def test_list_by_state_asks_the_coordinator_with_the_states_filter(b):
    """`group list --state S` (repeatable or comma-separated, any case), as kafka-consumer-groups.sh --list
    --state: broker-coordinated groups through ListGroups v4's filter, ZooKeeper-coordinated ones by theirs."""
    t = create_topic(b.bootstrap, unique("st"), 2)
    live, empty, zk_group = unique("st-live"), unique("st-empty"), unique("st-zk")
    produce(b, t, {0: 2, 1: 2})
    with kp_consumer(b, t, empty) as c:
        consume(c, 4)
        c.commit()  # then it leaves: Empty, offsets kept
    ours = {live, empty, zk_group}
    with kp_consumer(b, t, live) as c, zk_session(b.zk_connect) as zk:
        consume(c, 4)
        consumers.register(zk, zk_group, f"{zk_group}_h-1700000000000-0a1b2c3d", [t])
        consumers.claim(zk, zk_group, t, 0, f"{zk_group}_h-1700000000000-0a1b2c3d")

        def names(*args: str) -> dict[str, str]:
            return {g["group"]: g["state"] for g in json_lines(ok(group(b, "list", "-o", "json", *args)))
                    if g["group"] in ours}  # fmt: skip

        wait_until(lambda: names().get(live) == "Stable", 30, "the live group Stable")
        assert names() == {live: "Stable", empty: "Empty", zk_group: "Stable"}
        assert names("--state", "Stable") == {live: "Stable", zk_group: "Stable"}
        assert names("--state", "empty") == {empty: "Empty"}
        assert names("--state", "STABLE,Empty") == names("--state", "Stable", "--state", "Empty") == names()
        assert names("--state", "PreparingRebalance", "--state", "Dead") == {}
        rows = tsv(ok(group(b, "list", "--state", "Empty")))
        assert rows[0] == ["GROUP", "KIND", "STATE", "MEMBERS"] and [empty, "broker", "Empty", "0"] in rows[1:]
        assert all(r[2] == "Empty" for r in rows[1:])
        line = usage_error(group(b, "list", "--state", "Stable,Sleeping"), "'Sleeping'", "PreparingRebalance")
        assert "Traceback" not in line


def test_describe_of_an_unknown_group_is_an_error_line(b):
    g = unique("nogroup")
    for args in (("describe", g), ("describe", g, "-o", "json")):
        r = group(b, *args)
        error_line(r, "no consumer group", g)
        assert r.returncode == 1 and r.stdout == ""
    assert g not in listed(b)


# --- rewind: every mode, dry run ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def rw(b) -> tuple[str, str]:
    """(topic, group): partitions 0/1/2 hold 10/6/0 messages of now; the group committed 4 and 6 (2: nothing)."""
    t, g = create_topic(b.bootstrap, unique("rw"), 3), unique("rwg")
    produce(b, t, {0: 10, 1: 6})
    zk_commit(b, g, {(t, 0): 4, (t, 1): 6})
    return t, g


MODES = [
    # (mode args, topic args (T stands for the topic), {partition: new}); current is 4, 6, none
    (["--to-earliest"], ["--all-topics"], {0: 0, 1: 0, 2: 0}),
    (["--to-latest"], ["--all-topics"], {0: 10, 1: 6, 2: 0}),
    (["--to-offset", "5"], ["--topic", "T"], {0: 5, 1: 5, 2: 0}),
    (["--to-offset", "100"], ["--topic", "T"], {0: 10, 1: 6, 2: 0}),  # clamped to the end
    (["--to-offset", "0"], ["--topic", "T:0,2"], {0: 0, 2: 0}),
    (["--to-latest"], ["--topic", "T:0", "--topic", "T"], {0: 10, 1: 6, 2: 0}),  # T and T:0: all of T
    (["--shift-by=-3"], ["--topic", "T:0,1"], {0: 1, 1: 3}),
    (["--shift-by", "+3"], ["--topic", "T:1,0"], {0: 7, 1: 6}),  # 6 + 3 clamped to the end
    (["--shift-by=-50"], ["--topic", "T:0", "--topic", "T:1"], {0: 0, 1: 0}),
    (["--shift-by", "+50"], ["-t", "T:0,1"], {0: 10, 1: 6}),
    (["--by-duration", "1h"], ["--all-topics"], {0: 0, 1: 0, 2: 0}),  # everything is fresh: the start
    (["--by-duration", "1ms"], ["--all-topics"], {0: 10, 1: 6, 2: 0}),  # nothing that late: the end
]


@pytest.mark.parametrize(("mode", "which", "new"), MODES, ids=[" ".join(m + w) for m, w, _ in MODES])
def test_rewind_modes_plan_in_text_and_json_and_change_nothing(b, rw, mode, which, new):
    t, g = rw
    which = [w.replace("T", t, 1) if w.startswith("T") else w for w in which]
    current = {0: 4, 1: 6, 2: None}
    want = {(t, p): (current[p], n) for p, n in new.items()}
    text, js = concurrently(b, [("rewind", g, *which, *mode), ("rewind", g, *which, *mode, "-o", "json")])
    assert text_plan(text, g) == want
    assert list(text_plan(text, g)) == sorted(want)  # by topic, then partition
    assert text.stderr == dry_run_note(len(want), g)
    assert json_plan(js, g) == want
    assert js.stderr == dry_run_note(len(want), g)
    assert zk_offsets(b, g) == {(t, 0): 4, (t, 1): 6}  # a dry run writes nothing


def test_rewind_to_datetime_and_by_duration_find_the_first_offset_at_or_after_the_time(b):
    """Two batches stamped an hour apart: partition 0 has 3 + 4 messages, partition 1 only 2 of the first."""
    t, g = create_topic(b.bootstrap, unique("ts"), 2), unique("tsg")
    now = int(time.time()) * 1000
    first, second = now - 2 * HOUR_MS, now - HOUR_MS
    assert produce(b, t, {0: 3, 1: 2}, timestamp=first) == {0: [0, 1, 2], 1: [0, 1]}
    assert produce(b, t, {0: 4}, timestamp=second) == {0: [3, 4, 5, 6]}
    zk_commit(b, g, {(t, 0): 5, (t, 1): 1})
    naive_local = datetime.fromtimestamp((first + HOUR_MS // 2) / 1000).isoformat()  # no zone: local time
    cases = [
        (["--to-datetime", iso(first + HOUR_MS // 2)], {0: 3, 1: 2}),  # between: the second batch / the end
        (["--to-datetime", naive_local], {0: 3, 1: 2}),
        (["--to-datetime", iso(first)], {0: 0, 1: 0}),  # at: inclusive
        (["--to-datetime", iso(first + 1, z=True)], {0: 3, 1: 2}),
        (["--to-datetime", iso(first - 1000, z=True)], {0: 0, 1: 0}),
        (["--to-datetime", iso(second)], {0: 3, 1: 2}),
        (["--to-datetime", iso(second + 1)], {0: 7, 1: 2}),  # after everything: the end
        (["--by-duration", "90m"], {0: 3, 1: 2}),
        (["--by-duration", "3h"], {0: 0, 1: 0}),
        (["--by-duration", "30m"], {0: 7, 1: 2}),
    ]
    results = concurrently(b, [("rewind", g, "--topic", t, *mode, "-o", "json") for mode, _ in cases])
    for (mode, new), r in zip(cases, results, strict=True):
        assert json_plan(r, g) == {(t, 0): (5, new[0]), (t, 1): (1, new[1])}, mode
    assert zk_offsets(b, g) == {(t, 0): 5, (t, 1): 1}

    ok(group(b, "rewind", g, "--all-topics", "--to-datetime", iso(first + 1), "--execute"))
    assert zk_offsets(b, g) == {(t, 0): 3, (t, 1): 2}


def test_rewind_clamps_to_the_log_start_after_retention(b):
    """Single-message segments (14 bytes: Kafka's least segment.bytes) and retention.bytes=0: retention leaves
    only the active segment (offset 5)."""
    t, g = unique("trim"), unique("trimg")
    create_topic(b.bootstrap, t, 1, {"segment.bytes": "14", "retention.bytes": "0"})
    assert produce(b, t, {0: 6}, one_batch_each=True) == {0: [0, 1, 2, 3, 4, 5]}
    with Admin(b.bootstrap) as admin:
        wait_until(lambda: admin.list_offsets([(t, 0)], EARLIEST) == {(t, 0): 5}, 15, "retention moved the log start")
    zk_commit(b, g, {(t, 0): 2})  # committed before retention removed it
    cases = [
        (["--to-offset", "0"], 5),
        (["--to-offset", "3"], 5),
        (["--to-offset", "5"], 5),
        (["--to-offset", "9"], 6),
        (["--to-earliest"], 5),
        (["--shift-by=-1"], 5),
        (["--shift-by", "+1"], 5),
        (["--shift-by", "+4"], 6),
        (["--by-duration", "1d"], 5),
    ]
    results = concurrently(b, [("rewind", g, "--topic", t, *mode, "-o", "json") for mode, _ in cases])
    for (mode, new), r in zip(cases, results, strict=True):
        assert json_plan(r, g) == {(t, 0): (2, new)}, mode
    doc = describe_json(b, g)
    assert doc["partitions"] == [lag(t, 0, 2, 6)]
    ok(group(b, "rewind", g, "--topic", t, "--to-offset", "1", "--execute"))
    assert zk_offsets(b, g) == {(t, 0): 5}


# --- rewind: execute, export ---------------------------------------------------------------------


def test_rewind_execute_writes_exactly_the_new_column(b, rw):
    t, _ = rw
    g = unique("exg")
    zk_commit(b, g, {(t, 0): 4, (t, 1): 6})
    dry = group(b, "rewind", g, "--topic", f"{t}:0,2", "--to-latest")
    assert text_plan(dry, g) == {(t, 0): (4, 10), (t, 2): (None, 0)}
    assert zk_offsets(b, g) == {(t, 0): 4, (t, 1): 6}

    r = group(b, "rewind", g, "--topic", f"{t}:0,2", "--to-latest", "--execute")
    assert text_plan(r, g) == {(t, 0): (4, 10), (t, 2): (None, 0)}
    assert r.stderr == f"rewound 2 partition(s) of group {g}\n"
    assert zk_offsets(b, g) == {(t, 0): 10, (t, 1): 6, (t, 2): 0}  # partition 1 untouched, 2 created

    r = group(b, "rewind", g, "--all-topics", "--shift-by=-4", "--execute", "-o", "json")
    plan = json_plan(r, g)
    assert plan == {(t, 0): (10, 6), (t, 1): (6, 2), (t, 2): (0, 0)}
    assert zk_offsets(b, g) == {tp: new for tp, (_, new) in plan.items()}
    assert describe_json(b, g)["partitions"] == [lag(t, 0, 6, 10), lag(t, 1, 2, 6), lag(t, 2, 0, 0)]


def test_rewind_export_csv_and_json(b, rw):
    t, g = rw
    want = {(t, 0): (4, 5), (t, 1): (6, 5), (t, 2): (None, 0)}
    args = ("rewind", g, "--topic", t, "--to-offset", "5", "--export")
    as_csv, as_json = concurrently(b, [(*args, "csv"), (*args, "json")])
    rows = list(csv.reader(io.StringIO(ok(as_csv))))
    assert rows == [["group", "topic", "partition", "current", "new"], [g, t, "0", "4", "5"], [g, t, "1", "6", "5"],
                    [g, t, "2", "", "0"]]  # fmt: skip
    assert as_csv.stderr == dry_run_note(3, g)
    assert json_plan(as_json, g) == want
    assert [d["partition"] for d in json_lines(as_json.stdout)] == [0, 1, 2]
    assert zk_offsets(b, g) == {(t, 0): 4, (t, 1): 6}

    g2 = unique("exportg")
    zk_commit(b, g2, {(t, 0): 4, (t, 1): 6})
    r = group(b, "rewind", g2, "--topic", f"{t}:1", "--to-earliest", "--export", "csv", "--execute")
    assert list(csv.reader(io.StringIO(ok(r)))) == [["group", "topic", "partition", "current", "new"],
                                                    [g2, t, "1", "6", "0"]]  # fmt: skip
    assert zk_offsets(b, g2) == {(t, 0): 4, (t, 1): 0}


# --- live members ---------------------------------------------------------------------------------


def test_a_live_broker_group_refuses_rewind_and_delete(b):
    t, g = create_topic(b.bootstrap, unique("lb"), 2), unique("lbg")
    produce(b, t, {0: 4, 1: 3})
    with kp_consumer(b, t, g) as c:
        consume(c, 7)
        c.commit()  # (answered once written, or after a second: the store writes to ZooKeeper behind)
        before = {(t, 0): 4, (t, 1): 3}
        wait_until(lambda: zk_offsets(b, g) == before, 15, "the committed offsets in ZooKeeper")
        dry = group(b, "rewind", g, "--all-topics", "--to-earliest")  # a dry run is fine while live
        assert text_plan(dry, g) == {(t, 0): (4, 0), (t, 1): (3, 0)}
        rewind, delete = concurrently(b, [("rewind", g, "--all-topics", "--to-earliest", "--execute"), ("delete", g)])
        for r in (rewind, delete):
            error_line(r, g, "1 live member")
            assert r.returncode == 1 and r.stdout == ""
        assert zk_offsets(b, g) == before
        assert group_exists(b, g)
        assert listed(b)[g]["state"] == "Stable"

    ok(group(b, "rewind", g, "--all-topics", "--to-earliest", "--execute"))
    assert zk_offsets(b, g) == {(t, 0): 0, (t, 1): 0}
    assert ok(group(b, "delete", g)) == f"deleted group {g}\n"
    assert not group_exists(b, g)
    assert g not in listed(b)


def test_a_live_zookeeper_group_refuses_rewind_and_delete(b):
    t, g = create_topic(b.bootstrap, unique("lz"), 2), unique("lzg")
    produce(b, t, {0: 3, 1: 5})
    zk_commit(b, g, {(t, 0): 3, (t, 1): 2})
    with zk_session(b.zk_connect) as zk:
        consumers.register(zk, g, f"{g}_box-1", [t])
        assert consumers.claim(zk, g, t, 0, f"{g}_box-1")
        rewind, delete = concurrently(b, [("rewind", g, "--topic", t, "--to-offset", "1", "--execute"), ("delete", g)])
        for r in (rewind, delete):
            error_line(r, g, "1 live member")
            assert r.returncode == 1 and r.stdout == ""
        assert zk_offsets(b, g) == {(t, 0): 3, (t, 1): 2}
        assert zk.exists(f"/consumers/{g}/ids/{g}_box-1") is not None

    r = group(b, "rewind", g, "--topic", t, "--to-offset", "1", "--execute")
    assert text_plan(r, g) == {(t, 0): (3, 1), (t, 1): (2, 1)}
    assert zk_offsets(b, g) == {(t, 0): 1, (t, 1): 1}


def test_a_consumer_resumes_at_the_rewound_offsets(b):
    t, g = create_topic(b.bootstrap, unique("resume"), 3), unique("resumeg")
    produce(b, t, {0: 8, 1: 8, 2: 8})
    with kp_consumer(b, t, g) as c:
        consume(c, 24)
        c.commit()
    assert zk_offsets(b, g) == {(t, 0): 8, (t, 1): 8, (t, 2): 8}

    r = group(b, "rewind", g, "--all-topics", "--shift-by=-3", "--execute", "-o", "json")
    assert json_plan(r, g) == {(t, 0): (8, 5), (t, 1): (8, 5), (t, 2): (8, 5)}
    r = group(b, "rewind", g, "--topic", f"{t}:0", "--topic", f"{t}:2", "--to-offset", "2", "--execute", "-o", "json")
    assert json_plan(r, g) == {(t, 0): (5, 2), (t, 2): (5, 2)}
    assert zk_offsets(b, g) == {(t, 0): 2, (t, 1): 5, (t, 2): 2}

    with kp_consumer(b, t, g, auto_offset_reset="latest") as c:  # "latest" if it ignored the commits
        got = consume(c, 6 + 3 + 6)
        assert {p: offsets[0] for p, offsets in got.items()} == {0: 2, 1: 5, 2: 2}
        assert got == {0: list(range(2, 8)), 1: list(range(5, 8)), 2: list(range(2, 8))}
        assert {p: c.committed(TopicPartition(t, p)) for p in range(3)} == {0: 2, 1: 5, 2: 2}


# --- delete ---------------------------------------------------------------------------------------


def test_delete_removes_the_group(b):
    t, g = create_topic(b.bootstrap, unique("del"), 1), unique("delg")
    produce(b, t, {0: 2})
    with zk_session(b.zk_connect) as zk:
        consumers.register(zk, g, f"{g}_box-1", [t])
        assert consumers.claim(zk, g, t, 0, f"{g}_box-1")
        consumers.commit(zk, g, {(t, 0): 1})
    assert listed(b)[g] == {"group": g, "kind": "zookeeper", "state": "Empty", "members": 0}
    assert ok(group(b, "delete", g)) == f"deleted group {g}\n"
    assert not group_exists(b, g)
    assert g not in listed(b)
    r = group(b, "describe", g)
    error_line(r, "no consumer group", g)
    assert r.returncode == 1


def test_deleting_an_unknown_group_is_an_error_line(b):
    for g in (unique("nosuch"), unique("nosuch")):
        r = group(b, "delete", g)
        error_line(r, "no consumer group", g)
        assert r.returncode == 1 and r.stdout == ""
        assert not group_exists(b, g)


# --- usage errors ---------------------------------------------------------------------------------


def test_usage_errors_are_one_line_and_exit_2(b, rw):
    t, g = rw
    cases = [
        (("rewind", g, "--all-topics"), ("give exactly one of", "got none")),
        (("rewind", g, "--all-topics", "--to-earliest", "--to-latest"), ("got --to-earliest, --to-latest",)),
        (("rewind", g, "--to-earliest"), ("--topic", "--all-topics")),
        (("rewind", g, "--topic", t, "--all-topics", "--to-earliest"), ("--topic", "--all-topics")),
        (("rewind", g, "--topic", f"{t}:x", "--to-earliest"), (f"{t}:x", "partitions must be integers")),
        (("rewind", g, "--topic", f"{t}:", "--to-earliest"), ("no partitions after ':'",)),
        (("rewind", g, "--topic", ":0", "--to-earliest"), ("expected TOPIC or TOPIC:P",)),
        (("rewind", g, "--topic", f"{t}:7", "--to-earliest"), ("has no partition 7",)),
        (("rewind", g, "--all-topics", "--to-datetime", "yesterday"), ("yesterday",)),
        (("rewind", g, "--all-topics", "--to-datetime", "1h"), ("--to-datetime '1h'", "ISO-8601")),
        (("rewind", g, "--all-topics", "--to-datetime", "12345"), ("--to-datetime '12345'", "ISO-8601")),
        (("rewind", g, "--all-topics", "--to-datetime", "@12345"), ("--to-datetime '@12345'", "ISO-8601")),
        (("rewind", g, "--all-topics", "--shift-by", "abc"), ("--shift-by 'abc'", "signed integer")),
        (("rewind", g, "--all-topics", "--by-duration", "soon"), ("--by-duration 'soon'", "duration")),
        (("rewind", g, "--all-topics", "--to-offset=-1"), ("--to-offset -1", "0 or more")),
    ]
    results = concurrently(b, [args for args, _ in cases])
    for (args, needles), r in zip(cases, results, strict=True):
        try:
            usage_error(r, *needles)
        except AssertionError as exc:
            raise AssertionError(f"kafkactl group {' '.join(args)}: {exc}") from None
    assert zk_offsets(b, g) == {(t, 0): 4, (t, 1): 6}


def test_an_unknown_topic_or_a_group_without_offsets_is_an_error_line(b, rw):
    t, g = rw
    missing = unique("missing")
    cases = [
        (("rewind", g, "--topic", missing, "--to-earliest"), ("unknown topic", missing)),
        (("rewind", unique("fresh"), "--all-topics", "--to-earliest"), ("no committed offsets",)),
        (("rewind", g, "--topic", f"{t}:2", "--shift-by", "+1"), ("no committed offset", f"{t}-2")),
    ]
    for (args, needles), r in zip(cases, concurrently(b, [a for a, _ in cases]), strict=True):
        error_line(r, *needles)
        assert r.returncode == 1 and r.stdout == "", args
