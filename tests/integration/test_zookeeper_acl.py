"""ZooKeeper digest auth and `zookeeper.set.acl`: a client without the broker's credentials reads the
registries but cannot change them, and cannot read the users' credentials at all."""

from __future__ import annotations

import subprocess

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from broker.protocol.api import ApiKey
from broker.zk import paths
from tests.cli_runner import run_cli
from tests.integration.helpers import cli_env, connect, error_line, metadata, ok, wait_until, zk_session

DIGEST = "kafka:zk-secret"


def kafkactl(*args: str, digest: str | None = None, **env: str) -> subprocess.CompletedProcess:
    extra = {"KAFKACTL_ZOOKEEPER_AUTH": digest} if digest else {}
    extra.update(env)
    return run_cli(list(args), cli_env(**extra))


def test_set_acl_protects_the_registries(start_broker, zk_chroot: str, tmp_path) -> None:
    b = start_broker(1, {"zookeeper.digest.auth": DIGEST, "zookeeper.set.acl": "true"})
    ok(kafkactl("topic", "create", "guarded", "--partitions", "2", "-b", b.bootstrap))
    ok(kafkactl("user", "add", "alice", "--password", "alice-pw", "-z", zk_chroot, digest=DIGEST))
    wait_until(lambda: any(t["name"] == "guarded" and not t["error_code"] for t in metadata(b.bootstrap)["topics"]),
               10, "the topic")  # fmt: skip

    with zk_session(zk_chroot) as anyone:
        # readable by anyone: the registries
        assert anyone.get(paths.topic("guarded"))[0]
        assert anyone.get_children(paths.BROKER_IDS) == ["1"]
        # but not writable, nor deletable
        with pytest.raises(NoAuthError):
            anyone.set(paths.topic("guarded"), b'{"version":1,"partitions":{}}')
        with pytest.raises(NoAuthError):
            anyone.create(paths.topic("guarded") + "/partitions/9", b"")
        with pytest.raises(NoAuthError):
            anyone.delete(paths.partition_state("guarded", 0))
        # and the credentials are not readable at all
        with pytest.raises(NoAuthError):
            anyone.get(paths.user_config("alice"))
        # nobody without credentials plants an ACL (the trees exist from the broker's start), a user, or a
        # change notification
        for path in ("/kafka-acl/Cluster/kafka-cluster", "/kafka-acl-extended/prefixed/Cluster/kafka",
                     "/kafka-acl/Topic/guarded", "/kafka-acl-changes/acl_changes_0000000099",
                     paths.user_config("mallory")):  # fmt: skip
            with pytest.raises(NoAuthError):
                anyone.create(path, b'{"version":1,"acls":[{"principal":"User:*","permissionType":"Allow",'
                                    b'"operation":"All","host":"*"}]}')  # fmt: skip

    # DescribeConfigs never shows the ZooKeeper password
    with connect(b.bootstrap) as conn:
        described = conn.request(ApiKey.DESCRIBE_CONFIGS, {"resources": [
            {"resource_type": 4, "resource_name": "1", "configuration_keys": ["zookeeper.digest.auth"]}]})  # fmt: skip
    [entry] = described["results"][0]["configs"]
    assert entry["value"] is None and entry["is_sensitive"], entry

    # the broker's own writes still work: a second topic, and data through it
    ok(kafkactl("topic", "create", "guarded2", "-b", b.bootstrap))
    with connect(b.bootstrap) as conn:
        answer = conn.request(ApiKey.METADATA, {"topics": [{"name": "guarded2"}], "allow_auto_topic_creation": False})
    assert answer["topics"][0]["error_code"] == 0

    # a client with the credentials may change what the broker made (the operator's tools)
    owner = KazooClient(hosts=zk_chroot, auth_data=[("digest", DIGEST)])
    owner.start(timeout=15)
    try:
        assert b"SCRAM-SHA-256" in owner.get(paths.user_config("alice"))[0]
        data, stat = owner.get(paths.topic("guarded"))
        owner.set(paths.topic("guarded"), data, version=stat.version)
    finally:
        owner.stop()
        owner.close()
    # a command without them cannot add a user
    for argv in (("user", "add", "mallory", "--password", "x"), ("user", "list"), ("user", "delete", "alice")):
        assert "ZooKeeper refused" in error_line(kafkactl(*argv, "-z", zk_chroot), "KAFKACTL_ZOOKEEPER_AUTH")
    # a context's zookeeper-auth serves as well as the variable
    (tmp_path / "kafkactl").mkdir()
    (tmp_path / "kafkactl" / "config.toml").write_text(
        f'current-context = "zk"\n[contexts.zk]\nzookeeper = "{zk_chroot}"\nzookeeper-auth = "{DIGEST}"\n'
    )
    ok(kafkactl("user", "add", "carol", "--password", "carol-pw", XDG_CONFIG_HOME=str(tmp_path)))
    with zk_session(zk_chroot) as anyone, pytest.raises(NoAuthError):
        anyone.get(paths.user_config("carol"))


def test_set_acl_without_credentials_is_one_error_line(start_broker) -> None:
    with pytest.raises(RuntimeError, match="zookeeper.set.acl=true needs ZooKeeper credentials"):
        start_broker(1, {"zookeeper.set.acl": "true"})
