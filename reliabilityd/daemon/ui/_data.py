"""What the pages read from Redis, through the Store: snapshots, alert states, history,
breach baselines, dead letters and rejected counts. Every read is the Store's; the
numbers shown are what any other reader of Redis sees. The rules a page lists are the
registry's (``alerting.registry``), as on every other surface. A document the store
cannot decode (``store.Undecodable``) is shown as undecodable and logged, never decoded
here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from reliabilityd.alerting import registry
from reliabilityd.alerting.registry import Watched
from reliabilityd.config import Config
from reliabilityd.daemon.ui import _model
from reliabilityd.daemon.ui._index import IndexPage, IndexRow
from reliabilityd.daemon.ui._pages import (
    RuleView,
    SliceCard,
    SuitePage,
    TransitionRow,
)
from reliabilityd.daemon.ui._svg import Mark, Sample
from reliabilityd.daemon.ui._trials import TaskPage, moved_failures
from reliabilityd.rules import AlertState, Rule
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import (
    Series,
    Store,
    TaskHashes,
    TrialRecord,
    Undecodable,
    UndecodableLog,
    linked,
    task_counts_of,
)

if TYPE_CHECKING:
    from reliabilityd.stats.history import Estimate3, History, Transition

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


def thresholds(watched: Sequence[Watched], suite: str, slice: str | None = None) -> list[Rule]:
    """The threshold rules that judge the series itself (a suite's, or one slice's)."""
    return [
        w.watch.rule
        for w in watched
        if isinstance(w.watch.rule, Rule) and w.watch.suite == suite and w.watch.slice == slice
    ]


def _points(history: History) -> list[tuple[float, dict[str, Estimate3]]]:
    return [(p.t, p.values) for p in history.points]


def _minima(history: History) -> dict[float, dict[str, float | None]]:
    return {p.t: p.minima for p in history.points}


PAGE_ROWS = 100  # suites on a page of the index


async def index(
    store: Store,
    now: float,
    *,
    page: int = 1,
    state: str | None = None,
    prefix: str = "",
    contains: str = "",
    readable: Callable[[list[str]], list[str]] | None = None,
) -> IndexPage:
    """A page of the index from the summary rows (``store.rows``): ``PAGE_ROWS`` suites by
    name, in ``state``, starting with ``prefix``, holding ``contains``; each with its
    headline value, interval, day's trend, alerts and dead letters of the last hour (read
    with the page's rows: ``Rows.page``). A few round trips
    whatever the number of suites; ``readable`` keeps the suites a token may read (None:
    every one)."""
    found = await store.rows.page(
        offset=(page - 1) * PAGE_ROWS,
        limit=PAGE_ROWS,
        state=state,
        prefix=prefix,
        contains=contains,
        readable=readable,
        now=now,
    )
    _noted(found.rows)
    rows = [
        IndexRow(
            suite=suite,
            row=row,
            # None: no rule watches the suite (no state to show).
            alert=None if st == "none" else st,
            rejected=rejected,
        )
        for suite, row, st, rejected in zip(
            found.suites, found.rows, found.states, found.rejected, strict=True
        )
    ]
    return IndexPage(
        rows=rows,
        unattributed=found.unattributed,
        now=now,
        total=found.total,
        page=page,
        pages=max(1, -(-found.total // PAGE_ROWS)),
        state=state,
        prefix=prefix,
        contains=contains,
        page_size=PAGE_ROWS,
    )


async def suite_page(
    store: Store,
    config: Config,
    suite: str,
    *,
    now: float,
    slice: str | None = None,
    k: int | None = None,
    focus: str | None = None,
    anchor: float | None = None,
    since: float | None = None,
) -> SuitePage | None:
    """A suite's page, or with ``slice`` one slice's; None when Redis knows no such series."""
    (snap,) = _noted([await store.snapshots.document(suite, slice=slice)])
    if snap is None:
        if suite not in await store.reads.suites():
            return None
        if slice is not None and slice not in await store.reads.slices(suite):
            return None
    watched = await registry.statuses(store, config.alerts, suite=suite, slice=slice)
    _noted([w.state for w in watched])
    if focus is not None and anchor is None:
        # An alert link without a time opens at the rule's latest breach.
        state = next((w.state for w in watched if w.watch.name == focus), None)
        anchor = state.started_at if isinstance(state, AlertState) else None
    t0, t1 = _model.time_range(now, anchor, since)
    history = await store.history.read(suite, slice=slice, since=t0, until=t1)
    own = thresholds(watched, suite, slice)
    readable = snap if isinstance(snap, Snapshot) else None
    shown = k if k is not None and readable is not None and readable.get("pass^k", k) else None
    shown = shown or _model.headline_k(snap, own)
    points = _points(history)
    lows = _minima(history)
    hat = [] if shown is None else _model.samples(points, _model.series_key("pass^k", shown), lows)
    at = [] if shown is None else _model.samples(points, _model.series_key("pass@k", shown), lows)
    transitions = await registry.transitions(
        store,
        [w.watch for w in watched],
        since=t0,
        until=t1,
        known={Series(suite, slice): history.transitions},
    )
    # The charts mark the transitions of the rules that judge this series and of the
    # canaries that read it; a slice rule's are on its slice's page.
    marked = {w.watch.name for w in watched if w.watch.slice == slice}
    drawn = [t for t in transitions if t.rule in marked]
    views = []
    for w in watched:
        diff = []
        if w.watch.pair is not None:
            diff = [
                Sample(t, v, lo, hi)
                for t, v, lo, hi in await store.alerts.canary_points(
                    w.watch.suite, w.watch.name, since=t0
                )
            ]
        own_marks = [t.t for t in transitions if _of(t, w)]
        views.append(
            RuleView(
                watched=w,
                transitions=[_row(t) for t in transitions if _of(t, w)],
                points=diff,
                # A canary's chart spreads its own points over its axis.
                t0=_model.drawn_from(t0, t1, [p.t for p in diff] + own_marks, anchor)
                if diff
                else None,
            )
        )
    t0 = _model.drawn_from(t0, t1, [s.t for s in hat + at] + [t.t for t in drawn], anchor)
    movers_rule, movers_since, movers = await _movers(store, config, views)
    letters = await store.reads.recent_deadletters(
        since=now - LETTERS_SINCE, suite=suite, limit=LETTERS
    )
    rejected = await store.reads.rejected_of(suite, now)
    slices = [] if slice is not None else await _slices(store, suite, readable, watched, now)
    shown_tasks = [r.task for r in readable.lottery.rows] if readable is not None else []
    trials, kept = await _trials_of(store, config, suite, shown_tasks + [m.task for m in movers])
    # A task's trials since the breach are its newest after_n (n less n at the breach)
    # when its counts are the whole suite's and grow: no window, not a slice's counts
    # (the trials kept are the whole suite's); else their times say.
    of_slice = next((v.watched.watch.slice for v in views if v.name == movers_rule), None)
    exact = config.suite_settings(suite)[0] == 0 and of_slice is None
    moved = {
        m.task: moved_failures(
            trials.get(m.task, []),
            since=movers_since or 0.0,
            after=m.after_n if exact else None,
        )
        for m in movers
    }
    return SuitePage(
        suite=suite,
        slice=slice,
        snap=snap,
        k=shown,
        hat=hat,
        at=at,
        marks=[Mark(t.t, t.rule, t.state) for t in drawn],
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
        below=_model.below_at(own, "pass^k", shown),
        trials=trials,
        kept=kept,
        moved=moved,
    )


async def _trials_of(
    store: Store, config: Config, suite: str, tasks: Sequence[str]
) -> tuple[dict[str, list[TrialRecord]], int]:
    """The last trials of ``tasks``, each with its link, in one round trip for all of
    them (``Reads.task_trials``), and the number the suite keeps per task (0: none)."""
    recent = config.recent(suite)
    if recent is None or not tasks:
        return {}, 0 if recent is None else recent.trials
    read = await store.reads.task_trials(suite, tasks, keep=recent.trials)
    base, template = config.links(suite)
    return {
        task: linked(records, suite, base=base, template=template)
        for task, records in read.trials.items()
    }, recent.trials


async def task_page(
    store: Store, config: Config, suite: str, task: str, *, now: float
) -> TaskPage | None:
    """One task's view: its counts and last trials, linked; None when the suite holds no
    such task (never counted, forgotten or expired). One round trip."""
    recent = config.recent(suite)
    read = await store.reads.task_trials(suite, [task], keep=1 if recent is None else recent.trials)
    if task not in read.counts:
        return None
    n, c = read.counts[task]
    base, template = config.links(suite)
    records = [] if recent is None else read.trials.get(task, [])
    return TaskPage(
        suite=suite,
        task=task,
        n=n,
        c=c,
        kept=0 if recent is None else recent.trials,
        trials=linked(records, suite, base=base, template=template),
        now=now,
        window=config.suite_settings(suite)[0],
    )


def _row(t: Transition) -> TransitionRow:
    return TransitionRow(t.t, t.state, t.severity)


def _of(t: Transition, w: Watched) -> bool:
    return t.rule == w.watch.name


async def _slices(
    store: Store, suite: str, snap: Snapshot | None, watched: Sequence[Watched], now: float
) -> list[SliceCard]:
    """Each slice side by side: its snapshot, its day's trend, its rules' worst state."""
    ids = await store.reads.slices(suite) if snap is not None and snap.slices else []
    if not ids:
        return []
    series = [Series(suite, sid) for sid in ids]
    docs = _noted(await store.snapshots.documents(series))
    histories = await store.history.read_many(series, since=now - _model.DAY, until=now)
    cards = []
    for sid, doc, hist in zip(ids, docs, histories, strict=True):
        if doc is None:
            continue
        mine = [w for w in watched if w.watch.slice == sid]
        own = thresholds(mine, suite, sid)
        k = _model.headline_k(doc, own) or _model.headline_k(snap, thresholds(watched, suite))
        cards.append(
            SliceCard(
                slice=sid,
                snap=doc,
                k=k,
                trend=[]
                if k is None
                else _model.samples(_points(hist), _model.series_key("pass^k", k)),
                alert=_model.worst_state(w.state for w in mine) if mine else None,
                below=_model.below_at(own, "pass^k", k),
            )
        )
    return cards


async def _movers(
    store: Store, config: Config, views: Sequence[RuleView]
) -> tuple[str | None, float | None, list[_model.Mover]]:
    """The tasks that moved most since the breach of the threshold rule (on the suite or a
    slice) that needs a person most; a canary shows its worse tasks on its own card."""
    breached: list[tuple[RuleView, AlertState]] = []
    for v in views:
        s = v.watched.state
        if (
            v.watched.watch.pair is None
            and isinstance(s, AlertState)
            and s.started_at is not None
            and s.state != "inactive"
        ):
            breached.append((v, s))
    if not breached:
        return None, None, []
    view, _ = max(breached, key=lambda vs: (_model.STATE_RANK[vs[1].state], vs[1].started_at))
    watch = view.watched.watch
    baseline = await store.alerts.baseline(watch.suite, watch.name)
    if baseline is None:
        return None, None, []
    hashes = [await store.reads.series_task_hash(Series(watch.suite, watch.slice))]
    window, _ = config.suite_settings(watch.suite)
    # Every task of the series, parsed and ranked: O(tasks) of Python, off the event loop.
    rows = await asyncio.to_thread(_movers_of, baseline.tasks, hashes, window > 0)
    return watch.name, baseline.at, rows


def _movers_of(
    before: dict[str, tuple[int, int]], hashes: TaskHashes, windowed: bool
) -> list[_model.Mover]:
    return _model.movers(before, task_counts_of(hashes), windowed=windowed, limit=MOVERS)
