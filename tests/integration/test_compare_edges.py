"""GET /v1/compare at its edges, against a real daemon and redis-server: large suites compared
off the event loop, a bounded number at once, and ``top`` and ``k`` within their bounds."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import msgspec

from reliabilityd.daemon._compare import MAX_COMPARES, MAX_K, MAX_TOP
from reliabilityd.events import TrialEvent
from tests.support.daemon import store_for
from tests.support.http import http_config, serving
from tests.support.servers import RedisServer

TASKS = 100_000


async def _get(http: aiohttp.ClientSession, url: str) -> tuple[int, bytes, dict[str, str]]:
    async with http.get(url) as resp:
        return resp.status, await resp.read(), dict(resp.headers)


async def test_large_suites_are_compared_off_the_event_loop_a_few_at_a_time(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = http_config(redis_server, prefix, ks=[1])
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        # Two suites of 100,000 tasks, one trial each, written through the store.
        for suite, shift in (("before", 0), ("after", 1)):
            events = [
                TrialEvent(suite, f"task {i}", "r", "pass" if (i + shift) % 3 else "fail")
                for i in range(TASKS)
            ]
            for start in range(0, TASKS, 20_000):
                part = events[start : start + 20_000]
                await store.ingest.apply({suite: part}, windows={suite: 0}, dedup_ttl=7200)
        url = f"{base}/v1/compare?baseline=before&candidate=after&k=1&top=3"
        async with aiohttp.ClientSession() as http:
            status, alone, _ = await _get(http, url)
            assert status == 200, alone
            assert msgspec.json.decode(alone)["shared"] == TASKS

            longest, answered = 0.0, 0
            done = asyncio.Event()

            async def probe() -> None:
                nonlocal longest, answered
                last = time.perf_counter()
                while not done.is_set():
                    assert (await _get(http, f"{base}/healthz"))[0] == 200
                    now = time.perf_counter()
                    longest, last = max(longest, now - last), now
                    answered += 1
                    await asyncio.sleep(0.01)

            prober = asyncio.create_task(probe())
            started = time.perf_counter()
            try:
                answers = await asyncio.gather(*(_get(http, url) for _ in range(8)))
            finally:
                elapsed = time.perf_counter() - started
                done.set()
                await prober
    statuses = [status for status, _, _ in answers]
    print(
        f"8 comparisons of {TASKS} tasks in {elapsed:.2f} s: {statuses}; /healthz answered "
        f"{answered} times, the longest wait {longest:.3f} s"
    )
    # Each answer is the comparison, the same as alone, or a 503 to retry after.
    for status, body, headers in answers:
        if status == 503:
            assert headers["Retry-After"] == "2"
            assert b"comparisons" in body
        else:
            assert (status, body) == (200, alone)
    assert statuses.count(200) >= MAX_COMPARES
    # The event loop kept answering all along: on it, each comparison held the loop for
    # the parsing of 200,000 tasks at a time.
    assert answered >= 20
    assert longest < elapsed / 10


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
            (f"&top={MAX_TOP}&k={MAX_K}", 404, "no suite named 'a'"),
        ]
        for extra, expected, says in cases:
            status, body, _ = await _get(http, query + extra)
            answer: dict[str, Any] = msgspec.json.decode(body)
            assert (status, says in answer["error"]) == (expected, True), (extra, answer)
