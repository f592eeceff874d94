"""ZooKeeper: the server kafkactl runs, and the registries brokers and consumers keep in it."""
