"""The daemon: the one module that wires sources, store, statistics and sinks.

Data flows one way: messages -> decode -> one Lua call per suite batch ->
acknowledge. After a commit the suite's point estimates are refreshed within
``LIVE_INTERVAL``. The same commit marks the suite changed in Redis; every
``ci_interval`` a replica claims marked suites, computes their CIs, lottery
cases and snapshot, and drops its claim (a replica that dies holding a claim
loses nothing: the claim expires back into the marks). Then the evaluator
judges every rule on the newest snapshot in Redis. Everything that must
survive a crash is in Redis.

Every loop runs under the supervisor: a loop that fails is logged with its
traceback and restarted with backoff; the daemon exits only on a stop signal
or a configuration error. A Redis error of any kind pauses ingest without
acknowledging and retries with capped backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
import os
import secrets
import signal
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import NamedTuple, TypeVar

import msgspec
import redis.exceptions

from reliabilityd.alerting import rulestate, sinks
from reliabilityd.alerting.evaluator import Evaluator
from reliabilityd.alerting.notify import parse_time
from reliabilityd.alerting.outbox import Outbox
from reliabilityd.alerting.publisher import Publisher
from reliabilityd.alerting.rules import Rule
from reliabilityd.alerting.watchdog import BlindWatch, RedisHealth, describe
from reliabilityd.backoff import Backoff
from reliabilityd.config import Config
from reliabilityd.daemon import web
from reliabilityd.daemon.metrics import Metrics
from reliabilityd.daemon.supervisor import supervise
from reliabilityd.errors import ConfigError
from reliabilityd.events import Rejected, TrialEvent, decode_many
from reliabilityd.logs import RateLimited, emit, kv, log
from reliabilityd.sources import mqtt, streams
from reliabilityd.stats import snapshot
from reliabilityd.stats.lottery import ranked_cell_groups
from reliabilityd.store import dedup
from reliabilityd.store._store import Applied, Store, StreamCursor, connect

T = TypeVar("T")
LIVE_INTERVAL = 0.2
SHUTDOWN_GRACE = 4.0
# Every Redis error pauses what needs Redis; none of them ends the daemon.
REDIS_ERRORS = (redis.exceptions.RedisError,)
# Change marks taken per claim (a tick claims again while marks remain, for at
# most TICK_SHARE of its interval), and how long a claim lasts before it returns.
CLAIM_BATCH = 32
CLAIM_LIFETIME = 30.0
TICK_SHARE = 0.8
# Suites recomputed at once within a tick.
RECOMPUTE_LANES = 4
# A suite with at most this many (n, c) cells gets its CI on the event loop
# (about 1-3 ms, see make bench-stats); a larger one in a worker thread.
INLINE_CELLS = 2000
# The full version scan that finds what the change marks cannot (see mark_stale).
RECONCILE_EVERY = 60.0
# A rule's expected page rate (a simulation) is recomputed this often at most,
# and a replica runs at most this many such simulations per CI tick.
FORECAST_EVERY = 600.0
FORECASTS_PER_TICK = 1
# Idle tasks are looked for this often (at most 500 per suite per sweep).
IDLE_SWEEP_EVERY = 10.0


class Decoded(NamedTuple):
    """A decoded batch: the good events grouped by suite, the rejected with their source."""

    by_suite: dict[str, list[TrialEvent]]
    rejected: list[tuple[Rejected, str]]


class Daemon:
    def __init__(self, config: Config, store: Store | None = None) -> None:
        self.config = config
        self.store = store or Store(
            connect(config.redis.url, cluster=config.redis.cluster, timeout=config.redis.timeout),
            config.redis.prefix,
        )
        self.instance = config.instance
        self._live_dirty: set[str] = set()
        self._live_wake = asyncio.Event()
        self._deadletter_log = RateLimited()
        self._redis_logs: dict[str, RateLimited] = defaultdict(RateLimited)
        self._no_window_log = RateLimited(3600.0)
        self.health = RedisHealth()
        self.publisher = (
            Publisher(config.mqtt, f"{config.mqtt.client_id}-pub-{os.getpid()}")
            if config.mqtt.enabled
            else None
        )
        self.rules = config.rules()
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
        self._next_reconcile = 0.0
        self._forecast_budget = FORECASTS_PER_TICK
        self._next_idle_sweep = 0.0
        self._unfinished: set[str] = set()
        self.committed_events = 0
        # Set once the MQTT subscription is confirmed (for tests and tools).
        self.subscribed = asyncio.Event()

    # --- settings ---------------------------------------------------------

    def ks(self) -> tuple[int, ...]:
        """The configured k values and every k an alert rule names."""
        return tuple(sorted({*self.config.stats.k, *(r.k for r in self.rules)}))

    def settings(self, suite: str) -> snapshot.StatsSettings:
        window, min_coverage = self.config.suite_settings(suite)
        stats = self.config.stats
        return snapshot.StatsSettings(
            ks=self.ks(),
            window=window,
            min_coverage=min_coverage,
            n_boot=stats.n_boot,
            confidence=stats.confidence,
            seed=stats.seed,
            interval=self.config.suite_interval(suite),
        )

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
        """
        limit = self.config.ingest.max_payload
        good, rejected = decode_many(payloads, limit)
        for size, source in skipped:
            reason = f"payload of {size} bytes exceeds ingest.max_payload ({limit}): not read"
            rejected.append((Rejected(b"", reason), source))
        by_suite: dict[str, list[TrialEvent]] = defaultdict(list)
        for event in good:
            by_suite[event.suite].append(event)
        return Decoded(by_suite, rejected)

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
            decoded.by_suite, decoded.rejected, retry=True, cursor=cursor, sent=sent
        )

    async def commit(
        self, payloads: Sequence[tuple[bytes, str]], cursor: StreamCursor | None = None
    ) -> None:
        """Decode, dead-letter the bad, apply the good; returns once Redis has it all."""
        await self.commit_decoded(self.decode(payloads), cursor=cursor)

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
    ) -> list[Applied]:
        """Dead-letter, then apply; with ``retry`` until Redis takes it, else once."""
        run = self._retry if retry else self._once
        if rejected:
            # One token for every attempt: a retry after a lost reply writes nothing twice.
            await run(
                "deadletter",
                partial(
                    self.store.deadletter,
                    rejected,
                    maxlen=self.config.store.deadletter_maxlen,
                    token=secrets.token_hex(8),
                ),
            )
            first, source = rejected[0]
            self._deadletter_log.emit(
                logging.WARNING,
                "deadletter",
                source=source,
                count=len(rejected),
                reason=first.reason,
            )
            self.metrics.deadlettered(source for _, source in rejected)
        if not by_suite and cursor is None:
            return []
        windows = {suite: self.config.suite_settings(suite)[0] for suite in by_suite}
        touch = {suite for suite in by_suite if self.config.idle_expiry(suite) > 0}
        started = time.monotonic()
        applied = await run(
            "apply",
            partial(
                self.store.apply,
                by_suite,
                windows=windows,
                dedup_ttl=self.config.dedup_ttl,
                cursor=cursor,
                touch=touch,
                sent=sent,
            ),
        )
        self.metrics.committed(applied, time.monotonic() - started)
        self.last_commit_at = time.time()
        for result in applied:
            self.committed_events += result.counted
            self._live_dirty.add(result.suite)
        self._live_wake.set()
        return applied

    # --- numbers out ------------------------------------------------------

    async def refresh_live(self, suite: str) -> None:
        """Point estimates and counters of the suite's current version, no CI."""
        state = await self.store.read_state(suite)
        c = state.counters
        estimates = snapshot.point_estimates(state.hist, self.settings(suite))
        values: dict[str, str | int] = {
            **snapshot.counter_fields(state.hist.tasks, c.trials, c.errors, c.skips, c.duplicates),
            "live_updated_at": snapshot.rfc3339(time.time()),
            **snapshot.value_fields(estimates),
        }
        await self.store.write_snapshot(suite, c.version, {}, values)

    def _due_forecasts(
        self, rules: Sequence[Rule], previous: snapshot.Snapshot | None, now: float
    ) -> frozenset[str]:
        """The rules whose expected page rate is due, within this tick's budget."""
        due = []
        for rule in rules:
            view = None if previous is None else previous.rule(rule.name)
            at = None if view is None else view.expected_at
            if (at is None or now - at >= FORECAST_EVERY) and self._forecast_budget > 0:
                self._forecast_budget -= 1
                due.append(rule.name)
        return frozenset(due)

    async def refresh_snapshot(self, suite: str) -> snapshot.Snapshot | None:
        """CIs, lottery cases, rule views and the whole snapshot; None if a newer one is stored."""
        rules = [r for r in self.rules if fnmatch.fnmatchcase(suite, r.suite)]
        settings = self.settings(suite)
        watched = any(r.trigger == "detector" for r in rules)
        detector = settings.window > 0 and watched
        if watched and not detector:
            self._no_window_log.emit(logging.WARNING, "detector_without_window", suite=suite)
        state = await self.store.read_state(suite, windows=detector)
        previous = await self.evaluator.newest_snapshot(suite) if rules else None
        now = time.time()
        c = state.counters
        suite_pace = rulestate.pace(
            c.trials,
            state.hist.tasks,
            now,
            None
            if previous is None
            else (previous.trials, parse_time(previous.updated_at) or now, previous.pace),
        )
        views = partial(
            rulestate.rule_views,
            rules,
            state.hist,
            state.windows,
            window=settings.window,
            suite_pace=suite_pace,
            previous={} if previous is None else {v.rule: v for v in previous.rules},
            forecast=self._due_forecasts(rules, previous, now),
            now=now,
            settings=settings,
        )
        with self.metrics.ci_seconds.time():
            if len(state.hist) <= INLINE_CELLS:
                # A few milliseconds: a worker thread's handoff would cost more.
                estimates = snapshot.full_estimates(state.hist, settings)
            else:
                estimates = await asyncio.to_thread(snapshot.full_estimates, state.hist, settings)
        rule_views = await asyncio.to_thread(views) if rules else []
        lottery_k = max(self.config.stats.k)
        limit = self.config.stats.lottery_limit
        groups = ranked_cell_groups(state.hist.at_least(lottery_k), lottery_k, limit)
        rows = await self.store.lottery_rows(suite, groups, limit)
        snap = snapshot.build(
            suite=suite,
            hist=state.hist,
            trials=c.trials,
            errors=c.errors,
            skips=c.skips,
            duplicates=c.duplicates,
            version=c.version,
            settings=settings,
            estimates=estimates,
            lottery_k=lottery_k,
            lottery_rows=rows,
            now=now,
            last_trial_at=c.last_trial_at,
            pace=suite_pace,
            rules=rule_views,
        )
        ci, values = snapshot.redis_fields(snap)
        wrote_ci, _ = await self.store.write_snapshot(suite, c.version, ci, values)
        if not wrote_ci:
            return None
        if self.publisher is not None:
            self.publisher.publish(
                f"{self.config.mqtt.snapshot_topic}/{suite}", msgspec.json.encode(snap)
            )
        return snap

    async def ci_tick(self) -> list[str]:
        """New snapshots for the suites this replica claims; returns them.

        Claims batch after batch while marks remain, for at most
        ``TICK_SHARE`` of a ``ci_interval``: a burst of changed suites drains
        in one tick, and the evaluator still runs every interval.
        """
        if time.monotonic() >= self._next_reconcile:
            await self.store.mark_stale(await self.store.suites())
            self._next_reconcile = time.monotonic() + RECONCILE_EVERY
        if self._unfinished:
            # Claims a Redis error interrupted: hand them back now rather than
            # when they expire.
            await self.store.mark_changed(sorted(self._unfinished))
            await self.store.release_claims(sorted(self._unfinished))
            self._unfinished.clear()
        self._forecast_budget = FORECASTS_PER_TICK
        deadline = time.monotonic() + TICK_SHARE * self.config.stats.ci_interval
        done: list[str] = []
        lanes = asyncio.Semaphore(RECOMPUTE_LANES)

        async def recompute(suite: str) -> None:
            async with lanes:
                await self._recompute(suite)

        while True:
            claimed = await self.store.claim_changed(CLAIM_BATCH, CLAIM_LIFETIME)
            # A few suites at once: one's Redis round trips overlap another's
            # math (numpy releases the GIL in the worker threads).
            results = await asyncio.gather(
                *(recompute(suite) for suite in claimed), return_exceptions=True
            )
            failed = [(s, r) for s, r in zip(claimed, results, strict=True) if r is not None]
            if failed:
                # Only Redis errors reach here (_recompute logs the rest).
                self._unfinished.update(s for s, _ in failed)
                await self.store.release_claims([s for s in claimed if s not in self._unfinished])
                raise failed[0][1]
            # One write for the batch's claims (each write waits for the AOF fsync).
            await self.store.release_claims(claimed)
            done.extend(claimed)
            if len(claimed) < CLAIM_BATCH or time.monotonic() >= deadline:
                return done

    async def expire_idle(self, suites: Sequence[str]) -> int:
        """Retire the tasks of suites with an idle expiry that had no event for that long."""
        now = time.time()
        gone = 0
        for suite in suites:
            idle = self.config.idle_expiry(suite)
            if idle > 0:
                left = await self.store.expire_idle(suite, now - idle)
                if left:
                    emit(logging.INFO, "tasks_expired", suite=suite, tasks=left, idle_s=idle)
                gone += left
        return gone

    async def _recompute(self, suite: str) -> None:
        try:
            await self.refresh_snapshot(suite)
        except REDIS_ERRORS:
            raise
        except Exception:
            # One suite's failure must not stop the others or ingest:
            # marked again, it is retried on the next tick.
            log.exception("%s", kv("snapshot_failed", suite=suite))
            await self.store.mark_changed([suite])

    # --- web.Backend: what the HTTP port and /metrics read -----------------

    def is_paused(self) -> bool:
        """True while ingest waits for Redis (the sources hold their input)."""
        return self.health.since is not None

    async def ingest(
        self, events: Sequence[TrialEvent], rejected: Sequence[Rejected], source: str
    ) -> list[Applied]:
        """Commit once, no retry: the HTTP client retries on the 503 this becomes."""
        by_suite: dict[str, list[TrialEvent]] = defaultdict(list)
        for event in events:
            by_suite[event.suite].append(event)
        try:
            return await self._commit_decoded(
                by_suite, [(r, source) for r in rejected], retry=False
            )
        except REDIS_ERRORS as exc:
            raise web.IngestUnavailable(f"Redis: {exc}") from None

    async def refresh_metrics(self) -> None:
        await self.metrics.refresh(self.store, self.rules, list(self.sinks))

    async def snapshot_json(self, suite: str) -> bytes | None:
        return await self.store.snapshot_json(suite)

    async def readiness(self) -> dict[str, str]:
        broker = self.config.mqtt.url if self.config.mqtt.enabled else None
        return await web.probe(self.store.client, broker)

    # --- loops ------------------------------------------------------------

    async def _live_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self._live_wake.wait()
            self._live_wake.clear()
            dirty, self._live_dirty = self._live_dirty, set()
            for suite in sorted(dirty):
                try:
                    await self.refresh_live(suite)
                except REDIS_ERRORS as exc:
                    self._redis_logs["live"].emit(
                        logging.WARNING, "live_refresh_failed", suite=suite, error=describe(exc)
                    )
                    self._live_dirty.add(suite)
            await asyncio.sleep(LIVE_INTERVAL)
            if self._live_dirty:
                self._live_wake.set()

    async def _ci_loop(self, stop: asyncio.Event) -> None:
        interval = self.config.stats.ci_interval
        while not stop.is_set():
            started = time.monotonic()
            try:
                if time.monotonic() >= self._next_idle_sweep:
                    self._next_idle_sweep = time.monotonic() + IDLE_SWEEP_EVERY
                    await self.expire_idle(await self.store.suites())
                await self.ci_tick()
                await self.evaluator.evaluate(await self.store.suites())
            except REDIS_ERRORS as exc:
                self._redis_logs["ci"].emit(logging.WARNING, "ci_tick_failed", error=describe(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    stop.wait(), max(0.0, interval - (time.monotonic() - started))
                )

    async def _heartbeat_loop(self, stop: asyncio.Event) -> None:
        ttl = self.config.daemon.heartbeat_ttl
        while not stop.is_set():
            since = self.health.since
            try:
                await self.store.heartbeat(
                    self.instance,
                    ttl,
                    {
                        "at": time.time(),
                        "pid": os.getpid(),
                        "started_at": self.started_at,
                        "committed_events": self.committed_events,
                        "paused_since": since,
                        "redis_error": self.health.reason if since is not None else None,
                        "mqtt": self.mqtt_watch.info() if self.config.mqtt.enabled else None,
                        # Keeps to the stored dedup layout: see dedup.py.
                        dedup.HEARTBEAT_FIELD: 1,
                    },
                )
            except REDIS_ERRORS as exc:
                self.health.failed("heartbeat", exc)
                self._redis_logs["heartbeat"].emit(
                    logging.WARNING, "heartbeat_failed", error=describe(exc)
                )
                wait = min(1.0, ttl / 3)  # notice the recovery soon
            else:
                self.health.ok("heartbeat")
                wait = ttl / 3
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)

    async def run(self, stop: asyncio.Event) -> None:
        """Run until stop is set, then stop intake, finish the batch in flight, exit.

        Raises ConfigError (the only error that ends it early).
        """
        cfg = self.config
        intake_stop = asyncio.Event()
        emit(logging.INFO, "started", instance=self.instance)
        try:
            async with asyncio.TaskGroup() as tg:
                sources: list[asyncio.Task[None]] = []
                if cfg.mqtt.enabled:
                    consume = partial(
                        mqtt.consume,
                        cfg.mqtt,
                        self.decode,
                        self.commit_decoded,
                        intake_stop,
                        max_batch=cfg.ingest.max_batch,
                        max_payload=cfg.ingest.max_payload,
                        subscribed=self.subscribed,
                        watch=self.mqtt_watch,
                    )
                    sources.append(
                        tg.create_task(
                            supervise("mqtt-consumer", consume, intake_stop), name="mqtt-consumer"
                        )
                    )
                if cfg.stream.enabled:
                    read = partial(
                        streams.consume,
                        self.store,
                        cfg.stream,
                        self.instance,
                        self.commit,
                        intake_stop,
                        max_batch=cfg.ingest.max_batch,
                    )
                    sources.append(
                        tg.create_task(
                            supervise("stream-consumer", read, intake_stop), name="stream-consumer"
                        )
                    )
                loops: dict[str, Callable[[], Awaitable[None]]] = {
                    "live": partial(self._live_loop, stop),
                    "ci": partial(self._ci_loop, stop),
                    "heartbeat": partial(self._heartbeat_loop, stop),
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
                raise _first_leaf(config_errors) from group
            raise
        finally:
            intake_stop.set()
            stop.set()
            await self.outbox.close()
            await self.http.close()
            emit(logging.INFO, "stopped", committed_events=self.committed_events)


def _first_leaf(group: BaseExceptionGroup[ConfigError]) -> ConfigError:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


async def main(config: Config) -> int:
    """Run a daemon with SIGTERM / SIGINT handlers on the running loop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    daemon = Daemon(config)
    try:
        await daemon.run(stop)
    except ConfigError as exc:
        emit(logging.ERROR, "config_error", error=exc)
        return exc.exit_code
    finally:
        await daemon.store.client.aclose()
    return 0


async def check(config: Config) -> int:
    """0 when this instance's heartbeat is fresh and its ingest is not paused, 1 otherwise."""
    store = Store(
        connect(config.redis.url, cluster=config.redis.cluster, timeout=3.0), config.redis.prefix
    )
    try:
        return await _check(config, store)
    except REDIS_ERRORS as exc:
        print(f"unhealthy: Redis unusable, ingest paused: {describe(exc)}")
        return 1
    finally:
        await store.client.aclose()


async def _check(config: Config, store: Store) -> int:
    instance = config.instance
    # A small write first: under OOM, READONLY or BUSY the daemon's ingest is
    # paused and it cannot even write its heartbeat; this names the reason.
    await store.probe_write(instance)
    info = await store.heartbeat_info(instance)
    age = None if info is None else max(0.0, time.time() - float(info.get("at", 0.0)))
    if info is None or age is None or age > config.daemon.heartbeat_ttl:
        print(f"unhealthy: no fresh heartbeat for instance {instance!r}")
        return 1
    if info.get("paused_since") is not None:
        paused = time.time() - float(info["paused_since"])
        print(
            f"unhealthy: instance {instance!r} has paused ingest for {paused:.0f} s: "
            f"{info.get('redis_error')}"
        )
        return 1
    print(f"healthy: instance {instance!r} beat {age:.1f} s ago")
    for line in _mqtt_notes(info.get("mqtt"), config.mqtt.client_id):
        print(line)
    return 0


def _mqtt_notes(watch: object, client_id: str) -> list[str]:
    """What ``check`` says of the broker session, from the heartbeat's ``mqtt`` part."""
    if not isinstance(watch, dict):
        return []
    notes = []
    lost, taken = watch.get("sessions_lost") or 0, watch.get("takeovers") or 0
    if lost:
        notes.append(
            f"warning: the broker had lost this instance's MQTT session on {lost} reconnect(s), "
            f"last {_ago(watch.get('session_lost_at'))}: the QoS 1 messages it had queued are "
            "gone (check the broker's persistence and mqtt.session_expiry)"
        )
    if taken:
        notes.append(
            f"warning: the MQTT session of client id {client_id!r} was taken over {taken} "
            f"time(s), last {_ago(watch.get('taken_over_at'))}: another client connects with "
            "this mqtt.client_id"
        )
    return notes


def _ago(at: object) -> str:
    return f"{time.time() - at:.0f} s ago" if isinstance(at, int | float) else "at an unknown time"
