"""The history model: records, UNKNOWN, rounding directions, tiers merged without duplicates."""

from __future__ import annotations

import itertools
import math
import random
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliabilityd.stats import history
from reliabilityd.stats.history import SCALE, TIERS, Point, Transition, label

probability = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
maybe = st.one_of(st.none(), probability)


def _slots(points_by_tier: list[list[Point]], k: int) -> bytes:
    """A history string holding the given points, each tier's in time order (as the write
    script leaves a tier that has not gone round)."""
    head = struct.pack(">BB", history.LAYOUT, len(TIERS))
    body = b""
    for tier, points in zip(TIERS, points_by_tier, strict=True):
        assert len(points) <= tier.capacity
        head += struct.pack(">HH", len(points), len(points) % tier.capacity)
        for p in sorted(points, key=lambda p: p.t):
            body += history.encode_point(p)[k]
    return head + body


def _kept(writes: list[float], tier: history.Tier) -> list[float]:
    """The times a tier keeps of these writes: the last of each of its newest buckets."""
    last: dict[int, float] = {}
    for t in writes:
        b = int(t) // tier.resolution
        last[b] = max(last.get(b, 0.0), t)
    return sorted(last[b] for b in sorted(last)[-tier.capacity :])


@given(p=maybe, lo=maybe, hi=maybe)
def test_a_record_round_trips_within_its_stated_error_and_unknown_stays_unknown(
    p: float | None, lo: float | None, hi: float | None
) -> None:
    point = Point(t=1_764_460_800.0, values={label("pass^k", 5): (p, lo, hi)})
    raw = _slots([[point], [], [], []], 5)
    [[back], [], [], []] = history.decode_points(raw, 5)
    assert back.t == point.t
    got = back.values[label("pass^k", 5)]
    # pass@k at this k was not in the point: UNKNOWN, not a number.
    assert back.values[label("pass@k", 5)] == (None, None, None)
    for want, have, direction in zip((p, lo, hi), got, ("nearest", "down", "up"), strict=True):
        if want is None:
            assert have is None
            continue
        assert have is not None
        assert abs(have - want) <= 1 / SCALE
        if direction == "down":
            assert have <= want
        elif direction == "up":
            assert have >= want
        else:
            assert abs(have - want) <= 0.5 / SCALE + 1e-12


@given(lo=probability, width=probability, at=probability)
def test_a_stored_interval_contains_the_computed_one_and_its_point(
    lo: float, width: float, at: float
) -> None:
    hi = lo + (1 - lo) * width
    p = lo + (hi - lo) * at
    raw = history.encode_point(Point(t=100.0, values={label("pass@k", 1): (p, lo, hi)}))[1]
    [[back], _, _, _] = history.decode_points(
        _slots([[Point(100.0, {label("pass@k", 1): (p, lo, hi)})], [], [], []], 1), 1
    )
    bp, blo, bhi = back.values[label("pass@k", 1)]
    assert blo is not None
    assert bhi is not None
    assert bp is not None
    assert blo <= lo
    assert bhi >= hi
    assert blo <= bp <= bhi
    assert len(raw) == history.RECORD_SIZE


def test_exact_ends_and_out_of_range_values() -> None:
    raw = history.encode_point(Point(t=5.0, values={label("pass^k", 2): (1.0, 0.0, 1.0)}))[2]
    [[back], _, _, _] = history.decode_points(
        _slots([[Point(5.0, {label("pass^k", 2): (1.0, 0.0, 1.0)})], [], [], []], 2), 2
    )
    assert back.values[label("pass^k", 2)] == (1.0, 0.0, 1.0)
    assert len(raw) == history.RECORD_SIZE
    with pytest.raises(ValueError, match=r"within \[0, 1\]"):
        history.encode_point(Point(t=5.0, values={label("pass^k", 2): (1.5, 0.0, 1.0)}))
    with pytest.raises(ValueError, match="unix seconds"):
        history.encode_point(Point(t=0.0, values={label("pass^k", 2): (0.5, 0.0, 1.0)}))
    with pytest.raises(ValueError, match="holds"):
        history.decode_points(b"\0" * 10, 2)
    # The old fixed-size layout, or counts that do not match the length: not read.
    with pytest.raises(ValueError, match="layout"):
        history.decode_points(b"\0" * 28_608, 2)
    one = _slots([[Point(5.0, {label("pass^k", 2): (1.0, 0.0, 1.0)})], [], [], []], 2)
    with pytest.raises(ValueError, match="counts"):
        history.decode_points(one + b"\0", 2)
    assert history.readable(one)
    assert not history.readable(one[:-1])


def test_the_tiers_fit_the_stated_allocation() -> None:
    # 1,308 records of 20 bytes and the header: under jemalloc's 28,672-byte class with
    # the string's own header, once every tier is full.
    assert history.SERIES_BYTES == 26_178
    assert [t.span for t in TIERS] == [3600, 6 * 3600, 7 * 86_400, 420 * 86_400]


def test_merge_takes_each_time_from_the_finest_tier_that_reaches_it() -> None:
    now = 1_764_460_800 + 17  # a write 17 s into a minute
    # Every 10 s for 8 days, as the write script would leave it in each tier.
    writes = [float(now - 10 * j) for j in range(8 * 8640)]
    tiers = [
        [Point(t, {label("pass^k", 1): (0.5, 0.4, 0.6)}, index) for t in _kept(writes, tier)]
        for index, tier in enumerate(TIERS)
    ]
    merged = history.merge({1: _slots(tiers, 1)})
    times = [p.t for p in merged]
    assert times == sorted(set(times))
    by_tier = [[p for p in merged if p.tier == i] for i in range(len(TIERS))]
    fine, minutes, hours, days = by_tier
    assert len(fine) == 360
    assert fine[-1].t == now
    for points, step in ((fine, 10), (minutes, 60), (hours, 3600)):
        assert all(b.t - a.t == step for a, b in itertools.pairwise(points))
    assert minutes[-1].t < fine[0].t
    assert hours[-1].t < minutes[0].t
    assert now - hours[0].t > 7 * 86_400 - 2 * 3600
    assert days
    assert days[-1].t < hours[0].t
    # A window of time, and two ks' points of one time are one point.
    five = [
        [Point(p.t, {label("pass^k", 5): (None, None, None)}, p.tier) for p in ps] for ps in tiers
    ]
    both = history.merge(
        {1: _slots(tiers, 1), 5: _slots(five, 5)}, since=now - 3600, until=now - 60
    )
    assert [p.t for p in both] == [t for t in times if now - 3600 <= t <= now - 60]
    assert all(
        set(p.values) == {label(m, k) for m in ("pass@k", "pass^k") for k in (1, 5)} for p in both
    )
    assert all(p.values[label("pass^k", 5)] == (None, None, None) for p in both)
    assert all(p.values[label("pass^k", 1)] != (None, None, None) for p in both)
    assert history.merge({}) == []


def test_a_leftover_record_older_than_its_tier_is_not_shown() -> None:
    now = 1_764_460_800.0
    old = now - 3600 - 120  # older than tier 0 reaches, kept there by a sparse past
    at: dict[str, history.Estimate3] = {label("pass@k", 1): (0.5, 0.4, 0.6)}
    tiers = [
        [Point(old, {label("pass@k", 1): (0.1, 0.0, 0.2)}, 0), Point(now, at, 0)],
        [Point(now, at, 1)],
        [Point(now, at, 2)],
        [Point(now, at, 3)],
    ]
    assert [(p.t, p.tier) for p in history.merge({1: _slots(tiers, 1)})] == [(now, 0)]


def test_a_new_buckets_minimum_is_its_point() -> None:
    at = {label("pass@k", 1): (0.25, 0.1, 0.4), label("pass^k", 1): (None, None, None)}
    (back,) = history.merge({1: _slots([[Point(100.0, at)], [], [], []], 1)})
    assert back.minima[label("pass@k", 1)] == pytest.approx(0.25, abs=1 / SCALE)
    assert back.minima[label("pass^k", 1)] is None


def test_transitions_round_trip() -> None:
    tr = Transition(
        t=1_764_460_800.25, rule="pass5", state="firing", severity="page", reason="below"
    )
    assert history.decode_transition(history.encode_transition(tr)) == tr
    bare = Transition(t=1.0, rule="r", state="resolved")
    assert history.decode_transition(history.encode_transition(bare)) == bare


def test_point_of_uses_the_snapshot_estimates() -> None:
    from reliabilityd.stats.estimate import estimate

    est = estimate([(10, 7), (10, 10), (10, 3)], 5, "pass^k", n_boot=200)
    unknown = estimate([(3, 3)], 5, "pass@k")
    point = history.point_of([est, unknown], 1_764_460_800.9)
    assert point.t == 1_764_460_800.0
    assert point.values[label("pass^k", 5)] == (est.value, est.ci_low, est.ci_high)
    assert point.values[label("pass@k", 5)] == (None, None, None)
    assert not math.isnan(point.t)


def test_only_a_change_of_state_is_a_transition() -> None:
    from reliabilityd.alerting.evaluator import _transition
    from reliabilityd.rules import AlertState, Rule

    rule = Rule(name="r", k=5, below=0.8, severity="ticket")
    firing = AlertState(state="firing", started_at=1.0, reason="below", last_notified_at=1.0)
    # A repeat notification stores a new last_notified_at: not a transition.
    repeat = AlertState(state="firing", started_at=1.0, reason="below", last_notified_at=9.0)
    assert _transition(rule, firing, repeat, 9.0) is None
    resolved = AlertState(state="resolved", started_at=1.0, ended_at=12.0)
    assert _transition(rule, firing, resolved, 12.0) == Transition(
        t=12.0, rule="r", state="resolved", severity="ticket", reason=None
    )
    assert _transition(rule, AlertState(), firing, 1.0) == Transition(
        t=1.0, rule="r", state="firing", severity="ticket", reason="below"
    )


@given(
    seed=st.integers(0, 2**16),
    since=st.one_of(st.none(), st.integers(0, 8 * 86_400)),
    unknown=st.booleans(),
)
def test_the_rows_pass_hat_samples_are_merges_pass_hat_values(
    seed: int, since: int | None, unknown: bool
) -> None:
    """The summary rows read one k's string through pass_hat_samples: the same (t, value,
    low, high) as the pass^k values of merge over that string."""
    rng = random.Random(seed)
    now = 1_764_460_800 + rng.randrange(3600)
    writes = sorted({float(now - rng.randrange(9 * 86_400)) for _ in range(400)} | {float(now)})
    key = label("pass^k", 5)

    def triple() -> history.Estimate3:
        if unknown and rng.random() < 0.2:
            return (None, None, None)
        lo = rng.random() * 0.5
        return (lo + 0.2, lo, lo + 0.4)

    values = {t: {key: triple(), label("pass@k", 5): triple()} for t in writes}
    tiers = [
        [Point(t, values[t], index) for t in _kept(writes, tier)]
        for index, tier in enumerate(TIERS)
    ]
    raw = _slots(tiers, 5)
    start = None if since is None else float(now - since)
    merged = history.merge({5: raw}, since=start, until=float(now))
    want = [(p.t, *p.values[key]) for p in merged]
    assert history.pass_hat_samples(raw, 5, since=start, until=float(now)) == want
    # The last of each span, as the rows' trend keeps them.
    if start is not None:
        last: dict[int, tuple[float, float | None, float | None, float | None]] = {}
        for sample in want:
            last[int((sample[0] - start) // 3600)] = sample
        spans = history.pass_hat_samples(raw, 5, since=start, until=float(now), span=3600.0)
        assert spans == [last[b] for b in sorted(last)]


def test_the_time_mean_weights_each_point_by_how_long_it_held() -> None:
    key = label("pass^k", 5)
    points = [
        Point(t=100.0, values={key: (0.9, 0.8, 0.95)}),
        Point(t=400.0, values={key: (None, None, None)}),  # UNKNOWN: its time is left out
        Point(t=500.0, values={key: (0.6, 0.5, 0.7)}),
        Point(t=600.0, values={label("pass@k", 5): (0.99, 0.9, 1.0)}),  # another key only
    ]
    got = history.time_mean(list(reversed(points)), key, until=700.0)
    assert got is not None
    # 0.9 held 300 s, 0.6 held 100 s; the point without the key holds nothing either.
    assert got.value == pytest.approx((0.9 * 300 + 0.6 * 100) / 400)
    assert got.points == 2
    assert got.seconds == 400.0  # the time with a value: UNKNOWN's 100 s left out
    assert history.time_mean(points, label("pass^k", 3), until=700.0) is None
    assert history.time_mean([], key, until=700.0) is None
    # A single point as new as the span's end spans no time.
    assert history.time_mean([Point(t=700.0, values={key: (0.9, 0.8, 1.0)})], key, 700.0) is None
