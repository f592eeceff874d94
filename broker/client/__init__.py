"""kafkactl's own clients over the wire protocol: connection, cluster metadata, admin (producer and consumer follow)."""
