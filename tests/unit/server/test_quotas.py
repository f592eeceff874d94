"""The client quota manager (Kafka's ClientQuotaManager): resolution order and metric sharing, the sampled rate and
the throttle time; DescribeClientQuotas' filter semantics and AlterClientQuotas' checks; the values' format."""

from __future__ import annotations

import pytest

from broker.protocol.errors import ErrorCode
from broker.quota.manager import WINDOW_MS, WINDOW_NUM, QuotaManager, Rate, user_of
from broker.quota.store import Entity, format_value
from broker.server.handlers.quotas import _filter, _Invalid, changes_of, describe, entity_of

D = "<default>"
P = "producer_byte_rate"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def manager(quotas: dict[Entity, dict[str, float]]) -> tuple[QuotaManager, Clock]:
    clock = Clock()
    q = QuotaManager(clock)
    q.set_quotas(quotas)
    return q, clock


@pytest.mark.parametrize(
    ("configured", "tags"),
    [
        # each level, with the levels below it also configured: the first one counts (Kafka's order)
        (Entity("u", "c"), ("u", "c")),
        (Entity("u", D), ("u", "c")),
        (Entity("u", None), ("u", "")),
        (Entity(D, "c"), ("u", "c")),
        (Entity(D, D), ("u", "c")),
        (Entity(D, None), ("u", "")),
        (Entity(None, "c"), ("", "c")),
        (Entity(None, D), ("", "c")),
    ],
)
def test_the_first_level_configured_names_the_quota_and_its_metric(configured, tags):
    order = [Entity("u", "c"), Entity("u", D), Entity("u", None), Entity(D, "c"), Entity(D, D), Entity(D, None),
             Entity(None, "c"), Entity(None, D)]  # fmt: skip
    below = order[order.index(configured) :]
    q, _ = manager({e: {P: 1000.0 * (i + 1)} for i, e in enumerate(below)})
    assert q.resolve(P, "u", "c") == (tags, 1000.0)
    assert q.resolve("consumer_byte_rate", "u", "c") is None  # each quota type resolves on its own


def test_no_quota_is_inactive_and_records_nothing():
    q, _ = manager({})
    assert not q.active and not q.limited(P, "u", "c")
    assert q.record(P, "u", "c", 10**9) == 0
    q.set_quotas({Entity(None, "other"): {P: 10.0}})
    assert q.active and not q.limited(P, "u", "c") and q.limited(P, "x", "other")


def test_a_user_quota_is_shared_by_its_clients_and_a_default_client_quota_is_not():
    q, _ = manager({Entity("alice", None): {P: 1000.0}, Entity(None, D): {P: 1000.0}})
    # alice's two clients share one metric: 10 s × 1000 B/s in all before a throttle
    assert q.record(P, "alice", "a", 6000) == 0
    assert q.record(P, "alice", "b", 6000) > 0
    # the default client quota: each client id its own metric
    assert q.record(P, "bob", "x", 6000) == 0
    assert q.record(P, "bob", "y", 6000) == 0


def test_the_throttle_time_is_kafkas():
    """(rate - bound) / bound × window, the window at least (samples - 1) × 1 s."""
    q, clock = manager({Entity(None, "c"): {P: 1000.0}})
    assert q.record(P, "u", "c", 10_000) == 0  # 10 000 B over 10 s: exactly the bound
    t = q.record(P, "u", "c", 5_000)  # 15 000 B over 10 s: 1500 B/s, half over: 5 s
    assert t == 5000
    clock.now += 2000  # the window is still 10 s (samples span 2 s): 1500 B/s, the same throttle
    assert q.record(P, "u", "c", 0) == 5000


def test_the_rate_forgets_samples_older_than_its_window():
    r = Rate(0.0)
    r.record(11_000, 0.0)
    assert r.measure(0.0) == pytest.approx(1100.0)  # 11 000 B over the minimum 10 s
    for s in range(1, 11):
        r.record(0, s * WINDOW_MS)
    assert r.measure(10_500.0) == pytest.approx(11_000 / 10.5)
    r.record(0, WINDOW_NUM * WINDOW_MS + 1.0)  # the first sample has aged out
    assert r.measure(WINDOW_NUM * WINDOW_MS + 1.0) == 0.0


def test_a_throttled_fetch_is_taken_back():
    q, _ = manager({Entity(None, "c"): {"consumer_byte_rate": 1000.0}})
    assert q.record("consumer_byte_rate", "u", "c", 20_000) > 0
    q.unrecord("consumer_byte_rate", "u", "c", 20_000)
    assert q.record("consumer_byte_rate", "u", "c", 5_000) == 0
    assert q.max_in_window("consumer_byte_rate", "u", "c") == 10_000
    assert q.max_in_window("consumer_byte_rate", "u", "other") is None


def test_principals_as_quotas_name_users():
    assert user_of("User:alice") == "alice" and user_of("User:ANONYMOUS") == "ANONYMOUS"
    assert user_of("User:CN=a,O=b") == "CN=a,O=b"


# --- DescribeClientQuotas / AlterClientQuotas ---------------------------------------------------------


QUOTAS = {
    Entity("u", None): {P: 1.0},
    Entity("u", "c"): {P: 2.0},
    Entity("u", D): {P: 3.0},
    Entity(D, None): {P: 4.0},
    Entity(None, "c"): {P: 5.0},
    Entity(None, D): {P: 6.0},
    Entity("v", None): {},  # a user with credentials only: no quota, never listed
}


def found(components: list[tuple[str, int, str | None]], strict: bool) -> set[Entity]:
    comps = [{"entity_type": t, "match_type": m, "match": n} for t, m, n in components]
    return {e for e, _ in describe(QUOTAS, _filter(comps), strict)}


def test_describe_matches_as_kafka():
    every = {e for e, v in QUOTAS.items() if v}
    assert found([], False) == every
    assert found([], True) == set()
    assert found([("user", 0, "u")], False) == {Entity("u", None), Entity("u", "c"), Entity("u", D)}
    assert found([("user", 0, "u")], True) == {Entity("u", None)}
    assert found([("user", 1, None)], False) == {Entity(D, None)}
    assert found([("user", 2, None)], True) == {Entity("u", None), Entity(D, None)}
    assert found([("client-id", 0, "c")], False) == {Entity("u", "c"), Entity(None, "c")}
    assert found([("client-id", 1, None), ("user", 0, "u")], True) == {Entity("u", D)}
    assert found([("client-id", 2, None)], True) == {Entity(None, "c"), Entity(None, D)}


@pytest.mark.parametrize(
    ("components", "code", "message"),
    [
        (
            [("user", 0, "a"), ("user", 0, "b")],
            ErrorCode.INVALID_REQUEST,
            "Duplicate user filter component entity type",
        ),
        ([("", 0, "a")], ErrorCode.INVALID_REQUEST, "Unexpected empty filter component entity type"),
        ([("ip", 0, "a")], ErrorCode.UNSUPPORTED_VERSION, "Custom entity type 'ip' not supported"),
        ([("user", 7, "a")], ErrorCode.INVALID_REQUEST, "Unexpected match type: 7"),
    ],
)
def test_bad_filters(components, code, message):
    with pytest.raises(_Invalid) as exc:
        _filter([{"entity_type": t, "match_type": m, "match": n} for t, m, n in components])
    assert (exc.value.code, exc.value.message) == (code, message)


def test_alter_checks_entities_and_keys():
    assert entity_of([{"entity_type": "user", "entity_name": None}]) == Entity(D, None)
    assert entity_of([{"entity_type": "client-id", "entity_name": "c"}, {"entity_type": "user", "entity_name": "u"}]) \
        == Entity("u", "c")  # fmt: skip
    for parts, message in (
        ([], "Invalid empty client quota entity"),
        ([{"entity_type": "user", "entity_name": "a"}] * 2, "Duplicate user entity in request"),
        ([{"entity_type": "ip", "entity_name": "a"}], "Unhandled client quota entity type: ip"),
    ):
        with pytest.raises(_Invalid, match=message):
            entity_of(parts)
    assert changes_of([{"key": P, "value": 5.0, "remove": False}, {"key": "request_percentage", "value": 0.0,
                        "remove": True}]) == {P: 5.0, "request_percentage": None}  # fmt: skip
    with pytest.raises(_Invalid, match="Invalid configuration key SCRAM-SHA-256"):
        changes_of([{"key": "SCRAM-SHA-256", "value": 1.0, "remove": False}])
    with pytest.raises(_Invalid, match="must be a Long value"):
        changes_of([{"key": P, "value": 2.5, "remove": False}])


def test_values_are_written_as_kafka_writes_them():
    assert format_value(P, 1024.0) == "1024"
    assert format_value("consumer_byte_rate", 1e9) == "1000000000"
    assert format_value("request_percentage", 50.0) == "50.0"
    assert format_value("request_percentage", 12.5) == "12.5"


def test_old_change_notifications_are_purged(monkeypatch):
    from broker.quota import manager as quotas_module

    class Zk:
        def __init__(self) -> None:
            self.deleted: list[str] = []

        def delete(self, path: str) -> None:
            self.deleted.append(path)

    now = [100.0]
    monkeypatch.setattr("time.monotonic", lambda: now[0])
    zk, seen = Zk(), {}
    quotas_module._purge(zk, ["config_change_0000000001"], seen)
    now[0] += quotas_module.NOTIFICATION_EXPIRY_S - 1
    quotas_module._purge(zk, ["config_change_0000000001", "config_change_0000000002"], seen)
    assert zk.deleted == []
    now[0] += 2
    quotas_module._purge(zk, ["config_change_0000000001", "config_change_0000000002", "config_change_0000000003"], seen)
    assert zk.deleted == ["/config/changes/config_change_0000000001"]
    assert set(seen) == {"config_change_0000000002", "config_change_0000000003"}
