"""What the pages read from Redis, through the Store: snapshots, alert states, history,
breach baselines, dead letters and rejected counts. Every read is the Store's; the
numbers shown are what any other reader of Redis sees. A document the store cannot
decode (``store.Undecodable``) is shown as undecodable and logged, never decoded here.
"""

from __future__ import annotations

import asyncio
import fnmatch
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from reliabilityd.config import Config
from reliabilityd.daemon.ui import _model
from reliabilityd.daemon.ui._pages import IndexPage, IndexRow, RuleView, SuitePage, TransitionRow
from reliabilityd.daemon.ui._svg import Mark
from reliabilityd.rules import AlertState, Rule
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import (
    Series,
    Store,
    TaskHashes,
    Undecodable,
    UndecodableLog,
    task_counts_of,
)

if TYPE_CHECKING:
    from reliabilityd.stats.history import Estimate3, History

T = TypeVar("T")
HOUR = 3600.0
LETTERS = 20  # dead letters listed on a suite page
LETTERS_SINCE = 7 * 86400.0  # how far back the page looks for them
MOVERS = 10
_undecodable_log = UndecodableLog()


def _noted(docs: Sequence[T]) -> list[T]:
    """The documents as read, each undecodable one logged (rate-limited)."""
    for doc in docs:
        if isinstance(doc, Undecodable):
            _undecodable_log.note(doc)
    return list(docs)


def watching(config: Config, suite: str) -> list[Rule]:
    return [r for r in config.rules() if fnmatch.fnmatchcase(suite, r.suite)]


def _points(history: History) -> list[tuple[float, dict[str, Estimate3]]]:
    return [(p.t, p.values) for p in history.points]


async def index(
    store: Store,
    config: Config,
    now: float,
    readable: Callable[[list[str]], list[str]] = list,
) -> IndexPage:
    """Each readable suite's headline value, interval, day's trend, alerts and rejected count."""
    suites = readable(await store.reads.suites())
    docs = _noted(await store.snapshots.documents(suites))
    rules = {s: watching(config, s) for s in suites}
    pairs = [(s, r.name) for s in suites for r in rules[s]]
    states = dict(zip(pairs, _noted(await store.alerts.alert_states(pairs)), strict=True))
    rejected = await store.reads.rejected_counts(now)
    # One read for every suite's day: the page takes one connection, however many suites.
    histories = await store.history.read_many(
        [Series(s) for s in suites], since=now - _model.DAY, until=now
    )
    rows = []
    for suite, snap, history in zip(suites, docs, histories, strict=True):
        k = _model.headline_k(snap, rules[suite])
        trend = (
            [] if k is None else _model.samples(_points(history), _model.series_key("pass^k", k))
        )
        rows.append(
            IndexRow(
                suite=suite,
                snap=snap,
                k=k,
                trend=trend,
                alert=_model.worst_state(states[(suite, r.name)] for r in rules[suite]),
                rejected=rejected.get(suite, 0),
            )
        )
    return IndexPage(rows=rows, unattributed=rejected.get(None, 0), now=now)


async def suite_page(
    store: Store,
    config: Config,
    suite: str,
    *,
    now: float,
    k: int | None = None,
    focus: str | None = None,
    anchor: float | None = None,
    since: float | None = None,
) -> SuitePage | None:
    """A suite's page; None when Redis knows no such suite."""
    (snap,) = _noted([await store.snapshots.document(suite)])
    if snap is None and suite not in await store.reads.suites():
        return None
    rules = watching(config, suite)
    states = _noted(await store.alerts.alert_states([(suite, r.name) for r in rules]))
    if focus is not None and anchor is None:
        # An alert link without a time opens at the rule's latest breach.
        state = next((s for r, s in zip(rules, states, strict=True) if r.name == focus), None)
        anchor = state.started_at if isinstance(state, AlertState) else None
    t0, t1 = _model.time_range(now, anchor, since)
    history = await store.history.read(suite, since=t0, until=t1)
    readable = snap if isinstance(snap, Snapshot) else None
    shown = k if k is not None and readable is not None and readable.get("pass^k", k) else None
    shown = shown or _model.headline_k(snap, rules)
    points = _points(history)
    hat = [] if shown is None else _model.samples(points, _model.series_key("pass^k", shown))
    at = [] if shown is None else _model.samples(points, _model.series_key("pass@k", shown))
    names = {r.name for r in rules}
    transitions = [t for t in history.transitions if t.rule in names]
    t0 = _model.drawn_from(t0, t1, [s.t for s in hat + at] + [t.t for t in transitions], anchor)
    views = [
        RuleView(
            rule=r,
            state=s,
            transitions=[
                TransitionRow(t.t, t.state, t.severity) for t in transitions if t.rule == r.name
            ],
        )
        for r, s in zip(rules, states, strict=True)
    ]
    movers_rule, movers_since, movers = await _movers(store, config, suite, rules, views)
    letters = await store.reads.recent_deadletters(
        since=now - LETTERS_SINCE, suite=suite, limit=LETTERS
    )
    rejected = (await store.reads.rejected_counts(now)).get(suite, 0)
    ids = await store.reads.slices(suite) if readable is not None and readable.slices else []
    docs = _noted(await store.snapshots.documents([Series(suite, sid) for sid in ids]))
    slices = [(sid, doc) for sid, doc in zip(ids, docs, strict=True) if doc is not None]
    return SuitePage(
        suite=suite,
        snap=snap,
        k=shown,
        hat=hat,
        at=at,
        marks=[Mark(t.t, t.rule, t.state) for t in transitions],
        rules=views,
        movers=movers,
        movers_rule=movers_rule,
        movers_since=movers_since,
        letters=letters,
        rejected=rejected,
        t0=t0,
        t1=t1,
        anchor=anchor,
        focus=focus,
        now=now,
        slices=slices,
    )


async def _movers(
    store: Store, config: Config, suite: str, rules: Sequence[Rule], views: Sequence[RuleView]
) -> tuple[str | None, float | None, list[_model.Mover]]:
    """The tasks that moved most since the breach of the rule that needs a person most."""
    breached: list[tuple[RuleView, AlertState]] = []
    for v in views:
        s = v.state
        if isinstance(s, AlertState) and s.started_at is not None and s.state != "inactive":
            breached.append((v, s))
    if not breached:
        return None, None, []
    view, _ = max(breached, key=lambda vs: (_model.STATE_RANK[vs[1].state], vs[1].started_at))
    baseline = await store.alerts.baseline(suite, view.rule.name)
    if baseline is None:
        return None, None, []
    hashes = await store.reads.task_hashes(suite)
    window, _ = config.suite_settings(suite)
    # Every task of the suite, parsed and ranked: O(tasks) of Python, off the event loop.
    rows = await asyncio.to_thread(_movers_of, baseline.tasks, hashes, window > 0)
    return view.rule.name, baseline.at, rows


def _movers_of(
    before: dict[str, tuple[int, int]], hashes: TaskHashes, windowed: bool
) -> list[_model.Mover]:
    return _model.movers(before, task_counts_of(hashes), windowed=windowed, limit=MOVERS)
