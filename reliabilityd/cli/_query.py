"""Verbs that read or administer what is stored: status, cases, tasks, trials, reset, forget,
forecast."""

from __future__ import annotations

import argparse

from reliabilityd.cli import _runs
from reliabilityd.cli import forecast as forecast_verb
from reliabilityd.cli._common import (
    EXIT_USAGE,
    add_redis_options,
    positive,
    redis_target,
    run_on_redis,
    say,
)

__all__ = ["add_parsers"]


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    st = add_redis_options(sub.add_parser("status", help="every suite's numbers, CIs and alerts"))
    st.add_argument("suite", nargs="?", help="one suite (default: all)")
    st.add_argument("--json", action="store_true", help="the snapshot JSON instead of a table")
    st.add_argument(
        "--k",
        type=positive,
        action="append",
        default=[],
        help="compute this k now from the stored histogram (repeatable)",
    )
    st.add_argument(
        "--run", metavar="RUN", help="one run's numbers (SUITE's run RUN: `reliabilityd runs`)"
    )
    cs = add_redis_options(sub.add_parser("cases", help="a suite's lottery cases"))
    cs.add_argument("suite")
    cs.add_argument("--k", type=positive, default=None, help="default: the largest configured k")
    cs.add_argument("--top", type=positive, default=10)
    tk = add_redis_options(sub.add_parser("tasks", help="a suite's per-task n and c"))
    tk.add_argument("suite")
    tr = add_redis_options(
        sub.add_parser("trials", help="a suite's or a task's last trials, with their links")
    )
    tr.add_argument("suite")
    tr.add_argument("task", nargs="?", help="one task's last trials (default: the whole suite)")
    tr.add_argument("--failed", action="store_true", help="only failures")
    tr.add_argument("--limit", type=positive, default=20, help="at most this many (default 20)")
    tr.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    rs = add_redis_options(sub.add_parser("reset", help="delete everything stored for a suite"))
    rs.add_argument("suite")
    rs.add_argument("--yes", action="store_true", help="do not ask")
    fg = add_redis_options(sub.add_parser("forget", help="take one task out of a suite's counts"))
    fg.add_argument("suite")
    fg.add_argument("task")
    fg.add_argument("--yes", action="store_true", help="do not ask")
    fc = add_redis_options(forecast_verb.add_parser(sub))
    for p in (st, cs, tk, tr, rs, fg, fc):
        p.set_defaults(handler=_query)


def _query(args: argparse.Namespace) -> int:

    from reliabilityd.cli import status
    from reliabilityd.client import AsyncClient

    target = redis_target(args)
    cfg, prefix = target.config, target.prefix
    if args.command == "reset" and not status.confirm(
        f"Delete every count, dedup record, snapshot and alert state of suite {args.suite!r}?",
        args.yes,
    ):
        return 1
    if args.command == "forget" and not status.confirm(
        f"Take task {args.task!r} out of suite {args.suite!r}?", args.yes
    ):
        return 1

    async def run() -> int:
        async with AsyncClient(target.where, prefix=prefix, cluster=cfg.redis.cluster) as client:
            # A suite named that is not there is said once, the same way, for every verb
            # that reads one (status and tasks say it themselves); reset stays idempotent.
            named = getattr(args, "suite", None)
            if (
                args.command in ("cases", "forecast", "forget", "trials")
                and named is not None
                and named not in await client.suites()
            ):
                status.missing(named, target.describe())
                return EXIT_USAGE
            if args.command == "status" and args.run is not None:
                if args.suite is None or args.suite not in await client.suites():
                    say(
                        "status --run needs the suite that holds the run"
                        if args.suite is None
                        else f"no suite named {args.suite!r} in {target.describe()}"
                    )
                    return EXIT_USAGE
                return await _runs.run_status(
                    client, cfg, args.suite, args.run, ks=args.k, as_json=args.json
                )
            if args.command == "status":
                return await status.status(
                    client,
                    args.suite,
                    ks=args.k,
                    rules=cfg.alerts,
                    as_json=args.json,
                    n_boot=cfg.stats.n_boot,
                    where=target.describe(),
                    config=cfg,
                )
            if args.command == "cases":
                k = args.k if args.k is not None else max(cfg.stats.k)
                return await status.cases(client, args.suite, k, args.top)
            if args.command == "tasks":
                return await status.tasks(client, args.suite, where=target.describe())
            if args.command == "trials":
                base, template = cfg.links(args.suite)
                rows = await client.trials(
                    args.suite,
                    args.task,
                    failed=args.failed,
                    limit=args.limit,
                    url_base=base,
                    url_template=template,
                )
                return status.trials(rows, args.suite, args.task, as_json=args.json)
            if args.command == "forecast":
                return await forecast_verb.forecast(
                    client.store,
                    cfg,
                    args.suite,
                    pace=args.pace,
                    hours=args.hours,
                    level_hours=args.level_hours,
                )
            if args.command == "reset":
                deleted = await client.reset(args.suite)
                print(f"reset {args.suite!r}: {deleted} keys deleted")
                return 0
            if await client.forget(args.suite, args.task, recent=cfg.recent(args.suite)):
                print(f"forgot task {args.task!r} of {args.suite!r}")
                return 0
            say(f"suite {args.suite!r} has no task {args.task!r} in {target.describe()}")
            return 1

    return run_on_redis(target, run())
