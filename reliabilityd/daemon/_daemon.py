"""The daemon: the one module that wires sources, store, statistics and sinks.

Data flows one way: messages -> the commit (``sources.Commit``: decode,
admit, one Lua call per suite batch, acknowledge). What follows a commit
(live values, the CI tick's snapshots, the evaluator) is ``_recompute``'s.
Everything that must survive a crash is in Redis.

Every loop runs under the supervisor: a loop that fails is logged with its
traceback and restarted with backoff; the daemon exits only on a stop signal
or a configuration error. A Redis error of any kind (a ``StoreError``) pauses
ingest without acknowledging and retries with capped backoff. The HTTP port
reaches Redis through its own pool and places (``_http_backend``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

from reliabilityd.alerting import sinks
from reliabilityd.alerting.evaluator import Evaluator
from reliabilityd.alerting.outbox import Outbox
from reliabilityd.alerting.publisher import Publisher
from reliabilityd.alerting.watchdog import BlindWatch, RedisHealth
from reliabilityd.config import Config
from reliabilityd.daemon import web
from reliabilityd.daemon._canary import Canaries
from reliabilityd.daemon._heartbeat import heartbeat_loop
from reliabilityd.daemon._http_backend import HttpBackend
from reliabilityd.daemon._provable import warn_unprovable
from reliabilityd.daemon._recompute import Recompute
from reliabilityd.daemon.auth import Authority
from reliabilityd.daemon.metrics import Metrics
from reliabilityd.daemon.supervisor import supervise
from reliabilityd.errors import ConfigError, first_config_error
from reliabilityd.logs import emit
from reliabilityd.sources import Batch, Commit, Committed, Letter, mqtt
from reliabilityd.sources import configured as configured_sources
from reliabilityd.store import Store, StoreError, connect

LIVE_INTERVAL = 0.2
SHUTDOWN_GRACE = 4.0


class Daemon:
    def __init__(self, config: Config, store: Store | None = None) -> None:
        self.config = config
        # The pool of the sources, the CI tick, delivery and the heartbeat:
        # redis.max_connections, each command waiting for a free one. The HTTP
        # port has a pool of its own (self.http_port, below).
        self.store = store or Store(
            connect(
                config.redis.url,
                cluster=config.redis.cluster,
                timeout=config.redis.timeout,
                max_connections=config.redis.max_connections,
            ),
            config.redis.prefix,
        )
        self.instance = config.instance
        self.health = RedisHealth()
        self.publisher = (
            Publisher(config.mqtt, f"{config.mqtt.client_id}-pub-{os.getpid()}")
            if config.mqtt.enabled
            else None
        )
        self.rules = config.rules()
        # Who may write and read over HTTP: one Authority the handlers and pages share.
        self.authority = Authority.from_config(config.http, config.grants)
        self.started_at = time.time()
        # What /metrics and the HTTP port read.
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
        # The commit every source hands its batches to: retried until Redis takes
        # it. The HTTP port's (self.http_port.commit) is tried once, on the port's
        # own pool (the client retries on the 503 a failure becomes).
        self.commit = Commit(config, self.store, health=self.health, observer=self)
        # Set once the MQTT subscription is confirmed (for tests and tools).
        self.subscribed = asyncio.Event()
        # Everything the HTTP port reads and commits, on its own pool and places.
        self.http_port = HttpBackend(self)

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
            before = self.config.canaries()
            self.config, self.rules, self.sinks = config, config.rules(), counted
            self.authority.configure(config.http, config.grants)
            self.commit.configure(config)
            self.http_port.configure(config)
            self.outbox.configure(config, counted)
            self.evaluator.configure(config)
            am = config.sinks.alertmanager
            self.blind.configure(
                configured, resend_interval=am.resend_interval, watchdog=am.watchdog
            )
            self.recompute.configure(config)
            if self.recompute.canaries is not None:
                self.recompute.canaries.configure(config)
                try:
                    # Views and points nothing judges any more: gone with the rule, and
                    # gone from the rows of the suites they read at the next tick.
                    self.recompute.rows.recheck(await self.recompute.canaries.forget(before))
                except StoreError as exc:
                    emit(logging.WARNING, "canary_forget_failed", error=exc, kept="until a reload")

    # --- what every commit tells the daemon (sources.Observer) ------------

    def committed(self, batch: Batch, committed: Committed, seconds: float) -> None:
        """Metrics, the heartbeat's count, and the live values of the suites it touched."""
        applied = committed.applied
        self.metrics.committed(applied, seconds)
        self.last_commit_at = time.time()
        self.committed_events += committed.counted
        self.recompute.live.committed((result.suite, result.version) for result in applied)

    def deadlettered(self, letters: Sequence[Letter]) -> None:
        self.metrics.deadlettered(letters)

    # --- what the HTTP port (self.http_port) and /metrics use -------------

    def is_paused(self) -> bool:
        """True while ingest waits for Redis (the sources hold their input)."""
        return self.health.since is not None

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
                        self.commit,
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
                        web.serve,
                        self.http_port,
                        cfg.http,
                        cfg.ingest.max_payload,
                        stop,
                        self.http_listening,
                    )
                background = [
                    tg.create_task(supervise(name, loop, stop), name=name)
                    for name, loop in loops.items()
                ]
                background.append(
                    tg.create_task(warn_unprovable(cfg, self.store), name="rule-check")
                )
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
            await self.http_port.aclose()
            emit(logging.INFO, "stopped", committed_events=self.committed_events)
