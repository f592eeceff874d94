"""Every znode path kafkactl reads or writes, and the JSON of each, in ZooKeeper-mode Kafka's layout.

| znode | mode | data |
|---|---|---|
| /brokers/ids/<id> | ephemeral | {"version":5,"host","port","jmx_port":-1,"timestamp","endpoints",...} |
| /brokers/topics/<t> | persistent | {"version":2,"partitions":{"0":[1,2]},"adding_replicas":{"0":[3]},
  "removing_replicas":{"0":[1]}}: a partition being reassigned lists target + old replicas, and which are which |
| /brokers/topics/<t>/partitions/<p>/state | persistent | {"version":1,"leader","leader_epoch",
  "controller_epoch","isr"} |
| /controller | ephemeral | {"version":1,"brokerid","timestamp"} |
| /controller_epoch | persistent | decimal |
| /isr_change_notification/isr_change_<seq> | persistent sequential | {"version":1,"partitions":
  [{"topic","partition"}]} |
| /kafkactl/state_changes/change_<ms>_<seq> | persistent sequential | {"version":2,"partitions":[{"topic",
  "partition"[,"topic_id","zk_version","state":{...}]}]}: partition states written by the same multi, each carried
  (its new content and version, written at this znode's czxid) where the writer decided it from a state known to
  be of that topic id, else only named (version 1 named all) (<ms>: when, by the writer's clock); the controller
  deletes those a minute older than the newest (by ZooKeeper's ctime), and sets /kafkactl/state_changes' own data
  to the highest sequence number it deleted (a decimal), in the same multi |
| /config/topics/<t> | persistent | {"version":1,"config":{...}} |
| /config/brokers/<id> | persistent | {"version":1,"config":{...}}: a broker's dynamic config (the replication
  throttle rates `kafkactl topic reassign --throttle` sets) |
| /config/users/<user> | persistent | {"version":1,"config":{"SCRAM-SHA-256":"salt=..,stored_key=..,server_key=..,
  iterations=4096"}}: a user's SCRAM credentials (the name URL-encoded as Kafka's `Sanitizer` does) |
| /config/users/<user>/clients/<client-id> | persistent | {"version":1,"config":{"producer_byte_rate":"1024",...}}:
  client quotas (`producer_byte_rate`, `consumer_byte_rate`, `request_percentage`) of a user, a user's client id,
  or (under /config/clients/<client-id>) a client id; `<default>` names the default entity; a user's quota keys
  share its znode's config with its SCRAM credentials (broker/quota/store.py) |
| /config/clients/<client-id> | persistent | the same, for a client id of any user |
| /config/changes/config_change_<seq> | persistent sequential | {"version":2,"entity_path":"users/<user>"} (or
  "clients/<c>", "users/<u>/clients/<c>": the changed config's path under /config) |
| /admin/delete_topics/<t> | persistent | (empty) — deletion in progress |
| /admin/preferred_replica_election | persistent | {"version":1,"partitions":[{"topic","partition"}]}:
  a request for preferred leaders, which the controller takes (deletes) |
| /admin/reassign_partitions | persistent | {"version":1,"partitions":[{"topic","partition","replicas"}]}: the
  reassignments in progress; the controller removes each partition once its move is done |
| /cluster/id | persistent | {"version":"1","id":"<22-char base64 uuid>"} |
| /latest_producer_id_block | persistent | {"version":1,"broker","block_start","block_end"} |
| /consumers/<g>/ids/<c> | ephemeral | {"version":1,"subscription":{"<t>":1},"pattern":"static","timestamp"} |
| /consumers/<g>/owners/<t>/<p> | ephemeral | the owning consumer id (utf-8) |
| /consumers/<g>/offsets/<t>/block-<n> | persistent | {"version":1,"offsets":{"<p>":[offset, leader_epoch,
  metadata, accepted_ms]}}: the group's commits of partitions n*16 to n*16+15 (`OFFSET_BLOCK`), every write
  conditional on the znode's version |
| /consumers/<g>/offsets/<t>/<p> | persistent | (read, not written: earlier versions) the committed offset, a decimal
  string; an entry of the partition's block wins over it |
| /consumers/<g>/offset_metadata/<t>/<p> | persistent | (read, not written: earlier versions) {"version":1,"offset",
  "leader_epoch","metadata"}: what the commit of that offset carried (see `stored_offset`) |
| /consumers/<g>/generation | persistent | {"version":1,"generation","protocol_type","protocol","leader",
  "members":[{"member_id","group_instance_id","client_id","client_host","session_timeout_ms",
  "rebalance_timeout_ms","protocols":[{"name","metadata"}],"assignment"}]} (bytes in base64) |

The schema registry (`kafkactl schema-registry`, broker/schema_registry/store.py) keeps its state under one root:

| znode | mode | data |
|---|---|---|
| /kafkactl/schema-registry/schema_id | persistent | the last schema id handed out, a decimal (set by version) |
| /kafkactl/schema-registry/schemas/<id> | persistent | {"schema","schemaType"} |
| /kafkactl/schema-registry/fingerprints/<sha256> | persistent | the id of the schema with that canonical text |
| /kafkactl/schema-registry/subjects/<subject>/<version> | persistent | {"id","deleted"} |
| /kafkactl/schema-registry/config | persistent | {"compatibilityLevel"} |
| /kafkactl/schema-registry/subject_configs/<subject> | persistent | {"compatibilityLevel"} |

The transaction coordinators (broker/coordinator/txn/store.py; Kafka keeps this in its `__transaction_state` topic):

| znode | mode | data |
|---|---|---|
| /kafkactl/transactions/<txn id> | persistent | {"version":1,"producer_id","producer_epoch","last_producer_epoch",
  "timeout_ms","state","partitions":[[t,p]],"groups":[g],"start_ms","update_ms","txn_number",
  "coordinator_epoch"}; every change conditional on its znode version; "coordinator_epoch" is the markers' (set at
  a Prepare, raised by one when a Prepare is written again; absent: the Prepare's znode version) |
| /kafkactl/txn_offsets/<g>/<txn id> | persistent | {"version":1,"producer_id","producer_epoch","txn_number",
  "offsets":[[t,p,offset,leader_epoch,metadata]]}: TxnOffsetCommit's offsets, the group's committed offsets once
  the transaction commits (deleted when it ends) |

ACLs (`broker/security/acl_store.py` documents their JSON), where ZooKeeper-mode Kafka keeps them:

| znode | mode | data |
|---|---|---|
| /kafka-acl/<ResourceType>/<name> | persistent | {"version":1,"acls":[{"principal","permissionType","operation",
  "host"}]}: the literal pattern's ACLs (`Topic`, `Group`, `Cluster`, `TransactionalId`, `DelegationToken`) |
| /kafka-acl-extended/prefixed/<ResourceType>/<name> | persistent | the same, for a prefixed pattern |
| /kafka-acl-changes/acl_changes_<seq> | persistent sequential | `<ResourceType>:<name>`: a literal pattern changed |
| /kafka-acl-extended-changes/acl_changes_<seq> | persistent sequential | {"version":1,"resourceType","name",
  "patternType"}: a prefixed pattern changed |

`ids`, `owners` and `offsets` are the paper's consumer, ownership and offset registries. Only kafkactl's
own (ZooKeeper-coordinated) group consumer writes `ids` and `owners`; both kinds of group commit to
`offsets`, so a group with an `ids` node is ZooKeeper-coordinated and one without is the broker's.
A commit keeps with the offset what Kafka keeps with it in `__consumer_offsets` (the metadata string and the
leader epoch). The paper kept a znode per partition; a group commits its partitions in blocks of 16 instead
(one write per block, not two per partition: ZooKeeper's write rate, not the partition count, bounds the
commit rate). The per-partition znodes of earlier versions are still read, under the blocks, and deleted with
the group's offsets; a broker of an earlier version does not read blocks (upgrade every broker together).
`generation` is the broker's group coordinator's last stable generation of a group, what Kafka keeps in
`__consumer_offsets`: a coordinator that takes a group over (its old one died or moved) loads it, so
members keep heartbeating and committing without rejoining.

Timestamps are decimal strings of epoch milliseconds, as Kafka writes them.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.parse
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG_USERS = "/config/users"
CONFIG_CLIENTS = "/config/clients"
CONFIG_CHANGES = "/config/changes"
#: the name of the default user or client id in quota znodes, as Kafka's ConfigEntityName.Default
DEFAULT_ENTITY = "<default>"
CONFIG_CHANGE_PREFIX = f"{CONFIG_CHANGES}/config_change_"
DELETE_TOPICS = "/admin/delete_topics"
CLUSTER_ID = "/cluster/id"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
PREFERRED_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE = "/isr_change_notification"
REASSIGN = "/admin/reassign_partitions"
CONSUMERS = "/consumers"
#: partitions of a topic whose commits by one group share a znode (`group_offset_block`): a commit of many
#: partitions is a write per block, not two per partition
OFFSET_BLOCK = 16
BLOCK_PREFIX = "block-"
#: the most bytes of one commit in a block (mostly its metadata string, escaped): a block of `OFFSET_BLOCK` stays
#: well under ZooKeeper's request limit (jute.maxbuffer, 1 MiB); a larger one is refused (OFFSET_METADATA_TOO_LARGE)
OFFSET_ENTRY_MAX_BYTES = 32 * 1024

#: the schema registry's state (broker/schema_registry/store.py)
SCHEMA_REGISTRY = "/kafkactl/schema-registry"
SCHEMA_ID = f"{SCHEMA_REGISTRY}/schema_id"
SCHEMAS = f"{SCHEMA_REGISTRY}/schemas"
FINGERPRINTS = f"{SCHEMA_REGISTRY}/fingerprints"
SUBJECTS = f"{SCHEMA_REGISTRY}/subjects"
REGISTRY_CONFIG = f"{SCHEMA_REGISTRY}/config"
SUBJECT_CONFIGS = f"{SCHEMA_REGISTRY}/subject_configs"
#: ACLs and their change notifications (broker/security/acl_store.py)
ACL = "/kafka-acl"
ACL_EXTENDED = "/kafka-acl-extended"
ACL_CHANGES = "/kafka-acl-changes"
ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
#: the transaction coordinators' state (broker/coordinator/txn/store.py documents the JSON)
TRANSACTIONS = "/kafkactl/transactions"
TXN_OFFSETS = "/kafkactl/txn_offsets"
#: the state-change notifications: every write of partition states creates one in the same multi, so each broker
#: learns of state changes through one children watch here instead of a data watch per state znode
STATE_CHANGES = "/kafkactl/state_changes"
#: the persistent parents a cluster needs (Kafka creates the same set, and kafkactl its state-change notifications)
ROOTS = (BROKER_IDS, TOPICS, CONFIG_TOPICS, DELETE_TOPICS, ISR_CHANGE, "/cluster", CONSUMERS, CONFIG_CHANGES,
         STATE_CHANGES)  # fmt: skip
#: the resource types' names in ACL znodes, as Kafka writes them
ACL_RESOURCE_TYPES = ("Topic", "Group", "Cluster", "TransactionalId", "DelegationToken")


def broker(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic(name: str) -> str:
    return f"{TOPICS}/{name}"


def partition_state(name: str, partition: int) -> str:
    return f"{TOPICS}/{name}/partitions/{partition}/state"


def topic_config(name: str) -> str:
    return f"{CONFIG_TOPICS}/{name}"


def broker_config(broker_id: int) -> str:
    return f"{CONFIG_BROKERS}/{broker_id}"


def user_config(name: str) -> str:
    return f"{CONFIG_USERS}/{sanitize_user(name)}"


def quota_entity_path(user: str | None, client_id: str | None) -> str:
    """A quota entity's config path below /config (`users/<u>`, `clients/<c>`, `users/<u>/clients/<c>`), the
    form a change notification's `entity_path` names; names sanitized, `DEFAULT_ENTITY` kept as it is."""
    parts = []
    if user is not None:
        parts.append(f"users/{user if user == DEFAULT_ENTITY else sanitize_user(user)}")
    if client_id is not None:
        parts.append(f"clients/{client_id if client_id == DEFAULT_ENTITY else sanitize_user(client_id)}")
    if not parts:
        raise ValueError("a quota entity names a user, a client id or both")
    return "/".join(parts)


def quota_config(user: str | None, client_id: str | None) -> str:
    """A quota entity's znode."""
    return f"/config/{quota_entity_path(user, client_id)}"


def user_clients(sanitized_user: str) -> str:
    """The parent of a user's (sanitized name, or `DEFAULT_ENTITY`) per-client-id quota znodes."""
    return f"{CONFIG_USERS}/{sanitized_user}/clients"


def sanitize_user(name: str) -> str:
    """A user name as one znode name, as Kafka's `Sanitizer` writes it (URL-encoded, `*` as %2A, space as %20)."""
    return urllib.parse.quote(name, safe="").replace("~", "%7E")


def delete_topic(name: str) -> str:
    return f"{DELETE_TOPICS}/{name}"


def group_node(name: str) -> str:
    """A group id as one znode name. Kafka allows any id; a znode name cannot hold `/`, be `.` or `..`,
    or contain some code points, so those (and `%`) are percent-encoded; other ids stay as they are."""
    if name in (".", ".."):
        return name.replace(".", "%2E")
    return "".join(_quote(c) if c in "%/" or not _znode_safe(c) else c for c in name)


def transaction(txn_id: str) -> str:
    """A transactional id's coordinator state (the id quoted as a group's znode name is)."""
    return f"{TRANSACTIONS}/{group_node(txn_id)}"


def txn_offsets(group_id: str) -> str:
    """The parent of a group's pending transactional offset commits, one child per transactional id."""
    return f"{TXN_OFFSETS}/{group_node(group_id)}"


def txn_group_offsets(group_id: str, txn_id: str) -> str:
    """A transaction's pending offsets for one group (TxnOffsetCommit), applied or dropped when it ends."""
    return f"{txn_offsets(group_id)}/{group_node(txn_id)}"


def group_name(node: str) -> str:
    """The group id a `/consumers` child stands for (`group_node` undone)."""
    return urllib.parse.unquote(node) if "%" in node else node


def _quote(c: str) -> str:
    return "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass"))


def _znode_safe(c: str) -> bool:
    o = ord(c)
    return not (o < 0x20 or 0x7F <= o <= 0x9F or 0xD800 <= o <= 0xF8FF or 0xFFF0 <= o <= 0xFFFF)


def group(name: str) -> str:
    return f"{CONSUMERS}/{group_node(name)}"


def group_ids(name: str) -> str:
    return f"{group(name)}/ids"


def group_member(name: str, consumer_id: str) -> str:
    return f"{group(name)}/ids/{consumer_id}"


def group_owners(name: str) -> str:
    return f"{group(name)}/owners"


def group_owner(name: str, topic: str, partition: int) -> str:
    return f"{group(name)}/owners/{topic}/{partition}"


def group_generation(name: str) -> str:
    return f"{group(name)}/generation"


def group_offsets(name: str) -> str:
    return f"{group(name)}/offsets"


def group_topic_offsets(name: str, topic: str) -> str:
    return f"{group(name)}/offsets/{topic}"


def group_offset(name: str, topic: str, partition: int) -> str:
    """A partition's offset znode of an earlier version (read, and deleted with the group's offsets; no longer
    written: `group_offset_block`)."""
    return f"{group(name)}/offsets/{topic}/{partition}"


def group_offset_block(name: str, topic: str, block: int) -> str:
    """The znode holding the group's commits of the topic's partitions `block * OFFSET_BLOCK` up to the next
    block (`offset_block_json`)."""
    return f"{group_offset_blocks(name, topic)}{block}"


def group_offset_blocks(name: str, topic: str) -> str:
    """What the paths of the group's offset blocks of the topic begin with (the block number follows)."""
    return f"{group(name)}/offsets/{topic}/{BLOCK_PREFIX}"


def offset_block_of(partition: int) -> int:
    return partition // OFFSET_BLOCK


def block_number(child: str) -> int | None:
    """The block number of a child of `group_topic_offsets` named as a block; None for any other (a partition's
    znode of an earlier version)."""
    if child.startswith(BLOCK_PREFIX) and child[len(BLOCK_PREFIX) :].isdigit():
        return int(child[len(BLOCK_PREFIX) :])
    return None


def group_offset_metadatas(name: str) -> str:
    return f"{group(name)}/offset_metadata"


def group_topic_offset_metadata(name: str, topic: str) -> str:
    return f"{group(name)}/offset_metadata/{topic}"


def group_offset_metadata(name: str, topic: str, partition: int) -> str:
    return f"{group(name)}/offset_metadata/{topic}/{partition}"


def acl_root(prefixed: bool) -> str:
    """The parent of the resource types' nodes of literal (`/kafka-acl`) or prefixed patterns."""
    return f"{ACL_EXTENDED}/prefixed" if prefixed else ACL


def acl_type(type_name: str, prefixed: bool) -> str:
    return f"{acl_root(prefixed)}/{type_name}"


def acl_resource(type_name: str, name: str, prefixed: bool) -> str:
    """A pattern's ACL node; `type_name` is Kafka's (`Topic`, `TransactionalId`)."""
    return f"{acl_root(prefixed)}/{type_name}/{name}"


def acl_change_root(prefixed: bool) -> str:
    return ACL_EXTENDED_CHANGES if prefixed else ACL_CHANGES


def acl_change(prefixed: bool) -> str:
    """The prefix of a new sequential change notification."""
    return f"{acl_change_root(prefixed)}/{ACL_CHANGE_PREFIX}"


def schema(schema_id: int) -> str:
    return f"{SCHEMAS}/{schema_id}"


def fingerprint(digest: str) -> str:
    return f"{FINGERPRINTS}/{digest}"


def subject(name: str) -> str:
    """A subject's znode; the name encoded as a group id is (any string)."""
    return f"{SUBJECTS}/{group_node(name)}"


def subject_version(name: str, version: int) -> str:
    return f"{subject(name)}/{version}"


def subject_config(name: str) -> str:
    return f"{SUBJECT_CONFIGS}/{group_node(name)}"


def now_ms() -> str:
    return str(int(time.time() * 1000))


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def loads(data: bytes | None) -> Any:
    return json.loads(data) if data else None


def broker_json(host: str, port: int, rack: str | None = None,
                endpoints: list[tuple[str, str, str, int]] | None = None) -> bytes:  # fmt: skip
    """Kafka's v5 registration. `endpoints`: (listener name, security protocol, host, port) of each advertised
    listener (without it: one PLAINTEXT listener at `host`:`port`); the JSON's `host`/`port` are the PLAINTEXT
    listener's, null/-1 without one, as Kafka writes them."""
    eps = endpoints if endpoints is not None else [("PLAINTEXT", "PLAINTEXT", host, port)]
    plain = next(((h, p) for name, _, h, p in eps if name == "PLAINTEXT"), (None, -1))
    return dumps({
        "version": 5, "host": plain[0], "port": plain[1], "jmx_port": -1, "timestamp": now_ms(),
        "endpoints": [f"{name}://{f'[{h}]' if ':' in h else h}:{p}" for name, _, h, p in eps],
        "listener_security_protocol_map": {name: proto for name, proto, _, _ in eps},
        "rack": rack, "features": {},
    })  # fmt: skip


def parse_endpoints(data: bytes) -> list[tuple[str, str, str, int]]:
    """(listener name, security protocol, host, port) of each endpoint of a broker registration; a name the
    registration's protocol map does not name is its own protocol (registrations before v4 have no map)."""
    obj = loads(data) or {}
    protocols = obj.get("listener_security_protocol_map") or {}
    out = []
    for ep in obj.get("endpoints") or []:
        name, _, rest = str(ep).partition("://")
        host, _, port = rest.rpartition(":")
        try:
            out.append((name, protocols.get(name, name), host.strip("[]") or "127.0.0.1", int(port)))
        except ValueError:
            continue
    return out


def parse_broker(data: bytes) -> tuple[str, int, str | None]:
    """(host, port, rack) from a broker registration: the PLAINTEXT endpoint, else host/port."""
    obj = loads(data) or {}
    for ep in obj.get("endpoints") or []:
        proto, _, rest = ep.partition("://")
        if proto == "PLAINTEXT" and rest:
            host, _, port = rest.rpartition(":")
            return host.strip("[]") or "127.0.0.1", int(port), obj.get("rack")
    return obj.get("host") or "127.0.0.1", int(obj.get("port", -1)), obj.get("rack")


def assignment_json(assignment: dict[int, list[int]], adding: dict[int, list[int]] | None = None,
                    removing: dict[int, list[int]] | None = None) -> bytes:  # fmt: skip
    def by_partition(m: dict[int, list[int]] | None) -> dict[str, list[int]]:
        return {str(p): r for p, r in sorted((m or {}).items())}

    return dumps({"version": 2, "partitions": by_partition(assignment), "adding_replicas": by_partition(adding),
                  "removing_replicas": by_partition(removing)})  # fmt: skip


def parse_assignment(data: bytes) -> dict[int, list[int]]:
    return parse_moves(data)[0]


Moves = tuple[dict[int, list[int]], dict[int, list[int]], dict[int, list[int]]]  # replicas, adding, removing


def parse_moves(data: bytes | None) -> Moves:
    """(replicas, adding, removing) by partition, from a topic's assignment znode."""
    obj = loads(data) or {}

    def by_partition(key: str) -> dict[int, list[int]]:
        return {int(p): [int(b) for b in r] for p, r in (obj.get(key) or {}).items()}

    return by_partition("partitions"), by_partition("adding_replicas"), by_partition("removing_replicas")


def reassignment_json(moves: dict[tuple[str, int], list[int]]) -> bytes:
    return dumps({"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": r}
                                               for (t, p), r in sorted(moves.items())]})  # fmt: skip


def parse_reassignment(data: bytes | None) -> dict[tuple[str, int], list[int]]:
    obj = loads(data) or {}
    entries = obj.get("partitions") or []
    return {(str(e["topic"]), int(e["partition"])): [int(b) for b in e["replicas"]] for e in entries}


def state_dict(leader: int, leader_epoch: int, isr: list[int], controller_epoch: int = 1) -> dict[str, Any]:
    """A partition state znode's content (Kafka's `/brokers/topics/<t>/partitions/<p>/state`), as an object."""
    return {"version": 1, "leader": leader, "leader_epoch": leader_epoch, "controller_epoch": controller_epoch,
            "isr": isr}  # fmt: skip


def state_json(leader: int, leader_epoch: int, isr: list[int], controller_epoch: int = 1) -> bytes:
    return dumps(state_dict(leader, leader_epoch, isr, controller_epoch))


def partitions_json(tps: list[tuple[str, int]]) -> bytes:
    return dumps({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in tps]})


def parse_partitions(data: bytes | None) -> set[tuple[str, int]]:
    obj = loads(data) or {}
    return {(str(e["topic"]), int(e["partition"])) for e in obj.get("partitions") or []}


class CarriedState(NamedTuple):
    """A partition state a state-change notification carries: what its znode holds from the notification's
    own zxid (the multi that wrote both), at `zk_version`, for the topic of id `topic_id`."""

    topic: str
    partition: int
    topic_id: int
    zk_version: int
    state: dict[str, Any]


def state_changes_json(named: list[tuple[str, int]], carried: list[CarriedState]) -> bytes:
    """A state-change notification: the partitions whose states its multi wrote, each with its new state and the
    version its write makes where the writer knows the state was that topic id's (`carried`), else only named."""
    return dumps({"version": 2, "partitions": [
        *({"topic": t, "partition": p} for t, p in named),
        *({"topic": c.topic, "partition": c.partition, "topic_id": c.topic_id, "zk_version": c.zk_version,
           "state": c.state} for c in carried),
    ]})  # fmt: skip


def parse_state_changes(data: bytes | None) -> tuple[set[tuple[str, int]], list[CarriedState]]:
    """A state-change notification's partitions: those only named (to be read), and those it carries. ValueError
    (or KeyError, TypeError, AttributeError) for what is not a notification."""
    named: set[tuple[str, int]] = set()
    carried: list[CarriedState] = []
    for e in (loads(data) or {}).get("partitions") or []:
        t, p, state = str(e["topic"]), int(e["partition"]), e.get("state")
        tid, version = e.get("topic_id"), e.get("zk_version")
        if isinstance(state, dict) and type(tid) is int and type(version) is int and version >= 0:
            carried.append(CarriedState(t, p, tid, version, state))
        else:
            named.add((t, p))
    return named, carried


def state_change_prefix(now_ms: int | None = None) -> str:
    """The path a state-change notification is created at (ZooKeeper appends the sequence number)."""
    return f"{STATE_CHANGES}/change_{int(time.time() * 1000) if now_ms is None else now_ms}_"


def state_change_seq(child: str) -> int | None:
    """A state-change notification's sequence number (from its name under STATE_CHANGES); None for another name."""
    parts = child.split("_")
    return int(parts[2]) if len(parts) == 3 and parts[0] == "change" and parts[2].isdigit() else None


def highest_state_change(children: Iterable[str]) -> int:
    """The highest sequence number among these names of state-change notifications (-1: none)."""
    return max((seq for c in children if (seq := state_change_seq(c)) is not None), default=-1)


def parse_pruned_through(data: bytes | None) -> int:
    """STATE_CHANGES' own data: the highest sequence number of the notifications deleted so far (-1: none)."""
    text = (data or b"").decode(errors="replace").strip()
    return int(text) if text.isdigit() else -1


def config_json(config: dict[str, str]) -> bytes:
    return dumps({"version": 1, "config": config})


def parse_config(data: bytes | None) -> dict[str, str]:
    obj = loads(data) or {}
    return {str(k): str(v) for k, v in (obj.get("config") or {}).items()}


def controller_json(broker_id: int) -> bytes:
    return dumps({"version": 1, "brokerid": broker_id, "timestamp": now_ms()})


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def cluster_id_json(cluster_id: str) -> bytes:
    return dumps({"version": "1", "id": cluster_id})


def producer_block_json(broker_id: int, start: int, end: int) -> bytes:
    return dumps({"version": 1, "broker": broker_id, "block_start": str(start), "block_end": str(end)})


class StoredOffset(NamedTuple):
    """A committed offset with what Kafka keeps beside it: the leader epoch of the committed position (-1:
    none given, OffsetCommit before v6) and the client's metadata string ("": none)."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""


def offset_data(stored: StoredOffset) -> bytes:
    """An offset znode's data: the bare decimal, as Kafka's ZooKeeper offset storage, earlier kafkactl versions
    and kafkactl's own group consumer write and read it (a broker of an earlier version still reads it)."""
    return str(int(stored.offset)).encode()


def offset_metadata_json(stored: StoredOffset) -> bytes | None:
    """The `offset_metadata` znode's data of a commit; None when it carries neither metadata nor an epoch (the
    znode is then deleted). It names its offset: written after the offset, it counts only while they match."""
    if not stored.metadata and stored.leader_epoch == -1:
        return None
    return dumps({"version": 1, "offset": int(stored.offset), "leader_epoch": int(stored.leader_epoch),
                  "metadata": stored.metadata})  # fmt: skip


class BlockEntry(NamedTuple):
    """One partition's commit in an offset block: what was committed, and when it was accepted (wall clock ms)."""

    stored: StoredOffset
    at_ms: int


def offset_block_json(entries: Mapping[int, BlockEntry]) -> bytes:
    """An offset block's data: {"version":1,"offsets":{"<p>":[offset, leader_epoch, metadata, at_ms]}}."""
    return dumps({"version": 1, "offsets": {str(p): [e.stored.offset, e.stored.leader_epoch, e.stored.metadata,
                                                     e.at_ms] for p, e in sorted(entries.items())}})  # fmt: skip


def parse_offset_block(data: bytes | None) -> dict[int, BlockEntry]:
    """An offset block's commits by partition; none when it is unreadable (a later version's, or damaged), and
    without an entry that is unreadable. (A writer merges its commits into what it reads: what was unreadable
    is written over.)"""
    try:
        obj = json.loads(data or b"")
        entries = obj["offsets"] if isinstance(obj, dict) and obj.get("version") == 1 else {}
        items = list(entries.items())
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}
    out = {}
    for p, entry in items:  # (an entry that is not one is left out, not the block's others)
        if not (isinstance(p, str) and p.isdigit() and isinstance(entry, list) and len(entry) == 4):
            continue
        offset, epoch, metadata, at_ms = entry
        if type(offset) is int and type(epoch) is int and isinstance(metadata, str) and type(at_ms) is int:
            out[int(p)] = BlockEntry(StoredOffset(offset, epoch, metadata), at_ms)
    return out


def offset_entry_fits(stored: StoredOffset) -> bool:
    """Whether a commit's entry stays within `OFFSET_ENTRY_MAX_BYTES` (its metadata string, JSON-escaped)."""
    if len(stored.metadata) * 12 + 64 <= OFFSET_ENTRY_MAX_BYTES:  # (none escapes longer than two \\uXXXX)
        return True
    return len(dumps([stored.offset, stored.leader_epoch, stored.metadata, 0])) + 32 <= OFFSET_ENTRY_MAX_BYTES


def stored_offset(data: bytes | None, metadata_data: bytes | None = None) -> StoredOffset | None:
    """A commit from its offset znode's data and its `offset_metadata` znode's (None: no such znode); None when
    the offset is unreadable. Metadata of another offset (left by a commit that did not finish writing it, or
    by an earlier version's commit over it) is not this commit's: metadata "" and epoch -1, as a commit stored
    before metadata was kept."""
    try:
        offset = int((data or b"").decode("utf-8", "replace"))
    except ValueError:
        return None
    try:
        obj = json.loads(metadata_data) if metadata_data else None
        if isinstance(obj, dict) and obj.get("version") == 1 and obj.get("offset") == offset:
            epoch, metadata = obj.get("leader_epoch", -1), obj.get("metadata") or ""
            if type(epoch) is int and isinstance(metadata, str):
                return StoredOffset(offset, epoch, metadata)
    except ValueError:
        pass
    return StoredOffset(offset)


def consumer_json(topics: list[str]) -> bytes:
    return dumps({"version": 1, "subscription": {t: 1 for t in sorted(topics)}, "pattern": "static",
                  "timestamp": now_ms()})  # fmt: skip


def parse_consumer(data: bytes | None) -> list[str]:
    """The topics a consumer registration subscribes to."""
    obj = loads(data) or {}
    return sorted((obj.get("subscription") or {}).keys())
