"""``reliabilityd forecast``: what each alert rule would cost on-call at a suite's current data.

Computed on demand, never on the daemon's tick: a simulation (``rules.forecast``)
of the suite at its level (the mean of its history over the last ``--level-hours``,
else its window's estimate), its tasks' rates drawn from what their counts allow,
at the pace its trials arrive, with an upper bound. The output says what it
assumes.
"""

from __future__ import annotations

import argparse
import fnmatch
import math
import time
from collections.abc import Callable

from reliabilityd.config import Config
from reliabilityd.rules import Rule
from reliabilityd.rules.forecast import (
    DRAW_HOURS,
    ENOUGH,
    MIN_DRAWS,
    RATE_WINDOW,
    STAYS_ON,
    expected_false_pages,
    window_level,
)
from reliabilityd.stats.histogram import Histogram
from reliabilityd.stats.history import Level, label, time_mean
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import Store, Undecodable

__all__ = ["add_parser", "forecast"]

# The most simulated (the figure is per day; the simulation stops earlier once it has
# counted rules.forecast.ENOUGH pages), and at most this many rounds of one trial per
# task: the cost is tasks x rounds.
HOURS = 48.0
MAX_ROUNDS = 3000
# The suite's level is its history's mean over this many hours: a day of hourly points
# averages out one window's noise, and a change older than that has left it.
LEVEL_HOURS = 24.0


def _hours(text: str) -> float:
    """A finite number of hours, 0 or more (argparse's ``type``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of hours: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"hours must be finite and at least 0, got {text!r}")
    return value


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
        f"{ENOUGH} pages over at least {MIN_DRAWS} draws of {DRAW_HOURS:g} h)",
    )
    p.add_argument(
        "--level-hours",
        type=_hours,
        default=LEVEL_HOURS,
        help="simulate the suite at the mean of its history over this many hours "
        f"(default {LEVEL_HOURS:g}; 0: at its window's estimate alone)",
    )
    return p


async def forecast(
    store: Store,
    config: Config,
    suite: str | None,
    *,
    pace: float | None = None,
    hours: float = HOURS,
    level_hours: float = LEVEL_HOURS,
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
        now = time.time()
        past = (
            await store.history.read(name, since=now - level_hours * 3600.0)
            if level_hours > 0
            else None
        )
        for rule in watching:
            level = (
                time_mean(past.points, label(rule.metric, rule.k), now)
                if past is not None
                else None
            )
            out(
                _line(
                    name,
                    rule,
                    state.hist,
                    window=window,
                    pace=rate,
                    hours=hours,
                    config=config,
                    level=level,
                    asked=level_hours > 0,
                )
            )
            printed += 1
    if printed:
        out(
            "(assumes: the suite stays at the level shown; each task's rate is drawn, afresh "
            f"every {DRAW_HOURS:g} simulated hours, from what its window's counts allow under a "
            "Beta prior fitted to every task's counts, so a task that has not failed yet still "
            "may, and all are moved by one log-odds shift to that level; trials arrive at the "
            "pace shown; the rule is judged every ci_interval with its own interval and "
            "trigger, a rate rule's references from a day of counts at each draw's rates; "
            "'at most' is the Poisson upper limit of the pages simulated; a forecast, "
            "not a measurement)"
        )
    return 0 if printed else 1


def _where(rule: Rule, hist: Histogram, level: Level | None, *, asked: bool) -> str:
    """Which level is simulated and where it comes from (``asked``: from history)."""
    window = window_level(rule, hist)
    if level is None:
        why = f"; no history of {label(rule.metric, rule.k)} in reach" if asked else ""
        return f"at {rule.metric} {window:.3f} (the window's estimate{why})"
    return (
        f"at {rule.metric} {level.value:.3f} (the mean of {level.seconds / 3600:.3g} h of "
        f"history; the window now: {window:.3f})"
    )


def _line(
    suite: str,
    rule: Rule,
    hist: Histogram,
    *,
    window: int,
    pace: float | None,
    hours: float,
    config: Config,
    level: Level | None = None,
    asked: bool = False,
) -> str:
    head = f"{suite}  {rule.name}: "
    if hist.tasks == 0:
        return head + "no tasks yet"
    proxy = ""
    if window < rule.k and rule.trigger == "rate":
        window = RATE_WINDOW
        proxy = f", its interval on a {RATE_WINDOW}-trial window"
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
        level=None if level is None else level.value,
    )
    where = _where(rule, hist, level, asked=asked)
    if pages.firing_share >= STAYS_ON:
        # One page that never resolves: a rate of pages says nothing, the time firing does.
        return head + (
            f"firing {pages.firing_share:.0%} of the simulated time {where}, at {pace:.3g} "
            f"trials/task/day ({hist.tasks} tasks, {pages.days * 24:.3g} h simulated{proxy}): "
            "an alert that stays on, not a rate of pages"
        )
    return head + (
        f"{_rate(pages.per_day)} expected false pages/day, at most {_rate(pages.upper)} "
        f"({pages.confidence:.0%}), {where}, at {pace:.3g} trials/task/day "
        f"({hist.tasks} tasks, {pages.days * 24:.3g} h simulated{proxy}"
        + (f", firing {pages.firing_share:.0%} of it" if pages.firing_share >= 0.25 else "")
        + ")"
    )


def _rate(per_day: float) -> str:
    return f"{per_day:.2g}" if per_day < 100 else f"{per_day:,.0f}"
