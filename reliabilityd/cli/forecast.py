"""``reliabilityd forecast``: what each alert rule would cost on-call at a suite's current data.

Computed on demand, never on the daemon's tick: a simulation (``rules.forecast``)
of the suite at its window's estimate, no task certain, at the pace its trials
arrive, with an upper bound. The output says what it assumes.
"""

from __future__ import annotations

import argparse
import fnmatch
from collections.abc import Callable

from reliabilityd.config import Config
from reliabilityd.rules import Rule
from reliabilityd.rules.forecast import ENOUGH, STAYS_ON, expected_false_pages
from reliabilityd.stats.histogram import Histogram
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import Store, Undecodable

__all__ = ["add_parser", "forecast"]

# The most simulated (the figure is per day; the simulation stops earlier once it has
# counted rules.forecast.ENOUGH pages), and at most this many rounds of one trial per
# task: the cost is tasks x rounds.
HOURS = 48.0
MAX_ROUNDS = 3000


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "forecast",
        help="expected false pages per day of each alert rule at the suites' current data",
    )
    p.add_argument("suite", nargs="?", help="one suite (default: every suite a rule watches)")
    p.add_argument(
        "--pace",
        type=float,
        help="trials per task per day to simulate (default: the suite's measured pace)",
    )
    p.add_argument(
        "--hours",
        type=float,
        default=HOURS,
        help=f"the most simulated hours (default {HOURS:g}; it stops once it has counted "
        f"{ENOUGH} pages)",
    )
    return p


async def forecast(
    store: Store,
    config: Config,
    suite: str | None,
    *,
    pace: float | None = None,
    hours: float = HOURS,
    out: Callable[[str], None] = print,
) -> int:
    """Print each (suite, rule)'s expected false pages per day; 2 when no rule is configured."""
    rules = config.rules()
    if not rules:
        out("no alert rule is configured: give the daemon's config with -c")
        return 2  # a configuration error (EXIT_USAGE)
    suites = [suite] if suite is not None else await store.reads.suites()
    printed = 0
    for name in suites:
        watching = [r for r in rules if fnmatch.fnmatchcase(name, r.suite)]
        if not watching:
            if suite is not None:
                out(f"{name}: no alert rule watches this suite")
            continue
        snap = await store.snapshots.document(name)
        if isinstance(snap, Undecodable) and pace is None:
            # The measured pace is in the snapshot: without it, only --pace simulates.
            out(f"{name}: stored snapshot undecodable ({snap.error}): no measured pace")
        rate = pace if pace is not None else (snap.pace if isinstance(snap, Snapshot) else None)
        window, _ = config.suite_settings(name)
        state = await store.reads.read_state(name)
        for rule in watching:
            out(_line(name, rule, state.hist, window=window, pace=rate, hours=hours, config=config))
            printed += 1
    if printed:
        out(
            "(assumes: the suite stays at its window's estimate, each task at its counts with "
            "half a pass and half a fail added, all moved by one log-odds shift to that level, so "
            "a task that has not failed yet still may; trials arrive at the pace shown; the rule "
            "is judged every ci_interval with its own interval and trigger; 'at most' is the "
            "Poisson upper limit of the pages simulated; a forecast, not a measurement)"
        )
    return 0 if printed else 1


def _line(
    suite: str,
    rule: Rule,
    hist: Histogram,
    *,
    window: int,
    pace: float | None,
    hours: float,
    config: Config,
) -> str:
    head = f"{suite}  {rule.name}: "
    if hist.tasks == 0:
        return head + "no tasks yet"
    if window < rule.k:
        return head + (
            f"cannot simulate: the suite's window ({window}) is shorter than k={rule.k} "
            "(the simulation replays the window)"
        )
    if pace is None or pace <= 0:
        return head + (
            "no pace measured yet (two snapshots with new trials between them); pass --pace"
        )
    simulated = min(hours, MAX_ROUNDS / pace * 24.0)
    pages = expected_false_pages(
        rule,
        hist,
        window=window,
        rounds_per_day=pace,
        hours=simulated,
        seed=config.stats.seed,
        n_boot=config.stats.n_boot,
        interval=config.suite_interval(suite),
        tick=config.stats.ci_interval,
    )
    if pages.firing_share >= STAYS_ON:
        # One page that never resolves: a rate of pages says nothing, the time firing does.
        return head + (
            f"firing {pages.firing_share:.0%} of the simulated time at {pace:.3g} "
            f"trials/task/day ({hist.tasks} tasks, {pages.days * 24:.2g} h simulated): an alert "
            "that stays on, not a rate of pages"
        )
    return head + (
        f"{_rate(pages.per_day)} expected false pages/day, at most {_rate(pages.upper)} "
        f"({pages.confidence:.0%}), at {pace:.3g} trials/task/day "
        f"({hist.tasks} tasks, {pages.days * 24:.2g} h simulated"
        + (f", firing {pages.firing_share:.0%} of it" if pages.firing_share >= 0.25 else "")
        + ")"
    )


def _rate(per_day: float) -> str:
    return f"{per_day:.2g}" if per_day < 100 else f"{per_day:,.0f}"
