"""Who may read pages and snapshot JSON: every read goes through ``can_read``.

The rule is ``daemon.auth``'s: a server bound to loopback answers every
reader; anything else needs a token whose ``read`` globs match the suite
(``http.token`` reads every suite), sent as ``Authorization: Bearer
<token>`` or as the cookie that the token form (``POST /ui/login``) sets,
since a browser following an alert's link sends no header. A daemon bound
beyond loopback asks for a token even from 127.0.0.1: a reverse proxy on
the same host would otherwise open every page to its clients. The index
lists only the suites its reader may read.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiohttp import web

from reliabilityd.config import HttpConfig
from reliabilityd.daemon.auth import Access, Authority

COOKIE = "reliabilityd_token"
HTTP_CONFIG: web.AppKey[HttpConfig] = web.AppKey("reliabilityd_ui_http", HttpConfig)
AUTHORITY: web.AppKey[Authority] = web.AppKey("reliabilityd_ui_authority", Authority)


def presented_token(request: web.Request) -> str | None:
    """The token a request carries (bearer header first, then the cookie), if any."""
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and given.strip():
        return given.strip()
    return request.cookies.get(COOKIE) or None


def grant_of(request: web.Request) -> Access:
    """What this request's token (header or cookie) grants; anonymous without one."""
    return request.app[AUTHORITY].grant(presented_token(request))


def token_reads(authority: Authority, given: str | None) -> bool:
    """True when ``given`` is a configured token that may read some suite (the token form)."""
    grant = authority.grant(given)
    return not grant.anonymous and bool(grant.read)


def can_read(request: web.Request, suite: str | None) -> bool:
    """Whether this request may read ``suite`` (None: the index, which needs some read scope)."""
    grant = grant_of(request)
    return bool(grant.read) if suite is None else grant.may("read", suite)


def readable(request: web.Request, suites: Iterable[str]) -> list[str]:
    """The suites of ``suites`` this request may read, in order."""
    return grant_of(request).filter("read", suites)
