"""The Kafka wire protocol subset kafkactl speaks: primitives, message schemas, API versions, error codes."""
