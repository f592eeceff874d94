"""Topic and group administration over the wire protocol: topics, their offsets, groups and coordinators."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from broker.client.cluster import Cluster
from broker.client.connection import Connection
from broker.client.security import ClientSecurity
from broker.errors import KafkactlError
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError, error_name
from broker.protocol.messages.admin import BROKER_RESOURCE, TOPIC_RESOURCE
from broker.protocol.messages.configs import OP_DELETE, OP_SET
from broker.protocol.messages.fetch import EARLIEST, LATEST
from broker.security.acl import (
    Binding,
    Entry,
    Filter,
    Operation,
    Pattern,
    PatternType,
    Permission,
    ResourceType,
    camel,
)


class ConfigValue(NamedTuple):
    """One key of a resource's config as DescribeConfigs tells it."""

    name: str
    value: str | None  # None: a secret (never shown) or no value
    source: str  # "topic" (an override), "broker" (dynamic), "static" (the broker's file), "default"
    sensitive: bool
    read_only: bool


#: DescribeConfigs' config_source ids, by what `kafkactl config describe` calls them
CONFIG_SOURCES = {1: "topic", 2: "broker", 3: "broker-default", 4: "static", 5: "default"}


def _resource(resource_type: int, name: str) -> str:
    return f"topic {name!r}" if resource_type == TOPIC_RESOURCE else f"broker {name or '(default)'}"


class AdminError(KafkaError):
    """The broker refused an admin request; the message carries its error name and text, `code` the error
    (-1 when the failure is the client's own)."""


#: how Kafka's clients word an authorization refusal, by error code: the kind of resource refused
_AUTHORIZATION = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Group",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster",
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Transactional Id",
}


def refusal(code: int, resource: str | None = None) -> str:
    """An error code in words: an authorization refusal names what was refused, as Kafka's clients report it
    (`Topic authorization failed for orders (TOPIC_AUTHORIZATION_FAILED)`, `Cluster authorization failed
    (CLUSTER_AUTHORIZATION_FAILED)`); any other code is its name."""
    kind = _AUTHORIZATION.get(code)  # type: ignore[call-overload]
    if kind is None:
        return error_name(code)
    named = f" for {resource}" if resource and kind != "Cluster" else ""
    return f"{kind} authorization failed{named} ({error_name(code)})"


def check_code(code: int, message: str | None, what: str, resource: str | None = None) -> None:
    """AdminError `what: ERROR (message)` for a non-zero code; `resource` names what an authorization
    refusal refused (a topic's, group's or transactional id's name)."""
    if code:
        text = refusal(code, resource)
        if message and message not in text:
            text += f" ({message})"
        raise AdminError(f"{what}: {text}", code)


@dataclass
class PartitionDescription:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    log_start_offset: int | None = None
    log_end_offset: int | None = None
    size: int | None = None
    error: str | None = None
    offline_replicas: list[int] = field(default_factory=list)

    @property
    def under_replicated(self) -> bool:
        """Fewer in-sync replicas than replicas (Kafka's under-replicated partitions)."""
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        """No leader: every in-sync replica is down (Kafka's unavailable partitions)."""
        return self.leader < 0


class Admin:
    def __init__(self, bootstrap: str, *, timeout: float = 30.0, security: ClientSecurity | None = None) -> None:
        """`security` None: the process default (broker.client.security)."""
        self.cluster = Cluster(bootstrap, client_id="kafkactl-admin", timeout=timeout, security=security)

    def close(self) -> None:
        self.cluster.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _any(self, api: ApiKey, body: dict[str, Any]) -> dict[str, Any]:
        return self.cluster.any_connection().request(api, body)

    def list_topics(self) -> dict[str, int]:
        """{topic: partition count}."""
        md = self.cluster.metadata(None)
        return {t["name"]: len(t["partitions"]) for t in sorted(md["topics"], key=lambda t: t["name"])}

    def create_topic(self, name: str, partitions: int, replication_factor: int = -1,
                     config: dict[str, str] | None = None, *, validate_only: bool = False) -> None:  # fmt: skip
        body = {"topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": replication_factor,
            "assignments": [], "configs": [{"name": k, "value": v} for k, v in (config or {}).items()],
        }], "timeout_ms": 30000, "validate_only": validate_only}  # fmt: skip
        answer = self._any(ApiKey.CREATE_TOPICS, body)
        t = answer["topics"][0]
        check_code(t["error_code"], t.get("error_message"), f"cannot create topic {name!r}", name)

    def create_partitions(self, name: str, count: int, *, validate_only: bool = False) -> None:
        """Raise a topic's partition count to `count` (CreatePartitions; the broker spreads the new replicas)."""
        body = {"topics": [{"name": name, "count": count, "assignments": None}], "timeout_ms": 30000,
                "validate_only": validate_only}  # fmt: skip
        r = self._any(ApiKey.CREATE_PARTITIONS, body)["results"][0]
        check_code(r["error_code"], r.get("error_message"), f"cannot add partitions to topic {name!r}", name)

    def delete_topic(self, name: str) -> None:
        # (v0-5 name topics in topic_names, v6 in topics: the version spoken writes its own)
        body = {"topic_names": [name], "topics": [{"name": name}], "timeout_ms": 30000}
        r = self._any(ApiKey.DELETE_TOPICS, body)["responses"][0]
        check_code(r["error_code"], r.get("error_message"), f"cannot delete topic {name!r}", name)

    def delete_records(self, name: str, before: int, partitions: list[int] | None = None, *,
                       timeout_ms: int = 20000) -> tuple[dict[int, int], dict[int, str]]:  # fmt: skip
        """DeleteRecords to each partition's leader: the records below `before` (-1: the high watermark) go.
        Returns ({partition: new low watermark}, {partition: why it failed}: an offset past a partition's end
        names its high watermark); AdminError for an unknown topic or partition."""
        t = self.cluster.metadata([name])["topics"][0]
        check_code(t["error_code"], None, f"topic {name!r}", name)
        leaders = {p["partition_index"]: p["leader_id"] for p in t["partitions"]}
        wanted = sorted(leaders) if partitions is None else list(dict.fromkeys(partitions))
        unknown = [p for p in wanted if p not in leaders]
        if unknown:
            raise AdminError(f"topic {name!r} has no partition {unknown[0]} (it has {len(leaders)})")
        done: dict[int, int] = {}
        failed = {p: "no leader (its replicas' brokers are down)" for p in wanted if leaders[p] < 0}
        by_leader: dict[int, list[int]] = defaultdict(list)
        for p in wanted:
            if leaders[p] >= 0:
                by_leader[leaders[p]].append(p)
        for leader, ps in by_leader.items():
            body = {"topics": [{"name": name, "partitions": [{"partition_index": p, "offset": before} for p in ps]}],
                    "timeout_ms": timeout_ms}  # fmt: skip
            try:
                answer = self.cluster.connection(leader).request(ApiKey.DELETE_RECORDS, body)
            except KafkactlError as exc:
                failed.update({p: str(exc) for p in ps})
                continue
            for x in answer["topics"][0]["partitions"]:
                if x["error_code"]:
                    failed[x["partition_index"]] = refusal(x["error_code"], name)
                else:
                    done[x["partition_index"]] = x["low_watermark"]
        past = [p for p, why in failed.items() if why == "OFFSET_OUT_OF_RANGE"]
        if past:  # say where the partition ends: one ListOffsets per leader
            ends, _ = self._list_offsets({(name, p): leaders[p] for p in past}, LATEST)
            for p in past:
                if (name, p) in ends:
                    failed[p] = f"OFFSET_OUT_OF_RANGE (its high watermark is {ends[(name, p)]})"
        return done, failed

    def describe_config(self, name: str) -> dict[str, tuple[str | None, bool]]:
        """{key: (value, is_override)} of a topic."""
        body = {"resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": name, "configuration_keys": None}]}
        answer = self._any(ApiKey.DESCRIBE_CONFIGS, body)
        res = answer["results"][0]
        check_code(res["error_code"], res.get("error_message"), f"cannot describe topic {name!r}", name)
        out = {}
        for c in res["configs"]:
            override = c.get("config_source", -1) == 1 if "config_source" in c else not c.get("is_default", True)
            out[c["name"]] = (c["value"], override)
        return out

    def zookeeper_connect(self) -> str | None:
        """The `zookeeper.connect` a broker of the cluster uses (DescribeConfigs of the broker), or None."""
        body = {"resources": [{"resource_type": BROKER_RESOURCE, "resource_name": "",
                               "configuration_keys": ["zookeeper.connect"]}], "include_synonyms": False,
                "include_documentation": False}  # fmt: skip
        try:
            res = self._any(ApiKey.DESCRIBE_CONFIGS, body)["results"][0]
        except KafkactlError:
            return None
        if res["error_code"]:
            return None
        return next((c["value"] for c in res["configs"] if c["name"] == "zookeeper.connect" and c["value"]), None)

    def describe_configs(self, resource_type: int, name: str) -> list[ConfigValue]:
        """Every key of a topic's (TOPIC_RESOURCE) or broker's (BROKER_RESOURCE, its id) config, sorted."""
        body = {"resources": [{"resource_type": resource_type, "resource_name": name, "configuration_keys": None}],
                "include_synonyms": False, "include_documentation": False}  # fmt: skip
        conn = self._config_connection(resource_type, name)
        res = conn.request(ApiKey.DESCRIBE_CONFIGS, body)["results"][0]
        what = f"cannot describe {_resource(resource_type, name)}"
        check_code(res["error_code"], res.get("error_message"), what, name)
        return sorted(
            ConfigValue(c["name"], c["value"], CONFIG_SOURCES.get(c.get("config_source", -1), "unknown"),
                        bool(c.get("is_sensitive")), bool(c.get("read_only")))
            for c in res["configs"]
        )  # fmt: skip

    def incremental_alter_configs(self, resource_type: int, name: str, ops: list[tuple[str, int, str | None]], *,
                                  validate_only: bool = False) -> None:  # fmt: skip
        """IncrementalAlterConfigs of one resource: (key, operation (OP_SET, OP_DELETE, OP_APPEND,
        OP_SUBTRACT), value) applied by the broker at once, the other keys kept; AdminError if refused.
        A broker's config goes to that broker, as Kafka's admin clients send it."""
        body = {"resources": [{"resource_type": resource_type, "resource_name": name,
                               "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops]}],
                "validate_only": validate_only}  # fmt: skip
        answer = self._config_connection(resource_type, name).request(ApiKey.INCREMENTAL_ALTER_CONFIGS, body)
        r = answer["responses"][0]
        check_code(r["error_code"], r.get("error_message"), f"cannot alter {_resource(resource_type, name)}", name)

    def _config_connection(self, resource_type: int, name: str) -> Connection:
        if resource_type == BROKER_RESOURCE and name.isdigit():
            return self.cluster.connection(int(name))
        return self.cluster.any_connection()

    def change_config(self, resource_type: int, name: str, ops: list[tuple[str, int, str | None]], *,
                      validate_only: bool = False) -> dict[str, str] | None:  # fmt: skip
        """`incremental_alter_configs`, with a topic's DELETE of a key that has no override refused first
        (as Kafka's kafka-configs does); returns a topic's overrides after it (None for a broker)."""
        deleted = [k for k, op, _ in ops if op == OP_DELETE]
        if resource_type == TOPIC_RESOURCE and deleted:
            now = {v.name for v in self.describe_configs(resource_type, name) if v.source == "topic"}
            missing = [k for k in deleted if k not in now]
            if missing:
                raise AdminError(f"topic {name!r} has no override of {', '.join(map(repr, missing))} to delete")
        self.incremental_alter_configs(resource_type, name, ops, validate_only=validate_only)
        if resource_type != TOPIC_RESOURCE:
            return None
        return {
            v.name: v.value
            for v in self.describe_configs(resource_type, name)
            if v.source == "topic" and v.value is not None
        }

    def alter_config(self, name: str, set_: dict[str, str], delete: list[str] = ()) -> dict[str, str]:
        """Set and delete overrides of a topic in one IncrementalAlterConfigs (the others stay, whoever
        changes them meanwhile); returns the overrides after it."""
        ops = [(k, OP_SET, v) for k, v in set_.items()] + [(k, OP_DELETE, None) for k in delete]
        return self.change_config(TOPIC_RESOURCE, name, ops) or {}

    def describe_topic(self, name: str) -> list[PartitionDescription]:
        """Per partition: leader, replicas, ISR, and from the leader its log start, end and size."""
        md = self.cluster.metadata([name])
        t = md["topics"][0]
        if t["error_code"]:
            check_code(t["error_code"], None, f"topic {name!r}", name)
        parts = [
            PartitionDescription(
                p["partition_index"],
                p["leader_id"],
                p["replica_nodes"],
                p["isr_nodes"],
                error=error_name(p["error_code"]) if p["error_code"] else None,
                offline_replicas=list(p.get("offline_replicas") or []),
            )  # fmt: skip
            for p in sorted(t["partitions"], key=lambda p: p["partition_index"])
        ]
        live = [p for p in parts if p.leader >= 0]
        for which, attr in ((EARLIEST, "log_start_offset"), (LATEST, "log_end_offset")):
            found, errors = self._list_offsets({(name, p.partition): p.leader for p in live}, which)
            for p in live:
                if (name, p.partition) in found:
                    setattr(p, attr, found[(name, p.partition)])
                elif (name, p.partition) in errors:
                    p.error = errors[(name, p.partition)]
        by_leader: dict[int, list[PartitionDescription]] = defaultdict(list)
        for p in live:
            by_leader[p.leader].append(p)
        for leader, ps in by_leader.items():
            try:
                conn = self.cluster.connection(leader)
            except KafkactlError:
                continue
            try:
                body = {"topics": [{"topic": name, "partitions": [p.partition for p in ps]}]}
                answer = conn.request(ApiKey.DESCRIBE_LOG_DIRS, body)
            except KafkactlError:
                continue  # a broker without DescribeLogDirs: sizes stay unknown
            for d in answer["results"]:
                for tt in d["topics"]:
                    for x in tt["partitions"]:
                        for p in ps:
                            if p.partition == x["partition_index"]:
                                p.size = (p.size or 0) + x["partition_size"]
        return parts

    def leaderless(self, tps: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """Those of `tps` without a leader now (every in-sync replica's broker is down), in order."""
        md = self.cluster.metadata(sorted({t for t, _ in tps}))
        leaders = {(t["name"], p["partition_index"]): p["leader_id"] for t in md["topics"] for p in t["partitions"]}
        return [tp for tp in tps if leaders.get(tp, -1) < 0]

    def list_offsets(self, tps: list[tuple[str, int]], timestamp: int, *,
                     isolation_level: int = 0) -> dict[tuple[str, int], int]:  # fmt: skip
        """Each partition's offset at `timestamp` (EARLIEST, LATEST or epoch ms; -1: none that late),
        asked of its leader; AdminError naming the first partition that cannot answer. With
        `isolation_level` 1 (read_committed) LATEST is the last stable offset."""
        md = self.cluster.metadata(sorted({t for t, _ in tps}))
        leaders = {(t["name"], p["partition_index"]): p["leader_id"] for t in md["topics"] for p in t["partitions"]}
        missing = [tp for tp in tps if leaders.get(tp, -1) < 0]
        if missing:
            raise AdminError(f"no leader for {missing[0][0]}-{missing[0][1]} (unknown partition or broker down)")
        found, errors = self._list_offsets({tp: leaders[tp] for tp in tps}, timestamp, isolation_level)
        if errors:
            (t, p), why = next(iter(errors.items()))
            raise AdminError(f"cannot list offsets of {t}-{p}: {why}")
        return found

    def _list_offsets(self, leaders: dict[tuple[str, int], int], timestamp: int, isolation_level: int = 0,
                      ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], str]]:  # fmt: skip
        """ListOffsets to each leader: ({tp: offset}, {tp: error text})."""
        found: dict[tuple[str, int], int] = {}
        errors: dict[tuple[str, int], str] = {}
        by_leader: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
        for (t, p), leader in leaders.items():
            by_leader[leader][t].append(p)
        for leader, topics in by_leader.items():
            try:
                conn = self.cluster.connection(leader)
                body = {"replica_id": -1, "isolation_level": isolation_level, "topics": [
                    {"name": t, "partitions": [{"partition_index": p, "timestamp": timestamp} for p in ps]}
                    for t, ps in topics.items()]}  # fmt: skip
                answer = conn.request(ApiKey.LIST_OFFSETS, body)
            except KafkactlError as exc:
                errors.update({(t, p): str(exc) for t, ps in topics.items() for p in ps})
                continue
            for t in answer["topics"]:
                for x in t["partitions"]:
                    tp = (t["name"], x["partition_index"])
                    if x["error_code"]:
                        errors[tp] = refusal(x["error_code"], t["name"])
                    else:
                        found[tp] = x["offset"] if "offset" in x else (x["old_style_offsets"] or [-1])[0]
        return found, errors

    # -- groups -----------------------------------------------------------------------------------

    def list_groups(self) -> dict[str, str]:
        """{group: protocol type} of the groups the live brokers coordinate (ListGroups to each)."""
        return {g: t for g, (t, _) in self.list_group_states().items()}

    def list_group_states(self, states: Collection[str] = ()) -> dict[str, tuple[str, str]]:
        """{group: (protocol type, state)} of the groups the live brokers coordinate, only those in `states` when
        given (ListGroups v4's filter, KIP-518). A broker below v4 names no state ("") and filters nothing."""
        self.cluster.metadata([])
        out: dict[str, tuple[str, str]] = {}
        for node in sorted(self.cluster.brokers):
            answer = self.cluster.connection(node).request(ApiKey.LIST_GROUPS, {"states_filter": sorted(states)})
            check_code(answer["error_code"], None, f"cannot list the groups of broker {node}")
            out.update({g["group_id"]: (g["protocol_type"], g.get("group_state", "")) for g in answer["groups"]})
        return dict(sorted(out.items()))

    def describe_group(self, group: str) -> dict[str, Any]:
        """DescribeGroups of one group, asked of its coordinator: state, protocol and members."""
        answer = self._any(ApiKey.FIND_COORDINATOR, {"key": group, "key_type": 0})
        check_code(answer["error_code"], answer.get("error_message"), f"no coordinator for group {group!r}", group)
        self.cluster.metadata([])
        desc = self.cluster.connection(answer["node_id"]).request(ApiKey.DESCRIBE_GROUPS, {"groups": [group]})
        g = desc["groups"][0]
        check_code(g["error_code"], None, f"cannot describe group {group!r}", group)
        return g

    def _coordinator_request(self, group: str, api: ApiKey, body: dict[str, Any]) -> dict[str, Any]:
        """A request to the group's coordinator (found with FindCoordinator)."""
        answer = self._any(ApiKey.FIND_COORDINATOR, {"key": group, "key_type": 0})
        check_code(answer["error_code"], answer.get("error_message"), f"no coordinator for group {group!r}", group)
        self.cluster.metadata([])
        return self.cluster.connection(answer["node_id"]).request(api, body)

    def delete_group(self, group: str) -> None:
        """DeleteGroups of one broker-coordinated group: its committed offsets and stored generation go;
        AdminError (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, ...) when refused."""
        answer = self._coordinator_request(group, ApiKey.DELETE_GROUPS, {"groups_names": [group]})
        check_code(answer["results"][0]["error_code"], None, f"cannot delete group {group!r}", group)

    def delete_offsets(self, group: str, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """OffsetDelete: forget the group's committed offsets of these partitions; {partition: error code}
        (GROUP_SUBSCRIBED_TO_TOPIC for a topic a member consumes); AdminError for a group-level refusal."""
        topics: dict[str, list[dict[str, int]]] = defaultdict(list)
        for t, p in tps:
            topics[t].append({"partition_index": p})
        body = {"group_id": group, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
        answer = self._coordinator_request(group, ApiKey.OFFSET_DELETE, body)
        check_code(answer["error_code"], None, f"cannot delete offsets of group {group!r}", group)
        return {(t["name"], p["partition_index"]): p["error_code"] for t in answer["topics"] for p in t["partitions"]}

    # -- ACLs -------------------------------------------------------------------------------------

    def create_acls(self, bindings: list[Binding]) -> None:
        """CreateAcls; AdminError naming the first binding refused."""
        body = {"creations": [{
            "resource_type": b.pattern.resource_type, "resource_name": b.pattern.name,
            "resource_pattern_type": b.pattern.pattern_type, "principal": b.entry.principal, "host": b.entry.host,
            "operation": b.entry.operation, "permission_type": b.entry.permission,
        } for b in bindings]}  # fmt: skip
        answer = self._any(ApiKey.CREATE_ACLS, body)
        for b, r in zip(bindings, answer["results"], strict=True):
            what = f"cannot create the ACL {describe_binding(b)}"
            check_code(r["error_code"], r.get("error_message"), what, b.pattern.name)

    def describe_acls(self, f: Filter) -> list[Binding]:
        """DescribeAcls: the bindings the filter matches."""
        answer = self._any(ApiKey.DESCRIBE_ACLS, _filter_body(f))
        check_code(answer["error_code"], answer.get("error_message"), "cannot list ACLs")
        return [_binding(r, a) for r in answer["resources"] for a in r["acls"]]

    def delete_acls(self, filters: list[Filter]) -> list[Binding]:
        """DeleteAcls: the bindings removed."""
        answer = self._any(ApiKey.DELETE_ACLS, {"filters": [_filter_body(f) for f in filters]})
        out = []
        for r in answer["filter_results"]:
            check_code(r["error_code"], r.get("error_message"), "cannot remove ACLs")
            out += [_binding(m, m) for m in r["matching_acls"]]
        return out

    # -- client quotas ----------------------------------------------------------------------------

    def describe_client_quotas(
        self, components: list[tuple[str, int, str | None]], *, strict: bool = False
    ) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        """DescribeClientQuotas: (entity type → name, None for the default; quota key → value) of each entity the
        filter (entity type, match type, match) matches."""
        body = {"components": [{"entity_type": t, "match_type": m, "match": n} for t, m, n in components],
                "strict": strict}  # fmt: skip
        answer = self._any(ApiKey.DESCRIBE_CLIENT_QUOTAS, body)
        check_code(answer["error_code"], answer.get("error_message"), "cannot describe client quotas")
        return [
            ({e["entity_type"]: e["entity_name"] for e in entry["entity"]},
             {v["key"]: v["value"] for v in entry["values"]})
            for entry in answer["entries"] or []
        ]  # fmt: skip

    def alter_client_quotas(self, entity: dict[str, str | None], changes: dict[str, float | None], *,
                            validate_only: bool = False) -> None:  # fmt: skip
        """AlterClientQuotas of one entity (entity type → name, None for the default): each key set to its value,
        or removed (None); AdminError when refused."""
        body = {
            "entries": [{
                "entity": [{"entity_type": t, "entity_name": n} for t, n in entity.items()],
                "ops": [{"key": k, "value": 0.0 if v is None else float(v), "remove": v is None}
                        for k, v in changes.items()],
            }],
            "validate_only": validate_only,
        }  # fmt: skip
        answer = self._any(ApiKey.ALTER_CLIENT_QUOTAS, body)
        r = answer["entries"][0]
        check_code(r["error_code"], r.get("error_message"), "cannot change client quotas")


def _binding(res: dict[str, Any], acl: dict[str, Any]) -> Binding:
    """A binding from an answer's resource fields and ACL fields (one dict in DeleteAcls, two in DescribeAcls)."""
    pattern = Pattern(ResourceType(res["resource_type"]), res["resource_name"], PatternType(res["pattern_type"]))
    return Binding(pattern, Entry(acl["principal"], acl["host"], Operation(acl["operation"]),
                                  Permission(acl["permission_type"])))  # fmt: skip


def _filter_body(f: Filter) -> dict[str, Any]:
    return {"resource_type_filter": f.resource_type, "resource_name_filter": f.name,
            "pattern_type_filter": f.pattern_type, "principal_filter": f.principal, "host_filter": f.host,
            "operation": f.operation, "permission_type": f.permission}  # fmt: skip


def describe_binding(b: Binding) -> str:
    """An ACL in words, as kafka-acls.sh prints it."""
    e = b.entry
    return (f"{e.principal} has {camel(e.permission)} permission for operations: {camel(e.operation)} "
            f"from hosts: {e.host} on {b.pattern}")  # fmt: skip


__all__ = ["Admin", "AdminError", "PartitionDescription", "ErrorCode", "refusal"]
