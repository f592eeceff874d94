"""`kafkactl zk ls | get | tree | registries` (and `--watch`) against a real ZooKeeper and a real broker.

What the commands print is checked against ZooKeeper's own data, read here with plain kazoo calls.
"""

from __future__ import annotations

import base64
import json
import queue
import signal
import subprocess
import sys
import threading
from datetime import datetime
from typing import Any

import pytest
from kazoo.client import KazooClient

from broker.zk import consumers, paths
from tests.integration.helpers import cli, cli_env, error_line, json_lines, ok, tsv, zk_session


def zk(hosts: str, *args: object) -> subprocess.CompletedProcess:
    return cli("zk", *args, "-z", hosts)


def one_json(result: subprocess.CompletedProcess) -> dict[str, Any]:
    (doc,) = json_lines(ok(result))
    return doc


def hex_session(session_id: int) -> str | None:
    return f"0x{session_id & 0xFFFF_FFFF_FFFF_FFFF:x}" if session_id else None


def ms(iso: str) -> int:
    return round(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


# --- the registries, against a real broker ---------------------------------------------------------


@pytest.fixture(scope="module")
def b(shared_broker):
    return shared_broker


def expected_registries(client: KazooClient) -> dict[str, Any]:
    """The registries as read here with raw kazoo calls: what `zk registries -o json` must say."""
    brokers = []
    for child in sorted(client.get_children("/brokers/ids"), key=int):
        data, stat = client.get(f"/brokers/ids/{child}")
        obj = json.loads(data)
        brokers.append({"id": int(child), "endpoint": f"{obj['host']}:{obj['port']}", "host": obj["host"],
                        "port": obj["port"], "rack": obj["rack"], "endpoints": obj["endpoints"],
                        "session": hex_session(stat.ephemeralOwner), "ts": int(obj["timestamp"])})  # fmt: skip
    topics = []
    for name in sorted(client.get_children("/brokers/topics")):
        assignment = json.loads(client.get(f"/brokers/topics/{name}")[0])["partitions"]
        parts = []
        for p in sorted(assignment, key=int):
            state = json.loads(client.get(f"/brokers/topics/{name}/partitions/{p}/state")[0])
            parts.append({"partition": int(p), "replicas": assignment[p], "leader": state["leader"],
                          "leader_epoch": state["leader_epoch"], "isr": state["isr"],
                          "controller_epoch": state["controller_epoch"]})  # fmt: skip
        topics.append({"topic": name, "partitions": parts})
    data, stat = client.get("/controller")
    controller = {"broker_id": json.loads(data)["brokerid"], "epoch": int(client.get("/controller_epoch")[0]),
                  "session": hex_session(stat.ephemeralOwner)}  # fmt: skip
    groups = []
    for g in sorted(client.get_children("/consumers")):
        base = f"/consumers/{g}"
        members = []
        has_ids = client.exists(f"{base}/ids") is not None
        for c in sorted(client.get_children(f"{base}/ids")) if has_ids else []:
            sub = json.loads(client.get(f"{base}/ids/{c}")[0])["subscription"]
            members.append({"id": c, "subscription": sorted(sub)})
        rows: dict[tuple[str, int], dict[str, Any]] = {}
        for kind in ("owners", "offsets"):
            if client.exists(f"{base}/{kind}") is None:
                continue
            for t in client.get_children(f"{base}/{kind}"):
                for child in client.get_children(f"{base}/{kind}/{t}"):
                    data, stat = client.get(f"{base}/{kind}/{t}/{child}")
                    if kind == "owners":
                        found = {int(child): (data.decode(), None, None)}
                    else:  # (an offset block: a row per partition in it)
                        entries = paths.parse_offset_block(data).items()
                        found = {p: (None, e.stored.offset, e.at_ms) for p, e in entries}
                    for p, (owner, offset, at_ms) in found.items():
                        row = rows.setdefault((t, p), {"topic": t, "partition": p, "owner": None, "offset": None,
                                                       "committed_ms": None})  # fmt: skip
                        if kind == "owners":
                            row["owner"] = owner
                        else:
                            row["offset"], row["committed_ms"] = offset, at_ms
        groups.append({"group": g, "kind": "zookeeper" if has_ids else "broker", "members": members,
                       "partitions": [rows[k] for k in sorted(rows)]})  # fmt: skip
    return {"brokers": brokers, "topics": topics, "controller": controller, "groups": groups}


def comparable(doc: dict[str, Any]) -> dict[str, Any]:
    """`zk registries -o json` with its ISO times turned into epoch ms, shaped as `expected_registries`."""
    out = json.loads(json.dumps(doc))
    for br in out["brokers"]:
        br["ts"] = ms(br.pop("registered"))
    since = out["controller"].pop("since")
    assert since is not None
    for g in out["groups"]:
        for p in g["partitions"]:
            committed = p.pop("committed")
            p["committed_ms"] = None if committed is None else ms(committed)
    return out


def test_registries_match_what_zookeeper_holds(b):
    ok(cli("topic", "create", "zkorders", "-p", "3", "-b", b.bootstrap))
    with zk_session(b.zk_connect) as client:
        consumers.register(client, "zkg1", "zkg1-c1", ["zkorders"])
        consumers.register(client, "zkg1", "zkg1-c2", ["zkorders", "other"])
        assert consumers.claim(client, "zkg1", "zkorders", 0, "zkg1-c1")
        assert consumers.claim(client, "zkg1", "zkorders", 2, "zkg1-c2")
        consumers.commit(client, "zkg1", {("zkorders", 0): 5, ("zkorders", 1): 7})
        consumers.commit(client, "zkg2", {("zkorders", 2): 11})  # a broker-coordinated group: offsets only

        doc = one_json(zk(b.zk_connect, "registries", "-o", "json"))
        assert comparable(doc) == expected_registries(client)

        # what the test set up is there, as written
        (br,) = doc["brokers"]
        assert (br["id"], br["endpoint"]) == (1, b.bootstrap)
        assert br["session"] is not None and br["session"] == doc["controller"]["session"]
        (t,) = [t for t in doc["topics"] if t["topic"] == "zkorders"]
        assert [(p["partition"], p["replicas"], p["leader"], p["isr"]) for p in t["partitions"]] == [
            (0, [1], 1, [1]), (1, [1], 1, [1]), (2, [1], 1, [1])
        ]  # fmt: skip
        assert doc["controller"]["broker_id"] == 1 and doc["controller"]["epoch"] >= 1
        g1, g2 = (next(g for g in doc["groups"] if g["group"] == name) for name in ("zkg1", "zkg2"))
        assert g1["kind"] == "zookeeper" and g2["kind"] == "broker"
        assert g1["members"] == [{"id": "zkg1-c1", "subscription": ["zkorders"]},
                                 {"id": "zkg1-c2", "subscription": ["other", "zkorders"]}]  # fmt: skip
        assert [(p["partition"], p["owner"], p["offset"]) for p in g1["partitions"]] == [
            (0, "zkg1-c1", 5), (1, None, 7), (2, "zkg1-c2", None)
        ]  # fmt: skip
        assert [(p["topic"], p["partition"], p["owner"], p["offset"]) for p in g2["partitions"]] == [
            ("zkorders", 2, None, 11)
        ]  # fmt: skip

        only = one_json(zk(b.zk_connect, "registries", "--only", "controller", "--only", "brokers", "-o", "json"))
        assert set(only) == {"brokers", "controller"}
        assert only["brokers"] == doc["brokers"] and only["controller"] == doc["controller"]

        text = ok(zk(b.zk_connect, "registries"))
    rows = tsv(text)
    for title in ("# brokers", "# topics", "# controller", "# consumer groups", "# consumers", "# group partitions"):
        assert [title] in rows, text
    assert ["1", b.bootstrap, "", br["session"], br["registered"]] in rows
    assert ["zkorders", "1", "1", "1", "1", "0"] in rows
    assert ["zkg1", "zookeeper", "2", "3"] in rows and ["zkg2", "broker", "0", "1"] in rows
    assert ["zkg1", "zkg1-c2", "other,zkorders"] in rows
    committed = g1["partitions"][0]["committed"]
    assert ["zkg1", "zkorders", "0", "zkg1-c1", "5", committed] in rows
    assert ["zkg1", "zkorders", "2", "zkg1-c2", "-", "-"] in rows


def test_registries_of_an_empty_chroot(zk_chroot):
    doc = one_json(zk(zk_chroot, "registries", "-o", "json"))
    assert doc == {"brokers": [], "topics": [], "controller": {"broker_id": None, "epoch": None, "session": None,
                                                               "since": None}, "groups": []}  # fmt: skip


def test_an_unknown_only_section_is_a_usage_error(zk_chroot):
    r = zk(zk_chroot, "registries", "--only", "nosuch")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith("kafkactl: error: ") and "nosuch" in r.stderr


# --- ls, get, tree ---------------------------------------------------------------------------------


@pytest.fixture
def nodes(zk_chroot):
    """A small tree: /a/{j (JSON), t (text), bin (binary), e (ephemeral, of the yielded session), d/x/y}."""
    with zk_session(zk_chroot) as client:
        client.create("/a/j", b'{"version":1,"list":[1,2]}', makepath=True)
        client.create("/a/t", "héllo".encode())
        client.create("/a/bin", b"\x00\xff\x10")
        client.create("/a/e", b"", ephemeral=True)
        client.create("/a/d/x/y", b"", makepath=True)
        yield client


def test_ls_text_and_json(nodes, zk_chroot):
    assert ok(zk(zk_chroot, "ls", "/a")) == "bin\nd\ne\nj\nt\n"
    assert one_json(zk(zk_chroot, "ls", "/a/", "-o", "json")) == {"path": "/a", "children": ["bin", "d", "e", "j", "t"]}
    assert one_json(zk(zk_chroot, "ls", "/a/j", "-o", "json")) == {"path": "/a/j", "children": []}
    assert one_json(zk(zk_chroot, "ls", "/", "-o", "json"))["children"] == sorted(nodes.get_children("/"))


def test_get_json_matches_the_znode(nodes, zk_chroot):
    doc = one_json(zk(zk_chroot, "get", "/a/j", "-o", "json"))
    data, stat = nodes.get("/a/j")
    assert doc["path"] == "/a/j"
    assert (doc["format"], doc["encoding"], doc["data"]) == ("json", "utf-8", data.decode())
    assert doc["json"] == {"version": 1, "list": [1, 2]}
    s = doc["stat"]
    assert (s["czxid"], s["mzxid"], s["pzxid"], s["version"], s["cversion"], s["aversion"]) == (
        stat.czxid, stat.mzxid, stat.pzxid, stat.version, stat.cversion, stat.aversion
    )  # fmt: skip
    assert (ms(s["ctime"]), ms(s["mtime"])) == (stat.ctime, stat.mtime)
    assert (s["ephemeralOwner"], s["dataLength"], s["numChildren"]) == (None, len(data), 0)

    eph = one_json(zk(zk_chroot, "get", "/a/e", "-o", "json"))
    assert eph["stat"]["ephemeralOwner"] == hex_session(nodes.client_id[0]) is not None
    assert (eph["format"], eph["data"]) == ("empty", "") and "json" not in eph

    text = one_json(zk(zk_chroot, "get", "/a/t", "-o", "json"))
    assert (text["format"], text["encoding"], text["data"]) == ("text", "utf-8", "héllo") and "json" not in text

    binary = one_json(zk(zk_chroot, "get", "/a/bin", "-o", "json"))
    assert (binary["format"], binary["encoding"]) == ("binary", "base64")
    assert base64.b64decode(binary["data"]) == b"\x00\xff\x10"

    parent = one_json(zk(zk_chroot, "get", "/a", "-o", "json"))
    assert parent["stat"]["numChildren"] == 5 and parent["stat"]["cversion"] == nodes.exists("/a").cversion


def test_get_text(nodes, zk_chroot):
    out = ok(zk(zk_chroot, "get", "/a/j"))
    assert out.startswith('{\n  "version": 1,\n  "list": [\n')
    rows = tsv(out)
    _, stat = nodes.get("/a/j")
    assert ["STAT", "VALUE"] in rows
    assert ["czxid", f"0x{stat.czxid:x}"] in rows and ["version", "0"] in rows
    assert ["ephemeralOwner", "none"] in rows and ["numChildren", "0"] in rows
    assert ["ephemeralOwner", hex_session(nodes.client_id[0])] in tsv(ok(zk(zk_chroot, "get", "/a/e")))
    binary = ok(zk(zk_chroot, "get", "/a/bin"))
    assert binary.startswith("(binary data, 3 bytes, in hex)\n00 ff 10\n")
    assert ok(zk(zk_chroot, "get", "/a/t")).startswith("héllo\n")


def test_tree_text_and_json(nodes, zk_chroot):
    session = hex_session(nodes.client_id[0])
    out = ok(zk(zk_chroot, "tree", "/a"))
    lines = out.splitlines()
    assert lines[0] == "/a"
    assert [ln.lstrip("│├└─ ") for ln in lines[1:]] == ["bin", "d", "x", "y", f"e  [ephemeral {session}]", "j", "t"]

    doc = one_json(zk(zk_chroot, "tree", "/a", "-o", "json"))
    assert (doc["path"], doc["numChildren"], doc["truncated"]) == ("/a", 5, False)
    by_name = {c["name"]: c for c in doc["children"]}
    assert list(by_name) == ["bin", "d", "e", "j", "t"]
    assert by_name["e"]["ephemeral"] is True and by_name["e"]["ephemeralOwner"] == session
    assert by_name["j"]["ephemeral"] is False and by_name["j"]["ephemeralOwner"] is None
    assert by_name["d"]["children"][0]["children"][0]["path"] == "/a/d/x/y"

    shallow = one_json(zk(zk_chroot, "tree", "/a", "--depth", "1", "-o", "json"))
    d = next(c for c in shallow["children"] if c["name"] == "d")
    assert (d["children"], d["truncated"], d["numChildren"]) == ([], True, 1)
    assert "d  (+1 children)" in ok(zk(zk_chroot, "tree", "/a", "--depth", "1"))

    whole = one_json(zk(zk_chroot, "tree", "-o", "json"))  # the default: the whole chroot
    assert whole["path"] == "/" and [c["name"] for c in whole["children"]] == sorted(nodes.get_children("/"))


MISSING = [("ls", "/nope"), ("get", "/nope"), ("tree", "/nope"), ("get", "/nope/x", "-o", "json"),
           ("ls", "/nope", "--watch"), ("get", "/nope", "-o", "json", "--watch")]  # fmt: skip


@pytest.mark.parametrize("args", MISSING)
def test_a_missing_znode_is_one_error_line(zk_chroot, args):
    r = zk(zk_chroot, *args)
    error_line(r, f"no znode {args[1]}")
    assert r.returncode == 1 and r.stdout == ""


@pytest.mark.parametrize("path", ["relative", "/a//b", "/a/../b"])
def test_an_invalid_path_is_a_usage_error(zk_chroot, path):
    r = zk(zk_chroot, "get", path)
    error_line(r, path)
    assert r.returncode == 2


def test_a_negative_depth_is_a_usage_error(zk_chroot):
    r = zk(zk_chroot, "tree", "--depth", "-1")
    error_line(r, "--depth -1")
    assert r.returncode == 2


# --- --watch ---------------------------------------------------------------------------------------


class Watcher:
    """`kafkactl zk ... --watch` as a child: its stdout lines in a queue; SIGINT ends it."""

    def __init__(self, *args: object) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kafkactl", "zk", *map(str, args), "--watch"], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=cli_env(),
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # even under a shell that ignores it
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def line(self, timeout: float = 15.0) -> str:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no output within {timeout:g}s (alive: {self.proc.poll() is None})") from None

    def doc(self) -> dict[str, Any]:
        return json.loads(self.line())

    def interrupt(self) -> tuple[int, str]:
        """SIGINT, then (exit code, stderr)."""
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError("did not exit within 20s of SIGINT") from None
        assert self.proc.stderr is not None
        return self.proc.returncode, self.proc.stderr.read()

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def test_watch_get_prints_a_json_line_per_change_and_sigint_exits_cleanly(zk_chroot):
    with zk_session(zk_chroot) as client:
        client.create("/w", b"one")
        with Watcher("get", "/w", "-o", "json", "-z", zk_chroot) as w:
            first = w.doc()
            assert (first["data"], first["stat"]["version"]) == ("one", 0)
            client.set("/w", b"two")
            second = w.doc()
            assert (second["data"], second["stat"]["version"]) == ("two", 1)
            client.create("/w/child")
            assert w.doc()["stat"]["numChildren"] == 1
            code, err = w.interrupt()
    assert code == 0, err
    assert "Traceback" not in err and err == ""


def test_watch_registries_sees_a_commit_and_a_new_consumer(zk_chroot):
    with zk_session(zk_chroot) as client, Watcher("registries", "--only", "groups", "-o", "json", "-z", zk_chroot) as w:
        assert w.doc() == {"groups": []}
        consumers.commit(client, "wg", {("t", 0): 3})
        (g,) = w.doc()["groups"]
        assert (g["group"], g["kind"], g["partitions"][0]["offset"]) == ("wg", "broker", 3)
        consumers.commit(client, "wg", {("t", 0): 4})
        assert w.doc()["groups"][0]["partitions"][0]["offset"] == 4
        consumers.register(client, "wg", "c1", ["t"])
        (g,) = w.doc()["groups"]
        assert (g["kind"], g["members"]) == ("zookeeper", [{"id": "c1", "subscription": ["t"]}])
        code, err = w.interrupt()
    assert code == 0 and "Traceback" not in err, err


def test_watch_tree_text_redraws_on_a_new_znode(zk_chroot):
    with zk_session(zk_chroot) as client, Watcher("tree", "/", "-z", zk_chroot) as w:
        assert w.line().startswith("# ") and w.line() == "/\n"
        client.create("/x/y", makepath=True)
        seen = []
        while not any(ln.endswith("y\n") for ln in seen):
            seen.append(w.line())
        assert any(ln.startswith("# ") for ln in seen)
        code, err = w.interrupt()
    assert code == 0 and "Traceback" not in err, err
