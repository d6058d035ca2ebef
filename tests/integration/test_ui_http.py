"""The web UI over HTTP against a real redis-server: negotiation, access, fragments, statics."""

from __future__ import annotations

import re
from html import escape
from urllib.parse import quote

import aiohttp
import msgspec

from reliabilityd.config import Config, HttpConfig
from reliabilityd.daemon.ui import _access
from reliabilityd.stats.slices import shown, slice_id
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import Series
from tests.support.daemon import store_for
from tests.support.helpers import current_snapshot, stored_snapshot, wait_until
from tests.support.http import event, http_config, post, serving
from tests.support.servers import RedisServer, free_port

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


async def _get(
    base: str, path: str, *, accept: str | None = None, **headers: str
) -> tuple[int, str, bytes]:
    if accept is not None:
        headers["Accept"] = accept
    async with (
        aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http,
        http.get(base + path, headers=headers, allow_redirects=False) as resp,
    ):
        return resp.status, resp.content_type, await resp.read()


async def _with_snapshot(cfg: Config, base: str) -> bytes:
    batch = [event(f"t{i}", str(j), "pass" if j else "fail") for i in range(4) for j in range(3)]
    assert (await post(base, batch))[0] == 200
    bad = {"suite": "web", "task": "t0", "trial": "x", "outcome": "PASS"}
    assert (await post(base, [bad]))[0] == 422
    async with store_for(cfg) as store:
        await current_snapshot(store, "web")  # of every trial just posted
        raw = await store.snapshots.snapshot_json("web")
        assert raw is not None
        return raw


async def test_json_clients_get_the_snapshot_and_browsers_the_page(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = http_config(redis_server, prefix)
    async with serving(cfg) as (_, base):
        await _with_snapshot(cfg, base)
        for accept in ("application/json", "*/*", None):
            status, kind, body = await _get(base, "/suites/web", accept=accept)
            assert status == 200
            assert kind == "application/json"
            assert msgspec.json.decode(body)["suite"] == "web"
        status, kind, body = await _get(base, "/suites/web", accept=BROWSER)
        assert status == 200
        assert kind == "text/html"
        page = body.decode()
        assert "<h1>web</h1>" in page
        assert page.count('<svg class="chart"') == 2
        assert 'data-refresh="/suites/web?fragment=1"' in page
        assert "outcome" in page  # the dead letter's reason
        # The fragment is the page's <main> alone, for the refresh script.
        status, kind, fragment = await _get(base, "/suites/web?fragment=1", accept=BROWSER)
        assert status == 200
        assert fragment.decode().startswith("<h1>web</h1>")
        assert b"<html" not in fragment
        # The index lists the suite, with the one dead letter that named it.
        status, kind, index = await _get(base, "/", accept=BROWSER)
        assert status == 200
        assert re.search(r'data-suite="web".*?class="rejected">1<', index.decode(), re.S)


async def test_a_sliced_suites_page_lists_its_slices_as_their_snapshots_say(
    redis_server: RedisServer, prefix: str
) -> None:
    base_cfg = http_config(redis_server, prefix)
    cfg = msgspec.structs.replace(
        base_cfg, stats=msgspec.structs.replace(base_cfg.stats, slice_by=["model"])
    )
    batch = [
        {**event(f"t{i}", f"{m}-{j}", "pass" if j or m == "b" else "fail"), "labels": {"model": m}}
        for m in ("a", "b<&>")
        for i in range(4)
        for j in range(3)
    ]
    ids = [slice_id(["model"], {"model": m}) for m in ("a", "b<&>")]
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        assert (await post(base, batch))[0] == 200

        async def slices_ready() -> bool:
            docs = await store.snapshots.documents([Series("web", sid) for sid in ids])
            whole = await stored_snapshot(store, "web")
            return whole is not None and all(docs) and whole.slices == 2

        await wait_until(slices_ready)
        status, _, page = await _get(base, "/suites/web?fragment=1", accept=BROWSER)
        assert status == 200
        html = page.decode()
        for sid in ids:
            status, kind, raw = await _get(base, f"/suites/web?slice={quote(sid)}")
            assert (status, kind) == (200, "application/json")
            snap = msgspec.json.decode(raw, type=Snapshot)
            assert snap.slice == sid
            # The page's k: without rules, the largest k of the snapshot.
            est = snap.get("pass^k", max(e.k for e in snap.pass_hat_k))
            assert est is not None
            assert est.ci is not None
            assert est.value is not None
            # Its card beside the others: the value and interval in percent, its size, and
            # a link to its own page.
            start = html.index(f'<section class="slice" data-slice="{escape(sid)}">')
            card = html[start : html.index("</section>", start)]
            assert escape(shown(sid)) in card
            assert f"{100 * est.value:.1f}%" in card
            assert f"[{100 * est.ci[0]:.1f}, {100 * est.ci[1]:.1f}]" in card
            assert "4 tasks, 12 trials" in card
            href = escape(f"/suites/web?slice={quote(sid, safe='')}")
            assert f'href="{href}"' in card
            # The slice's own page: its snapshot's numbers and its charts.
            status, _, own = await _get(base, f"/suites/web?slice={quote(sid)}", accept=BROWSER)
            assert status == 200
            text = own.decode()
            assert f'<span class="slice-id">[{escape(shown(sid))}]</span>' in text
            assert text.count('<svg class="chart"') == 2
            assert f"{100 * est.value:.1f}%" in text
        assert "<h2>Slices</h2>" in html
        status, _, _ = await _get(base, "/suites/web?slice=model%3Dnone", accept=BROWSER)
        assert status == 404
        assert "b<&>" not in html  # escaped


async def test_the_json_body_is_the_stored_document_with_its_slices_and_rules_added(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = http_config(redis_server, prefix)
    async with serving(cfg) as (daemon, base):
        await _with_snapshot(cfg, base)
        status, _, body = await _get(base, "/suites/web", accept="application/json")
        assert status == 200
        # Read after the GET: the daemon may have written a newer one meanwhile.
        stored = await daemon.store.snapshots.snapshot_json("web")
        assert stored is not None
        assert msgspec.json.decode(body)["version"] <= msgspec.json.decode(stored)["version"]
        if msgspec.json.decode(body)["version"] == msgspec.json.decode(stored)["version"]:
            # The stored bytes, then what the registry adds: no slice, no rule here.
            assert body == stored.rstrip()[:-1] + b',"slice_snapshots":[],"alerts":[]}'


async def test_unknown_suites_and_bad_queries_say_what_is_wrong(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = http_config(redis_server, prefix)
    async with serving(cfg) as (_, base):
        await _with_snapshot(cfg, base)
        status, kind, body = await _get(base, "/suites/nobody", accept=BROWSER)
        assert (status, kind) == (404, "text/html")
        assert "no suite &#x27;nobody&#x27; in Redis" in body.decode()
        status, _, body = await _get(base, "/suites/nobody", accept="application/json")
        assert status == 404
        assert msgspec.json.decode(body)["error"] == "no snapshot for suite 'nobody'"
        status, _, body = await _get(base, "/suites/web?at=yesterday", accept=BROWSER)
        assert status == 400
        assert "unix seconds or an RFC 3339 time" in body.decode()
        status, _, body = await _get(base, "/suites/web?k=x", accept=BROWSER)
        assert status == 400


async def test_static_files_come_from_the_package(redis_server: RedisServer, prefix: str) -> None:
    cfg = http_config(redis_server, prefix)
    async with serving(cfg) as (_, base):
        status, kind, css = await _get(base, "/ui/static/ui.css")
        assert (status, kind) == (200, "text/css")
        assert b"prefers-color-scheme: dark" in css
        status, kind, js = await _get(base, "/ui/static/ui.js")
        assert (status, kind) == (200, "text/javascript")
        assert b"visibilityState" in js
        # Nothing the pages load comes from elsewhere.
        assert b"http://" not in css + js
        assert b"https://" not in css + js
        for path in ("/ui/static/other.js", "/ui/static/..%2F_pages.py"):
            assert (await _get(base, path))[0] == 404


async def test_beyond_loopback_every_read_needs_the_token(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = http_config(redis_server, prefix, token="s3cret")
    port = free_port()
    cfg = msgspec.structs.replace(cfg, http=HttpConfig(host="0.0.0.0", port=port, token="s3cret"))
    async with serving(cfg) as (_, _base):
        base = f"http://127.0.0.1:{port}"
        await _with_snapshot_token(cfg, base)
        # Even from 127.0.0.1: a proxy on this host must not open the pages.
        status, _, body = await _get(base, "/suites/web", accept="application/json")
        assert status == 401
        assert msgspec.json.decode(body)["error"] == "a valid bearer token is required"
        status, kind, form = await _get(base, "/suites/web?rule=r", accept=BROWSER)
        assert (status, kind) == (401, "text/html")
        assert 'name="next" value="/suites/web?rule=r"' in form.decode()
        assert (await _get(base, "/", accept=BROWSER))[0] == 401
        bearer = {"Authorization": "Bearer s3cret"}
        assert (await _get(base, "/suites/web", accept="application/json", **bearer))[0] == 200
        assert (await _get(base, "/", accept=BROWSER, **bearer))[0] == 200
        # The form: a wrong token is refused, the right one sets the cookie and goes on.
        # unsafe: keep cookies of an IP address, as browsers do.
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            login = {"token": "wrong", "next": "/suites/web"}
            async with http.post(f"{base}/ui/login", data=login, allow_redirects=False) as r:
                assert r.status == 401
                assert _access.COOKIE not in r.cookies
            login["token"] = "s3cret"
            async with http.post(f"{base}/ui/login", data=login, allow_redirects=False) as r:
                assert r.status == 303
                assert r.headers["Location"] == "/suites/web"
                cookie = r.cookies[_access.COOKIE]
                assert cookie["httponly"]
                assert cookie["samesite"] == "Lax"
            async with http.get(f"{base}/suites/web", headers={"Accept": BROWSER}) as r:
                assert r.status == 200
                assert "<h1>web</h1>" in await r.text()
            # Only this daemon's own pages are a place to go after the form.
            login["next"] = "//elsewhere.example/"
            async with http.post(f"{base}/ui/login", data=login, allow_redirects=False) as r:
                assert r.headers["Location"] == "/"
        # Probes and /metrics stay open.
        assert (await _get(base, "/healthz"))[0] == 200


async def _with_snapshot_token(cfg: Config, base: str) -> None:
    batch = [event("t1", "a"), event("t1", "b", "fail")]
    headers = {"Content-Type": "application/json", "Authorization": "Bearer s3cret"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{base}/v1/trials", data=msgspec.json.encode(batch), headers=headers) as r,
    ):
        assert r.status == 200
    async with store_for(cfg) as store:
        await current_snapshot(store, "web")
