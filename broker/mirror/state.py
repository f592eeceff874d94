"""The one thing a mirror keeps outside the target: the producer id of each target partition it began.

Once a target partition holds a committed batch of the mirror's, its stamp says everything (`stamp`).
Before that, a killed mirror may have left batches appended but not yet committed. If the next mirror
took a new producer id, the broker could not tell its resent batches from those, and would keep both.
So the producer id and epoch a fresh partition starts with are written here, synced, before its first
batch goes out, and a later mirror of the same target partition starts with them again:
`$KAFKACTL_HOME/mirror/<target cluster id>.json`, `{"<topic>/<partition>": [producer id, epoch]}`.
"""

from __future__ import annotations

import json
from pathlib import Path

from broker.home import home_dir
from broker.log.checkpoint import write_atomically

TopicPartition = tuple[str, int]


class ProducerIds:
    """The producer ids of the target partitions a mirror began, for one target cluster."""

    def __init__(self, cluster: str) -> None:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in cluster) or "unknown"
        self.path = home_dir() / "mirror" / f"{safe}.json"
        try:
            doc = json.loads(self.path.read_text())
            self.ids = {k: (int(v[0]), int(v[1])) for k, v in doc.items()}
        except (OSError, ValueError, TypeError, IndexError, AttributeError):
            self.ids = {}

    @staticmethod
    def _key(tp: TopicPartition) -> str:
        return f"{tp[0]}/{tp[1]}"

    def get(self, tp: TopicPartition) -> tuple[int, int] | None:
        return self.ids.get(self._key(tp))

    def put(self, tps: list[TopicPartition], producer_id: int, epoch: int) -> None:
        """Remember `tps` start with this producer, durably, before any of their batches is sent."""
        for tp in tps:
            self.ids[self._key(tp)] = (producer_id, epoch)
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, json.dumps({k: list(v) for k, v in sorted(self.ids.items())}).encode())
