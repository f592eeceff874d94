"""Client quota enforcement, as Kafka 2.8's ClientQuotaManager: byte rates and request time over a sliding window.

Every broker keeps the quotas of ZooKeeper's `/config/users|clients` znodes (broker.quota.store) in
memory, read whole at start and again on each `/config/changes` notification (the watch sees a new
child: kafka-configs, AlterClientQuotas on any broker, this one's included). Notifications are deleted
15 minutes after a broker first saw them, as Kafka's brokers delete them.

Resolution (ClientQuotaManager.quotaMetricTags/quotaLimit, per quota type): the first entity of
user+client-id, user+<default> client, user, <default> user+client-id, <default> user+<default> client,
<default> user, client-id, <default> client-id that has the quota names the *metric* the request is
counted in: (user, client-id) for the user+client levels, (user, "") for user levels, ("", client-id)
for client-id levels — so a user quota is shared by all its clients, and a default client quota gives
each client id its own. A principal's user is its name without `User:` (ANONYMOUS on a plain listener).

What is counted: request bytes (`producer_byte_rate`), answer bytes (`consumer_byte_rate`), and for
`request_percentage` the handling time in percent-seconds (seconds × 100, Kafka's nanosToPercentage), so
the rate is the percentage of one thread the client keeps busy (broker.server.handlers.throttling).

Each metric is a rate over `quota.window.num` (11) samples of `quota.window.size.seconds` (1 s), as
Kafka's `Rate`: the sum of the live samples over their span, at least (samples - 1) windows. A record
that takes the rate over the bound throttles for `(rate - bound) / bound × window` ms (QuotaUtils.throttleTime):
the time after which the rate is back at the bound. The socket server answers first and then reads
nothing from the connection for that long (KIP-219, `Session.mute_until`).

`active` is False while no quota is configured: the dispatcher and the produce run path check only it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.quota import store as quota_store
from broker.quota.store import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, Entity
from broker.zk import paths

if TYPE_CHECKING:
    from kazoo.client import KazooClient

log = logging.getLogger(__name__)

DEFAULT = paths.DEFAULT_ENTITY
#: Kafka's defaults of quota.window.num and quota.window.size.seconds
WINDOW_NUM = 11
WINDOW_MS = 1000
#: metrics kept at most (the least recently made go first), as Kafka expires idle quota sensors
_MAX_METRICS = 10_000


class Rate:
    """Kafka's `Rate` over a `SampledStat` of `num` samples of `window_ms`: per-second rate of what was recorded."""

    __slots__ = ("num", "window_ms", "starts", "values", "current")

    def __init__(self, now_ms: float, num: int = WINDOW_NUM, window_ms: int = WINDOW_MS) -> None:
        self.num, self.window_ms = num, window_ms
        self.starts = [now_ms]
        self.values = [0.0]
        self.current = 0

    def _purge(self, now_ms: float) -> None:
        expire = self.num * self.window_ms
        for i, start in enumerate(self.starts):
            if now_ms - start >= expire:
                self.starts[i], self.values[i] = now_ms, 0.0

    def record(self, value: float, now_ms: float) -> None:
        i = self.current
        if now_ms >= self.starts[i] + self.window_ms:  # the sample is complete: the next one (the oldest reused)
            if len(self.starts) < self.num:
                self.starts.append(now_ms)
                self.values.append(0.0)
                i = len(self.starts) - 1
            else:
                i = (i + 1) % self.num
                self.starts[i], self.values[i] = now_ms, 0.0
            self.current = i
        self.values[i] += value

    def window_size(self, now_ms: float) -> float:
        """The span the rate divides by (ms): since the oldest live sample, at least (num - 1) windows."""
        elapsed = now_ms - min(self.starts)
        full = int(elapsed // self.window_ms)
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return elapsed

    def measure(self, now_ms: float) -> float:
        self._purge(now_ms)
        return sum(self.values) / (self.window_size(now_ms) / 1000.0)


class QuotaManager:
    """The broker's quotas and the rates of the clients they apply to."""

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        import time

        self._clock = clock or (lambda: time.monotonic() * 1000.0)
        self.quotas: dict[Entity, dict[str, float]] = {}
        #: any quota configured (the hot paths look at this only)
        self.active = False
        #: per quota key: entity → bound, the levels `resolve` walks
        self._by_key: dict[str, dict[Entity, float]] = {}
        #: (quota key, user, client id) → (metric tags, bound) or None: resolution cached until the quotas change
        self._resolved: dict[tuple[str, str, str], tuple[tuple[str, str], float] | None] = {}
        self._metrics: dict[tuple[str, str, str], Rate] = {}
        self._zk: KazooClient | None = None
        self._stopped = False

    # -- configuration ----------------------------------------------------------------------------

    def set_quotas(self, quotas: dict[Entity, dict[str, float]]) -> None:
        """Take a whole new set of quotas (metrics whose quota went or changed level start afresh)."""
        by_key: dict[str, dict[Entity, float]] = {}
        for entity, values in quotas.items():
            for key, value in values.items():
                by_key.setdefault(key, {})[entity] = value
        self.quotas, self._by_key, self._resolved = quotas, by_key, {}
        self.active = bool(by_key)
        if not self.active:
            self._metrics.clear()

    def start(self, zk: KazooClient, call: Callable[..., None]) -> None:
        """Load the quotas and watch `/config/changes`; `call(fn, *args)` runs fn on the event loop."""
        from kazoo.recipe.watchers import ChildrenWatch

        self._zk = zk
        self.set_quotas(quota_store.read_all(zk))
        zk.ensure_path(paths.CONFIG_CHANGES)

        seen: dict[str, float] = {}  # notification → when this broker first saw it (monotonic s)

        def on_changes(children: list[str]) -> bool | None:
            if self._stopped:
                return False
            _purge(zk, children, seen)
            try:
                quotas = quota_store.read_all(zk)
            except Exception as exc:  # (the session dropping under the watch: the next change reloads)
                log.warning("could not read the client quotas: %s", type(exc).__name__)
                return None
            if quotas != self.quotas:
                log.info("client quotas now %s", _describe(quotas) or "none")
                call(self.set_quotas, quotas)
            return None

        ChildrenWatch(zk, paths.CONFIG_CHANGES, on_changes)

    def stop(self) -> None:
        self._stopped = True

    # -- enforcement --------------------------------------------------------------------------------

    def resolve(self, key: str, user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
        """(metric tags, bound) of the quota `key` for this user and client id, or None when none applies."""
        cache_key = (key, user, client_id)
        try:
            return self._resolved[cache_key]
        except KeyError:
            pass
        levels = self._by_key.get(key)
        found: tuple[tuple[str, str], float] | None = None
        if levels:
            order = (
                (Entity(user, client_id), (user, client_id)),
                (Entity(user, DEFAULT), (user, client_id)),
                (Entity(user, None), (user, "")),
                (Entity(DEFAULT, client_id), (user, client_id)),
                (Entity(DEFAULT, DEFAULT), (user, client_id)),
                (Entity(DEFAULT, None), (user, "")),
                (Entity(None, client_id), ("", client_id)),
                (Entity(None, DEFAULT), ("", client_id)),
            )
            for entity, tags in order:
                bound = levels.get(entity)
                if bound is not None:
                    found = (tags, bound)
                    break
        if len(self._resolved) > _MAX_METRICS:
            self._resolved.clear()
        self._resolved[cache_key] = found
        return found

    def max_in_window(self, key: str, user: str, client_id: str) -> int | None:
        """The most that can be recorded at once without a throttle when nothing was recently (ClientQuotaManager.
        getMaxValueInQuotaWindow: the bound over (samples - 1) windows); None without a quota."""
        found = self.resolve(key, user, client_id)
        if found is None:
            return None
        return int(min(found[1] * (WINDOW_NUM - 1) * WINDOW_MS / 1000, 2**31 - 1))

    def limited(self, key: str, user: str, client_id: str) -> bool:
        return self.active and self.resolve(key, user, client_id) is not None

    def record(self, key: str, user: str, client_id: str, value: float) -> int:
        """Count `value` (bytes) against the quota; the throttle time in ms (0: within its quota, or none)."""
        found = self.resolve(key, user, client_id)
        if found is None:
            return 0
        tags, bound = found
        now = self._clock()
        metric_key = (key, *tags)
        rate = self._metrics.get(metric_key)
        if rate is None:
            if len(self._metrics) >= _MAX_METRICS:
                self._metrics.pop(next(iter(self._metrics)))
            rate = self._metrics[metric_key] = Rate(now)
        rate.record(value, now)
        measured = rate.measure(now)
        if measured <= bound or bound <= 0:
            return 0 if bound > 0 else WINDOW_NUM * WINDOW_MS
        return round((measured - bound) / bound * rate.window_size(now))

    def unrecord(self, key: str, user: str, client_id: str, value: float) -> None:
        """Take back a recorded value (a throttled fetch answered empty, as Kafka's unrecordQuotaSensor)."""
        found = self.resolve(key, user, client_id)
        if found is not None:
            rate = self._metrics.get((key, *found[0]))
            if rate is not None:
                rate.record(-value, self._clock())


#: notifications are deleted this long after they were first seen, as Kafka's ZkNodeChangeNotificationListener
#: deletes those older than 15 minutes (every broker has read them by then)
NOTIFICATION_EXPIRY_S = 15 * 60


def _purge(zk: KazooClient, children: list[str], seen: dict[str, float]) -> None:
    """Delete the change notifications first seen over `NOTIFICATION_EXPIRY_S` ago (any broker may: a gone one
    is skipped), so `/config/changes` does not grow for ever."""
    import time

    from kazoo.exceptions import KazooException

    now = time.monotonic()
    current = set(children)
    for name in [n for n in seen if n not in current]:
        del seen[name]
    for name in children:
        first = seen.setdefault(name, now)
        if now - first > NOTIFICATION_EXPIRY_S:
            try:
                zk.delete(f"{paths.CONFIG_CHANGES}/{name}")
            except KazooException:
                pass  # (gone already, or ZooKeeper away: another change tries again)
            seen.pop(name, None)


#: the quota each API's bytes count against
PRODUCE_KEY = PRODUCER_BYTE_RATE
FETCH_KEY = CONSUMER_BYTE_RATE


def user_of(principal: str) -> str:
    """A principal's user name as quotas name it ("User:alice" → "alice")."""
    return principal.partition(":")[2] if ":" in principal else principal


def _describe(quotas: dict[Entity, dict[str, float]]) -> str:
    return "; ".join(
        f"{paths.quota_entity_path(e.user, e.client_id)} {values}" for e, values in sorted(quotas.items(), key=str)
    )
