"""What the pages show, computed from what Redis holds: pure, no I/O.

The headline k of a suite, the worst alert state, a history series as chart
samples, the time range a page opens on, and the tasks that moved most since
a breach began.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import msgspec

from reliabilityd.daemon.ui._svg import Sample
from reliabilityd.rules import AlertState, Rule
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import Undecodable

DAY = 86400.0
# How far before an alert's time a page opened at the alert starts its charts.
BEFORE_ANCHOR = 3 * 3600.0
# A state the store could not decode ranks under the breaching ones: it may hide one.
STATE_RANK = {"firing": 4, "pending": 3, "undecodable": 2, "resolved": 1, "inactive": 0}


def state_name(state: AlertState | Undecodable) -> str:
    """What a page calls a stored state: its name, or "undecodable"."""
    return "undecodable" if isinstance(state, Undecodable) else state.state


def headline_k(snap: Snapshot | Undecodable | None, rules: Sequence[Rule]) -> int | None:
    """The k a suite is summarised at: its first pass^k rule's k when the snapshot has it,
    else the largest k of the snapshot (None without a readable one)."""
    if not isinstance(snap, Snapshot) or not snap.pass_hat_k:
        return None
    have = {e.k for e in snap.pass_hat_k}
    for rule in rules:
        if rule.metric == "pass^k" and rule.k in have:
            return rule.k
    return max(have)


def below_at(rules: Sequence[Rule], metric: str, k: int | None) -> float | None:
    """The highest ``below`` of the threshold rules on ``metric`` at ``k``: a value under it
    is shown in the firing colour (None when no rule judges that number)."""
    belows = [r.below for r in rules if r.metric == metric and r.k == k]
    return max(belows, default=None)


def worst_state(states: Iterable[AlertState | Undecodable]) -> str:
    """The state that needs a person most: firing, pending, undecodable, resolved, inactive."""
    return max(map(state_name, states), key=STATE_RANK.__getitem__, default="inactive")


def series_key(metric: str, k: int) -> str:
    """The key of a history point's values: ``pass^k@5``, ``pass@k@5``."""
    return f"{metric}@{k}"


Triple = tuple[float | None, float | None, float | None]


def samples(
    points: Iterable[tuple[float, Mapping[str, Triple]]],
    key: str,
    minima: Mapping[float, Mapping[str, float | None]] | None = None,
) -> list[Sample]:
    """The chart samples of one series: each (t, values) that has the key, in time order,
    with the lowest value of its bucket where ``minima`` (t -> key -> value) has one."""
    lows = minima or {}
    out = [
        Sample(t, *values[key], lows.get(t, {}).get(key)) for t, values in points if key in values
    ]
    out.sort(key=lambda s: s.t)
    return out


def time_range(now: float, anchor: float | None, since: float | None) -> tuple[float, float]:
    """(start, end) of a page's charts: the last day, reaching back to before the anchor."""
    start = now - DAY
    if since is not None:
        start = since
    if anchor is not None:
        start = min(start, anchor - BEFORE_ANCHOR)
    return start, now


# The shortest span a chart's axis covers.
MIN_SPAN = 600.0


def drawn_from(start: float, end: float, times: Sequence[float], anchor: float | None) -> float:
    """Where a chart's axis begins: at ``start``, or later where the history begins later,
    so a young suite's points spread over the chart; the anchor always stays in view, and
    the axis covers at least ``MIN_SPAN`` seconds."""
    first = min([*times, *([] if anchor is None else [anchor])], default=start)
    return max(start, min(first, end - MIN_SPAN))


class Mover(msgspec.Struct, frozen=True):
    """One task's pass rate before the breach and after it began, and the change."""

    task: str
    before_n: int
    before_c: int
    after_n: int
    after_c: int

    @property
    def before(self) -> float:
        return self.before_c / self.before_n

    @property
    def after(self) -> float:
        return self.after_c / self.after_n

    @property
    def change(self) -> float:
        return self.after - self.before


def movers(
    baseline: Mapping[str, tuple[int, int]],
    current: Mapping[str, tuple[int, int]],
    *,
    windowed: bool,
    limit: int = 10,
) -> list[Mover]:
    """The tasks whose pass rate changed most since the baseline, largest drop first.

    Without a window a task's counts only grow, so "after" is the trials
    counted since the baseline (current minus baseline); with a window the
    counts are the last W outcomes, and "after" is the current window. A task
    with no trial after the baseline, or none before it, has no change to
    show and is left out. Ties go to the task name.
    """
    rows: list[Mover] = []
    for task, (n, c) in current.items():
        before = baseline.get(task)
        if before is None or before[0] < 1:
            continue
        n0, c0 = before
        after_n, after_c = (n, c) if windowed else (n - n0, c - c0)
        if after_n < 1:
            continue
        rows.append(Mover(task, n0, c0, after_n, after_c))
    rows.sort(key=lambda m: (m.change, m.task))
    return [m for m in rows if m.change != 0][:limit]
