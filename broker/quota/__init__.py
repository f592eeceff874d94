"""Client quotas in one place: `store.py` keeps them in ZooKeeper (Kafka's `/config/users`, `/config/clients`
and their change notifications), `manager.py` is the broker's byte-rate and request-time accounting and
throttle times. The wire handlers (Describe/AlterClientQuotas, the throttling of responses) stay in
`broker/server/handlers/`."""
