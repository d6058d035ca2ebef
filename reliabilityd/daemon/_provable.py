"""``ci-low`` rules too strict for their suites: what ``check`` prints and start-up logs.

For each ``trigger = "ci-low"`` rule and the suites it watches (at most
``MOST_SUITES`` per rule, in name order), ``rules.provable`` draws the
suite's make-up at a healthy truth and says whether the rule would be in
breach in most judgements. The draws run in a worker thread (about 0.2 to
0.6 s per suite of 10 to 200 tasks), so the event loop keeps serving.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging

from reliabilityd.config import Config
from reliabilityd.logs import emit
from reliabilityd.rules import Rule
from reliabilityd.rules.provable import Unprovable, unprovable
from reliabilityd.store import Store, StoreError

__all__ = ["MOST_SUITES", "unprovable_rules", "warn_unprovable"]

MOST_SUITES = 50


async def unprovable_rules(config: Config, store: Store) -> list[tuple[Rule, Unprovable]]:
    """Each ``ci-low`` rule with each suite it would be firing on most of the day."""
    rules = [r for r in config.rules() if r.trigger == "ci-low"]
    if not rules:
        return []
    suites = await store.reads.suites()
    out: list[tuple[Rule, Unprovable]] = []
    for rule in rules:
        for suite in [s for s in suites if fnmatch.fnmatchcase(s, rule.suite)][:MOST_SUITES]:
            counts = list((await store.reads.task_counts(suite)).values())
            found = await asyncio.to_thread(
                unprovable,
                rule,
                suite,
                counts,
                interval=config.suite_interval(suite),
                confidence=config.stats.confidence,
                n_boot=config.stats.n_boot,
            )
            if found is not None:
                out.append((rule, found))
    return out


async def warn_unprovable(config: Config, store: Store) -> None:
    """Log ``rule_cannot_prove`` once per rule and suite found; never raises (a Redis
    error or a value it cannot read skips the check, logged as ``rule_check_skipped``)."""
    try:
        found = await unprovable_rules(config, store)
    except (StoreError, ValueError) as exc:
        emit(logging.INFO, "rule_check_skipped", error=str(exc))
        return
    for rule, what in found:
        emit(
            logging.WARNING,
            "rule_cannot_prove",
            rule=rule.name,
            suite=what.suite,
            tasks=what.tasks,
            share=round(what.share, 2),
            detail=what.message(rule),
        )
