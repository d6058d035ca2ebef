"""``reliabilityd runs SUITE``, and ``status SUITE --run RUN``: the runs a suite holds and
one run's numbers.

A run is an event's ``run`` (an eval or experiment id); each suite keeps the
per-task counts of its newest ``stats.max_runs`` runs (docs/drill-down.md#runs).
One run's estimates are the same estimators and intervals as the whole suite's,
over that run's per-task counts; ``compare`` and ``gate`` take ``--run`` too
(``_gate``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import msgspec

from reliabilityd.cli._common import (
    EXIT_USAGE,
    add_redis_options,
    redis_target,
    run_on_redis,
    say,
)
from reliabilityd.config import Config
from reliabilityd.stats.compare import Side
from reliabilityd.stats.estimate import Estimate, EstimateOptions
from reliabilityd.stats.estimators import METRICS
from reliabilityd.store import RunSummary

if TYPE_CHECKING:
    from reliabilityd.client import AsyncClient

__all__ = ["add_parsers", "find_run", "run_status", "runs_table"]

# The most runs a listing reads (config.MaxRuns's bound).
_ALL_RUNS = 1000


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rn = add_redis_options(
        sub.add_parser("runs", help="the runs a suite holds: first and last trial, trials, passes")
    )
    rn.add_argument("suite")
    rn.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    rn.set_defaults(handler=_runs)


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def runs_table(rows: Sequence[RunSummary], suite: str, most: int) -> list[str]:
    """The listing: one line per run, newest (by last trial) first."""
    if not rows:
        return [f"no runs counted in {suite!r} (its events carry no run, or stats.max_runs = 0)"]
    header = ["RUN", "FIRST TRIAL", "LAST TRIAL", "TASKS", "TRIALS", "PASSES"]
    table = [
        [r.run, _when(r.first), _when(r.last), str(r.tasks), str(r.trials), str(r.passes)]
        for r in rows
    ]
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(header)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(t, widths, strict=True)).rstrip() for t in table]
    lines.append(
        f"({len(rows)} runs; the suite keeps its newest {most} by last trial, stats.max_runs)"
    )
    return lines


def _runs(args: argparse.Namespace) -> int:
    from reliabilityd.client import AsyncClient

    target = redis_target(args)
    cfg = target.config

    async def run() -> int:
        async with AsyncClient(
            target.where, prefix=target.prefix, cluster=cfg.redis.cluster
        ) as client:
            if args.suite not in await client.suites():
                say(f"no suite named {args.suite!r} in {target.describe()}")
                return EXIT_USAGE
            rows = await client.runs(args.suite, most=cfg.max_runs(args.suite))
            if args.json:
                print(msgspec.json.encode(rows).decode())
            else:
                print("\n".join(runs_table(rows, args.suite, cfg.max_runs(args.suite))))
            return 0

    return run_on_redis(target, run())


async def find_run(client: AsyncClient, suite: str, run: str) -> RunSummary | str:
    """The suite's run named ``run``, or what to say when it holds none by that name."""
    rows = await client.runs(suite, most=_ALL_RUNS)
    for row in rows:
        if row.run == run:
            return row
    held = ", ".join(r.run for r in rows[:10]) or "none: its events carry no run"
    more = f" and {len(rows) - 10} more" if len(rows) > 10 else ""
    return f"suite {suite!r} holds no run {run!r} (its runs, newest first: {held}{more})"


async def run_status(
    client: AsyncClient,
    cfg: Config,
    suite: str,
    run: str,
    *,
    ks: Sequence[int],
    as_json: bool,
    out: Callable[[str], None] = print,
) -> int:
    """One run's numbers: pass@k and pass^k over its per-task counts, with their CIs."""
    found = await find_run(client, suite, run)
    if isinstance(found, str):
        say(found)
        return EXIT_USAGE
    side = Side(suite, run=run)
    options: EstimateOptions = {
        "min_coverage": cfg.suite_settings(suite)[1],
        "confidence": cfg.stats.confidence,
        "n_boot": cfg.stats.n_boot,
        "seed": cfg.stats.seed,
        "interval": cfg.suite_interval(suite),
    }
    per_k: dict[int, dict[str, Estimate]] = {
        k: {m: await client.estimate(side, k, m, **options) for m in METRICS}
        for k in sorted(set(ks or cfg.stats.k))
    }
    if as_json:
        doc = {
            **msgspec.structs.asdict(found),
            "suite": suite,
            "pass_at_k": [e["pass@k"] for e in per_k.values()],
            "pass_hat_k": [e["pass^k"] for e in per_k.values()],
        }
        out(msgspec.json.encode(doc).decode())
        return 0
    from reliabilityd.cli.status import format_estimate

    out(
        f"{suite} (run {run}): {found.tasks} tasks, {found.trials} trials, {found.passes} "
        f"passes, {_when(found.first)} to {_when(found.last)}"
    )
    header = ["K", "RUNS", "PASS@K % [CI]", "PASS^K % [CI]"]
    table = [
        [
            str(k),
            str(max(e.runs for e in ests.values())),
            format_estimate(ests["pass@k"]),
            format_estimate(ests["pass^k"]),
        ]
        for k, ests in per_k.items()
    ]
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(header)]
    out("  ".join(c.ljust(w) for c, w in zip(header, widths, strict=True)).rstrip())
    for t in table:
        out("  ".join(c.ljust(w) for c, w in zip(t, widths, strict=True)).rstrip())
    out("(RUNS: the fewest trials among the run's tasks estimated at that k)")
    return 0
