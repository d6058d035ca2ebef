"""The pages as HTML: a suite's page and a slice's, and the layout every page shares. Pure.

The index of suites is ``_index``.

Numbers are percent as ``reliabilityd status`` prints them (a canary's
difference in percentage points); a number a rule judges is in the firing
colour while it is under the rule's threshold. Every rule is the registry's
(``alerting.registry``), described by its trigger (``rules.registry.describe``).

Every value that came from outside (suite, task and rule names, dead-letter
reasons and payloads) is escaped. A page is a layout around a ``<main>``
whose inner HTML is also served alone as the fragment the refresh script
swaps in.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import NamedTuple
from urllib.parse import quote, urlencode

import msgspec

from reliabilityd.alerting.registry import Watched
from reliabilityd.daemon.ui import _trials
from reliabilityd.daemon.ui._model import Mover, state_name
from reliabilityd.daemon.ui._svg import Mark, Sample, Threshold, chart, pct, sparkline, utc
from reliabilityd.daemon.ui._trials import ago
from reliabilityd.rules import CanaryRule, Rule
from reliabilityd.rules.registry import describe
from reliabilityd.stats.estimate import Estimate
from reliabilityd.stats.slices import shown
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import DeadLetter, TrialRecord, Undecodable

EXCERPT = 160  # characters of a dead letter's payload shown
UNDECODABLE = '<span class="undecodable">undecodable</span>'


class TransitionRow(NamedTuple):
    t: float
    state: str
    severity: str | None


class RuleView(msgspec.Struct, frozen=True):
    """One of the registry's watches as a card: its state, transitions in range and, for a
    canary, its difference over time."""

    watched: Watched
    transitions: list[TransitionRow]
    points: list[Sample] = msgspec.field(default_factory=list)
    # Where a canary's difference chart begins (None: the page's charts' start).
    t0: float | None = None

    @property
    def name(self) -> str:
        return self.watched.watch.name


class SliceCard(msgspec.Struct, frozen=True):
    """One slice beside the others on its suite's page."""

    slice: str
    snap: Snapshot | Undecodable
    k: int | None
    trend: list[Sample]
    alert: str | None
    below: float | None = None


class SuitePage(msgspec.Struct, frozen=True, kw_only=True):
    suite: str
    # A slice's page: its id (the suite's page: None).
    slice: str | None = None
    snap: Snapshot | Undecodable | None
    k: int | None
    hat: list[Sample]
    at: list[Sample]
    marks: list[Mark]
    rules: list[RuleView]
    movers: list[Mover]
    movers_rule: str | None
    movers_since: float | None
    letters: list[DeadLetter]
    rejected: int
    t0: float
    t1: float
    anchor: float | None
    focus: str | None
    now: float
    # Each of the suite's slices that has a snapshot, side by side.
    slices: list[SliceCard] = msgspec.field(default_factory=list)
    # The highest threshold a rule judges the page's pass^k at its k against.
    below: float | None = None
    # The last trials (linked) of the tasks the page shows: lottery cases, movers.
    trials: dict[str, list[TrialRecord]] = msgspec.field(default_factory=dict)
    # Trials kept per task (0: the suite keeps none).
    kept: int = 0
    # Each task that moved: the failures among its trials since the breach began.
    moved: dict[str, list[TrialRecord]] = msgspec.field(default_factory=dict)


def suite_href(suite: str, **query: str) -> str:
    path = f"/suites/{quote(suite, safe='')}"
    return f"{path}?{urlencode(query)}" if query else path


def layout(title: str, main: str, *, refresh: str | None) -> str:
    """A whole page: the head, then ``main``; ``refresh`` is the fragment URL to poll."""
    poll = f' data-refresh="{escape(refresh)}"' if refresh else ""
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="color-scheme" content="light dark">'
        f"<title>{escape(title)}</title>"
        '<link rel="stylesheet" href="/ui/static/ui.css">'
        '<script src="/ui/static/ui.js" defer></script>'
        "</head><body>"
        '<header class="top"><a href="/">reliabilityd</a></header>'
        f'<main id="content"{poll}>{main}</main>'
        "</body></html>\n"
    )


def percent(x: float | None, below: float | None = None) -> str:
    """A ratio in percent; in the firing colour (``num under``) when under ``below``."""
    if x is None:
        return '<span class="num unknown">UNKNOWN</span>'
    if below is not None and x < below:
        return f'<span class="num under" title="under the rule\'s {pct(below)}">{pct(x)}</span>'
    return f'<span class="num">{pct(x)}</span>'


def _ci(est: Estimate | None) -> str:
    if est is None or est.ci is None:
        return "&ndash;"
    return f"[{100 * est.ci[0]:.1f}, {100 * est.ci[1]:.1f}]"


def _pp(x: float | None) -> str:
    return "UNKNOWN" if x is None else f"{100 * x:+.1f} pp"


def slice_href(suite: str, sid: str, **query: str) -> str:
    return suite_href(suite, slice=sid, **query)


def alert_cell(alert: str | None) -> str:
    """The state that needs a person most, or that no rule watches (no badge)."""
    return '<span class="norule">no rule</span>' if alert is None else _state(alert)


def _state(state: str) -> str:
    return f'<span class="state {escape(state)}">{escape(state)}</span>'


def time_of(text: str | None) -> float | None:
    from datetime import datetime

    return None if text is None else datetime.fromisoformat(text).timestamp()


def _estimates_table(snap: Snapshot, rules: Sequence[Rule]) -> str:
    rows = []
    for hat in snap.pass_hat_k:
        at = snap.get("pass@k", hat.k)
        below = max((r.below for r in rules if r.metric == "pass^k" and r.k == hat.k), default=None)
        at_below = max(
            (r.below for r in rules if r.metric == "pass@k" and r.k == hat.k), default=None
        )
        rows.append(
            f"<tr><td>{hat.k}</td><td>{percent(hat.value, below)}</td><td>{_ci(hat)}</td>"
            f"<td>{percent(None if at is None else at.value, at_below)}</td><td>{_ci(at)}</td>"
            f"<td>{hat.tasks}</td><td>{hat.runs}</td></tr>"
        )
        if hat.unknown_reason:
            rows.append(
                f'<tr class="reason"><td colspan="7">{escape(hat.unknown_reason)}</td></tr>'
            )
    return (
        '<div class="scroll"><table class="estimates"><thead><tr><th>k</th><th>pass^k</th>'
        "<th>interval</th><th>pass@k</th><th>interval</th><th>tasks</th>"
        '<th title="the fewest trials any task used has">runs</th></tr></thead><tbody>'
        + "".join(rows)
        + "</tbody></table></div>"
        '<p class="note legend">pass^k: the chance a task passes all of k tries; pass@k: '
        "that it passes at least one of k; both averaged over the tasks, in percent, each "
        "with its 95% interval. tasks: the tasks estimated at that k; runs: the fewest "
        "trials among them (a task with fewer than k trials is left out).</p>"
    )


def _slices(page: SuitePage) -> str:
    """The suite's slices side by side, each a card with its value, interval, trend and
    state; the one that needs a person most (or the lowest under its rule) singled out."""
    failing = _failing(page.slices)
    cards = []
    for card in page.slices:
        sid = escape(card.slice)
        href = escape(slice_href(page.suite, card.slice))
        single = " failing" if card.slice == failing else ""
        head = (
            f'<p class="slice-name"><a href="{href}">{escape(shown(card.slice))}</a> '
            f"{alert_cell(card.alert)}</p>"
        )
        if isinstance(card.snap, Undecodable):
            cards.append(
                f'<section class="slice{single}" data-slice="{sid}">{head}'
                f"<p>{UNDECODABLE}</p></section>"
            )
            continue
        est = None if card.k is None else card.snap.get("pass^k", card.k)
        label = "pass^k" if card.k is None else f"pass^{card.k}"
        cards.append(
            f'<section class="slice{single}" data-slice="{sid}">{head}'
            f'<p class="value">{label} {percent(None if est is None else est.value, card.below)} '
            f'<span class="ci">{_ci(est)}</span></p>{sparkline(card.trend)}'
            f'<p class="facts">{card.snap.tasks} tasks, {card.snap.trials} trials</p></section>'
        )
    note = (
        ""
        if failing is None
        else f'<p class="failing-slice">Failing: <a href="'
        f'{escape(slice_href(page.suite, failing))}">{escape(shown(failing))}</a></p>'
    )
    return note + '<div class="slices">' + "".join(cards) + "</div>"


def _failing(cards: Sequence[SliceCard]) -> str | None:
    """The slice to single out: the worst rule state among firing and pending, else the
    lowest value under its rule's threshold; None when no slice fails."""
    rank = {"firing": 2, "pending": 1}
    worst = [c for c in cards if c.alert in rank]
    if worst:
        return max(worst, key=lambda c: rank[c.alert or ""]).slice
    under = []
    for c in cards:
        if isinstance(c.snap, Snapshot) and c.k is not None and c.below is not None:
            est = c.snap.get("pass^k", c.k)
            if est is not None and est.value is not None and est.value < c.below:
                under.append((est.value, c.slice))
    return min(under)[1] if under else None


def _rules(page: SuitePage) -> str:
    if not page.rules:
        what = "slice" if page.slice is not None else "suite"
        return f'<p class="empty">No alert rule watches this {what}.</p>'
    parts = []
    for view in sorted(page.rules, key=lambda v: v.name != page.focus):
        w, s = view.watched.watch, view.watched.state
        name = escape(w.name)
        focus = " focus" if w.name == page.focus else ""
        if isinstance(s, Undecodable):
            since = f"Undecodable: {escape(s.error)}; the next transition replaces it."
        else:
            since = "" if s.started_at is None else f"Breach since {utc(s.started_at)}"
            if s.ended_at is not None and s.state == "resolved":
                since += f"{'; r' if since else 'R'}esolved {utc(s.ended_at)}"
            since = f"{since}." if since else ""
        where = ""
        if w.slice is not None and page.slice is None:
            where = (
                f'<p class="where">On the slice <a href="'
                f'{escape(slice_href(w.suite, w.slice, rule=w.name))}">'
                f"{escape(shown(w.slice))}</a>.</p>"
            )
        history = (
            "".join(
                f'<li data-t="{t.t!r}">{utc(t.t)} {_state(t.state)}</li>' for t in view.transitions
            )
            or "<li>no transition in this range</li>"
        )
        kind = "canary" if isinstance(w.rule, CanaryRule) else "threshold"
        parts.append(
            f'<section class="rule {kind}{focus}" id="rule-{name}" data-rule="{name}">'
            f"<h3>{name} {_state(state_name(s))}</h3>{where}"
            f'<p class="trigger">{escape(describe(w))}</p>'
            + (_canary(page, view) if kind == "canary" else "")
            + (f'<p class="since">{since}</p>' if since else "")
            + f'<ul class="transitions">{history}</ul></section>'
        )
    return "".join(parts)


def _canary(page: SuitePage, view: RuleView) -> str:
    """A canary's card body: both sides, the latest difference with its interval, its
    difference over time, and the tasks that got worse."""
    w = view.watched.watch
    rule = w.rule
    assert isinstance(rule, CanaryRule)
    v = view.watched.view
    sides = (
        f'<p class="sides">baseline <strong class="baseline">{escape(w.baseline or "")}'
        f'</strong>, candidate <strong class="candidate">{escape(w.candidate or "")}'
        "</strong></p>"
    )
    if v is None:
        return sides + '<p class="empty">Not compared yet: the next CI tick compares.</p>'
    d = v.detail
    ci = "" if v.ci is None else f" [{_pp(v.ci[0])}, {_pp(v.ci[1])}]"
    worse = v.value is not None and v.ci is not None and v.ci[1] < -rule.margin
    cls = "num under" if worse else "num"
    metric = rule.metric.replace("k", str(rule.k))
    means = (
        ""
        if d.baseline_value is None or d.candidate_value is None
        else f" ({metric} {pct(d.candidate_value)} against {pct(d.baseline_value)})"
    )
    unknown = f" {escape(d.unknown_reason)}" if d.unknown_reason else ""
    parts = [
        sides,
        f'<p class="difference">candidate - baseline: <span class="{cls}">{_pp(v.value)}</span>'
        f'<span class="ci">{ci}</span>{means} over {d.shared} shared tasks, '
        f"compared {ago(v.at, page.now)}.{unknown}</p>",
    ]
    if view.points:
        parts.append(
            f'<figure class="series difference" data-rule="{escape(w.name)}">'
            f"<figcaption>{escape(metric)} difference with its interval</figcaption>"
            + chart(
                view.points,
                t0=page.t0 if view.t0 is None else view.t0,
                t1=page.t1,
                label=f"{metric} difference",
                marks=[Mark(t.t, w.name, t.state) for t in view.transitions],
                thresholds=[Threshold(w.name, -rule.margin)],
                anchor=page.anchor,
                domain=(-1.0, 1.0),
            )
            + "</figure>"
        )
    if d.worse:
        rows = "".join(
            f"<tr><td>{escape(m.task)}</td><td>{m.baseline_c}/{m.baseline_n}</td>"
            f"<td>{m.candidate_c}/{m.candidate_n}</td><td>{_pp(m.change)}</td></tr>"
            for m in d.worse
        )
        parts.append(
            '<div class="scroll"><table class="worse"><thead><tr><th>task</th>'
            "<th>baseline c/n</th><th>candidate c/n</th><th>change</th></tr></thead><tbody>"
            + rows
            + "</tbody></table></div>"
            '<p class="note legend">c/n: the trials a task passed of the trials counted '
            "for it (its window's, with a window) on each side.</p>"
        )
    return "".join(parts)


def _movers(page: SuitePage) -> str:
    if page.movers_rule is None or page.movers_since is None:
        what = "slice" if page.slice is not None else "suite"
        return f'<p class="empty">No threshold rule has begun a breach on this {what} yet.</p>'
    return _trials.movers(
        page.suite,
        rule=page.movers_rule,
        since=page.movers_since,
        rows=page.movers,
        moved=page.moved,
        now=page.now,
    )


def _letters(page: SuitePage) -> str:
    if not page.letters:
        return '<p class="empty">No dead letter names this suite.</p>'
    rows = []
    for d in page.letters:
        excerpt = d.payload[: EXCERPT * 4].decode(errors="replace")[:EXCERPT]
        rows.append(
            f'<tr class="letter"><td>{utc(d.time)}</td><td>{escape(d.source)}</td>'
            f'<td class="reason">{escape(d.reason)}</td>'
            f"<td><code>{escape(excerpt)}{'&hellip;' if d.truncated else ''}</code></td></tr>"
        )
    return (
        '<div class="scroll"><table class="letters"><thead><tr><th>time</th><th>source</th>'
        "<th>reason</th><th>payload</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></div>"
    )


def _chart(page: SuitePage, metric: str, samples: Sequence[Sample]) -> str:
    label = metric.replace("k", str(page.k)) if page.k is not None else metric
    thresholds = [
        Threshold(v.name, r.below)
        for v in page.rules
        if isinstance(r := v.watched.watch.rule, Rule)
        and v.watched.watch.slice == page.slice
        and r.metric == metric
        and r.k == page.k
    ]
    return (
        f'<figure class="series" data-metric="{escape(metric)}">'
        f"<figcaption>{escape(label)} with its interval</figcaption>"
        + chart(
            samples,
            t0=page.t0,
            t1=page.t1,
            label=label,
            marks=page.marks,
            thresholds=thresholds,
            anchor=page.anchor,
        )
        + "</figure>"
    )


def suite_main(page: SuitePage) -> str:
    snap = page.snap
    if page.slice is None:
        parts = [f"<h1>{escape(page.suite)}</h1>"]
    else:
        parts = [
            f'<h1>{escape(page.suite)} <span class="slice-id">[{escape(shown(page.slice))}]'
            "</span></h1>"
            f'<p class="note">One slice of <a href="{escape(suite_href(page.suite))}">'
            f"{escape(page.suite)}</a>, from its own snapshot and history.</p>"
        ]
    if page.focus is not None:
        view = next((v for v in page.rules if v.name == page.focus), None)
        state = "unknown rule" if view is None else state_name(view.watched.state)
        at = "" if page.anchor is None else f" at {utc(page.anchor)}"
        parts.append(
            f'<p class="banner">Opened at alert <a href="#rule-{escape(page.focus)}">'
            f"{escape(page.focus)}</a>{at}: now {_state(state)}</p>"
        )
    if snap is None:
        parts.append('<p class="empty">No snapshot yet: the first CI tick writes one.</p>')
    elif isinstance(snap, Undecodable):
        parts.append(
            '<p class="empty undecodable">The stored snapshot is undecodable (written by '
            f"another version of reliabilityd, or damaged: {escape(snap.error)}); the next "
            "snapshot of this suite replaces it.</p>"
        )
    else:
        last = time_of(snap.last_trial_at)
        parts.append(
            f'<p class="facts">{snap.tasks} tasks, {snap.trials} trials, {snap.errors} errors, '
            f"{snap.skips} skips; last trial {ago(last, page.now)}; "
            f'rejected in the last hour: <span class="rejected">{page.rejected}</span></p>'
        )
        own = [
            r
            for v in page.rules
            if isinstance(r := v.watched.watch.rule, Rule) and v.watched.watch.slice == page.slice
        ]
        parts.append(_estimates_table(snap, own))
        if page.slices:
            parts.append("<h2>Slices</h2>" + _slices(page))
    parts.append(f'<h2>Over time</h2><p class="range">{utc(page.t0)} to {utc(page.t1)}</p>')
    parts.append('<div class="charts">')
    parts.append(_chart(page, "pass^k", page.hat))
    parts.append(_chart(page, "pass@k", page.at))
    parts.append("</div>")
    parts.append("<h2>Alert rules</h2>" + _rules(page))
    parts.append("<h2>Tasks that moved</h2>" + _movers(page))
    readable = snap if isinstance(snap, Snapshot) else None
    lottery = [] if readable is None else readable.lottery.rows
    at_k = "" if readable is None else f" at k={readable.lottery.k}"
    parts.append(f"<h2>Lottery cases{at_k}</h2>")
    cases = [(r.task, r.n, r.c) for r in lottery]
    parts.append(_trials.lottery(page.suite, cases, page.trials, page.kept, page.now))
    parts.append("<h2>Recent dead letters</h2>" + _letters(page))
    parts.append(f'<p class="note">Updated {utc(page.now)}.</p>')
    return "".join(parts)
