"""A fetcher's side of an incremental fetch session (KIP-227): which partitions the next Fetch must name.

The first fetch is full (epoch 0) and creates the session; each next one (epoch 1, 2, ...) names only the
partitions whose fetch fields (offset, leader epoch, log start, size limit) differ from what the session
holds, and forgets those no longer fetched. The leader fetches the others from their last named offsets,
which is right because they did not move. Any error, or an answer the fetcher could not take, makes the
next fetch full again with a new session; the old id goes with it (epoch 0), so the leader frees its slot.
"""

from __future__ import annotations

from typing import Any

from broker.protocol.errors import ErrorCode
from broker.protocol.messages.fetch import INITIAL_EPOCH, next_epoch

TopicPartition = tuple[str, int]


class FetchSessionBuilder:
    """The session's state at the fetcher: its id, next epoch, and the fetch fields the leader holds."""

    def __init__(self) -> None:
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self._held: dict[TopicPartition, dict[str, Any]] = {}  # as the leader's session holds them
        # what the fetch in flight names (tp → entry) and forgets, to take into `_held` once it is answered
        self._pending: tuple[dict[TopicPartition, dict[str, Any]], list[TopicPartition]] | None = None

    def full_next(self) -> bool:
        """Whether the next fetch is a full one (it names every partition)."""
        return self.epoch == INITIAL_EPOCH

    def build(self, wanted: dict[TopicPartition, dict[str, Any]],
              changed: set[TopicPartition] | None = None) -> dict[str, Any]:  # fmt: skip
        """The session fields of the next Fetch of `wanted` (tp → partition entry): `session_id`,
        `session_epoch`, `topics` (what to name) and `forgotten_topics_data`. With `changed`, only those
        partitions can differ from what the session holds (the others are not compared)."""
        held = self._held
        if self.epoch == INITIAL_EPOCH:
            named, forgotten = dict(wanted), []
        elif changed is None:
            named = {tp: p for tp, p in wanted.items() if held.get(tp) != p}
            forgotten = [tp for tp in held if tp not in wanted]
        else:
            named = {tp: p for tp in changed if (p := wanted.get(tp)) is not None and held.get(tp) != p}
            forgotten = [tp for tp in changed if tp in held and tp not in wanted]
        self._pending = (named, forgotten)
        return {
            "session_id": self.session_id, "session_epoch": self.epoch,
            "topics": _by_topic(named.items()), "forgotten_topics_data": _by_topic((tp, tp[1]) for tp in forgotten),
        }  # fmt: skip

    def received(self, error_code: int, session_id: int) -> None:
        """The answer to the last `build`: the session moves on, or the next fetch is full again."""
        pending, self._pending = self._pending, None
        if error_code != ErrorCode.NONE or pending is None:
            self.reset(keep_id=error_code != ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        elif self.epoch == INITIAL_EPOCH and session_id == 0:  # the leader had no room: full fetches go on
            self.session_id, self._held = 0, {}
        else:
            named, forgotten = pending
            if self.epoch == INITIAL_EPOCH:
                self._held = named
            else:
                self._held.update(named)
                for tp in forgotten:
                    self._held.pop(tp, None)
            self.session_id, self.epoch = session_id, next_epoch(self.epoch)

    def reset(self, keep_id: bool = True) -> None:
        """Start again with a full fetch (naming the old session, if `keep_id`, so the leader closes it)."""
        if not keep_id:
            self.session_id = 0
        self.epoch, self._held, self._pending = INITIAL_EPOCH, {}, None


def _by_topic(items: Any) -> list[dict[str, Any]]:
    by_topic: dict[str, list[Any]] = {}
    for (topic, _), entry in items:
        by_topic.setdefault(topic, []).append(entry)
    return [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]
