"""Verbs that decide: ``compare`` (two sides, paired) and ``gate`` (an exit code for pipelines).

``compare BASELINE CANDIDATE`` prints candidate - baseline in pass^k and
pass@k over the tasks both suites have; ``compare SUITE --baseline
agent_version=1.4 --candidate agent_version=1.5`` does the same for two
label filters over the slices of one suite (``--baseline`` and
``--candidate`` filter the first and the second suite when two are given);
exit 0, or 3 when UNKNOWN. ``gate SUITE --at-least X`` exits 0 when the
interval's lower bound is at least X, 1 when its upper bound is below X, 3
when the data cannot decide yet (or UNKNOWN); ``gate CANDIDATE --compare
BASELINE --margin M`` does the same for "candidate - baseline >= -M", and
``gate SUITE --slice F --compare-slice G`` for two filters of one suite;
``--slice`` filters the suite judged. ``--run`` names one run of a suite
(an eval or experiment id: ``reliabilityd runs``): ``compare SUITE --run A
--run B`` is run B against run A, ``gate SUITE --run B --compare-run A``
judges it, ``gate SUITE --run B --at-least X`` judges one run. A suite that does not exist, or a
filter on a label the suite is not sliced by, is a usage error (2): a typo
must not read as "not decided yet"; so is a run the suite does not hold.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import msgspec

from reliabilityd.cli._common import (
    EXIT_FAIL,
    EXIT_OK,
    EXIT_UNDECIDED,
    EXIT_USAGE,
    RedisTarget,
    add_redis_options,
    positive,
    redis_target,
    run_on_redis,
    say,
)
from reliabilityd.cli._runs import find_run
from reliabilityd.config import Config
from reliabilityd.stats.compare import DEFAULT_MIN_SHARED, Comparison, Side
from reliabilityd.stats.estimators import METRICS
from reliabilityd.stats.paired import PAIRED_INTERVALS

if TYPE_CHECKING:
    from reliabilityd.client import AsyncClient

__all__ = ["add_parsers"]

EXIT_OF = {"pass": EXIT_OK, "fail": EXIT_FAIL, "undecided": EXIT_UNDECIDED}


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1], got {value}")
    return value


def _stats_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--k", type=positive, help="default: the largest configured k (5)")
    p.add_argument("--metric", choices=METRICS, default="pass^k")
    p.add_argument(
        "--interval",
        choices=PAIRED_INTERVALS,
        help="default: the config's; student only for two sides (compare, gate --compare)",
    )
    p.add_argument("--json", action="store_true", help="one JSON document (for CI annotations)")


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmp = add_redis_options(
        sub.add_parser("compare", help="candidate - baseline, paired over the tasks both have")
    )
    cmp.add_argument(
        "suites",
        nargs="+",
        metavar="SUITE",
        help="BASELINE CANDIDATE, or one SUITE with --baseline and --candidate label filters",
    )
    cmp.add_argument(
        "--baseline", metavar="KEY=VALUE[,...]", help="the baseline's slices: a label filter"
    )
    cmp.add_argument(
        "--candidate", metavar="KEY=VALUE[,...]", help="the candidate's slices: a label filter"
    )
    cmp.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="RUN",
        help="twice: the baseline's run, then the candidate's (of one SUITE, or of each of two)",
    )
    _stats_options(cmp)
    cmp.add_argument("--min-shared", type=positive, default=DEFAULT_MIN_SHARED)
    cmp.add_argument("--top", type=positive, default=5, help="tasks that moved most to list")
    cmp.set_defaults(handler=_run)
    gate = add_redis_options(
        sub.add_parser("gate", help="exit 0 pass, 1 fail, 3 undecided: a threshold or a comparison")
    )
    gate.add_argument("suite", help="the suite judged (the candidate with --compare)")
    _stats_options(gate)
    what = gate.add_mutually_exclusive_group(required=True)
    what.add_argument("--at-least", type=_fraction, help="pass when the lower bound reaches this")
    what.add_argument("--compare", metavar="BASELINE", help="judge SUITE against this suite")
    what.add_argument(
        "--compare-slice",
        metavar="KEY=VALUE[,...]",
        help="judge SUITE (or its --slice) against these slices of SUITE",
    )
    what.add_argument(
        "--compare-run", metavar="RUN", help="judge SUITE's --run against SUITE's run RUN"
    )
    gate.add_argument(
        "--slice", metavar="KEY=VALUE[,...]", help="judge only the slices of SUITE that match"
    )
    gate.add_argument("--run", metavar="RUN", help="judge only SUITE's run RUN")
    gate.add_argument(
        "--margin",
        type=_fraction,
        default=0.0,
        help="with --compare: pass when candidate - baseline >= -margin (default 0)",
    )
    gate.add_argument("--min-shared", type=positive, default=DEFAULT_MIN_SHARED)
    gate.add_argument(
        "--looks",
        type=positive,
        default=1,
        help="a pipeline re-runs this gate at most this many times as trials arrive: each run "
        "judges at the confidence that keeps the false-pass risk of all of them that of one "
        "(default 1: one look)",
    )
    gate.set_defaults(handler=_run)


def _pct(x: float | None) -> str:
    return "UNKNOWN" if x is None else f"{100 * x:.1f}%"


def _pp(x: float) -> str:
    return f"{100 * x:+.1f} pp"


def describe_comparison(cmp: Comparison) -> list[str]:
    lines = [
        f"{cmp.candidate!r} against {cmp.baseline!r}, k={cmp.k}: {cmp.shared} shared tasks "
        f"({cmp.only_baseline} only in {cmp.baseline!r}, "
        f"{cmp.only_candidate} only in {cmp.candidate!r})"
    ]
    if cmp.unknown_reason is not None:
        lines.append(f"  {cmp.unknown_reason}")
        return lines
    for diff in cmp.differences.values():
        assert diff.value is not None
        assert diff.ci is not None
        lines.append(
            f"  {diff.label:7s} {_pct(diff.baseline)} -> {_pct(diff.candidate)}  "
            f"difference {_pp(diff.value)}, {diff.confidence:.0%} CI "
            f"[{_pp(diff.ci[0])}, {_pp(diff.ci[1])}] ({diff.interval}): {diff.direction}"
        )
    if cmp.moved:
        label = cmp.difference().label
        lines.append(f"  moved most ({label}; n/c on each side):")
        width = max(len(m.task) for m in cmp.moved)
        for m in cmp.moved:
            lines.append(
                f"    {m.task:{width}s}  {m.baseline_c}/{m.baseline_n} -> "
                f"{m.candidate_c}/{m.candidate_n}  {_pct(m.baseline)} -> {_pct(m.candidate)} "
                f"({_pp(m.change)})"
            )
    return lines


def _run(args: argparse.Namespace) -> int:
    target = redis_target(args)
    return run_on_redis(target, _decide(args, target))


def sides(args: argparse.Namespace) -> tuple[Side | None, Side]:
    """(baseline, candidate) the command line names; ValueError on a malformed one."""
    if args.command == "compare":
        if len(args.suites) > 2:
            raise ValueError("compare takes one suite (with --baseline and --candidate) or two")
        first, second = args.suites[0], args.suites[-1]
        if args.run:
            if len(args.run) != 2:
                raise ValueError(
                    "compare takes --run twice: the baseline's run, then the candidate's"
                )
            if args.baseline or args.candidate:
                raise ValueError(
                    "a run is counted for the whole suite, not per slice: --run takes no "
                    "--baseline or --candidate label filter"
                )
            return Side(first, run=args.run[0]), Side(second, run=args.run[1])
        if len(args.suites) == 1 and not (args.baseline and args.candidate):
            raise ValueError(
                "one suite needs --baseline and --candidate label filters, or --run twice"
            )
        return Side.parse(first, args.baseline), Side.parse(second, args.candidate)
    if args.compare_run is not None and args.run is None:
        raise ValueError("--compare-run judges SUITE's --run against another run: give --run")
    candidate = Side.parse(args.suite, args.slice, args.run)
    if args.compare is not None:
        return Side(args.compare), candidate
    if args.compare_slice is not None:
        return Side.parse(args.suite, args.compare_slice), candidate
    if args.compare_run is not None:
        return Side(args.suite, run=args.compare_run), candidate
    return None, candidate


async def _decide(args: argparse.Namespace, target: RedisTarget) -> int:
    from reliabilityd.client import AsyncClient

    try:
        baseline, candidate = sides(args)
    except ValueError as exc:
        say(str(exc))
        return EXIT_USAGE
    cfg = target.config
    async with AsyncClient(target.where, prefix=target.prefix, cluster=cfg.redis.cluster) as client:
        known = set(await client.suites())
        for side in (baseline, candidate):
            if side is not None and side.suite not in known:
                say(f"no suite named {side.suite!r} in {target.describe()}")
                return EXIT_USAGE
            if side is not None and side.run is not None:
                found = await find_run(client, side.suite, side.run)
                if isinstance(found, str):  # a typo must not read as "not decided yet"
                    say(found)
                    return EXIT_USAGE
        try:
            return await _judge(args, cfg, client, baseline, candidate)
        except ValueError as exc:  # a filter on a label the suite is not sliced by
            say(str(exc))
            return EXIT_USAGE


async def _judge(
    args: argparse.Namespace,
    cfg: Config,
    client: AsyncClient,
    baseline: Side | None,
    candidate: Side,
) -> int:
    from reliabilityd.stats.gate import judge_at_least, judge_not_worse, look_confidence

    k = args.k if args.k is not None else max(cfg.stats.k)
    interval = args.interval or cfg.suite_interval(candidate.suite)
    if baseline is None and interval == "student":
        say("--interval student needs two sides: use it with compare or gate --compare")
        return EXIT_USAGE
    conf, n_boot, seed = cfg.stats.confidence, cfg.stats.n_boot, cfg.stats.seed
    looks = getattr(args, "looks", 1)  # compare has no looks: it decides nothing
    conf = look_confidence(conf, looks)
    if baseline is None:
        est = await client.estimate(
            candidate,
            k,
            args.metric,
            min_coverage=cfg.suite_settings(candidate.suite)[1],
            confidence=conf,
            n_boot=n_boot,
            seed=seed,
            interval=interval,
        )
        verdict = judge_at_least(est, args.at_least)
        doc: dict[str, Any] = {
            "verdict": verdict,
            "suite": candidate.suite,
            "labels": candidate.labels,
            "run": candidate.run,
            "metric": args.metric,
            "at_least": args.at_least,
            "looks": looks,
            "estimate": est,
        }
        label = args.metric.replace("k", str(k))
        text = (
            f"{label} of {candidate.label!r}: {est.unknown_reason}"
            if est.ci is None
            else f"{label} of {candidate.label!r} = {_pct(est.value)}, {est.confidence:.0%} CI "
            f"[{_pct(est.ci[0])}, {_pct(est.ci[1])}] ({est.interval}) over {est.tasks} tasks; "
            f"threshold {_pct(args.at_least)}"
        )
        lines = [f"{verdict}: {text}"]
    else:
        cmp = await client.compare(
            baseline,
            candidate,
            k,
            args.metric,
            min_shared=args.min_shared,
            top=getattr(args, "top", 5),
            confidence=conf,
            n_boot=n_boot,
            seed=seed,
            interval=interval,
        )
        if args.command == "compare":
            if args.json:
                print(msgspec.json.encode(cmp).decode())
            else:
                print("\n".join(describe_comparison(cmp)))
            return EXIT_UNDECIDED if cmp.unknown else EXIT_OK
        verdict = judge_not_worse(cmp.difference(), args.margin)
        doc = {
            "verdict": verdict,
            "suite": candidate.suite,
            "labels": candidate.labels,
            "run": candidate.run,
            "baseline": baseline.suite,
            "baseline_labels": baseline.labels,
            "baseline_run": baseline.run,
            "metric": args.metric,
            "margin": args.margin,
            "looks": looks,
            "comparison": cmp,
        }
        lines = [
            f"{verdict}: {candidate.label!r} must not be worse than {baseline.label!r} "
            f"by more than {_pp(args.margin).lstrip('+')}",
            *describe_comparison(cmp),
        ]
    if looks > 1:
        lines.append(
            f"one of at most {looks} looks: each judged at {conf:.2%} confidence, so that all "
            f"of them together risk a false pass no more than one look at "
            f"{cfg.stats.confidence:.0%}"
        )
    code = EXIT_OF[verdict]
    if args.json:
        print(msgspec.json.encode({**doc, "exit_code": code}).decode())
    else:
        print("\n".join(lines))
    return code
