"""The offset grammar (broker.client.offsets): parse_offset, parse_duration_ms and resolve()."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.client.offsets import BEGINNING, END, OffsetSpec, parse_duration_ms, parse_offset, resolve
from broker.errors import UsageError

UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
NOW = 1_800_000_000_000

# --- keywords, N, -N, +N ---------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["beginning", "earliest", "start", "first", "BEGINNING", " Earliest "])
def test_beginning_words(text):
    assert parse_offset(text) == BEGINNING == OffsetSpec("beginning", 0)


@pytest.mark.parametrize("text", ["end", "latest", "last", "END", " Latest\t"])
def test_end_words(text):
    assert parse_offset(text) == END == OffsetSpec("end", 0)


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_every_n_is_an_absolute_offset(n):
    assert parse_offset(str(n)) == OffsetSpec("absolute", n)
    assert parse_offset(f"  {n} ") == OffsetSpec("absolute", n)
    assert parse_offset(str(n), relative_to_committed=True) == OffsetSpec("absolute", n)


@given(st.integers(min_value=1, max_value=2**63 - 1))
def test_every_minus_n_counts_back_from_the_end(n):
    assert parse_offset(f"-{n}") == OffsetSpec("from_end", n)


def test_minus_zero_is_the_end_not_a_group_offset():
    # "-0" is "0 before the end": the end; it must not be refused as a "+N" group-relative offset.
    assert parse_offset("-0") == OffsetSpec("from_end", 0)
    assert resolve(parse_offset("-0"), 3, 10) == 10


@given(st.integers(min_value=0, max_value=10**12))
def test_plus_n_needs_a_group(n):
    with pytest.raises(UsageError, match="needs --group"):
        parse_offset(f"+{n}")


@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_signed_n_is_relative_with_a_group(n):
    text = f"+{n}" if n >= 0 else str(n)
    assert parse_offset(text, relative_to_committed=True) == OffsetSpec("relative", n)


# --- @epoch-ms -------------------------------------------------------------------------------------


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_at_epoch_ms_is_a_timestamp(ms):
    assert parse_offset(f"@{ms}") == OffsetSpec("timestamp", ms)


@pytest.mark.parametrize("text", ["@-1", "@-1700000000000"])
def test_negative_timestamps_are_refused(text):
    with pytest.raises(UsageError, match="cannot be negative"):
        parse_offset(text)


# --- durations -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "ms"), [
    ("500ms", 500), ("90s", 90_000), ("10m", 600_000), ("2h", 7_200_000), ("1d", 86_400_000),
    ("1w", 604_800_000), ("1h30m", 5_400_000), ("1d12h", 129_600_000), ("1w2d3h4m5s6ms", 788_645_006),
    ("0s", 0), ("10M", 600_000), (" 10m ", 600_000), ("2.5h", 9_000_000), ("1.5s", 1500),
    ("1m1ms", 60_001), ("1s1m", 61_000),
])  # fmt: skip
def test_durations(text, ms):
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize(("text", "ms"), [("1.15h", 4_140_000), ("1.005s", 1005), ("0.7m", 42_000), ("2.3s", 2300)])
def test_decimal_durations_are_exact(text, ms):
    # A fraction of a unit that is a whole number of milliseconds must come out as exactly that.
    assert parse_duration_ms(text) == ms


durations = st.lists(
    st.tuples(st.integers(min_value=0, max_value=10**6), st.sampled_from(sorted(UNITS))), min_size=1, max_size=6
)


@given(durations)
def test_every_unit_and_combination(parts):
    text = "".join(f"{n}{u}" for n, u in parts)
    expected = sum(n * UNITS[u] for n, u in parts)
    assert parse_duration_ms(text) == expected
    assert parse_duration_ms(text.upper()) == expected
    assert parse_offset(text, now_ms=NOW) == OffsetSpec("timestamp", max(0, NOW - expected))


@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=0, max_value=999),
       st.sampled_from(["s", "m", "h", "d", "w"]))  # fmt: skip
def test_decimal_units_property(whole, frac, unit):
    text = f"{whole}.{frac:03d}{unit}"
    exact = Decimal(f"{whole}.{frac:03d}") * UNITS[unit]  # a whole number of ms for every unit from s up
    assert parse_duration_ms(text) == int(exact)


@pytest.mark.parametrize("text", ["", "   ", "m", "10", "10x", "1h 30m", "h1", "1.h", ".5h", "-5m", "5m-", "1hh",
                                  "10mss", "1e3s", "s10"])  # fmt: skip
def test_non_durations_are_none(text):
    assert parse_duration_ms(text) is None


def test_durations_are_that_long_before_now():
    before = int(time.time() * 1000)
    spec = parse_offset("10m")
    after = int(time.time() * 1000)
    assert spec.kind == "timestamp"
    assert before - 600_000 <= spec.value <= after - 600_000
    assert parse_offset("90s", now_ms=NOW) == OffsetSpec("timestamp", NOW - 90_000)


def test_a_duration_longer_than_the_epoch_is_clamped_to_zero():
    assert parse_offset("100000w", now_ms=NOW) == OffsetSpec("timestamp", 0)


# --- ISO-8601 --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "ms"), [
    ("2024-05-01T12:00:00Z", 1_714_564_800_000),
    ("2024-05-01T12:00:00+00:00", 1_714_564_800_000),
    ("2024-05-01T12:00:00+02:00", 1_714_557_600_000),
    ("2024-05-01T12:00:00-05:30", 1_714_584_600_000),
    ("2024-05-01T12:00:00.250Z", 1_714_564_800_250),
    ("2024-05-01T12:00Z", 1_714_564_800_000),
    ("2038-02-01T00:00:00.022Z", 2_148_595_200_022),
    ("2024-05-01 12:00:00+00:00", 1_714_564_800_000),
])  # fmt: skip
def test_iso_with_a_zone(text, ms):
    assert parse_offset(text) == OffsetSpec("timestamp", ms)


@pytest.fixture
def kolkata(monkeypatch):
    """Local time = UTC+05:30 (no daylight saving), so 'no zone means local time' is visible."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_iso_without_a_zone_is_local_time(kolkata):
    assert parse_offset("2024-05-01T12:00:00") == OffsetSpec("timestamp", 1_714_564_800_000 - 19_800_000)
    assert parse_offset("2024-05-01T12:00:00.5") == OffsetSpec("timestamp", 1_714_564_800_500 - 19_800_000)
    assert parse_offset("2024-05-01") == OffsetSpec("timestamp", 1_714_521_600_000 - 19_800_000)


aware = st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1),
                     timezones=st.sampled_from([UTC, timezone(timedelta(hours=2)),
                                                timezone(timedelta(hours=-9, minutes=-30))]))  # fmt: skip


@given(aware)
def test_iso_property_with_zone_and_z(dt):
    dt = dt.replace(microsecond=dt.microsecond // 1000 * 1000)
    ms = int(dt.timestamp()) * 1000 + dt.microsecond // 1000
    assert parse_offset(dt.isoformat(timespec="milliseconds")) == OffsetSpec("timestamp", ms)
    z = dt.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"
    assert parse_offset(z) == OffsetSpec("timestamp", ms)


@given(st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1)))
def test_iso_property_without_zone(dt):
    dt = dt.replace(microsecond=0)
    assert parse_offset(dt.isoformat()) == OffsetSpec("timestamp", int(dt.timestamp()) * 1000)


# --- invalid ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "bogus", "beginnin", "10 m", "1.5", "1e3", "@", "@abc", "@1.5", "+", "-",
                                  "--1", "+-1", "0x10", "12:00", "2024-13-01T00:00:00", "2024-05-01T25:00:00Z",
                                  "yesterday", "10m ago", "-5m"])  # fmt: skip
def test_invalid_offsets(text):
    with pytest.raises(UsageError) as err:
        parse_offset(text)
    message = str(err.value)
    assert repr(text) in message
    assert "\n" not in message


def test_the_error_names_the_grammar():
    with pytest.raises(UsageError) as err:
        parse_offset("bogus")
    for word in ("beginning", "end", "N", "-N", "@epoch-ms", "ISO-8601", "10m"):
        assert word in str(err.value)


@given(st.text(alphabet="abcxyzqkuvABC!?_ ,;", min_size=1, max_size=20))
def test_junk_is_refused(text):
    with pytest.raises(UsageError):
        parse_offset(text)


# --- resolve ---------------------------------------------------------------------------------------

bounds = st.tuples(st.integers(min_value=0, max_value=10**9), st.integers(min_value=0, max_value=10**9)).map(sorted)


@given(bounds, st.integers(min_value=0, max_value=2 * 10**9))
def test_resolve_clamps(b, n):
    start, end = b
    assert resolve(BEGINNING, start, end) == start
    assert resolve(END, start, end) == end
    assert resolve(OffsetSpec("absolute", n), start, end) == min(max(n, start), end)
    assert resolve(OffsetSpec("from_end", n), start, end) == max(start, end - n)
    for spec in (OffsetSpec("absolute", n), OffsetSpec("from_end", n)):
        assert start <= resolve(spec, start, end) <= end


@given(bounds, st.integers(min_value=0, max_value=10**9), st.integers(min_value=-(10**9), max_value=10**9))
def test_resolve_relative_to_committed(b, committed, delta):
    start, end = b
    got = resolve(OffsetSpec("relative", delta), start, end, committed)
    assert got == min(max(committed + delta, start), end)


def test_resolve_examples():
    assert resolve(parse_offset("5"), 10, 20) == 10  # before the log start: the start
    assert resolve(parse_offset("15"), 10, 20) == 15
    assert resolve(parse_offset("25"), 10, 20) == 20  # past the end: the end
    assert resolve(parse_offset("-3"), 10, 20) == 17
    assert resolve(parse_offset("-30"), 10, 20) == 10
    assert resolve(parse_offset("-3"), 0, 0) == 0


def test_resolve_relative_needs_a_committed_offset():
    with pytest.raises(UsageError):
        resolve(OffsetSpec("relative", 1), 0, 10)


def test_timestamps_are_not_resolved_without_a_lookup():
    with pytest.raises(ValueError):
        resolve(OffsetSpec("timestamp", 5), 0, 10)


def test_describe():
    assert BEGINNING.describe() == "beginning"
    assert END.describe() == "end"
    assert OffsetSpec("absolute", 7).describe() == "absolute 7"
    assert OffsetSpec("from_end", 3).describe() == "from_end 3"
