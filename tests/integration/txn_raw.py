"""Raw-protocol transactions for tests: a transactional producer's batches and the coordinator's
WriteTxnMarkers, sent through kafkactl's blocking client connection (no coordinator needed), and
read_committed / read_uncommitted fetches."""

from __future__ import annotations

import time
from typing import Any

from broker.client.connection import Connection
from broker.protocol.api import ApiKey
from broker.records.batch import Record, build_batch, decode_header, iter_records


def txn_batch(values: list[bytes], producer_id: int, epoch: int, sequence: int, *, transactional: bool = True,
              key: bytes | None = None) -> bytes:  # fmt: skip
    """One batch of `values` from a (transactional) producer, its first sequence `sequence`."""
    ts = int(time.time() * 1000)
    return build_batch([Record(i, ts, key, v) for i, v in enumerate(values)], producer_id=producer_id,
                       producer_epoch=epoch, base_sequence=sequence, transactional=transactional)  # fmt: skip


def produce_txn(conn: Connection, txn_id: str | None, topic: str, partition: int, values: list[bytes],
                producer_id: int, epoch: int, sequence: int, *, acks: int = -1,
                transactional: bool = True) -> dict[str, Any]:  # fmt: skip
    """Produce one transactional batch; the partition's answer."""
    body = {"transactional_id": txn_id, "acks": acks, "timeout_ms": 10000, "topics": [{"name": topic, "partitions": [
        {"index": partition, "records": txn_batch(values, producer_id, epoch, sequence, transactional=transactional)},
    ]}]}  # fmt: skip
    (t,) = conn.request(ApiKey.PRODUCE, body)["topics"]
    (p,) = t["partitions"]
    return p


def write_markers(conn: Connection, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int,
                  partitions: list[tuple[str, int]], version: int | None = None,
                  ) -> dict[tuple[str, int], int]:  # fmt: skip
    """Send WriteTxnMarkers for one producer (as its coordinator would); {(topic, partition): error code}."""
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    body = {"markers": [{
        "producer_id": producer_id, "producer_epoch": epoch, "transaction_result": commit,
        "coordinator_epoch": coordinator_epoch,
        "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
    }]}  # fmt: skip
    (m,) = conn.request(ApiKey.WRITE_TXN_MARKERS, body, version)["markers"]
    assert m["producer_id"] == producer_id
    return {(t["name"], p["partition_index"]): p["error_code"] for t in m["topics"] for p in t["partitions"]}


def fetch(conn: Connection, topic: str, partition: int, offset: int = 0, *, committed: bool = False,
          max_wait_ms: int = 0) -> dict[str, Any]:  # fmt: skip
    """One Fetch of one partition (isolation read_committed when `committed`); the partition's answer."""
    body = {
        "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 1 if committed else 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{
            "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset, "log_start_offset": -1,
            "partition_max_bytes": 1 << 20,
        }]}],
        "forgotten_topics_data": [], "rack_id": "",
    }  # fmt: skip
    (t,) = conn.request(ApiKey.FETCH, body)["topics"]
    (p,) = t["partitions"]
    return p


def batches_of(data: Any) -> list[tuple[Any, list[Record]]]:
    """(header, records) of each whole batch of a fetched record set."""
    buf = bytes(data or b"")
    out = []
    pos = 0
    while pos + 61 <= len(buf):
        h = decode_header(buf, pos)
        if pos + h.size > len(buf):
            break
        out.append((h, list(iter_records(buf, pos, h))))
        pos += h.size
    return out


def read_values(conn: Connection, topic: str, partition: int, *, committed: bool) -> list[bytes]:
    """Every data record's value up to the (last stable / high watermark) end, as a Kafka consumer with that
    isolation keeps them: read_committed drops aborted transactions' batches (by the answers' aborted lists,
    through kafkactl's consumer's `drop_aborted`) and control batches."""
    from broker.client.consumer import drop_aborted

    out: list[bytes] = []
    offset = 0
    while True:
        p = fetch(conn, topic, partition, offset, committed=committed)
        assert p["error_code"] == 0, p
        data = bytes(p["records"] or b"")
        if not data:
            return out
        kept = drop_aborted(data, p["aborted_transactions"] or []) if committed else data
        for h, recs in batches_of(kept):
            if not h.is_control:
                out += [r.value for r in recs if r.offset >= offset]
        offset = batches_of(data)[-1][0].last_offset + 1
