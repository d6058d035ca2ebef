"""``GET /v1/compare``: the query and its bounds, and the paired comparison it answers, with
``reliabilityd compare``'s settings.

A comparison reads every task of both sides and is O(tasks x k) of numpy and
Python: 0.3 s of CPU for two 50,000-task sides. So the parsing of the
per-task hashes and the comparison itself run in a worker thread, and at most
``MAX_COMPARES`` comparisons run at once (a request waits up to
``COMPARE_WAIT`` seconds for a place, then is answered 503 with Retry-After);
the reads are ``Reads.task_hashes``, a bounded reply per round trip. ``top``
and ``k`` are bounded (``MAX_TOP``, ``MAX_K``): a query past them is answered
422 with the bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from reliabilityd.config import Config
from reliabilityd.daemon._offload import Worker
from reliabilityd.stats.compare import DEFAULT_MIN_SHARED, Comparison, Side, compare
from reliabilityd.stats.estimators import METRICS, Metric
from reliabilityd.stats.paired import PAIRED_INTERVALS, PairedInterval
from reliabilityd.store import Store, TaskHashes, task_counts_of

# Comparisons computed at once by one daemon's HTTP port: each one's Python
# holds the GIL, so more than the cores would only slow the event loop down.
MAX_COMPARES = 2
# Seconds a comparison waits for a place before it is answered 503.
COMPARE_WAIT = 5.0
DEFAULT_TOP = 5
# Moved tasks a comparison lists at most: past a page of rows, use the CLI's --json.
MAX_TOP = 1000
# The largest k: pass^k's cost is O(tasks x k), and no task has this many trials to spare.
MAX_K = 1000


class QueryError(ValueError):
    """A query ``/v1/compare`` cannot answer; ``status`` is 400 (malformed) or 422 (a bound)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class CompareQuery(NamedTuple):
    baseline: Side
    candidate: Side
    k: int | None
    metric: Metric
    top: int
    min_shared: int
    # None: the candidate suite's interval, as ``reliabilityd compare`` without --interval.
    interval: PairedInterval | None = None


def _interval(query: Mapping[str, str]) -> PairedInterval | None:
    text = query.get("interval")
    if text is None:
        return None
    for name in PAIRED_INTERVALS:
        if text == name:
            return name
    raise QueryError(f"interval must be one of {', '.join(PAIRED_INTERVALS)}")


def _integer(query: Mapping[str, str], name: str) -> int | None:
    text = query.get(name)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise QueryError(f"{name}={text[:40]!r} is not an integer") from None


def parse_query(query: Mapping[str, str]) -> CompareQuery:
    """The comparison a query asks for; QueryError (400, or 422 past a bound) otherwise."""
    suite = query.get("suite")
    if "baseline" not in query or "candidate" not in query:
        raise QueryError("baseline and candidate are required")
    try:
        if suite is None:
            baseline, candidate = Side(query["baseline"]), Side(query["candidate"])
        else:
            baseline = Side.parse(suite, query["baseline"])
            candidate = Side.parse(suite, query["candidate"])
    except ValueError as exc:
        raise QueryError(str(exc)) from None
    metric = query.get("metric", "pass^k")
    if metric not in METRICS:
        raise QueryError(f"metric must be one of {', '.join(METRICS)}")
    k = _integer(query, "k")
    given = _integer(query, "top"), _integer(query, "min_shared")
    top = DEFAULT_TOP if given[0] is None else given[0]
    min_shared = DEFAULT_MIN_SHARED if given[1] is None else given[1]
    if (k is not None and k < 1) or top < 1 or min_shared < 1:
        raise QueryError("k, top and min_shared must be at least 1")
    if k is not None and k > MAX_K:
        raise QueryError(f"k={k} exceeds {MAX_K}, the largest k a comparison computes", 422)
    if top > MAX_TOP:
        raise QueryError(f"top={top} exceeds {MAX_TOP}, the most moved tasks listed", 422)
    return CompareQuery(baseline, candidate, k, metric, top, min_shared, _interval(query))


def _compute(
    hashes: tuple[TaskHashes, TaskHashes], config: Config, query: CompareQuery
) -> Comparison:
    """The worker thread's part: both sides' hashes parsed, then compared."""
    stats = config.stats
    return compare(
        task_counts_of(hashes[0]),
        task_counts_of(hashes[1]),
        query.k if query.k is not None else max(stats.k),
        query.metric,
        confidence=stats.confidence,
        n_boot=stats.n_boot,
        seed=stats.seed,
        interval=query.interval or config.suite_interval(query.candidate.suite),
        min_shared=query.min_shared,
        top=query.top,
        names=(query.baseline.label, query.candidate.label),
    )


async def compare_sides(
    store: Store, config: Config, query: CompareQuery, worker: Worker
) -> Comparison:
    """The paired comparison with the settings ``reliabilityd compare`` uses; its CPU-bound
    steps on ``worker``. LookupError for a missing suite, ValueError for a label its suite
    is not sliced by."""
    reads = store.reads
    known = set(await reads.suites())
    for side in (query.baseline, query.candidate):
        if side.suite not in known:
            raise LookupError(f"no suite named {side.suite!r}")
    hashes = (await reads.task_hashes(query.baseline), await reads.task_hashes(query.candidate))
    return await worker.run(_compute, hashes, config, query)
