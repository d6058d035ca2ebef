"""The event loop under CPU-heavy requests, against a real daemon and redis-server: large
comparisons and large OTLP bodies are worked off the loop, so /healthz keeps answering.

Seconds of CPU each: a stress tier's tests, not the developer's loop.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import msgspec

from reliabilityd.config import IngestConfig
from reliabilityd.daemon._compare import MAX_COMPARES
from reliabilityd.events import TrialEvent
from tests.support.daemon import store_for
from tests.support.http import http_config, probe_while, serving
from tests.support.otlp import PROTOBUF, empty_records, otlp_config, post_logs
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

            started = time.perf_counter()
            answers, longest, answered = await probe_while(
                base, lambda: asyncio.gather(*(_get(http, url) for _ in range(8)))
            )
            elapsed = time.perf_counter() - started
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


async def test_a_body_of_two_million_empty_records_is_decoded_off_the_event_loop(
    redis_server: RedisServer, prefix: str
) -> None:
    """4 MB of empty records is seconds of Python to decode and map: /healthz keeps answering
    all along, the loop held at most while upb parses the body (a C call that keeps the GIL)."""
    body = empty_records(2_000_000)
    cfg = otlp_config(redis_server, prefix, ingest=IngestConfig(max_payload=len(body) + 1024))
    async with serving(cfg) as (_, base):
        started = time.perf_counter()
        (status, raw, _), longest, answered = await probe_while(
            base, lambda: post_logs(base, body, PROTOBUF)
        )
        elapsed = time.perf_counter() - started
        assert status == 200, raw
    print(
        f"{len(body)} B in {elapsed:.2f} s: /healthz answered {answered} times, "
        f"the longest wait {longest:.3f} s"
    )
    # On the event loop the request held it from start to end, and the probe got its first
    # answer and the next one after it (2 answers, a 3.6 s wait); off the loop the probe
    # answers all along. Relative to the request's own time, so a busy machine moves both.
    assert answered >= 20
    assert longest < elapsed / 2
