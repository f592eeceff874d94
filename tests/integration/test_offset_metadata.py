"""Commit metadata and leader epochs (issue 18) against one real broker and the real ZooKeeper, through
confluent-kafka (Consumer.commit / committed with TopicPartition metadata and leader_epoch), kafka-python
(KafkaConsumer.commit with OffsetAndMetadata(offset, metadata, leader_epoch), KafkaAdminClient.list_group_offsets)
and aiokafka (AIOKafkaConsumer.commit with OffsetAndMetadata(offset, metadata), AIOKafkaAdminClient
.list_consumer_group_offsets; aiokafka carries no leader epoch).

Every metadata string and epoch that goes in comes back, through each client whichever client committed it,
also after the coordinator broker is killed (-9) and started again; a metadata longer than
`offset.metadata.max.bytes` is refused for its partition only (OFFSET_METADATA_TOO_LARGE), the other
partitions of the same OffsetCommit stored; `kafkactl group describe -o json` shows both; kafkactl's own
group consumer (GroupConsumer.commit(metadata=...)) commits metadata the other clients read.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import OffsetAndMetadata as AioOffsetAndMetadata
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as CkTopicPartition
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka.errors import OffsetMetadataTooLargeError
from kafka.structs import OffsetAndMetadata as KpOffsetAndMetadata

from broker.client.group import GroupConsumer
from broker.client.sync import Producer
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.zk import consumers, paths
from tests.integration.clientkit import create_topic, unique
from tests.integration.cluster import BrokerProcess, new_chroot
from tests.integration.helpers import cli, ok, zk_session
from tests.integration.wire import open_conn

#: (partition, offset, metadata, leader epoch) as committed; -1: no epoch
Commit = tuple[int, int, str, int]
PARTITIONS = 3


@pytest.fixture(scope="module")
def b(zk_server, tmp_path_factory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("offset-metadata-broker")
    with BrokerProcess(1, new_chroot(zk_server.connect_string), root) as broker:
        yield broker


# --- committing, one way per client ------------------------------------------------------------------------------


def ck_commit(b: BrokerProcess, g: str, topic: str, commits: list[Commit]) -> list[CkTopicPartition]:
    c = CkConsumer({"bootstrap.servers": b.bootstrap, "group.id": g, "enable.auto.commit": False})
    try:
        tps = [CkTopicPartition(topic, p, o, metadata=m, leader_epoch=e)
               for p, o, m, e in commits]  # fmt: skip
        return c.commit(offsets=tps, asynchronous=False)
    finally:
        c.close()


def kp_commit(b: BrokerProcess, g: str, topic: str, commits: list[Commit]) -> None:
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=g, enable_auto_commit=False)
    try:
        c.commit({KpTopicPartition(topic, p): KpOffsetAndMetadata(o, m, e) for p, o, m, e in commits})
    finally:
        c.close(autocommit=False)


def aio_commit(b: BrokerProcess, g: str, topic: str, commits: list[Commit]) -> None:
    async def main() -> None:
        c = AIOKafkaConsumer(bootstrap_servers=b.bootstrap, group_id=g, enable_auto_commit=False)
        await c.start()
        try:
            c.assign([AioTopicPartition(topic, p) for p, *_ in commits])  # (aiokafka commits assigned partitions)
            await c.commit({AioTopicPartition(topic, p): AioOffsetAndMetadata(o, m) for p, o, m, _ in commits})
        finally:
            await c.stop()

    asyncio.run(main())


# --- reading back, one way per client: {partition: (offset, metadata, epoch)}, epoch None where unknown ----------


def ck_committed(b: BrokerProcess, g: str, topic: str, metadata: bool = True) -> dict[int, tuple[int, str, int | None]]:
    """`metadata` False: "" in its place. confluent-kafka reads a commit's metadata as a C string, up to a NUL:
    only what it committed itself ends in one (another client's metadata is read past its end)."""
    c = CkConsumer({"bootstrap.servers": b.bootstrap, "group.id": g, "enable.auto.commit": False})
    try:
        got = c.committed([CkTopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    finally:
        c.close()
    return {tp.partition: (tp.offset, (tp.metadata or "") if metadata else "", tp.leader_epoch)
            for tp in got if tp.offset >= 0}  # fmt: skip


def kp_committed(b: BrokerProcess, g: str, topic: str) -> dict[int, tuple[int, str, int | None]]:
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        got = admin.list_group_offsets({g: None})[g]
    finally:
        admin.close()
    return {tp.partition: (o.offset, o.metadata, None if o.leader_epoch < 0 else o.leader_epoch)
            for tp, o in got.items() if tp.topic == topic}  # fmt: skip


def kp_consumer_committed(b: BrokerProcess, g: str, topic: str) -> dict[int, tuple[int, str, int | None]]:
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=g, enable_auto_commit=False)
    try:
        got = {p: c.committed(KpTopicPartition(topic, p), metadata=True) for p in range(PARTITIONS)}
    finally:
        c.close(autocommit=False)
    return {p: (o.offset, o.metadata, None if o.leader_epoch < 0 else o.leader_epoch)
            for p, o in got.items() if o is not None}  # fmt: skip


def aio_committed(b: BrokerProcess, g: str, topic: str) -> dict[int, tuple[int, str]]:
    async def main() -> dict[int, tuple[int, str]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=b.bootstrap)
        await admin.start()
        try:
            got = await admin.list_consumer_group_offsets(g)
        finally:
            await admin.close()
        return {tp.partition: (o.offset, o.metadata) for tp, o in got.items() if tp.topic == topic}

    return asyncio.run(main())


def expected(commits: list[Commit], epochs: bool = True) -> dict[int, tuple[int, str, int | None]]:
    return {p: (o, m, (e if e >= 0 else None) if epochs else None) for p, o, m, e in commits}


# --- the tests --------------------------------------------------------------------------------------------------------


#: confluent-kafka hands librdkafka the metadata with its C string's terminating NUL (metadata_size = strlen + 1):
#: Kafka stores and answers that byte too, and so does this broker, so 4095 characters are the most it can commit
CK_COMMITS: list[Commit] = [(0, 5, "ck ✓ zero", 3), (1, 6, "", 7), (2, 7, "x" * 4095, -1)]
KP_COMMITS: list[Commit] = [(0, 15, '{"json": "inside", "quote": "\\""}', 0), (1, 16, "kp one", 2**31 - 1),
                            (2, 17, "", -1)]  # fmt: skip
AIO_COMMITS: list[Commit] = [(0, 25, "aio zero 🎉", -1), (1, 26, "line\nbreak", -1), (2, 27, "", -1)]


def test_every_client_gets_back_what_every_client_committed_also_after_a_restart(b: BrokerProcess) -> None:
    topic = create_topic(b.bootstrap, unique("meta"), PARTITIONS)
    groups = {unique("ck"): CK_COMMITS, unique("kp"): KP_COMMITS, unique("aio"): AIO_COMMITS}
    ck_g, kp_g, aio_g = groups
    assert all(tp.error is None for tp in ck_commit(b, ck_g, topic, CK_COMMITS))
    kp_commit(b, kp_g, topic, KP_COMMITS)
    aio_commit(b, aio_g, topic, AIO_COMMITS)

    def check(when: str) -> None:
        for g, commits in groups.items():
            want = expected(commits)
            if g == ck_g:  # (librdkafka reads the metadata up to its NUL)
                assert ck_committed(b, g, topic) == want, (when, g)
            else:
                assert ck_committed(b, g, topic, metadata=False) == {p: (o, "", e) for p, (o, _, e) in want.items()}
            if g == ck_g:  # what confluent-kafka committed, as the other clients see it: with the NUL
                want = {p: (o, m + "\0", e) for p, (o, m, e) in want.items()}
            assert kp_committed(b, g, topic) == want, (when, g)
            assert kp_consumer_committed(b, g, topic) == want, (when, g)
            assert aio_committed(b, g, topic) == {p: (o, m) for p, (o, m, _) in want.items()}, (when, g)

    check("before the restart")
    with zk_session(b.zk_connect) as zk:  # stored in ZooKeeper, not only in the broker's memory
        stored = consumers.committed(zk, kp_g)
        block = paths.parse_offset_block(zk.get(paths.group_offset_block(kp_g, topic, 0))[0])
    assert block[1].stored.offset == 16  # in the block of partitions 0-15
    assert {tp[1]: (c.offset, c.metadata, c.leader_epoch) for tp, c in stored.items()} == {
        p: (o, m, e) for p, o, m, e in KP_COMMITS}  # fmt: skip
    b.kill()
    b.start()
    check("after the coordinator was killed and started again")


def test_too_large_metadata_is_refused_for_its_partition_only(b: BrokerProcess) -> None:
    topic = create_topic(b.bootstrap, unique("big"), PARTITIONS)
    g = unique("big")
    kp_commit(b, g, topic, [(p, 1, "before", 1) for p in range(PARTITIONS)])
    too_large, largest = "y" * 4097, "é" * 4096  # (characters, not UTF-8 bytes: Kafka counts a Java string)
    body = {"group_id": g, "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "committed_offset": 2, "committed_leader_epoch": 2,
                 "committed_metadata": too_large},
                {"partition_index": 1, "committed_offset": 2, "committed_leader_epoch": 2,
                 "committed_metadata": largest}]}]}  # fmt: skip
    with open_conn(b) as conn:
        answer = conn.request(ApiKey.OFFSET_COMMIT, body, version=7)
    errors = {p["partition_index"]: p["error_code"] for p in answer["topics"][0]["partitions"]}
    assert errors == {0: ErrorCode.OFFSET_METADATA_TOO_LARGE, 1: ErrorCode.NONE}
    assert kp_committed(b, g, topic) == {0: (1, "before", 1), 1: (2, largest, 2), 2: (1, "before", 1)}

    with pytest.raises(OffsetMetadataTooLargeError):  # kafka-python: the refusal raised, the rest stored
        kp_commit(b, g, topic, [(1, 3, "fits", 3), (2, 3, too_large, 3)])
    assert kp_committed(b, g, topic) == {0: (1, "before", 1), 1: (3, "fits", 3), 2: (1, "before", 1)}

    try:  # confluent-kafka: the partition's error in the answer (or raised, as librdkafka reports it)
        refused = {tp.partition: tp.error for tp in ck_commit(b, g, topic, [(0, 4, too_large, 4), (2, 4, "ok", 4)])}
        assert refused[0] is not None and refused[0].code() == ErrorCode.OFFSET_METADATA_TOO_LARGE
        assert refused[2] is None
    except KafkaException as exc:
        assert exc.args[0].code() == ErrorCode.OFFSET_METADATA_TOO_LARGE
    assert kp_committed(b, g, topic) == {0: (1, "before", 1), 1: (3, "fits", 3), 2: (4, "ok\0", 4)}


def test_group_describe_json_shows_metadata_and_epochs(b: BrokerProcess) -> None:
    topic = create_topic(b.bootstrap, unique("desc"), PARTITIONS)
    g = unique("desc")
    kp_commit(b, g, topic, KP_COMMITS)
    out = ok(cli("group", "describe", g, "-o", "json", "-b", b.bootstrap, "-z", b.zk_connect))
    rows = json.loads(out.splitlines()[0])["partitions"]
    assert {r["partition"]: (r["committed"], r["metadata"], r["leader_epoch"]) for r in rows} == {
        p: (o, m, e) for p, o, m, e in KP_COMMITS}  # fmt: skip
    text = ok(cli("group", "describe", g, "-b", b.bootstrap, "-z", b.zk_connect))
    assert "METADATA" not in text and "kp one" not in text  # the text table stays as it was


def test_kafkactl_group_consumer_commits_metadata(b: BrokerProcess) -> None:
    topic = create_topic(b.bootstrap, unique("own"), 2)
    g = unique("own")
    with Producer(b.bootstrap) as producer:
        for f in [producer.send(topic, b"m", partition=i % 2) for i in range(7)]:
            f.result(timeout=30)

    async def main() -> None:
        c = await GroupConsumer(b.bootstrap, b.zk_connect, g, [topic], auto_offset_reset="earliest",
                                enable_auto_commit=False).start()  # fmt: skip
        try:
            deadline = asyncio.get_running_loop().time() + 30
            while c.position((topic, 0)) != 4 or c.position((topic, 1)) != 3:
                assert asyncio.get_running_loop().time() < deadline, c.assignment()
                await c.getmany(timeout_ms=100)
            await c.commit(metadata="from kafkactl ✓")  # the positions after what it handed out
        finally:
            await c.close()

    asyncio.run(main())
    assert kp_committed(b, g, topic) == {0: (4, "from kafkactl ✓", None), 1: (3, "from kafkactl ✓", None)}
