"""A suite's snapshot document and its flat Redis fields, computed from its state.

Pure: the daemon reads the state from Redis, calls these functions, and
writes the result. The JSON document holds values and CIs of one version;
the flat fields are what ``redis-cli HGETALL`` users read.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import msgspec

from reliabilityd.stats.estimate import Estimate, EstimateOptions, estimate_many, estimate_metrics
from reliabilityd.stats.histogram import Histogram
from reliabilityd.stats.lottery import LotteryCase

SCHEMA = 1


class Lottery(msgspec.Struct, frozen=True):
    k: int
    rows: list[LotteryCase]


class RuleView(msgspec.Struct, frozen=True, omit_defaults=True):
    """What this snapshot says about one alert rule that watches the suite.

    ``evidence``: the change detector's nats that pass^k is at or under the
    rule's ``below`` now (``trigger = "detector"`` rules on windowed suites).
    ``estimate``: the rule's metric at its k with the rule's own ``interval``,
    when that differs from the suite's (the suite's estimates serve otherwise).
    """

    rule: str
    evidence: float | None = None
    # ``detector.level``: the whole windows' nats that pass^k is under ``below``.
    level: float | None = None
    # Unix seconds of the rate statistics' last alarm (``trigger = "rate"`` rules).
    alarmed_at: float | None = None
    # The rule's own estimate when it names another interval than the suite's.
    estimate: Estimate | None = None


class MissingEstimate(KeyError):
    """A snapshot has no estimate at the k asked for (the suite itself exists)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Snapshot(msgspec.Struct, frozen=True):
    schema: int
    suite: str
    tasks: int
    trials: int
    errors: int
    skips: int
    duplicates: int
    version: int
    window: int
    updated_at: str
    # When the last counted trial was committed (RFC 3339), null before any.
    last_trial_at: str | None
    pass_at_k: list[Estimate]
    pass_hat_k: list[Estimate]
    lottery: Lottery
    # Trials per task per day, measured between this snapshot and the one before.
    pace: float | None = None
    rules: list[RuleView] = msgspec.field(default_factory=list)
    # The slice's canonical id (docs/slices.md) when this is one slice's snapshot.
    slice: str | None = None
    # Of a suite as a whole: events counted in it but in no slice (past its
    # most slices), and how many slices it has.
    slice_overflow: int = 0
    slices: int = 0

    def rule(self, name: str) -> RuleView | None:
        for view in self.rules:
            if view.rule == name:
                return view
        return None

    def get(self, metric: str, k: int) -> Estimate | None:
        """The estimate of ``metric`` at ``k``, None when the snapshot has none at that k."""
        if metric not in ("pass@k", "pass^k"):
            raise ValueError(f"metric must be 'pass@k' or 'pass^k', got {metric!r}")
        for est in self.pass_at_k if metric == "pass@k" else self.pass_hat_k:
            if est.k == k:
                return est
        return None

    def estimate(self, metric: str, k: int) -> Estimate:
        """The estimate of ``metric`` at ``k``; ``MissingEstimate`` (a KeyError) when absent.

        A snapshot holds the configured k only: a missing k is not a missing
        suite. ``Client.estimate(suite, k)`` computes any k from the histogram.
        """
        est = self.get(metric, k)
        if est is None:
            have = ", ".join(str(e.k) for e in self.pass_hat_k) or "none"
            raise MissingEstimate(
                f"the snapshot of {self.suite!r} has {metric} at k = {have}, not k={k}: "
                f"Client.estimate({self.suite!r}, {k}) computes it from the histogram"
            )
        return est


class StatsSettings(msgspec.Struct, frozen=True):
    """What the numbers of one suite are computed with."""

    ks: tuple[int, ...]
    window: int = 0
    min_coverage: float = 1.0
    n_boot: int = 2000
    confidence: float = 0.95
    seed: int = 0
    # A name from reliabilityd.INTERVALS: `stats.interval`, or the suite's override.
    interval: str = "gaffke"

    def options(self, interval: str | None = None) -> EstimateOptions:
        """``estimate()``'s options for this suite (with another interval, when named)."""
        return EstimateOptions(
            confidence=self.confidence,
            n_boot=self.n_boot,
            seed=self.seed,
            min_coverage=self.min_coverage,
            interval=self.interval if interval is None else interval,
        )


def rfc3339(ts: float) -> str:
    """UTC time as RFC 3339 with millisecond precision."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _fmt(x: float | None) -> str:
    return "" if x is None else repr(x)


def counter_fields(
    tasks: int, trials: int, errors: int, skips: int, duplicates: int
) -> dict[str, str | int]:
    return {
        "tasks": tasks,
        "trials": trials,
        "errors": errors,
        "skips": skips,
        "duplicates": duplicates,
    }


def value_fields(estimates: Sequence[Estimate]) -> dict[str, str]:
    """`pass@5`, `pass^5`, ...: the point estimates, empty when UNKNOWN."""
    return {f"{e.metric.replace('k', str(e.k))}": _fmt(e.value) for e in estimates}


def ci_fields(estimates: Sequence[Estimate]) -> dict[str, str]:
    out: dict[str, str] = {}
    for e in estimates:
        label = e.metric.replace("k", str(e.k))
        out[f"{label}:ci_low"] = _fmt(e.ci_low)
        out[f"{label}:ci_high"] = _fmt(e.ci_high)
    return out


def point_estimates(hist: Histogram, settings: StatsSettings) -> list[Estimate]:
    """Every metric at every k without CIs: the cheap live path after each commit."""
    out: list[Estimate] = []
    for k in settings.ks:
        out.extend(
            estimate_metrics(hist, k, min_coverage=settings.min_coverage, with_ci=False).values()
        )
    return out


def point_estimates_many(
    series: Sequence[tuple[Histogram, StatsSettings]],
) -> list[list[Estimate]]:
    """``point_estimates`` of many series, those with equal ks and min_coverage in one pass.

    Each series' estimates are exactly ``point_estimates(hist, settings)``.
    """
    out: list[list[Estimate]] = [[] for _ in series]
    groups: dict[tuple[tuple[int, ...], float], list[int]] = {}
    for i, (_, settings) in enumerate(series):
        groups.setdefault((settings.ks, settings.min_coverage), []).append(i)
    for (ks, min_coverage), members in groups.items():
        rows = estimate_many(
            [series[i][0] for i in members], ks, min_coverage=min_coverage, with_ci=False
        )
        for i, row in zip(members, rows, strict=True):
            out[i] = row
    return out


def full_estimates(hist: Histogram, settings: StatsSettings) -> list[Estimate]:
    """Every metric at every k with its CI (``settings.interval``)."""
    return estimate_many([hist], settings.ks, **settings.options())[0]


def full_estimates_many(
    series: Sequence[tuple[Histogram, StatsSettings]],
) -> list[list[Estimate]]:
    """``full_estimates`` of many series, those with equal settings in one vectorised pass.

    Each series' estimates are exactly ``full_estimates(hist, settings)``.
    """
    out: list[list[Estimate]] = [[] for _ in series]
    groups: dict[StatsSettings, list[int]] = {}
    for i, (_, settings) in enumerate(series):
        groups.setdefault(settings, []).append(i)
    for settings, members in groups.items():
        rows = estimate_many([series[i][0] for i in members], settings.ks, **settings.options())
        for i, row in zip(members, rows, strict=True):
            out[i] = row
    return out


def build(
    *,
    suite: str,
    hist: Histogram,
    trials: int,
    errors: int,
    skips: int,
    duplicates: int,
    version: int,
    settings: StatsSettings,
    estimates: Sequence[Estimate],
    lottery_k: int,
    lottery_rows: Sequence[LotteryCase],
    now: float,
    last_trial_at: float | None = None,
    pace: float | None = None,
    rules: Sequence[RuleView] = (),
    slice: str | None = None,
    slice_overflow: int = 0,
    slices: int = 0,
) -> Snapshot:
    return Snapshot(
        schema=SCHEMA,
        suite=suite,
        tasks=hist.tasks,
        trials=trials,
        errors=errors,
        skips=skips,
        duplicates=duplicates,
        version=version,
        window=settings.window,
        updated_at=rfc3339(now),
        last_trial_at=None if last_trial_at is None else rfc3339(last_trial_at),
        pass_at_k=[e for e in estimates if e.metric == "pass@k"],
        pass_hat_k=[e for e in estimates if e.metric == "pass^k"],
        lottery=Lottery(k=lottery_k, rows=list(lottery_rows)),
        pace=pace,
        rules=list(rules),
        slice=slice,
        slice_overflow=slice_overflow,
        slices=slices,
    )


def redis_fields(snapshot: Snapshot) -> tuple[dict[str, str | int], dict[str, str | int]]:
    """(CI part, value part) of the snapshot hash; see Store.write_snapshot."""
    estimates = [*snapshot.pass_at_k, *snapshot.pass_hat_k]
    ci: dict[str, str | int] = {
        "json": msgspec.json.encode(snapshot).decode(),
        "updated_at": snapshot.updated_at,
        **ci_fields(estimates),
    }
    values: dict[str, str | int] = {
        **counter_fields(
            snapshot.tasks, snapshot.trials, snapshot.errors, snapshot.skips, snapshot.duplicates
        ),
        "live_updated_at": snapshot.updated_at,
        **value_fields(estimates),
    }
    return ci, values
