"""Group offset commits per second that one broker writes to ZooKeeper, with many groups committing at once.

    .venv/bin/python benchmarks/offset_commits.py [--groups 1000] [--partitions 1000] [--per-group 50]
                                                  [--rounds 4] [--no-epoch] [--connections 1000]

Starts a private ZooKeeper and one broker (`private_broker.py`), a topic of `--partitions` partitions, and
`--groups` groups without members, each committing (OffsetCommit outside a generation, as an admin client
does) the offsets of `--per-group` partitions of it (group g from partition g * per-group, wrapping around),
all groups at once, `--rounds` times, each round's offsets one higher, over `--connections` client connections
(at most one a group, as each group's consumer has its own: a broker answers a connection's requests one at a
time, in order, as Kafka does, so a few connections shared by many groups would time their queue). Leader
epoch 0 on each commit unless `--no-epoch` (clients send the epoch they fetched at, which the broker keeps with
the offset).

The broker answers a commit once written or after about a second still held, so answers do not time the
writes: a round ends when ZooKeeper holds every offset it committed, read back (pipelined, untimed) from its
offset blocks; its time is the last of those blocks' modification time (ZooKeeper's clock, the same machine's)
less the round's start. The first round creates the blocks; the later ones set them.
JSON on stdout: partition-offsets/s per round, and of the rounds after the first together.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from kazoo.client import KazooClient
from private_broker import private_broker

from broker.client.admin import Admin
from broker.client.aio import AsyncConnection
from broker.protocol.api import ApiKey
from broker.zk import batch, consumers, paths
from broker.zk import client as zkclient

TOPIC = "commits"


def group_partitions(g: int, partitions: int, per_group: int) -> list[int]:
    return [(g * per_group + i) % partitions for i in range(per_group)]


async def commit_round(conns: list[AsyncConnection], groups: int, partitions: int, per_group: int, offset: int,
                       epoch: int) -> None:  # fmt: skip
    async def one(g: int) -> None:
        ps = [{"partition_index": p, "committed_offset": offset, "committed_leader_epoch": epoch,
               "committed_metadata": ""} for p in group_partitions(g, partitions, per_group)]  # fmt: skip
        body = {"group_id": f"bench-{g}", "generation_id": -1, "member_id": "", "group_instance_id": None,
                "retention_time_ms": -1, "topics": [{"name": TOPIC, "partitions": ps}]}  # fmt: skip
        answer = await conns[g % len(conns)].request(ApiKey.OFFSET_COMMIT, body, timeout=120)
        codes = {p["error_code"] for t in answer["topics"] for p in t["partitions"]}
        if codes != {0}:
            raise RuntimeError(f"group bench-{g}: commit refused: {codes}")

    await asyncio.gather(*(one(g) for g in range(groups)))


def wait_written(zk: KazooClient, groups: int, partitions: int, per_group: int, offset: int) -> float:
    """Until ZooKeeper holds `offset` for every committed partition (its offset blocks read back pipelined, those
    still missing some again); when the last of those blocks was written (ZooKeeper's clock, epoch seconds)."""
    todo: dict[str, set[int]] = {}
    for g in range(groups):
        wanted = dict.fromkeys((TOPIC, p) for p in group_partitions(g, partitions, per_group))
        for path, part in consumers.by_block(f"bench-{g}", wanted).items():
            todo[path] = set(part)
    last_ms = 0
    while todo:
        names = list(todo)
        for path, node in zip(names, batch.get_many(zk, names), strict=True):
            entries = paths.parse_offset_block(node[0]) if node is not None else {}
            todo[path] = {p for p in todo[path] if p not in entries or entries[p].stored.offset != offset}
            if not todo[path]:
                del todo[path]
                last_ms = max(last_ms, node[1].mtime)
        if todo:
            time.sleep(0.05)
    return last_ms / 1000


async def run(port: int, zk_connect: str, args: argparse.Namespace) -> dict:
    with Admin(f"127.0.0.1:{port}", timeout=300) as admin:  # (a thousand partitions take a while to create)
        admin.create_topic(TOPIC, args.partitions, 1)
        while sum(p.leader >= 0 for p in admin.describe_topic(TOPIC)) < args.partitions:
            time.sleep(0.5)
    count = max(1, min(args.connections, args.groups))
    conns = [await AsyncConnection.open("127.0.0.1", port, client_id=f"bench-{i}") for i in range(count)]
    zk = zkclient.new_client(zk_connect, timeout=30)  # (waits with poll(2), reads in pipelined windows)
    zk.start(30)
    rounds = []
    try:
        for r in range(args.rounds):
            start = time.time()
            epoch = -1 if args.no_epoch else 0
            await commit_round(conns, args.groups, args.partitions, args.per_group, 1000 + r, epoch)
            answered = time.time() - start
            last = await asyncio.to_thread(wait_written, zk, args.groups, args.partitions, args.per_group, 1000 + r)
            took = last - start
            n = args.groups * args.per_group
            rounds.append({"round": r, "offsets": n, "answered_s": round(answered, 2), "written_s": round(took, 2),
                           "offsets_per_s": round(n / took)})  # fmt: skip
    finally:
        for c in conns:
            await c.close()
        zk.stop()
        zk.close()
    later = rounds[1:]
    steady = sum(x["offsets"] for x in later) / sum(x["written_s"] for x in later) if later else None
    return {"groups": args.groups, "partitions": args.partitions, "per_group": args.per_group,
            "epoch": not args.no_epoch, "rounds": rounds,
            "offsets_per_s_after_first": round(steady) if steady else None}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--per-group", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--no-epoch", action="store_true", help="commit with leader epoch -1")
    ap.add_argument(
        "--connections",
        type=int,
        default=1000,
        help="client connections the groups' commits are spread over (default 1000: at most one a group)",
    )
    args = ap.parse_args()
    with private_broker() as (_, port, zk_connect):
        print(json.dumps(asyncio.run(run(port, zk_connect, args)), indent=2))


if __name__ == "__main__":
    main()
