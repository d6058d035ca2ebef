"""The paired comparison ``GET /v1/compare`` answers, with ``reliabilityd compare``'s settings."""

from __future__ import annotations

import asyncio

from reliabilityd.config import Config
from reliabilityd.stats.compare import Comparison, Side, compare
from reliabilityd.stats.estimators import Metric
from reliabilityd.store import Store


async def compare_sides(
    store: Store,
    config: Config,
    baseline: Side,
    candidate: Side,
    *,
    k: int | None,
    metric: Metric,
    top: int,
    min_shared: int,
) -> Comparison:
    """The paired comparison with the settings ``reliabilityd compare`` uses."""
    reads = store.reads
    known = set(await reads.suites())
    for side in (baseline, candidate):
        if side.suite not in known:
            raise LookupError(f"no suite named {side.suite!r}")
    counts = [await reads.task_counts(side) for side in (baseline, candidate)]
    stats = config.stats
    return await asyncio.to_thread(
        compare,
        counts[0],
        counts[1],
        k if k is not None else max(stats.k),
        metric,
        confidence=stats.confidence,
        n_boot=stats.n_boot,
        seed=stats.seed,
        interval=config.suite_interval(candidate.suite),
        min_shared=min_shared,
        top=top,
        names=(baseline.label, candidate.label),
    )
