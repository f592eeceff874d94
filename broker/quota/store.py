"""Client quotas in ZooKeeper, where and as ZooKeeper-mode Kafka 2.8 (`kafka-configs.sh`, AdminZkClient) keeps them.

An entity is a user, a client id, or a user's client id; `<default>` (`paths.DEFAULT_ENTITY`) names the
default user or client id. Its quotas are keys of the znode's config map (`paths.quota_config`), values as
kafka-configs writes them (strings: the byte rates as longs, `request_percentage` as a double):
`/config/users/alice` = {"version":1,"config":{"producer_byte_rate":"1024","SCRAM-SHA-256":"salt=..."}}.
A user's znode holds its SCRAM credentials too (broker/security/credentials.py): a change reads the whole
config, changes only its quota keys and writes it back conditionally on the znode's version, so neither
kind of key is lost to a concurrent writer. Each change writes a `/config/changes` notification naming the
entity (`{"version":2,"entity_path":"users/alice/clients/app"}`), which every broker watches.
Kafka leaves an entity's znode in place when its last quota goes (with an empty config); so does this.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import NamedTuple

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from broker.zk import client as zkclient
from broker.zk import paths

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
#: the quota keys, and whether each is a long (else a double), as Kafka's DynamicConfig.Client/QuotaConfigs
QUOTA_KEYS: dict[str, bool] = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True, REQUEST_PERCENTAGE: False}

USER = "user"
CLIENT_ID = "client-id"


class Entity(NamedTuple):
    """A quota entity: the user and the client id (None: not part of it; `paths.DEFAULT_ENTITY`: the default)."""

    user: str | None
    client_id: str | None

    def wire(self) -> list[dict[str, str | None]]:
        """The entity as DescribeClientQuotas/AlterClientQuotas carry it (a default's name is null)."""
        out: list[dict[str, str | None]] = []
        for kind, name in ((USER, self.user), (CLIENT_ID, self.client_id)):
            if name is not None:
                out.append({"entity_type": kind, "entity_name": None if name == paths.DEFAULT_ENTITY else name})
        return out


def _desanitize(node: str) -> str:
    return node if node == paths.DEFAULT_ENTITY else urllib.parse.unquote(node)


def format_value(key: str, value: float) -> str:
    """A quota value as kafka-configs and Kafka's AlterClientQuotas write it: a long's digits, a double's text."""
    if QUOTA_KEYS.get(key, False):
        return str(int(value + 1e-6))
    return repr(float(value))


def quota_values(config: dict[str, str]) -> dict[str, float]:
    """The quota keys of a config map as numbers (unreadable values left out)."""
    out = {}
    for key in QUOTA_KEYS:
        if key in config:
            try:
                out[key] = float(config[key])
            except ValueError:
                continue
    return out


def _read(zk: KazooClient, path: str) -> tuple[dict[str, str], int | None]:
    try:
        data, stat = zk.get(path)
    except NoNodeError:
        return {}, None
    try:
        return paths.parse_config(data), stat.version
    except (ValueError, AttributeError):
        return {}, stat.version


def _children(zk: KazooClient, path: str) -> list[str]:
    try:
        return sorted(zk.get_children(path))
    except NoNodeError:
        return []


def read_all(zk: KazooClient) -> dict[Entity, dict[str, float]]:
    """Every entity with at least one quota → its quotas."""
    out: dict[Entity, dict[str, float]] = {}

    def take(entity: Entity, path: str) -> None:
        values = quota_values(_read(zk, path)[0])
        if values:
            out[entity] = values

    for unode in _children(zk, paths.CONFIG_USERS):
        user = _desanitize(unode)
        take(Entity(user, None), f"{paths.CONFIG_USERS}/{unode}")
        for cnode in _children(zk, paths.user_clients(unode)):
            take(Entity(user, _desanitize(cnode)), f"{paths.user_clients(unode)}/{cnode}")
    for cnode in _children(zk, paths.CONFIG_CLIENTS):
        take(Entity(None, _desanitize(cnode)), f"{paths.CONFIG_CLIENTS}/{cnode}")
    return out


def read_entity(zk: KazooClient, entity: Entity) -> dict[str, float]:
    """One entity's quotas ({} for none)."""
    return quota_values(_read(zk, paths.quota_config(entity.user, entity.client_id))[0])


def notify(zk: KazooClient, entity: Entity) -> None:
    """Write the change notification every broker (Kafka's too) reads the entity's config again on."""
    zk.ensure_path(paths.CONFIG_CHANGES)
    body = {"version": 2, "entity_path": paths.quota_entity_path(entity.user, entity.client_id)}
    zk.create(paths.CONFIG_CHANGE_PREFIX, json.dumps(body).encode(), sequence=True)


def alter(zk: KazooClient, entity: Entity, changes: dict[str, float | None]) -> bool:
    """Set (a number) or remove (None) quota keys of an entity, every other key of its config kept; False when
    nothing changed. A conditional write: a concurrent change (a password set) makes it read and apply again."""
    path = paths.quota_config(entity.user, entity.client_id)
    # users' znodes hold credentials: created with the credentials' ACL, as credentials.py creates them
    acl = zkclient.znode_acl(sensitive=entity.user is not None)
    while True:
        config, version = _read(zk, path)
        new = dict(config)
        for key, value in changes.items():
            if value is None:
                new.pop(key, None)
            else:
                new[key] = format_value(key, value)
        if new == config and (version is not None or not new):
            return False
        try:
            if version is None:
                parent = path.rsplit("/", 1)[0]
                zk.ensure_path(parent, acl=acl)
                zk.create(path, paths.config_json(new), acl=acl)
            else:
                zk.set(path, paths.config_json(new), version=version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue  # changed meanwhile: read it again
        notify(zk, entity)
        return True
