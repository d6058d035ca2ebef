"""The rate rules' states, advanced on each tick that recomputes their series.

For each series a tick recomputes and each ``trigger = "rate"`` rule watching
it: read the series' lifetime counts and the rule's stored state in one
transaction (``store.triggers.read``), advance the state on them off the event
loop (``rules.views.rate``), and store it back by compare-and-set, so that two
replicas never feed one tick twice. What comes back, by rule, is the time of
its last alarm; the snapshot carries it to the evaluator in the rule's view.
A series whose state cannot be advanced (bad data) is logged and its rate rules
judge without an alarm until the next tick.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from reliabilityd.logs import RateLimited, emit, kv, log
from reliabilityd.rules import Rule, views
from reliabilityd.stats import ratecusum
from reliabilityd.store import Series, Store, StoreError

__all__ = ["RateStates"]


class RateStates:
    """Advances the rate rules' stored states."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lost = RateLimited(60.0)

    async def advance(
        self,
        series: Series,
        rules: Sequence[Rule],
        *,
        windowed: bool,
        now: float,
    ) -> dict[str, float | None]:
        """Each rate rule's last alarm after this tick (unix seconds), by rule name."""
        rate = [r for r in rules if r.trigger == "rate"]
        if not rate:
            return {}
        got = await self.store.triggers.read(series, [r.name for r in rate], windowed=windowed)

        def run() -> list[ratecusum.Tracker]:
            return [
                views.rate(
                    rule,
                    doc,
                    got.tasks,
                    got.n,
                    got.c,
                    version=got.version,
                    now=now,
                )
                for rule, (_, doc) in zip(rate, got.states, strict=True)
            ]

        try:
            advanced = await asyncio.to_thread(run)
        except StoreError:
            raise
        except Exception:
            log.exception("%s", kv("rate_state_failed", suite=series.label))
            return {}
        out: dict[str, float | None] = {}
        for rule, (seq, _), tracker in zip(rate, got.states, advanced, strict=True):
            if tracker.alarmed_at == now:
                emit(
                    logging.INFO,
                    "rate_alarm",
                    suite=series.label,
                    rule=rule.name,
                    alarms=tracker.alarms,
                )
            doc = ratecusum.encode(tracker)
            if not await self.store.triggers.write(series, rule.name, seq, doc):
                # Another replica advanced it since: its state goes on, this tick's view
                # stands for this snapshot only.
                self._lost.emit(
                    logging.DEBUG, "rate_state_lost", suite=series.label, rule=rule.name
                )
            out[rule.name] = tracker.alarmed_at
        return out
