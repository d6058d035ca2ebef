"""The UI's routes on the daemon's HTTP app: pages, their fragments, static files, the token form.

``GET /suites/<suite>`` is negotiated: a request whose ``Accept`` names
``text/html`` (a browser) at least as high as ``application/json`` gets the
page; anything else (``application/json``, ``*/*``, no header) gets the
snapshot document, byte for byte what the JSON handler serves, and both say
``Vary: Accept``. Every read asks ``can_read`` first: without a valid token
the answer is 401 with the token form, with a token that may not read the
suite 403, as for JSON. The form counts wrong tokens per client address
(``daemon._peers``: through ``http.trusted_proxies``) and answers 429 with
Retry-After once a client has sent too many. A page reads through its
source's ``reading``, the HTTP port's own pool and places: when none comes
free in time the answer is 503 with Retry-After, and no page ever takes a
connection that ingest uses.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from importlib import resources
from typing import Protocol
from urllib.parse import quote

from aiohttp import web

from reliabilityd.config import Config
from reliabilityd.daemon._http_answers import RETRY_AFTER
from reliabilityd.daemon._offload import Busy
from reliabilityd.daemon._peers import Peers, Throttle
from reliabilityd.daemon.ui import _data, _index, _pages, _trials
from reliabilityd.daemon.ui._access import (
    AUTHORITY,
    COOKIE,
    can_read,
    grant_of,
    readable,
    token_reads,
)
from reliabilityd.logs import RateLimited
from reliabilityd.store import ROW_STATES, Store

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
STATIC = {"ui.css": "text/css", "ui.js": "text/javascript"}
HTML = "text/html"


class Source(Protocol):
    """What the pages read through: the HTTP port's backend (its pool, its places) and the
    daemon's config."""

    @property
    def config(self) -> Config: ...

    def reading(self) -> AbstractAsyncContextManager[Store]:
        """A place in flight and the HTTP port's store; Busy when none came free in time."""
        ...


class BadQuery(ValueError):
    """A query parameter that does not parse; answered 400 with the message."""


def wants_html(accept: str) -> bool:
    """True when ``accept`` ranks text/html above zero and at least as high as JSON."""
    q: dict[str, float] = {}
    for part in accept.split(","):
        media, *params = (p.strip() for p in part.split(";"))
        weight = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip() == "q":
                try:
                    weight = float(value)
                except ValueError:
                    weight = 0.0
        q[media.lower()] = max(weight, q.get(media.lower(), 0.0))
    html = q.get("text/html", 0.0)
    return html > 0 and html >= q.get("application/json", 0.0)


def parse_time(text: str | None, name: str) -> float | None:
    """Unix seconds or RFC 3339 (``2026-12-01T13:05:00Z``); BadQuery otherwise."""
    if text is None or text == "":
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "+"))
    except ValueError:
        raise BadQuery(f"{name}={text!r}: give unix seconds or an RFC 3339 time") from None
    if moment.tzinfo is None:
        raise BadQuery(f"{name}={text!r}: an RFC 3339 time needs its offset (Z for UTC)")
    return moment.timestamp()


def _html(text: str, status: int = 200) -> web.Response:
    # Cache-Control, the Content-Security-Policy and the rest: daemon._http_headers.
    return web.Response(text=text, status=status, content_type=HTML)


def _problem(request: web.Request, status: int, message: str, *, html: bool) -> web.Response:
    if not html:
        return web.json_response({"error": message}, status=status)
    main = f'<h1>{status}</h1><p class="empty">{_escape(message)}</p>'
    return _html(_pages.layout(f"{status}", main, refresh=None), status)


def _escape(text: str) -> str:
    from html import escape

    return escape(text)


def _refused(request: web.Request, suite: str | None) -> web.Response:
    """401 with the token form without a valid token; 403 for a token that may not read."""
    if grant_of(request).anonymous:
        return _login_form(request)
    what = "any suite" if suite is None else f"suite {suite!r}"
    return _problem(request, 403, f"This token may not read {what}.", html=True)


def _login_form(request: web.Request, *, wrong: bool = False, throttled: int = 0) -> web.Response:
    target = request.path_qs if request.path != "/ui/login" else request.query.get("next", "/")
    banner = (
        f'<p class="banner">Too many wrong tokens: try again in {throttled} s.</p>'
        if throttled
        else '<p class="banner">That token is not valid.</p>'
        if wrong
        else ""
    )
    main = (
        "<h1>Token required</h1>"
        + banner
        + "<p>This daemon answers beyond loopback: reads need the <code>[http] token</code>.</p>"
        '<form class="token" method="post" action="/ui/login">'
        f'<input type="hidden" name="next" value="{_escape(target)}">'
        '<input type="password" name="token" autocomplete="current-password" '
        'placeholder="token" aria-label="token" required>'
        '<button type="submit">Open</button></form>'
    )
    if throttled:
        response = _html(_pages.layout("too many tries", main, refresh=None), 429)
        response.headers["Retry-After"] = str(throttled)
        return response
    return _html(_pages.layout("token required", main, refresh=None), 401)


class Routes:
    def __init__(self, source: Source, json_suite: Handler, peers: Peers) -> None:
        self.source = source
        self.json_suite = json_suite
        self.peers = peers
        # Wrong tokens on the form, per client address (daemon._peers).
        self.throttle = Throttle()
        self._failures = RateLimited()
        self._throttled = RateLimited()

    async def _guard(
        self,
        request: web.Request,
        page: Callable[[], Awaitable[web.Response]],
        *,
        html: bool = True,
    ) -> web.Response:
        try:
            return await page()
        except BadQuery as exc:
            return _problem(request, 400, str(exc), html=html)
        except Busy as exc:
            response = _problem(request, 503, f"{exc}: retry", html=html)
            response.headers["Retry-After"] = str(RETRY_AFTER)
            return response
        except Exception as exc:  # a Redis outage: the page says so, the daemon goes on
            self._failures.emit(
                logging.WARNING,
                "ui_read_failed",
                path=request.path,
                error=f"{type(exc).__name__}: {exc}"[:200],
            )
            return _problem(request, 503, f"Redis unavailable: {type(exc).__name__}", html=html)

    async def _index_page(self, request: web.Request) -> _index.IndexPage:
        """The index page the query asks for (``page``, ``state``, ``prefix``, ``q``)."""
        q = request.query
        number = q.get("page", "1")
        if not number.isdigit() or int(number) < 1:
            raise BadQuery(f"page={number!r}: give a positive integer")
        state = q.get("state") or None
        if state is not None and state not in ROW_STATES:
            raise BadQuery(f"state={state!r}: give one of {', '.join(ROW_STATES)}")
        every = grant_of(request).may_all("read")
        async with self.source.reading() as store:
            return await _data.index(
                store,
                time.time(),
                page=int(number),
                state=state,
                prefix=q.get("prefix", ""),
                contains=q.get("q", ""),
                readable=None if every else (lambda suites: readable(request, suites)),
            )

    async def index(self, request: web.Request) -> web.Response:
        if not can_read(request, None):
            return _refused(request, None)

        async def page() -> web.Response:
            main = _index.index_main(await self._index_page(request))
            if request.query.get("fragment"):
                return _html(main)
            refresh = request.rel_url.update_query(fragment="1")
            return _html(_pages.layout("reliabilityd", main, refresh=str(refresh)))

        return await self._guard(request, page)

    async def suites_json(self, request: web.Request) -> web.Response:
        """``GET /v1/suites``: the index's page as JSON (``_index.index_json``)."""
        if not can_read(request, None):
            what = "a valid token" if grant_of(request).anonymous else "a token that may read"
            return web.json_response(
                {"error": f"listing suites needs {what}"},
                status=401 if grant_of(request).anonymous else 403,
            )

        async def page() -> web.Response:
            body = _index.index_json(await self._index_page(request))
            return web.Response(body=body, content_type="application/json")

        return await self._guard(request, page, html=False)

    async def suite(self, request: web.Request) -> web.StreamResponse:
        response = await self._suite(request)
        response.headers["Vary"] = "Accept"  # a page or JSON, by Accept: caches must know
        return response

    async def _suite(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["suite"]
        if not wants_html(request.headers.get("Accept", "")):
            # The JSON handler asks the same scopes, answering 401 or 403 itself.
            return await self.json_suite(request)
        if not can_read(request, name):
            return _refused(request, name)

        async def page() -> web.Response:
            q = request.query
            k_text = q.get("k")
            if k_text is not None and not k_text.isdigit():
                raise BadQuery(f"k={k_text!r}: give a positive integer")
            anchor, since = parse_time(q.get("at"), "at"), parse_time(q.get("since"), "since")
            async with self.source.reading() as store:
                view = await _data.suite_page(
                    store,
                    self.source.config,
                    name,
                    now=time.time(),
                    slice=q.get("slice") or None,
                    k=None if k_text is None else int(k_text),
                    focus=q.get("rule") or None,
                    anchor=anchor,
                    since=since,
                )
            if view is None:
                what = f"suite {name!r}"
                if q.get("slice"):
                    what = f"slice {q['slice']!r} of {what}"
                return _problem(request, 404, f"no {what} in Redis", html=True)
            main = _pages.suite_main(view)
            if q.get("fragment"):
                return _html(main)
            refresh = request.rel_url.update_query(fragment="1")
            title = name if view.slice is None else f"{name} [{view.slice}]"
            return _html(_pages.layout(f"{title}: reliabilityd", main, refresh=str(refresh)))

        return await self._guard(request, page)

    async def task(self, request: web.Request) -> web.Response:
        """``GET /suites/<suite>/tasks/<task>``: the task's last trials with their links, a
        page or (negotiated as the suite's page is) JSON; 404 for a suite or task Redis
        does not hold."""
        response = await self._task(request)
        response.headers["Vary"] = "Accept"
        return response

    async def _task(self, request: web.Request) -> web.Response:
        suite, task = request.match_info["suite"], request.match_info["task"]
        html = wants_html(request.headers.get("Accept", ""))
        if not can_read(request, suite):
            if html:
                return _refused(request, suite)
            anonymous = grant_of(request).anonymous
            what = "a valid token" if anonymous else "a token that may read the suite"
            return web.json_response(
                {"error": f"reading suite {suite!r} needs {what}"},
                status=401 if anonymous else 403,
            )

        async def page() -> web.Response:
            async with self.source.reading() as store:
                view = await _data.task_page(
                    store, self.source.config, suite, task, now=time.time()
                )
                known = view is not None or suite in await store.reads.suites()
            if view is None:
                what = f"task {task!r} in suite {suite!r}" if known else f"suite {suite!r}"
                return _problem(request, 404, f"no {what} in Redis", html=html)
            if not html:
                return web.Response(body=_trials.task_json(view), content_type="application/json")
            main = _trials.task_main(view)
            if request.query.get("fragment"):
                return _html(main)
            refresh = request.rel_url.update_query(fragment="1")
            title = f"{task} in {suite}: reliabilityd"
            return _html(_pages.layout(title, main, refresh=str(refresh)))

        return await self._guard(request, page, html=html)

    async def static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC:
            raise web.HTTPNotFound()
        body = resources.files("reliabilityd.daemon.ui").joinpath("static", name).read_bytes()
        return web.Response(
            body=body, content_type=STATIC[name], headers={"Cache-Control": "max-age=300"}
        )

    async def login_form(self, request: web.Request) -> web.Response:
        return _login_form(request)

    async def login(self, request: web.Request) -> web.Response:
        client = self.peers.client_address(request)
        wait = self.throttle.retry_after(client)
        if wait:  # before the token is even read: a guess gets no answer
            self._throttled.emit(logging.WARNING, "ui_login_throttled", client=client)
            return _login_form(request, throttled=wait)
        form = await request.post()
        token = str(form.get("token", ""))
        target = str(form.get("next", "/"))
        if not target.startswith("/") or target.startswith("//"):
            target = "/"  # only this daemon's own pages
        if not token_reads(request.app[AUTHORITY], token):
            self.throttle.failed(client)
            return _login_form(request, wrong=True)
        response = web.Response(status=303, headers={"Location": quote(target, safe="/?=&%:;,+@#")})
        # Lax: sent when a person follows an alert's link from a chat or a mail.
        response.set_cookie(
            COOKIE, token, httponly=True, samesite="Lax", secure=request.secure, path="/"
        )
        return response
