"""The rate rules' states, advanced on each tick that recomputes their series.

For each series a tick recomputes and each ``trigger = "rate"`` rule watching
it: read the series' lifetime counts and the rule's stored state in one
transaction (``store.triggers.read``), advance the state on them off the event
loop (``rules.views.rate``, every series of the batch in one worker call), and
store it back by compare-and-set, so that two replicas never feed one tick
twice. What comes back, by rule, is the time of its last alarm; the snapshot
carries it to the evaluator in the rule's view. A stored state this version
cannot decode is logged and replaced by a fresh one; a series whose state
cannot be advanced (bad data) is logged and its rate rules judge without an
alarm until the next tick.
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
    StoreError,
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
        self._undecodable = UndecodableLog()

    async def advance(
        self, batch: Sequence[tuple[Series, Sequence[Rule], bool]], *, now: float
    ) -> list[Alarms]:
        """Per (series, its rules, whether it has a window): each rate rule's last alarm
        after this tick (unix seconds), by rule name."""
        rated = [
            (one, [r for r in rules if r.trigger == "rate"], windowed)
            for one, rules, windowed in batch
        ]
        work = [(i, one, rate, w) for i, (one, rate, w) in enumerate(rated) if rate]
        out: list[Alarms] = [{} for _ in batch]
        if not work:
            return out
        reads = await asyncio.gather(*(self._read(one, rate, w) for _, one, rate, w in work))
        read = [(item, got) for item, got in zip(work, reads, strict=True) if got is not None]
        work = [item for item, _ in read]
        inputs = [(one, rate, got) for (_, one, rate, _), got in read]
        for _, _, got in inputs:
            for _, state in got.states:
                if isinstance(state, Undecodable):
                    self._undecodable.note(state)
        before = [
            [s.alarms if isinstance(s, ratecusum.Tracker) else 0 for _, s in got.states]
            for _, _, got in inputs
        ]
        advanced = await asyncio.to_thread(_advance_all, inputs, now)
        writes = []
        for (one, rate, got), trackers, had in zip(inputs, advanced, before, strict=True):
            for rule, (seq, _), tracker, was in zip(
                rate, got.states, trackers or [], had, strict=False
            ):
                if tracker.alarms > was:
                    emit(
                        logging.INFO,
                        "rate_alarm",
                        suite=one.label,
                        rule=rule.name,
                        alarms=tracker.alarms,
                    )
                writes.append((one, rule.name, seq, tracker))
        won = await asyncio.gather(*(self.store.triggers.write(*w) for w in writes))
        for (one, rule_name, _, _), ok in zip(writes, won, strict=True):
            if not ok:
                # Another replica advanced it since: its state goes on, this tick's view
                # stands for this snapshot only.
                self._lost.emit(logging.DEBUG, "rate_state_lost", suite=one.label, rule=rule_name)
        for (i, _, rate, _), trackers in zip(work, advanced, strict=True):
            out[i] = {r.name: t.alarmed_at for r, t in zip(rate, trackers or [], strict=False)}
        return out

    async def _read(self, one: Series, rate: Sequence[Rule], windowed: bool) -> TriggerInput | None:
        """The series' counts and states; None (logged) when what Redis holds stops the
        read, so that series' rate rules judge without an alarm this tick."""
        try:
            return await self.store.triggers.read(one, [r.name for r in rate], windowed=windowed)
        except StoreError:
            raise
        except Exception:
            log.exception("%s", kv("rate_state_failed", suite=one.label))
            return None


def _advance_all(
    inputs: Sequence[tuple[Series, Sequence[Rule], TriggerInput]], now: float
) -> list[list[ratecusum.Tracker] | None]:
    """Every series' rate rules advanced; None for a series whose data stops it (logged)."""
    out: list[list[ratecusum.Tracker] | None] = []
    for one, rate, got in inputs:
        try:
            out.append(
                [
                    views.rate(
                        rule,
                        None if isinstance(state, Undecodable) else state,
                        got.tasks,
                        got.n,
                        got.c,
                        version=got.version,
                        now=now,
                    )
                    for rule, (_, state) in zip(rate, got.states, strict=True)
                ]
            )
        except Exception:
            log.exception("%s", kv("rate_state_failed", suite=one.label))
            out.append(None)
    return out
