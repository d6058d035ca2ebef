"""The rate trigger's statistic (``reliabilityd.stats.ratecusum``): the study's design
tick for tick, fed lifetime totals as the store keeps them, through a store round trip,
with tasks that come, go and come back."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from reliabilityd.stats.ratecusum import START_TRIALS, Knobs, Tracker, decode, encode, threshold
from reliabilityd.store._triggers import all_counts_of, counts_of, seq_of
from studies.commonpoint import Tracker as StudyTracker
from studies.ratestat import Design, weights

TICK = 5.0


def _suite(
    rng: np.random.Generator, tasks: int, ticks: int, change: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Reference counts, and per tick and task the passes and fails of a suite whose
    first three tasks start failing half their trials at tick ``change``."""
    p = rng.uniform(0.8, 0.99, size=tasks)
    n0 = rng.integers(20, 200, size=tasks)
    c0 = rng.binomial(n0, p)
    m = rng.poisson(0.1, size=(ticks, tasks))
    rate = np.tile(p, (ticks, 1))
    rate[change:, :3] *= 0.5
    passes = rng.binomial(m, rate)
    return n0.astype(np.int64), c0.astype(np.int64), passes, m - passes


def _knobs(h: float, grid_ticks: int, window_ticks: int) -> Knobs:
    """Knobs whose threshold is ``h`` and which never refresh their references."""
    grid = grid_ticks * TICK
    return Knobs(
        k=5,
        below=0.75,
        grid=grid,
        window=window_ticks * TICK,
        budget=math.exp(h) * grid / 2.0,
        refresh=math.inf,
    )


@pytest.mark.parametrize("grid", [1, 12])
def test_the_study_tracker_tick_for_tick(rng: np.random.Generator, grid: int) -> None:
    tasks, ticks, window = 12, 3000, 720
    n0, c0, passes, fails = _suite(rng, tasks, ticks, change=1500)
    h = 6.0
    knobs = _knobs(h, grid, window)
    assert threshold(knobs) == pytest.approx(h)
    wt = weights(n0, c0, Design(prior=knobs.prior, share=knobs.share))
    study = StudyTracker(wt, h_g=h, h_l=h, grid=grid, window=window)
    names = [f"t{i}" for i in range(tasks)]
    # Made a grid before tick 0, so that tick 0 makes the first change point as the
    # study's first tick does (the state's own first one holds the same zeros).
    ours = Tracker(knobs, names, n0, c0, now=-grid * TICK, started=-1e9)
    n, c = n0.copy(), c0.copy()
    theirs, mine = [], []
    for t in range(ticks):
        n += passes[t] + fails[t]
        c += passes[t]
        if study.tick(t, passes[t], fails[t]):
            theirs.append(t)
        if ours.tick(names, n, c, now=t * TICK):
            mine.append(t)
    assert mine == theirs
    assert any(t >= 1500 for t in theirs)  # the regression is found
    assert ours.s == pytest.approx(study.s)
    assert ours.alarms == len(mine)


def test_a_round_trip_through_the_store_changes_nothing(rng: np.random.Generator) -> None:
    tasks, ticks = 8, 2000
    n0, c0, passes, fails = _suite(rng, tasks, ticks, change=800)
    knobs = Knobs(k=5, below=0.75, grid=60.0, refresh=600.0, budget=86400.0)
    names = [f"t{i}" for i in range(tasks)]
    kept = Tracker(knobs, names, n0, c0, now=0.0, started=-1e9)
    stored = Tracker(knobs, names, n0, c0, now=0.0, started=-1e9)
    n, c = n0.copy(), c0.copy()
    alarms = 0
    for t in range(ticks):
        n += passes[t] + fails[t]
        c += passes[t]
        a = kept.tick(names, n, c, now=t * TICK, version=t)
        stored = decode(encode(stored))
        b = stored.tick(names, n, c, now=t * TICK, version=t)
        assert a == b
        alarms += a
    assert alarms >= 1
    assert encode(kept) == encode(stored)
    assert stored.version == ticks - 1


def test_tasks_that_come_go_and_come_back() -> None:
    knobs = Knobs(k=1, below=0.5)
    t = Tracker(knobs, ["a", "b"], np.array([10, 10]), np.array([9, 9]), now=0.0)
    # "c" appears with 50 trials: its first sight is its baseline, nothing judged.
    passes, fails = t.align(["a", "b", "c"], np.array([12, 10, 50]), np.array([10, 9, 0]))
    assert passes.tolist() == [1, 0, 0]
    assert fails.tolist() == [1, 0, 0]
    # "b" leaves, and "a" is forgotten and comes back with fewer trials.
    passes, fails = t.align(["c", "a"], np.array([53, 2]), np.array([1, 2]))
    assert passes.tolist() == [1, 0]
    assert fails.tolist() == [2, 0]
    assert t.tasks == ["c", "a"]
    assert t.cum.shape == (2,)
    assert t.starts.shape[1] == 2


def test_an_undecodable_state_is_a_value_error() -> None:
    t = Tracker(Knobs(k=1, below=0.5), ["a"], np.array([1]), np.array([1]), now=0.0)
    raw = bytearray(encode(t))
    with pytest.raises(ValueError, match=r"truncated|Expected"):
        decode(bytes(raw[:-3]))
    with pytest.raises(ValueError, match=r"Expected|length"):
        decode(b"\x93\x01\x02\x03")


@given(
    st.dictionaries(
        st.binary(min_size=1, max_size=6),
        st.one_of(
            st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)).map(
                lambda nc: f"{max(nc)}:{min(nc)}".encode()
            ),
            st.binary(max_size=12),
            st.text("0123456789:-", max_size=30).map(str.encode),
        ),
        max_size=20,
    )
)
@example({b"a": b"5", b"b": b"3:2:1"})  # fields that pair up only across tasks
@example({b"a": b"18446744073709551617:1"})  # past int64
def test_the_counts_read_at_once_are_those_read_one_by_one(stored: dict[bytes, bytes]) -> None:
    """The fast read of a tasks hash (one split) gives what the per-task parse gives, or
    hands over to it."""
    fast = all_counts_of(stored)
    if fast is None:
        return
    slow = [(t, got) for t, v in stored.items() if (got := counts_of(v)) is not None]
    assert fast[0] == [t.decode() for t, _ in slow]
    assert list(zip(fast[1], fast[2], strict=True)) == [got for _, got in slow]


def test_a_new_state_raises_no_alarm_while_its_references_warm_up() -> None:
    """Started on one trial a task, a task that fails half its trials would alarm at once
    against references from that trial; in the warm-up the references follow every tick
    and nothing alarms, and after it a real drop does."""
    knobs = Knobs(k=1, below=0.3, grid=60.0, warmup=1800.0)
    t = Tracker(knobs, ["a", "b"], np.array([1, 1]), np.array([1, 1]), now=0.0)
    assert not t.warm(0.0)
    n, c = np.array([1, 1]), np.array([1, 1])
    alarms = []
    for i in range(1, 720):  # a trial a task every 5 s for an hour
        now = i * 5.0
        n = n + 1
        c = c + np.array([i % 2, 1])  # "a" passes half its trials, "b" all
        if now >= 3000.0:
            c[0] -= i % 2  # from 50 minutes on, "a" fails every trial
        if t.tick(["a", "b"], n, c, now=now):
            alarms.append(now)
    assert alarms
    assert min(alarms) >= 3000.0  # none in the warm-up, nor at "a"'s steady half
    assert t.warm(1800.0)
    assert t.alarms == len(alarms)
    assert t.p0[0] < 0.65  # the warm-up's references followed "a" down to its half


def test_a_new_state_starts_from_a_window_of_each_tasks_counts() -> None:
    """A suite's lifetime counts would outweigh its present for weeks: a new state takes
    at most START_TRIALS of them, at their rate; a simulation's suite with history
    (``started`` given) takes them whole."""
    knobs = Knobs(k=1, below=0.5)
    n, c = np.array([20_000, 10]), np.array([19_400, 9])
    fresh = Tracker(knobs, ["a", "b"], n, c, now=0.0)
    assert fresh.ref_n.tolist() == pytest.approx([START_TRIALS, 10.0])
    assert fresh.ref_c.tolist() == pytest.approx([START_TRIALS * 0.97, 9.0])
    assert fresh.seen_n.tolist() == [20_000, 10]  # the baseline is the counts whole
    kept = Tracker(knobs, ["a", "b"], n, c, now=0.0, started=-86400.0)
    assert kept.ref_n.tolist() == [20_000.0, 10.0]


@pytest.mark.parametrize(
    ("raw", "seq"),
    [
        (None, 0),
        (b"7", 7),
        (b"-1", -1),
        (b"x", -1),
        (b"1.5", -1),
        (b"nan", -1),
        (b"1e1", -1),
        (b" 5", -1),
        (b"1234567890123456", -1),
        (b"123456789012345", 123456789012345),
    ],
)
def test_a_seq_reads_as_trigger_cas_reads_it(raw: bytes | None, seq: int) -> None:
    assert seq_of(raw) == seq
