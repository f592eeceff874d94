"""Consumer groups: membership (`coordinator.py`) and its write-behind ZooKeeper store (`store.py`)."""
