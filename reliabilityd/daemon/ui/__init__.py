"""The web UI on the daemon's HTTP port: an index of suites and a page per suite.

HTML rendered on the server with SVG charts (``_svg``), one stylesheet and
one small refresh script served from this package (``static/``): nothing is
fetched from anywhere else, and every page works offline. ``register`` adds
the routes to the daemon's app; every read asks ``can_read`` (``_access``).
"""

from __future__ import annotations

from aiohttp import web

from reliabilityd.config import HttpConfig
from reliabilityd.daemon._peers import Peers
from reliabilityd.daemon.auth import Authority
from reliabilityd.daemon.ui._access import AUTHORITY, HTTP_CONFIG, can_read
from reliabilityd.daemon.ui._routes import Handler, Routes, Source, wants_html

__all__ = ["Source", "can_read", "register", "wants_html"]


def register(
    app: web.Application,
    source: Source,
    config: HttpConfig,
    json_suite: Handler,
    authority: Authority | None = None,
) -> None:
    """Add ``/``, ``/v1/suites`` (the index as JSON), ``/suites/<suite>`` (page or,
    negotiated, ``json_suite``), ``/suites/<suite>/tasks/<task>`` (a task's recent
    trials, page or JSON) and ``/ui/...``.

    ``authority`` is the daemon's (whose tokens a reload changes); by default
    one of ``config``'s tokens.
    """
    app[HTTP_CONFIG] = config
    app[AUTHORITY] = authority or Authority.from_config(config)
    routes = Routes(source, json_suite, Peers(config.trusted_proxies))
    app.router.add_get("/", routes.index)
    app.router.add_get("/v1/suites", routes.suites_json)
    app.router.add_get("/suites/{suite}", routes.suite)
    app.router.add_get("/suites/{suite}/tasks/{task:.+}", routes.task)
    app.router.add_get("/ui/static/{name}", routes.static)
    app.router.add_get("/ui/login", routes.login_form)
    app.router.add_post("/ui/login", routes.login)
