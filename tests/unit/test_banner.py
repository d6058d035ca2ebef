"""The embedded banner lists every route the daemon's HTTP port serves."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import msgspec
import pytest

from reliabilityd.config import Config, HttpConfig, OtlpConfig
from reliabilityd.daemon.auth import Authority
from reliabilityd.daemon.web import Backend, make_app
from reliabilityd.embedded._servers import EmbeddedServers
from reliabilityd.embedded.processes import Mosquitto, RedisServer
from reliabilityd.locate import Ports


def served(http: HttpConfig) -> set[tuple[str, str]]:
    """(method, path) of every route make_app registers, paths as the banner writes them."""
    # Only the routes are read: no request is served, so the backend is only what
    # make_app reads while it builds them.
    backend = SimpleNamespace(authority=Authority.from_config(http))
    app = make_app(cast(Backend, backend), http, 1 << 20)
    return {
        (route.method, re.sub(r"\{(\w+)\}", r"<\1>", route.resource.canonical))
        for route in app.router.routes()
        if route.resource is not None and route.method != "HEAD"
    }


@pytest.mark.parametrize("otlp", [False, True], ids=["without-otlp", "with-otlp"])
def test_the_banner_names_every_route(tmp_path: Path, otlp: bool) -> None:
    http = HttpConfig(port=41877, otlp=OtlpConfig(enabled=otlp))
    config = msgspec.structs.replace(Config(), http=http)
    servers = EmbeddedServers(tmp_path)  # described, never started
    servers.redis = RedisServer("redis", tmp_path, 46461)
    servers.broker = Mosquitto("mosquitto", tmp_path, 40613)
    servers.ports = Ports(redis=46461, mqtt=40613, http=41877)
    banner = "\n".join(servers.describe(config))

    routes = served(http)
    assert ("POST", "/v1/logs") in routes if otlp else ("POST", "/v1/logs") not in routes
    for method, path in routes:
        if path == "/ui/static/<name>":
            continue  # the pages' own stylesheet and script, not an endpoint
        assert path in banner, (method, path, banner)
        if method == "POST" and path.startswith("/v1/"):
            assert f"POST {path}" in banner, (path, banner)
    assert ("POST /v1/logs" in banner) == otlp
