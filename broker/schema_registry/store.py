"""The schema registry's state, kept in ZooKeeper (paths in `broker.zk.paths`), with its rules.

Why ZooKeeper and not a compacted `_schemas` topic as Confluent's registry uses: kafkactl's clusters
have ZooKeeper already, schemas are few and rarely written, and ZooKeeper gives what the registry needs
without a leader of its own. A schema id comes from a counter znode set by version, so two registries
never hand out one id twice. A subject's next version is a znode that only one writer can create. Every
registry that shares the ZooKeeper serves the same state, and a registry restarted finds it all.

Rules, as Confluent's registry has them: one id per distinct schema text (the same schema under two
subjects shares its id); registering a schema a subject already has returns its id and adds no version;
a new version must be compatible with the subject's level (its own, else the global one, default
BACKWARD); deleting a subject or version is soft (hidden, still readable by id) unless permanent,
and a permanent delete needs a soft one first.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import fastavro
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from broker.schema_registry.compat import LEVELS, incompatibilities
from broker.zk import paths

DEFAULT_LEVEL = "BACKWARD"


class RegistryError(Exception):
    """A request the registry refuses: Confluent's error code (40401, 42201, ...) and message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def http_status(self) -> int:
        return self.code // 100 if self.code >= 1000 else self.code


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(40401, f"Subject '{subject}' not found.")


@dataclass(frozen=True)
class Version:
    subject: str
    version: int
    id: int
    schema: str
    deleted: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"subject": self.subject, "version": self.version, "id": self.id, "schema": self.schema}


def canonical(text: str, schema_type: str = "AVRO") -> str:
    """The schema's text as stored and compared (compact JSON); RegistryError 42201 for an invalid schema."""
    if schema_type != "AVRO":
        raise RegistryError(42201, f"schema type {schema_type} is not supported (only AVRO)")
    try:
        parsed = json.loads(text)
        fastavro.parse_schema(parsed, _write_hint=False, _force=True)
    except Exception as exc:  # json.JSONDecodeError, fastavro's SchemaParseException, TypeError, ...
        raise RegistryError(42201, f"Invalid schema: {exc}") from None
    return json.dumps(parsed, separators=(",", ":"))


class SchemaStore:
    """The registry's operations on a started kazoo client."""

    def __init__(self, zk: KazooClient) -> None:
        self.zk = zk
        for path in (paths.SCHEMAS, paths.FINGERPRINTS, paths.SUBJECTS, paths.SUBJECT_CONFIGS):
            zk.ensure_path(path)

    # -- schemas by id --------------------------------------------------------------------------------

    def schema_by_id(self, schema_id: int) -> str:
        try:
            data, _ = self.zk.get(paths.schema(schema_id))
        except NoNodeError:
            raise RegistryError(40403, f"Schema {schema_id} not found") from None
        return paths.loads(data)["schema"]

    def _id_for(self, text: str) -> int:
        """The id of `text` (canonical), handing out a new one if it is new."""
        digest = hashlib.sha256(text.encode()).hexdigest()
        try:
            return int(self.zk.get(paths.fingerprint(digest))[0])
        except NoNodeError:
            pass
        new = self._next_id()
        self.zk.create(paths.schema(new), paths.dumps({"schema": text, "schemaType": "AVRO"}))
        try:
            self.zk.create(paths.fingerprint(digest), str(new).encode())
        except NodeExistsError:  # another registry registered the same text meanwhile: its id wins
            return int(self.zk.get(paths.fingerprint(digest))[0])
        return new

    def _next_id(self) -> int:
        self.zk.ensure_path(paths.SCHEMA_ID)
        while True:
            data, stat = self.zk.get(paths.SCHEMA_ID)
            new = int(data or b"0") + 1
            try:
                self.zk.set(paths.SCHEMA_ID, str(new).encode(), version=stat.version)
                return new
            except BadVersionError:
                continue

    # -- subjects and versions ------------------------------------------------------------------------

    def _versions(self, subject: str) -> list[Version]:
        """All versions of a subject, soft-deleted ones too, oldest first."""
        try:
            children = self.zk.get_children(paths.subject(subject))
        except NoNodeError:
            return []
        out = []
        for child in sorted(children, key=int):
            try:
                doc = paths.loads(self.zk.get(paths.subject_version(subject, int(child)))[0])
            except NoNodeError:
                continue
            out.append(Version(subject, int(child), doc["id"], self.schema_by_id(doc["id"]), doc.get("deleted", False)))
        return out

    def subjects(self, deleted: bool = False) -> list[str]:
        out = []
        for node in self.zk.get_children(paths.SUBJECTS):
            name = paths.group_name(node)
            if any(deleted or not v.deleted for v in self._versions(name)):
                out.append(name)
        return sorted(out)

    def versions(self, subject: str, deleted: bool = False) -> list[int]:
        found = [v.version for v in self._versions(subject) if deleted or not v.deleted]
        if not found:
            raise subject_not_found(subject)
        return found

    def version(self, subject: str, version: str | int, deleted: bool = False) -> Version:
        live = [v for v in self._versions(subject) if deleted or not v.deleted]
        if not live:
            raise subject_not_found(subject)
        if str(version) in ("latest", "-1"):
            return live[-1]
        try:
            n = int(version)
        except ValueError:
            raise RegistryError(42202, f"The specified version '{version}' is not a valid version id.") from None
        if n <= 0:
            raise RegistryError(42202, f"The specified version '{version}' is not a valid version id.")
        for v in live:
            if v.version == n:
                return v
        raise RegistryError(40402, f"Version {n} not found.")

    def lookup(self, subject: str, text: str) -> Version:
        """The subject's version holding this schema (POST /subjects/<subject>)."""
        want = canonical(text)
        live = [v for v in self._versions(subject) if not v.deleted]
        if not live:
            raise subject_not_found(subject)
        for v in live:
            if v.schema == want:
                return v
        raise RegistryError(40403, "Schema not found")

    def register(self, subject: str, text: str) -> int:
        """Register a schema under a subject (a new version unless it has it); returns the schema's id."""
        want = canonical(text)
        while True:
            every = self._versions(subject)
            live = [v for v in every if not v.deleted]
            for v in live:
                if v.schema == want:
                    return v.id
            problems = incompatibilities(self.level(subject), want, [v.schema for v in live])
            if problems:
                raise RegistryError(409, "Schema being registered is incompatible with an earlier schema for "
                                         f"subject '{subject}': {'; '.join(problems)}")  # fmt: skip
            schema_id = self._id_for(want)
            number = (every[-1].version if every else 0) + 1
            try:
                self.zk.create(paths.subject_version(subject, number), paths.dumps({"id": schema_id, "deleted": False}),
                               makepath=True)  # fmt: skip
                return schema_id
            except NodeExistsError:
                continue  # another registry added a version meanwhile: check against it too

    def check(self, subject: str, version: str | int, text: str) -> list[str]:
        """Why `text` is not compatible with the subject (against `version`, or as registering would check
        against "latest")."""
        want = canonical(text)
        if str(version) in ("latest", "-1"):
            olds = [v.schema for v in self._versions(subject) if not v.deleted]
            if not olds:
                raise subject_not_found(subject)
            return incompatibilities(self.level(subject), want, olds)
        return incompatibilities(self.level(subject), want, [self.version(subject, version).schema])

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        every = self._versions(subject)
        if not every:
            raise subject_not_found(subject)
        if permanent:
            live = [v for v in every if not v.deleted]
            if live:
                raise RegistryError(40405, f"Subject '{subject}' was not deleted first before being permanently "
                                           "deleted")  # fmt: skip
            self.zk.delete(paths.subject(subject), recursive=True)
            return [v.version for v in every]
        live = [v for v in every if not v.deleted]
        if not live:
            raise RegistryError(40404, f"Subject '{subject}' was soft deleted.Set permanent=true to delete "
                                       "permanently")  # fmt: skip
        for v in live:
            self._mark_deleted(v)
        return [v.version for v in live]

    def delete_version(self, subject: str, version: str | int, permanent: bool = False) -> int:
        v = self.version(subject, version, deleted=permanent)
        if permanent:
            if not v.deleted:
                raise RegistryError(40407, f"Subject '{subject}' Version {v.version} was not deleted first before "
                                           "being permanently deleted")  # fmt: skip
            self.zk.delete(paths.subject_version(subject, v.version))
        else:
            self._mark_deleted(v)
        return v.version

    def _mark_deleted(self, v: Version) -> None:
        self.zk.set(paths.subject_version(v.subject, v.version), paths.dumps({"id": v.id, "deleted": True}))

    def ids_versions(self, schema_id: int) -> list[dict[str, Any]]:
        """Where a schema id is registered: [{"subject", "version"}]."""
        self.schema_by_id(schema_id)
        out = []
        for node in self.zk.get_children(paths.SUBJECTS):
            name = paths.group_name(node)
            out += [{"subject": name, "version": v.version} for v in self._versions(name)
                    if v.id == schema_id and not v.deleted]  # fmt: skip
        return sorted(out, key=lambda d: (d["subject"], d["version"]))

    # -- compatibility levels ---------------------------------------------------------------------------

    def global_level(self) -> str:
        try:
            return paths.loads(self.zk.get(paths.REGISTRY_CONFIG)[0])["compatibilityLevel"]
        except NoNodeError:
            return DEFAULT_LEVEL

    def subject_level(self, subject: str) -> str | None:
        try:
            return paths.loads(self.zk.get(paths.subject_config(subject))[0])["compatibilityLevel"]
        except NoNodeError:
            return None

    def level(self, subject: str) -> str:
        return self.subject_level(subject) or self.global_level()

    def set_level(self, level: str, subject: str | None = None) -> str:
        level = level.upper() if isinstance(level, str) else ""
        if level not in LEVELS:
            raise RegistryError(42203, f"Invalid compatibility level. Valid values are {', '.join(LEVELS)}")
        path = paths.REGISTRY_CONFIG if subject is None else paths.subject_config(subject)
        data = paths.dumps({"compatibilityLevel": level})
        try:
            self.zk.set(path, data)
        except NoNodeError:
            self.zk.create(path, data, makepath=True)
        return level

    def delete_level(self, subject: str) -> str:
        level = self.subject_level(subject)
        if level is None:
            raise RegistryError(40408, f"Subject '{subject}' does not have subject-level compatibility configured")
        self.zk.delete(paths.subject_config(subject))
        return level
