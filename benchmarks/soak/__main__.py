"""``python -m benchmarks.soak``: the soak's command line (``make soak SOAK_SECONDS=...``)."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks.soak._plan import plan_for
from benchmarks.soak._report import dump, report
from benchmarks.soak._run import Soak


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.soak",
        description="Hours of load and faults against reliabilityd run; exit 1 on drift.",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=float(os.environ.get("SOAK_SECONDS", "7200")),
        help="how long the load runs ($SOAK_SECONDS, default 7200)",
    )
    parser.add_argument(
        "--restart-every",
        type=float,
        help="seconds between Redis restarts, and between broker restarts "
        "(default: 1800, or a third of the run when shorter)",
    )
    parser.add_argument(
        "--reload-every",
        type=float,
        help="seconds between SIGHUPs (default: 180, or a tenth of the run when shorter)",
    )
    parser.add_argument(
        "--dedup-ttl",
        type=int,
        help="the daemon's store.dedup_ttl (default: a twentieth of the run, 60 to 300)",
    )
    parser.add_argument("--rate", type=float, default=1.0, help="scales every producer's pace")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--workdir",
        type=Path,
        help="servers' and daemon's files (default: a temporary directory, removed after a pass)",
    )
    parser.add_argument("--out", type=Path, help="write the figures and every sample as JSON")
    args = parser.parse_args()
    plan = plan_for(
        args.seconds,
        restart_every=args.restart_every,
        reload_every=args.reload_every,
        dedup_ttl=args.dedup_ttl,
        rate=args.rate,
    )
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="reliabilityd-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(
        f"soak: {plan.seconds:.0f} s; Redis restarts at {plan.redis_restarts}, broker restarts "
        f"at {plan.broker_restarts}, a SIGHUP every {plan.reload_every:.0f} s; files in {workdir}",
        flush=True,
    )
    soak = Soak(plan, workdir, args.seed)
    figures = asyncio.run(soak.run())
    command = f"make soak SOAK_SECONDS={plan.seconds:.0f}"
    print(report(plan, figures, soak.samples, command), flush=True)
    if args.out is not None:
        dump(args.out, plan, figures, soak.samples)
    if figures.failures:
        print(f"soak: the servers' and the daemon's files are in {workdir}", file=sys.stderr)
        return 1
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
