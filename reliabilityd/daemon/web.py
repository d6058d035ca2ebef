"""The daemon's HTTP port (aiohttp): /metrics, /healthz, /readyz, trials in, snapshots out.

* ``GET /metrics``: Prometheus text format (see ``metrics``), no token.
* ``GET /healthz``: 200 while this process runs its loops (liveness: a Redis
  outage must not restart it; ``paused`` in the body says it is waiting).
* ``GET /readyz``: 200 when Redis answers PING and the broker accepts a TCP
  connection, else 503 naming what is down.
* ``POST /v1/trials``: the MQTT wire format (``events.decode``), one object
  or an array, JSON or MessagePack. 200 only after Redis applied every
  element; 422 when some elements were rejected (the good ones are
  committed all the same; the first ``events.MAX_LETTERS`` rejected ones
  have their reason, and the dead letters are those MQTT would write); 400,
  dead-lettered, when nothing in the body is an element (not JSON or
  MessagePack, empty, ``[]``, nested too deeply); 413 past ``ingest.max_payload``; 401 without
  a valid bearer token when one is configured; an element whose suite the
  token may not write is ``forbidden`` in the results, neither counted nor
  dead-lettered (403 when every element is); 503 with ``Retry-After`` while
  Redis is unusable (retrying is safe: trial ids make it idempotent). The
  body is read before the request takes an inflight place (``_http_bodies``).
* ``POST /v1/logs`` (with ``http.otlp.enabled``): OTLP/HTTP logs, protobuf or
  JSON, gzip or not; ``gen_ai.evaluation.result`` records become trials by
  ``integrations.otlp``'s mapping, the rest are ignored. The same token,
  limits (``ingest.max_payload``, after decompression) and commit as
  ``/v1/trials``: 200 only after Redis applied every mapped record, with an
  OTLP ``partial_success`` counting the records that could not be mapped
  (dead-lettered as an MQTT payload's elements are: the first
  ``events.MAX_LETTERS`` with the reason, one letter counting the rest); 400
  for a body that is not OTLP logs, naming the ``path`` of the first field
  that does not fit; 415 for another content type, 503 with ``Retry-After``
  while Redis is unusable (OTLP clients retry it; trial ids make it idempotent). Write
  scopes as for ``/v1/trials``: a forbidden record counts in
  ``partial_success`` (403 when nothing but forbidden trials came).
* ``GET /suites/<suite>``: the newest snapshot document as stored, with
  ``slice_snapshots`` (each slice's) and ``alerts`` (every rule that reads
  the suite, with its state: ``alerting.registry.suite_json``) added; 404
  when the suite has none; with ``?slice=<id>`` the slice's, with its own
  rules; a browser (``Accept: text/html``) gets the suite's page instead.
* ``GET /`` and the suite pages: the web UI (``daemon.ui``), where alert
  ``generatorURL``s point; ``GET /suites/<suite>/tasks/<task>``: a task's
  recent trials with their links, a page or (negotiated) JSON.
* ``GET /v1/compare?suite=S&baseline=agent_version=1.4&candidate=agent_version=1.5``
  (``&k=5&metric=pass^k&top=5&min_shared=10`` optional): the paired
  comparison, the same JSON as ``reliabilityd compare --json``. Without
  ``suite``, ``baseline`` and ``candidate`` are suite names. Read scopes as
  for ``/suites/<suite>``, on both sides' suites (401/403). 400 for a
  malformed query or a label the suite is not sliced by, 404 for a missing
  suite, 422 for ``k`` or ``top`` past their bounds (``_compare``), 503 with
  ``Retry-After`` while ``_compare.MAX_COMPARES`` comparisons run, past
  ``max_inflight`` (it shares POST's limit) or while Redis is unusable.

Decoding OTLP bodies and comparing run in worker threads (``_offload``), a
few at a time, so the event loop keeps answering. Every answer carries the
headers of ``_http_headers`` (a Content-Security-Policy and no framing on
pages, ``Cache-Control: no-store`` unless the route says otherwise).

Who may write and read which suite is ``auth``'s: on loopback reads are
open; beyond it pages, ``/suites/<suite>`` and ``/metrics`` need a token that
may read the suite (every suite, for ``/metrics``). With ``http.tls_cert`` and
``tls_key`` the port serves HTTPS only. Every route reaches Redis through
``Backend`` (``_http_backend.HttpBackend``): a pool of the port's own and
``http.max_inflight`` places, which a POST, ``/readyz`` or a comparison
takes at once or is answered 503, and a read (``/suites/<suite>``, the
pages, ``/metrics``) waits for up to ``redis.timeout`` before its 503 with
``Retry-After``. Nothing here knows the daemon's loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Protocol

import msgspec
from aiohttp import web

from reliabilityd.config import HttpConfig, HttpTlsProblem, http_tls_context
from reliabilityd.daemon import ui
from reliabilityd.daemon._compare import (
    COMPARE_WAIT,
    MAX_COMPARES,
    CompareQuery,
    QueryError,
    parse_query,
)
from reliabilityd.daemon._http_answers import (
    RETRY_AFTER,
    ElementResult,
    IngestResponse,
    SuiteResult,
    busy,
    decode_elements,
    json_answer,
    unauthorised,
)
from reliabilityd.daemon._http_bodies import Bodies, BodyRefused
from reliabilityd.daemon._http_headers import add_security_headers
from reliabilityd.daemon._http_server import BACKLOG, Runner, connection_limit
from reliabilityd.daemon._offload import Busy, Slots, Worker
from reliabilityd.daemon.auth import Access, Authority
from reliabilityd.daemon.metrics import CONTENT_TYPE, Metrics
from reliabilityd.errors import ConfigError
from reliabilityd.events import UNREPORTED, TrialEvent
from reliabilityd.logs import RateLimited
from reliabilityd.rejections import Rejected
from reliabilityd.sources import Batch, Commit, Committed, CommitUnavailable
from reliabilityd.stats.compare import Comparison
from reliabilityd.store import StoreError

SOURCE = "http"
OTLP_SOURCE = "otlp"
# OTLP bodies decoded and mapped at once, each in a worker thread.
OTLP_DECODES = 2


class Backend(ui.Source, Protocol):
    """How the HTTP server reaches Redis and the daemon (``_http_backend.HttpBackend``).

    The pages read through ``reading`` (``ui.Source``); ``inflight`` is the
    places a POST, ``/readyz`` or a comparison takes at once or is answered 503.
    """

    @property
    def metrics(self) -> Metrics: ...

    @property
    def authority(self) -> Authority:
        """The daemon's: its tokens change in place on a reload."""
        ...

    @property
    def inflight(self) -> asyncio.Semaphore: ...

    @property
    def commit(self) -> Commit:
        """The port's commit: the sources' one path, tried once on the port's own pool
        (CommitUnavailable on a Redis error, answered 503 for the client to retry)."""
        ...

    def is_paused(self) -> bool:
        """True while ingest waits for Redis (the MQTT consumer holds its messages)."""
        ...

    async def refresh_metrics(self) -> None:
        """Read the suite gauges from Redis before a scrape renders them; Busy when no
        place came free in time."""
        ...

    async def suite_json(self, suite: str, slice: str | None = None) -> bytes | None:
        """The stored document; Busy when no place came free in time."""
        ...

    async def compare(self, query: CompareQuery, worker: Worker) -> Comparison:
        """The paired comparison as ``compare --json`` computes it, its CPU-bound steps on
        ``worker``; LookupError for a missing suite, ValueError for a label its suite is not
        sliced by."""
        ...

    async def readiness(self) -> dict[str, str]:
        """What is unreachable and why; empty when ready."""
        ...


class Handlers:
    def __init__(self, backend: Backend, config: HttpConfig, max_payload: int) -> None:
        self.backend = backend
        self.config = config
        self.max_payload = max_payload
        self.started_at = time.time()
        self.bodies = Bodies(config.max_body_bytes)
        # CPU-bound steps in worker threads (daemon._offload), a few at once: OTLP
        # bodies wait for a place, comparisons wait briefly and are then answered 503.
        self.decodes = Slots(OTLP_DECODES)
        self.compares = Slots(MAX_COMPARES, COMPARE_WAIT)
        self.authority = backend.authority
        self._forbidden_log = RateLimited()  # this port's own: one daemon's lines fold together

    def _answer(self, response: web.Response) -> web.Response:
        self.backend.metrics.http_ingest.labels(str(response.status)).inc()
        return response

    def _writer(self, request: web.Request) -> Access | None:
        """The request's grant, or None when writes need a token and it sent no valid one."""
        grant = self.authority.grant(request)
        return None if grant.anonymous and self.authority.tokens_required else grant

    def _denied(self, request: web.Request, suite: str | None) -> web.Response | None:
        """401 or 403 when the request may not read ``suite`` (None: every suite), else None."""
        grant = self.authority.grant(request)
        if grant.may_all("read") or (suite is not None and grant.may("read", suite)):
            return None
        if grant.anonymous:
            return unauthorised()
        what = "every suite" if suite is None else f"suite {suite!r}"
        return json_answer({"error": f"this token may not read {what}"}, 403)

    def _forbidden(self, grant: Access, refused: Sequence[Rejected], source: str) -> None:
        """Count and log (at a limited rate; the token by its name only) forbidden writes."""
        # Both paths arrive over the HTTP port: the metric's source is "http".
        for cls, count in Counter(r.reason_class for r in refused).items():
            self.backend.metrics.rejected.labels(SOURCE, cls).inc(count)
        self._forbidden_log.emit(
            logging.WARNING,
            "http_forbidden",
            source=source,
            token=grant.name,
            count=len(refused),
            suite=refused[0].suite,
        )

    async def _commit(self, batch: Batch) -> Committed:
        """The port's commit, within ``http.commit_timeout``."""
        return await asyncio.wait_for(self.backend.commit(batch), self.config.commit_timeout)

    def _unavailable(self, reason: str) -> web.Response:
        return self._answer(
            json_answer({"error": reason}, 503, **{"Retry-After": str(RETRY_AFTER)})
        )

    async def _read_then(
        self, request: web.Request, handle: Callable[[bytes], Awaitable[web.Response]]
    ) -> web.Response:
        """Read the body, then ``handle`` it in an inflight place (``Bodies.handle``)."""
        try:
            return await self.bodies.handle(
                request, self.backend.inflight, handle, self.max_payload, self.config.read_timeout
            )
        except BodyRefused as exc:
            if exc.status == 503:
                return self._unavailable(exc.message)
            return self._answer(json_answer({"error": exc.message}, exc.status))

    async def post_trials(self, request: web.Request) -> web.Response:
        grant = self._writer(request)
        if grant is None:
            return self._answer(unauthorised())
        length = request.content_length
        if length is not None and length > self.max_payload:
            return self._answer(
                json_answer({"error": f"body of {length} bytes exceeds {self.max_payload}"}, 413)
            )
        return await self._read_then(request, partial(self._post_trials, request, grant))

    async def _post_trials(
        self, request: web.Request, grant: Access, payload: bytes
    ) -> web.Response:
        if self.backend.is_paused():
            return self._unavailable("ingest is paused: Redis is unavailable")
        outcomes, rejected, decoded = decode_elements(payload, self.max_payload)
        source = f"{SOURCE}:{request.remote or 'unknown'}"  # dead letters name the client
        denied = grant.refused_writes(outcomes)
        events = [
            e for i, e in enumerate(outcomes) if isinstance(e, TrialEvent) and i not in denied
        ]
        if denied:
            self._forbidden(grant, list(denied.values()), SOURCE)
        batch = Batch.of(events, grant.filed(rejected), source)
        if not decoded:
            # Not JSON or MessagePack at all: the answer does not depend on
            # Redis, and a retry would not help. Dead-lettered when Redis can.
            with contextlib.suppress(CommitUnavailable, TimeoutError):
                await self._commit(batch)
            reason = rejected[0].reason if rejected else "empty body"
            return self._answer(json_answer({"error": reason}, 400))
        try:
            committed = await self._commit(batch)
        except (CommitUnavailable, TimeoutError) as exc:
            why = str(exc) or f"Redis did not answer within {self.config.commit_timeout} s"
            return self._unavailable(f"not committed: {why}")
        # Elements the commit dead-lettered (suite cap, unsliceable label), by element index.
        at_commit: dict[int, str] = {}
        if committed.not_counted:
            position = {id(e): j for j, e in enumerate(events)}
            at_commit = {
                i: committed.not_counted[position[id(e)]].reason
                for i, e in enumerate(outcomes)
                if id(e) in position and position[id(e)] in committed.not_counted
            }
        body = IngestResponse(
            accepted=len(events) - len(at_commit),
            rejected=len(outcomes) - len(events) + len(at_commit),
            results=[
                ElementResult(i, "forbidden", denied[i].reason)
                if i in denied
                else ElementResult(i, "rejected", at_commit[i])
                if i in at_commit
                else ElementResult(i, "accepted")
                if isinstance(e, TrialEvent)
                else ElementResult(i, "rejected", None if e is UNREPORTED else e.reason)
                for i, e in enumerate(outcomes)
            ],
            suites={
                a.suite: SuiteResult(a.counted, a.duplicates, a.errors, a.skips)
                for a in committed.applied
            },
        )
        if len(events) == len(outcomes) and not at_commit:
            status = 200
        else:
            status = 403 if len(denied) == len(outcomes) else 422
        return self._answer(json_answer(body, status))

    async def post_logs(self, request: web.Request) -> web.Response:
        from reliabilityd.integrations import otlp

        grant = self._writer(request)
        if grant is None:
            return self._answer(unauthorised())
        try:
            kind = otlp.media_type(request.headers.get("Content-Type", ""))
        except otlp.OtlpError as exc:
            return self._answer(json_answer({"error": str(exc)}, exc.status))
        length = request.content_length
        if length is not None and length > self.max_payload:
            return self._answer(
                json_answer({"error": f"body of {length} bytes exceeds {self.max_payload}"}, 413)
            )
        # A gzip body is counted as aiohttp inflates it: max_payload holds after inflating.
        return await self._read_then(request, partial(self._post_logs, grant, kind))

    async def _post_logs(self, grant: Access, kind: str, payload: bytes) -> web.Response:
        from reliabilityd.integrations import otlp

        try:
            async with self.decodes.held() as worker:  # a megabyte is ~0.5 s of Python
                mapped = await worker.run(otlp.decode_and_map, payload, kind, self.config.otlp)
        except otlp.OtlpError as exc:
            path = {} if exc.path is None else {"path": exc.path}
            return self._answer(json_answer({"error": str(exc), **path}, exc.status))
        if self.backend.is_paused():
            return self._unavailable("ingest is paused: Redis is unavailable")
        answer = mapped
        denied = grant.refused_writes(mapped.events)
        if denied:
            allowed = [e for j, e in enumerate(mapped.events) if j not in denied]
            refused = list(denied.values())
            self._forbidden(grant, refused, OTLP_SOURCE)
            if not allowed and not mapped.rejected:
                error = f"this token may not write suite {refused[0].suite!r}"
                return self._answer(json_answer({"error": error}, 403))
            mapped = otlp.Mapped(allowed, mapped.rejected, mapped.ignored)
            answer = otlp.Mapped(allowed, [*mapped.rejected, *refused], mapped.ignored)
        try:
            # At most events.MAX_LETTERS + 1 letters, as for an MQTT payload.
            letters = grant.filed(mapped.letters)
            committed = await self._commit(Batch.of(mapped.events, letters, OTLP_SOURCE))
        except (CommitUnavailable, TimeoutError) as exc:
            return self._unavailable(f"not committed: {exc or 'Redis did not answer in time'}")
        if committed.not_counted:  # dead-lettered at commit: rejected in partial_success
            late = list(committed.not_counted.values())
            answer = otlp.Mapped(
                [e for j, e in enumerate(answer.events) if j not in committed.not_counted],
                [*answer.rejected, *late],
                answer.ignored,
            )
        return self._answer(
            web.Response(body=otlp.encode_response(answer, kind), status=200, content_type=kind)
        )

    async def metrics(self, request: web.Request) -> web.Response:
        denied = None if self.config.metrics_open else self._denied(request, None)
        if denied is not None:
            return denied
        try:
            await self.backend.refresh_metrics()
        except Busy as exc:
            return busy(exc)
        # Formatting is pure Python and grows with suites x k: keep it off the loop.
        body = await asyncio.to_thread(self.backend.metrics.render)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    async def healthz(self, request: web.Request) -> web.Response:
        return json_answer(
            {
                "status": "ok",
                "uptime": round(time.time() - self.started_at, 3),
                "paused": self.backend.is_paused(),
            },
            200,
        )

    async def readyz(self, request: web.Request) -> web.Response:
        inflight = self.backend.inflight
        if inflight.locked():
            return json_answer(
                {"status": "busy", "problems": {"http": "max_inflight reached"}}, 503
            )
        async with inflight:
            problems = await self.backend.readiness()
        if problems:
            return json_answer({"status": "unready", "problems": problems}, 503)
        return json_answer({"status": "ready"}, 200)

    async def compare(self, request: web.Request) -> web.Response:
        try:
            query = parse_query(request.query)
        except QueryError as exc:
            return json_answer({"error": str(exc)}, exc.status)
        for side in (query.baseline, query.candidate):
            denied = self._denied(request, side.suite)
            if denied is not None:  # before Redis: the answer says nothing of the suites
                return denied
        try:
            async with self.compares.held() as worker:
                inflight = self.backend.inflight
                if inflight.locked():
                    return self._unavailable("max_inflight reached")
                async with inflight:
                    cmp = await self.backend.compare(query, worker)
        except Busy as exc:
            return json_answer(
                {"error": f"comparisons: {exc}: retry"}, 503, **{"Retry-After": str(RETRY_AFTER)}
            )
        except LookupError as exc:
            return json_answer({"error": str(exc.args[0] if exc.args else exc)}, 404)
        except ValueError as exc:
            return json_answer({"error": str(exc)}, 400)
        except StoreError as exc:
            return json_answer({"error": f"Redis unavailable: {type(exc).__name__}"}, 503)
        return web.Response(body=msgspec.json.encode(cmp), content_type="application/json")

    async def suite(self, request: web.Request) -> web.Response:
        name = request.match_info["suite"]
        denied = self._denied(request, name)
        if denied is not None:  # before Redis: the answer says nothing of the suite
            return denied
        try:
            raw = await self.backend.suite_json(name, request.query.get("slice"))
        except Busy as exc:
            return busy(exc)
        except StoreError as exc:
            return json_answer({"error": f"Redis unavailable: {type(exc).__name__}"}, 503)
        if raw is None:
            return json_answer({"error": f"no snapshot for suite {name!r}"}, 404)
        return web.Response(body=raw, content_type="application/json")


def make_app(backend: Backend, config: HttpConfig, max_payload: int) -> web.Application:
    h = Handlers(backend, config, max_payload)
    # aiohttp refuses bodies past client_max_size itself (413); keep one byte of slack.
    app = web.Application(client_max_size=max_payload + 1)
    app.on_response_prepare.append(add_security_headers)
    app.router.add_post("/v1/trials", h.post_trials)
    if config.otlp.enabled:
        app.router.add_post("/v1/logs", h.post_logs)
    app.router.add_get("/metrics", h.metrics)
    app.router.add_get("/healthz", h.healthz)
    app.router.add_get("/readyz", h.readyz)
    ui.register(app, backend, config, json_suite=h.suite, authority=h.authority)
    app.router.add_get("/v1/compare", h.compare)
    return app


async def serve(
    backend: Backend,
    config: HttpConfig,
    max_payload: int,
    stop: asyncio.Event,
    listening: asyncio.Event | None = None,
) -> None:
    """Serve until stop is set; requests in flight get a moment to finish.

    HTTPS with ``http.tls_cert`` / ``tls_key``; ConfigError when they cannot
    be used or the file limit leaves no room for connections.
    """
    try:
        ssl_context = http_tls_context(config)
    except HttpTlsProblem as exc:
        raise ConfigError("[http]", f"$.http.{exc.field}", exc.message) from None
    allowed = connection_limit(config, backend.config.redis.max_connections)
    limits = msgspec.structs.replace(config, max_connections=allowed)
    runner = Runner(
        make_app(backend, config, max_payload),
        access_log=None,
        shutdown_timeout=2.0,
        keepalive_timeout=config.read_timeout,
    )
    runner.limits = limits
    await runner.setup()
    try:
        site = web.TCPSite(
            runner, config.host, config.port, ssl_context=ssl_context, backlog=BACKLOG
        )
        await site.start()
        if listening is not None:
            listening.set()
        await stop.wait()
    finally:
        with contextlib.suppress(Exception):
            await asyncio.shield(runner.cleanup())
