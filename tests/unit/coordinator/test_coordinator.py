"""The group coordinator on its own (no network): Kafka's group hash, coordinator choice, the
Empty → PreparingRebalance → CompletingRebalance → Stable state machine, heartbeats, leaving, session
expiry, commit checks and describe(). Plain asyncio.run, no plugin.

Tests marked xfail(strict=True) pin a difference from Kafka's GroupCoordinator (see each reason).
"""

from __future__ import annotations

import asyncio
import ctypes
from collections import Counter
from typing import Any

import pytest

from broker.coordinator.group.coordinator import GroupCoordinator, GroupState, coordinator_for, java_hash
from broker.protocol.errors import ErrorCode

GID = "group-a"
NONE = ErrorCode.NONE


def run(coro):  # noqa: ANN001, ANN201 - a tiny helper
    return asyncio.run(asyncio.wait_for(coro, 10))


async def settle() -> None:
    """Let the tasks just created run up to their first await."""
    for _ in range(5):
        await asyncio.sleep(0)


def coord(**kwargs: Any) -> GroupCoordinator:
    """A coordinator without the initial delay and with small session bounds, unless told otherwise."""
    kwargs.setdefault("initial_delay_ms", 0)
    kwargs.setdefault("min_session_ms", 10)
    kwargs.setdefault("max_session_ms", 60_000)
    return GroupCoordinator(**kwargs)


def join_req(member_id: str = "", *, gid: str = GID, session_ms: int = 10_000, rebalance_ms: int = 5_000,
             protocol_type: str = "consumer", protocols: list[tuple[str, bytes]] | None = None,
             instance: str | None = None) -> dict[str, Any]:  # fmt: skip
    protocols = [("range", b"meta")] if protocols is None else protocols
    return {"group_id": gid, "session_timeout_ms": session_ms, "rebalance_timeout_ms": rebalance_ms,
            "member_id": member_id, "group_instance_id": instance, "protocol_type": protocol_type,
            "protocols": [{"name": n, "metadata": m} for n, m in protocols]}  # fmt: skip


def join_task(c: GroupCoordinator, req: dict[str, Any], client: str = "client") -> asyncio.Task:
    return asyncio.create_task(c.join(req, client, "/127.0.0.1"))


def sync_req(member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
             gid: str = GID) -> dict[str, Any]:  # fmt: skip
    return {"group_id": gid, "generation_id": generation, "member_id": member_id, "group_instance_id": None,
            "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()]}  # fmt: skip


def synced(assignment: bytes) -> dict[str, Any]:
    """A SyncGroup answer that succeeds, in a "consumer" group whose protocol is "range"."""
    return {"error_code": NONE, "protocol_type": "consumer", "protocol_name": "range", "assignment": assignment}


def hb(c: GroupCoordinator, member_id: str, generation: int, gid: str = GID) -> int:
    return c.heartbeat({"group_id": gid, "generation_id": generation, "member_id": member_id,
                        "group_instance_id": None})["error_code"]  # fmt: skip


async def stable_group(c: GroupCoordinator, n: int, *, session_ms: int = 10_000, rebalance_ms: int = 5_000,
                       gid: str = GID, static: bool = False) -> tuple[int, list[str]]:  # fmt: skip
    """`n` members in one Stable generation: (generation, member ids, leader first). Built the way real
    clients do it with no initial delay: each newcomer's JoinGroup starts a rebalance, the others rejoin,
    and everyone syncs. With `static` the i-th member to join has group.instance.id `instance-i`."""
    members: list[str] = []
    instance_of: dict[str, str | None] = {}
    generation = -1
    for i in range(n):
        instance = f"instance-{i}" if static else None
        newcomer = join_task(c, join_req(gid=gid, session_ms=session_ms, rebalance_ms=rebalance_ms,
                                         instance=instance), f"c{i}")  # fmt: skip
        await settle()
        rejoins = [join_task(c, join_req(m, gid=gid, session_ms=session_ms, rebalance_ms=rebalance_ms,
                                         instance=instance_of[m]), f"c{j}")
                   for j, m in enumerate(members)]  # fmt: skip
        answers = await asyncio.gather(*rejoins, newcomer)
        assert all(a["error_code"] == NONE for a in answers), answers
        assert len({a["generation_id"] for a in answers}) == 1
        generation = answers[0]["generation_id"]
        instance_of[answers[-1]["member_id"]] = instance
        members = [a["member_id"] for a in answers]
        leader = c.groups[gid].leader
        members.sort(key=lambda m: m != leader)
        syncs = [asyncio.create_task(c.sync(sync_req(m, generation, gid=gid))) for m in members[1:]]
        await settle()
        assignments = {m: f"assign-{m}".encode() for m in members}
        lead = await c.sync(sync_req(members[0], generation, assignments, gid=gid))
        assert lead == synced(assignments[members[0]])
        for m, t in zip(members[1:], syncs, strict=True):
            assert await t == synced(assignments[m])
        assert c.groups[gid].state == GroupState.STABLE
    return generation, members


def assert_empty(c: GroupCoordinator, gid: str = GID) -> None:
    """No members left: the coordinator shows the group Empty, or has forgotten it (Dead)."""
    d = c.describe(gid)
    assert d["error_code"] == NONE
    assert d["group_state"] in ("Empty", "Dead"), d
    assert d["members"] == []
    assert gid not in c.groups or (c.groups[gid].state == GroupState.EMPTY and not c.groups[gid].members)


# --- java_hash and coordinator_for ------------------------------------------------------------------


def reference_hash(text: str) -> int:
    """Java's String.hashCode written out by hand: s[0]*31^(n-1) + ... over UTF-16 code units, int overflow;
    then Kafka's Utils.abs (Integer.MIN_VALUE → 0, else Math.abs)."""
    units: list[int] = []
    for ch in text:
        cp = ord(ch)
        if cp > 0xFFFF:  # a surrogate pair
            cp -= 0x10000
            units += [0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)]
        else:
            units.append(cp)
    h = ctypes.c_int32(0)
    for u in units:
        h = ctypes.c_int32(h.value * 31 + u)
    return 0 if h.value == -(2**31) else abs(h.value)


# (text, String.hashCode() as a JVM (OpenJDK 17) prints it)
JAVA_HASH_CODES = [
    ("", 0), ("a", 97), ("Aa", 2112), ("hello", 99162322), ("hello world", 1794106052),
    ("my-consumer-group", 1513705513), ("console-consumer-12345", 158455506),
    ("analytics", -1693017210), ("kafkactl-group-negative", -449051813),
    ("group-with-a-long-name-0001", -130739145), ("polygenelubricants", -(2**31)),
    ("é", 233), ("€", 8364), ("grüße", 98768023), ("日本語のグループ", -935085811),
    ("😀", 1772899), ("a😀b😀c", 1173308226), ("𝄞 clef", 1424431552), ("\U0010ffff", 1803232),
]  # fmt: skip


@pytest.mark.parametrize("text,java_hash_code", JAVA_HASH_CODES)
def test_java_hash_is_utils_abs_of_string_hash_code(text: str, java_hash_code: int) -> None:
    """Kafka: Utils.abs(groupId.hashCode()): Math.abs, except Integer.MIN_VALUE → 0."""
    want = 0 if java_hash_code == -(2**31) else abs(java_hash_code)
    assert java_hash(text) == want
    assert reference_hash(text) == want  # the test's own transcription of the Java algorithm agrees


def test_java_hash_negative_hash_codes() -> None:
    assert java_hash("analytics") == 1693017210  # hashCode -1693017210
    assert java_hash("日本語のグループ") == 935085811  # non-ASCII, hashCode -935085811
    # Integer.MIN_VALUE has no positive counterpart: Utils.abs maps it to 0 (Math.abs would keep it negative)
    assert java_hash("polygenelubricants") == 0
    assert coordinator_for("polygenelubricants", [7, 3, 5]) == 3


@pytest.mark.parametrize("text", ["grüße", "日本語のグループ", "𝄞 clef", "a😀b😀c", "\U0010ffff", "mixed-ß-∑-🎉-" * 5,
                                  "x" * 300, "\x00\x7f\u0800\uffff"])  # fmt: skip
def test_java_hash_non_ascii_matches_the_java_algorithm(text: str) -> None:
    assert java_hash(text) == reference_hash(text)
    assert 0 <= java_hash(text) < 2**31


def test_java_hash_surrogate_pair_counts_two_code_units() -> None:
    # U+1F600 is the UTF-16 pair D83D DE00: hashed as two units, not as one code point
    assert java_hash("😀") == 0xD83D * 31 + 0xDE00 == 1772899
    assert java_hash("😀") != 0x1F600
    assert java_hash("a😀") == (97 * 31 + 0xD83D) * 31 + 0xDE00


def test_coordinator_for_is_deterministic_and_order_insensitive() -> None:
    for gid in ["", "a", "orders", "grüße", "😀", "polygenelubricants"]:
        want = sorted([1, 2, 3])[java_hash(gid) % 3]
        assert coordinator_for(gid, [1, 2, 3]) == want
        assert coordinator_for(gid, [3, 1, 2]) == want
        assert coordinator_for(gid, {2, 3, 1}) == want
        assert coordinator_for(gid, {1: "x", 3: "z", 2: "y"}) == want
    assert coordinator_for("a", [5]) == 5
    assert coordinator_for("a", []) == -1
    assert coordinator_for("a", {}) == -1
    assert coordinator_for("a", [10, 20, 30]) == [10, 20, 30][97 % 3]


def test_coordinator_for_spreads_groups_over_brokers() -> None:
    ids = [1, 2, 3]
    counts = Counter(coordinator_for(f"group-{i}", ids) for i in range(3000))
    assert set(counts) == set(ids)
    assert all(n > 800 for n in counts.values()), counts
    # sequential names land on successive brokers (the hash of "g0".."g9" increases by 1)
    assert [coordinator_for(f"g{i}", ids) for i in range(6)] == [ids[java_hash(f"g{i}") % 3] for i in range(6)]
    assert len({coordinator_for(f"g{i}", ids) for i in range(3)}) == 3


def test_coordinator_for_moves_only_with_the_live_set() -> None:
    moved = sum(coordinator_for(f"g-{i}", [1, 2, 3]) != coordinator_for(f"g-{i}", [1, 2]) for i in range(300))
    assert 0 < moved < 300
    for i in range(300):
        assert coordinator_for(f"g-{i}", [1, 2]) in (1, 2)


# --- JoinGroup and SyncGroup ------------------------------------------------------------------------


def test_two_members_join_one_generation() -> None:
    async def main() -> None:
        c = coord(initial_delay_ms=100)
        t1 = join_task(c, join_req(protocols=[("range", b"meta-1")]), "client-1")
        await settle()
        assert c.groups[GID].state == GroupState.PREPARING
        t2 = join_task(c, join_req(protocols=[("range", b"meta-2")]), "client-2")
        a1, a2 = await asyncio.gather(t1, t2)
        assert a1["error_code"] == a2["error_code"] == NONE
        assert a1["generation_id"] == a2["generation_id"] == 1
        assert a1["protocol_name"] == a2["protocol_name"] == "range"
        m1, m2 = a1["member_id"], a2["member_id"]
        assert m1 != m2 and m1.startswith("client-1-") and m2.startswith("client-2-")
        assert a1["leader"] == a2["leader"] == m1  # the first to join leads
        assert sorted((m["member_id"], m["metadata"]) for m in a1["members"]) == sorted(
            [(m1, b"meta-1"), (m2, b"meta-2")]
        )
        assert a2["members"] == []  # followers get no member list
        assert c.groups[GID].state == GroupState.COMPLETING

    run(main())


def test_first_member_alone_then_second_triggers_a_rebalance() -> None:
    async def main() -> None:
        c = coord()
        a1 = await join_task(c, join_req())
        assert (a1["error_code"], a1["generation_id"], a1["leader"]) == (NONE, 1, a1["member_id"])
        m1 = a1["member_id"]
        assert [m["member_id"] for m in a1["members"]] == [m1]
        t2 = join_task(c, join_req())
        await settle()
        assert not t2.done()  # waits for the old member to rejoin
        assert c.groups[GID].state == GroupState.PREPARING
        assert hb(c, m1, 1) == ErrorCode.REBALANCE_IN_PROGRESS
        r1 = await join_task(c, join_req(m1))
        a2 = await t2
        assert r1["generation_id"] == a2["generation_id"] == 2
        assert r1["leader"] == m1 and len(r1["members"]) == 2 and a2["members"] == []

    run(main())


def test_sync_follower_waits_for_the_leaders_assignment() -> None:
    async def main() -> None:
        c = coord(initial_delay_ms=50)
        a1, a2, a3 = await asyncio.gather(*(join_task(c, join_req()) for _ in range(3)))
        gen, leader = a1["generation_id"], a1["leader"]
        followers = [a["member_id"] for a in (a1, a2, a3) if a["member_id"] != leader]
        f1 = asyncio.create_task(c.sync(sync_req(followers[0], gen)))
        await asyncio.sleep(0.1)
        assert not f1.done()  # no assignment yet: the follower waits
        assert c.groups[GID].state == GroupState.COMPLETING
        assert hb(c, followers[0], gen) == NONE  # heartbeats are fine while completing
        # the leader assigns only one follower and itself: the other gets an empty assignment
        lead = await c.sync(sync_req(leader, gen, {leader: b"L", followers[0]: b"F0"}))
        assert lead == synced(b"L")
        assert await f1 == synced(b"F0")
        assert c.groups[GID].state == GroupState.STABLE
        late = await c.sync(sync_req(followers[1], gen))  # Stable: answered at once
        assert late == synced(b"")
        again = await c.sync(sync_req(followers[0], gen))
        assert again == synced(b"F0")

    run(main())


def test_the_leaders_sync_waits_for_the_others_so_a_follower_gets_the_generation_it_joined(monkeypatch) -> None:
    """librdkafka's cooperative rebalancing (its test 0113): the leader syncs first, gets its answer, revokes
    and rejoins at once; a follower whose SyncGroup came after that got REBALANCE_IN_PROGRESS, and its first
    assignment was the next generation's, already holding what the leader gave up. The leader's answer now
    waits for the followers' SyncGroups (as Kafka's, answered together once its append is done), up to
    SYNC_WAIT_S for one that does not come, which then gets its assignment from Stable."""
    from broker.coordinator.group import coordinator as coordinator_module

    monkeypatch.setattr(coordinator_module, "SYNC_WAIT_S", 0.2)

    async def main() -> None:
        c = coord(initial_delay_ms=30)
        a1, a2 = await asyncio.gather(join_task(c, join_req()), join_task(c, join_req()))
        gen, leader = a1["generation_id"], a1["leader"]
        follower = a2["member_id"] if leader == a1["member_id"] else a1["member_id"]
        lead = asyncio.create_task(c.sync(sync_req(leader, gen, {leader: b"p0", follower: b""})))
        await asyncio.sleep(0.05)
        assert not lead.done() and c.groups[GID].state == GroupState.COMPLETING  # (the follower still assigning)
        follow = asyncio.create_task(c.sync(sync_req(follower, gen)))
        assert await lead == synced(b"p0") and await follow == synced(b"")  # together, the same generation
        rejoin = join_task(c, join_req(leader))  # the leader revokes p1 and rejoins: the next generation
        await settle()
        assert hb(c, follower, gen) == ErrorCode.REBALANCE_IN_PROGRESS
        f, a = await asyncio.gather(join_task(c, join_req(follower)), rejoin)
        assert f["generation_id"] == a["generation_id"] == gen + 1

        # a follower that does not sync: the leader is answered SYNC_WAIT_S later, the follower from Stable
        gen += 1
        lead = asyncio.create_task(c.sync(sync_req(leader, gen, {leader: b"p0", follower: b"p1"})))
        await asyncio.sleep(0.05)
        assert not lead.done() and c.groups[GID].state == GroupState.COMPLETING
        assert await lead == synced(b"p0")
        assert c.groups[GID].state == GroupState.STABLE
        assert await c.sync(sync_req(follower, gen)) == synced(b"p1")

    run(main())


def test_sync_errors() -> None:
    async def main() -> None:
        c = coord()
        assert (await c.sync(sync_req("nobody", 1)))["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
        gen, [m1, m2] = await stable_group(c, 2)
        assert (await c.sync(sync_req("nobody", gen)))["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
        assert (await c.sync(sync_req(m2, gen + 1)))["error_code"] == ErrorCode.ILLEGAL_GENERATION
        assert (await c.sync(sync_req(m2, gen - 1)))["error_code"] == ErrorCode.ILLEGAL_GENERATION
        t3 = join_task(c, join_req())  # a newcomer: the group prepares a rebalance
        await settle()
        assert (await c.sync(sync_req(m2, gen)))["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS
        t3.cancel()

    run(main())


def test_pending_sync_is_answered_rebalance_in_progress_when_a_member_joins() -> None:
    async def main() -> None:
        c = coord(initial_delay_ms=30)
        a1, a2 = await asyncio.gather(join_task(c, join_req()), join_task(c, join_req()))
        gen = a1["generation_id"]
        follower = a2["member_id"] if a1["leader"] == a1["member_id"] else a1["member_id"]
        waiting = asyncio.create_task(c.sync(sync_req(follower, gen)))
        await settle()
        t3 = join_task(c, join_req())
        assert (await waiting)["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS
        assert c.groups[GID].state == GroupState.PREPARING
        t3.cancel()

    run(main())


def test_unchanged_follower_rejoining_a_stable_group_gets_the_current_generation() -> None:
    async def main() -> None:
        c = coord()
        gen, [leader, follower] = await stable_group(c, 2)
        again = await join_task(c, join_req(follower))  # same metadata: it lost the last answer
        assert (again["error_code"], again["generation_id"], again["leader"]) == (NONE, gen, leader)
        assert again["members"] == []
        assert c.groups[GID].state == GroupState.STABLE

    run(main())


def test_leader_rejoining_a_stable_group_triggers_a_rebalance() -> None:
    async def main() -> None:
        c = coord()
        gen, [leader, follower] = await stable_group(c, 2)
        t = join_task(c, join_req(leader))
        await settle()
        assert c.groups[GID].state == GroupState.PREPARING
        assert hb(c, follower, gen) == ErrorCode.REBALANCE_IN_PROGRESS
        f = await join_task(c, join_req(follower))
        a = await t
        assert a["generation_id"] == f["generation_id"] == gen + 1
        assert len(a["members"]) == 2

    run(main())


def test_join_unknown_member_id() -> None:
    async def main() -> None:
        c = coord()
        a = await join_task(c, join_req("ghost"))  # no such group
        assert (a["error_code"], a["member_id"]) == (ErrorCode.UNKNOWN_MEMBER_ID, "ghost")
        assert GID not in c.groups
        await stable_group(c, 1)
        b = await join_task(c, join_req("ghost"))
        assert b["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID

    run(main())


def test_join_invalid_group_id() -> None:
    async def main() -> None:
        c = coord()
        a = await join_task(c, join_req(gid=""))
        assert a["error_code"] == ErrorCode.INVALID_GROUP_ID

    run(main())


def test_join_invalid_session_timeout() -> None:
    async def main() -> None:
        c = coord(min_session_ms=6000, max_session_ms=30_000)
        for session in (0, 5999, 30_001, 2**31 - 1):
            a = await join_task(c, join_req(session_ms=session))
            assert a["error_code"] == ErrorCode.INVALID_SESSION_TIMEOUT, session
            assert a["generation_id"] == -1
        assert GID not in c.groups or not c.groups[GID].members
        for session in (6000, 30_000):  # the bounds themselves are allowed
            a = await join_task(c, join_req(session_ms=session, gid=f"g{session}"))
            assert a["error_code"] == NONE

    run(main())


def test_join_inconsistent_group_protocol() -> None:
    async def main() -> None:
        c = coord()
        _, [m1] = await stable_group(c, 1)
        other_type = await join_task(c, join_req(protocol_type="connect"))
        assert other_type["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        no_common = await join_task(c, join_req(protocols=[("roundrobin", b""), ("sticky", b"")]))
        assert no_common["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        none = await join_task(c, join_req(protocols=[]))
        assert none["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert list(c.groups[GID].members) == [m1]  # nobody was added
        assert c.groups[GID].state == GroupState.STABLE
        # an empty protocol list is refused on a new group too
        fresh = await join_task(c, join_req(gid="fresh", protocols=[]))
        assert fresh["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL

    run(main())


def test_join_chooses_a_protocol_every_member_supports() -> None:
    async def main() -> None:
        c = coord(initial_delay_ms=50)
        a1, a2 = await asyncio.gather(
            join_task(c, join_req(protocols=[("roundrobin", b"r1"), ("range", b"g1")])),
            join_task(c, join_req(protocols=[("sticky", b"s2"), ("range", b"g2"), ("roundrobin", b"r2")])),
        )
        assert a1["protocol_name"] == a2["protocol_name"]
        chosen = a1["protocol_name"]
        assert chosen in ("roundrobin", "range")
        leader = a1 if a1["members"] else a2
        want = {"roundrobin": {b"r1", b"r2"}, "range": {b"g1", b"g2"}}[chosen]
        assert {m["metadata"] for m in leader["members"]} == want  # each member's metadata of that protocol

    run(main())


# --- Heartbeat ----------------------------------------------------------------------------------------


def test_heartbeat_errors() -> None:
    async def main() -> None:
        c = coord()
        assert hb(c, "nobody", 0) == ErrorCode.UNKNOWN_MEMBER_ID  # no such group
        gen, [m1, m2] = await stable_group(c, 2)
        assert hb(c, m1, gen) == NONE
        assert hb(c, m2, gen) == NONE
        assert hb(c, "nobody", gen) == ErrorCode.UNKNOWN_MEMBER_ID
        assert hb(c, m2, gen - 1) == ErrorCode.ILLEGAL_GENERATION
        assert hb(c, m2, gen + 1) == ErrorCode.ILLEGAL_GENERATION
        t3 = join_task(c, join_req())  # a new member joins: the others hear of it through heartbeats
        await settle()
        assert hb(c, m1, gen) == ErrorCode.REBALANCE_IN_PROGRESS
        assert hb(c, m2, gen) == ErrorCode.REBALANCE_IN_PROGRESS
        r1, r2, a3 = await asyncio.gather(join_task(c, join_req(m1)), join_task(c, join_req(m2)), t3)
        new_gen = r1["generation_id"]
        assert new_gen == r2["generation_id"] == a3["generation_id"] == gen + 1
        assert hb(c, m1, gen) == ErrorCode.ILLEGAL_GENERATION  # the old generation is stale now
        assert hb(c, m1, new_gen) == NONE  # CompletingRebalance: heartbeats are answered NONE

    run(main())


# --- LeaveGroup ---------------------------------------------------------------------------------------


def test_leave_group_v0_triggers_a_rebalance() -> None:
    async def main() -> None:
        c = coord()
        gen, [leader, follower] = await stable_group(c, 2)
        unknown = c.leave({"group_id": GID, "member_id": "nobody"}, 0)
        assert unknown == {"error_code": ErrorCode.UNKNOWN_MEMBER_ID}
        assert c.groups[GID].state == GroupState.STABLE
        assert c.leave({"group_id": GID, "member_id": leader}, 0) == {"error_code": NONE}
        assert c.groups[GID].state == GroupState.PREPARING
        assert leader not in c.groups[GID].members
        assert hb(c, leader, gen) == ErrorCode.UNKNOWN_MEMBER_ID
        assert hb(c, follower, gen) == ErrorCode.REBALANCE_IN_PROGRESS
        a = await join_task(c, join_req(follower))
        assert (a["generation_id"], a["leader"]) == (gen + 1, follower)  # the survivor now leads
        assert [m["member_id"] for m in a["members"]] == [follower]
        assert c.leave({"group_id": "no-such-group", "member_id": follower}, 1) == {
            "error_code": ErrorCode.UNKNOWN_MEMBER_ID
        }

    run(main())


def test_leave_group_v3_batch() -> None:
    async def main() -> None:
        c = coord()
        gen, [m1, m2, m3] = await stable_group(c, 3)
        answer = c.leave({"group_id": GID, "members": [
            {"member_id": m2, "group_instance_id": None},
            {"member_id": "nobody", "group_instance_id": None},
            {"member_id": m3, "group_instance_id": None},
        ]}, 3)  # fmt: skip
        assert answer["error_code"] == NONE
        assert [(r["member_id"], r["error_code"]) for r in answer["members"]] == [
            (m2, NONE), ("nobody", ErrorCode.UNKNOWN_MEMBER_ID), (m3, NONE),
        ]  # fmt: skip
        assert list(c.groups[GID].members) == [m1]
        assert c.groups[GID].state == GroupState.PREPARING
        assert hb(c, m1, gen) == ErrorCode.REBALANCE_IN_PROGRESS
        a = await join_task(c, join_req(m1))
        assert a["generation_id"] == gen + 1 and [m["member_id"] for m in a["members"]] == [m1]
        # the last member leaving empties the group (a new generation, no protocol)
        await c.sync(sync_req(m1, gen + 1, {m1: b"all"}))
        last = c.leave({"group_id": GID, "members": [{"member_id": m1, "group_instance_id": None}]}, 3)
        assert last["members"][0]["error_code"] == NONE
        assert_empty(c)
        unknown_group = c.leave({"group_id": "other", "members": [{"member_id": "x", "group_instance_id": None}]}, 3)
        assert unknown_group["error_code"] == NONE
        assert [r["error_code"] for r in unknown_group["members"]] == [ErrorCode.UNKNOWN_MEMBER_ID]

    run(main())


def test_leave_while_others_wait_in_join_completes_the_rebalance() -> None:
    async def main() -> None:
        c = coord()
        gen, [m1, m2] = await stable_group(c, 2)
        t3 = join_task(c, join_req())
        await settle()
        r1 = join_task(c, join_req(m1))
        await settle()
        assert not t3.done() and not r1.done()  # m2 has not rejoined yet
        c.leave({"group_id": GID, "member_id": m2}, 0)  # ...and leaves instead: no need to wait for it
        a3, a1 = await asyncio.gather(t3, r1)
        assert a3["generation_id"] == a1["generation_id"] == gen + 1
        assert {m["member_id"] for m in a1["members"]} == {m1, a3["member_id"]}

    run(main())


def test_member_that_does_not_rejoin_is_dropped_after_the_rebalance_timeout() -> None:
    async def main() -> None:
        c = coord()
        _, [m1, m2] = await stable_group(c, 2, rebalance_ms=300)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        a1 = await join_task(c, join_req(m1, rebalance_ms=300))  # the leader rejoins; m2 never does
        elapsed = loop.time() - t0
        assert 0.25 <= elapsed < 2.0, elapsed
        assert [m["member_id"] for m in a1["members"]] == [m1]
        assert m2 not in c.groups[GID].members

    run(main())


# --- session expiry -----------------------------------------------------------------------------------


def test_session_expiry_removes_a_silent_member_and_rebalances() -> None:
    async def main() -> None:
        c = coord()
        c.start()
        try:
            gen, [m1, m2] = await stable_group(c, 2, session_ms=400)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            deadline = t0 + 5
            # m1 keeps heartbeating, m2 falls silent
            while m2 in c.groups[GID].members and loop.time() < deadline:
                assert hb(c, m1, gen) in (NONE, ErrorCode.REBALANCE_IN_PROGRESS)
                await asyncio.sleep(0.05)
            expired_after = loop.time() - t0
            assert m2 not in c.groups[GID].members
            assert 0.35 <= expired_after <= 1.5, expired_after  # session 0.4 s, swept every 0.25 s
            assert c.groups[GID].state == GroupState.PREPARING
            assert hb(c, m1, gen) == ErrorCode.REBALANCE_IN_PROGRESS
            assert hb(c, m2, gen) == ErrorCode.UNKNOWN_MEMBER_ID
            a = await join_task(c, join_req(m1, session_ms=400))
            assert (a["generation_id"], a["leader"]) == (gen + 1, m1)
            assert [m["member_id"] for m in a["members"]] == [m1]
        finally:
            c.close()

    run(main())


def test_session_expiry_spares_heartbeating_members_and_members_waiting_in_join() -> None:
    async def main() -> None:
        c = coord()
        c.start()
        try:
            gen, [m1, m2] = await stable_group(c, 2, session_ms=300)
            loop = asyncio.get_running_loop()
            end = loop.time() + 1.0
            while loop.time() < end:  # both heartbeat for over three session timeouts
                assert hb(c, m1, gen) == NONE and hb(c, m2, gen) == NONE
                await asyncio.sleep(0.05)
            assert set(c.groups[GID].members) == {m1, m2}
            # m1 rejoins (a rebalance) and waits in JoinGroup far longer than its session: not expired
            t1 = join_task(c, join_req(m1, session_ms=300, rebalance_ms=5000))
            await settle()
            end = loop.time() + 0.8
            while loop.time() < end:
                assert hb(c, m2, gen) == ErrorCode.REBALANCE_IN_PROGRESS
                await asyncio.sleep(0.05)
            assert not t1.done()
            assert m1 in c.groups[GID].members
            r2 = await join_task(c, join_req(m2, session_ms=300))
            a1 = await t1
            assert a1["generation_id"] == r2["generation_id"] == gen + 1
        finally:
            c.close()

    run(main())


def test_session_expiry_of_the_only_member_empties_the_group() -> None:
    async def main() -> None:
        c = coord()
        c.start()
        try:
            gen, [m1] = await stable_group(c, 1, session_ms=200)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 3
            while c.describe(GID)["members"] and loop.time() < deadline:
                await asyncio.sleep(0.05)
            assert_empty(c)
            assert hb(c, m1, gen) == ErrorCode.UNKNOWN_MEMBER_ID
        finally:
            c.close()

    run(main())


def test_session_expiry_spares_members_waiting_in_sync_group() -> None:
    async def main() -> None:
        c = coord(initial_delay_ms=30)
        c.start()
        try:
            a1, a2 = await asyncio.gather(
                join_task(c, join_req(session_ms=300)), join_task(c, join_req(session_ms=300))
            )
            gen, leader = a1["generation_id"], a1["leader"]
            follower = a2["member_id"] if a1["member_id"] == leader else a1["member_id"]
            waiting = asyncio.create_task(c.sync(sync_req(follower, gen)))
            for _ in range(16):  # the leader takes 0.8 s to assign, heartbeating meanwhile
                assert hb(c, leader, gen) == NONE
                await asyncio.sleep(0.05)
            lead = await c.sync(sync_req(leader, gen, {leader: b"L", follower: b"F"}))
            assert lead["error_code"] == NONE
            assert await waiting == synced(b"F")
        finally:
            c.close()

    run(main())


# --- initial rebalance delay ------------------------------------------------------------------------------


def test_initial_rebalance_delay_is_respected() -> None:
    async def main() -> None:
        c = coord(initial_delay_ms=400)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        t1 = join_task(c, join_req())
        await asyncio.sleep(0.15)
        assert not t1.done()
        t2 = join_task(c, join_req())  # joins inside the delay: the same first generation
        a1, a2 = await asyncio.gather(t1, t2)
        elapsed = loop.time() - t0
        assert 0.38 <= elapsed < 1.5, elapsed
        assert a1["generation_id"] == a2["generation_id"] == 1
        assert len(a1["members"]) == 2
        # the delay is for a group starting from Empty only: a later rebalance does not wait for it
        t3 = join_task(c, join_req())
        await settle()
        t0 = loop.time()
        answers = await asyncio.gather(join_task(c, join_req(a1["member_id"])),
                                       join_task(c, join_req(a2["member_id"])), t3)  # fmt: skip
        assert loop.time() - t0 < 0.3
        assert {a["generation_id"] for a in answers} == {2}

    run(main())


def test_no_initial_delay_when_zero() -> None:
    async def main() -> None:
        c = coord(initial_delay_ms=0)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        a = await join_task(c, join_req())
        assert loop.time() - t0 < 0.2
        assert a["generation_id"] == 1

    run(main())


def test_initial_delay_is_extended_by_members_joining_during_it() -> None:
    async def main() -> None:
        c = coord(initial_delay_ms=300)
        t1 = join_task(c, join_req(rebalance_ms=1000))
        await asyncio.sleep(0.2)
        t2 = join_task(c, join_req(rebalance_ms=1000))  # a newcomer inside the first delay: Kafka waits 300 ms more
        await asyncio.sleep(0.2)  # t = 0.4: past the first delay, inside the extended one
        t3 = join_task(c, join_req(rebalance_ms=1000))
        a = await asyncio.gather(t1, t2, t3)
        assert [x["generation_id"] for x in a] == [1, 1, 1]

    run(main())


# --- offsets: commit checks ------------------------------------------------------------------------------


def test_commit_error_simple_commit_on_an_empty_or_unknown_group() -> None:
    async def main() -> None:
        c = coord()
        assert c.commit_error("unknown-group", "", -1) == NONE  # no coordinator membership at all
        gen, [m1] = await stable_group(c, 1)
        c.leave({"group_id": GID, "member_id": m1}, 0)
        assert_empty(c)
        assert c.commit_error(GID, "", -1) == NONE  # a group whose members all left
        assert c.commit_error(GID, m1, gen) != NONE  # ...but not for a member that left

    run(main())


def test_commit_error_member_checks() -> None:
    async def main() -> None:
        c = coord()
        gen, [m1, m2] = await stable_group(c, 2)
        assert c.commit_error(GID, m1, gen) == NONE
        assert c.commit_error(GID, m2, gen) == NONE
        assert c.commit_error(GID, "", -1) == ErrorCode.UNKNOWN_MEMBER_ID  # a live group: not a simple commit
        assert c.commit_error(GID, "nobody", gen) == ErrorCode.UNKNOWN_MEMBER_ID
        assert c.commit_error(GID, m1, gen - 1) == ErrorCode.ILLEGAL_GENERATION  # stale generation
        assert c.commit_error(GID, m1, gen + 1) == ErrorCode.ILLEGAL_GENERATION
        # CompletingRebalance: the member has the new generation but no assignment yet
        t3 = join_task(c, join_req())
        r = await asyncio.gather(join_task(c, join_req(m1)), join_task(c, join_req(m2)), t3)
        new_gen = r[0]["generation_id"]
        assert c.groups[GID].state == GroupState.COMPLETING
        assert c.commit_error(GID, m1, new_gen) == ErrorCode.REBALANCE_IN_PROGRESS
        assert c.commit_error(GID, m1, gen) == ErrorCode.ILLEGAL_GENERATION

    run(main())


def test_commit_in_preparing_rebalance_is_accepted_like_kafka() -> None:
    async def main() -> None:
        c = coord()
        gen, [m1, _] = await stable_group(c, 2)
        t3 = join_task(c, join_req())
        await settle()
        assert c.groups[GID].state == GroupState.PREPARING
        try:
            assert c.commit_error(GID, m1, gen) == NONE
        finally:
            t3.cancel()

    run(main())


def test_commit_with_a_generation_to_an_unknown_group_is_illegal_generation() -> None:
    assert coord().commit_error("unknown-group", "member-1", 3) == ErrorCode.ILLEGAL_GENERATION


# --- describe() -------------------------------------------------------------------------------------------


def test_describe_states() -> None:
    async def main() -> None:
        c = coord(initial_delay_ms=100)
        dead = c.describe("nope")
        assert (dead["error_code"], dead["group_id"], dead["group_state"]) == (NONE, "nope", "Dead")
        assert dead["members"] == []
        t1 = join_task(c, join_req(protocols=[("range", b"M1")]), "cid-1")
        await settle()
        d = c.describe(GID)
        assert d["group_state"] == "PreparingRebalance"
        assert [m["client_id"] for m in d["members"]] == ["cid-1"]
        a1 = await t1
        m1, gen = a1["member_id"], a1["generation_id"]
        d = c.describe(GID)
        assert d["group_state"] == "CompletingRebalance"
        await c.sync(sync_req(m1, gen, {m1: b"ASSIGNED"}))
        d = c.describe(GID)
        summary = (d["error_code"], d["group_state"], d["protocol_type"], d["protocol_data"])
        assert summary == (NONE, "Stable", "consumer", "range")
        [m] = d["members"]
        assert m == {"member_id": m1, "group_instance_id": None, "client_id": "cid-1", "client_host": "/127.0.0.1",
                     "member_metadata": b"M1", "member_assignment": b"ASSIGNED"}  # fmt: skip
        c.leave({"group_id": GID, "member_id": m1}, 0)
        assert_empty(c)

    run(main())


def test_the_last_member_leaving_forgets_the_group() -> None:
    """Membership is all the coordinator keeps: an empty group is forgotten (describe says Dead); the
    DescribeGroups handler then answers Empty for a group with committed offsets in ZooKeeper."""

    async def main() -> None:
        c = coord()
        _, [m1] = await stable_group(c, 1)
        c.leave({"group_id": GID, "member_id": m1}, 0)
        assert GID not in c.groups
        assert c.describe(GID)["group_state"] == "Dead"

    run(main())


def test_describe_of_a_rebalancing_group_has_no_metadata_like_kafka() -> None:
    async def main() -> None:
        c = coord()
        gen, [m1, m2] = await stable_group(c, 2)
        t3 = join_task(c, join_req())
        await settle()
        d = c.describe(GID)
        try:
            assert d["group_state"] == "PreparingRebalance"
            assert d["protocol_data"] == ""
            assert all(m["member_metadata"] == b"" and m["member_assignment"] == b"" for m in d["members"])
        finally:
            t3.cancel()

    run(main())


def test_leader_rejoining_unchanged_while_completing_gets_the_current_generation() -> None:
    async def main() -> None:
        c = coord(initial_delay_ms=30)
        a1, a2 = await asyncio.gather(join_task(c, join_req("", protocols=[("range", b"x")])),
                                      join_task(c, join_req("", protocols=[("range", b"y")])))  # fmt: skip
        leader = a1["leader"]
        mine = a1 if a1["member_id"] == leader else a2
        assert c.groups[GID].state == GroupState.COMPLETING
        t = join_task(c, join_req(leader, protocols=[("range", b"x" if mine is a1 else b"y")]))
        await settle()
        try:
            assert t.done()
            again = t.result()
            assert (again["generation_id"], len(again["members"])) == (mine["generation_id"], 2)
        finally:
            t.cancel()

    run(main())


def test_join_with_empty_protocol_type_is_inconsistent_like_kafka() -> None:
    async def main() -> None:
        c = coord()
        a = await join_task(c, join_req(protocol_type=""))
        assert a["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL

    run(main())


# --- unload (the group moved to another broker) and close ---------------------------------------------


def test_unload_answers_waiting_members_not_coordinator() -> None:
    async def main() -> None:
        c = coord()
        gen, [m1, m2] = await stable_group(c, 2)
        t3 = join_task(c, join_req())
        r1 = join_task(c, join_req(m1))
        await settle()
        c.unload(GID)
        a3, a1 = await asyncio.gather(t3, r1)
        assert a3["error_code"] == a1["error_code"] == ErrorCode.NOT_COORDINATOR
        assert GID not in c.groups
        assert hb(c, m2, gen) == ErrorCode.UNKNOWN_MEMBER_ID
        c.unload("never-there")  # harmless

    run(main())


def test_close_answers_waiting_syncs_and_stops_the_sweeper() -> None:
    async def main() -> None:
        c = coord(initial_delay_ms=20)
        c.start()
        a1, a2 = await asyncio.gather(join_task(c, join_req()), join_task(c, join_req()))
        follower = a2["member_id"] if a1["leader"] == a1["member_id"] else a1["member_id"]
        s = asyncio.create_task(c.sync(sync_req(follower, a1["generation_id"])))
        await settle()
        c.close()
        assert (await s)["error_code"] == ErrorCode.NOT_COORDINATOR
        assert c.groups == {}
        await settle()
        assert c._sweeper is not None and c._sweeper.cancelled()

    run(main())


# --- static membership (KIP-345) ---------------------------------------------------------------------


def static_sync(c: GroupCoordinator, member_id: str, generation: int, instance: str) -> dict[str, Any]:
    return {**sync_req(member_id, generation), "group_instance_id": instance}


def test_a_static_member_joins_without_asking_for_a_member_id_and_restarts_without_a_rebalance() -> None:
    """A restarted static follower (no member id, its instance id) takes its old place and assignment in the
    same generation; the other member's heartbeats never see a rebalance; the old id is fenced everywhere."""

    async def main() -> None:
        c = coord()
        gen, [leader, follower] = await stable_group(c, 2, static=True)
        instance = c.groups[GID].members[follower].group_instance_id
        back = await join_task(c, join_req(instance=instance), "restarted")
        new_id = back["member_id"]
        assert (back["error_code"], back["generation_id"], back["leader"], back["members"]) == (NONE, gen, leader, [])
        assert new_id != follower and c.groups[GID].state == GroupState.STABLE
        assert hb(c, leader, gen) == NONE  # no rebalance for the others
        answer = await c.sync(static_sync(c, new_id, gen, instance))
        assert answer == synced(f"assign-{follower}".encode())
        fenced = ErrorCode.FENCED_INSTANCE_ID
        assert c.heartbeat({"group_id": GID, "generation_id": gen, "member_id": follower,
                            "group_instance_id": instance})["error_code"] == fenced  # fmt: skip
        assert (await join_task(c, join_req(follower, instance=instance)))["error_code"] == fenced
        assert c.commit_error(GID, follower, gen, instance) == fenced
        assert c.commit_error(GID, new_id, gen, instance) == NONE
        assert [m["member_id"] for m in c.describe(GID)["members"]] == [leader, new_id]

    run(main())


def test_a_restarted_static_leader_is_answered_with_the_old_leader_id_so_it_assigns_nothing() -> None:
    async def main() -> None:
        c = coord()
        gen, [leader, follower] = await stable_group(c, 2, static=True)
        instance = c.groups[GID].members[leader].group_instance_id
        back = await join_task(c, join_req(instance=instance))
        assert (back["generation_id"], back["leader"], back["members"]) == (gen, leader, [])  # not "you lead"
        assert c.groups[GID].leader == back["member_id"]  # the group's leader is its new incarnation
        answer = await c.sync(static_sync(c, back["member_id"], gen, instance))  # a follower's sync: no assignments
        assert answer == synced(f"assign-{leader}".encode())
        assert hb(c, follower, gen) == NONE

    run(main())


def test_a_static_member_restarting_while_the_group_completes_a_rebalance_rebalances() -> None:
    """In CompletingRebalance the leader may be assigning to the old member id: the group rebalances again,
    and the old incarnation's waiting SyncGroup is fenced."""

    async def main() -> None:
        c = coord()
        gen, [leader, follower, other] = await stable_group(c, 3, static=True)
        instance_of = {m: c.groups[GID].members[m].group_instance_id for m in (leader, follower)}
        c.leave({"group_id": GID, "members": [{"member_id": other, "group_instance_id": None}]}, 3)
        rejoined = await asyncio.gather(*(join_task(c, join_req(m, instance=instance_of[m])) for m in instance_of))
        assert {a["generation_id"] for a in rejoined} == {gen + 1} and c.groups[GID].state == GroupState.COMPLETING
        waiting = asyncio.create_task(c.sync(static_sync(c, follower, gen + 1, instance_of[follower])))
        await settle()
        back = join_task(c, join_req(instance=instance_of[follower]))  # it restarted before the leader synced
        await settle()
        assert (await waiting)["error_code"] == ErrorCode.FENCED_INSTANCE_ID
        assert c.groups[GID].state == GroupState.PREPARING
        lead = await join_task(c, join_req(leader, instance=instance_of[leader]))
        b = await back
        assert (lead["generation_id"], b["generation_id"], b["leader"]) == (gen + 2, gen + 2, leader)
        assert {m["member_id"] for m in lead["members"]} == {leader, b["member_id"]}

    run(main())


def test_a_static_member_that_misses_a_rebalance_keeps_its_place_until_its_session_ends() -> None:
    """Kafka's rule: only dynamic members are dropped for not rejoining in time; the absent static member
    is still in the next generation (the leader assigns to it) and leaves when its session runs out."""

    async def main() -> None:
        c = coord()
        c.start()
        try:
            gen, [leader, absent] = await stable_group(c, 2, static=True, session_ms=800, rebalance_ms=200)
            newcomer = join_task(c, join_req(session_ms=800, rebalance_ms=200))
            await settle()
            lead = await join_task(c, join_req(leader, session_ms=800, rebalance_ms=200,
                                               instance=c.groups[GID].members[leader].group_instance_id))  # fmt: skip
            n = await newcomer
            assert lead["generation_id"] == n["generation_id"] == gen + 1
            assert {m["member_id"] for m in lead["members"]} == {leader, absent, n["member_id"]}
            follower_sync = asyncio.create_task(c.sync(sync_req(n["member_id"], gen + 1)))
            await settle()
            given = {leader: b"l", absent: b"a", n["member_id"]: b"n"}
            assert (await c.sync(sync_req(leader, gen + 1, given)))["assignment"] == b"l"
            assert (await follower_sync)["assignment"] == b"n" and c.groups[GID].members[absent].assignment == b"a"
            instance = c.groups[GID].members[absent].group_instance_id
            while absent in c.groups[GID].members:  # the others heartbeat; the absent one's session runs out
                assert hb(c, leader, gen + 1) == hb(c, n["member_id"], gen + 1) == NONE
                await asyncio.sleep(0.05)
            assert c.groups[GID].state == GroupState.PREPARING and instance not in c.groups[GID].static
        finally:
            c.close()

    run(main())


def test_leave_group_by_instance_id() -> None:
    async def main() -> None:
        c = coord()
        gen, [m1, m2, m3] = await stable_group(c, 3, static=True)
        i2, i3 = (c.groups[GID].members[m].group_instance_id for m in (m2, m3))
        answer = c.leave({"group_id": GID, "members": [
            {"member_id": "", "group_instance_id": i2},  # by instance id alone (an admin removing it)
            {"member_id": m2, "group_instance_id": i3},  # a member id that is not this instance's
            {"member_id": "", "group_instance_id": "instance-unknown"},
        ]}, 3)  # fmt: skip
        assert [(r["member_id"], r["error_code"]) for r in answer["members"]] == [
            (m2, NONE), (m2, ErrorCode.FENCED_INSTANCE_ID), ("", ErrorCode.UNKNOWN_MEMBER_ID)]  # fmt: skip
        assert list(c.groups[GID].members) == [m1, m3] and i2 not in c.groups[GID].static
        # as Kafka: a known member id with an instance id the group does not know leaves all the same
        gone = c.leave({"group_id": GID, "members": [{"member_id": m3, "group_instance_id": "instance-other"}]}, 3)
        assert gone["members"][0]["error_code"] == NONE and list(c.groups[GID].members) == [m1]
        assert i3 not in c.groups[GID].static
        back = await join_task(c, join_req(instance=i2))  # a new member now: it joins through a rebalance
        assert back["error_code"] == NONE and back["member_id"] not in (m1, m2, m3)

    run(main())


# --- a stable generation stored, and taken over by another coordinator --------------------------------------


def test_each_stable_generation_is_stored_and_the_end_of_the_group_too() -> None:
    async def main() -> None:
        stored: list[tuple[str, int, dict[str, Any] | None]] = []
        c = coord(store=lambda gid, generation, state: stored.append((gid, generation, state)))
        gen, [leader, follower] = await stable_group(c, 2, static=True)
        assert [(g, s["generation"]) for _, g, s in stored] == [(gen - 1, gen - 1), (gen, gen)]  # one per generation
        gid, _, last = stored[-1]
        assert gid == GID and (last["leader"], last["protocol"], last["protocol_type"]) == (leader, "range", "consumer")
        range_meta = [{"name": "range", "metadata": b"meta"}]
        assert [(m["member_id"], m["group_instance_id"], m["protocols"], m["assignment"]) for m in last["members"]] == [
            (leader, "instance-0", range_meta, f"assign-{leader}".encode()),
            (follower, "instance-1", range_meta, f"assign-{follower}".encode())]  # fmt: skip
        back = await join_task(c, join_req(instance="instance-1"))  # a static restart: stored, no rebalance
        assert stored[-1][2]["generation"] == gen and back["member_id"] in {m["member_id"] for m in
                                                                            stored[-1][2]["members"]}  # fmt: skip
        c.leave({"group_id": GID, "members": [{"member_id": "", "group_instance_id": "instance-0"},
                                              {"member_id": "", "group_instance_id": "instance-1"}]}, 3)  # fmt: skip
        assert stored[-1] == (GID, gen + 1, None)  # (the leaving started a generation nobody joined)

    run(main())


def test_a_coordinator_taking_a_group_over_keeps_its_generation_members_and_instances() -> None:
    async def main() -> None:
        stored: dict[str, Any] = {}
        old = coord(store=lambda gid, generation, state: stored.__setitem__(gid, state))
        gen, [leader, follower] = await stable_group(old, 2, static=True)
        new = coord()
        new.restore(GID, stored[GID])
        assert new.groups[GID].state == GroupState.STABLE and new.groups[GID].leader == leader
        assert hb(new, leader, gen) == hb(new, follower, gen) == NONE
        assert new.commit_error(GID, follower, gen) == NONE
        assert await new.sync(sync_req(follower, gen)) == synced(f"assign-{follower}".encode())
        old_incarnation = {"group_id": GID, "generation_id": gen, "member_id": "old", "group_instance_id": "instance-1"}
        assert new.heartbeat(old_incarnation)["error_code"] == ErrorCode.FENCED_INSTANCE_ID
        d = new.describe(GID)
        assert [(m["member_id"], m["member_metadata"]) for m in d["members"]] == [(leader, b"meta"),
                                                                                  (follower, b"meta")]  # fmt: skip
        new.restore(GID, {**stored[GID], "generation": 99})  # a group it knows already is not replaced
        assert new.groups[GID].generation == gen
        # a read that started before the group was forgotten or handed over does not bring it back
        new.begin_load(GID)
        new.unload(GID)
        new.end_load(GID, stored[GID])
        assert GID not in new.groups
        new.begin_load(GID)
        new.end_load(GID, stored[GID])
        assert new.groups[GID].generation == gen
        # the next rebalance goes on from the stored generation
        t = join_task(new, join_req(leader, instance="instance-0"))
        f = await join_task(new, join_req(follower, instance="instance-1"))
        assert (await t)["generation_id"] == f["generation_id"] == gen + 1

    run(main())


def test_on_drop_is_told_when_a_group_empties_or_moves_away() -> None:
    """The group store answers a live group's offsets from memory during a ZooKeeper outage; it must forget
    them once the group is no longer this coordinator's (emptied: `kafkactl group rewind` may then change
    them; moved: its new coordinator's members commit elsewhere)."""

    async def main() -> None:
        dropped: list[str] = []
        c = coord(on_drop=dropped.append, store=lambda *a: None)
        gen, [m1, m2] = await stable_group(c, 2)
        assert dropped == []
        c.leave({"group_id": GID, "member_id": m1}, 0)
        c.leave({"group_id": GID, "member_id": m2}, 0)
        await settle()
        assert dropped == [GID] and GID not in c.groups
        await stable_group(c, 1)
        c.unload(GID)
        c.unload(GID)  # (already gone: not told twice)
        assert dropped == [GID, GID]

    run(main())


# --- what DeleteGroups and OffsetDelete ask ----------------------------------------------------------------------


def subscription(*topics: str, version: int = 1) -> bytes:
    """A consumer-protocol subscription as clients write it (v1: with owned partitions)."""
    out = version.to_bytes(2, "big") + len(topics).to_bytes(4, "big")
    for t in topics:
        out += len(t).to_bytes(2, "big") + t.encode()
    out += (-1).to_bytes(4, "big", signed=True)  # no user data
    return out + (0).to_bytes(4, "big") if version >= 1 else out


def test_members_and_their_subscribed_topics() -> None:
    async def main() -> None:
        c = coord()
        assert not c.has_members(GID) and c.subscribed_topics(GID) == set()
        first = [("range", subscription("orders", "audit"))]
        a = (await join_task(c, join_req(protocols=first)))["member_id"]
        assert c.has_members(GID) and c.subscribed_topics(GID) == {"orders", "audit"}
        b = join_task(c, join_req(protocols=[("range", subscription("payments", version=0))]))
        await settle()
        await asyncio.gather(join_task(c, join_req(a, protocols=first)), b)  # (a rejoins the rebalance)
        assert c.subscribed_topics(GID) == {"orders", "audit", "payments"}
        c.groups[GID].members[a].protocols = [("range", b"\x00")]  # unreadable
        assert c.subscribed_topics(GID) is None
        other = join_task(c, join_req(gid="connect", protocol_type="connect",
                                      protocols=[("v1", subscription("orders"))]))  # fmt: skip
        await other
        assert c.subscribed_topics("connect") is None  # not the consumer protocol
        c.close()

    run(main())


def test_sync_checks_a_given_protocol_type_and_name_after_the_generation_like_kafka() -> None:
    """SyncGroup v5 names the protocol type and name: a mismatch is INCONSISTENT_GROUP_PROTOCOL, checked after
    membership and generation (as Kafka's doSyncGroup); JoinGroup v7 answers the group's protocol type."""

    async def main() -> None:
        c = coord()
        gen, [leader, follower] = await stable_group(c, 2)
        inconsistent = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        for protocol_type, protocol_name in (("connect", "range"), ("consumer", "roundrobin"), ("", "")):
            req = {**sync_req(follower, gen), "protocol_type": protocol_type, "protocol_name": protocol_name}
            assert (await c.sync(req))["error_code"] == inconsistent, (protocol_type, protocol_name)
        right = {**sync_req(follower, gen), "protocol_type": "consumer", "protocol_name": "range"}
        assert await c.sync(right) == synced(f"assign-{follower}".encode())
        wrong_gen = {**sync_req(follower, gen + 1), "protocol_type": "connect", "protocol_name": "x"}
        assert (await c.sync(wrong_gen))["error_code"] == ErrorCode.ILLEGAL_GENERATION
        stranger = {**sync_req("nobody", gen), "protocol_type": "connect", "protocol_name": "x"}
        assert (await c.sync(stranger))["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
        again = await join_task(c, join_req(follower))  # an unchanged follower of a stable group
        assert (again["protocol_type"], again["protocol_name"], again["generation_id"]) == ("consumer", "range", gen)

    run(main())
