"""The daemon's canary judge: each tick, the canary rules whose sides' data changed.

A comparison is judged when a suite it reads was recomputed this tick, when
its stored state is pending or firing (``for`` and ``repeat`` need the
clock, not new data), and every comparison at this replica's first tick and
after a gap of more than ``JUDGE_ALL_AFTER`` intervals (a tick that failed
on a Redis error leaves no record of the suites it recomputed).
Both sides' per-task counts are read from Redis then, never remembered.

The transition is decided as for every rule: compare-and-set on the rule's
state under the home suite's hash tag (``canary.Pair.home``), with the
notification queued in the same call in one outbox per sink, so replicas
and restarts never notify twice. The version a verdict rests on is the sum
of both suites' data versions, read before their counts: each only grows,
so a verdict on older data of either side is refused when a newer one is
stored.

Each comparison judged is kept as the rule's view (``rules.canary.CanaryView``:
the difference, its interval and the tasks that got worse) and as its minute's
point of the difference over time (the last comparison of each minute): what
the pages show between notifications. A state change is recorded in the home suite's history, as a
threshold rule's is in its series'.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from functools import partial

import msgspec

from reliabilityd.alerting.notify import build_canary
from reliabilityd.alerting.outbox import Outbox
from reliabilityd.alerting.registry import Settled, watched
from reliabilityd.config import Config
from reliabilityd.logs import emit, kv, log
from reliabilityd.rules import AlertState, canary
from reliabilityd.rules.canary import CanaryRule, Pair
from reliabilityd.rules.registry import Watch
from reliabilityd.stats.compare import Comparison, compare
from reliabilityd.stats.history import Transition
from reliabilityd.store import (
    Store,
    StoreError,
    TaskHashes,
    Undecodable,
    UndecodableLog,
    task_counts_of,
)

__all__ = ["Canaries"]

# Redis errors pause the tick (the CI loop logs them); no other error leaves a judge.
# Intervals between two judges past which the second judges every comparison.
JUDGE_ALL_AFTER = 3.0


class Canaries:
    """Judges the configured canary rules and queues the notifications they decide."""

    def __init__(self, config: Config, store: Store, outbox: Outbox) -> None:
        self.store = store
        self.outbox = outbox
        self.configure(config)
        self._bad_state_log = UndecodableLog()

    def configure(self, config: Config) -> None:
        """The canary rules of ``config`` (at start, and on a reload): the next judge
        judges every comparison, since a new or changed rule has no changed suite yet."""
        self.config = config
        self.rules: list[CanaryRule] = config.canaries()
        # When this replica last judged; None = never. A judge that follows a
        # gap of more than JUDGE_ALL_AFTER intervals judges every comparison:
        # a tick in between failed (Redis) and its changed suites are unknown.
        self._last_judged: float | None = None

    async def forget(self, before: Sequence[CanaryRule]) -> list[str]:
        """Delete the views and points of the comparisons ``before`` made that the rules
        now configured do not (a rule removed, or its sides changed, by a reload); the
        suites those comparisons read (their rows list them)."""
        if not before:
            return []

        async def made(rules: Sequence[CanaryRule]) -> dict[tuple[str, str], Pair]:
            return {
                (w.pair.home, w.rule.name): w.pair
                for w in await watched(self.store, rules)
                if isinstance(w.rule, CanaryRule) and w.pair is not None
            }

        now = await made(self.rules)
        gone = {key: pair for key, pair in (await made(before)).items() if key not in now}
        await self.store.alerts.drop_canary_views(sorted(gone))
        for home, name in sorted(gone):
            emit(logging.INFO, "canary_forgotten", rule=name, suite=home)
        return sorted({suite for pair in gone.values() for suite in pair.suites})

    async def judge(
        self, changed: Sequence[str], watches: Sequence[Watch] | None = None
    ) -> Settled:
        """Judge every comparison that reads a changed suite or whose alert is under way;
        the state each comparison is left in, by (home suite, rule name): the one this
        judge wrote, else the one it read, None where another replica's write won.
        ``watches``: the registry's watches of this config, when the caller has read them."""
        if not self.rules:
            return {}
        now = time.time()
        if watches is None:
            watches = await watched(self.store, self.rules)
        todo = [
            (w.rule, w.pair)
            for w in watches
            if isinstance(w.rule, CanaryRule) and w.pair is not None
        ]
        if not todo:
            return {}
        states = await self.store.alerts.alert_states(
            [(pair.home, rule.name) for rule, pair in todo]
        )
        fresh = set(changed)
        every = (
            self._last_judged is None
            or time.monotonic() - self._last_judged
            > JUDGE_ALL_AFTER * self.config.stats.ci_interval
        )
        settled: Settled = {}
        for (rule, pair), stored in zip(todo, states, strict=True):
            current = self._readable(stored)
            settled[(pair.home, rule.name)] = stored
            if every or current.state in ("pending", "firing") or pair.suites & fresh:
                try:
                    after = await self._step(rule, pair, current, now)
                    if after is not current:
                        settled[(pair.home, rule.name)] = after
                except StoreError:
                    raise
                except Exception:
                    # One comparison's failure must not stop the others: it is
                    # judged again on the next change.
                    log.exception("%s", kv("canary_failed", rule=rule.name, suite=pair.home))
        self._last_judged = time.monotonic()
        # Outboxes left by a daemon that died mid-delivery, or by a sink that was down.
        triples = [(p.home, r.name, sink) for r, p in todo for sink in self.outbox.sinks]
        for triple, length in zip(
            triples, await self.store.alerts.outbox_lengths(triples), strict=True
        ):
            if length:
                self.outbox.kick(*triple)
        return settled

    def _readable(self, stored: AlertState | Undecodable) -> AlertState:
        if isinstance(stored, AlertState):
            return stored
        # Written by another version: judge afresh; the next transition overwrites it.
        self._bad_state_log.note(stored)
        return AlertState(seq=stored.seq, snapshot_version=stored.snapshot_version)

    async def compare(self, rule: CanaryRule, pair: Pair) -> tuple[Comparison, int, int]:
        """The pair's comparison now, the fewest trials of a shared task, the data version."""
        suites = sorted(pair.suites)
        version = sum(v for v, _, _ in await self.store.snapshots.versions(suites))
        try:
            hashes = [
                await self.store.reads.task_hashes(canary.side(ref))
                for ref in (pair.baseline, pair.candidate)
            ]
        except ValueError as exc:  # a label the suite is not sliced by
            return canary.unknown(rule, pair, f"UNKNOWN: {exc}"), 0, version
        # Parsing every task and comparing is O(tasks) of Python: off the event loop.
        cmp, runs = await asyncio.to_thread(self._compute, rule, pair, hashes[0], hashes[1])
        return cmp, runs, version

    def _compute(
        self, rule: CanaryRule, pair: Pair, base_hashes: TaskHashes, cand_hashes: TaskHashes
    ) -> tuple[Comparison, int]:
        """The worker thread's part: both sides parsed and compared, and the fewest trials."""
        base, cand = task_counts_of(base_hashes), task_counts_of(cand_hashes)
        stats = self.config.stats
        cmp = compare(
            base,
            cand,
            rule.k,
            rule.metric,
            confidence=stats.confidence,
            n_boot=stats.n_boot,
            seed=stats.seed,
            interval=rule.interval or self.config.suite_interval(pair.candidate.suite),
            min_shared=rule.min_shared,
            # Every moved task: the notification names the top `rule.top` that got worse.
            top=max(1, len(cand)),
            names=(pair.baseline.label, pair.candidate.label),
        )
        return cmp, canary.fewest_runs(base, cand)

    async def _step(
        self, rule: CanaryRule, pair: Pair, current: AlertState, now: float
    ) -> AlertState | None:
        """Judge one comparison: the state it is left in (``current`` itself when
        unmoved), None when another replica's write won."""
        cmp, runs, version = await self.compare(rule, pair)
        if version < current.snapshot_version:
            return current  # the stored state rests on newer data than this replica read
        await self.store.alerts.write_canary_view(pair.home, rule.name, canary.view(rule, cmp, now))
        note_for = partial(
            build_canary,
            self.config,
            rule=rule,
            suite=pair.home,
            comparison=cmp,
            runs=runs,
            now=now,
        )
        t = canary.step(rule, current, cmp, now)
        if t.new != current:
            new = msgspec.structs.replace(t.new, seq=current.seq + 1, snapshot_version=version)
            note = None if t.notify is None else note_for(state=new, repeat=t.notify == "repeat")
            cas = await self.store.alerts.alert_cas(
                pair.home,
                rule.name,
                expected_seq=current.seq,
                new=new,
                notification=None if note is None else msgspec.json.encode(note),
                sinks=list(self.outbox.sinks),
                transition=None
                if new.state == current.state
                else Transition(
                    t=now,
                    rule=rule.name,
                    state=new.state,
                    severity=rule.severity,
                    reason=new.reason,
                ),
            )
            if not cas.won:
                return None  # another replica moved the state on, or decided on newer data
            current = new
            if note is not None:
                diff = cmp.difference(rule.metric)
                emit(
                    logging.WARNING if new.state == "firing" else logging.INFO,
                    "alert",
                    rule=rule.name,
                    suite=pair.home,
                    state=new.state,
                    reason=new.reason,
                    baseline=pair.baseline.label,
                    candidate=pair.candidate.label,
                    difference=diff.value,
                    ci_high=diff.ci_high,
                    version=version,
                )
                for sink in self.outbox.sinks:
                    self.outbox.kick(pair.home, rule.name, sink)
        if current.state == "firing" and t.notify is None:
            self.outbox.resend_firing(
                pair.home, rule.name, partial(note_for, state=current, repeat=True)
            )
        return current
