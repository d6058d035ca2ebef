"""The pages as HTML: the index of suites and a suite's page. Pure: data in, text out.

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

from reliabilityd.daemon.ui._model import Mover, state_name
from reliabilityd.daemon.ui._svg import Mark, Sample, Threshold, chart, sparkline, utc
from reliabilityd.rules import AlertState, Rule
from reliabilityd.stats.estimate import Estimate
from reliabilityd.stats.slices import shown
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import DeadLetter, Undecodable

EXCERPT = 160  # characters of a dead letter's payload shown
_UNDECODABLE = '<span class="undecodable">undecodable</span>'


class TransitionRow(NamedTuple):
    t: float
    state: str
    severity: str | None


class RuleView(msgspec.Struct, frozen=True):
    rule: Rule
    state: AlertState | Undecodable
    transitions: list[TransitionRow]


class IndexRow(msgspec.Struct, frozen=True):
    suite: str
    snap: Snapshot | Undecodable | None
    k: int | None
    trend: list[Sample]
    alert: str
    rejected: int


class IndexPage(msgspec.Struct, frozen=True):
    rows: list[IndexRow]
    unattributed: int
    now: float


class SuitePage(msgspec.Struct, frozen=True, kw_only=True):
    suite: str
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
    # The newest snapshot of each of the suite's slices that has one, by slice id.
    slices: list[tuple[str, Snapshot | Undecodable]] = msgspec.field(default_factory=list)


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


def _num(x: float | None) -> str:
    return "UNKNOWN" if x is None else f"{x:.3f}"


def _ci(est: Estimate | None) -> str:
    if est is None or est.ci is None:
        return "&ndash;"
    return f"[{est.ci[0]:.3f}, {est.ci[1]:.3f}]"


def _ago(then: float | None, now: float) -> str:
    if then is None:
        return "never"
    s = max(0.0, now - then)
    if s < 120:
        text = f"{s:.0f} s ago"
    elif s < 7200:
        text = f"{s / 60:.0f} min ago"
    elif s < 172800:
        text = f"{s / 3600:.0f} h ago"
    else:
        text = f"{s / 86400:.0f} days ago"
    return f'<time datetime="{then!r}" title="{utc(then)}">{text}</time>'


def _state(state: str) -> str:
    return f'<span class="state {escape(state)}">{escape(state)}</span>'


def _parse_time(text: str | None) -> float | None:
    from datetime import datetime

    return None if text is None else datetime.fromisoformat(text).timestamp()


def index_main(page: IndexPage) -> str:
    parts = ["<h1>Suites</h1>"]
    if not page.rows:
        parts.append('<p class="empty">No suites yet: publish a trial event to start one.</p>')
    else:
        parts.append(
            '<div class="scroll"><table class="suites"><thead><tr><th>suite</th>'
            "<th>pass^k</th><th>interval</th><th>trend</th><th>alert</th>"
            "<th>last trial</th><th>rejected (1 h)</th></tr></thead><tbody>"
        )
        for row in page.rows:
            snap = row.snap if isinstance(row.snap, Snapshot) else None
            est = None if snap is None or row.k is None else snap.get("pass^k", row.k)
            label = "" if row.k is None else f'<span class="k">k={row.k}</span> '
            last = None if snap is None else _parse_time(snap.last_trial_at)
            value = _num(None if est is None else est.value)
            if isinstance(row.snap, Undecodable):
                value = _UNDECODABLE
            parts.append(
                f'<tr class="suite" data-suite="{escape(row.suite)}">'
                f'<td><a href="{escape(suite_href(row.suite))}">{escape(row.suite)}</a></td>'
                f'<td class="value">{label}{value}</td>'
                f"<td>{_ci(est)}</td><td>{sparkline(row.trend)}</td>"
                f"<td>{_state(row.alert)}</td><td>{_ago(last, page.now)}</td>"
                f'<td class="rejected">{row.rejected}</td></tr>'
            )
        parts.append("</tbody></table></div>")
    parts.append(
        f'<p class="note">Rejected in the last hour without a suite named: '
        f'<span class="unattributed">{page.unattributed}</span>. '
        f"Updated {utc(page.now)}.</p>"
    )
    return "".join(parts)


def _estimates_table(snap: Snapshot) -> str:
    rows = []
    for hat in snap.pass_hat_k:
        at = snap.get("pass@k", hat.k)
        rows.append(
            f"<tr><td>{hat.k}</td><td>{_num(hat.value)}</td><td>{_ci(hat)}</td>"
            f"<td>{_num(None if at is None else at.value)}</td><td>{_ci(at)}</td>"
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
    )


def _slices(page: SuitePage) -> str:
    """Each slice's pass^k at the page's k with its interval, and its size."""
    k = page.k
    rows = []
    for sid, snap in page.slices:
        if isinstance(snap, Undecodable):
            rows.append(
                f"<tr><td>{escape(shown(sid))}</td><td>{_UNDECODABLE}</td><td>&ndash;</td>"
                "<td>&ndash;</td><td>&ndash;</td></tr>"
            )
            continue
        est = None if k is None else snap.get("pass^k", k)
        rows.append(
            f"<tr><td>{escape(shown(sid))}</td>"
            f"<td>{_num(None if est is None else est.value)}</td><td>{_ci(est)}</td>"
            f"<td>{snap.tasks}</td><td>{snap.trials}</td></tr>"
        )
    head = "pass^k" if k is None else f"pass^{k}"
    return (
        '<div class="scroll"><table class="slices"><thead><tr><th>slice</th>'
        f"<th>{head}</th><th>interval</th><th>tasks</th><th>trials</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></div>"
    )


def _rules(page: SuitePage) -> str:
    if not page.rules:
        return '<p class="empty">No alert rule watches this suite.</p>'
    parts = []
    for view in sorted(page.rules, key=lambda v: v.rule.name != page.focus):
        r, s = view.rule, view.state
        focus = " focus" if r.name == page.focus else ""
        if isinstance(s, Undecodable):
            since = f" (undecodable: {escape(s.error)}; the next transition replaces it)"
            ended = ""
        else:
            since = "" if s.started_at is None else f", breach since {utc(s.started_at)}"
            ended = (
                ""
                if s.ended_at is None or s.state != "resolved"
                else f", resolved {utc(s.ended_at)}"
            )
        history = (
            "".join(
                f'<li data-t="{t.t!r}">{utc(t.t)} {_state(t.state)}</li>' for t in view.transitions
            )
            or "<li>no transition in this range</li>"
        )
        parts.append(
            f'<section class="rule{focus}" id="rule-{escape(r.name)}" data-rule="{escape(r.name)}">'
            f"<h3>{escape(r.name)} {_state(state_name(s))}</h3>"
            f"<p>{escape(r.metric)} at k={r.k}: fires when the lower bound is below "
            f"{r.below:.3f}, resolves at {r.resolve_at:.3f}; {escape(r.trigger)} trigger"
            f'{since}{ended}.</p><ul class="transitions">{history}</ul></section>'
        )
    return "".join(parts)


def _movers(page: SuitePage) -> str:
    if page.movers_rule is None or page.movers_since is None:
        return '<p class="empty">No breach has begun on this suite yet.</p>'
    head = (
        f"<p>Since {escape(page.movers_rule)} began breaching at {utc(page.movers_since)}: "
        "each task's pass rate before and after.</p>"
    )
    if not page.movers:
        return head + '<p class="empty">No task has moved since then.</p>'
    rows = "".join(
        f"<tr><td>{escape(m.task)}</td><td>{m.before_c}/{m.before_n}</td>"
        f"<td>{m.after_c}/{m.after_n}</td><td>{m.change:+.2f}</td></tr>"
        for m in page.movers
    )
    return (
        head + '<div class="scroll"><table class="movers"><thead><tr><th>task</th>'
        "<th>before</th><th>after</th><th>change</th></tr></thead><tbody>"
        + rows
        + "</tbody></table></div>"
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
        Threshold(v.rule.name, v.rule.below)
        for v in page.rules
        if v.rule.metric == metric and v.rule.k == page.k
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
    parts = [f"<h1>{escape(page.suite)}</h1>"]
    if page.focus is not None:
        view = next((v for v in page.rules if v.rule.name == page.focus), None)
        state = "unknown rule" if view is None else state_name(view.state)
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
        last = _parse_time(snap.last_trial_at)
        parts.append(
            f'<p class="facts">{snap.tasks} tasks, {snap.trials} trials, {snap.errors} errors, '
            f"{snap.skips} skips; last trial {_ago(last, page.now)}; "
            f'rejected in the last hour: <span class="rejected">{page.rejected}</span></p>'
        )
        parts.append(_estimates_table(snap))
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
    if lottery:
        parts.append(
            '<div class="scroll"><table class="lottery"><thead><tr><th>task</th><th>n</th>'
            "<th>c</th></tr></thead><tbody>"
            + "".join(
                f"<tr><td>{escape(r.task)}</td><td>{r.n}</td><td>{r.c}</td></tr>" for r in lottery
            )
            + "</tbody></table></div>"
        )
    else:
        parts.append('<p class="empty">No task passes only sometimes.</p>')
    parts.append("<h2>Recent dead letters</h2>" + _letters(page))
    parts.append(f'<p class="note">Updated {utc(page.now)}.</p>')
    return "".join(parts)
