"""The ``reliabilityd`` command line: run, check, demo, bench."""

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
    bench = sub.add_parser("bench", help="benchmarks that print their figure beside a baseline")
    bench.add_argument("what", choices=["stats", "ingest"])
    study = sub.add_parser("study", help="simulation studies behind the README's tables")
    study.add_argument("what", choices=["coverage"])
    study.add_argument("--reps", type=int, default=5000, help="simulated suites per cell")
    study.add_argument("--seed", type=int, default=0)
    study.add_argument(
        "--only", default="", help="populations whose name contains this text (default: all)"
    )
    study.add_argument("--quick", action="store_true", help="only T in {20, 50} and n = 10")
    study.add_argument("--out", default="", help="also write every cell as JSON lines here")
    study.add_argument(
        "--report", default="", help="print the tables of a JSON-lines file and exit"
    )
    study.add_argument("--full", action="store_true", help="also print every cell")
    study.add_argument(
        "--compare", action="store_true", help="also measure BCa (not offered by the library)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
    if args.command == "study":
        from reliabilityd import coverage

        return coverage.main(
            reps=args.reps,
            seed=args.seed,
            only=args.only,
            quick=args.quick,
            out=args.out,
            report=args.report,
            full=args.full,
            compare=args.compare,
        )
    raise AssertionError(args.command)  # argparse enforces the choices


if __name__ == "__main__":
    sys.exit(main())
