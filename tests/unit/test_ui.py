"""The web UI's pure parts: SVG charts, the headline k and movers, page HTML, negotiation."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import msgspec
import pytest

from reliabilityd.alerting.notify import base_url, generator_url
from reliabilityd.alerting.registry import Watched
from reliabilityd.config import Config, HttpConfig
from reliabilityd.daemon._rows import row_of
from reliabilityd.daemon.ui import _model, wants_html
from reliabilityd.daemon.ui._index import IndexPage, IndexRow, index_main
from reliabilityd.daemon.ui._pages import (
    RuleView,
    SuitePage,
    TransitionRow,
    layout,
    suite_main,
)
from reliabilityd.daemon.ui._routes import BadQuery, parse_time
from reliabilityd.daemon.ui._svg import Mark, Sample, Threshold, chart, runs, sparkline
from reliabilityd.rules import AlertState, Rule
from reliabilityd.rules.registry import Watch
from reliabilityd.stats.estimate import estimate_metrics
from reliabilityd.stats.histogram import Histogram
from reliabilityd.stats.snapshot import Snapshot, StatsSettings, build, full_estimates
from reliabilityd.store import DeadLetter


class _Tags(HTMLParser):
    """Every start tag with its attributes, and whether the document nests properly."""

    VOID = frozenset({"meta", "link", "input", "br", "img"})

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.open: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        assert self.open[-1:] == [tag], f"</{tag}> closes {self.open[-1:]}"
        self.open.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def having(self, tag: str, cls: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag and cls in (a.get("class") or "").split()]


def parsed(html: str) -> _Tags:
    p = _Tags()
    p.feed(html)
    p.close()
    assert p.open == [], p.open
    return p


SAMPLES = [
    Sample(1000.0, 0.9, 0.8, 0.95),
    Sample(1060.0, 0.85, 0.7, 0.9),
    Sample(1120.0, None, None, None),
    Sample(1180.0, 0.4, None, None),
    Sample(1240.0, 0.3, 0.2, 0.45),
]


def test_the_chart_draws_one_point_per_sample_and_breaks_line_and_band_at_gaps() -> None:
    svg = chart(
        SAMPLES,
        t0=1000.0,
        t1=1300.0,
        label="pass^5",
        marks=[Mark(1150.0, "r", "firing")],
        thresholds=[Threshold("r", 0.5)],
        anchor=1150.0,
    )
    tags = parsed(svg)
    points = tags.having("circle", "pt")
    assert len(points) == len(SAMPLES)
    assert len(tags.having("circle", "unknown")) == 1
    # Two runs with a CI (the first two, the last), two runs with a value.
    assert len(tags.having("path", "band")) == 2
    assert len(tags.having("path", "line")) == 2
    (mark,) = tags.having("line", "mark")
    assert mark["data-state"] == "firing"
    assert float(mark["data-t"] or 0) == 1150.0
    assert len(tags.having("line", "threshold")) == 1
    assert len(tags.having("line", "anchor")) == 1
    # The mark sits where its time maps: halfway between the points at 1120 and 1180.
    x = {float(p["data-t"] or 0): float(p["cx"] or 0) for p in points}
    assert float(mark["x1"] or 0) == pytest.approx((x[1120.0] + x[1180.0]) / 2, abs=0.1)
    # A higher value is drawn higher (smaller y).
    ys = {float(p["data-t"] or 0): float(p["cy"] or 0) for p in points if p.get("data-v")}
    assert ys[1000.0] < ys[1060.0] < ys[1180.0] < ys[1240.0]


def test_runs_split_on_missing_values_and_missing_intervals() -> None:
    assert [[s.t for s in r] for r in runs(SAMPLES, "value")] == [
        [1000.0, 1060.0],
        [1180.0, 1240.0],
    ]
    assert [[s.t for s in r] for r in runs(SAMPLES, "ci")] == [[1000.0, 1060.0], [1240.0]]


def test_a_buckets_minimum_under_its_value_is_drawn_as_a_dip() -> None:
    svg = chart(
        [
            Sample(1000.0, 0.9, 0.8, 0.95, 0.19),
            Sample(1060.0, 0.9, 0.8, 0.95, 0.9),  # the minimum is the value: nothing more
            Sample(1120.0, 0.9, 0.8, 0.95),  # no minimum known
            Sample(1180.0, None, None, None, 0.1),  # UNKNOWN now: no dip from nothing
        ],
        t0=1000.0,
        t1=1200.0,
        label="pass^k@5",
    )
    assert svg.count('class="dip"') == 1
    assert 'data-low="0.19"' in svg
    assert "as low as 19.0%" in svg
    assert _model.samples(
        [(10.0, {"pass^k@5": (0.5, 0.4, 0.6)})], "pass^k@5", {10.0: {"pass^k@5": 0.2}}
    ) == [Sample(10.0, 0.5, 0.4, 0.6, 0.2)]


def test_an_empty_chart_says_so_and_a_sparkline_without_values_draws_nothing() -> None:
    assert "no history in this range" in chart([], t0=0.0, t1=10.0, label="x")
    assert "<svg" not in sparkline([Sample(1.0, None, None, None)])
    spark = parsed(sparkline(SAMPLES))
    assert len(spark.having("path", "line")) == 2


def test_the_headline_k_is_the_first_pass_hat_k_rules_else_the_largest() -> None:
    hist = Histogram.from_pairs([(5, 5), (5, 4), (5, 3)])
    settings = StatsSettings(ks=(1, 3, 5))
    snap = build(
        suite="s",
        hist=hist,
        trials=15,
        errors=0,
        skips=0,
        duplicates=0,
        version=1,
        settings=settings,
        estimates=full_estimates(hist, settings),
        lottery_k=5,
        lottery_rows=[],
        now=0.0,
    )
    at3 = Rule(name="a", metric="pass@k", k=1, below=0.5)
    hat3 = Rule(name="b", k=3, below=0.5)
    assert _model.headline_k(snap, []) == 5
    assert _model.headline_k(snap, [at3, hat3]) == 3
    assert _model.headline_k(snap, [Rule(name="c", k=7, below=0.5)]) == 5
    assert _model.headline_k(None, [hat3]) is None


def test_the_worst_state_is_the_one_that_needs_a_person() -> None:
    states = [AlertState(state="resolved"), AlertState(state="firing"), AlertState()]
    assert _model.worst_state(states) == "firing"
    assert _model.worst_state([]) == "inactive"


def test_samples_read_one_series_in_time_order() -> None:
    points: list[tuple[float, dict[str, _model.Triple]]] = [
        (20.0, {"pass^k@5": (0.5, 0.4, 0.6), "pass@k@5": (0.9, 0.8, 1.0)}),
        (10.0, {"pass^k@5": (None, None, None)}),
        (30.0, {"pass@k@5": (0.9, 0.8, 1.0)}),
    ]
    assert _model.samples(points, "pass^k@5") == [
        Sample(10.0, None, None, None),
        Sample(20.0, 0.5, 0.4, 0.6),
    ]


def test_the_time_range_reaches_back_before_an_old_anchor() -> None:
    now = 10 * _model.DAY
    assert _model.time_range(now, None, None) == (now - _model.DAY, now)
    assert _model.time_range(now, now - 3 * _model.DAY, None) == (
        now - 3 * _model.DAY - _model.BEFORE_ANCHOR,
        now,
    )
    assert _model.time_range(now, now - 60, None) == (now - _model.DAY, now)


def test_the_axis_begins_where_the_history_does() -> None:
    end = 5000.0
    assert _model.drawn_from(100.0, end, [500.0, 300.0], None) == 300.0
    assert _model.drawn_from(100.0, end, [500.0, 300.0], 200.0) == 200.0
    assert _model.drawn_from(100.0, end, [50.0, 300.0], None) == 100.0
    assert _model.drawn_from(100.0, end, [], None) == 100.0
    # A single recent point: the axis still spans ten minutes.
    assert _model.drawn_from(100.0, end, [end - 1], None) == end - _model.MIN_SPAN


def test_movers_without_a_window_compare_the_trials_since_the_breach() -> None:
    baseline = {"a": (10, 10), "b": (10, 5), "c": (10, 9), "new": (0, 0)}
    current = {"a": (14, 10), "b": (14, 9), "c": (10, 9), "new": (3, 0), "d": (4, 4)}
    rows = _model.movers(baseline, current, windowed=False)
    # a: 10/10 before, 0/4 after (-1.0); b: 5/10 before, 4/4 after (+0.5); c, new, d left out.
    assert [(m.task, m.after_c, m.after_n, m.change) for m in rows] == [
        ("a", 0, 4, -1.0),
        ("b", 4, 4, 0.5),
    ]


def test_movers_with_a_window_compare_the_windows() -> None:
    baseline = {"a": (10, 10), "b": (10, 6), "c": (10, 8)}
    current = {"a": (10, 4), "b": (10, 6), "c": (10, 9)}
    rows = _model.movers(baseline, current, windowed=True, limit=1)
    assert [(m.task, round(m.change, 2)) for m in rows] == [("a", -0.6)]


@pytest.mark.parametrize(
    ("accept", "html"),
    [
        ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", True),
        ("application/json", False),
        ("*/*", False),
        ("", False),
        ("application/json, text/html;q=0.5", False),
        ("text/html;q=0", False),
        ("text/html, application/json", True),
    ],
)
def test_only_a_browser_gets_the_page(accept: str, html: bool) -> None:
    assert wants_html(accept) is html


def test_times_in_queries_are_unix_seconds_or_rfc3339() -> None:
    assert parse_time("1764590400.5", "at") == 1764590400.5
    assert parse_time("2025-12-01T12:00:00Z", "at") == 1764590400.0
    assert parse_time(None, "at") is None
    with pytest.raises(BadQuery, match="at='yesterday'"):
        parse_time("yesterday", "at")
    with pytest.raises(BadQuery, match="offset"):
        parse_time("2025-12-01T12:00:00", "at")


def test_alert_links_fall_back_to_the_bound_http_address() -> None:
    assert base_url(Config()) is None  # no HTTP server, no external_url
    bound = Config(http=HttpConfig(port=9780))
    assert base_url(bound) == "http://127.0.0.1:9780"
    assert generator_url(bound, "a b", "r", 1764590400.0) == (
        "http://127.0.0.1:9780/suites/a%20b?rule=r&at=1764590400.000"
    )
    v6 = Config(http=HttpConfig(host="::1", port=9780))
    assert base_url(v6) == "http://[::1]:9780"
    external = Config(http=HttpConfig(port=9780), external_url="https://rel.example/")
    assert generator_url(external, "s", "r") == "https://rel.example/suites/s?rule=r"


def _page(**overrides: object) -> SuitePage:
    hist = Histogram.from_pairs([(10, 10), (10, 6), (10, 3)])
    settings = StatsSettings(ks=(5,))
    snap = build(
        suite="<s>",
        hist=hist,
        trials=30,
        errors=1,
        skips=0,
        duplicates=0,
        version=3,
        settings=settings,
        estimates=list(estimate_metrics(hist, 5, **settings.options()).values()),
        lottery_k=5,
        lottery_rows=[],
        now=2000.0,
        last_trial_at=1990.0,
    )
    rule = Rule(name="rel", k=5, below=0.5)
    fields: dict[str, object] = {
        "suite": "<s>",
        "snap": snap,
        "k": 5,
        "hat": SAMPLES,
        "at": SAMPLES[:2],
        "marks": [Mark(1150.0, "rel", "firing")],
        "rules": [
            RuleView(
                watched=Watched(
                    Watch(rule=rule, suite="<s>"), AlertState(state="firing", started_at=1150.0)
                ),
                transitions=[TransitionRow(1150.0, "firing", "page")],
            )
        ],
        "movers": [_model.Mover("t<1>", 10, 10, 4, 0)],
        "movers_rule": "rel",
        "movers_since": 1150.0,
        "letters": [
            DeadLetter(
                id="1-0",
                payload=b'{"suite":"<s>","outcome":"PASS"}',
                truncated=False,
                reason="outcome: 'PASS' is not one of pass, fail, error, skip",
                source="mqtt:rel/trials/x",
                time=1900.0,
                suite="<s>",
            )
        ],
        "rejected": 1,
        "t0": 1000.0,
        "t1": 2000.0,
        "anchor": 1150.0,
        "focus": "rel",
        "now": 2000.0,
    }
    fields.update(overrides)
    return SuitePage(**fields)  # type: ignore[arg-type]


def test_the_suite_page_shows_charts_rules_movers_and_dead_letters_escaped() -> None:
    html = layout("x", suite_main(_page()), refresh="/suites/%3Cs%3E?fragment=1")
    tags = parsed(html)
    assert "<s>" not in html.replace("<script", "")  # every outside name is escaped
    assert len(tags.having("svg", "chart")) == 2
    assert len(tags.having("circle", "pt")) == len(SAMPLES) + 2
    assert tags.having("section", "focus")[0]["id"] == "rule-rel"
    text = "".join(tags.text)
    assert "outcome: 'PASS' is not one of pass, fail, error, skip" in text
    assert "t<1>" in text
    assert "Opened at alert rel" in text
    (main,) = [a for t, a in tags.tags if t == "main"]
    assert main["data-refresh"] == "/suites/%3Cs%3E?fragment=1"
    assert not [a for t, a in tags.tags if t in ("script", "link") and "//" in str(a)]


def test_a_suite_page_without_snapshot_or_rules_says_what_is_missing() -> None:
    html = suite_main(
        _page(snap=None, rules=[], movers=[], movers_rule=None, letters=[], focus=None)
    )
    assert "No snapshot yet" in html
    assert "No alert rule watches this suite" in html
    assert "No threshold rule has begun a breach on this suite yet" in html
    assert "No dead letter names this suite" in html
    parsed(html)


def test_the_index_lists_each_suite_with_its_value_and_rejected_count() -> None:
    page = _page()
    assert isinstance(page.snap, Snapshot)
    summary = row_of(page.snap, [], None, 2000.0)
    summary = msgspec.structs.replace(summary, trend=[(s.t, s.value, s.lo, s.hi) for s in SAMPLES])
    row = IndexRow(suite="<s>", row=summary, alert="firing", rejected=4)
    html = index_main(IndexPage(rows=[row], unattributed=2, now=2000.0, total=1))
    tags = parsed(html)
    (tr,) = tags.having("tr", "suite")
    assert tr["data-suite"] == "<s>"
    assert re.search(r'class="rejected">4<', html)
    assert re.search(r'class="unattributed">2<', html)
    assert tags.having("svg", "spark")
    assert 'href="/suites/%3Cs%3E"' in html
    assert "No suites yet" in index_main(IndexPage(rows=[], unattributed=0, now=0.0))


def test_a_suite_without_a_snapshot_says_so_on_the_index() -> None:
    row = IndexRow(suite="new", row=None, alert=None, rejected=0)
    html = index_main(IndexPage(rows=[row], unattributed=0, now=0.0, total=1))
    assert "no snapshot yet" in html
    parsed(html)


def test_the_index_pages_keep_their_filters() -> None:
    rows = [IndexRow(suite=f"s{i}", row=None, alert="firing", rejected=0) for i in range(100)]
    page = IndexPage(
        rows=rows, unattributed=0, now=0.0, total=250, page=2, pages=3, state="firing", prefix="s"
    )
    html = index_main(page)
    assert "101&ndash;200 of 250" in html
    assert 'href="/?page=1&amp;state=firing&amp;prefix=s"' in html
    assert 'href="/?page=3&amp;state=firing&amp;prefix=s"' in html
    assert '<option value="firing" selected>' in html
