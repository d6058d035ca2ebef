"""``reliabilityd history``: a series' estimates over time with its alert transitions.

Reads what the daemon wrote with each snapshot (``stats.history``): one line
per stored point, pass^k and pass@k at one k with their intervals, and the
alert transitions interleaved at their times: those recorded on the series,
and those of every other rule the registry says reads it (a suite's slice
rules, a canary homed on the other side's suite), read from where each is
recorded (``alerting.registry.transitions``). Exit codes as ``status``: 2
for a suite the Redis asked does not have (or a k its history lacks), 4
when Redis cannot be reached.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import msgspec

from reliabilityd.alerting import registry
from reliabilityd.cli._common import (
    EXIT_USAGE,
    add_redis_options,
    positive,
    redis_target,
    run_on_redis,
    say,
)
from reliabilityd.cli._rejected import duration
from reliabilityd.client import AsyncClient
from reliabilityd.rules import CanaryRule, Rule
from reliabilityd.rules.registry import involving
from reliabilityd.stats.history import TIERS, Estimate3, History, Point, Transition, label
from reliabilityd.store import Series

__all__ = ["add_parsers", "instant", "show", "with_watched"]

DEFAULT_SINCE = 86_400.0


def instant(text: str) -> float:
    """Unix seconds from a duration back from now (``2h``, ``7d``) or an ISO 8601 time.

    An ISO time without an offset is local time.
    """
    try:
        return time.time() - duration(text)
    except argparse.ArgumentTypeError:
        pass
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a duration (30m, 2h, 7d) nor an ISO time "
            "(2026-12-01T12:00, 2026-12-01T12:00:00Z)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.astimezone()
    return parsed.timestamp()


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    hs = add_redis_options(
        sub.add_parser("history", help="a suite's estimates over time, with its alert transitions")
    )
    hs.add_argument("suite")
    hs.add_argument("--slice", help="one slice of the suite (its id, e.g. model=x)")
    hs.add_argument(
        "--since",
        type=instant,
        default=None,
        help="from: a duration back (2h, 7d) or an ISO time (default 24h)",
    )
    hs.add_argument("--until", type=instant, default=None, help="to: as --since (default now)")
    hs.add_argument("--k", type=positive, default=None, help="default: the largest k with history")
    hs.add_argument("--json", action="store_true", help="the history as one JSON document")
    hs.set_defaults(handler=_history)


def _pct(x: float | None) -> str:
    return "UNKNOWN" if x is None else f"{100 * x:.1f}%"


def _cell(triple: Estimate3 | None) -> str:
    if triple is None:
        return "-"
    p, lo, hi = triple
    if p is None:
        return "UNKNOWN"
    band = "" if lo is None or hi is None else f" [{100 * lo:.1f}, {100 * hi:.1f}]"
    return f"{_pct(p)}{band}"


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).astimezone().isoformat(timespec="seconds")


def _resolution(tier: int) -> str:
    seconds = TIERS[tier].resolution
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _ks(points: Sequence[Point]) -> list[int]:
    return sorted({int(name.rpartition("@")[2]) for p in points for name in p.values})


def _only_k(hist: History, k: int) -> History:
    names = {label("pass^k", k), label("pass@k", k)}
    points = [
        msgspec.structs.replace(
            p,
            values={n: v for n, v in p.values.items() if n in names},
            minima={n: v for n, v in p.minima.items() if n in names},
        )
        for p in hist.points
    ]
    return msgspec.structs.replace(hist, points=[p for p in points if p.values])


def _transition_line(tr: Transition) -> str:
    detail = ", ".join(x for x in (tr.severity, tr.reason) if x)
    return f"{_when(tr.t)}  alert  {tr.rule} -> {tr.state}" + (f" ({detail})" if detail else "")


def show(
    hist: History,
    *,
    k: int | None,
    as_json: bool,
    where: str,
    out: Callable[[str], None] = print,
) -> int:
    """Print the history; 2 when ``k`` is one the history does not have."""
    have = _ks(hist.points)
    if k is not None and have and k not in have:
        say(
            f"the history of {hist.suite!r} has k = {', '.join(map(str, have))}, not k={k} "
            "(a k gets history from the first snapshot computed with it)"
        )
        return EXIT_USAGE
    if as_json:
        out(msgspec.json.encode(hist if k is None else _only_k(hist, k)).decode())
        return 0
    name = hist.suite if hist.slice is None else f"{hist.suite} [{hist.slice}]"
    if not hist.points and not hist.transitions:
        out(f"no history of {name!r} in that time in {where}")
        return 0
    shown = k if k is not None else (max(have) if have else None)
    lines: list[tuple[float, int, str]] = []
    if shown is not None:
        hat, at = label("pass^k", shown), label("pass@k", shown)
        for p in hist.points:
            if hat in p.values or at in p.values:
                row = (
                    f"{_when(p.t)}  {_resolution(p.tier):>5}  "
                    f"{_cell(p.values.get(hat)):<24}  {_cell(p.values.get(at))}"
                )
                lines.append((p.t, 0, row))
    lines += [(tr.t, 1, _transition_line(tr)) for tr in hist.transitions]
    lines.sort(key=lambda item: (item[0], item[1]))
    if shown is not None:
        hat_head = f"PASS^{shown} [CI]"
        out(f"{'TIME':<25}  {'EVERY':>5}  {hat_head:<24}  PASS@{shown} [CI]")
    for _, _, text in lines:
        out(text)
    n_points = sum(1 for _, kind, _ in lines if kind == 0)
    n_marks = len(hist.transitions)
    out(
        f"{n_points} point{'s' if n_points != 1 else ''} of {name!r}, "
        f"{n_marks} alert transition{'s' if n_marks != 1 else ''}; "
        "each point is the last snapshot of its interval (EVERY)"
    )
    return 0


async def with_watched(
    client: AsyncClient,
    alerts: Sequence[Rule | CanaryRule],
    hist: History,
    *,
    since: float | None,
    until: float | None,
) -> History:
    """The history with the transitions of every rule that reads the series and records
    them elsewhere: a suite's slice rules, a canary homed on the other side's suite."""
    own = Series(hist.suite, hist.slice)
    ws = involving(await registry.watched(client.store, alerts), hist.suite, hist.slice)
    others = [w for w in ws if Series(w.suite, w.slice) != own]
    if not others:
        return hist
    more = await registry.transitions(client.store, others, since=since, until=until)
    merged = sorted([*hist.transitions, *more], key=lambda tr: tr.t)
    return msgspec.structs.replace(hist, transitions=merged)


def _history(args: argparse.Namespace) -> int:

    from reliabilityd.cli.status import missing

    target = redis_target(args)
    since = args.since if args.since is not None else time.time() - DEFAULT_SINCE

    async def run() -> int:
        async with AsyncClient(
            target.where, prefix=target.prefix, cluster=target.config.redis.cluster
        ) as client:
            if args.suite not in await client.suites():
                missing(args.suite, target.describe())
                return EXIT_USAGE
            hist = await client.history(args.suite, slice=args.slice, since=since, until=args.until)
            hist = await with_watched(
                client, target.config.alerts, hist, since=since, until=args.until
            )
            return show(hist, k=args.k, as_json=args.json, where=target.describe())

    return run_on_redis(target, run())
