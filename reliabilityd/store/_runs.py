"""Per-run counts: for each run of a suite, each task's (n, c), and the run's totals.

Counted at fold time from the trial log (``_recent``), whose records carry
each trial's run and are folded exactly once (the fold checks the log's
tail), so the apply pays nothing for them. Three kinds of key per suite,
under its hash tag:

* ``runs`` (sorted set): run -> time of its last trial (Unix seconds): the
  order in which the oldest runs retire past ``Recent.runs``;
* ``run`` (hash): run -> ``<first> <last> <trials> <passes>``;
* ``run:<run>`` (hash): task -> ``n:c``, that run's counts.

A fold adds the log entries' counts to their runs (``fold_args``), then
retires the oldest runs past the cap with their counts; a forgotten or
expired task leaves every run (``lua/forget_one.lua``); ``reset`` deletes
them all. Readers merge the log's unfolded entries, so the counts are exact
folded or not.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

import msgspec

from reliabilityd.store._base import Redis, _text
from reliabilityd.store._triallog import unfolded

# Runs a suite keeps when the config names none.
DEFAULT_RUNS = 20
# Fields of a run's hash per HSCAN round trip.
_SCAN = 2000


class RunSummary(msgspec.Struct, frozen=True):
    """One run of a suite: its first and last trial (Unix seconds), trials, passes, tasks."""

    run: str
    first: float
    last: float
    trials: int
    passes: int
    tasks: int


class _Delta:
    """What a fold adds to one run."""

    __slots__ = ("first", "last", "passes", "tasks", "trials")

    def __init__(self, ts: float) -> None:
        self.first = self.last = ts
        self.trials = self.passes = 0
        self.tasks: dict[str, list[int]] = {}

    def add(self, task: str, passed: bool, ts: float) -> None:
        self.first, self.last = min(self.first, ts), max(self.last, ts)
        self.trials += 1
        self.passes += passed
        nc = self.tasks.setdefault(task, [0, 0])
        nc[0] += 1
        nc[1] += passed


def _parse(rec: str) -> tuple[bool, float, str] | None:
    """(passed, time, run) of a record (``<code><trial> \\x1f <ts> \\x1f <run> \\x1f <url>``);
    None without a run."""
    parts = rec.split("\x1f")
    if len(parts) != 4 or not parts[2] or not parts[0]:
        return None
    try:
        ts = float(parts[1])
    except ValueError:
        return None
    return parts[0][0] == "p", ts, parts[2]


def deltas(pairs: Iterable[tuple[str, str]]) -> dict[str, _Delta]:
    """Each run's additions from counted (task, record) pairs."""
    out: dict[str, _Delta] = {}
    for task, rec in pairs:
        got = _parse(rec)
        if got is None:
            continue
        passed, ts, run = got
        delta = out.get(run)
        if delta is None:
            delta = out[run] = _Delta(ts)
        delta.add(task, passed, ts)
    return out


def retiring(held: Sequence[tuple[Any, float]], added: dict[str, _Delta], most: int) -> list[str]:
    """The runs a fold retires: the oldest by last trial (then by id) past ``most``."""
    last = {_text(run): float(score) for run, score in held}
    for run, delta in added.items():
        last[run] = max(last.get(run, delta.last), delta.last)
    if len(last) <= most:
        return []
    order = sorted(last, key=lambda r: (last[r], r))
    return order[: len(last) - most]


def fold_args(
    keys: Any, suite: str, pairs: Sequence[tuple[str, str]], most: int, held: Sequence[Any]
) -> tuple[list[str], list[str | int]]:
    """The run keys and arguments of a fold (lua/fold.lua) that adds ``pairs``' counts,
    given the runs held (``runs``, with scores): the updated runs, then those retired."""
    added = deltas(pairs)
    retire = retiring(held, added, most) if added else []
    run_keys = [keys.suite(suite, f"run:{run}") for run in [*added, *retire]]
    args: list[str | int] = [len(added), len(retire)]
    for delta in added.values():
        args += (int(delta.first), int(delta.last), delta.trials, delta.passes, len(delta.tasks))
        for task, (n, c) in delta.tasks.items():
            args += (task, n, c)
    return run_keys, args


async def _alive(client: Redis, keys: Any, suite: str, names: Sequence[str]) -> set[str]:
    if not names:
        return set()
    held = await client.hmget(keys.suite(suite, "tasks"), list(names))
    return {t for t, h in zip(names, held, strict=True) if h is not None}


async def _pending(client: Redis, keys: Any, suite: str) -> dict[str, _Delta]:
    """The runs' counts in the log's unfolded entries, of tasks the suite holds."""
    pairs = unfolded(await client.lrange(keys.suite(suite, "trials"), 0, -1))
    alive = await _alive(client, keys, suite, sorted({t for t, _ in pairs}))
    return deltas((t, r) for t, r in pairs if t in alive)


async def runs(
    client: Redis, keys: Any, suite: str, *, most: int = DEFAULT_RUNS
) -> list[RunSummary]:
    """The suite's runs, the newest (by last trial) first, at most ``most``."""
    held: dict[str, list[float]] = {}
    for run, value in (await client.hgetall(keys.suite(suite, "run"))).items():
        try:
            first, last, trials, passes = (float(x) for x in _text(value).split(" "))
        except ValueError:
            continue
        held[_text(run)] = [first, last, trials, passes]
    pending = await _pending(client, keys, suite)
    names = sorted({*held, *pending})
    pipe = client.pipeline(transaction=False)
    for run in names:
        pipe.hlen(keys.suite(suite, f"run:{run}"))
        delta = pending.get(run)
        if delta is not None:
            pipe.hmget(keys.suite(suite, f"run:{run}"), list(delta.tasks))
    replies = iter(await pipe.execute())
    out = []
    for run in names:
        tasks = int(next(replies))
        first, last, trials, passes = held.get(run, [float("inf"), float("-inf"), 0, 0])
        delta = pending.get(run)
        if delta is not None:
            tasks += sum(1 for x in next(replies) if x is None)
            first, last = min(first, delta.first), max(last, delta.last)
            trials, passes = trials + delta.trials, passes + delta.passes
        if trials > 0:
            out.append(RunSummary(run, first, last, int(trials), int(passes), tasks))
    out.sort(key=lambda r: (r.last, r.run), reverse=True)
    return out[:most]


async def run_hash(
    client: Redis, keys: Any, suite: str, run: str
) -> dict[bytes | str, bytes | str]:
    """One run's per-task ``n:c`` (as a task hash), the log's unfolded entries merged."""
    key = keys.suite(suite, f"run:{run}")
    out: dict[bytes | str, bytes | str] = {}
    cursor: int = 0
    while True:
        cursor, part = await client.hscan(key, cursor, count=_SCAN)
        out.update({_text(k): v for k, v in cast(dict[Any, Any], part).items()})
        if not cursor:
            break
    delta = (await _pending(client, keys, suite)).get(run)
    for task, (dn, dc) in (delta.tasks if delta is not None else {}).items():
        n0, c0 = _text(out.get(task, "0:0")).split(":")[:2]
        out[task] = f"{dn + int(n0)}:{dc + int(c0)}"
    return out
