"""The rate rules' states, advanced on each tick that recomputes their series.

For each series a tick recomputes and each ``trigger = "rate"`` rule watching
it: read the series' lifetime counts and the rule's stored state in one
script call (``store.triggers.read``, the batch in one round trip), advance the
state on them off the event loop (``rules.views.rate``, every series of the
batch in one worker call), and store it back by compare-and-set (one round
trip again), so that two replicas never feed one tick twice. What comes back,
by rule, is the time of its last alarm; the snapshot carries it to the
evaluator in the rule's view. A stored state this version
cannot decode is logged and replaced by a fresh one; a series whose reply or
data stops the read or the advance is logged and its rate rules judge without
an alarm until the next tick.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from reliabilityd.logs import RateLimited, emit, kv, log
from reliabilityd.rules import Rule, views
from reliabilityd.stats import ratecusum
from reliabilityd.store import (
    Series,
    Store,
    TriggerInput,
    Undecodable,
    UndecodableLog,
)

__all__ = ["RateStates"]

Alarms = dict[str, float | None]


class RateStates:
    """Advances the rate rules' stored states."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lost = RateLimited(60.0)
        self._bad_read = RateLimited(60.0)
        self._undecodable = UndecodableLog()

    async def advance(
        self, batch: Sequence[tuple[Series, Sequence[Rule], bool]], *, now: float
    ) -> list[Alarms]:
        """Per (series, its rules, whether it has a window): each rate rule's last alarm
        after this tick (unix seconds), by rule name."""
        work = [
            (i, one, rate, windowed)
            for i, (one, rules, windowed) in enumerate(batch)
            if (rate := [r for r in rules if r.trigger == "rate"])
        ]
        out: list[Alarms] = [{} for _ in batch]
        if not work:
            return out
        reads = await self.store.triggers.read(
            [(one, [r.name for r in rate], windowed) for _, one, rate, windowed in work]
        )
        inputs = []
        for (i, one, rate, _), got in zip(work, reads, strict=True):
            if got is None:
                self._bad_read.emit(logging.WARNING, "rate_state_unreadable", suite=one.label)
                continue
            for _, state in got.states:
                if isinstance(state, Undecodable):
                    self._undecodable.note(state)
            inputs.append((i, one, rate, got))
        advanced = await asyncio.to_thread(_advance_all, inputs, now)
        writes = []
        for (i, one, rate, got), results in zip(inputs, advanced, strict=True):
            if results is None:
                continue
            out[i] = {
                rule.name: tracker.alarmed_at
                for rule, (tracker, _) in zip(rate, results, strict=True)
            }
            for rule, (seq, _), (tracker, alarmed) in zip(rate, got.states, results, strict=True):
                if alarmed:
                    emit(
                        logging.INFO,
                        "rate_alarm",
                        suite=one.label,
                        rule=rule.name,
                        alarms=tracker.alarms,
                    )
                writes.append((one, rule.name, seq, tracker))
        won = await self.store.triggers.write(writes)
        for (one, rule_name, _, _), ok in zip(writes, won, strict=True):
            if not ok:
                # Another replica advanced it since: its state goes on, this tick's view
                # stands for this snapshot only.
                self._lost.emit(logging.DEBUG, "rate_state_lost", suite=one.label, rule=rule_name)
        return out


def _advance_all(
    inputs: Sequence[tuple[int, Series, Sequence[Rule], TriggerInput]], now: float
) -> list[list[tuple[ratecusum.Tracker, bool]] | None]:
    """Every series' rate rules advanced, each with whether this tick alarmed; None for a
    series whose data stops it (logged)."""
    out: list[list[tuple[ratecusum.Tracker, bool]] | None] = []
    for _, one, rate, got in inputs:
        try:
            results = []
            for rule, (_, stored) in zip(rate, got.states, strict=True):
                state = None if isinstance(stored, Undecodable) else stored
                before = 0 if state is None else state.alarms
                tracker = views.rate(
                    rule, state, got.tasks, got.n, got.c, version=got.version, now=now
                )
                # A fresh state (other settings) counts from 0: only a count that grew alarmed.
                results.append((tracker, tracker is state and tracker.alarms > before))
            out.append(results)
        except Exception:
            log.exception("%s", kv("rate_state_failed", suite=one.label))
            out.append(None)
    return out
