"""A leader's bookkeeping for one partition: its followers' log end offsets, the ISR and the high watermark.

Kafka's rules (KIP-7's lag by time): a follower is caught up when it fetches from the leader's log end
offset; one that has not been caught up for `replica.lag.time.max.ms` leaves the ISR; one outside the
ISR rejoins once its log end offset reaches the high watermark. The high watermark is the smallest log
end offset over the ISR (the leader's included) and never moves back; a follower the leader has not
heard from since it took the lead holds it where it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class SessionClock:
    """When a follower's fetch session last fetched. A partition the session leaves quiet (caught up, nothing
    new: `ReplicaManager.quiet_fetch`) is caught up as of then, without a write per partition per fetch."""

    __slots__ = ("ms",)

    def __init__(self, ms: int = 0) -> None:
        self.ms = ms


@dataclass(slots=True)
class Follower:
    leo: int = -1  # its log end offset as its last fetch told (-1: not heard from since this leader took over)
    caught_up_ms: int = 0  # when it last fetched from the leader's log end offset (or from where it was before)
    last_fetch_leo: int = -1  # the leader's log end offset at that follower's previous fetch
    last_fetch_ms: int = 0
    log_start: int = -1  # its log start offset as its last fetch told (-1: not told yet)
    quiet: SessionClock | None = None  # while quiet in a fetch session: fetched at `leo` whenever that one fetches

    def settle(self) -> None:
        """Take what the quiet session's fetches since the last noted one said: fetched at its log end (then the
        leader's), caught up."""
        q, self.quiet = self.quiet, None
        if q is not None and q.ms > self.last_fetch_ms:
            self.caught_up_ms = max(self.caught_up_ms, q.ms)
            self.last_fetch_ms, self.last_fetch_leo = q.ms, self.leo

    def leave_quiet(self, clock: SessionClock) -> None:
        """Its session stopped counting it quiet (named, woken, forgotten, closed): what that session's fetches
        said until its last one is noted, and no later fetch of it counts (`settle`)."""
        if self.quiet is clock:
            self.settle()

    def caught_up(self) -> int:
        """When it was last caught up (its quiet session's last fetch counts)."""
        q = self.quiet
        return self.caught_up_ms if q is None else max(self.caught_up_ms, q.ms)


@dataclass
class LeaderPartition:
    """What the leader of one partition knows of its replicas."""

    leader: int
    replicas: list[int]
    isr: list[int]
    leader_epoch: int
    zk_version: int
    hw: int
    epoch_start: int = 0  # the leader's log end offset when it took the lead
    followers: dict[int, Follower] = field(default_factory=dict)

    @classmethod
    def start(cls, leader: int, replicas: list[int], isr: list[int], leader_epoch: int, zk_version: int,
              hw: int, epoch_start: int, now_ms: int) -> LeaderPartition:  # fmt: skip
        lp = cls(leader, list(replicas), list(isr), leader_epoch, zk_version, hw, epoch_start)
        lp.followers = {r: Follower(caught_up_ms=now_ms, last_fetch_ms=now_ms) for r in replicas if r != leader}
        return lp

    def fetched(self, replica: int, offset: int, leader_leo: int, now_ms: int, log_start: int = -1) -> None:
        """A follower fetched from `offset` (so its log ends there) while the leader's log ended at `leader_leo`;
        its copy starts at `log_start` (-1: its fetch did not say)."""
        f = self.followers.get(replica)
        if f is None:
            f = self.followers[replica] = Follower(caught_up_ms=now_ms)
        f.settle()
        if offset >= leader_leo:
            f.caught_up_ms = now_ms
        elif f.last_fetch_leo >= 0 and offset >= f.last_fetch_leo:
            f.caught_up_ms = max(f.caught_up_ms, f.last_fetch_ms)
        f.leo, f.last_fetch_leo, f.last_fetch_ms = offset, leader_leo, now_ms
        if log_start >= 0:
            f.log_start = log_start

    def high_watermark(self, leader_leo: int) -> int:
        """The smallest log end offset over the ISR, never below what it was (recomputed and kept)."""
        self.hw = self.peek_high_watermark(leader_leo)
        return self.hw

    def peek_high_watermark(self, leader_leo: int) -> int:
        """`high_watermark` without keeping it: what another thread (the log cleaner) may ask."""
        low = leader_leo
        for r in list(self.isr):
            if r != self.leader:
                f = self.followers.get(r)
                if f is None or f.leo < 0:
                    return self.hw
                low = min(low, f.leo)
        return max(low, self.hw)

    def low_watermark(self, leader_start: int, live: set[int] | dict[int, object]) -> int:
        """The smallest log start offset over the leader and its followers on live brokers (Kafka's
        `lowWatermarkIfLeader`): what DeleteRecords answers, once it reached the offset asked for."""
        starts = [self.followers.get(r, Follower()).log_start for r in self.replicas if r != self.leader and r in live]
        return min([leader_start, *starts])

    def lagging(self, now_ms: int, lag_ms: int) -> list[int]:
        """The ISR's followers not caught up within `lag_ms`."""
        return [r for r in self.isr if r != self.leader
                and now_ms - self.followers.get(r, Follower()).caught_up() > lag_ms]  # fmt: skip

    def rejoining(self, leader_leo: int) -> list[int]:
        """Followers outside the ISR whose log has reached the high watermark and this leader's first offset.

        The high watermark is recomputed first: a leader alone in its ISR never waits for followers, so the
        one last kept may be far behind its log end, and a follower measured against that would rejoin
        without what the leader appended meanwhile."""
        floor = max(self.high_watermark(leader_leo), self.epoch_start, 0)
        return [r for r, f in self.followers.items() if r not in self.isr and r in self.replicas and f.leo >= floor]
