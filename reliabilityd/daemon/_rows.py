"""The summary rows a tick writes: what the list-wide reads page through (``store.rows``).

After a tick's snapshots and verdicts, each series whose snapshot the tick
wrote gets a new row (its headline value and interval, the states of the
rules that read it, the last trial, a day's trend thinned to a handful of
points: read from the history at most every ``TREND_REREAD``, each new
snapshot's point appended between reads), and each suite whose worst state moved is
moved between the state indexes; a row whose rules' states moved without
a new snapshot (a rule's ``for`` ran out, a canary decided) has its rules
rewritten. The states of every suite come from the registry in one read, as
the evaluator's do; what this replica has already written is not written
again until ``FORGET_WRITTEN`` has passed (another replica may have written
since). Every ``SWEEP_EVERY`` the
rows of suites Redis no longer has are dropped.
"""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime

import msgspec

from reliabilityd.alerting import registry
from reliabilityd.alerting.registry import Settled, Watched
from reliabilityd.backoff import JITTER
from reliabilityd.config import Config
from reliabilityd.daemon.ui import _model
from reliabilityd.logs import emit
from reliabilityd.rules import Rule
from reliabilityd.rules.registry import Watch
from reliabilityd.stats import history
from reliabilityd.stats.history import History
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import Row, Series, Store, Undecodable
from reliabilityd.store._rows import TREND_POINTS, compact

__all__ = ["RowWriter", "row_of"]

DAY = 86400.0
FORGET_WRITTEN = 60.0
# A row's trend is read from its history at most this often (``RowWriter._samples``),
# each re-read spread by ``backoff.JITTER``.
TREND_REREAD = 60.0
SWEEP_EVERY = 60.0


Point = tuple[float, float | None, float | None, float | None]


def _trend(history: History, k: int | None, now: float) -> list[Point]:
    """The last day's pass^k points at ``k``, the last of each of ``TREND_POINTS`` spans."""
    if k is None:
        return []
    key = _model.series_key("pass^k", k)
    samples = _model.samples(((p.t, p.values) for p in history.points), key)
    return trend_of([(s.t, s.value, s.lo, s.hi) for s in samples], now)


def trend_of(samples: Sequence[Point], now: float) -> list[Point]:
    """The last of each of ``TREND_POINTS`` spans of the last day, of samples in time order."""
    step = DAY / TREND_POINTS
    kept: dict[int, Point] = {}
    for s in samples:
        if s[0] >= now - DAY:
            kept[int((s[0] - (now - DAY)) // step)] = s
    return [kept[i] for i in sorted(kept)]


def row_of(
    snap: Snapshot,
    watched: Sequence[Watched],
    history: History | None,
    now: float,
    trend: list[Point] | None = None,
) -> Row:
    """A series' row from its snapshot, the rules that read it and its history (or the
    ``trend`` already taken from it: ``trend_of``)."""
    own = _own(snap, watched)
    k = _model.headline_k(snap, own)
    est = None if k is None else snap.get("pass^k", k)
    if trend is None:
        trend = [] if history is None else _trend(history, k, now)
    return Row(
        suite=snap.suite,
        slice=snap.slice,
        version=snap.version,
        updated_at=snap.updated_at,
        k=k,
        value=None if est is None else est.value,
        ci=None if est is None or est.ci is None else (est.ci[0], est.ci[1]),
        tasks=snap.tasks,
        last_trial_at=snap.last_trial_at,
        below=_model.below_at(own, "pass^k", k),
        rules=_rules(watched),
        trend=trend,
        unknown_reason=None if est is None else est.unknown_reason,
        pass_at_k=[compact(e) for e in snap.pass_at_k],
        pass_hat_k=[compact(e) for e in snap.pass_hat_k],
        slices=snap.slices,
        slice_overflow=snap.slice_overflow,
        trials=snap.trials,
    )


def _own(snap: Snapshot, watched: Sequence[Watched]) -> list[Rule]:
    """The rules of ``watched`` on the snapshot's own series."""
    return [
        w.watch.rule
        for w in watched
        if isinstance(w.watch.rule, Rule)
        and w.watch.suite == snap.suite
        and w.watch.slice == snap.slice
    ]


def _rules(watched: Sequence[Watched]) -> list[tuple[str, str, str]]:
    return [(w.watch.name, _model.state_name(w.state), w.watch.suite) for w in watched]


def _by_series(every: Sequence[Watched]) -> dict[Series, list[Watched]]:
    """The watches each series' row lists: a suite's, those that read it (a canary on
    either side); a slice's, its own rules."""
    out: dict[Series, list[Watched]] = defaultdict(list)
    for w in every:
        if w.watch.slice is not None:
            out[Series(w.watch.suite, w.watch.slice)].append(w)
        for suite in w.watch.reads:
            out[Series(suite)].append(w)
    return out


class RowWriter:
    """Writes the rows of each tick's snapshots and the suites' states."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._written: dict[str, str] = {}
        self._rules: dict[Series, list[tuple[str, str, str]]] = {}
        self._forget_at = 0.0
        self._next_sweep = 0.0
        self._recheck: set[Series] = set()
        self._reconciled = False
        # By series: (re-read after, monotonic; its headline k; its trend's samples).
        self._trends: dict[Series, tuple[float, int, list[Point]]] = {}

    async def _reconcile(
        self, every: Sequence[Watched], by_series: Mapping[Series, Sequence[Watched]]
    ) -> None:
        """At the first write: what the rows say of rules this config no longer has (a rule
        removed while no daemon ran). Rows that list a rule no watch of theirs has are
        rechecked (the write drops it); a rule no configured watch has on its home suite
        has its canary view and points deleted, as a reload's ``Canaries.forget`` does."""
        watched = {(w.watch.suite, w.watch.name) for w in every}
        gone: set[tuple[str, str]] = set()
        for row in await self.store.rows.gauges():
            if isinstance(row, Undecodable):
                continue
            series = Series(row.suite, row.slice)
            listed = {(name, home) for name, _, home in row.rules}
            if listed - {(n, h) for n, _, h in _rules(by_series.get(series, []))}:
                self._recheck.add(series)
            gone |= {(home, name) for name, home in listed if (home, name) not in watched}
        # A threshold rule gone had no view: deleting what never existed is a no-op.
        await self.store.alerts.drop_canary_views(sorted(gone))
        for home, name in sorted(gone):
            emit(logging.INFO, "rule_forgotten", rule=name, suite=home)

    def recheck(self, suites: Sequence[str]) -> None:
        """Compare the rows of ``suites`` with the registry at the next write, whether or
        not a rule reads them still (a rule a reload removed: their rows drop it)."""
        self._recheck.update(Series(s) for s in suites)

    async def _samples(
        self, snapshots: Mapping[Series, Snapshot], heads: Mapping[Series, int | None], now: float
    ) -> dict[Series, list[Point]]:
        """Each written series' pass^k samples of the last day at its headline k.

        Read from its history string (one GET a series) when it has none kept,
        its headline k moved, or its kept read is older than ``TREND_REREAD``
        (less a random share, so reads spread over the ticks); otherwise the
        kept read, thinned, with this snapshot's point appended as the history
        stores it. Another replica's points reach a row's trend within
        ``TREND_REREAD``.
        """
        clock = time.monotonic()
        for series in [s for s, kept in self._trends.items() if kept[0] <= clock]:
            del self._trends[series]
        out: dict[Series, list[Point]] = {}
        wanted: list[tuple[Series, int]] = []
        for series, k in heads.items():
            if k is None:
                continue
            kept = self._trends.get(series)
            if kept is None or kept[1] != k:
                wanted.append((series, k))
                continue
            snap = snapshots[series]
            t = math.floor(datetime.fromisoformat(snap.updated_at).timestamp())
            point = history.pass_hat_sample(history.point_of(snap.pass_hat_k, t), k)
            kept[2][:] = trend_of([*kept[2], point], now)
            out[series] = kept[2]
        read = await self.store.history.pass_hat_many(
            wanted, since=now - DAY, until=now, span=DAY / TREND_POINTS
        )
        for (series, k), got in zip(wanted, read, strict=True):
            until = clock + TREND_REREAD * (1.0 - 0.5 * JITTER.random())
            self._trends[series] = (until, k, got)
            out[series] = got
        return out

    async def write(
        self,
        config: Config,
        suites: Sequence[str],
        snapshots: Mapping[Series, Snapshot],
        watches: Sequence[Watch] | None = None,
        settled: Settled | None = None,
    ) -> None:
        """Rows for the tick's ``snapshots``; the states of every suite of ``suites``.

        ``watches`` and ``settled``: the registry's watches the tick judged and the
        states its verdicts left (``Evaluator.evaluate``, ``Canaries.judge``), so the
        rules' states are read again only where a verdict does not know its own."""
        now = time.time()
        if time.monotonic() >= self._forget_at:
            self._written.clear()
            self._rules.clear()
            self._forget_at = time.monotonic() + FORGET_WRITTEN
        if watches is None or settled is None:
            every = await registry.statuses(self.store, config.alerts, suites=suites)
        else:
            every = await registry.with_settled(self.store, watches, settled)
        by_series = _by_series(every)
        if not self._reconciled:
            await self._reconcile(every, by_series)
            self._reconciled = True
        written = list(snapshots)
        heads = {
            s: _model.headline_k(snapshots[s], _own(snapshots[s], by_series.get(s, [])))
            for s in written
        }
        samples = await self._samples(snapshots, heads, now)
        rows = [
            row_of(snapshots[s], by_series.get(s, []), None, now, trend_of(samples.get(s, []), now))
            for s in written
        ]
        # Rows whose rules' states moved since they were written: the same row, its rules new.
        moved = [
            s
            for s, ws in by_series.items()
            if s not in snapshots and self._rules.get(s) != _rules(ws)
        ]
        moved += sorted(s for s in self._recheck if s not in by_series and s not in snapshots)
        self._recheck.clear()
        for series, old in zip(moved, await self.store.rows.read(moved), strict=True):
            new = _rules(by_series.get(series, []))
            if isinstance(old, Row) and [tuple(r) for r in old.rules] != new:
                rows.append(msgspec.structs.replace(old, rules=new))
        # The state indexes first: a reader that sees a row's new states finds its suite
        # in the index of its state too.
        fresh = {s.suite for s in written if s.slice is None}
        states: dict[str, str] = {}
        for suite in suites:
            mine = by_series.get(Series(suite), [])
            state = _model.worst_state(w.state for w in mine) if mine else "none"
            if suite in fresh or self._written.get(suite) != state:
                states[suite] = state
        await self.store.rows.set_states(states)
        self._written.update(states)
        await self.store.rows.write(rows)
        for series in [*written, *moved]:
            self._rules[series] = _rules(by_series.get(series, []))
        if time.monotonic() >= self._next_sweep:
            self._next_sweep = time.monotonic() + SWEEP_EVERY
            known = set(suites)
            gone = [s for s in await self.store.rows.indexed() if s not in known]
            orphans = [s for s in await self.store.rows.series() if s.suite not in known]
            await self.store.rows.drop(gone, [s for s in orphans if s.slice is not None])
