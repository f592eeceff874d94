"""Fetch semantics against a live broker: the purgatory, byte limits, out-of-range offsets; ListOffsets by
position and time; DescribeConfigs / AlterConfigs / DescribeLogDirs through the wire."""

from __future__ import annotations

import threading
import time
import uuid

from broker.client.connection import Connection
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.admin import TOPIC_RESOURCE
from broker.protocol.messages.fetch import EARLIEST, LATEST
from broker.records.batch import Record, build_batch
from tests.integration import wire


def _topic() -> str:
    return f"f-{uuid.uuid4().hex[:10]}"


def _fetch(conn: Connection, topic: str, offset: int, *, max_wait_ms: int = 0, min_bytes: int = 0,
           partition_max_bytes: int = 4 << 20, max_bytes: int = 8 << 20, partitions=(0,)) -> dict:  # fmt: skip
    body = wire.fetch_body(topic, 0, offset, max_wait_ms, min_bytes)
    body["max_bytes"] = max_bytes
    body["topics"][0]["partitions"] = [
        {"partition": p, "fetch_offset": offset, "partition_max_bytes": partition_max_bytes} for p in partitions
    ]
    return conn.request(ApiKey.FETCH, body)


def test_fetch_waits_in_purgatory_until_an_append_arrives(shared_broker):
    topic = _topic()
    with wire.open_conn(shared_broker) as admin:
        wire.create_topic(admin, topic)
    waiting = wire.open_conn(shared_broker, timeout=30)
    answers: list[dict] = []
    # a fetch at the log end with a long max wait: it can only come back early if an append wakes it
    t = threading.Thread(target=lambda: answers.append(_fetch(waiting, topic, 0, max_wait_ms=20000, min_bytes=1)))
    t.start()
    with wire.open_conn(shared_broker) as producer:
        # the fetch must be parked before the produce: a Metadata round trip on its connection cannot pass it,
        # so poll the waiting thread instead — it must still be waiting after our produce connection is up
        assert t.is_alive()
        wire.produce_one(producer, topic, 0, wire.make_batch([b"wake", b"up"]))
    t.join(15)
    assert not t.is_alive(), "the parked fetch was not woken by the append"
    [p] = answers[0]["topics"][0]["partitions"]
    assert p["error_code"] == 0 and p["high_watermark"] == 2
    assert wire.values_of(p["records"]) == [b"wake", b"up"]
    waiting.close()


def test_fetch_with_unmet_min_bytes_answers_empty_after_max_wait(shared_broker):
    topic = _topic()
    with wire.open_conn(shared_broker) as conn:
        wire.create_topic(conn, topic)
        wire.produce_one(conn, topic, 0, wire.make_batch([b"x" * 10]))
        answer = _fetch(conn, topic, 1, max_wait_ms=200, min_bytes=1_000_000)
        [p] = answer["topics"][0]["partitions"]
        assert p["error_code"] == 0 and p["high_watermark"] == 1
        assert bytes(p["records"]) == b""
        # min_bytes already met by what is there: answered at once with it
        answer = _fetch(conn, topic, 0, max_wait_ms=20000, min_bytes=1)
        assert wire.values_of(answer["topics"][0]["partitions"][0]["records"]) == [b"x" * 10]


def _fetch_in_thread(conn: Connection, topic: str, **kw) -> tuple[threading.Thread, list[dict]]:
    """A fetch on its own thread (the caller joins it); the answer lands in the returned list."""
    answers: list[dict] = []
    t = threading.Thread(target=lambda: answers.append(_fetch(conn, topic, 0, **kw)), daemon=True)
    t.start()
    return t, answers


def test_fetch_waits_for_min_bytes_across_appends(shared_broker):
    topic = _topic()
    first, second = wire.make_batch([b"a" * 100]), wire.make_batch([b"b" * 100])
    with wire.open_conn(shared_broker) as producer, wire.open_conn(shared_broker, timeout=60) as waiting:
        wire.create_topic(producer, topic)
        # more than one batch, at most two: the first append wakes the fetch but cannot answer it
        min_bytes = len(first) + len(second) // 2
        t, answers = _fetch_in_thread(waiting, topic, max_wait_ms=30000, min_bytes=min_bytes)
        time.sleep(0.5)  # let it park: a fetch arriving after the first append would hide an early answer
        wire.produce_one(producer, topic, 0, first)
        t.join(1.0)
        assert t.is_alive(), f"answered with {len(first)} of min_bytes={min_bytes}: {answers}"
        wire.produce_one(producer, topic, 0, second)
        t.join(20)  # well before max_wait (30 s): the second append must wake and answer it
        assert not t.is_alive(), "the fetch was not answered once min_bytes were there"
    [p] = answers[0]["topics"][0]["partitions"]
    assert p["error_code"] == 0 and p["high_watermark"] == 2
    assert wire.values_of(p["records"]) == [b"a" * 100, b"b" * 100]


def test_fetch_with_unmet_min_bytes_waits_out_max_wait(shared_broker):
    topic = _topic()
    with wire.open_conn(shared_broker) as conn:
        wire.create_topic(conn, topic)
        wire.produce_one(conn, topic, 0, wire.make_batch([b"x" * 10]))
        start = time.monotonic()
        answer = _fetch(conn, topic, 0, max_wait_ms=500, min_bytes=1_000_000)
        waited = time.monotonic() - start
    [p] = answer["topics"][0]["partitions"]
    assert waited >= 0.45, f"answered after {waited:.3f}s, before max_wait_ms=500"
    # the wait ends with what there is, even under min_bytes
    assert p["error_code"] == 0 and wire.values_of(p["records"]) == [b"x" * 10]


def test_partition_and_response_byte_limits(shared_broker):
    topic = _topic()
    with wire.open_conn(shared_broker) as conn:
        wire.create_topic(conn, topic, partitions=2)
        for p in (0, 1):
            for i in range(10):
                wire.produce_one(conn, topic, p, wire.make_batch([f"{p}-{i}".encode() * 100]))
        one = len(wire.make_batch([b"0-0" * 100]))
        # partition_max_bytes of 1 byte still returns one whole batch (the first batch always fits)
        answer = _fetch(conn, topic, 0, partition_max_bytes=1)
        assert wire.values_of(answer["topics"][0]["partitions"][0]["records"]) == [b"0-0" * 100]
        # three batches' worth per partition
        answer = _fetch(conn, topic, 0, partition_max_bytes=3 * one)
        assert len(wire.values_of(answer["topics"][0]["partitions"][0]["records"])) == 3
        # response max_bytes of 4 batches over two partitions: partition 0 fills 3, partition 1 gets 1 at most
        answer = _fetch(conn, topic, 0, partition_max_bytes=3 * one, max_bytes=4 * one, partitions=(0, 1))
        got = {p["partition_index"]: wire.values_of(p["records"]) for p in answer["topics"][0]["partitions"]}
        assert got[0] == [f"0-{i}".encode() * 100 for i in range(3)]
        assert got[1] == [b"1-0" * 100]
        # everything, from a middle offset: batches start at the requested one
        answer = _fetch(conn, topic, 7)
        assert wire.values_of(answer["topics"][0]["partitions"][0]["records"]) == [
            f"0-{i}".encode() * 100 for i in range(7, 10)
        ]


def test_fetch_out_of_range_and_at_end(shared_broker):
    topic = _topic()
    with wire.open_conn(shared_broker) as conn:
        wire.create_topic(conn, topic)
        wire.produce_one(conn, topic, 0, wire.make_batch([b"a", b"b", b"c"]))
        at_end = _fetch(conn, topic, 3)["topics"][0]["partitions"][0]
        assert at_end["error_code"] == 0 and bytes(at_end["records"]) == b"" and at_end["high_watermark"] == 3
        past = _fetch(conn, topic, 4)["topics"][0]["partitions"][0]
        assert past["error_code"] == 1  # OFFSET_OUT_OF_RANGE
        assert past["log_start_offset"] == 0


def test_list_offsets_earliest_latest_and_by_timestamp(shared_broker):
    topic = _topic()
    t0 = 1_700_000_000_000
    with wire.open_conn(shared_broker) as conn:
        wire.create_topic(conn, topic)
        for i in range(5):  # batch i holds offsets 2i, 2i+1 stamped t0 + 1000 i and t0 + 1000 i + 1
            recs = [Record(0, t0 + 1000 * i, None, b"a"), Record(1, t0 + 1000 * i + 1, None, b"b")]
            wire.produce_one(conn, topic, 0, build_batch(recs))
        assert wire.list_offset_entry(conn, topic, 0, EARLIEST)["offset"] == 0
        assert wire.list_offset_entry(conn, topic, 0, LATEST)["offset"] == 10
        hit = wire.list_offset_entry(conn, topic, 0, t0 + 2000)
        assert (hit["offset"], hit["timestamp"]) == (4, t0 + 2000)
        hit = wire.list_offset_entry(conn, topic, 0, t0 + 2001)
        assert (hit["offset"], hit["timestamp"]) == (5, t0 + 2001)
        hit = wire.list_offset_entry(conn, topic, 0, t0 + 2002)  # between batches: the next record's
        assert (hit["offset"], hit["timestamp"]) == (6, t0 + 3000)
        none = wire.list_offset_entry(conn, topic, 0, t0 + 10_000)
        assert (none["error_code"], none["offset"], none["timestamp"]) == (0, -1, -1)
        v0 = conn.request(ApiKey.LIST_OFFSETS, {"replica_id": -1, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "timestamp": LATEST, "max_num_offsets": 1}]}]}, version=0)  # fmt: skip
        assert v0["topics"][0]["partitions"][0]["old_style_offsets"] == [10]


def test_describe_and_alter_configs_and_log_dirs(shared_broker):
    topic = _topic()
    with wire.open_conn(shared_broker) as conn:
        wire.create_topic(conn, topic, config={"retention.ms": "12345"})
        wire.produce_one(conn, topic, 0, wire.make_batch([b"v" * 50]))
        for version in (0, 1, 2, 3):
            answer = conn.request(ApiKey.DESCRIBE_CONFIGS, {"resources": [
                {"resource_type": TOPIC_RESOURCE, "resource_name": topic, "configuration_keys": None}]},
                version=version)  # fmt: skip
            [res] = answer["results"]
            configs = {c["name"]: c for c in res["configs"]}
            assert res["error_code"] == 0
            assert configs["retention.ms"]["value"] == "12345"
            assert configs["cleanup.policy"]["value"] == "delete"
            if version == 0:
                assert configs["retention.ms"]["is_default"] is False and configs["cleanup.policy"]["is_default"]
            else:
                assert configs["retention.ms"]["config_source"] == 1 and configs["cleanup.policy"]["config_source"] == 5
        answer = conn.request(ApiKey.ALTER_CONFIGS, {"resources": [{"resource_type": TOPIC_RESOURCE,
            "resource_name": topic, "configs": [{"name": "segment.bytes", "value": "1048576"}]}],
            "validate_only": False})  # fmt: skip
        assert answer["responses"][0]["error_code"] == 0
        answer = conn.request(ApiKey.DESCRIBE_CONFIGS, {"resources": [{"resource_type": TOPIC_RESOURCE,
            "resource_name": topic, "configuration_keys": ["segment.bytes", "retention.ms"]}]})  # fmt: skip
        configs = {c["name"]: c["value"] for c in answer["results"][0]["configs"]}
        assert configs == {"segment.bytes": "1048576", "retention.ms": str(7 * 24 * 3600 * 1000)}  # replaced whole
        bad = conn.request(ApiKey.ALTER_CONFIGS, {"resources": [{"resource_type": TOPIC_RESOURCE,
            "resource_name": topic, "configs": [{"name": "no.such.key", "value": "1"}]}],
            "validate_only": False})  # fmt: skip
        assert bad["responses"][0]["error_code"] == 40  # INVALID_CONFIG
        dirs = conn.request(ApiKey.DESCRIBE_LOG_DIRS, {"topics": [{"topic": topic, "partitions": [0]}]})
        [d] = dirs["results"]
        [t] = d["topics"]
        assert t["name"] == topic and t["partitions"][0]["partition_size"] == len(wire.make_batch([b"v" * 50]))


def test_fetch_v12_answers_a_diverging_epoch_at_once_and_no_records(shared_broker):
    """KIP-595, as Kafka 2.8's leader: a fetcher whose last fetched epoch ends in this log before its fetch
    offset is told where to truncate, with no records and without waiting for min_bytes; an epoch this log
    cannot place gets OFFSET_OUT_OF_RANGE; an epoch that agrees gets the records, no diverging epoch."""
    topic = _topic()
    undefined = {"epoch": -1, "end_offset": -1}
    with wire.open_conn(shared_broker, timeout=60) as conn:
        wire.create_topic(conn, topic)
        wire.produce_one(conn, topic, 0, wire.make_batch([b"a", b"b", b"c"]))
        assert conn.version_for(ApiKey.FETCH) == 12

        def fetch(offset: int, last_epoch: int, **wait: int) -> dict:
            body = wire.fetch_body(topic, 0, offset, **wait)
            body["topics"][0]["partitions"][0]["last_fetched_epoch"] = last_epoch
            [p] = conn.request(ApiKey.FETCH, body, version=12)["topics"][0]["partitions"]
            return p

        # epoch 0 ends at the log end (3), before the fetch offset 4: truncate to 3, answered at once although
        # the fetch asked to wait 30 s for a byte (a 30 s wait would time the request out at 60 s instead)
        start = time.monotonic()
        p = fetch(4, 0, max_wait_ms=30000, min_bytes=1)
        assert time.monotonic() - start < 15, "a diverging answer waited for min_bytes"
        assert (p["error_code"], p["diverging_epoch"], p["high_watermark"]) == (0, {"epoch": 0, "end_offset": 3}, 3)
        assert not p["records"]
        # an epoch past every one this log knows: nothing to truncate to, so the fetcher must reset
        p = fetch(3, 5, max_wait_ms=30000, min_bytes=1)
        assert (p["error_code"], p["diverging_epoch"]) == (ErrorCode.OFFSET_OUT_OF_RANGE, undefined)
        assert not p["records"]
        p = fetch(1, 0)
        assert p["error_code"] == 0 and p["diverging_epoch"] == undefined
        assert wire.values_of(p["records"]) == [b"a", b"b", b"c"]  # the whole batch holding offset 1
        [p] = conn.request(ApiKey.FETCH, wire.fetch_body(topic, 0, 0), version=11)["topics"][0]["partitions"]
        assert wire.values_of(p["records"]) == [b"a", b"b", b"c"]  # v11 still served, the same bytes
