"""kafkactl's core: record format, storage, wire protocol, broker, ZooKeeper registries and clients."""

__version__ = "0.1.0"
