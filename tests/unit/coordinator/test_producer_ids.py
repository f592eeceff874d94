"""The producer-id pool: ids handed out in blocks."""

from __future__ import annotations

from broker.coordinator.txn.producer_ids import ProducerIdPool


def test_pool_starts_empty() -> None:
    assert ProducerIdPool().take() is None


def test_pool_hands_out_a_block_then_runs_dry() -> None:
    pool = ProducerIdPool()
    pool.add_block(1000, 1002)
    assert [pool.take() for _ in range(4)] == [1000, 1001, 1002, None]
    assert pool.take() is None
    pool.add_block(2000, 2000)
    assert pool.take() == 2000
    assert pool.take() is None


def test_pool_new_block_replaces_the_rest_of_the_old() -> None:
    pool = ProducerIdPool()
    pool.add_block(0, 999)
    assert pool.take() == 0
    pool.add_block(5000, 5001)
    assert [pool.take(), pool.take(), pool.take()] == [5000, 5001, None]
