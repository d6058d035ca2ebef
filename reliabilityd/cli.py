"""The ``reliabilityd`` command line: the daemon, queries, suite lifecycle, demo, benchmarks."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _seed_example() -> int:
    """Print the seed document's worked example from the library."""
    from reliabilityd import estimate, lottery_cases, pass_at_k, pass_hat_k
    from reliabilityd.estimators import METRICS

    passes = [4, 2, 5, 3, 1, 2, 3, 5, 2, 1, 4, 3, 3, 2, 2, 3, 4, 2, 3, 2]
    tasks = [(5, c) for c in passes]
    print(f"pass@2 of one task with 3/5 passes = {pass_at_k(5, 3, 2):.2f}")
    print(
        f"pass^2 of one task with 3/5 passes = {pass_hat_k(5, 3, 2):.2f}"
        "  (the plug-in would say 0.36)"
    )
    for metric in METRICS:
        est = estimate(tasks, 5, metric)
        assert est.value is not None
        assert est.ci_95 is not None
        label = metric.replace("k", "5")
        print(f"{label} = {est.value:.0%} [{est.ci_95[0]:.0%}, {est.ci_95[1]:.0%}]")
    print(estimate(tasks, 10).unknown_reason)
    counts = {f"deploy service {i}": (5, c) for i, c in enumerate(passes)}
    for row in lottery_cases(counts, 5, limit=3):
        print(f"lottery case: {row.task!r} ({row.c}/{row.n} runs)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reliabilityd",
        description="Live pass@k / pass^k reliability numbers for agent trials.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("example", help="print the seed document's worked example")
    demo = sub.add_parser(
        "demo", help="private redis-server and mosquitto, the daemon, events in, numbers out"
    )
    demo.add_argument(
        "--serve", action="store_true", help="keep the servers and the daemon running until Ctrl-C"
    )
    run = sub.add_parser("run", help="run the daemon")
    run.add_argument("-c", "--config", required=True, help="TOML config file")
    run.add_argument("--log-level", default="INFO")
    chk = sub.add_parser("check", help="exit 0 when this instance's heartbeat is fresh")
    chk.add_argument("-c", "--config", required=True, help="TOML config file")
    _add_query_commands(sub)
    bench = sub.add_parser("bench", help="benchmarks that print their figure beside a baseline")
    bench.add_argument("what", choices=["stats", "ingest"])
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _add_query_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    def where(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("-c", "--config", help="TOML config file (Redis URL, prefix, rules)")
        p.add_argument("--redis", help="Redis URL, when there is no config file")
        p.add_argument("--prefix", help="key prefix (default: the config's, else rel)")
        return p

    st = where(sub.add_parser("status", help="every suite's numbers, CIs and alert states"))
    st.add_argument("suite", nargs="?", help="one suite (default: all)")
    st.add_argument("--json", action="store_true", help="the snapshot JSON instead of a table")
    st.add_argument(
        "--k",
        type=_positive,
        action="append",
        default=[],
        help="compute this k now from the stored histogram (repeatable)",
    )
    cs = where(sub.add_parser("cases", help="a suite's lottery cases"))
    cs.add_argument("suite")
    cs.add_argument("--k", type=_positive, default=None, help="default: the largest configured k")
    cs.add_argument("--top", type=_positive, default=10)
    tk = where(sub.add_parser("tasks", help="a suite's per-task n and c"))
    tk.add_argument("suite")
    rs = where(sub.add_parser("reset", help="delete everything stored for a suite"))
    rs.add_argument("suite")
    rs.add_argument("--yes", action="store_true", help="do not ask")
    fg = where(sub.add_parser("forget", help="take one task out of a suite's counts"))
    fg.add_argument("suite")
    fg.add_argument("task")
    fg.add_argument("--yes", action="store_true", help="do not ask")


def _query(args: argparse.Namespace) -> int:
    import asyncio

    from reliabilityd import config as config_mod
    from reliabilityd import status
    from reliabilityd.client import AsyncClient
    from reliabilityd.errors import ConfigError

    cfg = config_mod.Config()
    if args.config:
        try:
            cfg = config_mod.load(args.config)
        except ConfigError as exc:
            print(f"reliabilityd: config error: {exc}", file=sys.stderr)
            return exc.exit_code
    url = args.redis or cfg.redis.url
    prefix = args.prefix or cfg.redis.prefix
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
        async with AsyncClient(url, prefix=prefix, cluster=cfg.redis.cluster) as client:
            if args.command == "status":
                return await status.status(
                    client,
                    args.suite,
                    ks=args.k,
                    rules=cfg.rules(),
                    as_json=args.json,
                    n_boot=cfg.stats.n_boot,
                )
            if args.command == "cases":
                k = args.k if args.k is not None else max(cfg.stats.k)
                return await status.cases(client, args.suite, k, args.top)
            if args.command == "tasks":
                return await status.tasks(client, args.suite)
            if args.command == "reset":
                deleted = await client.reset(args.suite)
                print(f"reset {args.suite!r}: {deleted} keys deleted")
                return 0
            if await client.forget(args.suite, args.task):
                print(f"forgot task {args.task!r} of {args.suite!r}")
                return 0
            print(f"reliabilityd: suite {args.suite!r} has no task {args.task!r}", file=sys.stderr)
            return 1

    import redis.exceptions

    try:
        return asyncio.run(run())
    except redis.exceptions.RedisError as exc:
        print(f"reliabilityd: Redis at {url} answered: {exc}", file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("status", "cases", "tasks", "reset", "forget"):
        return _query(args)
    if args.command == "example":
        return _seed_example()
    if args.command == "demo":
        from reliabilityd import demo

        return demo.main(serve=args.serve)
    if args.command in ("run", "check"):
        import asyncio

        from reliabilityd import config as config_mod
        from reliabilityd import daemon, logs
        from reliabilityd.errors import ConfigError

        try:
            cfg = config_mod.load(args.config)
        except ConfigError as exc:
            print(f"reliabilityd: config error: {exc}", file=sys.stderr)
            return exc.exit_code
        if args.command == "check":
            return asyncio.run(daemon.check(cfg))
        logs.setup(args.log_level)
        return asyncio.run(daemon.main(cfg))
    if args.command == "bench":
        if args.what == "stats":
            from reliabilityd import bench_stats

            bench_stats.main()
        else:
            from reliabilityd import bench_ingest

            bench_ingest.main()
        return 0
    raise AssertionError(args.command)  # argparse enforces the choices


if __name__ == "__main__":
    sys.exit(main())
