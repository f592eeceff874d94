"""Intra-cluster replication: who copies what from whom, and who decides who leads.

- `isr.py`: a leader's view of one partition: its followers' log end offsets, the ISR, the high watermark.
- `fetcher.py`: a follower's fetcher, one per source broker, copying the leader's batches byte for byte.
- `manager.py`: a broker's replicas: becoming leader or follower as the partition states say, the ISR
  written to ZooKeeper, `acks=all` answered once the ISR holds a batch.
- `election.py`: choosing a partition's leader and ISR (pure rules, shared by the controller and a
  broker's controlled shutdown).
- `controller.py`: the broker holding `/controller` elects new leaders when brokers go and come back.

Leadership travels through ZooKeeper: each partition's state znode (`broker.zk.paths.partition_state`)
holds its leader, leader epoch and ISR; every broker watches them and acts on a change (ZooKeeper-mode
Kafka's controller sends LeaderAndIsr and UpdateMetadata instead; the znode is the same truth).
"""
