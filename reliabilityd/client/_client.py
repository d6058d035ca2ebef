"""Reading (and administering) reliabilityd's numbers from Python, without the key schema.

``AsyncClient`` is for asyncio code; ``Client`` is the same API for plain
code, notebooks included (it runs its own event loop in a thread, so it
works where a loop is already running). Both read what the daemon committed
to Redis; ``estimate`` computes any k on demand from the stored histogram,
not only the configured ones.

Without a URL both find Redis as every command does (``reliabilityd.locate``):
``$RELIABILITYD_REDIS_URL``, else the embedded daemon running on the default
data directory, else ``redis://127.0.0.1:6379/0``; ``where`` says which and
how, and a Redis that cannot be reached raises ``StoreUnavailable`` with both
in its message; every Redis failure is a ``StoreError`` (``reliabilityd.store``).

    from reliabilityd import Client
    with Client() as rel:                  # the Redis the CLI would ask (reliabilityd.locate)
        rel.suites()                       # ['deploy-bot', ...]
        rel.snapshot("deploy-bot")         # the daemon's last Snapshot, or None
                                           # (UndecodableError: another version wrote it)
        rel.history("deploy-bot", since=t) # estimates over time and alert transitions
        rel.estimate("deploy-bot", 8)      # pass^8 with its CI, computed now
        rel.compare("bot-v1", "bot-v2", 5) # paired candidate - baseline over shared tasks
        rel.slices("deploy-bot")           # ['agent_version=1.4', 'agent_version=1.5']
        rel.snapshot("deploy-bot", slice="agent_version=1.5")
        rel.compare(Side("deploy-bot", {"agent_version": "1.4"}),
                    Side("deploy-bot", {"agent_version": "1.5"}), 5)
        rel.alerts(config.alerts, "deploy-bot")   # every rule watching it, with its state
        rel.trials("deploy-bot", "deploy service 0")  # its last trials, newest first, linked
        rel.trials("deploy-bot", failed=True)         # the suite's last failures
        rel.runs("gsm8k@openai_gpt-4o")               # its runs, newest first
        rel.compare(Side(s, run="a1"), Side(s, run="b2"), 5)  # one run against another
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Concatenate, ParamSpec, Self, TypeVar, Unpack

import msgspec

from reliabilityd import locate
from reliabilityd.alerting import registry
from reliabilityd.alerting.registry import RuleStatus
from reliabilityd.client._bridge import LoopThread
from reliabilityd.client._errors import UndecodableError
from reliabilityd.locate import Located, unreachable
from reliabilityd.rules import AlertState, CanaryRule, Rule
from reliabilityd.stats.compare import CompareOptions, Comparison, Side, compare
from reliabilityd.stats.estimate import Estimate, EstimateOptions, estimate
from reliabilityd.stats.estimators import Metric
from reliabilityd.stats.histogram import Histogram
from reliabilityd.stats.history import History
from reliabilityd.stats.lottery import LotteryCase, ranked_cell_groups
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import (
    DEFAULT_RUNS,
    Counters,
    Recent,
    RowPage,
    RunSummary,
    Series,
    Store,
    StoreUnavailable,
    TrialRecord,
    Undecodable,
    connect,
    linked,
)


class SuiteSummary(msgspec.Struct, frozen=True):
    """What ``status`` shows for one suite or slice: its counters and the last snapshot.

    ``snapshot`` is None before the first one and ``Undecodable`` (its key and
    the decode error) when the stored one was written by another version or
    damaged: the counters are still there. A suite's summary also lists its
    slice ids and the label keys its events carry; a slice's names the slice
    (``slice``).
    """

    suite: str
    tasks: int
    counters: Counters
    snapshot: Snapshot | Undecodable | None
    slice: str | None = None
    slices: list[str] = msgspec.field(default_factory=list)
    labels_seen: list[str] = msgspec.field(default_factory=list)


P = ParamSpec("P")
R = TypeVar("R")


def _naming_redis(
    method: Callable[Concatenate[AsyncClient, P], Awaitable[R]],
) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, R]]:
    """A read whose unreachable Redis is named, with how it was found, in the error."""

    @functools.wraps(method)
    async def named(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await method(self, *args, **kwargs)
        except StoreUnavailable as exc:
            # The same class (StoreTimeout stays one), so callers' handlers still match.
            raise type(exc)(unreachable("Redis", self.where, exc)) from exc

    return named


class AsyncClient:
    """Typed reads of the suites, snapshots and histograms in Redis.

    ``redis_url`` None finds Redis as the commands do (``reliabilityd.locate``);
    a ``Located`` (``locate.redis(...)``) carries how it was found into messages.
    """

    def __init__(
        self,
        redis_url: str | Located | None = None,
        *,
        prefix: str = "rel",
        cluster: bool = False,
        timeout: float = 10.0,
    ) -> None:
        self.where = locate.redis(redis_url, given_as="given to the client")
        try:
            client = connect(self.where.url, cluster=cluster, timeout=timeout)
        except ValueError as exc:  # a URL redis-py cannot use
            raise ValueError(f"{self.where}: {exc}") from None
        self.store = Store(client, prefix)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.store.client.aclose()

    @_naming_redis
    async def suites(self) -> list[str]:
        """Every suite that has received an event, sorted by name."""
        return await self.store.reads.suites()

    @_naming_redis
    async def rows(
        self,
        *,
        page: int = 1,
        state: str | None = None,
        prefix: str = "",
        contains: str = "",
        page_size: int = 100,
    ) -> RowPage:
        """A page of the suites' summary rows, by name, as the web index shows them: in
        ``state`` (one of ``ROW_STATES``; "none" for suites no rule watches), whose names
        start with ``prefix`` and hold ``contains``. A row is None for a suite without a
        snapshot yet. A few round trips whatever the number of suites (``store.rows``)."""
        if page < 1:
            raise ValueError(f"page={page}: pages count from 1")
        return await self.store.rows.page(
            offset=(page - 1) * page_size,
            limit=page_size,
            state=state,
            prefix=prefix,
            contains=contains,
        )

    @_naming_redis
    async def slices(self, suite: str) -> list[str]:
        """The canonical ids of the suite's slices, sorted (docs/slices.md)."""
        return await self.store.reads.slices(suite)

    @_naming_redis
    async def snapshot(self, suite: str, *, slice: str | None = None) -> Snapshot | None:
        """The daemon's last full snapshot of the suite or of one slice, None before any.

        ``slice`` is a slice id (``slices``). ``UndecodableError`` when the
        stored snapshot does not decode (a daemon of another schema version
        wrote it, or it is damaged): ``estimate`` computes from the histogram
        whatever wrote it, and ``summary`` still gives the counters.
        """
        snap = await self.store.snapshots.document(suite, slice=slice)
        if isinstance(snap, Undecodable):
            raise UndecodableError(f"snapshot of {Series(suite, slice).label!r}", snap)
        return snap

    @_naming_redis
    async def history(
        self,
        suite: str,
        *,
        slice: str | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> History:
        """The series' estimates over time (``since <= t <= until``, unix seconds) and its
        alert transitions; empty before its first snapshot (``stats.history``)."""
        return await self.store.history.read(suite, slice=slice, since=since, until=until)

    @_naming_redis
    async def summary(self, suite: str, *, slice: str | None = None) -> SuiteSummary:
        state = await self.store.reads.read_state(suite, slice=slice)
        snap = await self.store.snapshots.document(suite, slice=slice)
        if slice is not None:
            return SuiteSummary(suite, state.hist.tasks, state.counters, snap, slice=slice)
        return SuiteSummary(
            suite,
            state.hist.tasks,
            state.counters,
            snap,
            slices=await self.store.reads.slices(suite),
            labels_seen=await self.store.reads.labels_seen(suite),
        )

    @_naming_redis
    async def estimate(
        self,
        suite: str | Side,
        k: int,
        metric: Metric = "pass^k",
        **options: Unpack[EstimateOptions],
    ) -> Estimate:
        """pass@k or pass^k of the suite at any k, with its CI, from the stored histogram.

        A ``Side`` with labels estimates the sum of the slices it selects
        (from their per-task counts), with a ``run`` that run's counts.
        ``options`` are ``estimate()``'s: confidence, n_boot, seed,
        min_coverage, interval.
        """
        if isinstance(suite, Side) and (suite.labels or suite.run is not None):
            counts = await self.store.reads.task_counts(suite)
            hist = Histogram.from_pairs([nc for nc in counts.values() if nc[0] > 0])
            return estimate(hist, k, metric, **options)
        name = suite.suite if isinstance(suite, Side) else suite
        state = await self.store.reads.read_state(name)
        return estimate(state.hist, k, metric, **options)

    @_naming_redis
    async def compare(
        self,
        baseline: str | Side,
        candidate: str | Side,
        k: int,
        metric: Metric = "pass^k",
        **options: Unpack[CompareOptions],
    ) -> Comparison:
        """candidate - baseline in pass^k and pass@k over the tasks both sides have.

        A side is a suite name or a ``Side`` (a suite, or with ``labels`` the
        sum of its slices that carry those label values). Reads every task of
        both sides (a tool, not a hot path). ``options`` are ``compare()``'s:
        confidence, n_boot, seed, interval, min_shared, top. ``ValueError``
        when a side names a label its suite is not sliced by.
        """
        sides = [s if isinstance(s, Side) else Side(s) for s in (baseline, candidate)]
        counts = [await self.store.reads.task_counts(side) for side in sides]
        return compare(
            counts[0],
            counts[1],
            k,
            metric,
            names=(sides[0].label, sides[1].label),
            **options,
        )

    @_naming_redis
    async def tasks(self, suite: str) -> dict[str, tuple[int, int]]:
        """Every task's (n trials, c passes). Reads the whole suite: a tool, not a hot path."""
        return await self.store.reads.task_counts(suite)

    @_naming_redis
    async def cases(self, suite: str, k: int, top: int = 10) -> list[LotteryCase]:
        """The top lottery cases at k, read from the lottery index (never every task)."""
        state = await self.store.reads.read_state(suite)
        groups = ranked_cell_groups(state.hist.at_least(k), k, top)
        return await self.store.reads.lottery_rows(suite, groups, top)

    @_naming_redis
    async def alert_states(
        self, suite: str, rules: Sequence[str]
    ) -> dict[str, AlertState | Undecodable]:
        """The stored state of each named rule on the suite: inactive when never judged,
        ``Undecodable`` (its key and the decode error) when another version wrote it."""
        states = await self.store.alerts.alert_states([(suite, rule) for rule in rules])
        return dict(zip(rules, states, strict=True))

    @_naming_redis
    async def alerts(
        self,
        rules: Sequence[Rule | CanaryRule],
        suite: str | None = None,
        *,
        slice: str | None = None,
    ) -> list[RuleStatus]:
        """Every rule of ``rules`` (a config's ``alerts``) on every series it watches, with
        its state: threshold rules on each suite they match, ``slices = true`` rules on
        each slice (``<rule>[<slice>]``), canaries on their candidate's suite with their
        latest difference. With ``suite``: those that read it (a canary on either side),
        with ``slice`` the slice's own. The list every surface shows (``alerting.registry``).
        """
        watched = await registry.statuses(self.store, rules, suite=suite, slice=slice)
        return [w.status() for w in watched]

    @_naming_redis
    async def trials(
        self,
        suite: str,
        task: str | None = None,
        *,
        failed: bool = False,
        limit: int = 20,
        url_base: str = "",
        url_template: str = "",
    ) -> list[TrialRecord]:
        """The suite's recent trials, newest first, each with its link (docs/drill-down.md).

        With ``task``, that task's last trials (with ``failed``, its failures
        among them); without, the suite's last failures (``failed``) or every
        task's last trials; at most ``limit``. ``url`` is the trial's link:
        ``url_template`` (a suite's, over ``{suite}``, ``{task}``, ``{trial}``
        and ``{run}``) filled in, else the event's url, a relative one resolved
        against ``url_base``; None when neither gives one.
        """
        rows = await self.store.reads.trials(suite, task, failed=failed, limit=limit)
        return linked(rows, suite, base=url_base, template=url_template)

    @_naming_redis
    async def runs(self, suite: str, *, most: int = DEFAULT_RUNS) -> list[RunSummary]:
        """The runs the suite holds, newest first: first and last trial, trials, passes,
        tasks (docs/drill-down.md#runs). ``Side(suite, run=...)`` reads one of them."""
        return await self.store.reads.runs(suite, most=most)

    @_naming_redis
    async def reset(self, suite: str) -> int:
        """Delete everything stored for the suite (counts, dedup records, snapshot, alerts)."""
        return await self.store.admin.reset_suite(suite)

    @_naming_redis
    async def forget(self, suite: str, task: str, *, recent: Recent | None = None) -> bool:
        """Take one task out of the suite's counts; False when the suite has no such task.
        ``recent``: what the suite keeps (``Config.recent``), for the fold before."""
        return await self.store.admin.forget_task(suite, task, recent)


class Client:
    """``AsyncClient``'s API for synchronous code, on an event loop of its own."""

    def __init__(
        self,
        redis_url: str | Located | None = None,
        *,
        prefix: str = "rel",
        cluster: bool = False,
        timeout: float = 10.0,
    ) -> None:
        self._bridge = LoopThread("reliabilityd-client")
        try:
            self._async = self._bridge.call(_make_async(redis_url, prefix, cluster, timeout))
        except BaseException:
            self._bridge.close()
            raise
        self.where = self._async.where

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._bridge.closed:
            return
        self._bridge.call(self._async.aclose())
        self._bridge.close()

    def suites(self) -> list[str]:
        return self._bridge.call(self._async.suites())

    def slices(self, suite: str) -> list[str]:
        return self._bridge.call(self._async.slices(suite))

    def rows(
        self,
        *,
        page: int = 1,
        state: str | None = None,
        prefix: str = "",
        contains: str = "",
        page_size: int = 100,
    ) -> RowPage:
        return self._bridge.call(
            self._async.rows(
                page=page, state=state, prefix=prefix, contains=contains, page_size=page_size
            )
        )

    def snapshot(self, suite: str, *, slice: str | None = None) -> Snapshot | None:
        return self._bridge.call(self._async.snapshot(suite, slice=slice))

    def summary(self, suite: str, *, slice: str | None = None) -> SuiteSummary:
        return self._bridge.call(self._async.summary(suite, slice=slice))

    def history(
        self,
        suite: str,
        *,
        slice: str | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> History:
        return self._bridge.call(self._async.history(suite, slice=slice, since=since, until=until))

    def estimate(
        self,
        suite: str | Side,
        k: int,
        metric: Metric = "pass^k",
        **options: Unpack[EstimateOptions],
    ) -> Estimate:
        return self._bridge.call(self._async.estimate(suite, k, metric, **options))

    def compare(
        self,
        baseline: str | Side,
        candidate: str | Side,
        k: int,
        metric: Metric = "pass^k",
        **options: Unpack[CompareOptions],
    ) -> Comparison:
        return self._bridge.call(self._async.compare(baseline, candidate, k, metric, **options))

    def tasks(self, suite: str) -> dict[str, tuple[int, int]]:
        return self._bridge.call(self._async.tasks(suite))

    def cases(self, suite: str, k: int, top: int = 10) -> list[LotteryCase]:
        return self._bridge.call(self._async.cases(suite, k, top))

    def alert_states(self, suite: str, rules: Sequence[str]) -> dict[str, AlertState | Undecodable]:
        return self._bridge.call(self._async.alert_states(suite, rules))

    def alerts(
        self,
        rules: Sequence[Rule | CanaryRule],
        suite: str | None = None,
        *,
        slice: str | None = None,
    ) -> list[RuleStatus]:
        return self._bridge.call(self._async.alerts(rules, suite, slice=slice))

    def trials(
        self,
        suite: str,
        task: str | None = None,
        *,
        failed: bool = False,
        limit: int = 20,
        url_base: str = "",
        url_template: str = "",
    ) -> list[TrialRecord]:
        return self._bridge.call(
            self._async.trials(
                suite,
                task,
                failed=failed,
                limit=limit,
                url_base=url_base,
                url_template=url_template,
            )
        )

    def runs(self, suite: str, *, most: int = DEFAULT_RUNS) -> list[RunSummary]:
        return self._bridge.call(self._async.runs(suite, most=most))

    def reset(self, suite: str) -> int:
        return self._bridge.call(self._async.reset(suite))

    def forget(self, suite: str, task: str, *, recent: Recent | None = None) -> bool:
        return self._bridge.call(self._async.forget(suite, task, recent=recent))


async def _make_async(
    redis_url: str | Located | None, prefix: str, cluster: bool, seconds: float
) -> AsyncClient:
    # Built on the client's own loop: redis-py binds its connections to the loop that made them.
    return AsyncClient(redis_url, prefix=prefix, cluster=cluster, timeout=seconds)
