"""What the daemon computes from committed state: live values, snapshots, the CI tick.

After a commit the suite's point estimates are refreshed within
``_live.LIVE_INTERVAL``, or, while a tick drains marks, by the tick's
snapshot or right after the tick (the live loop yields to it). The same
commit marks the suite changed in Redis; every ``ci_interval`` a replica
claims marked suites, computes their CIs, lottery cases and snapshot, and
drops its claim (a replica that dies holding a claim loses nothing: the
claim expires back into the marks). Then the evaluator
judges every rule on the newest snapshot in Redis: the snapshots the tick
wrote are handed to it as records (``Tick``), and it reads from Redis only
the rest and those another replica has replaced since.

A snapshot records the fingerprint of the settings it was computed under
(``fingerprint``); at start-up and every ``RECONCILE_EVERY`` the suites whose
snapshot lags their data or was computed under other settings (a new k, a new
rule, another interval) are marked, so a changed config is judged on the data
already stored. Replicas with different configs during a rolling change each
recompute such a suite once per reconcile until they agree.

A series is a suite as a whole or one slice of it (``store.Series``): each
slice is one more series to recompute when its mark says it changed, with
the suite's settings, its own lottery cases and snapshot, and the rule views
of the rules with ``slices = true`` (``rules.for_slice``). Live
values between ticks are the wholes' only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Sequence

import msgspec

from reliabilityd.alerting import registry
from reliabilityd.alerting.evaluator import Evaluator
from reliabilityd.alerting.publisher import Publisher
from reliabilityd.alerting.watchdog import describe
from reliabilityd.config import Config
from reliabilityd.daemon import _build, _series_settings
from reliabilityd.daemon._canary import Canaries
from reliabilityd.daemon._claims import Claims
from reliabilityd.daemon._live import LiveValues
from reliabilityd.daemon._rate import RateStates
from reliabilityd.daemon._rows import RowWriter
from reliabilityd.daemon.metrics import Metrics
from reliabilityd.logs import RateLimited, emit, kv, log
from reliabilityd.rules import Rule
from reliabilityd.stats import history, snapshot
from reliabilityd.stats.estimate import Estimate
from reliabilityd.stats.histogram import Histogram
from reliabilityd.stats.lottery import LotteryCase, ranked_cell_groups, ranked_cell_groups_many
from reliabilityd.store import (
    Series,
    SnapshotWrite,
    Store,
    StoreError,
    SuiteState,
    Undecodable,
    UndecodableLog,
)

__all__ = ["Recompute", "Tick"]

# Every Redis error pauses what needs Redis; none of them ends the daemon.
# A tick claims marks (``_claims``) for at most TICK_SHARE of its interval, and
# computes RECOMPUTE_LANES batches of a claim at once.
TICK_SHARE = 0.8
RECOMPUTE_LANES = 2
# The full version scan that finds what the change marks cannot (see mark_stale).
RECONCILE_EVERY = 60.0
# Idle tasks are looked for this often (at most 500 per suite per sweep).
IDLE_SWEEP_EVERY = 10.0


class Tick(msgspec.Struct, frozen=True):
    """What one CI tick did: the marks it claimed and the snapshots whose write won."""

    marks: list[str]
    # By series: each one was the newest in Redis when it was written.
    snapshots: dict[Series, snapshot.Snapshot]


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
        self._known = _series_settings.Known(config, self.rules)
        # Held for each tick (snapshots, the evaluator, the canaries): a reload
        # hands its config over between two ticks, never within one.
        self.tick = asyncio.Lock()
        self.evaluator = evaluator
        self.metrics = metrics
        self.publisher = publisher
        # Point estimates after each commit, with this replica's settings.
        self.live = LiveValues(store, self.settings)
        self._redis_logs: dict[str, RateLimited] = defaultdict(RateLimited)
        self._no_window_log = RateLimited(3600.0)
        self._undecodable_log = UndecodableLog()
        self._next_reconcile = 0.0
        self._next_idle_sweep = 0.0
        # Which change marks each tick takes, and in what order.
        self.claims = Claims(store)
        # The canary rules' judge, run after each tick on the suites it recomputed.
        self.canaries: Canaries | None = None
        # The summary rows the list-wide reads page through, after the verdicts.
        self.rows = RowWriter(store)
        # The rate rules' states, advanced on each snapshot of their series.
        self.rates = RateStates(store)

    def configure(self, config: Config) -> None:
        """Settings and rules from ``config`` (a reload, between ticks); the next tick
        reconciles every suite with them (``fingerprint``)."""
        self.config = config
        self.rules = config.rules()
        self._known = _series_settings.Known(config, self.rules)
        self._next_reconcile = 0.0

    def ks(self) -> tuple[int, ...]:
        return _series_settings.ks(self.config, self.rules)

    def settings(self, suite: str) -> snapshot.StatsSettings:
        return self._known.settings(suite)

    def fingerprint(self, suite: str) -> str:
        return self._known.fingerprint(suite)

    def series_rules(self, series: Series) -> list[Rule]:
        return self._known.series_rules(series)

    async def refresh_snapshot(
        self, suite: str, slice: str | None = None
    ) -> snapshot.Snapshot | None:
        """CIs, lottery cases, rule views and the whole snapshot of a series.

        None if a newer one is stored, or when ``slice`` names a slice the
        suite does not have (its events overflowed the most slices).
        """
        return (await self.refresh_snapshots([Series(suite, slice)]))[0]

    async def refresh_snapshots(
        self, suites: Sequence[str | Series]
    ) -> list[snapshot.Snapshot | None]:
        """``refresh_snapshot`` of many series: one round trip per step, the math in one pass.

        Each of ``suites`` is a ``Series`` or its change mark (``Series.member``:
        a suite name is its whole). The reads (one script call per series),
        the previous snapshots, the slice counts, the lottery ranges and the
        writes (one script call per series) each go in one pipeline; the
        estimates of every series come from one vectorised pass in a worker
        thread. A series whose computation fails is logged and marked changed
        (retried on the next tick) without stopping the others; a Redis error
        propagates.
        """
        if not suites:
            return []
        series = [s if isinstance(s, Series) else Series.of_member(s) for s in suites]
        try:
            read = await self._read(series)
        except StoreError:
            raise
        except Exception:
            # A series whose stored state does not parse: read each alone.
            read = []
            for one in series:
                try:
                    read += await self._read([one])
                except StoreError:
                    raise
                except Exception:
                    log.exception("%s", kv("snapshot_failed", suite=one.label))
                    await self.store.snapshots.mark_changed([one])
        # A slice with no data (not one of the suite's slices) has no snapshot.
        wanted = {
            one: state for one, state in read if one.slice is None or state.counters.version != 0
        }
        done = await self._refresh_read([s for s in series if s in wanted], wanted)
        return [done.get(s) for s in series]

    async def _read(self, series: Sequence[Series]) -> list[tuple[Series, SuiteState]]:
        """Each series' state, with the windows where a detector rule watches it."""
        detector = [self._detector(s) for s in series]
        states = await self.store.reads.read_states(
            [s.suite for s in series], windows=detector, slices=[s.slice for s in series]
        )
        return list(zip(series, states, strict=True))

    def _detector(self, series: Series) -> bool:
        watched = any(r.trigger == "detector" for r in self.series_rules(series))
        detector = self.settings(series.suite).window > 0 and watched
        if watched and not detector:
            self._no_window_log.emit(logging.WARNING, "detector_without_window", suite=series.suite)
        return detector

    async def _refresh_read(
        self, series: Sequence[Series], read: dict[Series, SuiteState]
    ) -> dict[Series, snapshot.Snapshot]:
        """Snapshots of series already read, by series, for those whose CI part was written."""
        if not series:
            return {}
        states = [read[s] for s in series]
        rules = [self.series_rules(s) for s in series]
        settings = [self.settings(s.suite) for s in series]
        ruled = [s for s, rs in zip(series, rules, strict=True) if rs]
        previous = await self._previous(ruled)
        wholes = sorted({s.suite for s in series if s.slice is None})
        slice_ids = await self.store.reads.slices_of(wholes)
        now = time.time()
        started = time.perf_counter()
        inputs = [(state.hist, st) for state, st in zip(states, settings, strict=True)]
        try:
            estimates: list[list[Estimate] | None] = list(
                await asyncio.to_thread(snapshot.full_estimates_many, inputs)
            )
        except Exception:
            # One series' bad data must not cost the others theirs: each alone.
            estimates = [
                await self._alone(s, *pair) for s, pair in zip(series, inputs, strict=True)
            ]
        spent = (time.perf_counter() - started) / len(series)
        for _ in series:
            self.metrics.ci_seconds.observe(spent)
        lottery_k = max(self.config.stats.k)
        limit = self.config.stats.lottery_limit

        def ranked(one: Series, state: SuiteState) -> list[list[tuple[int, int]]] | None:
            try:
                return ranked_cell_groups(state.hist.at_least(lottery_k), lottery_k, limit)
            except Exception:
                log.exception("%s", kv("snapshot_failed", suite=one.label))
                return None

        def ranked_all() -> list[list[list[tuple[int, int]]] | None]:
            try:
                return list(
                    ranked_cell_groups_many(
                        [state.hist.at_least(lottery_k) for state in states], lottery_k, limit
                    )
                )
            except Exception:
                # One series' bad data must not cost the others theirs: each alone.
                return [ranked(one, state) for one, state in zip(series, states, strict=True)]

        # Exact rationals for the ties: CPU, so off the event loop with the math.
        ranking = await asyncio.to_thread(ranked_all)
        for i, order in enumerate(ranking):
            if order is None and estimates[i] is not None:
                estimates[i] = None
                await self.store.snapshots.mark_changed([series[i]])
        groups = [order or [] for order in ranking]
        rows = await self.store.reads.lottery_rows_many(
            [(s.suite, g) for s, g in zip(series, groups, strict=True)],
            limit,
            slices=[s.slice for s in series],
        )
        # The rate rules' states, every series' at once (the reads, one advance off the
        # event loop, the compare-and-sets).
        alarms = await self.rates.advance(
            [
                (one, rules[i], settings[i].window > 0)
                for i, one in enumerate(series)
                if estimates[i] is not None
            ],
            now=now,
        )
        alarms_of = iter(alarms)
        snaps: list[snapshot.Snapshot | None] = []
        for i, one in enumerate(series):
            est = estimates[i]
            snaps.append(
                None
                if est is None
                else await self._built(
                    one,
                    state=states[i],
                    settings=settings[i],
                    rules=rules[i],
                    previous=previous.get(one),
                    estimates=est,
                    rows=rows[i],
                    now=now,
                    slices=0 if one.slice is not None else len(slice_ids.get(one.suite, [])),
                    alarms=next(alarms_of),
                )
            )
        writes: list[SnapshotWrite] = []
        for one, snap, est in zip(series, snaps, estimates, strict=True):
            if snap is not None and est is not None:
                ci, values = snapshot.redis_fields(snap)
                writes.append(
                    SnapshotWrite(
                        one.suite,
                        snap.version,
                        ci,
                        values,
                        settings=self.fingerprint(one.suite),
                        point=history.point_of(est, now),
                        slice=one.slice,
                    )
                )
        wrote = iter(await self.store.snapshots.write_snapshots(writes))
        out: dict[Series, snapshot.Snapshot] = {}
        for one, snap in zip(series, snaps, strict=True):
            if snap is None or not next(wrote)[0]:
                continue
            if self.publisher is not None:
                # A slice's snapshot one level under its suite's: <topic>/<suite>/<slice id>.
                topic = f"{self.config.mqtt.snapshot_topic}/{one.suite}"
                if one.slice is not None:
                    topic += f"/{one.slice}"
                self.publisher.publish(topic, msgspec.json.encode(snap))
            out[one] = snap
        return out

    async def _previous(self, series: Sequence[Series]) -> dict[Series, snapshot.Snapshot]:
        """The stored snapshot of each series (its pace is measured from it), where readable.

        One that does not decode is logged and counts as absent: this tick's
        write replaces it.
        """
        out: dict[Series, snapshot.Snapshot] = {}
        for one, doc in zip(series, await self.store.snapshots.documents(series), strict=True):
            if isinstance(doc, Undecodable):
                self._undecodable_log.note(doc)
            elif doc is not None:
                out[one] = doc
        return out

    async def _alone(
        self, series: Series, hist: Histogram, settings: snapshot.StatsSettings
    ) -> list[Estimate] | None:
        """One series' estimates by themselves; None (logged, marked changed) when they fail."""
        try:
            return await asyncio.to_thread(snapshot.full_estimates, hist, settings)
        except Exception:
            log.exception("%s", kv("snapshot_failed", suite=series.label))
            await self.store.snapshots.mark_changed([series])
            return None

    async def _built(
        self,
        series: Series,
        *,
        state: SuiteState,
        settings: snapshot.StatsSettings,
        rules: list[Rule],
        previous: snapshot.Snapshot | None,
        estimates: list[Estimate],
        rows: list[LotteryCase],
        now: float,
        slices: int = 0,
        alarms: dict[str, float | None] | None = None,
    ) -> snapshot.Snapshot | None:
        """The series' snapshot from its computed parts; None (logged, marked) when it fails.

        ``slices``: how many slices a suite as a whole has (0 for a slice).
        """
        try:
            return await _build.snapshot_of(
                series,
                state=state,
                settings=settings,
                rules=rules,
                previous=previous,
                estimates=estimates,
                rows=rows,
                now=now,
                slices=slices,
                lottery_k=max(self.config.stats.k),
                alarms=alarms,
            )
        except Exception:
            log.exception("%s", kv("snapshot_failed", suite=series.label))
            await self.store.snapshots.mark_changed([series])
            return None

    async def ci_tick(self) -> Tick:
        """New snapshots for the series this replica claims: their marks, and the snapshots
        whose write won.

        Claims batch after batch while marks remain (``_claims``: the marks there
        when it begins first), for at most ``TICK_SHARE`` of a ``ci_interval``: a
        burst of changed suites drains in one tick, and the evaluator still runs
        every interval.
        """
        if time.monotonic() >= self._next_reconcile:
            # The first tick (start-up) and every RECONCILE_EVERY after: data
            # the marks missed, and snapshots computed under other settings.
            await self.store.snapshots.mark_stale(await self.store.reads.suites(), self.fingerprint)
            self._next_reconcile = time.monotonic() + RECONCILE_EVERY
        await self.claims.hand_back()
        deadline = time.monotonic() + TICK_SHARE * self.config.stats.ci_interval
        wrote: dict[Series, snapshot.Snapshot] = {}
        lanes = asyncio.Semaphore(RECOMPUTE_LANES)

        async def recompute(batch: list[str]) -> None:
            # Two batches at once: one's Redis round trips overlap the other's math
            # (numpy releases the GIL in the worker thread). Only Redis errors leave
            # here (refresh_snapshots logs the rest).
            async with lanes:
                snaps = await self.refresh_snapshots(batch)
            for mark, snap in zip(batch, snaps, strict=True):
                if snap is not None:
                    wrote[Series.of_member(mark)] = snap

        # The live loop yields while the marks drain: what the tick writes needs no
        # live refresh, and the rest waits for the tick to end (``_live``).
        with self.live.yielding():
            try:
                return Tick(await self.claims.drain(deadline, recompute), wrote)
            finally:
                self.live.written(
                    {one.suite: snap.version for one, snap in wrote.items() if one.slice is None}
                )

    async def expire_idle(self, suites: Sequence[str]) -> int:
        """Retire the tasks of suites with an idle expiry that had no event for that long."""
        now = time.time()
        gone = 0
        for suite in suites:
            idle = self.config.idle_expiry(suite)
            if idle > 0:
                left = await self.store.admin.expire_idle(
                    suite, now - idle, recent=self.config.recent(suite)
                )
                if left:
                    emit(logging.INFO, "tasks_expired", suite=suite, tasks=left, idle_s=idle)
                gone += left
        return gone

    async def ci_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            async with self.tick:
                try:
                    await self._tick()
                except StoreError as exc:
                    self._redis_logs["ci"].emit(
                        logging.WARNING, "ci_tick_failed", error=describe(exc)
                    )
                interval = self.config.stats.ci_interval
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    stop.wait(), max(0.0, interval - (time.monotonic() - started))
                )

    async def _tick(self) -> None:
        """The idle sweep when due, the snapshots, the rules' and the canaries' verdicts, then
        the summary rows (``_rows``)."""
        if time.monotonic() >= self._next_idle_sweep:
            self._next_idle_sweep = time.monotonic() + IDLE_SWEEP_EVERY
            await self.expire_idle(await self.store.reads.suites())
        tick = await self.ci_tick()
        suites = await self.store.reads.suites()
        # One read of the registry's watches for the verdicts and the rows.
        watches = await registry.watched(self.store, self.config.alerts, suites)
        # The tick's own snapshots go to the evaluator as records, not back through Redis.
        settled = await self.evaluator.evaluate(suites, tick.snapshots, watches)
        if self.canaries is not None:
            changed = sorted({Series.of_member(m).suite for m in tick.marks})
            settled |= await self.canaries.judge(changed, watches)
        # The rows carry the states just decided, as the verdicts left them: written
        # after the verdicts, reading again only the states a verdict does not know.
        await self.rows.write(self.config, suites, tick.snapshots, watches, settled)
        self.metrics.evaluations.inc()
