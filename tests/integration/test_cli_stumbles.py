"""Issue 26's CLI stumbles against real brokers and ZooKeeper: `topic delete-records` reports every
partition and how many failed; `topic reassign --execute` puts the rollback plan on stdout (or in
--rollback-file) and that plan takes the partitions back; `elect-leaders` says which partitions moved from
which leader and why the others did not; `cluster up` on the ports asked for; `schema-registry stop` finds a
registry started on another port. (`spark-load`'s spinner: tests/cli/test_stumbles.py.)"""

from __future__ import annotations

import json
import socket
from pathlib import Path

from broker.daemon import free_port, read_pid
from tests.integration.helpers import cli, error_line, json_lines, ok, terminate, tsv, wait_until
from tests.integration.test_delete_records import create as create_small_segments
from tests.integration.test_delete_records import earliest, fill
from tests.integration.test_reassignment import plan_of
from tests.integration.test_replication import create, full_isr, replicas_of, start3, states


def test_delete_records_reports_each_partition_and_how_many_failed(broker):
    b = broker.bootstrap
    create_small_segments(b, "short", partitions=3)
    for p, n in ((0, 5), (1, 30), (2, 30)):
        fill(b, "short", p, n)
    r = cli("topic", "delete-records", "short", "--before", 10, "-b", b)
    line = error_line(r, "1 of 3 partitions of topic 'short' failed",
                      "partition 0: OFFSET_OUT_OF_RANGE (its high watermark is 5)")  # fmt: skip
    assert r.returncode == 1, line
    assert tsv(r.stdout) == [["PARTITION", "LOW WATERMARK", "RESULT"],
                             ["0", "", "failed: OFFSET_OUT_OF_RANGE (its high watermark is 5)"],
                             ["1", "10", "deleted"], ["2", "10", "deleted"]]  # fmt: skip
    assert earliest(b, "short", 3) == {0: 0, 1: 10, 2: 10}  # the others were cut all the same
    r = cli("topic", "delete-records", "short", "--before", 20, "-o", "json", "-b", b)
    assert r.returncode == 1 and "1 of 3 partitions" in r.stderr
    assert json_lines(r.stdout) == [
        {"topic": "short", "partition": 0, "low_watermark": None,
         "error": "OFFSET_OUT_OF_RANGE (its high watermark is 5)"},
        {"topic": "short", "partition": 1, "low_watermark": 20, "error": None},
        {"topic": "short", "partition": 2, "low_watermark": 20, "error": None},
    ]  # fmt: skip


def _done(zk: str, plan: Path) -> bool:
    return cli("topic", "reassign", plan, "--verify", "-z", zk).returncode == 0


def test_the_rollback_plan_goes_to_stdout_or_a_file_and_takes_the_partitions_back(start_broker, zk_chroot, tmp_path):
    brokers = start3(start_broker)
    create(brokers, "back", 2, 1, 1)
    before = replicas_of(zk_chroot, "back")
    target = {p: [next(b.broker_id for b in brokers if b.broker_id != r[0])] for p, r in before.items()}
    plan = tmp_path / "plan.json"
    plan.write_text(plan_of(target, "back"))

    # `--execute > rollback.json`: stdout is the rollback plan alone; the moves and the note on stderr
    r = cli("topic", "reassign", plan, "--execute", "-z", zk_chroot)
    rollback = ok(r)
    assert json.loads(rollback)["partitions"] == [
        {"topic": "back", "partition": p, "replicas": before[p], "log_dirs": ["any"]} for p in sorted(before)
    ]
    assert tsv(r.stderr)[0] == ["TOPIC", "PARTITION", "CURRENT", "TARGET", "MOVES"]
    assert "the rollback plan is on stdout" in r.stderr
    saved = tmp_path / "rollback.json"
    saved.write_text(rollback)
    wait_until(lambda: _done(zk_chroot, plan), 60, "the moves done")
    assert replicas_of(zk_chroot, "back") == target

    # the saved plan is this command's input: with --rollback-file, the plan of the way back again goes to
    # that file (before anything moves) and the moves to stdout
    again = tmp_path / "again.json"
    moves = ok(cli("topic", "reassign", saved, "--execute", "--rollback-file", again, "-z", zk_chroot))
    assert tsv(moves)[0] == ["TOPIC", "PARTITION", "CURRENT", "TARGET", "MOVES"] and len(tsv(moves)) == 3
    assert json.loads(again.read_text()) == json.loads(plan_of(target, "back")) | {
        "partitions": [dict(e, log_dirs=["any"]) for e in json.loads(plan_of(target, "back"))["partitions"]]
    }
    wait_until(lambda: _done(zk_chroot, saved), 60, "the rollback done")
    assert replicas_of(zk_chroot, "back") == before

    # a rollback file is never overwritten, and --rollback-file goes with --execute only
    error_line(cli("topic", "reassign", plan, "--execute", "--rollback-file", again, "-z", zk_chroot),
               f"{again}: exists already")  # fmt: skip
    assert replicas_of(zk_chroot, "back") == before
    r = cli("topic", "reassign", plan, "--rollback-file", tmp_path / "x.json", "-z", zk_chroot)
    assert r.returncode == 2 and "--rollback-file goes with --execute" in r.stderr
    # nothing to move: no plan on stdout
    r = cli("topic", "reassign", saved, "--execute", "-z", zk_chroot)
    assert r.returncode == 0 and "nothing to move" in r.stderr and not r.stdout.startswith("{")


def test_elect_leaders_says_which_partitions_moved_and_why_the_others_did_not(start_broker, zk_chroot):
    brokers = start3(start_broker)
    create(brokers, "who", 3, 3, 1)
    preferred = {p: r[0] for p, r in replicas_of(zk_chroot, "who").items()}
    victim = brokers[0]
    assert victim.stop() == 0
    theirs = {p for p, first in preferred.items() if first == victim.broker_id}
    r = cli("topic", "elect-leaders", "who", "-z", zk_chroot, "-o", "json")
    assert r.returncode == 1 and f"{len(theirs)} partition(s) not on their preferred replica" in r.stderr
    rows = {d["partition"]: d for d in json_lines(r.stdout)}
    for p, d in rows.items():
        if p in theirs:
            assert d["result"] == f"preferred replica {victim.broker_id} is down" and not d["moved"]
        else:
            assert d["result"] == "already on its preferred replica" and d["leader"] == d["previous_leader"]
    victim.start()
    wait_until(lambda: full_isr(zk_chroot, "who"), 30, "the restarted broker back in every ISR")
    was = {p: st["leader"] for p, st in states(zk_chroot, "who").items()}
    r = cli("topic", "elect-leaders", "who", "-z", zk_chroot)
    table = tsv(ok(r))
    assert table[0] == ["TOPIC", "PARTITION", "FROM", "TO", "RESULT"]
    got = {int(row[1]): row[2:] for row in table[1:]}
    for p in preferred:
        if p in theirs:  # moved back, from the broker that led it meanwhile
            assert got[p] == [str(was[p]), str(victim.broker_id), "moved"]
        else:
            assert got[p] == [str(preferred[p]), "", "already on its preferred replica"]
    assert f"{len(theirs)} partition(s) moved to their preferred replica" in r.stderr
    assert {p: st["leader"] for p, st in states(zk_chroot, "who").items()} == preferred


def _cluster_pids(home: Path) -> list[int]:
    files = [*sorted(home.glob("clusters/*/run/broker-*.pid")), *home.glob("clusters/*/run/zookeeper-*.pid"),
             *home.glob("clusters/*/zookeeper/zookeeper_server.pid")]  # fmt: skip
    return [pid for f in files if (pid := read_pid(f)) is not None]


def test_cluster_up_listens_on_the_ports_asked_for(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    zk_port, base = free_port(), free_port()
    while base + 1 == zk_port or not _free(base + 1):
        base = free_port()
    try:
        st = json.loads(ok(cli("cluster", "up", "-n", "2", "--zookeeper-port", zk_port, "--base-port", base,
                               "-o", "json", home=home, timeout=180)))  # fmt: skip
        assert st["state"] == "up" and st["zookeeper"]["address"] == f"127.0.0.1:{zk_port}"
        assert [(b["id"], b["port"]) for b in st["brokers"]] == [(1, base), (2, base + 1)]
        saved = json.loads((home / "clusters" / "local" / "cluster.json").read_text())
        assert saved["zookeeper_port"] == zk_port and saved["brokers"] == [{"id": 1, "port": base},
                                                                          {"id": 2, "port": base + 1}]  # fmt: skip
        # a running part cannot move; the same ports are fine (nothing to start)
        other = free_port()
        error_line(cli("cluster", "up", "--base-port", other, home=home), f"broker 1 runs on port {base}, not {other}")
        assert "already up" in ok(cli("cluster", "up", "--base-port", base, home=home))
        # down, then up elsewhere: the new ports are saved
        ok(cli("cluster", "down", home=home, timeout=120))
        moved = free_port()
        while not _free(moved + 1):
            moved = free_port()
        st = json.loads(ok(cli("cluster", "up", "--base-port", moved, "-o", "json", home=home, timeout=180)))
        assert [b["port"] for b in st["brokers"]] == [moved, moved + 1] and st["state"] == "up"
        ok(cli("cluster", "down", home=home, timeout=120))
    finally:
        for pid in _cluster_pids(home):
            terminate(pid)
    # a port taken by another process is an error, never silently replaced
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        r = cli("cluster", "up", "--name", "busy", "-n", "1", "--base-port", taken, home=home)
        error_line(r, f"{taken} (for broker 1)", "taken by another process")
    assert _cluster_pids(home) == []
    r = cli("cluster", "up", "--name", "clash", "-n", "2", "--zookeeper-port", base + 1, "--base-port", base,
            home=home)  # fmt: skip
    assert r.returncode == 2 and "is also a broker's" in r.stderr


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_schema_registry_stop_finds_a_registry_started_on_another_port(zk_chroot, tmp_path):
    home = tmp_path / "home"
    port = free_port()
    out = ok(cli("schema-registry", "start", "--daemon", "-p", port, "-z", zk_chroot, home=home))
    pid = read_pid(home / "run" / f"schema-registry-{port}.pid")
    try:
        assert f"http://127.0.0.1:{port}" in out and pid is not None
        assert ok(cli("schema-registry", "stop", home=home)) == f"schema registry on port {port} stopped (pid {pid})\n"
        wait_until(lambda: read_pid(home / "run" / f"schema-registry-{port}.pid") is None, 10, "the pid file gone")
        error_line(cli("schema-registry", "stop", home=home), "no schema registry started by kafkactl is running")
    finally:
        if pid is not None:
            terminate(pid)


def test_two_registries_need_a_port_to_stop_one(zk_chroot, tmp_path):
    home = tmp_path / "home"
    ports = sorted({free_port(), free_port()})
    pids = []
    try:
        for port in ports:
            ok(cli("schema-registry", "start", "--daemon", "-p", port, "-z", zk_chroot, home=home))
            pids.append(read_pid(home / "run" / f"schema-registry-{port}.pid"))
        r = cli("schema-registry", "stop", home=home)
        assert r.returncode == 2 and f"ports {ports[0]}, {ports[1]}: give --port" in r.stderr
        ok(cli("schema-registry", "stop", "-p", ports[1], home=home))
        assert ok(cli("schema-registry", "stop", home=home)).startswith(f"schema registry on port {ports[0]} stopped")
    finally:
        for pid in pids:
            if pid is not None:
                terminate(pid)
