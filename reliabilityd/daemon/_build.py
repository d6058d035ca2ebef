"""A series' snapshot from the parts one tick computed: its pace, its rules' views, the record.

The tick (``_recompute``) reads, computes the estimates and ranks the lottery
cases for a whole batch; what is left per series is here: the pace measured
from the previous snapshot, each rule's own view (a rule's interval, the
detector's statistics), and ``snapshot.build``. Raises what they raise; the
tick logs it and marks the series changed.
"""

from __future__ import annotations

import asyncio

from reliabilityd.alerting.notify import parse_time
from reliabilityd.rules import Rule, views
from reliabilityd.stats import snapshot
from reliabilityd.stats.estimate import Estimate
from reliabilityd.stats.lottery import LotteryCase
from reliabilityd.store import Series, SuiteState


async def snapshot_of(
    series: Series,
    *,
    state: SuiteState,
    settings: snapshot.StatsSettings,
    rules: list[Rule],
    previous: snapshot.Snapshot | None,
    estimates: list[Estimate],
    rows: list[LotteryCase],
    now: float,
    slices: int,
    lottery_k: int,
    alarms: dict[str, float | None] | None = None,
) -> snapshot.Snapshot:
    """The series' snapshot; ``slices`` is how many slices a suite as a whole has (0 for a
    slice); ``alarms``, by rule name, each rate rule's last alarm
    (``_rate``). The rules' views are computed in a worker thread."""
    c = state.counters
    suite_pace = views.pace(
        c.trials,
        state.hist.tasks,
        now,
        None
        if previous is None
        else (previous.trials, parse_time(previous.updated_at) or now, previous.pace),
    )
    rule_views = (
        await asyncio.to_thread(
            views.rule_views,
            rules,
            state.hist,
            state.windows,
            window=settings.window,
            settings=settings,
            alarms=alarms,
        )
        if rules
        else []
    )
    return snapshot.build(
        suite=series.suite,
        hist=state.hist,
        trials=c.trials,
        errors=c.errors,
        skips=c.skips,
        duplicates=c.duplicates,
        version=c.version,
        settings=settings,
        estimates=estimates,
        lottery_k=lottery_k,
        lottery_rows=rows,
        now=now,
        last_trial_at=c.last_trial_at,
        pace=suite_pace,
        rules=rule_views,
        slice=series.slice,
        slice_overflow=c.slice_overflow,
        slices=slices,
    )
