"""The daemon's HTTP port (aiohttp): /metrics, /healthz, /readyz, trials in, snapshots out.

* ``GET /metrics``: Prometheus text format (see ``metrics``), no token.
* ``GET /healthz``: 200 while this process runs its loops (liveness: a Redis
  outage must not restart it; ``paused`` in the body says it is waiting).
* ``GET /readyz``: 200 when Redis answers PING and the broker accepts a TCP
  connection, else 503 naming what is down.
* ``POST /v1/trials``: the MQTT wire format (``events.decode``), one object
  or an array, JSON or MessagePack. 200 only after Redis applied every
  element; 422 when some elements were rejected (the good ones are
  committed all the same, each rejected one has its reason); 400 when the
  body is not JSON or MessagePack at all; 413 past ``ingest.max_payload``; 401 without
  the bearer token when one is set; 503 with ``Retry-After`` while Redis is
  unusable (retrying is safe: trial ids make it idempotent).
* ``GET /suites/<suite>``: the newest snapshot document (what alert
  ``generatorURL``s point at), 404 when the suite has none.

Reads need no token: bind beyond loopback only where suite names and numbers
may be seen. The daemon implements ``Backend``; nothing here knows its loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import time
from collections.abc import Sequence
from typing import Any, Protocol

import msgspec
from aiohttp import web

from reliabilityd.config import HttpConfig, parse_mqtt_url
from reliabilityd.daemon.metrics import CONTENT_TYPE, Metrics
from reliabilityd.errors import ReliabilitydError
from reliabilityd.events import Rejected, TrialEvent, decode
from reliabilityd.store import Applied, Redis

RETRY_AFTER = 2  # seconds a client should wait after a 503
SOURCE = "http"
PROBE_TIMEOUT = 2.0  # seconds /readyz waits for Redis and for the broker


class IngestUnavailable(ReliabilitydError):
    """Redis cannot take the commit now; the client should retry after a pause."""


class Backend(Protocol):
    """What the HTTP server needs from the daemon."""

    metrics: Metrics

    def is_paused(self) -> bool:
        """True while ingest waits for Redis (the MQTT consumer holds its messages)."""
        ...

    async def ingest(
        self, events: Sequence[TrialEvent], rejected: Sequence[Rejected], source: str
    ) -> list[Applied]:
        """Dead-letter `rejected`, commit `events` once; IngestUnavailable on a Redis error."""
        ...

    async def refresh_metrics(self) -> None:
        """Read the suite gauges from Redis before a scrape renders them."""
        ...

    async def snapshot_json(self, suite: str) -> bytes | None: ...

    async def readiness(self) -> dict[str, str]:
        """What is unreachable and why; empty when ready."""
        ...


class ElementResult(msgspec.Struct, omit_defaults=True):
    index: int
    status: str  # "accepted" or "rejected"
    reason: str | None = None


class SuiteResult(msgspec.Struct):
    counted: int
    duplicates: int
    errors: int
    skips: int


class IngestResponse(msgspec.Struct):
    accepted: int
    rejected: int
    results: list[ElementResult]
    suites: dict[str, SuiteResult]


_json_items = msgspec.json.Decoder(list[msgspec.Raw])
_mp_items = msgspec.msgpack.Decoder(list[msgspec.Raw])
_MSGPACK_ARRAY = frozenset(range(0x90, 0xA0)) | {0xDC, 0xDD}


def _elements(payload: bytes) -> list[bytes] | None:
    """The raw elements of an array payload, None when it is not one."""
    stripped = payload.lstrip(b" \t\r\n")
    try:
        if stripped.startswith(b"["):
            return [bytes(item) for item in _json_items.decode(payload)]
        if payload and payload[0] in _MSGPACK_ARRAY:
            return [bytes(item) for item in _mp_items.decode(payload)]
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return None


def _parses(payload: bytes) -> bool:
    """True when the payload is well-formed JSON or MessagePack, whatever it holds."""
    try:
        if payload.lstrip(b" \t\r\n")[:1] in (b"{", b"["):
            msgspec.json.decode(payload)
        elif payload:
            msgspec.msgpack.decode(payload)
        else:
            return False
    except msgspec.DecodeError:
        return False
    return True


def decode_elements(payload: bytes, max_payload: int) -> tuple[list[TrialEvent | Rejected], bool]:
    """Each element's event or rejection, in order; the flag is False if nothing parsed.

    Decoding is ``events.decode``'s, element by element only when the batch
    has a bad one, so an element is valid here exactly when it would count
    over MQTT.
    """
    good, bad = decode(payload, max_payload)
    if not bad:
        return list(good), True
    items = _elements(payload)
    if items is None:
        # A single object that is not a valid event (422), or no JSON or
        # MessagePack at all (400).
        return list(bad), _parses(payload)
    out: list[TrialEvent | Rejected] = []
    for index, item in enumerate(items):
        g, b = decode(item, max_payload)
        if g:
            out.append(g[0])
        else:
            out.append(Rejected(item, f"element {index}: {b[0].reason}"))
    return out, True


async def probe(client: Redis, mqtt_url: str | None) -> dict[str, str]:
    """/readyz: Redis answers PING, the broker accepts a TCP connection; what fails, why."""
    problems: dict[str, str] = {}
    try:
        await asyncio.wait_for(client.ping(), PROBE_TIMEOUT)
    except Exception as exc:
        problems["redis"] = f"{type(exc).__name__}: {exc}"
    if mqtt_url is not None:
        broker = parse_mqtt_url(mqtt_url)
        try:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for, cancelled
            # just as the connection is made, drops it unclosed.
            async with asyncio.timeout(PROBE_TIMEOUT):
                _, writer = await asyncio.open_connection(broker.host, broker.port)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        except (OSError, TimeoutError) as exc:
            problems["mqtt"] = f"{broker.host}:{broker.port}: {type(exc).__name__} {exc}"
    return problems


def _json(body: Any, status: int, **headers: str) -> web.Response:
    return web.Response(
        body=msgspec.json.encode(body),
        status=status,
        content_type="application/json",
        headers=headers or None,
    )


class Handlers:
    def __init__(self, backend: Backend, config: HttpConfig, max_payload: int) -> None:
        self.backend = backend
        self.config = config
        self.max_payload = max_payload
        self.started_at = time.time()

    def _answer(self, response: web.Response) -> web.Response:
        self.backend.metrics.http_ingest.labels(str(response.status)).inc()
        return response

    def _authorised(self, request: web.Request) -> bool:
        if not self.config.token:
            return True
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), self.config.token.encode()
        )

    def _unavailable(self, reason: str) -> web.Response:
        return self._answer(_json({"error": reason}, 503, **{"Retry-After": str(RETRY_AFTER)}))

    async def post_trials(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return self._answer(
                _json(
                    {"error": "a valid bearer token is required"},
                    401,
                    **{"WWW-Authenticate": 'Bearer realm="reliabilityd"'},
                )
            )
        length = request.content_length
        if length is not None and length > self.max_payload:
            return self._answer(
                _json({"error": f"body of {length} bytes exceeds {self.max_payload}"}, 413)
            )
        try:
            payload = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._answer(_json({"error": f"body exceeds {self.max_payload} bytes"}, 413))
        if self.backend.is_paused():
            return self._unavailable("ingest is paused: Redis is unavailable")
        elements, decoded = decode_elements(payload, self.max_payload)
        source = f"{SOURCE}:{request.remote or 'unknown'}"  # dead letters name the client
        events = [e for e in elements if isinstance(e, TrialEvent)]
        rejected = [e for e in elements if isinstance(e, Rejected)]
        if not decoded:
            # Not JSON or MessagePack at all: the answer does not depend on
            # Redis, and a retry would not help. Dead-lettered when Redis can.
            with contextlib.suppress(IngestUnavailable, TimeoutError):
                await asyncio.wait_for(
                    self.backend.ingest([], rejected, source), self.config.commit_timeout
                )
            reason = rejected[0].reason if rejected else "empty body"
            return self._answer(_json({"error": reason}, 400))
        try:
            applied = await asyncio.wait_for(
                self.backend.ingest(events, rejected, source), self.config.commit_timeout
            )
        except (IngestUnavailable, TimeoutError) as exc:
            return self._unavailable(f"not committed: {exc or 'Redis did not answer in time'}")
        body = IngestResponse(
            accepted=len(events),
            rejected=len(rejected),
            results=[
                ElementResult(i, "accepted")
                if isinstance(e, TrialEvent)
                else ElementResult(i, "rejected", e.reason)
                for i, e in enumerate(elements)
            ],
            suites={
                a.suite: SuiteResult(a.counted, a.duplicates, a.errors, a.skips) for a in applied
            },
        )
        return self._answer(_json(body, 422 if rejected else 200))

    async def metrics(self, request: web.Request) -> web.Response:
        await self.backend.refresh_metrics()
        # Formatting is pure Python and grows with suites x k: keep it off the loop.
        body = await asyncio.to_thread(self.backend.metrics.render)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    async def healthz(self, request: web.Request) -> web.Response:
        return _json(
            {
                "status": "ok",
                "uptime": round(time.time() - self.started_at, 3),
                "paused": self.backend.is_paused(),
            },
            200,
        )

    async def readyz(self, request: web.Request) -> web.Response:
        problems = await self.backend.readiness()
        if problems:
            return _json({"status": "unready", "problems": problems}, 503)
        return _json({"status": "ready"}, 200)

    async def suite(self, request: web.Request) -> web.Response:
        name = request.match_info["suite"]
        try:
            raw = await self.backend.snapshot_json(name)
        except Exception as exc:
            return _json({"error": f"Redis unavailable: {type(exc).__name__}"}, 503)
        if raw is None:
            return _json({"error": f"no snapshot for suite {name!r}"}, 404)
        return web.Response(body=raw, content_type="application/json")


def make_app(backend: Backend, config: HttpConfig, max_payload: int) -> web.Application:
    h = Handlers(backend, config, max_payload)
    # aiohttp refuses bodies past client_max_size itself (413); keep one byte of slack.
    app = web.Application(client_max_size=max_payload + 1)
    app.router.add_post("/v1/trials", h.post_trials)
    app.router.add_get("/metrics", h.metrics)
    app.router.add_get("/healthz", h.healthz)
    app.router.add_get("/readyz", h.readyz)
    app.router.add_get("/suites/{suite}", h.suite)
    return app


async def serve(
    backend: Backend,
    config: HttpConfig,
    max_payload: int,
    stop: asyncio.Event,
    listening: asyncio.Event | None = None,
) -> None:
    """Serve until stop is set; requests in flight get a moment to finish."""
    runner = web.AppRunner(
        make_app(backend, config, max_payload), access_log=None, shutdown_timeout=2.0
    )
    await runner.setup()
    try:
        await web.TCPSite(runner, config.host, config.port).start()
        if listening is not None:
            listening.set()
        await stop.wait()
    finally:
        with contextlib.suppress(Exception):
            await asyncio.shield(runner.cleanup())
