"""The headers every answer of the HTTP port carries, set in one place before it is sent.

* ``Content-Security-Policy``: the pages load their one script and one
  stylesheet from this daemon (``/ui/static/``) and nothing inline, so the
  policy allows nothing else: no inline script or style, no other origin, no
  plugin, forms posting only here, and ``frame-ancestors 'none'`` (with
  ``X-Frame-Options: DENY`` for browsers that predate it), so no other site
  can frame the token form. JSON and metrics get the same policy: a browser
  that renders one of them runs nothing in it.
* ``Cache-Control: no-store`` unless the route set its own (the static files
  are cached for five minutes): every page, snapshot and comparison is
  access-controlled and changes with each commit, so no cache along the way
  may keep one and hand it to someone else.
* ``X-Content-Type-Options: nosniff`` and ``Referrer-Policy: same-origin``.

``/suites/<suite>`` answers a page or JSON by ``Accept``; its route sets
``Vary: Accept`` itself.
"""

from __future__ import annotations

from aiohttp import web

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


async def add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: each of ``HEADERS`` the route did not set itself."""
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
