"""GET /v1/compare at its edges, against a real daemon and redis-server: large suites compared
off the event loop, a bounded number at once, and ``top`` and ``k`` within their bounds."""

from __future__ import annotations

from typing import Any

import aiohttp
import msgspec

from reliabilityd.daemon._compare import MAX_K, MAX_TOP
from tests.support.http import http_config, serving
from tests.support.servers import RedisServer

TASKS = 100_000


async def _get(http: aiohttp.ClientSession, url: str) -> tuple[int, bytes, dict[str, str]]:
    async with http.get(url) as resp:
        return resp.status, await resp.read(), dict(resp.headers)


async def test_top_and_k_past_their_bounds_are_refused_with_the_bound(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = http_config(redis_server, prefix, ks=[1])
    async with serving(cfg) as (_, base), aiohttp.ClientSession() as http:
        query = f"{base}/v1/compare?baseline=a&candidate=b"
        cases: list[tuple[str, int, str]] = [
            (f"&top={MAX_TOP + 1}", 422, f"top={MAX_TOP + 1} exceeds {MAX_TOP}"),
            ("&top=1000000", 422, f"exceeds {MAX_TOP}"),
            (f"&k={MAX_K + 1}", 422, f"k={MAX_K + 1} exceeds {MAX_K}"),
            ("&k=100000000000000000000", 422, f"exceeds {MAX_K}"),
            ("&k=0", 400, "at least 1"),
            ("&k=two", 400, "k='two' is not an integer"),
            ("&interval=bootstrap", 400, "interval must be one of percentile, gaffke, student"),
            (f"&top={MAX_TOP}&k={MAX_K}", 404, "no suite named 'a'"),
        ]
        for extra, expected, says in cases:
            status, body, _ = await _get(http, query + extra)
            answer: dict[str, Any] = msgspec.json.decode(body)
            assert (status, says in answer["error"]) == (expected, True), (extra, answer)
