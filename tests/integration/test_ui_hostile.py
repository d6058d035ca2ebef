"""Hostile names through every page of the web UI, read back from the parsed documents.

Suite, task, label and rule names are anybody's to choose: ``<script>``,
``&amp;`` and quotes are valid in each. A daemon with such a suite (a rule
firing on it, movers since the breach, lottery cases, slices, a history
with a transition, a dead letter) serves its index, suite page, fragments,
focus banner, error pages and token form; each is parsed (``html.parser``,
and each chart with ``xml.etree``) and every name must come back as the
text it is, in the table, chart or title that shows it, never as markup.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from html.parser import HTMLParser
from urllib.parse import quote

import aiohttp
import msgspec
import pytest

from reliabilityd.config import Config
from reliabilityd.daemon.ui._trials import task_href
from reliabilityd.rules import Rule
from reliabilityd.stats.slices import shown, slice_id
from reliabilityd.store import Store
from tests.support.helpers import current_snapshot, publish, stored_state, wait_until
from tests.support.http import http_config, post, serving
from tests.support.servers import Mosquitto, RedisServer

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
SCRIPT = "<script>alert(1)</script>"
# A suite name holds no / + # { }; a rule name no white space either.
SUITE = "<u>&amp;\"s\"'q'"
RULE = "<i>&amp;\"r\"'x'"
TASKS = [SCRIPT, "&amp;", '"double"', "'single'", "<b>&lt;&amp;\"'</b>"]
MODELS = [SCRIPT, "&amp;\"'"]
# The markup the pages themselves use; anything else came from a name.
OWN_TAGS = frozenset(
    [
        "form",
        "label",
        "select",
        "option",
        "input",
        "html",
        "head",
        "meta",
        "title",
        "link",
        "script",
        "body",
        "header",
        "main",
        "a",
        "h1",
        "h2",
        "h3",
        "p",
        "span",
        "div",
        "table",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
        "section",
        "ul",
        "li",
        "code",
        "figure",
        "figcaption",
        "svg",
        "path",
        "line",
        "circle",
        "text",
        "g",
        "rect",
        "form",
        "input",
        "button",
        "time",
    ]
)


class Element(msgspec.Struct):
    tag: str
    attrs: dict[str, str]
    within: tuple[str, ...]  # the tags of the elements around it
    inside: list[str]  # the text inside it, nested elements' included

    @property
    def text(self) -> str:
        return "".join(self.inside)


class Document(HTMLParser):
    """Every element (tag, attributes, where, the text inside it), as the parser built them."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[Element] = []
        self.open: list[Element] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs}, tuple(e.tag for e in self.open), [])
        self.elements.append(element)
        if tag not in ("meta", "link", "input", "br", "img"):
            self.open.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        within = tuple(e.tag for e in self.open)
        self.elements.append(Element(tag, {k: v or "" for k, v in attrs}, within, []))

    def handle_endtag(self, tag: str) -> None:
        assert self.open, f"</{tag}> closes nothing"
        assert self.open[-1].tag == tag, f"</{tag}> closes {self.open[-1].tag}"
        self.open.pop()

    def handle_data(self, data: str) -> None:
        for element in self.open:
            element.inside.append(data)

    def all(self, tag: str, cls: str | None = None) -> list[Element]:
        """Each ``tag`` element, of class ``cls`` if given."""
        return [
            e
            for e in self.elements
            if e.tag == tag and (cls is None or cls in e.attrs.get("class", "").split())
        ]

    def title(self) -> list[str]:
        """The page's own title (not a chart's)."""
        return [e.text for e in self.all("title") if "svg" not in e.within]

    def cells(self, table: str) -> list[str]:
        """The text of every cell of the tables of class ``table``."""
        tables = [id(t) for t in self.all("table", table)]
        out: list[str] = []
        current: int | None = None
        for e in self.elements:
            if e.tag == "table":
                current = id(e)
            elif e.tag == "td" and current in tables:
                out.append(e.text)
        return out

    def links(self) -> list[tuple[str, str]]:
        return [(e.attrs.get("href", ""), e.text) for e in self.all("a")]


def parse(page: str) -> Document:
    """The page parsed, checked to hold no markup a name could have brought."""
    doc = Document()
    doc.feed(page)
    doc.close()
    assert doc.open == [], [e.tag for e in doc.open]
    for e in doc.elements:
        assert e.tag in OWN_TAGS, f"<{e.tag}> {e.attrs} came from a name"
        assert not [a for a in e.attrs if a.startswith("on")], e
        if e.tag == "script":  # only the page's own refresh script, by its path
            assert e.attrs.get("src") == "/ui/static/ui.js", e
    return doc


def charts(page: str) -> Iterator[ET.Element]:
    """Each SVG chart of the page, parsed as the XML document it must be."""
    for svg in re.findall(r"<svg\b.*?</svg>", page, flags=re.S):
        yield ET.fromstring(svg)


def svg_titles(page: str) -> list[str]:
    return ["".join(t.itertext()) for svg in charts(page) for t in svg.iter("title")]


def config(redis: RedisServer, broker: Mosquitto, prefix: str) -> Config:
    cfg = http_config(redis, prefix, broker=broker, ks=[3])
    rule = Rule(name=RULE, k=3, below=0.9, trigger="ci-low")
    return msgspec.structs.replace(
        cfg, stats=msgspec.structs.replace(cfg.stats, slice_by=["model"]), alerts=[rule]
    )


def trace_url(run: str, i: int, j: int) -> str:
    """A trial's link: any absolute http(s) URL, quotes and angle brackets included."""
    return f"https://trace.example/{run}/{i}/{j}?q=\"><script>x</script>&amp;'"


def trials(run: str, passes: int) -> list[dict[str, object]]:
    """Six trials of every task, ``passes`` of them passing, on both models."""
    return [
        {
            "suite": SUITE,
            "task": task,
            "trial": f"{run}-{i}-{j}",
            "outcome": "pass" if j < passes else "fail",
            "labels": {"model": MODELS[i % len(MODELS)]},
            "url": trace_url(run, i, j),
        }
        for i, task in enumerate(TASKS)
        for j in range(6)
    ]


async def scene(store: Store, base: str, broker: Mosquitto, topic: str) -> None:
    """A firing rule, movers since its breach, lottery cases, slices, two dead letters (one
    from a topic anybody may name)."""
    assert (await post(base, trials("a", 4)))[0] == 200

    async def breach_recorded() -> bool:
        state = await stored_state(store, SUITE, RULE)
        return state.state == "firing" and await store.alerts.baseline(SUITE, RULE) is not None

    await wait_until(breach_recorded, 30)
    # After the breach every task fails more: each one moved.
    assert (await post(base, trials("b", 1)))[0] == 200
    bad = {"suite": SUITE, "task": SCRIPT, "trial": "x", "outcome": SCRIPT}
    assert (await post(base, [bad]))[0] == 422
    await publish(broker.port, topic, [msgspec.json.encode({**bad, "trial": "y"})])

    async def both_lettered() -> bool:
        return await store.reads.deadletter_count() == 2

    await wait_until(both_lettered, 30)

    async def charted() -> bool:
        history = await store.history.read(SUITE)
        return bool(history.points) and bool(history.transitions)

    await wait_until(charted, 30)
    snap = await current_snapshot(store, SUITE)
    # The scene holds what the pages must show: every task a lottery case.
    assert {row["task"] for row in snap["lottery"]["rows"]} == set(TASKS)
    assert snap["slices"] == len(MODELS)


async def fetch(base: str, path: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http,
        http.get(base + path, headers={"Accept": BROWSER}) as resp,
    ):
        assert resp.content_type == "text/html"
        return resp.status, await resp.text()


@pytest.mark.timeout(120)
async def test_hostile_names_are_text_in_every_table_chart_and_title_of_every_page(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    cfg = config(redis_server, mosquitto, prefix)
    suite_path = "/suites/" + quote(SUITE, safe="")
    topic = f"{prefix}/trials/{SCRIPT}"
    async with serving(cfg) as (daemon, base):
        await scene(daemon.store, base, mosquitto, topic)

        # The index: the suite's row and link.
        for path in ("/", "/?fragment=1"):
            status, page = await fetch(base, path)
            assert status == 200
            doc = parse(page)
            (row,) = doc.all("tr", "suite")
            assert row.attrs["data-suite"] == SUITE
            assert (suite_path, SUITE) in doc.links()
            assert doc.title() == ([] if "fragment" in path else ["reliabilityd"])

        # The suite page, whole and as its fragment, and opened at the alert.
        for query in ("", "?fragment=1", "?k=3", "?rule=" + quote(RULE, safe="")):
            status, page = await fetch(base, suite_path + query)
            assert status == 200, page
            doc = parse(page)
            assert doc.title() == ([] if "fragment" in query else [f"{SUITE}: reliabilityd"])
            assert [e.text for e in doc.all("h1")] == [SUITE]
            (section,) = doc.all("section", "rule")
            assert section.attrs["data-rule"] == RULE
            assert section.attrs["id"] == f"rule-{RULE}"
            assert doc.all("h3")[0].text.startswith(f"{RULE} ")
            movers = doc.cells("movers")
            lottery = doc.cells("lottery")
            slices = [e.text for e in doc.all("p", "slice-name")]
            for task in TASKS:
                assert task in movers, movers
                assert task in lottery, lottery
            # Each lottery case opens to its task's view; beside it its last failing and
            # last passing trial, each its link, opened without opener or referrer. Each
            # task that moved links the failures since the breach (run b's, the last 3).
            tasks = [e for e in doc.all("a", "task") if "table" in e.within]
            assert {e.text for e in tasks} == set(TASKS)
            assert {e.attrs["href"] for e in tasks} == {task_href(SUITE, t) for t in TASKS}
            more = {e.attrs["href"] for e in doc.all("a", "more")}  # 5 failures, 3 shown
            assert more == {task_href(SUITE, t) for t in TASKS}
            anchors = doc.all("a", "trial-link")
            assert {a.attrs["rel"] for a in anchors} == {"noopener noreferrer"}
            hrefs = [a.attrs["href"] for a in anchors]
            for i in range(len(TASKS)):
                assert trace_url("b", i, 5) in hrefs  # the last failing
                assert trace_url("b", i, 0) in hrefs  # the last passing
                for j in (3, 4):  # moved it: failed after the breach began
                    assert trace_url("b", i, j) in hrefs
                assert not any(trace_url("a", i, j) in hrefs for j in range(6))
            for model in MODELS:
                name = shown(slice_id(["model"], {"model": model}))
                assert any(text.startswith(f"{name} ") for text in slices), slices
            assert any(e.text.startswith(f"Since {RULE} began breaching") for e in doc.all("p"))
            letters = doc.cells("letters")
            assert any(SCRIPT in cell and "outcome" in cell for cell in letters), letters
            assert f"mqtt:{topic}" in letters, letters
            # The charts: the rule's threshold and its firing mark, named in their titles.
            titles = svg_titles(page)
            assert any(t.startswith(f"{RULE}: judged against") for t in titles), titles
            assert any(t.startswith(f"{RULE} firing at") for t in titles), titles
            rules = [e.get("data-rule") for svg in charts(page) for e in svg.iter("line")]
            assert RULE in rules, rules
            if query.startswith("?rule="):
                (banner,) = [e.text for e in doc.all("p", "banner")]
                assert banner.startswith(f"Opened at alert {RULE}"), banner
                assert (f"#rule-{RULE}", RULE) in doc.links()

        # Each task's view: its name as text in its heading and title, its trials linked.
        for i, task in enumerate(TASKS):
            status, page = await fetch(base, task_href(SUITE, task))
            assert status == 200, page
            doc = parse(page)
            assert [e.text for e in doc.all("h1")] == [task]
            assert doc.title() == [f"{task} in {SUITE}: reliabilityd"]
            rows = [r.attrs["data-trial"] for r in doc.all("tr", "trial")]
            # Its last 10 of 12, newest first: run b's six, then run a's last four.
            assert rows == [f"{r}-{i}-{j}" for r in "ba" for j in range(5, -1, -1)][:10]
            hrefs = [a.attrs["href"] for a in doc.all("a", "trial-link")]
            assert hrefs == [trace_url(r[0], i, int(r[-1])) for r in rows]

        # The pages that answer a problem say what was asked, as text.
        status, page = await fetch(base, "/suites/" + quote(SUITE + SCRIPT, safe=""))
        assert status == 404
        assert [e.text for e in parse(page).all("p", "empty")] == [
            f"no suite {SUITE + SCRIPT!r} in Redis"
        ]
        for key in ("k", "at"):
            status, page = await fetch(base, f"{suite_path}?{key}=" + quote(SCRIPT, safe=""))
            assert status == 400
            (message,) = [e.text for e in parse(page).all("p", "empty")]
            assert message.startswith(f"{key}={SCRIPT!r}: "), message
        status, page = await fetch(base, "/ui/login?next=" + quote(SUITE + SCRIPT, safe=""))
        assert status == 401
        (hidden,) = [e for e in parse(page).all("input") if e.attrs.get("name") == "next"]
        assert hidden.attrs["value"] == SUITE + SCRIPT
