"""The on-call index as HTML and JSON: a page of summary rows, filtered and paged. Pure.

Every row is a suite's summary row (``store.Row``); every value that came
from outside is escaped, and the filters and the pager keep each other's
query.
"""

from __future__ import annotations

from html import escape
from urllib.parse import urlencode

import msgspec

from reliabilityd.daemon.ui._pages import (
    UNDECODABLE,
    alert_cell,
    percent,
    suite_href,
    time_of,
)
from reliabilityd.daemon.ui._svg import Sample, sparkline, utc
from reliabilityd.daemon.ui._trials import ago
from reliabilityd.store import ROW_STATES, Row, Undecodable


class IndexRow(msgspec.Struct, frozen=True):
    suite: str
    # The suite's summary row; None before its first snapshot.
    row: Row | Undecodable | None
    # The state that needs a person most; None when no rule watches the suite (or the
    # daemon has not judged it yet).
    alert: str | None
    rejected: int


class IndexPage(msgspec.Struct, frozen=True, kw_only=True):
    rows: list[IndexRow]
    unattributed: int
    now: float
    # The suites the filter matches, this page (1-based) and how many pages they fill.
    total: int = 0
    page: int = 1
    pages: int = 1
    state: str | None = None
    prefix: str = ""
    contains: str = ""
    page_size: int = 100


def index_href(page: IndexPage, number: int) -> str:
    """The index at page ``number`` with ``page``'s filters."""
    query = {"page": str(number)}
    if page.state:
        query["state"] = page.state
    if page.prefix:
        query["prefix"] = page.prefix
    if page.contains:
        query["q"] = page.contains
    return "/?" + urlencode(query)


def _filters(page: IndexPage) -> str:
    options = "".join(
        f'<option value="{s}"{" selected" if page.state == s else ""}>'
        f"{'no rule' if s == 'none' else s}</option>"
        for s in ROW_STATES
    )
    return (
        '<form class="filters" method="get" action="/">'
        '<label>state <select name="state"><option value="">any</option>'
        f"{options}</select></label> "
        '<label>name starts with <input type="search" name="prefix" '
        f'value="{escape(page.prefix)}"></label> '
        '<label>name holds <input type="search" name="q" '
        f'value="{escape(page.contains)}"></label> '
        '<button type="submit">Filter</button></form>'
    )


def _pager(page: IndexPage) -> str:
    first = (page.page - 1) * page.page_size + 1 if page.rows else 0
    last = first + len(page.rows) - 1 if page.rows else 0
    links = []
    if page.page > 1:
        links.append(f'<a rel="prev" href="{escape(index_href(page, page.page - 1))}">previous</a>')
    if page.page < page.pages:
        links.append(f'<a rel="next" href="{escape(index_href(page, page.page + 1))}">next</a>')
    return (
        f'<p class="pager"><span class="shown">{first}&ndash;{last} of {page.total}</span> '
        f"(page {page.page} of {page.pages}) " + " ".join(links) + "</p>"
    )


def row_json(row: Row) -> dict[str, object]:
    """A summary row as a JSON object, its fields by name."""
    return {field: getattr(row, field) for field in row.__struct_fields__}


def index_json(page: IndexPage) -> bytes:
    """``GET /v1/suites``: the page's suites, each with its state and its summary row
    (null before its first snapshot; ``{"undecodable": error}`` when it does not decode)
    and its dead letters of the last hour (``rejected``), the page's place among all that
    match, and the last hour's dead letters that named no suite (``unattributed``)."""
    suites = []
    for item in page.rows:
        row: object = None
        if isinstance(item.row, Row):
            row = row_json(item.row)
        elif isinstance(item.row, Undecodable):
            row = {"undecodable": item.row.error}
        suites.append(
            {
                "suite": item.suite,
                "state": item.alert or "none",
                "rejected": item.rejected,
                "row": row,
            }
        )
    return msgspec.json.encode(
        {
            "suites": suites,
            "total": page.total,
            "page": page.page,
            "pages": page.pages,
            "page_size": page.page_size,
            "unattributed": page.unattributed,
        }
    )


def _trend_samples(row: Row) -> list[Sample]:
    return [Sample(t, v, lo, hi) for t, v, lo, hi in row.trend]


def index_main(page: IndexPage) -> str:
    parts = ["<h1>Suites</h1>", _filters(page)]
    filtered = bool(page.state or page.prefix or page.contains)
    if not page.rows:
        text = (
            "No suite matches this filter."
            if filtered or page.page > 1
            else "No suites yet: publish a trial event to start one."
        )
        parts.append(f'<p class="empty">{text}</p>')
    else:
        parts.append(_pager(page))
        parts.append(
            '<div class="scroll"><table class="suites"><thead><tr><th>suite</th>'
            '<th title="the chance a task passes all of k tries">pass^k</th>'
            "<th>interval</th><th>trend</th><th>alert</th>"
            "<th>last trial</th><th>rejected (1 h)</th></tr></thead><tbody>"
        )
        for item in page.rows:
            row = item.row if isinstance(item.row, Row) else None
            label = "" if row is None or row.k is None else f'<span class="k">k={row.k}</span> '
            last = None if row is None else time_of(row.last_trial_at)
            if isinstance(item.row, Undecodable):
                value, ci, trend = UNDECODABLE, "&ndash;", ""
            elif row is None:
                value = '<span class="pending-row">no snapshot yet</span>'
                ci, trend = "&ndash;", ""
            else:
                value = percent(row.value, row.below)
                ci = (
                    "&ndash;"
                    if row.ci is None
                    else f"[{100 * row.ci[0]:.1f}, {100 * row.ci[1]:.1f}]"
                )
                trend = sparkline(_trend_samples(row))
            parts.append(
                f'<tr class="suite" data-suite="{escape(item.suite)}">'
                f'<td><a href="{escape(suite_href(item.suite))}">{escape(item.suite)}</a></td>'
                f'<td class="value">{label}{value}</td>'
                f"<td>{ci}</td><td>{trend}</td>"
                f"<td>{alert_cell(item.alert)}</td><td>{ago(last, page.now)}</td>"
                f'<td class="rejected">{item.rejected}</td></tr>'
            )
        parts.append("</tbody></table></div>")
        if page.pages > 1:
            parts.append(_pager(page))
    parts.append(
        '<p class="note">Values in percent; the interval is the 95% one, in percent. '
        "A value in red is under the threshold of a rule that judges it. "
        "Each row is as of the suite's newest snapshot.</p>"
    )
    parts.append(
        f'<p class="note">Rejected in the last hour without a suite named: '
        f'<span class="unattributed">{page.unattributed}</span>. '
        f"Updated {utc(page.now)}.</p>"
    )
    return "".join(parts)
