"""Moving partitions between brokers: kafka-reassign-partitions' plans, and the controller's steps.

A plan is Kafka's JSON, `{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3,1]}]}`:
each partition's new replica list, its first replica the preferred leader. It goes through ZooKeeper as
in ZooKeeper-mode Kafka: the tool writes the moves to `/admin/reassign_partitions`; the controller then,
for each partition,

1. widens its assignment to the target replicas followed by the old ones, recording which are being
   added and removed (`adding_replicas`, `removing_replicas` in the topic's znode): the added replicas'
   brokers see the assignment change and start copying from the leader;
2. once every target replica is in the ISR, moves leadership into the target set if the leader is
   leaving (a new leader epoch), shrinks the ISR to the target and writes the target as the assignment:
   the removed replicas' brokers stop copying and delete their copies;
3. takes the partition out of the request (the znode goes with the last one).

A copy can be throttled, as Kafka's tool does it: `follower.replication.throttled.rate` (bytes/s, in
`/config/brokers/<id>`) caps what a broker copies for the replicas its topics' config lists in
`follower.replication.throttled.replicas` (`"0:3,1:3"`: partition:broker, or `*`). kafkactl writes the
leader-side keys too, for Kafka's tools, but only the follower side is enforced.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient

from broker.errors import KafkactlError
from broker.replication.election import State
from broker.topics import assign_replicas, topic_name_error
from broker.zk import paths, registry

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

#: the throttle keys Kafka's tool sets, on brokers and on topics
RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
REPLICAS_KEYS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


class PlanError(KafkactlError):
    """A reassignment plan that cannot be carried out as written."""


# -- the controller's rules (pure) -----------------------------------------------------------------


def widened(current: list[int], target: list[int]) -> tuple[list[int], list[int], list[int]]:
    """(replicas, adding, removing) while a partition moves from `current` to `target` replicas."""
    replicas = target + [r for r in current if r not in target]
    return replicas, [r for r in target if r not in current], [r for r in current if r not in target]


def finished(target: list[int], state: State, live: set[int]) -> State | None:
    """The partition's state that completes its move to `target`, or None while it must wait (a target
    replica is not yet in the ISR, or no target replica can lead)."""
    if any(r not in state.isr for r in target):
        return None
    isr = [r for r in state.isr if r in target]
    if state.leader in target and state.leader in live:
        return State(state.leader, state.leader_epoch, isr)
    leader = next((r for r in target if r in live), None)
    if leader is None:
        return None
    return State(leader, state.leader_epoch + 1, isr)


def throttled(spec: str | None, partition: int, broker_id: int) -> bool:
    """Whether a `*.replication.throttled.replicas` value names this partition's replica on `broker_id`."""
    if not spec:
        return False
    spec = spec.strip()
    if spec == "*":
        return True
    return f"{partition}:{broker_id}" in {item.strip() for item in spec.split(",")}


# -- plans ---------------------------------------------------------------------------------------


@dataclass
class Move:
    topic: str
    partition: int
    current: list[int]
    target: list[int]


def parse_plan(text: str) -> dict[TopicPartition, list[int]]:
    """The moves of a plan in kafka-reassign-partitions' JSON; PlanError naming the first fault."""
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise PlanError(f"the plan is not JSON: {exc}") from None
    entries = obj.get("partitions") if isinstance(obj, dict) else None
    if not isinstance(entries, list) or not entries:
        raise PlanError('the plan has no "partitions" list (expected {"version":1,"partitions":[{"topic":…,'
                        '"partition":…,"replicas":[…]}]})')  # fmt: skip
    moves: dict[TopicPartition, list[int]] = {}
    for i, e in enumerate(entries):
        where = f"partitions[{i}]"
        if not isinstance(e, dict):
            raise PlanError(f"{where} is not an object")
        topic, partition, replicas = e.get("topic"), e.get("partition"), e.get("replicas")
        if not isinstance(topic, str) or not topic:
            raise PlanError(f'{where} has no "topic" string')
        if topic_name_error(topic):
            raise PlanError(f"{where}: {topic_name_error(topic)}")
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise PlanError(f'{where} ({topic}) has no "partition" number')
        if (not isinstance(replicas, list) or not replicas
                or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in replicas)):  # fmt: skip
            raise PlanError(f'{where} ({topic}-{partition}) needs "replicas": a non-empty list of broker ids')
        if len(set(replicas)) != len(replicas):
            raise PlanError(f"{where} ({topic}-{partition}) names a broker twice: {replicas}")
        dirs = e.get("log_dirs")
        if dirs is not None and any(d != "any" for d in dirs):
            raise PlanError(f"{where} ({topic}-{partition}): moving replicas between log dirs is not supported")
        if (topic, partition) in moves:
            raise PlanError(f"{topic}-{partition} is in the plan twice")
        moves[(topic, partition)] = list(replicas)
    return moves


def plan_json(moves: dict[TopicPartition, list[int]]) -> str:
    """A plan in kafka-reassign-partitions' JSON."""
    return json.dumps({"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": r, "log_dirs":
                       ["any"] * len(r)} for (t, p), r in sorted(moves.items())]})  # fmt: skip


def check_plan(zk: KazooClient, moves: dict[TopicPartition, list[int]]) -> list[Move]:
    """Each move with the partition's current replicas; PlanError for an unknown topic or partition or a
    broker that is not live."""
    live = set(registry.live_brokers(zk))
    out = []
    assignments: dict[str, dict[int, list[int]] | None] = {}
    for (topic, p), target in sorted(moves.items()):
        if topic not in assignments:
            assignments[topic] = registry.assignment(zk, topic)
        assignment = assignments[topic]
        if assignment is None:
            raise PlanError(f"unknown topic {topic!r}")
        if p not in assignment:
            raise PlanError(f"topic {topic} has no partition {p} (it has {len(assignment)})")
        down = [r for r in target if r not in live]
        if down:
            raise PlanError(f"{topic}-{p}: broker(s) {', '.join(map(str, down))} not live (live: "
                            f"{', '.join(map(str, sorted(live))) or 'none'})")  # fmt: skip
        out.append(Move(topic, p, assignment[p], target))
    return out


def propose(zk: KazooClient, topics: list[str], brokers: list[int]) -> dict[TopicPartition, list[int]]:
    """A plan spreading `topics` over `brokers` round-robin, keeping each partition's replication factor
    (kafka-reassign-partitions --generate)."""
    live = set(registry.live_brokers(zk))
    down = sorted(set(brokers) - live)
    if down:
        raise PlanError(f"broker(s) {', '.join(map(str, down))} not live")
    out: dict[TopicPartition, list[int]] = {}
    for topic in topics:
        assignment = registry.assignment(zk, topic)
        if assignment is None:
            raise PlanError(f"unknown topic {topic!r}")
        rf = max(len(r) for r in assignment.values())
        try:
            spread = assign_replicas(brokers, max(assignment) + 1, rf)
        except ValueError as exc:
            raise PlanError(f"{topic}: {exc}") from None
        out.update({(topic, p): spread[p] for p in assignment})
    return out


def execute(zk: KazooClient, moves: list[Move], throttle: int | None) -> list[Move]:
    """Start the moves that change something (and the throttle, when given); returns them. PlanError when
    a reassignment is still in progress."""
    changing = [m for m in moves if m.target != m.current]
    if not changing:
        return []
    if registry.reassignment_request(zk) is not None:  # (before the throttle: it must not change a running move's)
        raise PlanError("a reassignment is still in progress: see `kafkactl topic reassign PLAN --verify`")
    if throttle is not None:
        set_throttle(zk, changing, throttle)
    if not registry.request_reassignment(zk, {(m.topic, m.partition): m.target for m in changing}):
        raise PlanError("a reassignment is still in progress: see `kafkactl topic reassign PLAN --verify`")
    return changing


def status(zk: KazooClient, moves: dict[TopicPartition, list[int]]) -> dict[TopicPartition, str]:
    """Each move as it stands: "completed", "in progress", or "failed" (the controller dropped it or the
    partition's replicas are not the target), as `kafka-reassign-partitions --verify` says."""
    pending = registry.reassignment_request(zk)
    pending_moves = pending[0] if pending else {}
    out = {}
    for (topic, p), target in moves.items():
        replicas = (registry.assignment(zk, topic) or {}).get(p)
        if (topic, p) in pending_moves:
            out[(topic, p)] = "in progress"
        elif replicas == target:
            out[(topic, p)] = "completed"
        else:
            out[(topic, p)] = "failed"
    return out


# -- throttles -----------------------------------------------------------------------------------


def set_throttle(zk: KazooClient, moves: list[Move], rate: int) -> None:
    """Throttle the copies `moves` make at `rate` bytes/s, as kafka-reassign-partitions --throttle does. Each
    config changes as IncrementalAlterConfigs changes it (`registry.update_config`): a change made between
    the read and the write (`kafkactl config set`, another client) is kept, not overwritten."""
    brokers = sorted({b for m in moves for b in m.current + m.target})
    for b in brokers:
        registry.update_config(zk, paths.broker_config(b), _with(dict.fromkeys(RATE_KEYS, str(rate))))
    for topic in sorted({m.topic for m in moves}):
        mine = [m for m in moves if m.topic == topic]
        leader = ",".join(f"{m.partition}:{b}" for m in mine for b in m.current)
        follower = ",".join(f"{m.partition}:{b}" for m in mine for b in m.target if b not in m.current)
        keys = dict(zip(REPLICAS_KEYS, (leader, follower), strict=True))
        registry.update_config(zk, paths.topic_config(topic), _with(keys), topic=topic)


def remove_throttle(zk: KazooClient, moves: dict[TopicPartition, list[int]]) -> bool:
    """Remove the throttle keys from every live broker and the plan's topics; True if any was there. As
    `set_throttle`, without overwriting a change made between the read and the write."""
    removed = False
    for b in sorted(registry.live_brokers(zk)):
        if registry.update_config(zk, paths.broker_config(b), _without(RATE_KEYS)) is not None:
            removed = True
    for topic in sorted({t for t, _ in moves}):
        if registry.update_config(zk, paths.topic_config(topic), _without(REPLICAS_KEYS), topic=topic) is not None:
            removed = True
    return removed


Change = Callable[[dict[str, str] | None], dict[str, str] | None]


def _with(keys: dict[str, str]) -> Change:
    """A config change (`registry.update_config`) setting `keys`, the other overrides kept."""
    return lambda config: {**(config or {}), **keys}


def _without(keys: tuple[str, ...]) -> Change:
    """A config change removing `keys`, the other overrides kept; nothing written when none is there."""

    def change(config: dict[str, str] | None) -> dict[str, str] | None:
        if not config or not any(k in config for k in keys):
            return None
        return {k: v for k, v in config.items() if k not in keys}

    return change


# -- the controller's pass -----------------------------------------------------------------------


def advance(zk: KazooClient, live: set[int], fence: int) -> tuple[bool, bool]:
    """One step of every reassignment in progress (see the module's docstring); returns (whether it wrote
    anything, whether moves are left). Every write is conditional (on the znode's version and on the
    controller epoch)."""
    found = registry.reassignment_request(zk)
    if found is None:
        return False, False
    request, version = found
    done: set[TopicPartition] = set()
    wrote = False
    for topic in sorted({t for t, _ in request}):
        moving = {p: target for (t, p), target in request.items() if t == topic}
        finished_here, wrote_here = _advance_topic(zk, topic, moving, live, fence)
        done |= {(topic, p) for p in finished_here}
        wrote = wrote or wrote_here
    if done or not request:  # (a request naming nothing, or one kafkactl cannot read, is taken away too)
        registry.finish_reassignment(zk, done, version)
        wrote = True
    return wrote, len(done) < len(request)


def _advance_topic(zk: KazooClient, topic: str, moving: dict[int, list[int]], live: set[int],
                   fence: int) -> tuple[list[int], bool]:  # fmt: skip
    """(the partitions of `topic` whose moves are done, whether the topic's assignment was written)."""
    found = None if topic_name_error(topic) else registry.topic_moves(zk, topic)
    if found is None:
        log.warning("reassignment of topic %r dropped: no such topic", topic)
        return list(moving), False
    (replicas, adding, removing), version = found
    done: list[int] = []
    widen: dict[int, tuple[list[int], list[int], list[int]]] = {}  # partition → (replicas, adding, removing)
    for p, target in sorted(moving.items()):
        if p not in replicas:
            log.warning("reassignment of %s-%d dropped: no such partition", topic, p)
            done.append(p)
            continue
        if p not in adding and p not in removing:  # not begun
            if replicas[p] == target:
                done.append(p)
            else:
                widen[p] = widened(replicas[p], target)
            continue
        original = [r for r in replicas[p] if r not in adding.get(p, [])]
        if widened(original, target)[0] != replicas[p]:  # the request was rewritten with another target
            widen[p] = widened(original, target)
        elif _finish(zk, topic, p, target, live, fence):
            widen[p] = (target, [], [])
            done.append(p)
    if widen:
        for p, (reps, add, rem) in widen.items():
            replicas[p] = reps
            adding[p], removing[p] = add, rem
            if not add:
                adding.pop(p)
            if not rem:
                removing.pop(p)
        if not registry.write_moves(zk, topic, replicas, adding, removing, version, fence=fence):
            return [p for p in done if p not in widen], True  # someone wrote first: the rest on the next pass
        for p, (reps, add, _) in widen.items():
            if add:
                log.info("reassigning %s-%d: replicas %s, copying to %s", topic, p, reps, add)
            elif p in done:
                log.info("reassigned %s-%d to %s", topic, p, reps)
    return done, bool(widen)


def _finish(zk: KazooClient, topic: str, p: int, target: list[int], live: set[int], fence: int) -> bool:
    """Step 2 for one partition: True once its state is the target's (written now, or already)."""
    for _ in range(3):
        st = registry.partition_state(zk, topic, p)
        if st is None:
            return False
        state = State(st.get("leader", -1), st.get("leader_epoch", 0), list(st.get("isr", [])))
        new = finished(target, state, live)
        if new is None:
            return False
        if new == state:
            return True
        if registry.write_partition_state(zk, topic, p, new.leader, new.leader_epoch, new.isr, st["zk_version"],
                                          fence=fence) is not None:  # fmt: skip
            if new.leader != state.leader:
                log.info("%s-%d: leader %d -> %d at epoch %d for its reassignment", topic, p, state.leader,
                         new.leader, new.leader_epoch)  # fmt: skip
            return True
    return False


def describe_moves(moves: list[Move]) -> list[dict[str, Any]]:
    return [{"topic": m.topic, "partition": m.partition, "current": m.current, "target": m.target} for m in moves]
