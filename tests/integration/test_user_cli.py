"""`kafkactl user add | delete | list` against a real ZooKeeper: credentials stored as kafka-configs.sh stores
them (and a change notification for each), never a password on screen, bad input one error line."""

from __future__ import annotations

import json

from broker.security.scram import ScramCredential
from tests.integration.helpers import cli, error_line, json_lines, ok, tsv, zk_session


def test_add_list_change_and_delete_users(zk_chroot: str) -> None:
    r = cli("user", "add", "alice", "--password-stdin", "-z", zk_chroot, input_text="alice-secret\n")
    assert "alice-secret" not in ok(r) + r.stderr
    assert r.stdout.strip() == "user alice added (SCRAM-SHA-256, SCRAM-SHA-512, 4096 iterations)"
    bob = ("--password", "bob-pw", "-m", "scram-sha-512", "--iterations", "8192")
    ok(cli("user", "add", "bob", *bob, "-z", zk_chroot))

    with zk_session(zk_chroot) as zk:
        doc = json.loads(zk.get("/config/users/alice")[0])
        assert doc["version"] == 1 and set(doc["config"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
        cred = ScramCredential.decode(doc["config"]["SCRAM-SHA-256"])
        assert cred.iterations == 4096 and cred.check_password("SCRAM-SHA-256", "alice-secret")
        assert doc["config"]["SCRAM-SHA-256"].startswith("salt=") and ",stored_key=" in doc["config"]["SCRAM-SHA-256"]
        changes = sorted(zk.get_children("/config/changes"))
        notes = [json.loads(zk.get(f"/config/changes/{c}")[0]) for c in changes]
        assert notes == [{"version": 2, "entity_path": "users/alice"}, {"version": 2, "entity_path": "users/bob"}]
        assert all(c.startswith("config_change_") for c in changes)

    rows = tsv(ok(cli("user", "list", "-z", zk_chroot)))
    assert rows == [["USER", "MECHANISMS", "ITERATIONS"], ["alice", "SCRAM-SHA-256, SCRAM-SHA-512", "4096, 4096"],
                    ["bob", "SCRAM-SHA-512", "8192"]]  # fmt: skip
    docs = json_lines(ok(cli("user", "list", "-z", zk_chroot, "-o", "json")))
    assert docs[1] == {"user": "bob", "mechanisms": {"SCRAM-SHA-512": {"iterations": 8192}}}

    r = cli("user", "add", "alice", "--password-stdin", "-m", "SCRAM-SHA-256", "-z", zk_chroot, input_text="new\n")
    assert ok(r).strip() == "user alice updated (SCRAM-SHA-256, 4096 iterations)"
    with zk_session(zk_chroot) as zk:
        config = json.loads(zk.get("/config/users/alice")[0])["config"]
        assert ScramCredential.decode(config["SCRAM-SHA-256"]).check_password("SCRAM-SHA-256", "new")
        assert ScramCredential.decode(config["SCRAM-SHA-512"]).check_password("SCRAM-SHA-512", "alice-secret")

    ok(cli("user", "delete", "alice", "-m", "SCRAM-SHA-512", "-z", zk_chroot))
    ok(cli("user", "delete", "bob", "-z", zk_chroot))
    docs = json_lines(ok(cli("user", "list", "-z", zk_chroot, "-o", "json")))
    assert docs == [{"user": "alice", "mechanisms": {"SCRAM-SHA-256": {"iterations": 4096}}}]
    with zk_session(zk_chroot) as zk:
        assert not zk.exists("/config/users/bob")
        notes = [json.loads(zk.get(f"/config/changes/{c}")[0]) for c in sorted(zk.get_children("/config/changes"))]
        assert [n["entity_path"] for n in notes][-2:] == ["users/alice", "users/bob"]


def test_bad_input_is_one_error_line(zk_chroot: str) -> None:
    error_line(cli("user", "delete", "nobody", "-z", zk_chroot), "no user 'nobody'")
    error_line(cli("user", "add", "carol", "-z", zk_chroot), "give --password or --password-stdin")
    error_line(cli("user", "add", "carol", "--password", "x", "-m", "MD5", "-z", zk_chroot), "--mechanism 'MD5'")
    r = cli("user", "add", "carol", "--password", "x", "--iterations", "10", "-z", zk_chroot)
    error_line(r, "--iterations: iterations must be between 4096 and 16384")
    error_line(cli("user", "add", "carol", "--password-stdin", "-z", zk_chroot, input_text="\n"), "must not be empty")
    assert json_lines(ok(cli("user", "list", "-z", zk_chroot, "-o", "json"))) == []
