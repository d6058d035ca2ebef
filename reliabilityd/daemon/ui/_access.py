"""Who may read pages and snapshot JSON: every read goes through ``can_read``.

The rule: a server bound to loopback answers its loopback peers without a
token; anything else needs the ``[http] token``, sent as ``Authorization:
Bearer <token>`` or as the cookie that the token form (``POST /ui/login``)
sets, since a browser following an alert's link sends no header. A daemon
bound beyond loopback asks for the token even from 127.0.0.1: a reverse
proxy on the same host would otherwise open every page to its clients.
"""

from __future__ import annotations

import hmac
import ipaddress

from aiohttp import web

from reliabilityd.config import HttpConfig, is_loopback

COOKIE = "reliabilityd_token"
HTTP_CONFIG: web.AppKey[HttpConfig] = web.AppKey("reliabilityd_ui_http", HttpConfig)


def _peer_is_loopback(request: web.Request) -> bool:
    try:
        return ipaddress.ip_address(request.remote or "").is_loopback
    except ValueError:
        return False


def presented_token(request: web.Request) -> str | None:
    """The token a request carries (bearer header first, then the cookie), if any."""
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and given.strip():
        return given.strip()
    return request.cookies.get(COOKIE) or None


def token_matches(config: HttpConfig, given: str | None) -> bool:
    return (
        bool(config.token)
        and given is not None
        and hmac.compare_digest(given.encode(), config.token.encode())
    )


def can_read(request: web.Request, suite: str | None) -> bool:
    """Whether this request may read ``suite`` (None: the index of every suite).

    Today one token reads every suite; per-suite scopes replace the last line.
    """
    config = request.app[HTTP_CONFIG]
    if is_loopback(config.host) and _peer_is_loopback(request):
        return True
    return token_matches(config, presented_token(request))
