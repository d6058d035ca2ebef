"""A task's recent trials on the pages, with their links. Pure.

The task view (``/suites/<suite>/tasks/<task>``): the task's last trials,
newest first, each with its outcome, time, run and link. On a suite's page:
each lottery case's last failing and last passing trial side by side (the
debugging advice: diff the passing trial against the failing one), and the
failing trials that moved each of the tasks that moved.

A link is the suite's ``url_template`` filled in, else the event's ``url``
(a relative one resolved against ``url_base``: ``store.linked``). Only an
absolute ``http`` / ``https`` link becomes an anchor, opened with
``rel="noopener noreferrer"``; anything else (a relative path without a base)
is shown as text. Every name, run and link is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from urllib.parse import quote, urlsplit

import msgspec

from reliabilityd.daemon.ui._model import Mover
from reliabilityd.daemon.ui._svg import utc
from reliabilityd.store import TrialRecord

DOCS = "docs/drill-down.md"
# Failing trials listed beside a task that moved; the task's view lists them all.
MOVED_FAILURES = 3
NONE_KEPT = '<span class="empty">none kept</span>'


class TaskPage(msgspec.Struct, frozen=True, kw_only=True):
    """One task of a suite: its counts and its last trials (linked), newest first."""

    suite: str
    task: str
    n: int
    c: int
    # Records kept per task (stats.recent_trials, or the suite's own); 0: none kept.
    kept: int
    trials: list[TrialRecord]
    now: float
    # The suite's window (0: none): n and c are then the window's.
    window: int = 0


def task_href(suite: str, task: str) -> str:
    """The task view's path, both names percent-encoded whole (a task may hold ``/``)."""
    return f"/suites/{quote(suite, safe='')}/tasks/{quote(task, safe='')}"


def openable(url: str | None) -> str | None:
    """``url`` when a page may make it an anchor (absolute http or https), else None."""
    if url is None:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    return url if parts.scheme in ("http", "https") and parts.netloc else None


def ago(then: float | None, now: float) -> str:
    """``3 s ago``, as every page says a time, with the UTC time as its tooltip."""
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


def link_html(url: str | None, text: str) -> str:
    """An anchor to ``url`` reading ``text`` when ``url`` is http(s); else the text, with
    the unopenable link shown beside it."""
    target = openable(url)
    if target is not None:
        return (
            f'<a class="trial-link" href="{escape(target)}" title="{escape(target)}" '
            'rel="noopener noreferrer">'
            f"{escape(text)}</a>"
        )
    if url:
        return (
            f'{escape(text)} <code class="unlinked" title="a relative link: set the '
            f"suite's url_base to open it\">{escape(url)}</code>"
        )
    return escape(text)


def _outcome(outcome: str) -> str:
    return f'<span class="outcome {escape(outcome)}">{escape(outcome)}</span>'


def trial_cell(record: TrialRecord | None, now: float) -> str:
    """One trial in a table cell: its id (the link), its run and when it was counted."""
    if record is None:
        return NONE_KEPT
    run = "" if record.run is None else f' <span class="run">{escape(record.run)}</span>'
    return (
        f'<span class="trial" data-trial="{escape(record.trial)}">'
        f"{link_html(record.url, record.trial)}{run} {ago(record.ts, now)}</span>"
    )


def where_links_come_from(kept: int) -> str:
    """The note a page without trials or links shows: where each comes from."""
    if kept == 0:
        return (
            '<p class="note links-help">This suite keeps no recent trials '
            "(<code>recent_trials = 0</code>): see <code>" + DOCS + "</code>.</p>"
        )
    return (
        '<p class="note links-help">A trial links to its transcript when its event carries '
        "a <code>url</code> (a relative one resolved against the suite's "
        "<code>url_base</code>, an Inspect log viewer's address for example), or when the "
        "suite sets a <code>url_template</code> over <code>{suite}</code>, "
        "<code>{task}</code>, <code>{trial}</code> and <code>{run}</code>: see <code>"
        + DOCS
        + "</code>.</p>"
    )


def _linked(records: Sequence[TrialRecord]) -> bool:
    return any(openable(r.url) is not None for r in records)


def lottery(
    suite: str,
    rows: Sequence[tuple[str, int, int]],
    trials: dict[str, list[TrialRecord]],
    kept: int,
    now: float,
) -> str:
    """The lottery cases (task, n, c): each task opening to its view, its last failing
    and last passing trial side by side."""
    if not rows:
        return '<p class="empty">No task passes only sometimes.</p>'
    body = []
    shown: list[TrialRecord] = []
    for task, n, c in rows:
        mine = trials.get(task, [])
        failing = next((r for r in mine if r.outcome == "fail"), None)
        passing = next((r for r in mine if r.outcome == "pass"), None)
        shown += [r for r in (failing, passing) if r is not None]
        body.append(
            f'<tr data-task="{escape(task)}"><td><a class="task" href="'
            f'{escape(task_href(suite, task))}">{escape(task)}</a></td><td>{n}</td><td>{c}</td>'
            f'<td class="failing">{trial_cell(failing, now)}</td>'
            f'<td class="passing">{trial_cell(passing, now)}</td></tr>'
        )
    return (
        '<p class="note legend">Tasks that pass sometimes but not reliably, the widest gap '
        "between pass@k and pass^k first. n: the trials counted for the task (its window's, "
        "with a window); c: how many of them passed. Beside each, its last failing and last "
        "passing trial among those kept: diff the passing one against the failing one. A "
        "task opens to its recent trials.</p>"
        '<div class="scroll"><table class="lottery"><thead><tr>'
        '<th>task</th><th title="trials counted">n</th><th title="trials passed">c</th>'
        "<th>last failing</th><th>last passing</th></tr></thead><tbody>"
        + "".join(body)
        + "</tbody></table></div>"
        + ("" if _linked(shown) else where_links_come_from(kept))
    )


def moved_failures(
    records: Sequence[TrialRecord], *, since: float, after: int | None = None
) -> list[TrialRecord]:
    """The failures among a task's ``records`` (its last trials, newest first) counted
    since a breach began. ``after``: how many trials the task counted since (its count
    now less its baseline's, a suite without a window), so exactly its newest ``after``;
    else (a window's counts say nothing of it) those of the second of ``since`` or later,
    a trial's time being kept to the second."""
    if after is not None:
        mine = records[: max(0, after)]
    else:
        mine = [r for r in records if r.ts >= math.floor(since)]
    return [r for r in mine if r.outcome == "fail"]


def movers(
    suite: str,
    *,
    rule: str,
    since: float,
    rows: Sequence[Mover],
    moved: dict[str, list[TrialRecord]],
    now: float,
) -> str:
    """The tasks that moved since ``rule``'s breach began, each opening to its view, with
    the failing trials that moved it (``moved``: task -> its ``moved_failures``)."""
    head = (
        f"<p>Since {escape(rule)} began breaching at {utc(since)}: "
        "each task's passes of its trials (c/n) before and after, the change in its "
        "pass rate, and its failing trials since then among those kept.</p>"
    )
    if not rows:
        return head + '<p class="empty">No task has moved since then.</p>'
    body = []
    for m in rows:
        failed = moved.get(m.task, [])
        href = escape(task_href(suite, m.task))
        cells = " ".join(trial_cell(r, now) for r in failed[:MOVED_FAILURES]) or NONE_KEPT
        if len(failed) > MOVED_FAILURES:
            cells += f' <a class="more" href="{href}">{len(failed) - MOVED_FAILURES} more</a>'
        body.append(
            f'<tr data-task="{escape(m.task)}"><td><a class="task" href="{href}">'
            f"{escape(m.task)}</a></td><td>{m.before_c}/{m.before_n}</td>"
            f"<td>{m.after_c}/{m.after_n}</td><td>{m.change * 100:+.1f} pp</td>"
            f'<td class="moved-by">{cells}</td></tr>'
        )
    return (
        head + '<div class="scroll"><table class="movers"><thead><tr><th>task</th>'
        "<th>before</th><th>after</th><th>change</th><th>failing trials since</th>"
        "</tr></thead><tbody>" + "".join(body) + "</tbody></table></div>"
    )


def task_main(page: TaskPage) -> str:
    """The task view's ``<main>``: the task, its counts, its last trials newest first."""
    suite = f"/suites/{quote(page.suite, safe='')}"
    parts = [
        f'<h1 class="task-name">{escape(page.task)}</h1>'
        f'<p class="note">A task of <a href="{escape(suite)}">{escape(page.suite)}</a>: '
        + (
            f"{page.c} of the {page.n} trials in its window passed.</p>"
            if page.window
            else f"{page.c} of its {page.n} trials counted passed.</p>"
        ),
        "<h2>Recent trials</h2>",
    ]
    if not page.trials:
        what = (
            "No recent trial of this task is kept."
            if page.kept
            else "This suite keeps no recent trials."
        )
        parts.append(f'<p class="empty">{what}</p>')
        parts.append(where_links_come_from(page.kept))
        return "".join(parts)
    rows = "".join(
        f'<tr class="trial {escape(r.outcome)}" data-trial="{escape(r.trial)}">'
        f"<td>{_outcome(r.outcome)}</td><td>{ago(r.ts, page.now)}</td>"
        f'<td class="trial-id">{escape(r.trial)}</td>'
        f'<td class="run">{"&ndash;" if r.run is None else escape(r.run)}</td>'
        f'<td class="link">{link_html(r.url, "open") if r.url else "&ndash;"}</td></tr>'
        for r in page.trials
    )
    parts.append(
        f'<p class="note legend">The last {page.kept} trials kept for the task, newest '
        "first: errors and skips are not trials and are not kept.</p>"
        '<div class="scroll"><table class="trials"><thead><tr><th>outcome</th><th>time</th>'
        "<th>trial</th><th>run</th><th>link</th></tr></thead><tbody>"
        + rows
        + "</tbody></table></div>"
    )
    if not _linked(page.trials):
        parts.append(where_links_come_from(page.kept))
    return "".join(parts)


def task_json(page: TaskPage) -> bytes:
    """The task view as JSON: the counts, and each trial as ``reliabilityd trials --json``
    prints it (``url`` its link)."""
    return msgspec.json.encode(
        {
            "suite": page.suite,
            "task": page.task,
            "n": page.n,
            "c": page.c,
            "kept": page.kept,
            "trials": [msgspec.structs.asdict(r) for r in page.trials],
        }
    )
