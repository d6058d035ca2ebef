"""The task view's and the trial links' pure parts: which links become anchors, paths,
the lottery cases' pair of trials, the failures that moved a task, the empty states."""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import unquote

import msgspec
import pytest

from reliabilityd.daemon.ui._model import Mover
from reliabilityd.daemon.ui._trials import (
    MOVED_FAILURES,
    TaskPage,
    lottery,
    moved_failures,
    movers,
    openable,
    task_href,
    task_main,
)
from reliabilityd.store import TrialRecord

NOW = 1_800_000_000.0


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[dict[str, str | None]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.anchors.append(dict(attrs))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parsed(html: str) -> _Anchors:
    doc = _Anchors()
    doc.feed(html)
    doc.close()
    return doc


def _rec(trial: str, outcome: str, ts: float, url: str | None = None) -> TrialRecord:
    return TrialRecord("t", trial, outcome, ts, url=url)


@pytest.mark.parametrize(
    ("url", "opens"),
    [
        ("https://trace.example/t/1", True),
        ("http://localhost:7575/#/logs/x.eval/samples/1/2", True),
        ("HTTPS://TRACE.EXAMPLE/x", True),
        ("logs/x.eval#/samples/1", False),  # relative: no url_base resolved it
        ("/abs/path", False),
        ("javascript:alert(1)", False),
        ("data:text/html,<script>x</script>", False),
        ("https:///no-host", False),
        ("http://[broken", False),
        (None, False),
    ],
)
def test_only_absolute_http_links_become_anchors(url: str | None, opens: bool) -> None:
    assert (openable(url) is not None) == opens


def test_a_task_path_encodes_both_names_whole() -> None:
    href = task_href("s x", "a/b?c#d%2F")
    assert href == "/suites/s%20x/tasks/a%2Fb%3Fc%23d%252F"
    assert unquote(href.rsplit("/", 1)[1]) == "a/b?c#d%2F"


def test_a_lottery_case_shows_its_last_failing_and_last_passing_trial_side_by_side() -> None:
    trials = {
        "flaky": [
            _rec("r3", "pass", NOW - 3, "https://t.example/3"),
            _rec("r2", "fail", NOW - 30, "https://t.example/2"),
            _rec("r1", "fail", NOW - 300, "https://t.example/1"),
        ],
        "lonely": [_rec("q1", "fail", NOW - 5, "rel/path")],
    }
    html = lottery("s", [("flaky", 10, 5), ("lonely", 10, 2)], trials, 10, NOW)
    doc = _parsed(html)
    hrefs = [a["href"] for a in doc.anchors]
    # Each task opens to its view; flaky's newest failure and newest pass, in that order.
    assert hrefs == [
        "/suites/s/tasks/flaky",
        "https://t.example/2",
        "https://t.example/3",
        "/suites/s/tasks/lonely",
    ]
    assert [a.get("rel") for a in doc.anchors if a.get("class") == "trial-link"] == [
        "noopener noreferrer"
    ] * 2
    text = "".join(doc.text)
    assert "30 s ago" in text
    assert "3 s ago" in text
    assert "rel/path" in text  # shown, not linked
    assert "none kept" in text  # lonely has no passing trial kept
    assert "links-help" not in html  # some trial links: no help


def test_a_suite_without_links_or_kept_trials_says_where_they_come_from() -> None:
    unlinked = lottery("s", [("t", 4, 2)], {"t": [_rec("1", "fail", NOW)]}, 10, NOW)
    assert 'class="note links-help"' in unlinked
    assert "url_template" in unlinked
    assert "docs/drill-down.md" in unlinked
    none = lottery("s", [("t", 4, 2)], {}, 0, NOW)
    assert "recent_trials = 0" in none
    assert lottery("s", [], {}, 10, NOW) == '<p class="empty">No task passes only sometimes.</p>'


def test_the_failures_that_moved_a_task_are_its_trials_since_the_breach() -> None:
    since = NOW + 0.7
    records = [
        _rec("late", "fail", NOW + 5),
        _rec("ok", "pass", NOW + 4),
        _rec("same second", "fail", NOW),  # counted before the breach, in its second
        _rec("before", "fail", NOW - 1),
    ]
    # Without a window: the task's newest trials, as many as it counted since (exact).
    assert [r.trial for r in moved_failures(records, since=since, after=2)] == ["late"]
    assert [r.trial for r in moved_failures(records, since=since, after=3)] == [
        "late",
        "same second",
    ]
    assert moved_failures(records, since=since, after=0) == []
    # With a window the counts say nothing of it: the times, to the second.
    assert [r.trial for r in moved_failures(records, since=since)] == ["late", "same second"]
    many = {"t": [_rec(f"f{i}", "fail", NOW + 10 - i, f"https://t.example/{i}") for i in range(5)]}
    html = movers(
        "s", rule="r", since=NOW, rows=[Mover("t", 10, 9, 5, 0)], moved=many, now=NOW + 20
    )
    hrefs = [a["href"] for a in _parsed(html).anchors]
    assert hrefs == [
        "/suites/s/tasks/t",
        *[f"https://t.example/{i}" for i in range(MOVED_FAILURES)],
        "/suites/s/tasks/t",  # the rest: on the task's view
    ]
    assert f"{5 - MOVED_FAILURES} more" in html
    assert "-90.0 pp" in html


def test_the_task_view_lists_trials_newest_first_or_says_why_there_are_none() -> None:
    page = TaskPage(
        suite="s",
        task="t",
        n=3,
        c=1,
        kept=10,
        trials=[
            _rec("b", "fail", NOW - 2, "https://t.example/b"),
            _rec("a", "pass", NOW - 200),
        ],
        now=NOW,
    )
    html = task_main(page)
    assert html.index('data-trial="b"') < html.index('data-trial="a"')
    assert "1 of its 3 trials counted passed" in html
    windowed = task_main(msgspec.structs.replace(page, window=3))
    assert "1 of the 3 trials in its window passed" in windowed
    assert "3 min ago" in html
    (link,) = [a for a in _parsed(html).anchors if a.get("class") == "trial-link"]
    assert link == {
        "class": "trial-link",
        "href": "https://t.example/b",
        "title": "https://t.example/b",
        "rel": "noopener noreferrer",
    }
    empty = task_main(TaskPage(suite="s", task="t", n=3, c=1, kept=10, trials=[], now=NOW))
    assert "No recent trial of this task is kept." in empty
    assert "links-help" in empty
