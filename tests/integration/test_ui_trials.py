"""The task view over HTTP against a real redis-server: a task's last trials and their links.

``/suites/<suite>/tasks/<task>`` as a page and as JSON, names that need
percent-encoding and escaping, links that may and may not be anchors, a
suite that keeps no trials, and the 404s of a suite or a task Redis does not
hold.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

import aiohttp
import msgspec
import yarl

from reliabilityd.config import Config, HttpConfig, HttpToken, SuiteOverride
from reliabilityd.daemon.ui._trials import task_href
from tests.integration.test_ui_hostile import SCRIPT, parse
from tests.support.daemon import store_for
from tests.support.helpers import wait_until
from tests.support.http import http_config, post, serving
from tests.support.servers import RedisServer, free_port

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
# A task name holding what a path, a query, a fragment and markup each mean.
TASK = f"a/b %2F?x=1#frag {SCRIPT} \"q\" 's' &amp;"
# A link is any absolute http(s) URL: quotes and angle brackets are its characters too.
HOSTILE_URL = "https://trace.example/t/1?q=\"><script>alert(1)</script>&x='y'"
VIEWER = "https://viewer.example/app/"


def _config(redis: RedisServer, prefix: str) -> Config:
    cfg = http_config(redis, prefix)
    return msgspec.structs.replace(
        cfg,
        suites=[
            SuiteOverride(match="viewer-*", url_base=VIEWER),
            SuiteOverride(match="quiet-*", recent_trials=0),
        ],
    )


def _trials(suite: str, t0: float) -> list[dict[str, Any]]:
    """Four trials of TASK, oldest first: two links that open, one relative, one none."""
    rows: list[dict[str, Any]] = [
        {"trial": "t1", "outcome": "pass", "url": HOSTILE_URL, "run": f"run {SCRIPT}"},
        {"trial": "t2", "outcome": "fail", "url": "logs/x.eval#/samples/2", "run": "r2"},
        {"trial": f"t3 {SCRIPT}", "outcome": "fail"},
        {"trial": "t4", "outcome": "pass", "url": "http://trace.example/t/4", "run": "r4"},
    ]
    return [{"suite": suite, "task": TASK, "ts": t0 + i, **row} for i, row in enumerate(rows)]


async def _get(base: str, path: str, accept: str, **headers: str) -> tuple[int, str, bytes]:
    async with (
        aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http,
        http.get(base + path, headers={"Accept": accept, **headers}) as resp,
    ):
        return resp.status, resp.content_type, await resp.read()


async def _counted(cfg: Config, suite: str, task: str, n: int) -> None:
    async with store_for(cfg) as store:

        async def there() -> bool:
            return (await store.reads.task_counts(suite)).get(task, (0, 0))[0] >= n

        await wait_until(there, 30)


async def test_the_task_view_lists_the_last_trials_newest_first_as_a_page_and_as_json(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = _config(redis_server, prefix)
    t0 = float(int(time.time()) - 30)  # kept to the second
    async with serving(cfg) as (_, base):
        status, _, _ = await post(base, _trials("web", t0) + _trials("viewer-1", t0))
        assert status == 200
        await _counted(cfg, "web", TASK, 4)
        await _counted(cfg, "viewer-1", TASK, 4)
        path = task_href("web", TASK)
        assert path == "/suites/web/tasks/" + quote(TASK, safe="")
        for query in ("", "?fragment=1"):
            status, kind, body = await _get(base, path + query, BROWSER)
            assert (status, kind) == (200, "text/html")
            page = body.decode()
            doc = parse(page)  # every name and link came back as text, never as markup
            assert [e.text for e in doc.all("h1")] == [TASK]
            rows = doc.all("tr", "trial")
            assert [r.attrs["data-trial"] for r in rows] == ["t4", f"t3 {SCRIPT}", "t2", "t1"]
            assert [e.text for e in doc.all("span", "outcome")] == ["pass", "fail", "fail", "pass"]
            assert [e.text for e in doc.all("td", "run")] == ["r4", "\u2013", "r2", f"run {SCRIPT}"]
            # Only the absolute http(s) links are anchors, each opened without the opener
            # and without a referrer; the relative one (no url_base here) is text.
            anchors = doc.all("a", "trial-link")
            assert [a.attrs["href"] for a in anchors] == ["http://trace.example/t/4", HOSTILE_URL]
            assert {a.attrs["rel"] for a in anchors} == {"noopener noreferrer"}
            assert [e.text for e in doc.all("code", "unlinked")] == ["logs/x.eval#/samples/2"]
            assert all(e.text.endswith(" s ago") for e in doc.all("time")), doc.all("time")
            assert ("/suites/web", "web") in doc.links()
            assert not doc.all("p", "links-help")  # some trial links: no help needed
        # The same view as JSON (any Accept but a browser's): the counts and each trial
        # as `reliabilityd trials --json` prints it.
        for accept in ("application/json", "*/*"):
            status, kind, body = await _get(base, path, accept)
            assert (status, kind) == (200, "application/json")
            view = msgspec.json.decode(body)
            assert (view["suite"], view["task"], view["n"], view["c"]) == ("web", TASK, 4, 2)
            assert view["kept"] == 10
            assert [
                (r["trial"], r["outcome"], r["run"], r["url"], r["ts"]) for r in view["trials"]
            ] == [
                ("t4", "pass", "r4", "http://trace.example/t/4", t0 + 3),
                (f"t3 {SCRIPT}", "fail", None, None, t0 + 2),
                ("t2", "fail", "r2", "logs/x.eval#/samples/2", t0 + 1),
                ("t1", "pass", f"run {SCRIPT}", HOSTILE_URL, t0),
            ]
        # A suite with a url_base: the relative link resolved, an anchor like the others.
        status, _, body = await _get(base, task_href("viewer-1", TASK), BROWSER)
        assert status == 200
        hrefs = [a.attrs["href"] for a in parse(body.decode()).all("a", "trial-link")]
        assert hrefs == [
            "http://trace.example/t/4",
            VIEWER + "logs/x.eval#/samples/2",
            HOSTILE_URL,
        ]


async def test_a_task_without_trials_says_where_they_and_links_come_from(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = _config(redis_server, prefix)
    async with serving(cfg) as (_, base):
        plain = [
            {"suite": "web", "task": "plain", "trial": f"p{i}", "outcome": "pass"} for i in range(2)
        ]
        status, _, _ = await post(base, _trials("quiet-1", time.time()) + plain)
        assert status == 200
        await _counted(cfg, "quiet-1", TASK, 4)
        await _counted(cfg, "web", "plain", 2)
        # The suite keeps no recent trials (recent_trials = 0): the counts, and why no list.
        status, _, body = await _get(base, task_href("quiet-1", TASK), BROWSER)
        assert status == 200
        doc = parse(body.decode())
        assert [e.text for e in doc.all("h1")] == [TASK]
        assert not doc.all("table", "trials")
        assert [e.text for e in doc.all("p", "empty")] == ["This suite keeps no recent trials."]
        (help_,) = [e.text for e in doc.all("p", "links-help")]
        assert "recent_trials = 0" in help_
        assert "docs/drill-down.md" in help_
        status, _, body = await _get(base, task_href("quiet-1", TASK), "application/json")
        assert status == 200
        view = msgspec.json.decode(body)
        assert (view["n"], view["c"], view["kept"], view["trials"]) == (4, 2, 0, [])
        # Trials kept, none with a link: the list, and where links come from.
        status, _, body = await _get(base, task_href("web", "plain"), BROWSER)
        assert status == 200
        doc = parse(body.decode())
        assert [r.attrs["data-trial"] for r in doc.all("tr", "trial")] == ["p1", "p0"]
        assert not doc.all("a", "trial-link")
        (help_,) = [e.text for e in doc.all("p", "links-help")]
        assert "url_template" in help_
        assert "url_base" in help_
        assert "docs/drill-down.md" in help_


async def test_an_unknown_suite_or_task_is_a_404_naming_it(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = _config(redis_server, prefix)
    async with serving(cfg) as (_, base):
        status, _, _ = await post(
            base, [{"suite": "web", "task": "t", "trial": "1", "outcome": "pass"}]
        )
        assert status == 200
        await _counted(cfg, "web", "t", 1)
        cases = {
            task_href("web", TASK): f"no task {TASK!r} in suite 'web' in Redis",
            task_href(f"nope{SCRIPT}", "t"): f"no suite {'nope' + SCRIPT!r} in Redis",
        }
        for path, message in cases.items():
            status, kind, body = await _get(base, path, BROWSER)
            assert (status, kind) == (404, "text/html")
            assert [e.text for e in parse(body.decode()).all("p", "empty")] == [message]
            status, kind, body = await _get(base, path, "application/json")
            assert (status, kind) == (404, "application/json")
            assert msgspec.json.decode(body) == {"error": message}


async def test_beyond_loopback_the_task_view_needs_a_token_that_may_read_the_suite(
    redis_server: RedisServer, prefix: str
) -> None:
    port = free_port()
    http = HttpConfig(
        host="0.0.0.0",
        port=port,
        token="s3cret",
        tokens=[HttpToken(token="other-reader", read=["other-*"])],
    )
    cfg = msgspec.structs.replace(_config(redis_server, prefix), http=http)
    base = f"http://127.0.0.1:{port}"
    path = task_href("web", TASK)
    async with serving(cfg):
        status, _, _ = await post(base, _trials("web", time.time()), token="s3cret")
        assert status == 200
        await _counted(cfg, "web", TASK, 4)
        # No token: the form for a browser, 401 for JSON; a token for other suites: 403.
        status, kind, body = await _get(base, path, BROWSER)
        assert (status, kind) == (401, "text/html")
        (target,) = [
            e.attrs["value"] for e in parse(body.decode()).all("input") if e.attrs["name"] == "next"
        ]
        status, kind, body = await _get(base, path, "application/json")
        assert (status, kind) == (401, "application/json")
        assert "a valid token" in msgspec.json.decode(body)["error"]
        other = {"Authorization": "Bearer other-reader"}
        assert (await _get(base, path, BROWSER, **other))[0] == 403
        assert (await _get(base, path, "application/json", **other))[0] == 403
        # The form sends the reader back to exactly this task's view, names intact.
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
            login = {"token": "s3cret", "next": target}
            async with session.post(f"{base}/ui/login", data=login, allow_redirects=False) as r:
                assert r.status == 303
                back = r.headers["Location"]
            async with session.get(
                yarl.URL(base + back, encoded=True), headers={"Accept": BROWSER}
            ) as r:
                assert r.status == 200
                assert [e.text for e in parse(await r.text()).all("h1")] == [TASK]
        reader = {"Authorization": "Bearer s3cret"}
        status, _, body = await _get(base, path, "application/json", **reader)
        assert status == 200
        assert [r["trial"] for r in msgspec.json.decode(body)["trials"]][-1] == "t1"
