"""What on-call reads: ``rejected`` (recent dead letters) and the rejected counts ``status`` shows.

A dead letter is input the daemon acknowledged and could not count: its
reason, its reason class, the source it came from (``mqtt:<topic>``,
``stream:<key>``, ``http:<client address>``), the suite it is filed under
(the one its payload names, when its sender may write it), the grant whose
stream holds it, and the start of the payload.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable, Mapping
from datetime import datetime

import msgspec

from reliabilityd.cli._common import add_redis_options, positive, redis_target, run_on_redis
from reliabilityd.store import DeadLetter, Store

__all__ = ["add_parsers", "duration", "excerpt", "rejected", "rejected_summary"]

EXCERPT = 160  # characters of a payload shown
SUMMARY_SUITES = 10  # suites named in status's line of the last hour's dead letters
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def duration(text: str) -> float:
    """Seconds from `90`, `90s`, `30m`, `2h`, `7d` or `1w`."""
    match = _DURATION.match(text)
    if match is None or float(match[1]) <= 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: a positive number with s, m, h, d or w (30m, 2h)"
        )
    return float(match[1]) * _UNITS[match[2] or "s"]


def _span(seconds: float) -> str:
    for unit in ("w", "d", "h", "m"):
        if seconds >= _UNITS[unit] and seconds % _UNITS[unit] == 0:
            return f"{seconds / _UNITS[unit]:.0f}{unit}"
    return f"{seconds:g}s"


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rj = add_redis_options(
        sub.add_parser(
            "rejected",
            help="recent dead letters: input acknowledged but not counted, with reason and source",
        )
    )
    rj.add_argument("suite", nargs="?", help="only the letters filed under this suite")
    rj.add_argument(
        "--grant",
        help="only the letters in this grant's stream (its suites', and those its tokens "
        "sent naming no suite they may write)",
    )
    rj.add_argument(
        "--since", type=duration, default=3600.0, help="how far back: 90s, 30m, 2h, 7d (default 1h)"
    )
    rj.add_argument("--limit", type=positive, default=20, help="at most this many (default 20)")
    rj.add_argument("--json", action="store_true", help="one JSON array, newest first")
    rj.set_defaults(handler=_rejected)


def excerpt(payload: bytes, limit: int = EXCERPT) -> str:
    """The payload's start as text, or as hex when it is not printable UTF-8."""
    text = " ".join(payload.decode("utf-8", "replace").split())
    if text.count("\ufffd") <= 1 and text.isprintable():
        return text[:limit] + ("..." if len(text) > limit else "")
    half = limit // 2
    return "0x" + payload[:half].hex() + ("..." if len(payload) > half else "")


class _Letter(msgspec.Struct):
    id: str
    time: float
    source: str
    suite: str | None
    grant: str | None
    reason: str
    reason_class: str
    excerpt: str
    truncated: bool


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


async def rejected(
    store: Store,
    suite: str | None,
    *,
    since: float,
    limit: int,
    as_json: bool,
    where: str,
    now: float | None = None,
    out: Callable[[str], None] = print,
    grant: str | None = None,
) -> int:
    """Print the newest dead letters of the last ``since`` seconds; 0 (also when there are none)."""
    clock = time.time() if now is None else now
    letters = await store.reads.recent_deadletters(
        since=clock - since, suite=suite, grant=grant, limit=limit
    )
    if as_json:
        out(msgspec.json.encode([_record(letter) for letter in letters]).decode())
        return 0
    scope = f" filed under suite {suite!r}" if suite is not None else ""
    if grant is not None:
        scope += f" of grant {grant!r}"
    if not letters:
        out(f"no dead letters{scope} in the last {_span(since)} in {where}")
        return 0
    for letter in letters:
        out(
            f"{_when(letter.time)}  {letter.source}  {letter.suite or '(no suite named)'}  "
            f"{letter.reason_class}" + (f"  grant {letter.grant}" if letter.grant else "")
        )
        out(f"  reason:  {letter.reason}")
        out(f"  payload: {excerpt(letter.payload)}")
    more = " (--limit for more)" if len(letters) == limit else ""
    out(f"{len(letters)} dead letter{'s' if len(letters) != 1 else ''}{scope}, newest first{more}")
    return 0


def _record(letter: DeadLetter) -> _Letter:
    return _Letter(
        id=letter.id,
        time=letter.time,
        source=letter.source,
        suite=letter.suite,
        grant=letter.grant,
        reason=letter.reason,
        reason_class=letter.reason_class,
        excerpt=excerpt(letter.payload),
        truncated=letter.truncated,
    )


def rejected_summary(counts: Mapping[str | None, int], suite: str | None = None) -> str | None:
    """The line ``status`` prints for the last hour's dead letters; None when there were none.

    For one suite: its own and the unattributable ones (they may be its own
    too); else the ``SUMMARY_SUITES`` suites with the most, then how many more
    suites had how many (a line that stays a line at any number of suites).
    """
    named = {s: n for s, n in counts.items() if s is not None and (suite is None or s == suite)}
    most = sorted(named.items(), key=lambda item: (-item[1], item[0]))
    parts = [f"{s} {n}" for s, n in most[:SUMMARY_SUITES]]
    if rest := most[SUMMARY_SUITES:]:
        parts.append(f"{len(rest)} more suites {sum(n for _, n in rest)}")
    if counts.get(None):
        parts.append(f"no suite named {counts[None]}")
    if not parts:
        return None
    hint = (
        f"reliabilityd rejected {suite}" if suite is not None else "reliabilityd rejected [SUITE]"
    )
    return f"rejected in the last hour: {', '.join(parts)} (listed by `{hint}`)"


def _rejected(args: argparse.Namespace) -> int:
    from reliabilityd.store import connect

    target = redis_target(args)

    async def go() -> int:
        client = connect(target.url, cluster=target.config.redis.cluster, timeout=10.0)
        try:
            return await rejected(
                Store(client, target.prefix),
                args.suite,
                since=args.since,
                limit=args.limit,
                as_json=args.json,
                where=target.describe(),
                grant=args.grant,
            )
        finally:
            await client.aclose()

    return run_on_redis(target, go())
