"""Which topics a mirror copies, what they are called on the target, and making the target topics.

A source topic is mirrored when it matches `--include` (a regular expression matched against the whole
name), does not match `--exclude`, and is neither internal (`__`-prefixed, Kafka's convention) nor the
audit topic (`kafkactl-audit`: each cluster's holds the counts of its own tiers). Its target
name is its `--rename` entry if it has one, else `--prefix` + its name. A missing target topic is
created with the source's partition count and the source's topic config overrides; an existing one
with fewer partitions gains the missing ones; one with more cannot take partition i to partition i and
is refused.

Not every override is the source's to give: as MirrorMaker 2's DefaultConfigPropertyFilter
(`config.properties.exclude`), the keys that depend on the target cluster's own brokers and policies
(`TARGET_OWN`: min.insync.replicas, the replication throttles, unclean leader election, the timestamp
type and bound) are left to the target. A source's min.insync.replicas=2 copied to a one-broker target
would have every produce refused (NOT_ENOUGH_REPLICAS).

The replication factor of a created topic is `--replication-factor`, else the target's
default.replication.factor (MM2's `replication.factor`, -1: the broker's default), but never more than
the target's live brokers: a larger one is lowered to their count, said once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from broker.audit.counts import AUDIT_TOPIC
from broker.client.admin import Admin, AdminError
from broker.errors import KafkactlError, UsageError
from broker.protocol.messages.admin import BROKER_RESOURCE
from broker.topics import topic_name_error

#: the topic config keys the mirror leaves to the target cluster: MirrorMaker 2's DefaultConfigPropertyFilter
#: CONFIG_PROPERTIES_EXCLUDE_DEFAULT (regular expressions matched against the whole key; `view\\..*` came later)
TARGET_OWN = re.compile("|".join((
    r"follower\.replication\.throttled\.replicas", r"leader\.replication\.throttled\.replicas",
    r"message\.timestamp\.difference\.max\.ms", r"message\.timestamp\.type",
    r"unclean\.leader\.election\.enable", r"min\.insync\.replicas", r"view\..*",
)))  # fmt: skip


def copied_configs(overrides: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(the overrides a target topic is created with, those left to the target: `TARGET_OWN`)."""
    kept = {k: v for k, v in overrides.items() if not TARGET_OWN.fullmatch(k)}
    return kept, {k: v for k, v in overrides.items() if k not in kept}


class MirrorError(KafkactlError):
    """What the mirror cannot get past by waiting: a target it must not write to, a corrupt source."""


@dataclass(frozen=True)
class Selection:
    """The topics a mirror copies, and their target names."""

    include: re.Pattern[str]
    exclude: re.Pattern[str] | None = None
    rename: dict[str, str] = field(default_factory=dict)
    prefix: str = ""

    @classmethod
    def parse(cls, include: str = ".*", exclude: str | None = None, rename: list[str] = (),
              prefix: str = "") -> Selection:  # fmt: skip
        """From the command line's spellings; UsageError for a bad expression or rename."""
        pairs = {}
        for item in rename:
            old, sep, new = item.partition(":")
            if not sep or not old or not new:
                raise UsageError(f"--rename {item!r}: use SOURCE:TARGET")
            pairs[old] = new
        try:
            inc = re.compile(include)
            exc = re.compile(exclude) if exclude else None
        except re.error as err:
            raise UsageError(f"bad topic expression: {err}") from None
        selection = cls(inc, exc, pairs, prefix)
        for old in pairs:
            problem = topic_name_error(selection.target(old))
            if problem:
                raise UsageError(f"--rename {old}: {problem}")
        return selection

    def wants(self, topic: str) -> bool:
        if topic.startswith("__") or topic == AUDIT_TOPIC:  # each cluster's audit topic holds its own tiers' counts
            return False
        if not self.include.fullmatch(topic):
            return False
        return not (self.exclude is not None and self.exclude.fullmatch(topic))

    def target(self, topic: str) -> str:
        return self.rename.get(topic, self.prefix + topic)

    def pick(self, source_topics: dict[str, int]) -> dict[str, int]:
        """{source topic: partition count} of those mirrored; KafkactlError for a target name that is illegal or
        taken by two sources."""
        chosen = {t: n for t, n in sorted(source_topics.items()) if self.wants(t)}
        seen: dict[str, str] = {}
        for t in chosen:
            name = self.target(t)
            problem = topic_name_error(name)
            if problem:
                raise UsageError(f"topic {t} would be mirrored as {name!r}: {problem}")
            if name in seen:
                raise UsageError(f"topics {seen[name]} and {t} would both be mirrored into {name}")
            seen[name] = t
        return chosen


def target_replication_factor(target: Admin, asked: int) -> tuple[int, str | None]:
    """The replication factor of the topics made on the target: `asked` (-1: the target's
    default.replication.factor), lowered to the target's live brokers; and the line saying so when lowered."""
    if not target.cluster.brokers:
        target.cluster.metadata([])
    live = sorted(target.cluster.brokers)  # (a Metadata answer names the live brokers only)
    want = asked
    if want <= 0 and live:
        try:
            value = next((c.value for c in target.describe_configs(BROKER_RESOURCE, str(live[0]))
                          if c.name == "default.replication.factor"), None)  # fmt: skip
            want = int(value) if value else -1
        except (KafkactlError, ValueError):
            want = -1  # the target's own default then, as it sees fit
    if want > len(live) > 0:
        whose = "--replication-factor" if asked > 0 else "the target's default.replication.factor"
        return len(live), (
            f"{whose} is {want} but the target has {len(live)} live broker"
            f"{'s' if len(live) != 1 else ''}: its new topics get replication factor {len(live)}"
        )
    return (want if want > 0 else -1), None


def prepare_targets(source: Admin, target: Admin, topics: dict[str, int], selection: Selection, *,
                    replication_factor: int = -1) -> list[str]:  # fmt: skip
    """Make each target topic exist with at least its source's partitions; returns what was created or grown,
    one line each. KafkactlError for a target topic with more partitions than its source."""
    existing = target.list_topics()
    said = []
    rf: int | None = None
    for topic, partitions in topics.items():
        name = selection.target(topic)
        have = existing.get(name)
        if have is None:
            if rf is None:
                rf, capped = target_replication_factor(target, replication_factor)
                if capped:
                    said.append(capped)
            overrides, left = copied_configs(
                {k: v for k, (v, override) in source.describe_config(topic).items() if override and v}
            )
            try:
                target.create_topic(name, partitions, rf, overrides)
            except AdminError as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):  # another mirror made it meanwhile
                    raise
            configs = "".join(f", {k}={v}" for k, v in sorted(overrides.items()))
            line = f"created {name} ({partitions} partition{'s' if partitions != 1 else ''}{configs})"
            if left:
                line += "; left to the target: " + ", ".join(f"{k}={v}" for k, v in sorted(left.items()))
            said.append(line)
        elif have < partitions:
            target.create_partitions(name, partitions)
            said.append(f"added partitions to {name}: {have} -> {partitions}")
        elif have > partitions:
            raise MirrorError(f"target topic {name} has {have} partitions, its source {topic} {partitions}: "
                                "the mirror copies partition i to partition i")  # fmt: skip
    return said
