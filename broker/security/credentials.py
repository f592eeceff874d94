"""Users' SCRAM credentials in ZooKeeper, where and as `kafka-configs.sh --entity-type users` keeps them.

`/config/users/<user>` holds `{"version":1,"config":{"SCRAM-SHA-256":"salt=..,stored_key=..,server_key=..,
iterations=4096"}}` (other keys of a user's config, such as quotas, are kept as they are), and each change
writes `/config/changes/config_change_<seq>` = `{"version":2,"entity_path":"users/<user>"}` for brokers that
cache credentials (Apache Kafka's do; kafkactl's brokers read a user's node at each login, so a new password
or a deleted user takes effect at the next connection).
"""

from __future__ import annotations

import json
import urllib.parse

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from broker.errors import KafkactlError
from broker.security.scram import MECHANISMS, ScramCredential, ScramError
from broker.zk import client as zkclient
from broker.zk import paths


def _read(zk: KazooClient, name: str) -> tuple[dict[str, str], int | None]:
    try:
        data, stat = zk.get(paths.user_config(name))
    except NoNodeError:
        return {}, None
    return paths.parse_config(data), stat.version


def read_user(zk: KazooClient, name: str) -> dict[str, ScramCredential]:
    """The user's SCRAM credentials by mechanism ({} for an unknown user); unreadable ones are left out."""
    config, _ = _read(zk, name)
    out = {}
    for mechanism in MECHANISMS:
        if mechanism in config:
            try:
                out[mechanism] = ScramCredential.decode(config[mechanism])
            except ScramError:
                continue
    return out


def _notify(zk: KazooClient, name: str) -> None:
    zk.ensure_path(paths.CONFIG_CHANGES)
    entity = f"users/{paths.sanitize_user(name)}"
    zk.create(paths.CONFIG_CHANGE_PREFIX, json.dumps({"version": 2, "entity_path": entity}).encode(), sequence=True)


def _update(zk: KazooClient, name: str, change: dict[str, str | None]) -> bool:
    """Apply `change` (mechanism → credential string, or None to remove) to the user's config with a
    conditional write; the node goes when nothing is left in it (and no client quota of the user is below
    it). False when nothing changed."""
    path = paths.user_config(name)
    while True:
        config, version = _read(zk, name)
        new = dict(config)
        for key, value in change.items():
            if value is None:
                new.pop(key, None)
            else:
                new[key] = value
        if new == config and version is not None:
            return False
        try:
            if version is None:
                if not new:
                    return False
                secret = zkclient.znode_acl(sensitive=True)  # (None: ZooKeeper's open default)
                zk.ensure_path(paths.CONFIG_USERS, acl=secret)
                zk.create(path, paths.config_json(new), acl=secret)
            elif new:
                zk.set(path, paths.config_json(new), version=version)
            else:
                try:
                    zk.delete(path, version=version)
                except NotEmptyError:  # the user's per-client-id quotas live below it: it stays, empty
                    zk.set(path, paths.config_json(new), version=version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue  # changed meanwhile: read it again
        _notify(zk, name)
        return True


def write_user(zk: KazooClient, name: str, credentials: dict[str, ScramCredential]) -> None:
    """Set the user's credentials for these mechanisms (others it has are kept)."""
    if not name:
        raise KafkactlError("a user name must not be empty")
    _update(zk, name, {m: c.encode() for m, c in credentials.items()})


def alter_user(zk: KazooClient, name: str, upserts: dict[str, ScramCredential], deletes: list[str]) -> bool:
    """Set some of the user's credentials and remove others, in one write (AlterUserScramCredentials)."""
    return _update(zk, name, {**dict.fromkeys(deletes), **{m: c.encode() for m, c in upserts.items()}})


def delete_user(zk: KazooClient, name: str, mechanisms: list[str] | None = None) -> bool:
    """Remove the user's credentials (of `mechanisms`, or all); False when it had none of them."""
    return _update(zk, name, {m: None for m in (mechanisms or list(MECHANISMS))})


def list_users(zk: KazooClient) -> dict[str, list[str]]:
    """Every user with SCRAM credentials → its mechanisms."""
    try:
        nodes = zk.get_children(paths.CONFIG_USERS)
    except NoNodeError:
        return {}
    out = {}
    for node in sorted(nodes):
        name = urllib.parse.unquote(node)
        mechanisms = sorted(read_user(zk, name))
        if mechanisms:
            out[name] = mechanisms
    return out
