"""A group's coordinator never answers OffsetFetch from memory with the offsets a transaction replaced: the
transaction's coordinator (another broker) commits them straight to ZooKeeper, so the group's coordinator,
which answers from memory while ZooKeeper is unreachable, must not keep what it knew before the
TxnOffsetCommit (the consumer would take its input again: exactly-once broken). Two brokers on a private
ZooKeeper, killed after the commit."""

from __future__ import annotations

import os
import signal
import time

import pytest

from broker.coordinator.group.coordinator import coordinator_for
from broker.protocol.api import ApiKey
from broker.zk import consumers
from broker.zk.server import ZooKeeperServer
from tests.fixtures import zk_client
from tests.integration.cluster import BrokerProcess, new_chroot
from tests.integration.test_group_coordinator import (
    COORDINATOR_LOAD_IN_PROGRESS,
    GROUP_OVERRIDES,
    NONE,
    commit_body,
    commit_errors,
    conn_to,
    fetch_offsets,
    fetched,
    heartbeat,
    join_body,
    new_member_id,
    sync_body,
    wait_until,
)
from tests.integration.test_txn_coordinator import _end, _init
from tests.integration.test_txn_coordinator_review import _ids_on_two_brokers
from tests.integration.wire import create_topic


@pytest.mark.chaos
def test_the_groups_coordinator_never_answers_a_transactions_partition_from_memory(
    private_zk: ZooKeeperServer,
    tmp_path,  # noqa: ANN001
) -> None:
    chroot = new_chroot(private_zk.connect_string)
    txn_id, group = _ids_on_two_brokers()  # (the transaction on broker 1, the group on broker 2)
    topic = f"mem-{txn_id}"
    with (
        BrokerProcess(1, chroot, tmp_path, overrides=GROUP_OVERRIDES) as b1,
        BrokerProcess(2, chroot, tmp_path, overrides=GROUP_OVERRIDES) as b2,
        conn_to(b1, "txn") as t,
        conn_to(b2, "member") as m,
    ):
        for c in (t, m):  # (both brokers see both: the same coordinators from each)
            wait_until("both brokers live", lambda c=c: all(
                c.request(ApiKey.FIND_COORDINATOR, {"key": k, "key_type": kt}, 3)["node_id"] == node
                for k, kt, node in ((txn_id, 1, 1), (group, 0, 2))))  # fmt: skip
        assert coordinator_for(group, [1, 2]) == 2
        create_topic(t, topic)
        # a member on broker 2 (the group is live there: its reads are kept in memory) commits 5
        member = new_member_id(m, group)
        joined = m.request(ApiKey.JOIN_GROUP, join_body(group, member))
        gen = joined["generation_id"]
        assert m.request(ApiKey.SYNC_GROUP, sync_body(group, gen, member, {member: b"x"}))["error_code"] == NONE
        assert commit_errors(m.request(ApiKey.OFFSET_COMMIT, commit_body(group, gen, member, {(topic, 0): 5}))) == {
            (topic, 0): NONE}  # fmt: skip
        assert fetched(fetch_offsets(m, group, {topic: [0]}, 5)) == {(topic, 0): (5, NONE)}
        # a transaction (coordinated by broker 1) commits 9 for the group (TxnOffsetCommit to broker 2)
        init = _init(t, txn_id)
        pid, epoch = init["producer_id"], init["producer_epoch"]
        add = {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch, "group_id": group}
        assert t.request(ApiKey.ADD_OFFSETS_TO_TXN, add, 3)["error_code"] == NONE
        body = {**add, "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 9,
                                                                  "committed_metadata": ""}]}]}  # fmt: skip
        (answer,) = m.request(ApiKey.TXN_OFFSET_COMMIT, body, 3)["topics"]
        assert answer["partitions"][0]["error_code"] == NONE
        assert _end(t, txn_id, pid, epoch, True) == NONE
        zk = zk_client(chroot)
        try:
            wait_until("the transaction's offset in ZooKeeper",
                       lambda: [c.offset for c in consumers.committed(zk, group).values()] == [9])  # fmt: skip
        finally:
            zk.stop()
            zk.close()

        os.kill(private_zk.pid, signal.SIGKILL)
        private_zk.stop()
        time.sleep(1.0)  # (the brokers notice the connection drop)
        assert heartbeat(m, group, gen, member) == NONE
        answer = fetch_offsets(m, group, {topic: [0]}, 5)
        assert fetched(answer) != {(topic, 0): (5, NONE)}, "the offset from before the transaction, from memory"
        assert answer["error_code"] == COORDINATOR_LOAD_IN_PROGRESS  # (retriable: the client asks again)

        private_zk.start()
        wait_until("the transaction's offset answered",
                   lambda: fetched(fetch_offsets(m, group, {topic: [0]}, 5)) == {(topic, 0): (9, NONE)},
                   timeout=20)  # fmt: skip
