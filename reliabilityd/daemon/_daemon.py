"""The daemon: the one module that wires sources, store, statistics and sinks.

Data flows one way: messages -> decode -> one Lua call per suite batch ->
acknowledge. What follows a commit (live values, the CI tick's snapshots, the
evaluator) is ``_recompute``'s. Everything that must survive a crash is in
Redis.

Every loop runs under the supervisor: a loop that fails is logged with its
traceback and restarted with backoff; the daemon exits only on a stop signal
or a configuration error. A Redis error of any kind pauses ingest without
acknowledging and retries with capped backoff.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import TypeVar

from reliabilityd.alerting import sinks
from reliabilityd.alerting.evaluator import Evaluator
from reliabilityd.alerting.outbox import Outbox
from reliabilityd.alerting.publisher import Publisher
from reliabilityd.alerting.watchdog import BlindWatch, RedisHealth, describe
from reliabilityd.backoff import Backoff
from reliabilityd.config import Config
from reliabilityd.daemon import web
from reliabilityd.daemon._admission import Decoded, past_suite_cap, screen_labels
from reliabilityd.daemon._canary import Canaries
from reliabilityd.daemon._compare import CompareQuery, compare_sides
from reliabilityd.daemon._heartbeat import heartbeat_loop
from reliabilityd.daemon._http_answers import Committed, probe
from reliabilityd.daemon._offload import Worker
from reliabilityd.daemon._recompute import REDIS_ERRORS, Recompute
from reliabilityd.daemon.auth import Authority
from reliabilityd.daemon.metrics import Metrics
from reliabilityd.daemon.supervisor import supervise
from reliabilityd.errors import ConfigError, first_config_error
from reliabilityd.events import TrialEvent, decode_many
from reliabilityd.logs import RateLimited, emit
from reliabilityd.rejections import Rejected
from reliabilityd.sources import configured as configured_sources
from reliabilityd.sources import mqtt
from reliabilityd.stats.compare import Comparison
from reliabilityd.store import Applied, Slicing, Store, StreamCursor, connect
from reliabilityd.topics import Binding, decode_bound

T = TypeVar("T")
LIVE_INTERVAL = 0.2
SHUTDOWN_GRACE = 4.0


class Daemon:
    def __init__(self, config: Config, store: Store | None = None) -> None:
        self.config = config
        self.store = store or Store(
            connect(config.redis.url, cluster=config.redis.cluster, timeout=config.redis.timeout),
            config.redis.prefix,
        )
        # The HTTP port's own bounded pool: HTTP load waits for, or fails on,
        # these connections only, never the ones the sources, the CI loop and
        # the heartbeat use. One per request in flight (http.max_inflight).
        self.http_store = Store(
            connect(
                config.redis.url,
                cluster=config.redis.cluster,
                timeout=config.redis.timeout,
                max_connections=config.http.max_inflight,
            ),
            config.redis.prefix,
        )
        self.instance = config.instance
        # mqtt.bind_suite: each MQTT event's suite must be the one its topic names.
        self.binding = Binding.parse(config.mqtt.bind_suite) if config.mqtt.bind_suite else None
        self._deadletter_log = RateLimited()
        self._redis_logs: dict[str, RateLimited] = defaultdict(RateLimited)
        self.health = RedisHealth()
        self.publisher = (
            Publisher(config.mqtt, f"{config.mqtt.client_id}-pub-{os.getpid()}")
            if config.mqtt.enabled
            else None
        )
        self.rules = config.rules()
        # Who may write and read over HTTP: one Authority the handlers and pages share.
        self.authority = Authority.from_config(config.http)
        self.started_at = time.time()
        # What the HTTP port and /metrics read (web.Backend, below).
        self.last_commit_at = self.started_at
        self.http_listening = asyncio.Event()
        self.http = sinks.Http()
        configured = sinks.configured(config, self.store, self.publisher, self.http)
        # What the MQTT consumer saw of its broker session (lost, taken over).
        self.mqtt_watch = mqtt.Watch()
        self.metrics = Metrics(
            sinks=configured,
            is_paused=self.is_paused,
            last_commit_at=lambda: self.last_commit_at,
            mqtt_watch=self.mqtt_watch,
        )
        self.sinks = self.metrics.count_sink_failures(configured)
        if self.publisher is not None:
            self.publisher.on_refused = lambda _topic, _reason: self.metrics.publish_refused.inc()
        self.outbox = Outbox(config, self.store, self.sinks, self.instance)
        self.evaluator = Evaluator(config, self.store, self.outbox)
        self.blind = BlindWatch(
            self.health,
            configured,  # its watchdog needs the Alertmanager sink itself, not a wrapper
            self.instance,
            blind_after=config.daemon.blind_after,
            resend_interval=config.sinks.alertmanager.resend_interval,
            watchdog=config.sinks.alertmanager.watchdog,
        )
        self.recompute = Recompute(
            config,
            self.store,
            rules=self.rules,
            evaluator=self.evaluator,
            metrics=self.metrics,
            publisher=self.publisher,
        )
        self.recompute.canaries = Canaries(config, self.store, self.outbox)
        self.committed_events = 0
        # Set once the MQTT subscription is confirmed (for tests and tools).
        self.subscribed = asyncio.Event()

    # --- settings ---------------------------------------------------------

    async def install(self, config: Config) -> None:
        """Hand every part the settings of ``config`` at once: the reload's one seam.

        The new sinks are built first; the swap itself waits for the CI tick
        in progress and has no await, so no tick, evaluation, commit or
        request sees half of it. ``config`` keeps the running values of the
        keys that need a restart (``_reload.merge``): what is connected,
        subscribed or listening is left as it is.
        """
        configured = sinks.configured(config, self.store, self.publisher, self.http)
        counted = self.metrics.count_sink_failures(configured)
        async with self.recompute.tick:
            self.config, self.rules, self.sinks = config, config.rules(), counted
            self.authority.configure(config.http)
            self.outbox.configure(config, counted)
            self.evaluator.configure(config)
            am = config.sinks.alertmanager
            self.blind.configure(
                configured, resend_interval=am.resend_interval, watchdog=am.watchdog
            )
            self.recompute.configure(config)
            if self.recompute.canaries is not None:
                self.recompute.canaries.configure(config)

    # --- ingest -----------------------------------------------------------

    async def _retry(self, what: str, op: Callable[[], Awaitable[T]]) -> T:
        """Run a Redis operation until it succeeds: ingest pauses meanwhile, unacknowledged.

        Any Redis error (connection, timeout, OOM, READONLY, NOSCRIPT, BUSY...)
        is retried with capped backoff and logged at a limited rate;
        cancellation stops the retries.
        """
        pace = Backoff(0.1, 5.0)
        while True:
            try:
                result = await op()
            except REDIS_ERRORS as exc:
                self.health.failed("ingest", exc)
                delay = pace.next_delay()
                self._redis_logs[what].emit(
                    logging.WARNING,
                    "redis_unavailable",
                    during=what,
                    error=describe(exc),
                    retry_in=round(delay, 2),
                )
                await asyncio.sleep(delay)
                continue
            if pace.attempts:
                emit(logging.INFO, "redis_recovered", during=what, attempts=pace.attempts)
            self.health.ok("ingest")
            return result

    def decode(
        self, payloads: Sequence[tuple[bytes, str]], skipped: Sequence[tuple[int, str]] = ()
    ) -> Decoded:
        """Decode a batch of (payload, source) pairs: good events by suite, the rejected.

        ``skipped`` are the (size, source) of messages whose bodies were not
        read (over ``ingest.max_payload``): each is dead-lettered with its size.
        With ``mqtt.bind_suite`` (MQTT's sources only: ``mqtt:<topic>``), an
        event whose suite its topic does not bind is dead-lettered too.
        """
        limit = self.config.ingest.max_payload
        if self.binding is None:
            good, rejected = decode_many(payloads, limit)
        else:
            good, rejected = decode_bound(payloads, self.binding, limit)
        for size, source in skipped:
            reason = f"payload of {size} bytes exceeds ingest.max_payload ({limit}): not read"
            rejected.append((Rejected(b"", reason, "too_large"), source))
        by_suite: dict[str, list[TrialEvent]] = defaultdict(list)
        for event in good:
            by_suite[event.suite].append(event)
        # A batch comes from one consumer: its first payload's source stands
        # for the batch in the dead letters the commit may write.
        sources = dict.fromkeys(by_suite, payloads[0][1]) if payloads else {}
        return Decoded(by_suite, rejected, sources)

    async def commit_decoded(
        self,
        decoded: Decoded,
        sent: asyncio.Event | None = None,
        *,
        cursor: StreamCursor | None = None,
    ) -> None:
        """Dead-letter the rejected, apply the good; returns once Redis has it all.

        ``sent`` is set once the apply request is on its way to Redis.
        """
        await self._commit_decoded(
            decoded.by_suite,
            decoded.rejected,
            retry=True,
            cursor=cursor,
            sent=sent,
            sources=decoded.sources,
        )

    async def commit(
        self, payloads: Sequence[tuple[bytes, str]], cursor: StreamCursor | None = None
    ) -> None:
        """Decode, dead-letter the bad, apply the good; returns once Redis has it all.

        The Redis Stream source's commit: a stream entry has no topic to bind.
        """
        good, rejected = decode_many(payloads, self.config.ingest.max_payload)
        by_suite: dict[str, list[TrialEvent]] = defaultdict(list)
        for event in good:
            by_suite[event.suite].append(event)
        sources = dict.fromkeys(by_suite, payloads[0][1]) if payloads else {}
        await self.commit_decoded(Decoded(by_suite, rejected, sources), cursor=cursor)

    async def _once(self, what: str, op: Callable[[], Awaitable[T]]) -> T:
        return await op()

    async def _commit_decoded(
        self,
        by_suite: dict[str, list[TrialEvent]],
        rejected: list[tuple[Rejected, str]],
        *,
        retry: bool,
        cursor: StreamCursor | None = None,
        sent: asyncio.Event | None = None,
        store: Store | None = None,
        sources: Mapping[str, str] | None = None,
        not_counted: dict[int, str] | None = None,
    ) -> list[Applied]:
        """Dead-letter, then admit and apply; with ``retry`` until Redis takes it, else once.

        ``not_counted`` gets ``id(event) -> reason`` for every event of
        ``by_suite`` dead-lettered here instead of applied (the HTTP answer's
        per-element status).

        ``store`` is the one to commit through (the HTTP port's own pool), by
        default the daemon's. Dead-lettered besides ``rejected``: the events
        whose sliced labels cannot name a slice, and those of a new suite past
        ``stats.max_suites`` (``Ingest.admit``, atomic across replicas, in
        the same retried operation as the apply).
        """
        run = self._retry if retry else self._once
        store = store or self.store
        cfg = self.config  # one config for the whole commit, whatever a reload does meanwhile
        by_suite, screened = screen_labels(cfg, by_suite, sources or {}, not_counted)
        if screened:
            rejected = [*rejected, *screened]
        if rejected:
            await run(
                "deadletter",
                partial(
                    store.ingest.deadletter,
                    rejected,
                    maxlen=cfg.store.deadletter_maxlen,
                ),
            )
            self._deadlettered(rejected)
        if not by_suite and cursor is None:
            return []
        windows = {suite: cfg.suite_settings(suite)[0] for suite in by_suite}
        touch = {suite for suite in by_suite if cfg.idle_expiry(suite) > 0}
        slicing = {}
        for suite in by_suite:
            slice_by, most = cfg.slicing(suite)
            if slice_by:
                slicing[suite] = Slicing(slice_by, most)
        refused: list[tuple[Rejected, str]] = []

        async def admit_and_apply() -> list[Applied]:
            # One operation for the retry: ingest counts as resumed only once the
            # batch is applied, not when the admission alone went through.
            batch = by_suite
            if by_suite:
                out = await store.ingest.admit(list(by_suite), cfg.stats.max_suites)
                if out:
                    letters = past_suite_cap(cfg, by_suite, out, sources or {}, not_counted)
                    await store.ingest.deadletter(letters, maxlen=cfg.store.deadletter_maxlen)
                    refused[:] = letters
                    batch = {s: e for s, e in by_suite.items() if s not in out}
            if not batch and cursor is None:
                return []
            return await store.ingest.apply(
                batch,
                windows=windows,
                dedup_ttl=cfg.dedup_ttl,
                cursor=cursor,
                touch=touch,
                sent=sent,
                slicing=slicing,
            )

        started = time.monotonic()
        applied = await run("apply", admit_and_apply)
        if refused:
            self._deadlettered(refused)
        self.metrics.committed(applied, time.monotonic() - started)
        self.last_commit_at = time.time()
        for result in applied:
            self.committed_events += result.counted
        self.recompute.live.committed([result.suite for result in applied])
        return applied

    def _deadlettered(self, rejected: Sequence[tuple[Rejected, str]]) -> None:
        first, source = rejected[0]
        self._deadletter_log.emit(
            logging.WARNING,
            "deadletter",
            source=source,
            count=len(rejected),
            reason=first.reason[:300],
        )
        self.metrics.deadlettered(rejected)

    # --- numbers out ------------------------------------------------------

    # --- web.Backend: what the HTTP port and /metrics read -----------------

    def is_paused(self) -> bool:
        """True while ingest waits for Redis (the sources hold their input)."""
        return self.health.since is not None

    async def ingest(
        self, events: Sequence[TrialEvent], rejected: Sequence[Rejected], source: str
    ) -> Committed:
        """Commit once, no retry: the HTTP client retries on the 503 this becomes."""
        by_suite: dict[str, list[TrialEvent]] = defaultdict(list)
        for event in events:
            by_suite[event.suite].append(event)
        not_counted: dict[int, str] = {}
        try:
            applied = await self._commit_decoded(
                by_suite,
                [(r, source) for r in rejected],
                retry=False,
                store=self.http_store,
                sources=dict.fromkeys(by_suite, source),
                not_counted=not_counted,
            )
        except REDIS_ERRORS as exc:
            raise web.IngestUnavailable(f"Redis: {exc}") from None
        return Committed(
            applied,
            {i: not_counted[id(e)] for i, e in enumerate(events) if id(e) in not_counted},
        )

    async def refresh_metrics(self) -> None:
        await self.metrics.refresh(self.http_store, self.rules, list(self.sinks))

    async def snapshot_json(self, suite: str, slice: str | None = None) -> bytes | None:
        return await self.http_store.snapshots.snapshot_json(suite, slice=slice)

    async def compare(self, query: CompareQuery, worker: Worker) -> Comparison:
        """The paired comparison with the settings ``reliabilityd compare`` uses."""
        return await compare_sides(self.http_store, self.config, query, worker)

    async def readiness(self) -> dict[str, str]:
        broker = self.config.mqtt.url if self.config.mqtt.enabled else None
        return await probe(self.http_store.client, broker)

    # --- loops ------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Run until stop is set, then stop intake, finish the batch in flight, exit.

        Raises ConfigError (the only error that ends it early).
        """
        cfg = self.config
        intake_stop = asyncio.Event()
        emit(logging.INFO, "started", instance=self.instance)
        try:
            async with asyncio.TaskGroup() as tg:
                sources = [
                    tg.create_task(
                        supervise(source.name, partial(source.run, intake_stop), intake_stop),
                        name=source.name,
                    )
                    for source in configured_sources(
                        cfg,
                        self.store,
                        self.instance,
                        decode=self.decode,
                        commit_decoded=self.commit_decoded,
                        commit=self.commit,
                        max_payload=cfg.ingest.max_payload,
                        subscribed=self.subscribed,
                        watch=self.mqtt_watch,
                    )
                ]
                loops: dict[str, Callable[[], Awaitable[None]]] = {
                    "live": partial(self.recompute.live.loop, stop),
                    "ci": partial(self.recompute.ci_loop, stop),
                    "heartbeat": partial(heartbeat_loop, self, stop),
                    "blind-watch": partial(self.blind.run, stop),
                }
                if self.publisher is not None:
                    loops["publisher"] = partial(self.publisher.run, stop)
                if cfg.http.port:
                    loops["http"] = partial(
                        web.serve, self, cfg.http, cfg.ingest.max_payload, stop, self.http_listening
                    )
                background = [
                    tg.create_task(supervise(name, loop, stop), name=name)
                    for name, loop in loops.items()
                ]
                await stop.wait()
                intake_stop.set()
                # Sources finish the batch in flight (commit, then acknowledge).
                if sources:
                    _, late = await asyncio.wait(sources, timeout=SHUTDOWN_GRACE)
                    for task in late:
                        task.cancel()
                for task in background:
                    task.cancel()
        except BaseExceptionGroup as group:
            config_errors = group.subgroup(ConfigError)
            if config_errors is not None:
                raise first_config_error(config_errors) from group
            raise
        finally:
            intake_stop.set()
            stop.set()
            await self.outbox.close()
            await self.http.close()
            await self.http_store.client.aclose()
            emit(logging.INFO, "stopped", committed_events=self.committed_events)
