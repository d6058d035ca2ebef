"""What the HTTP port's answers say to browsers and caches, against a real daemon and
redis-server: a Content-Security-Policy without inline script and no framing on pages, no
caching of reads, ``Vary: Accept`` where the answer depends on it, the token form throttled
per client address (through trusted proxies only), and 403 for a page a token may not read."""

from __future__ import annotations

from html.parser import HTMLParser

import aiohttp
import msgspec

from reliabilityd.config import Config, GrantConfig, HttpConfig, HttpToken
from tests.support.daemon import make_config, store_for
from tests.support.helpers import wait_until
from tests.support.http import event, http_config, post, serving
from tests.support.servers import RedisServer, free_port

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
TEAM_A = "teamA-token-5d1c"
WRITER = "writer-token-88af"
ALL = "all-suites-token-0b7e"


async def _get(
    base: str, path: str, *, accept: str = "application/json", token: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    headers = {"Accept": accept}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with (
        aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http,
        http.get(base + path, headers=headers, allow_redirects=False) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.read()


class _Inline(HTMLParser):
    """Every inline script, style element, style attribute and event handler of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = {name for name, _ in attrs}
        if tag == "script" and "src" not in names:
            self.found.append("<script> without src")
        if tag == "style":
            self.found.append("<style>")
        for name, value in attrs:
            if name == "style" or name.startswith("on"):
                self.found.append(f"<{tag} {name}=...>")
            if value is not None and value.strip().lower().startswith("javascript:"):
                self.found.append(f"<{tag} {name}=javascript:...>")


async def _snapshot(cfg: Config, base: str) -> None:
    batch = [event(f"t{i}", str(j), "pass" if j else "fail") for i in range(3) for j in range(3)]
    assert (await post(base, batch))[0] == 200
    async with store_for(cfg) as store:

        async def ready() -> bool:
            return await store.snapshots.document("web") is not None

        await wait_until(ready)


async def test_pages_allow_only_their_own_script_and_style_and_no_framing(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = http_config(redis_server, prefix)
    async with serving(cfg) as (_, base):
        await _snapshot(cfg, base)
        for path in ("/", "/?fragment=1", "/suites/web", "/suites/web?k=x", "/suites/nope"):
            status, headers, body = await _get(base, path, accept=BROWSER)
            assert headers["Content-Type"].startswith("text/html"), (path, status)
            policy = headers["Content-Security-Policy"]
            directives = {d.split()[0]: d.split()[1:] for d in policy.split("; ")}
            assert directives["default-src"] == ["'none'"]
            assert directives["script-src"] == ["'self'"]
            assert directives["style-src"] == ["'self'"]
            assert directives["frame-ancestors"] == ["'none'"]
            assert "'unsafe-inline'" not in policy
            assert headers["X-Frame-Options"] == "DENY"
            assert headers["Cache-Control"] == "no-store"
            inline = _Inline()
            inline.feed(body.decode())
            assert inline.found == [], (path, inline.found)


async def test_reads_are_kept_by_no_cache_and_the_suite_url_varies_on_accept(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = http_config(redis_server, prefix)
    async with serving(cfg) as (_, base):
        await _snapshot(cfg, base)
        for path in ("/suites/web", "/suites/nope", "/healthz", "/readyz", "/metrics"):
            status, headers, _ = await _get(base, path)
            assert headers["Cache-Control"] == "no-store", (path, status)
            assert headers["X-Content-Type-Options"] == "nosniff"
        compare = "/v1/compare?baseline=web&candidate=web&min_shared=1"
        status, headers, _ = await _get(base, compare)
        assert (status, headers["Cache-Control"]) == (200, "no-store")
        for accept in ("application/json", BROWSER):
            status, headers, _ = await _get(base, "/suites/web", accept=accept)
            assert (status, headers["Vary"]) == (200, "Accept")
        # The static files change only with the package: cached for a while.
        status, headers, _ = await _get(base, "/ui/static/ui.js")
        assert (status, headers["Cache-Control"]) == (200, "max-age=300")


def _token_config(redis: RedisServer, prefix: str, **http: object) -> Config:
    cfg = make_config(
        redis_url=redis.url,
        mqtt_url="mqtt://127.0.0.1:1",
        prefix=prefix,
        http=HttpConfig(port=free_port(), token=ALL, **http),  # type: ignore[arg-type]
    )
    return msgspec.structs.replace(cfg, mqtt=msgspec.structs.replace(cfg.mqtt, enabled=False))


async def _login(base: str, token: str, forwarded: str | None = None) -> tuple[int, str | None]:
    headers = {} if forwarded is None else {"X-Forwarded-For": forwarded}
    async with (
        aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http,
        http.post(
            f"{base}/ui/login",
            data={"token": token, "next": "/"},
            headers=headers,
            allow_redirects=False,
        ) as resp,
    ):
        await resp.read()
        return resp.status, resp.headers.get("Retry-After")


async def test_the_token_form_throttles_wrong_tokens_per_client_behind_a_trusted_proxy(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = _token_config(redis_server, prefix, trusted_proxies=["127.0.0.0/8"])
    async with serving(cfg) as (_, base):
        client = "198.51.100.7"
        answers = [await _login(base, f"guess-{i}", client) for i in range(10)]
        assert answers == [(401, None)] * 10
        status, retry = await _login(base, "guess-10", client)
        assert status == 429
        assert retry is not None
        assert int(retry) >= 1
        # While throttled even the right token gets no answer but 429.
        assert (await _login(base, ALL, client))[0] == 429
        # What a client writes left of the proxy's own entry does not make it another one.
        assert (await _login(base, "guess", f"203.0.113.9, {client}"))[0] == 429
        # Another client behind the same proxy has its own tries.
        assert (await _login(base, "guess", "198.51.100.8"))[0] == 401
        assert (await _login(base, ALL, "198.51.100.8"))[0] == 303


async def test_without_trusted_proxies_x_forwarded_for_is_not_believed(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = _token_config(redis_server, prefix)
    async with serving(cfg) as (_, base):
        answers = [await _login(base, f"guess-{i}", f"198.51.100.{i}") for i in range(10)]
        assert answers == [(401, None)] * 10
        # Every try came from 127.0.0.1, whatever the header said.
        assert (await _login(base, "guess", "198.51.100.200"))[0] == 429
        assert (await _login(base, "guess"))[0] == 429


async def test_a_page_a_token_may_not_read_answers_403_as_json_does(
    redis_server: RedisServer, prefix: str
) -> None:
    tokens = [
        HttpToken(token=TEAM_A, grant="teamA"),
        HttpToken(token=WRITER, grant="every", read=[]),
    ]
    port = free_port()
    cfg = _token_config(redis_server, prefix, host="0.0.0.0", tokens=tokens)
    grants = [
        GrantConfig(name="teamA", suites=["teamA-*"]),
        GrantConfig(name="every", suites=["*"]),
    ]
    cfg = msgspec.structs.replace(cfg, grants=grants)
    cfg = msgspec.structs.replace(cfg, http=msgspec.structs.replace(cfg.http, port=port))
    async with serving(cfg) as (_, _any):
        base = f"http://127.0.0.1:{port}"
        for accept in (BROWSER, "application/json"):
            assert (await _get(base, "/suites/teamB-x", accept=accept, token=TEAM_A))[0] == 403
            assert (await _get(base, "/suites/teamB-x", accept=accept, token="wrong"))[0] == 401
            assert (await _get(base, "/suites/teamB-x", accept=accept))[0] == 401
        status, headers, body = await _get(base, "/suites/teamB-x", accept=BROWSER, token=TEAM_A)
        assert headers["Content-Type"].startswith("text/html")
        assert "This token may not read suite &#x27;teamB-x&#x27;." in body.decode()
        # The index needs some read scope: a write-only token may read none.
        assert (await _get(base, "/", accept=BROWSER, token=WRITER))[0] == 403
        assert (await _get(base, "/", accept=BROWSER, token=TEAM_A))[0] == 200
        status, _, form = await _get(base, "/", accept=BROWSER)
        assert status == 401
        assert b'action="/ui/login"' in form
