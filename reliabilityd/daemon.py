"""The daemon: the one module that wires sources, store, statistics and sinks.

Data flows one way: messages -> decode -> one Lua call per suite batch ->
acknowledge. After a commit the suite's point estimates are refreshed within
``LIVE_INTERVAL``; every ``ci_interval`` the suites whose version moved past
their snapshot get CIs, lottery cases and a new snapshot. Everything that
must survive a crash (counts, versions, snapshots) is in Redis; the only
in-memory state is which suites to refresh soonest, and losing it costs at
most one ``ci_interval`` of staleness, because the version comparison finds
every stale suite again.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
import os
import signal
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TypeVar

import msgspec
import redis.exceptions

from reliabilityd import mqtt, snapshot, streams, web  # [http] web
from reliabilityd.alerts import Observation, step
from reliabilityd.config import Config
from reliabilityd.events import Rejected, TrialEvent, decode
from reliabilityd.logs import RateLimited, emit, kv, log
from reliabilityd.lottery import ranked_cell_groups
from reliabilityd.metrics import Metrics  # [http] metrics
from reliabilityd.notify import Notifier, parse_time
from reliabilityd.store import Applied, Store, connect

T = TypeVar("T")
LIVE_INTERVAL = 0.2
SHUTDOWN_GRACE = 4.0
REDIS_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


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
        self.publisher = (
            mqtt.Publisher(config.mqtt, f"{config.mqtt.client_id}-pub-{os.getpid()}")
            if config.mqtt.enabled
            else None
        )
        self.rules = config.rules()
        self.notifier = Notifier(config, self.store, self.publisher, self.instance)
        self._snapshots: dict[str, snapshot.Snapshot] = {}
        self.committed_events = 0
        # Set once the MQTT subscription is confirmed (for tests and tools).
        self.subscribed = asyncio.Event()
        self.started_at = time.time()
        # [http] What web.py and metrics.py read: see the Backend block below.
        self.paused = False
        self.last_commit_at = self.started_at
        self.http_listening = asyncio.Event()
        self.metrics = Metrics(
            sinks=self.notifier.sinks,
            is_paused=self.is_paused,
            last_commit_at=lambda: self.last_commit_at,
        )
        self.notifier.sinks = self.metrics.count_sink_failures(self.notifier.sinks)

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
        )

    # --- ingest -----------------------------------------------------------

    async def _retry(self, what: str, op: Callable[[], Awaitable[T]]) -> T:
        """Run a Redis operation until it succeeds; cancellation stops the retries."""
        backoff = 0.1
        while True:
            try:
                result = await op()
                self.paused = False  # [http] metrics
                return result
            except REDIS_ERRORS as exc:
                self.paused = True  # [http] metrics
                emit(logging.WARNING, "redis_unavailable", during=what, error=exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def commit(self, payloads: Sequence[tuple[bytes, str]]) -> None:
        """Decode, dead-letter the bad, apply the good; returns once Redis has it all."""
        by_suite: dict[str, list[TrialEvent]] = defaultdict(list)
        rejected: list[tuple[Rejected, str]] = []
        for payload, source in payloads:
            good, bad = decode(payload, self.config.ingest.max_payload)
            for event in good:
                by_suite[event.suite].append(event)
            rejected.extend((item, source) for item in bad)
        await self._commit_decoded(by_suite, rejected, retry=True)

    async def _once(self, what: str, op: Callable[[], Awaitable[T]]) -> T:  # [http]
        return await op()

    async def _commit_decoded(  # [http] split out of commit for ingest()
        self,
        by_suite: dict[str, list[TrialEvent]],
        rejected: list[tuple[Rejected, str]],
        *,
        retry: bool,
    ) -> list[Applied]:
        run = self._retry if retry else self._once
        if rejected:
            await run(
                "deadletter",
                partial(
                    self.store.deadletter, rejected, maxlen=self.config.store.deadletter_maxlen
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
            self.metrics.deadlettered(source for _, source in rejected)  # [http] metrics
        if not by_suite:
            return []
        windows = {suite: self.config.suite_settings(suite)[0] for suite in by_suite}
        started = time.monotonic()  # [http] metrics
        applied = await run(
            "apply",
            partial(self.store.apply, by_suite, windows=windows, dedup_ttl=self.config.dedup_ttl),
        )
        self.metrics.committed(applied, time.monotonic() - started)  # [http] metrics
        self.last_commit_at = time.time()  # [http] metrics
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

    async def refresh_snapshot(self, suite: str) -> snapshot.Snapshot | None:
        """CIs, lottery cases and the whole snapshot; None if a newer one is stored."""
        state = await self.store.read_state(suite)
        settings = self.settings(suite)
        with self.metrics.ci_seconds.time():  # [http] metrics
            estimates = await asyncio.to_thread(snapshot.full_estimates, state.hist, settings)
        lottery_k = max(self.config.stats.k)
        limit = self.config.stats.lottery_limit
        groups = ranked_cell_groups(state.hist.at_least(lottery_k), lottery_k, limit)
        rows = await self.store.lottery_rows(suite, groups, limit)
        c = state.counters
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
            now=time.time(),
            last_trial_at=c.last_trial_at,
        )
        ci, values = snapshot.redis_fields(snap)
        wrote_ci, _ = await self.store.write_snapshot(suite, c.version, ci, values)
        if not wrote_ci:
            self._snapshots.pop(suite, None)  # a newer one is stored: read it when needed
            return None
        self._snapshots[suite] = snap
        if self.publisher is not None:
            self.publisher.publish(
                f"{self.config.mqtt.snapshot_topic}/{suite}", msgspec.json.encode(snap)
            )
        return snap

    async def ci_tick(self, suites: Sequence[str]) -> None:
        """New snapshots for the suites whose data moved past their snapshot."""
        versions = await self.store.versions(suites)
        for suite, (data_version, snap_version) in zip(suites, versions, strict=True):
            if data_version > snap_version:
                try:
                    await self.refresh_snapshot(suite)
                except REDIS_ERRORS:
                    raise
                except Exception:
                    # One suite's failure must not stop the others or ingest;
                    # its version stays ahead, so the next tick tries again.
                    log.exception("%s", kv("snapshot_failed", suite=suite))

    # --- alerts -----------------------------------------------------------

    async def _snapshot_for(self, suite: str) -> snapshot.Snapshot | None:
        snap = self._snapshots.get(suite)
        if snap is None:
            raw = await self.store.snapshot_json(suite)
            if raw is None:
                return None
            try:
                snap = msgspec.json.decode(raw, type=snapshot.Snapshot)
            except msgspec.ValidationError:
                return None  # written by another schema version; wait for ours
            self._snapshots[suite] = snap
        return snap

    async def evaluate_alerts(self, suites: Sequence[str]) -> None:
        """Step every (suite, rule) pair against the suite's latest snapshot."""
        if not self.rules:
            return
        now = time.time()
        pairs = [(s, r) for s in suites for r in self.rules if fnmatch.fnmatchcase(s, r.suite)]
        states = await self.store.alert_states([(s, r.name) for s, r in pairs])
        sinks = list(self.notifier.sinks)
        for (suite, rule), stored_state in zip(pairs, states, strict=True):
            snap = await self._snapshot_for(suite)
            est = None if snap is None else snap.estimate(rule.metric, rule.k)
            if snap is None or est is None:
                continue  # no snapshot with this k yet: no verdict
            obs = Observation(
                value=est.value,
                ci_low=est.ci_low,
                ci_high=est.ci_high,
                tasks=est.tasks,
                runs=est.runs,
                last_trial_at=parse_time(snap.last_trial_at),
            )
            note_for = partial(
                self.notifier.build, rule=rule, suite=suite, estimate=est, snap=snap, now=now
            )
            current = stored_state
            t = step(rule, current, obs, now)
            if t.new != current:
                new = msgspec.structs.replace(t.new, seq=current.seq + 1)
                note = None
                if t.notify is not None:
                    note = note_for(state=new, repeat=t.notify == "repeat")
                payload = None if note is None else msgspec.json.encode(note)
                if await self.store.alert_cas(
                    suite,
                    rule.name,
                    expected=current,
                    new=t.new,
                    notification=payload,
                    sinks=sinks,
                ):
                    current = new
                    if note is not None:
                        emit(
                            logging.WARNING if new.state == "firing" else logging.INFO,
                            "alert",
                            rule=rule.name,
                            suite=suite,
                            state=new.state,
                            reason=new.reason,
                            ci_low=est.ci_low,
                        )
                        for sink in sinks:
                            self.notifier.kick(suite, rule.name, sink)
            if current.state == "firing" and t.notify is None:
                self.notifier.resend_firing(
                    suite, rule.name, partial(note_for, state=current, repeat=True)
                )
        # Outboxes left by a daemon that died mid-delivery, or by a sink that was down.
        triples = [(s, r.name, sink) for s, r in pairs for sink in sinks]
        for triple, length in zip(triples, await self.store.outbox_lengths(triples), strict=True):
            if length:
                self.notifier.kick(*triple)

    # --- [http] web.Backend: what the HTTP port and /metrics read ----------

    def is_paused(self) -> bool:
        return self.paused

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
        await self.metrics.refresh(self.store, self.rules, list(self.notifier.sinks))

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
                    emit(logging.WARNING, "live_refresh_failed", suite=suite, error=exc)
                    self._live_dirty.add(suite)
            await asyncio.sleep(LIVE_INTERVAL)
            if self._live_dirty:
                self._live_wake.set()

    async def _ci_loop(self, stop: asyncio.Event) -> None:
        interval = self.config.stats.ci_interval
        while not stop.is_set():
            started = time.monotonic()
            try:
                suites = await self.store.suites()
                await self.ci_tick(suites)
                await self.evaluate_alerts(suites)
            except REDIS_ERRORS as exc:
                emit(logging.WARNING, "ci_tick_failed", error=exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    stop.wait(), max(0.0, interval - (time.monotonic() - started))
                )

    async def _heartbeat_loop(self, stop: asyncio.Event) -> None:
        ttl = self.config.daemon.heartbeat_ttl
        while not stop.is_set():
            try:
                await self.store.heartbeat(
                    self.instance,
                    ttl,
                    {
                        "at": time.time(),
                        "pid": os.getpid(),
                        "started_at": self.started_at,
                        "committed_events": self.committed_events,
                    },
                )
            except REDIS_ERRORS as exc:
                emit(logging.WARNING, "heartbeat_failed", error=exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), ttl / 3)

    async def run(self, stop: asyncio.Event) -> None:
        """Run until stop is set, then stop intake, finish the batch in flight, exit."""
        cfg = self.config
        intake_stop = asyncio.Event()
        sources: list[asyncio.Task[None]] = []
        if cfg.mqtt.enabled:
            sources.append(
                asyncio.create_task(
                    mqtt.consume(
                        cfg.mqtt,
                        self.commit,
                        intake_stop,
                        max_batch=cfg.ingest.max_batch,
                        subscribed=self.subscribed,
                    ),
                    name="mqtt-consumer",
                )
            )
        if cfg.stream.enabled:
            sources.append(
                asyncio.create_task(
                    streams.consume(
                        self.store.client,
                        cfg.stream,
                        self.instance,
                        self.commit,
                        intake_stop,
                        max_batch=cfg.ingest.max_batch,
                    ),
                    name="stream-consumer",
                )
            )
        background = [
            asyncio.create_task(self._live_loop(stop), name="live"),
            asyncio.create_task(self._ci_loop(stop), name="ci"),
            asyncio.create_task(self._heartbeat_loop(stop), name="heartbeat"),
        ]
        if self.publisher is not None:
            background.append(asyncio.create_task(self.publisher.run(stop), name="publisher"))
        if cfg.http.port:  # [http]
            serving = web.serve(self, cfg.http, cfg.ingest.max_payload, stop, self.http_listening)
            background.append(asyncio.create_task(serving, name="http"))
        emit(logging.INFO, "started", instance=self.instance, sources=len(sources))
        everything = [*sources, *background]
        stopper = asyncio.create_task(stop.wait())
        try:
            done, _ = await asyncio.wait(
                [stopper, *everything], return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                if task is not stopper and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        finally:
            intake_stop.set()
            stop.set()
            # Sources finish the batch in flight (commit, then acknowledge).
            _, late = await asyncio.wait(sources, timeout=SHUTDOWN_GRACE) if sources else ((), ())
            for task in [*late, *background, stopper]:
                task.cancel()
            await asyncio.gather(*everything, stopper, return_exceptions=True)
            await self.notifier.close()
            emit(logging.INFO, "stopped", committed_events=self.committed_events)


async def main(config: Config) -> int:
    """Run a daemon with SIGTERM / SIGINT handlers on the running loop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    daemon = Daemon(config)
    try:
        await daemon.run(stop)
    finally:
        await daemon.store.client.aclose()
    return 0


async def check(config: Config) -> int:
    """0 when this instance's heartbeat is fresh, 1 otherwise."""
    store = Store(
        connect(config.redis.url, cluster=config.redis.cluster, timeout=3.0), config.redis.prefix
    )
    try:
        age = await store.heartbeat_age(config.instance)
    except REDIS_ERRORS as exc:
        print(f"unhealthy: Redis unreachable: {exc}")
        return 1
    finally:
        await store.client.aclose()
    if age is None or age > config.daemon.heartbeat_ttl:
        print(f"unhealthy: no fresh heartbeat for instance {config.instance!r}")
        return 1
    print(f"healthy: instance {config.instance!r} beat {age:.1f} s ago")
    return 0
