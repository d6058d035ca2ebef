"""Trial links: which urls the wire format takes, the templates, and how a link is built."""

from __future__ import annotations

import functools
import re

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliabilityd.alerting.notify import failing_trials
from reliabilityd.client._encode import encode_event
from reliabilityd.config import Config, StatsConfig
from reliabilityd.events import decode
from reliabilityd.names import (
    NAME_FORBIDDEN,
    record_template_problem,
    template_problem,
    url_problem,
)
from reliabilityd.store import TrialRecord, link
from reliabilityd.store._recent import chunk_records


@pytest.mark.parametrize(
    "url",
    [
        "https://cloud.langfuse.com/project/p/traces/4bf92f3577b34da6a3ce929d0e0e4736",
        "http://localhost:16686/trace/abc",
        "HTTPS://Example.com",
        "logs/2025_task.eval#/samples/sample/3/2",
        "#/logs/a.eval",
        "/abs/path?x=1",
        "https://h/x?a=b@c",
        "x" * 500,
    ],
)
def test_links_the_wire_format_takes(url: str) -> None:
    assert url_problem(url) is None


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("", "empty"),
        ("javascript:alert(1)", "javascript:"),
        ("JaVaScRiPt:alert(1)", "javascript:"),
        ("vbscript:x", "scheme vbscript:"),
        ("data:text/html;base64,xx", "scheme data:"),
        ("file:///etc/passwd", "scheme file:"),
        ("http://", "with a host"),
        ("https:///path", "with a host"),
        ("//evil.example/x", "protocol-relative"),
        ("/\\evil.example", "backslash"),
        ("https://u:p@host/", "credentials"),
        (" https://h/", "white space"),
        ("java\tscript:x", "control character"),
        ("https://h/\u202ex", "invisible format character"),
        ("https://h/" + "a" * 503, "512 bytes"),
    ],
)
def test_links_the_wire_format_refuses_with_the_reason(url: str, why: str) -> None:
    problem = url_problem(url)
    assert problem is not None
    assert why in problem


def test_a_bad_link_or_run_rejects_its_element_alone() -> None:
    good = b'{"suite":"s","task":"t","trial":"1","outcome":"pass","url":"https://h/1","run":"r"}'
    bad = b'{"suite":"s","task":"t","trial":"2","outcome":"pass","url":"javascript:x"}'
    run = b'{"suite":"s","task":"t","trial":"3","outcome":"pass","run":""}'
    events, rejected = decode(b"[" + b",".join([good, bad, run]) + b"]")
    assert [(e.trial, e.url, e.run) for e in events] == [("1", "https://h/1", "r")]
    assert [r.reason for r in rejected] == [
        "element 1: url has the javascript: scheme (a link runs no code)",
        "element 2: run is empty",
    ]
    assert {r.reason_class for r in rejected} == {"invalid_field"}


def test_templates_name_only_what_they_can_fill() -> None:
    assert template_problem("https://ui/{suite}/{task}/{trial}?run={run}") is None
    assert "unknown placeholder {trace_id}" in str(template_problem("https://ui/{trace_id}"))
    assert "javascript" in str(template_problem("javascript:{trial}"))
    assert record_template_problem("https://lf/project/p/traces/{trace_id}") is None
    assert record_template_problem("http://j/{span_id}?s={resource:service.name}") is None
    assert "unknown placeholder {task}" in str(record_template_problem("https://j/{task}"))


def test_a_link_is_the_template_else_the_url_resolved() -> None:
    common = functools.partial(link, suite="s", task="t/1", trial="e 1", run=None)
    assert common(url=None) is None
    assert common(url="https://h/x") == "https://h/x"
    assert common(url="logs/a#/s/1", base="https://v/app/") == "https://v/app/logs/a#/s/1"
    assert common(url="logs/a") == "logs/a"  # no base: left relative
    built = common(url="https://ignored", template="https://u/{task}/{trial}{run}")
    assert built == "https://u/t%2F1/e%201"


def test_the_emitter_checks_links_like_the_daemon() -> None:
    payload, _ = encode_event("s", "t", "pass", url="https://h/1", run="r1")
    assert b'"url":"https://h/1"' in payload
    with pytest.raises(ValueError, match="javascript"):
        encode_event("s", "t", "pass", url="javascript:x")
    with pytest.raises(TypeError, match="url must be a str"):
        encode_event("s", "t", "pass", url=3)  # type: ignore[arg-type]


def test_records_are_built_for_trials_only() -> None:
    records = chunk_records(
        [
            ("t", "p", "a", None, None, None),
            ("t", "e", "b", None, None, None),
            ("u", "f", "c", "5", "r", "https://h"),
        ],
        "9",
    )
    assert records == "1\x1ft\x1fpa\x1f9\x1f\x1f\x1e3\x1fu\x1ffc\x1f5\x1fr\x1fhttps://h"


@pytest.mark.hypothesis
@given(st.text(max_size=600))
def test_any_text_is_a_link_or_refused_with_a_reason(text: str) -> None:
    problem = url_problem(text)
    if problem is None:
        low = text.lower()
        has_scheme = re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", text) is not None
        assert low.startswith(("http://", "https://")) or not has_scheme
        assert not low.startswith("javascript:")
        assert not NAME_FORBIDDEN.search(text)
        assert "\\" not in text
        assert len(text.encode("utf-8", "surrogatepass")) <= 512


def test_a_config_with_a_template_that_cannot_build_a_link_is_refused() -> None:
    with pytest.raises(msgspec.ValidationError, match=r"link_template: unknown placeholder"):
        msgspec.convert({"http": {"otlp": {"link_template": "https://j/{task}"}}}, Config)
    with pytest.raises(msgspec.ValidationError, match=r"url_template: .*javascript"):
        msgspec.convert({"stats": {"url_template": "javascript:{trial}"}}, Config)
    with pytest.raises(msgspec.ValidationError, match=r"url_base must be an absolute"):
        msgspec.convert({"suites": [{"match": "*", "url_base": "viewer/"}]}, Config)


def test_a_notifications_failing_trials_take_the_suites_links() -> None:
    records = [
        TrialRecord(task="t 1", trial="r7", outcome="fail", ts=0.0, run="e1", url="s/7"),
        TrialRecord(task="t2", trial="r9", outcome="fail", ts=1.5),
    ]
    based = Config(stats=StatsConfig(url_base="https://viewer.example/logs/"))
    first, second = failing_trials(based, "bot", records)
    assert (first.task, first.trial, first.run) == ("t 1", "r7", "e1")
    assert first.url == "https://viewer.example/logs/s/7"
    assert first.at == "1970-01-01T00:00:00.000Z"
    assert second.url is None  # neither the event nor a template gives one
    templated = Config(
        stats=StatsConfig(url_template="https://traces.example/{suite}/{task}/{trial}")
    )
    assert [f.url for f in failing_trials(templated, "bot", records)] == [
        "https://traces.example/bot/t%201/r7",
        "https://traces.example/bot/t2/r9",
    ]
