"""Alert evaluation: every rule x the newest snapshot in Redis -> compare-and-set.

A verdict is taken only on the snapshot Redis holds now, never on one this
replica remembers computing, and the compare-and-set refuses a transition
decided on an older snapshot version than the one behind the stored state,
so replicas that tick at different times never flap. The snapshots the
tick just wrote are handed over as records; each is judged as is only while
Redis still holds that very document (its version and ``updated_at``), and
every other series' snapshot is read, decoded, from the store. A snapshot
or a state this version cannot decode (``store.Undecodable``: a rolling
upgrade, damage) is logged and never stops judging: the snapshot is marked
for a recompute and its rules wait for it, the state is judged afresh and
overwritten by the next transition.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from functools import partial

import msgspec

from reliabilityd.alerting.notify import LOTTERY_CASES, build, parse_time
from reliabilityd.alerting.outbox import Outbox
from reliabilityd.alerting.registry import Settled, watched
from reliabilityd.config import Config
from reliabilityd.logs import emit
from reliabilityd.rules import AlertState, Observation, Rule, step
from reliabilityd.rules.registry import Watch
from reliabilityd.stats.history import Transition
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import (
    Series,
    Store,
    StoreError,
    TrialRecord,
    Undecodable,
    UndecodableLog,
)


class Evaluator:
    """Steps each (suite, rule) pair and queues the notifications it decides."""

    def __init__(self, config: Config, store: Store, outbox: Outbox) -> None:
        self.store = store
        self.outbox = outbox
        self.configure(config)
        self._bad_snapshot_log = UndecodableLog()
        self._bad_state_log = UndecodableLog()

    def configure(self, config: Config) -> None:
        """The rules and notification settings of ``config`` (at start, and on a reload)."""
        self.config = config
        self.rules: list[Rule] = config.rules()

    async def newest_snapshots(
        self, suites: Sequence[Series], fresh: Mapping[Series, Snapshot] | None = None
    ) -> dict[Series, Snapshot]:
        """The snapshot Redis holds now for each series that has a readable one.

        ``fresh``: snapshots this replica just wrote, by series; each stands
        for its series while Redis still holds that document (the same
        version and ``updated_at``), so only the others are read and decoded.
        One that does not decode was written by another version: it is logged
        and its series marked for a recompute by this version.
        """
        docs = await self.store.snapshots.documents(suites, known=fresh)
        out: dict[Series, Snapshot] = {}
        unreadable: list[Series] = []
        for suite, doc in zip(suites, docs, strict=True):
            if isinstance(doc, Undecodable):
                unreadable.append(suite)
                self._bad_snapshot_log.note(doc)
            elif doc is not None:
                out[suite] = doc
        if unreadable:
            await self.store.snapshots.mark_changed(unreadable)
        return out

    async def pairs(
        self, suites: Sequence[str], watches: Sequence[Watch] | None = None
    ) -> list[tuple[Series, Rule]]:
        """Every (series, rule) to judge: the registry's threshold watches of ``suites``
        (``alerting.registry``: each rule on the suites it matches and, with
        ``slices = true``, on each of their slices as ``<rule>[<slice>]``). ``watches``:
        the registry's watches of this config, when the caller has read them."""
        if watches is None:
            watches = await watched(self.store, self.rules, suites)
        return [(Series(w.suite, w.slice), w.rule) for w in watches if isinstance(w.rule, Rule)]

    async def evaluate(
        self,
        suites: Sequence[str],
        fresh: Mapping[Series, Snapshot] | None = None,
        watches: Sequence[Watch] | None = None,
    ) -> Settled:
        """Step every (series, rule) pair against the series' newest snapshot; the state
        each pair is left in, by (suite, rule name).

        ``fresh``: the snapshots this replica's tick wrote (each write won),
        by series (``newest_snapshots``); ``watches``: the registry's, when read.
        A pair's state is the one this pass wrote, else the one it read; None when
        another replica's write won over this one's (its state is not known here).
        """
        if not self.rules:
            return {}
        now = time.time()
        pairs = await self.pairs(suites, watches)
        if not pairs:
            return {}
        snaps = await self.newest_snapshots(list(dict.fromkeys(s for s, _ in pairs)), fresh)
        states = await self.store.alerts.alert_states([(s.suite, r.name) for s, r in pairs])
        sinks = list(self.outbox.sinks)
        settled: Settled = {}
        failures = LastFailures(self.store, self.config, snaps)
        for (series, rule), stored in zip(pairs, states, strict=True):
            snap = snaps.get(series)
            settled[(series.suite, rule.name)] = stored
            if snap is not None:
                suite = series.suite
                readable = self._readable(stored)
                after = await self._step(suite, rule, snap, readable, now, failures=failures)
                if after is not readable:
                    settled[(suite, rule.name)] = after
        # Outboxes left by a daemon that died mid-delivery, or by a sink that was down.
        triples = [(s.suite, r.name, sink) for s, r in pairs for sink in sinks]
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

    async def _step(
        self,
        suite: str,
        rule: Rule,
        snap: Snapshot,
        current: AlertState,
        now: float,
        *,
        failures: LastFailures,
    ) -> AlertState | None:
        """Judge one pair: the state it is left in (``current`` itself when unmoved),
        None when another replica's write won."""
        view = snap.rule(rule.name)
        est = view.estimate if view is not None and view.estimate is not None else None
        if est is None:
            est = snap.get(rule.metric, rule.k)
        if est is None:
            return current  # no estimate with this k yet: no verdict
        if snap.version < current.snapshot_version:
            return current  # the stored state rests on a newer snapshot than Redis showed us
        obs = Observation(
            value=est.value,
            ci_low=est.ci_low,
            ci_high=est.ci_high,
            tasks=est.tasks,
            runs=est.runs,
            last_trial_at=parse_time(snap.last_trial_at),
            evidence=None if view is None else view.evidence,
            level=None if view is None else view.level,
            alarmed_at=None if view is None else view.alarmed_at,
        )
        t = step(rule, current, obs, now)
        failing: list[TrialRecord] = []
        if t.notify is not None or current.state == "firing":
            failing = await failures.of(suite, snap)
        note_for = partial(
            build,
            self.config,
            rule=rule,
            suite=suite,
            estimate=est,
            snap=snap,
            now=now,
            failing=failing,
        )
        target = t.new
        if target != current:
            new = msgspec.structs.replace(
                target, seq=current.seq + 1, snapshot_version=snap.version
            )
            note = None
            if t.notify is not None:
                note = note_for(state=new, repeat=t.notify == "repeat")
            cas = await self.store.alerts.alert_cas(
                suite,
                rule.name,
                expected_seq=current.seq,
                new=new,
                notification=None if note is None else msgspec.json.encode(note),
                sinks=list(self.outbox.sinks),
                transition=_transition(rule, current, new, now),
                # A new breach: the store keeps every task's counts as of its start.
                breach_started=new.started_at
                if new.started_at is not None and new.started_at != current.started_at
                else None,
                slice=snap.slice,
            )
            if not cas.won:
                # Another replica moved the state on, or decided on a newer snapshot.
                return None
            current = new
            if note is not None:
                emit(
                    logging.WARNING if new.state == "firing" else logging.INFO,
                    "alert",
                    rule=rule.name,
                    suite=suite,
                    state=new.state,
                    reason=new.reason,
                    ci_low=est.ci_low,
                    snapshot_version=snap.version,
                )
                for sink in self.outbox.sinks:
                    self.outbox.kick(suite, rule.name, sink)
        if current.state == "firing" and t.notify is None:
            self.outbox.resend_firing(
                suite, rule.name, partial(note_for, state=current, repeat=True)
            )
        return current


class LastFailures:
    """The last failing trial of each top lottery case of the series one evaluation judges,
    read once per suite: the first series of a suite to need them reads every case of
    every series of that suite judged (``Reads.task_trials``, one round trip), and the
    suite's other rules and slices take theirs from that read. None when Redis cannot
    say (a page without links beats no page) or the suite keeps no trials."""

    def __init__(self, store: Store, config: Config, snaps: Mapping[Series, Snapshot]) -> None:
        self.store = store
        self.config = config
        self.tasks: dict[str, list[str]] = {}
        for series, snap in snaps.items():
            names = self.tasks.setdefault(series.suite, [])
            names += [c.task for c in snap.lottery.rows[:LOTTERY_CASES] if c.task not in names]
        self.found: dict[str, dict[str, TrialRecord]] = {}

    async def of(self, suite: str, snap: Snapshot) -> list[TrialRecord]:
        """The last failure of each of ``snap``'s top lottery cases, where one is kept."""
        if suite not in self.found:
            self.found[suite] = await self._read(suite, self.tasks.get(suite, []))
        found = self.found[suite]
        cases = snap.lottery.rows[:LOTTERY_CASES]
        return [found[c.task] for c in cases if c.task in found]

    async def _read(self, suite: str, tasks: Sequence[str]) -> dict[str, TrialRecord]:
        recent = self.config.recent(suite)
        if recent is None or not tasks:
            return {}
        try:
            read = await self.store.reads.task_trials(suite, tasks, keep=recent.trials)
        except StoreError as exc:
            emit(logging.WARNING, "failing_trials_unread", suite=suite, error=str(exc))
            return {}
        out: dict[str, TrialRecord] = {}
        for task, records in read.trials.items():
            last = next((r for r in records if r.outcome == "fail"), None)
            if last is not None:
                out[task] = last
        return out


def _transition(rule: Rule, current: AlertState, new: AlertState, now: float) -> Transition | None:
    """What the history records of a stored change: a change of state, nothing else."""
    if new.state == current.state:
        return None
    return Transition(
        t=now, rule=rule.name, state=new.state, severity=rule.severity, reason=new.reason
    )
