"""Until kafkactl has transactions, FindCoordinator for a transactional id answers INVALID_REQUEST ("transactions
are not supported"), which a Java-style client (kafka-python, aiokafka) takes as fatal at once; librdkafka
retries every error here but an authorization failure, so confluent-kafka still waits out its timeout."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaProducer
from kafka import KafkaProducer


def test_kafka_python_init_transactions_fails_fast(shared_broker) -> None:
    start = time.monotonic()
    with pytest.raises(Exception) as info:
        p = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, transactional_id="tx-kp")
        try:
            p.init_transactions()
        finally:
            p.close(timeout=1)
    took = time.monotonic() - start
    assert "InvalidRequest" in repr(info.value)  # the broker's answer, not a connection failure
    assert took < 10, f"init_transactions took {took:.1f} s"


def test_aiokafka_start_fails_fast(shared_broker) -> None:
    async def go() -> None:
        p = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap, transactional_id="tx-aio")
        try:
            await p.start()
        finally:
            await p.stop()

    start = time.monotonic()
    with pytest.raises(Exception) as info:
        asyncio.run(asyncio.wait_for(go(), 30))
    took = time.monotonic() - start
    assert "InvalidRequest" in repr(info.value)
    assert took < 10, f"start took {took:.1f} s"
