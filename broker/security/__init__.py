"""Who may talk to the broker: TLS listeners, SASL authentication, ACLs and ZooKeeper credentials."""
