"""What the daemon computes from committed state: live values, snapshots, the CI tick.

After a commit the suite's point estimates are refreshed within
``LIVE_INTERVAL``. The same commit marks the suite changed in Redis; every
``ci_interval`` a replica claims marked suites, computes their CIs, lottery
cases and snapshot, and drops its claim (a replica that dies holding a claim
loses nothing: the claim expires back into the marks). Then the evaluator
judges every rule on the newest snapshot in Redis.

A snapshot records the fingerprint of the settings it was computed under
(``fingerprint``); at start-up and every ``RECONCILE_EVERY`` the suites whose
snapshot lags their data or was computed under other settings (a new k, a new
rule, another interval) are marked, so a changed config is judged on the data
already stored. Replicas with different configs during a rolling change each
recompute such a suite once per reconcile until they agree.

A series is a suite as a whole or one slice of it (``store.Series``): each
slice is one more series to recompute when its mark says it changed, with
the suite's settings, its own lottery cases and snapshot, and the rule views
of the rules with ``slices = true`` (``alerting.rules.for_slice``). Live
values between ticks are the wholes' only.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import hashlib
import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from functools import partial

import msgspec
import redis.exceptions

from reliabilityd.alerting import rulestate
from reliabilityd.alerting.evaluator import Evaluator
from reliabilityd.alerting.notify import parse_time
from reliabilityd.alerting.publisher import Publisher
from reliabilityd.alerting.rules import Rule, for_slice
from reliabilityd.alerting.watchdog import describe
from reliabilityd.config import Config
from reliabilityd.daemon.metrics import Metrics
from reliabilityd.logs import RateLimited, emit, kv, log
from reliabilityd.stats import snapshot
from reliabilityd.stats.lottery import ranked_cell_groups
from reliabilityd.store import Series, Store

__all__ = ["Recompute"]

LIVE_INTERVAL = 0.2
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
# Idle tasks are looked for this often (at most 500 per suite per sweep).
IDLE_SWEEP_EVERY = 10.0


class Recompute:
    """Live values after commits, snapshots on the CI tick, and the rules' evaluation."""

    def __init__(
        self,
        config: Config,
        store: Store,
        *,
        rules: Sequence[Rule],
        evaluator: Evaluator,
        metrics: Metrics,
        publisher: Publisher | None,
    ) -> None:
        self.config = config
        self.store = store
        self.rules = list(rules)
        self.evaluator = evaluator
        self.metrics = metrics
        self.publisher = publisher
        self._live_dirty: set[str] = set()
        self._live_wake = asyncio.Event()
        self._redis_logs: dict[str, RateLimited] = defaultdict(RateLimited)
        self._no_window_log = RateLimited(3600.0)
        self._next_reconcile = 0.0
        self._next_idle_sweep = 0.0
        self._unfinished: set[str] = set()

    def committed(self, suites: Sequence[str]) -> None:
        """These suites' live values are due (called after every commit)."""
        self._live_dirty.update(suites)
        self._live_wake.set()

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

    def fingerprint(self, suite: str) -> str:
        """What the suite's snapshot is computed under, as a short digest.

        The stats settings (ks, window, interval, ...), the lottery's k and
        limit, and every rule that watches the suite. A stored snapshot with
        another fingerprint is stale (``Snapshots.mark_stale``): a config
        change is judged on the data already stored.
        """
        doc = msgspec.json.encode(
            [
                self.settings(suite),
                max(self.config.stats.k),
                self.config.stats.lottery_limit,
                [r for r in self.rules if fnmatch.fnmatchcase(suite, r.suite)],
            ]
        )
        return hashlib.sha256(doc).hexdigest()[:16]

    async def refresh_live(self, suite: str) -> None:
        """Point estimates and counters of the suite's current version, no CI."""
        state = await self.store.reads.read_state(suite)
        c = state.counters
        estimates = snapshot.point_estimates(state.hist, self.settings(suite))
        values: dict[str, str | int] = {
            **snapshot.counter_fields(state.hist.tasks, c.trials, c.errors, c.skips, c.duplicates),
            "live_updated_at": snapshot.rfc3339(time.time()),
            **snapshot.value_fields(estimates),
        }
        await self.store.snapshots.write_snapshot(suite, c.version, {}, values)

    def series_rules(self, series: Series) -> list[Rule]:
        """The rules that judge a series: the suite's, or a slice's (``slices = true``)."""
        rules = [r for r in self.rules if fnmatch.fnmatchcase(series.suite, r.suite)]
        if series.slice is None:
            return rules
        return [for_slice(r, series.slice) for r in rules if r.slices]

    async def refresh_snapshot(
        self, suite: str, slice: str | None = None
    ) -> snapshot.Snapshot | None:
        """CIs, lottery cases, rule views and the whole snapshot of a series.

        None if a newer one is stored, or when ``slice`` names a slice the
        suite does not have (its events overflowed the most slices).
        """
        series = Series(suite, slice)
        rules = self.series_rules(series)
        settings = self.settings(suite)
        watched = any(r.trigger == "detector" for r in rules)
        detector = settings.window > 0 and watched
        if watched and not detector:
            self._no_window_log.emit(logging.WARNING, "detector_without_window", suite=suite)
        state = await self.store.reads.read_state(suite, windows=detector, slice=slice)
        if slice is not None and state.counters.version == 0:
            return None
        previous = await self.evaluator.newest_snapshot(suite, slice) if rules else None
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
        rows = await self.store.reads.lottery_rows(suite, groups, limit, slice=slice)
        slices = 0 if slice is not None else len(await self.store.reads.slices(suite))
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
            slice=slice,
            slice_overflow=c.slice_overflow,
            slices=slices,
        )
        ci, values = snapshot.redis_fields(snap)
        wrote_ci, _ = await self.store.snapshots.write_snapshot(
            suite, c.version, ci, values, settings=self.fingerprint(suite), slice=slice
        )
        if not wrote_ci:
            return None
        if self.publisher is not None:
            # A slice's snapshot one level under its suite's: <topic>/<suite>/<slice id>.
            topic = f"{self.config.mqtt.snapshot_topic}/{suite}"
            if slice is not None:
                topic += f"/{slice}"
            self.publisher.publish(topic, msgspec.json.encode(snap))
        return snap

    async def ci_tick(self) -> list[str]:
        """New snapshots for the series this replica claims; returns their marks.

        Claims batch after batch while marks remain, for at most
        ``TICK_SHARE`` of a ``ci_interval``: a burst of changed suites drains
        in one tick, and the evaluator still runs every interval.
        """
        if time.monotonic() >= self._next_reconcile:
            # The first tick (start-up) and every RECONCILE_EVERY after: data
            # the marks missed, and snapshots computed under other settings.
            await self.store.snapshots.mark_stale(await self.store.reads.suites(), self.fingerprint)
            self._next_reconcile = time.monotonic() + RECONCILE_EVERY
        if self._unfinished:
            # Claims a Redis error interrupted: hand them back now rather than
            # when they expire.
            await self.store.snapshots.mark_changed(sorted(self._unfinished))
            await self.store.snapshots.release_claims(sorted(self._unfinished))
            self._unfinished.clear()
        deadline = time.monotonic() + TICK_SHARE * self.config.stats.ci_interval
        done: list[str] = []
        lanes = asyncio.Semaphore(RECOMPUTE_LANES)

        async def recompute(member: str) -> None:
            async with lanes:
                await self._recompute(Series.of_member(member))

        while True:
            claimed = await self.store.snapshots.claim_changed(CLAIM_BATCH, CLAIM_LIFETIME)
            # A few suites at once: one's Redis round trips overlap another's
            # math (numpy releases the GIL in the worker threads).
            results = await asyncio.gather(
                *(recompute(suite) for suite in claimed), return_exceptions=True
            )
            failed = [(s, r) for s, r in zip(claimed, results, strict=True) if r is not None]
            if failed:
                # Only Redis errors reach here (_recompute logs the rest).
                self._unfinished.update(s for s, _ in failed)
                await self.store.snapshots.release_claims(
                    [s for s in claimed if s not in self._unfinished]
                )
                raise failed[0][1]
            # One write for the batch's claims (each write waits for the AOF fsync).
            await self.store.snapshots.release_claims(claimed)
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
                left = await self.store.admin.expire_idle(suite, now - idle)
                if left:
                    emit(logging.INFO, "tasks_expired", suite=suite, tasks=left, idle_s=idle)
                gone += left
        return gone

    async def _recompute(self, series: Series) -> None:
        try:
            await self.refresh_snapshot(series.suite, series.slice)
        except REDIS_ERRORS:
            raise
        except Exception:
            # One series' failure must not stop the others or ingest:
            # marked again, it is retried on the next tick.
            log.exception("%s", kv("snapshot_failed", suite=series.label))
            await self.store.snapshots.mark_changed([series])

    async def live_loop(self, stop: asyncio.Event) -> None:
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

    async def ci_loop(self, stop: asyncio.Event) -> None:
        interval = self.config.stats.ci_interval
        while not stop.is_set():
            started = time.monotonic()
            try:
                if time.monotonic() >= self._next_idle_sweep:
                    self._next_idle_sweep = time.monotonic() + IDLE_SWEEP_EVERY
                    await self.expire_idle(await self.store.reads.suites())
                await self.ci_tick()
                await self.evaluator.evaluate(await self.store.reads.suites())
            except REDIS_ERRORS as exc:
                self._redis_logs["ci"].emit(logging.WARNING, "ci_tick_failed", error=describe(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    stop.wait(), max(0.0, interval - (time.monotonic() - started))
                )
