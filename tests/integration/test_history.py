"""History in Redis: points written with the snapshot, tiers, budget, transitions, UNKNOWN."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from redis.crc import key_slot

from reliabilityd.rules import AlertState
from reliabilityd.stats import history
from reliabilityd.stats.history import SCALE, TIERS, Point, Transition, label
from reliabilityd.store import Series, Store
from reliabilityd.store._snapshots import SnapshotWrite

DAY = 86_400
# The stated budget: a series' history at the default k = [1, 5], its
# transition list full, in MEMORY USAGE bytes.
BUDGET = 64 * 1024
# MEMORY USAGE of a history string holding one point, at a suite name of one letter.
ONE_POINT = 200
# MEMORY USAGE of a history string whose every tier is full (jemalloc's 28 KiB class).
FULL = 28_672 + 100
T0 = 1_764_460_800  # 2025-11-30T00:00:00Z


def values(t: float, ks: tuple[int, ...] = (1, 5)) -> dict[str, history.Estimate3]:
    """Synthetic estimates that differ from one write to the next (every 7th pass^k UNKNOWN)."""
    x = (int(t) // 60 % 997) / 997
    out: dict[str, history.Estimate3] = {}
    for k in ks:
        out[label("pass@k", k)] = (x, x * 0.9, min(1.0, x * 1.1 + 0.01))
        step = int(t) // 60
        out[label("pass^k", k)] = (
            (None, None, None) if step % 7 == 0 else (x / k, x / k * 0.8, min(1.0, x / k + 0.05))
        )
    return out


def close(got: history.Estimate3, want: history.Estimate3) -> bool:
    """Within the stored resolution; the stored interval contains the written one."""
    for have, exact, side in zip(got, want, ("p", "lo", "hi"), strict=True):
        if exact is None or have is None:
            if exact is not have:
                return False
            continue
        if abs(have - exact) > 1 / SCALE:
            return False
        if (side == "lo" and have > exact) or (side == "hi" and have < exact):
            return False
    return True


def write(version: int, t: float, ks: tuple[int, ...] = (1, 5)) -> SnapshotWrite:
    return SnapshotWrite("s", version, {"json": f"v{version}"}, {}, point=Point(t, values(t, ks)))


async def test_a_point_is_written_with_the_ci_part_once_per_version(store: Store) -> None:
    t = float(T0)
    await store.snapshots.write_snapshot(
        "s", 3, {"json": "v3"}, {"tasks": 1}, point=Point(t, values(t))
    )
    # Another replica writes the same version a minute later: the snapshot, not a second point.
    assert await store.snapshots.write_snapshot(
        "s", 3, {"json": "v3"}, {}, point=Point(t + 60, values(t + 60))
    ) == (True, False)
    # An older version writes neither.
    assert await store.snapshots.write_snapshot(
        "s", 2, {"json": "v2"}, {}, point=Point(t + 120, values(t + 120))
    ) == (False, False)
    # A live-only write (no CI part) writes no point.
    await store.snapshots.write_snapshot("s", 4, {}, {"tasks": 2}, point=Point(t + 150, values(t)))
    await store.snapshots.write_snapshot(
        "s", 4, {"json": "v4"}, {}, point=Point(t + 180, values(t + 180))
    )
    got = await store.history.read("s")
    assert [p.t for p in got.points] == [t, t + 180]
    for p in got.points:
        assert p.tier == 0
        assert set(p.values) == set(values(p.t))
        assert all(close(p.values[name], v) for name, v in values(p.t).items())
    assert (got.suite, got.slice, got.transitions) == ("s", None, [])
    assert await store.history.ks("s") == [1, 5]


async def test_unknown_round_trips_as_unknown(store: Store) -> None:
    t = float((T0 // 420 + 1) * 420)  # a minute whose pass^k is UNKNOWN in values()
    point = Point(t, {**values(t), label("pass@k", 5): (None, 0.25, None)})
    await store.snapshots.write_snapshot("s", 1, {"json": "v1"}, {}, point=point)
    (back,) = (await store.history.read("s")).points
    assert back.values[label("pass^k", 5)] == (None, None, None)
    assert back.values[label("pass^k", 1)] == (None, None, None)
    p, lo, hi = back.values[label("pass@k", 5)]
    assert p is None
    assert hi is None
    assert lo is not None
    assert lo <= 0.25 < lo + 1 / SCALE


async def test_the_last_snapshot_of_a_bucket_stays_beside_its_minimum(store: Store) -> None:
    base = float(T0)  # T0 starts a bucket of every tier
    dip = Point(base + 4, {label("pass@k", 1): (0.05, 0.01, 0.1)})
    await store.snapshots.write_snapshots(
        [
            write(1, base + 1, (1,)),
            SnapshotWrite("s", 2, {"json": "v2"}, {}, point=dip),
            write(3, base + 8, (1,)),
            # Later versions with older times: the bucket's snapshot stays, its minimum not.
            SnapshotWrite("s", 4, {"json": "v4"}, {}, point=Point(base + 6, dip.values)),
        ]
    )
    (only,) = (await store.history.read("s")).points
    assert only.t == base + 8
    assert close(only.values[label("pass@k", 1)], values(base + 8)[label("pass@k", 1)])
    assert only.minima[label("pass@k", 1)] == pytest.approx(0.05, abs=1 / SCALE)
    # The dip stays in every tier's bucket after newer buckets open.
    await store.snapshots.write_snapshots([write(5, base + 15, (1,))])
    await store.snapshots.write_snapshots([write(6, base + 3600 + 20, (1,))])
    points = (await store.history.read("s")).points
    # The minute tier's first bucket: its last snapshot (base + 15) and the dip within it.
    assert [(p.t, p.tier) for p in points] == [(base + 15, 1), (base + 3620, 0)]
    assert points[0].minima[label("pass@k", 1)] == pytest.approx(0.05, abs=1 / SCALE)
    # A point older than a tier's newest bucket is not recorded.
    await store.snapshots.write_snapshots([write(7, base + 30, (1,))])
    assert [p.t for p in (await store.history.read("s")).points] == [base + 15, base + 3620]


async def test_a_one_point_history_costs_a_few_hundred_bytes(store: Store) -> None:
    await store.snapshots.write_snapshots([write(1, float(T0))])
    snapshot = store.keys.snapshot("s")
    names = [store.keys.history(snapshot, k) for k in (1, 5)]
    for name in names:
        # The header and one record per tier.
        assert await store.client.strlen(name) == history.HEADER + 4 * history.RECORD_SIZE
        used = await store.client.memory_usage(name, samples=0)
        assert used is not None
        assert used <= ONE_POINT
    memory = await store.history.memory("s")
    assert sum(memory.values()) <= 2 * ONE_POINT


async def test_history_keys_live_in_the_suite_slot_and_expire(store: Store) -> None:
    await store.snapshots.write_snapshots([write(1, float(T0))])
    snapshot = store.keys.snapshot("s")
    names = [store.keys.history(snapshot, k) for k in (1, 5)]
    slot = key_slot(snapshot.encode())
    assert all(key_slot(name.encode()) == slot for name in names)
    assert key_slot(store.keys.transitions(snapshot).encode()) == slot
    for name in names:
        ttl = await store.client.ttl(name)
        assert history.KEY_TTL - 60 <= ttl <= history.KEY_TTL
    assert store.keys.snapshot("s", "model=x").endswith(":{s}:slice:model=x:snapshot")


def _model(writes: list[tuple[float, float]]) -> dict[int, list[tuple[int, float, int]]]:
    """What each tier should keep of (t, pass@k) writes in version order: per tier the
    (time, value code, minimum code) of the last snapshot of each of its newest buckets."""
    out: dict[int, list[tuple[int, float, int]]] = {}
    for index, tier in enumerate(TIERS):
        kept: list[tuple[int, float, int]] = []
        for t, x in writes:
            code = round(x * SCALE)
            if kept and int(t) // tier.resolution == kept[-1][0] // tier.resolution:
                held_t, held_x, low = kept[-1]
                kept[-1] = (
                    (int(t), x, min(low, code)) if t >= held_t else (held_t, held_x, min(low, code))
                )
            elif not kept or int(t) // tier.resolution > kept[-1][0] // tier.resolution:
                kept.append((int(t), x, code))
        out[index] = kept[-tier.capacity :]
    return out


@pytest.mark.seeded
async def test_the_write_script_keeps_each_buckets_last_snapshot_and_minimum(
    store: Store, rng: np.random.Generator
) -> None:
    """Writes at random gaps (seconds to days, sometimes a little back in time) against a
    model of the tiers, read back tier by tier."""
    t = float(T0)
    writes: list[tuple[float, float]] = []
    batch: list[SnapshotWrite] = []
    for version in range(1, 3001):
        gap = float(rng.choice([1, 3, 5, 7, 12, 45, 400, 5000, 90_000]))
        t = t + gap if rng.random() > 0.05 else t - 2
        x = float(rng.integers(0, 1000)) / 1000
        writes.append((t, x))
        at: dict[str, history.Estimate3] = {
            label("pass@k", 1): (x, x, x),
            label("pass^k", 1): (x, x, x),
        }
        batch.append(SnapshotWrite("s", version, {"json": "v"}, {}, point=Point(t, at)))
        if len(batch) == 300:
            await store.snapshots.write_snapshots(batch)
            batch = []
    raw: Any = await store.client.get(store.keys.history(store.keys.snapshot("s"), 1))
    assert raw is not None
    tiers = history.decode_points(bytes(raw), 1)
    for index, want in _model(writes).items():
        got = [
            (int(p.t), p.values[label("pass@k", 1)][0], p.minima[label("pass@k", 1)])
            for p in tiers[index]
        ]
        assert [g[0] for g in got] == [w[0] for w in want], index
        for (_, have, low), (_, wx, wlow) in zip(got, want, strict=True):
            assert have == pytest.approx(wx, abs=1 / SCALE)
            assert low == pytest.approx(wlow / SCALE, abs=1e-12)
    assert len(raw) <= history.SERIES_BYTES


async def test_a_new_k_starts_its_own_history_at_the_version_already_stored(store: Store) -> None:
    t = float(T0)
    await store.snapshots.write_snapshots([write(5, t, (1,))])
    # A config adds k = 5: the same data version, recomputed, gets a point at k = 5 only.
    await store.snapshots.write_snapshots([write(5, t + 60, (1, 5))])
    points = (await store.history.read("s")).points
    assert [(p.t, sorted(p.values)) for p in points] == [
        (t, [label("pass@k", 1), label("pass^k", 1)]),
        (t + 60, [label("pass@k", 5), label("pass^k", 5)]),
    ]


async def test_a_transition_is_recorded_with_the_state_it_changes(store: Store) -> None:
    firing = AlertState(state="firing", started_at=1.0, reason="below", snapshot_version=2)
    mark = Transition(t=T0 + 0.5, rule="r", state="firing", severity="page", reason="below")
    won = await store.alerts.alert_cas(
        "s", "r", expected_seq=0, new=firing, notification=None, sinks=[], transition=mark
    )
    assert won.won
    # A refused compare-and-set (another replica decided first) records nothing.
    lost = await store.alerts.alert_cas(
        "s", "r", expected_seq=0, new=firing, notification=None, sinks=[], transition=mark
    )
    assert not lost.won
    got = await store.history.read("s")
    assert got.transitions == [mark]
    assert (await store.history.read("s", since=T0 + 1)).transitions == []


async def test_transitions_are_capped_at_the_newest(store: Store) -> None:
    for seq in range(history.TRANSITIONS_KEPT + 20):
        state = AlertState(state="firing" if seq % 2 == 0 else "resolved", snapshot_version=seq)
        mark = Transition(t=float(T0 + seq), rule="r", state=state.state, severity="page")
        cas = await store.alerts.alert_cas(
            "s", "r", expected_seq=seq, new=state, notification=None, sinks=[], transition=mark
        )
        assert cas.won
    kept = (await store.history.read("s")).transitions
    assert len(kept) == history.TRANSITIONS_KEPT
    assert kept[0].t == T0 + 20
    assert kept[-1].t == T0 + history.TRANSITIONS_KEPT + 19


def _clock(days: int, checkpoints: list[int]) -> list[tuple[float, bool]]:
    """(time, is a checkpoint) of the writes of ``days`` days from T0.

    One write a day throughout; every hour in the 7 days before each checkpoint,
    every minute in its last 6 hours and every 10 s in its last hour, so at every
    checkpoint each tier has a write in every bucket it can hold. More frequent
    writes would only replace points within the same buckets (the test above).
    """
    times: set[int] = {T0 + d * DAY + 3_601 for d in range(days)}
    for day in checkpoints:
        end = T0 + day * DAY - 17  # 17 s before midnight of that day
        times.update(end - j * 3600 for j in range(7 * 24))
        times.update(end - j * 60 for j in range(360))
        times.update(end - j * 10 for j in range(360))
    ends = {T0 + day * DAY - 17 for day in checkpoints}
    return [(float(t), t in ends) for t in sorted(times) if t >= T0 + 3_601]


async def test_400_days_stay_within_the_budget_and_the_tiers_hold_their_spans(
    store: Store,
) -> None:
    """The clock driven through 400 simulated days by calling the store's write directly."""
    checkpoints = [1, 8, 60, 200, 400]
    rule = "pass5-below-0.80"
    seq = 0
    version = 0
    memory_seen: list[int] = []
    batch: list[SnapshotWrite] = []
    for t, checkpoint in _clock(400, checkpoints):
        version += 1
        batch.append(write(version, t))
        if len(batch) < 500 and not checkpoint:
            continue
        await store.snapshots.write_snapshots(batch)
        batch = []
        if not checkpoint:
            continue
        # Alert transitions keep coming: 40 per checkpoint, past the list's cap by the end.
        for _ in range(40):
            state = AlertState(state="firing" if seq % 2 == 0 else "resolved", snapshot_version=seq)
            mark = Transition(t=t - 40 + seq % 40, rule=rule, state=state.state, severity="page")
            assert (
                await store.alerts.alert_cas(
                    "s",
                    rule,
                    expected_seq=seq,
                    new=state,
                    notification=None,
                    sinks=[],
                    transition=mark,
                )
            ).won
            seq += 1
        used = await store.history.memory("s")
        memory_seen.append(sum(used.values()))
        assert sum(used.values()) <= BUDGET, used
        got = await store.history.read("s")
        _assert_tiers(got.points, newest=t, age=t - T0)
        assert len(got.transitions) == min(seq, history.TRANSITIONS_KEPT)
    # The estimate strings grow with their points, never past one full string each.
    strings = [v for name, v in (await store.history.memory("s")).items() if ":h:k" in name]
    assert len(strings) == 2
    assert all(v <= FULL for v in strings)
    assert memory_seen == sorted(memory_seen)
    assert memory_seen[0] < memory_seen[-1]


def _assert_tiers(points: list[Point], *, newest: float, age: float) -> None:
    times = [p.t for p in points]
    assert times == sorted(set(times))
    assert times[-1] == newest
    for p in points:
        assert all(close(p.values[name], v) for name, v in values(p.t).items()), p
    by_tier = {i: [p.t for p in points if p.tier == i] for i in range(len(TIERS))}
    fine, minutes, hours, days = by_tier[0], by_tier[1], by_tier[2], by_tier[3]
    # Per 10 s for an hour.
    assert len(fine) == TIERS[0].capacity
    assert all(b - a == 10 for a, b in itertools.pairwise(fine))
    # Per minute for 6 hours, where the 10 s no longer reach.
    assert minutes[-1] < fine[0]
    assert all(b - a == 60 for a, b in itertools.pairwise(minutes))
    assert newest - minutes[0] > TIERS[1].span - 2 * TIERS[1].resolution
    # Per hour for 7 days, where the minutes no longer reach.
    assert hours
    assert hours[-1] < minutes[0]
    assert all(b - a == 3600 for a, b in itertools.pairwise(hours))
    assert newest - hours[0] > min(age - 3_601 - 3600, TIERS[2].span - 2 * TIERS[2].resolution)
    # Per day for 420 days before that, back to the first day.
    if age > TIERS[2].span:
        assert days
        assert days[-1] < hours[0]
        numbers = [int(t) // DAY for t in days]
        first = max(T0 // DAY, int(newest) // DAY - TIERS[3].capacity + 1)
        assert numbers == list(range(first, first + len(numbers)))
    else:
        assert not days or days[-1] < hours[0]


@pytest.mark.parametrize("slice_id", ["model=x"])
async def test_a_series_without_history_reads_empty(store: Store, slice_id: str) -> None:
    empty = await store.history.read("nothing")
    assert (empty.points, empty.transitions) == ([], [])
    sliced = await store.history.read("nothing", slice=slice_id)
    assert (sliced.slice, sliced.points) == (slice_id, [])


async def test_reset_deletes_the_history(store: Store) -> None:
    await store.snapshots.write_snapshots([write(1, float(T0))])
    mark = Transition(t=float(T0), rule="r", state="firing")
    await store.alerts.alert_cas(
        "s",
        "r",
        expected_seq=0,
        new=AlertState(state="firing", snapshot_version=1),
        notification=None,
        sinks=[],
        transition=mark,
    )
    before = await store.history.read("s")
    assert before.points
    assert before.transitions
    await store.admin.reset_suite("s")
    after = await store.history.read("s")
    assert (after.points, after.transitions) == ([], [])
    assert await store.history.memory("s") == {}


async def test_many_series_read_at_once_are_each_as_read_alone(store: Store) -> None:
    """The index's one read of every suite's day: each series what its own read gives."""
    writes = [
        SnapshotWrite(suite, v, {"json": f"v{v}"}, {}, point=Point(t, values(t, ks)))
        for suite, ks in (("a", (1, 5)), ("b", (1,)))
        for v, t in enumerate((T0, T0 + 120.0, T0 + 240.0), start=1)
    ]
    await store.snapshots.write_snapshots(writes)
    mark = Transition(t=T0 + 1.0, rule="r", state="firing", severity="page", reason="below")
    firing = AlertState(state="firing", started_at=1.0, reason="below", snapshot_version=3)
    await store.alerts.alert_cas(
        "b", "r", expected_seq=0, new=firing, notification=None, sinks=[], transition=mark
    )
    series = [Series("a"), Series("none"), Series("b"), Series("a", "model=x")]
    for since in (None, T0 + 60.0):
        alone = [await store.history.read(s.suite, slice=s.slice, since=since) for s in series]
        assert await store.history.read_many(series, since=since) == alone
    assert [len(h.points) for h in alone] == [2, 0, 2, 0]
    assert alone[2].transitions == []  # before since
    assert (await store.history.read_many(series))[2].transitions == [mark]
    assert await store.history.read_many([]) == []
