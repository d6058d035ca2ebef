"""The HTTP port's way to Redis: a pool of its own, its places in flight, its reads.

Every route of the port that reaches Redis goes through one ``HttpBackend``:
``POST /v1/trials`` and ``/v1/logs`` (the sources' ``Commit``, tried once on
this pool), ``/v1/compare``, ``GET /suites/<suite>`` whether JSON or a page,
the index, ``/metrics`` and ``/readyz``. Its Store holds at most
``http.max_inflight`` connections, which wait for one another (up to
``redis.timeout``) instead of failing, and ``http.max_inflight`` places bound
the requests that use them: a write, a probe or a comparison takes a place
at once or is answered 503; a read waits for one up to ``redis.timeout``.

So HTTP load can only make HTTP wait or answer 503: the connections that
the sources, the CI tick and the heartbeat use are never the port's, and one
URL takes the same pool whatever its ``Accept`` header.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Protocol

from reliabilityd.alerting import registry
from reliabilityd.config import Config
from reliabilityd.daemon._compare import CompareQuery, compare_sides
from reliabilityd.daemon._http_answers import probe
from reliabilityd.daemon._offload import Busy, Worker
from reliabilityd.daemon.auth import Authority
from reliabilityd.daemon.metrics import Metrics
from reliabilityd.sources import Commit, Observer
from reliabilityd.stats.compare import Comparison
from reliabilityd.store import Store, connect

__all__ = ["Host", "HttpBackend"]


class Host(Observer, Protocol):
    """What the backend uses of the daemon: its settings (a reload swaps them), its
    metrics and tokens, and what it hears of every commit (``sources.Observer``)."""

    @property
    def config(self) -> Config: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def authority(self) -> Authority: ...

    @property
    def sinks(self) -> Mapping[str, object]: ...

    def is_paused(self) -> bool: ...


class HttpBackend:
    """What the HTTP port's handlers and pages reach Redis through (``web.Backend``)."""

    def __init__(self, host: Host) -> None:
        cfg = host.config
        self.host = host
        self.store = Store(
            connect(
                cfg.redis.url,
                cluster=cfg.redis.cluster,
                timeout=cfg.redis.timeout,
                max_connections=cfg.http.max_inflight,
            ),
            cfg.redis.prefix,
        )
        # One place per connection of the pool: a request in a place never
        # waits for a connection held by a request outside one.
        self.inflight = asyncio.Semaphore(cfg.http.max_inflight)
        # The port's commit: tried once (the client retries on the 503 a failure
        # becomes); a POST holds a place while it runs.
        self.commit = Commit(cfg, self.store, retry=False, observer=host)

    def configure(self, config: Config) -> None:
        """The settings of a reload for every commit that starts from now on."""
        self.commit.configure(config)

    @property
    def config(self) -> Config:
        return self.host.config

    @property
    def metrics(self) -> Metrics:
        return self.host.metrics

    @property
    def authority(self) -> Authority:
        return self.host.authority

    def is_paused(self) -> bool:
        """True while ingest waits for Redis (the sources hold their input)."""
        return self.host.is_paused()

    @contextlib.asynccontextmanager
    async def reading(self) -> AsyncIterator[Store]:
        """A place in flight for a read, and the store to read through.

        Waits up to ``redis.timeout`` for a place (as a command waits for a
        connection), then raises ``Busy``: the route answers 503 with Retry-After.
        """
        try:
            async with asyncio.timeout(self.host.config.redis.timeout):
                await self.inflight.acquire()
        except TimeoutError:
            raise Busy("requests in flight fill http.max_inflight") from None
        try:
            yield self.store
        finally:
            self.inflight.release()

    async def refresh_metrics(self) -> None:
        """Read the suite gauges before a scrape renders them (in a place of its own)."""
        async with self.reading() as store:
            await self.host.metrics.refresh(store, self.host.config.alerts, list(self.host.sinks))

    async def suite_json(self, suite: str, slice: str | None = None) -> bytes | None:
        """The suite's (or slice's) JSON read, ``alerting.registry.suite_json``: the stored
        snapshot with its slices' snapshots and its rules added (in a place of its own)."""
        async with self.reading() as store:
            return await registry.suite_json(store, self.host.config.alerts, suite, slice=slice)

    async def compare(self, query: CompareQuery, worker: Worker) -> Comparison:
        """The paired comparison with the settings ``reliabilityd compare`` uses; the
        caller holds a place."""
        return await compare_sides(self.store, self.host.config, query, worker)

    async def readiness(self) -> dict[str, str]:
        """What is unreachable and why; empty when ready. The caller holds a place."""
        cfg = self.host.config
        return await probe(self.store, cfg.mqtt.url if cfg.mqtt.enabled else None)

    async def aclose(self) -> None:
        await self.store.client.aclose()
