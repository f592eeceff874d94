"""The synchronous facade: a script's produce and consume round trip against a live broker."""

from __future__ import annotations

import uuid

import pytest

from broker.client.producer import ProduceError
from broker.client.sync import Consumer, Producer


def test_sync_producer_and_consumer_round_trip(shared_broker):
    topic = f"sync-{uuid.uuid4().hex[:8]}"
    with Producer(shared_broker.bootstrap, acks="all") as p:
        futures = [p.send(topic, b"v%d" % i, key=b"k%d" % i, headers=[("h", b"%d" % i)], partition=0)
                   for i in range(200)]  # fmt: skip
        metadata = [f.result(timeout=30) for f in futures]
    assert [m.offset for m in metadata] == list(range(200))
    assert {m.partition for m in metadata} == {0}
    with Consumer(shared_broker.bootstrap) as c:
        c.assign([(topic, 0)])
        c.seek((topic, 0), 150)
        got = []
        while len(got) < 50:
            got += c.poll(timeout_ms=2000)
        assert [(r.offset, r.key, r.value, r.headers) for r in got] == [
            (i, b"k%d" % i, b"v%d" % i, (("h", b"%d" % i),)) for i in range(150, 200)
        ]
        assert c.position((topic, 0)) == 200
        assert c.end_offsets([(topic, 0)]) == {(topic, 0): 200}
        c.seek_to_beginning()
        assert c.poll(timeout_ms=2000, max_records=3)[0].offset == 0


def test_sync_producer_reports_an_unacknowledged_message(shared_broker):
    with Producer(shared_broker.bootstrap, acks="all") as p:
        with pytest.raises(ProduceError, match="has no partition 9"):
            p.send(f"sync-{uuid.uuid4().hex[:8]}", b"x", partition=9).result(timeout=30)
