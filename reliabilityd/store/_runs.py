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

import operator
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import compress, repeat
from operator import eq
from typing import Any, cast

import msgspec

from reliabilityd.store._base import Redis, _text
from reliabilityd.store._triallog import entry

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
    """What a fold adds to one run: its first and last trial, trials, passes, and per
    task [n, c]."""

    __slots__ = ("first", "last", "passes", "tasks", "trials")

    def __init__(self, ts: int) -> None:
        self.first = self.last = ts
        self.trials = self.passes = 0
        self.tasks: dict[str, list[int]] = {}


_FIRST = operator.itemgetter(0)


def _columns(body: str) -> tuple[list[str], list[str], list[str], list[str]] | None:
    """A log entry body's (tasks, codes, times, runs), one item per record: its fields
    split in one call and sliced (six per record); None when they do not come in sixes."""
    flat = body.replace("\x1e", "\x1f").split("\x1f") if body else []
    if len(flat) % 6:
        return None
    return flat[1::6], list(map(_FIRST, flat[2::6])), flat[3::6], flat[4::6]


def deltas(entries: Iterable[bytes | str]) -> dict[str, _Delta]:
    """Each run's additions from trial log entries: their counted records with a run.

    The records are split, selected and counted in C (``str.split``, slices,
    ``itertools.compress``, ``Counter.update`` over names): a fold reads tens of
    thousands of them, and a loop over records in Python cost the apply a tenth of its
    rate. An entry that names duplicates (a redelivery) is read record by record, so
    its duplicates count nothing.
    """
    trials: dict[str, Counter[str]] = {}
    passes: dict[str, Counter[str]] = {}
    stamps: set[tuple[str, str]] = set()
    for raw in entries:
        text = _text(raw)
        _, sep, rest = text.partition("\x1d")
        dupes, sep2, body = rest.partition("\x1d")
        if not (sep and sep2):
            continue
        cols = None if dupes else _columns(body)
        if cols is None:
            pairs = entry(text)[1]
            cols = _columns("\x1e".join(f"0\x1f{t}\x1f{r}" for t, r in pairs))
            if cols is None:
                continue
        tasks, codes, times, runs = cols
        if not runs:
            continue
        stamps.update(zip(runs, times, strict=True))
        named = [runs[0]] if runs.count(runs[0]) == len(runs) else sorted(set(runs))
        for run in named:
            if not run:
                continue
            mine = tasks if len(named) == 1 else list(compress(tasks, map(eq, runs, repeat(run))))
            theirs = codes if len(named) == 1 else list(compress(codes, map(eq, runs, repeat(run))))
            trials.setdefault(run, Counter()).update(mine)
            passes.setdefault(run, Counter()).update(compress(mine, map(eq, theirs, repeat("p"))))
    out: dict[str, _Delta] = {}
    for run, ts in stamps:
        if run not in trials or not ts.isdigit():
            continue
        stamp = int(ts)
        delta = out.get(run)
        if delta is None:
            out[run] = _Delta(stamp)
        else:
            delta.first, delta.last = min(delta.first, stamp), max(delta.last, stamp)
    for run, delta in out.items():
        n, c = trials[run], passes[run]
        delta.trials, delta.passes = n.total(), c.total()
        delta.tasks = {task: [k, c[task]] for task, k in n.items()}
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


def fold_args(  # noqa: PLR0917 (the fold's reads, passed through)
    keys: Any,
    suite: str,
    added: dict[str, _Delta],
    stored: Sequence[Sequence[Any]],
    alive: set[str],
    most: int,
    held: Sequence[Any],
) -> tuple[list[str], list[str | int]]:
    """The run keys and arguments of a fold (lua/fold.lua) that adds ``added`` (``deltas``)
    to the runs' ``stored`` counts (each run's HMGET of its delta's tasks), for the tasks
    still ``alive``, given the runs held (``runs``, with scores): the updated runs, then
    those retired past ``most``.

    The new counts are computed here and written whole: the fold's check of the log's
    tail makes the read and the write one step (a concurrent fold of the same entries
    writes nothing, and a forget or an expiry folds every entry before it removes).
    Each run's counts go as one string (``<task> \x1f <n>:<c>`` joined by ``\x1e``): one
    argument to encode, not two a task.
    """
    runs: list[tuple[str, _Delta, str]] = []
    for (run, delta), values in zip(added.items(), stored, strict=True):
        parts = []
        for (task, (dn, dc)), value in zip(delta.tasks.items(), values, strict=True):
            if task not in alive:
                delta.trials -= dn
                delta.passes -= dc
                continue
            n0, _, c0 = _text(value).partition(":") if value is not None else ("0", "", "0")
            parts.append(f"{task}\x1f{dn + int(n0)}:{dc + int(c0)}")
        if parts:
            runs.append((run, delta, "\x1e".join(parts)))
    retire = retiring(held, {r: d for r, d, _ in runs}, most) if runs else []
    run_keys = [keys.suite(suite, f"run:{run}") for run in [*(r for r, _, _ in runs), *retire]]
    args: list[str | int] = [len(runs), len(retire)]
    for _, delta, body in runs:
        args += (delta.first, delta.last, delta.trials, delta.passes, body)
    return run_keys, args


async def _alive(client: Redis, keys: Any, suite: str, names: Sequence[str]) -> set[str]:
    if not names:
        return set()
    held = await client.hmget(keys.suite(suite, "tasks"), list(names))
    return {t for t, h in zip(names, held, strict=True) if h is not None}


async def _pending(client: Redis, keys: Any, suite: str) -> dict[str, _Delta]:
    """The runs' counts in the log's unfolded entries, of tasks the suite holds."""
    added = deltas(await client.lrange(keys.suite(suite, "trials"), 0, -1))
    alive = await _alive(client, keys, suite, sorted({t for d in added.values() for t in d.tasks}))
    out = {}
    for run, delta in added.items():
        for task in [t for t in delta.tasks if t not in alive]:
            n, c = delta.tasks.pop(task)
            delta.trials -= n
            delta.passes -= c
        if delta.tasks:
            out[run] = delta
    return out


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
