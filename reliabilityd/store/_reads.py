"""Reads of what ingest committed: suites, counters and histograms, tasks, dead letters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from reliabilityd.stats.compare import Side
from reliabilityd.stats.histogram import Histogram
from reliabilityd.stats.lottery import LotteryCase
from reliabilityd.stats.slices import label_keys, matches
from reliabilityd.store import _recent, _runs
from reliabilityd.store._base import (
    Counters,
    DeadLetter,
    Redis,
    SuiteState,
    _count,
    _pairs,
    _text,
)
from reliabilityd.store._errors import boundary
from reliabilityd.store._recent import DEFAULT_TRIALS, TaskTrials, TrialRecord
from reliabilityd.store._runs import DEFAULT_RUNS, RunSummary
from reliabilityd.store._scripts import LOTTERY, READ, READ_WINDOWS
from reliabilityd.store._wire import pipelined
from reliabilityd.store.keys import Keys, Series

# Fields of a task hash per HSCAN round trip (Reads.task_hashes): a reply of
# this size parses in about a millisecond.
TASK_SCAN = 2000
# A series' per-task hash as the client replies it: task -> "n:c...".
TaskHashes = list[dict[bytes | str, bytes | str]]
# Width of n and c in the lottery index's members (`nnnnnnnnnn:cccccccccc:task`).
CELL_PAD = 10
_INT64_MAX = int(np.iinfo(np.int64).max)


def _histogram(packed: bytes | str) -> Histogram:
    """The read script's histogram, `n:c count n:c count ...` in one string, parsed by numpy
    in bulk.

    A live suite has hundreds of cells: one string and one split cost a
    fraction of the reply parser building an object for each of them.
    """
    return _histograms([packed])[0]


def _histograms(packed: Sequence[bytes | str]) -> list[Histogram]:
    """``_histogram`` of many replies: one parse of them all, one ``Histogram.many``.

    Parsing and checking a pipeline's replies together costs a few numpy
    calls, not a few per series (numpy's call overhead was most of a
    200-task series' parse). A reply that does not parse raises the
    ValueError it raises alone.
    """
    raws = [p if isinstance(p, bytes) else str(p).encode() for p in packed]
    cells = [raw.count(b":") for raw in raws]
    try:
        nc = _integers(b" ".join(raws), sum(cells))
    except ValueError:
        for raw in raws:  # the reply that does not parse, in its own words
            _integers(raw, raw.count(b":"))
        raise
    return Histogram.many(nc[0::3], nc[1::3], nc[2::3], cells)


def _integers(raw: bytes, cells: int) -> npt.NDArray[np.int64]:
    """The 3 x ``cells`` integers of a histogram string; ValueError if it is not that."""
    # numpy's text parser: a token that is not an integer raises; one past int64 saturates.
    nc = np.fromstring(raw.replace(b":", b" "), dtype=np.int64, sep=" ")
    if nc.size != 3 * cells or (nc.size and int(nc.max()) == _INT64_MAX):
        raise ValueError(f"a histogram reply is not (n:c, count) pairs: {raw[:80]!r}")
    return nc


@boundary
class Reads:
    """Typed reads of a suite's committed state."""

    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    async def suites(self) -> list[str]:
        return sorted(_text(s) for s in await self.client.smembers(self.keys.suites))

    async def read_state(
        self, suite: str, *, windows: bool = False, slice: str | None = None
    ) -> SuiteState:
        """Counters and histogram of one series (and each task's window), read atomically.

        The suite as a whole, or with ``slice`` (its id) one slice of it.
        """
        return (await self.read_states([suite], windows=[windows], slices=[slice]))[0]

    async def read_states(
        self,
        suites: Sequence[str],
        *,
        windows: Sequence[bool] | None = None,
        slices: Sequence[str | None] | None = None,
    ) -> list[SuiteState]:
        """``read_state`` of each series (suite i, ``slices[i]`` of it, ``windows[i]``),
        in one round trip.

        Each series' state is read atomically by its own script call; the
        calls go in one pipeline.
        """
        if not suites:
            return []
        want = [False] * len(suites) if windows is None else list(windows)
        ids: list[str | None] = [None] * len(suites) if slices is None else list(slices)
        commands: list[tuple[str | int | bytes, ...]] = []
        for suite, sid, with_windows in zip(suites, ids, want, strict=True):
            series = Series(suite, sid)
            keys = [self.keys.series(series, "meta"), self.keys.series(series, "hist")]
            if with_windows:
                commands.append(("EVAL", READ_WINDOWS, 3, *keys, self.keys.series(series, "tasks")))
            else:
                commands.append(("EVAL", READ, 2, *keys))
        replies = await pipelined(self.client, commands)
        hists = _histograms([reply[1] for reply in replies])
        return [
            _suite_state(suite, sid, reply, with_windows, hist)
            for suite, sid, reply, with_windows, hist in zip(
                suites, ids, replies, want, hists, strict=True
            )
        ]

    async def slices(self, suite: str) -> list[str]:
        """The ids of the suite's slices, sorted."""
        return sorted(_text(s) for s in await self.client.hkeys(self.keys.slices(suite)))

    async def slices_of(self, suites: Sequence[str]) -> dict[str, list[str]]:
        """Each suite's slice ids (sorted), in one round trip."""
        if not suites:
            return {}
        replies = await pipelined(self.client, [("HKEYS", self.keys.slices(s)) for s in suites])
        return {
            suite: sorted(_text(s) for s in ids) for suite, ids in zip(suites, replies, strict=True)
        }

    async def labels_seen_many(self, suites: Sequence[str]) -> dict[str, list[str]]:
        """``labels_seen`` of each suite, in one round trip."""
        if not suites:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for suite in suites:
            pipe.smembers(self.keys.labels(suite))
        return {
            suite: sorted(_text(s) for s in got)
            for suite, got in zip(suites, await pipe.execute(), strict=True)
        }

    async def labels_seen(self, suite: str) -> list[str]:
        """The label keys seen in the suite's events (at most ``keys.LABELS_KEPT``), sorted."""
        return sorted(_text(s) for s in await self.client.smembers(self.keys.labels(suite)))

    async def task_counts(self, side: str | Side) -> dict[str, tuple[int, int]]:
        """Every task's (n, c) of a side: O(tasks), for tools and comparisons, never per tick.

        A suite name or a ``Side`` without labels reads the whole suite; a
        ``Side`` with labels sums, task by task, the counts of the suite's
        slices that carry every one of those label values (``slices.matches``).
        ``ValueError`` when the suite is not sliced by a label the side names.
        """
        return task_counts_of(await self.task_hashes(side))

    async def task_hashes(self, side: str | Side) -> TaskHashes:
        """The raw per-task hashes ``task_counts`` adds up, one per series of the side.

        For a caller that parses them elsewhere (``task_counts_of``, in a
        worker thread): a large suite's hash is read ``TASK_SCAN`` fields per
        round trip, so no one reply holds the event loop for long. Not one
        atomic read: a task committed to meanwhile shows its count before or
        after that commit.
        """
        side = side if isinstance(side, Side) else Side(side)
        if side.run is not None:
            return [await _runs.run_hash(self.client, self.keys, side.suite, side.run)]
        if not side.labels:
            return [await self._task_hash(Series(side.suite))]
        ids = await self.slices(side.suite)
        known = label_keys(ids)
        missing = sorted(set(side.labels) - known)
        if missing:
            have = ", ".join(sorted(known)) or "no label: it has no slices"
            raise ValueError(
                f"suite {side.suite!r} is not sliced by {', '.join(missing)} (sliced by {have})"
            )
        return [
            await self._task_hash(Series(side.suite, sid))
            for sid in ids
            if matches(sid, side.labels)
        ]

    async def series_task_hash(self, series: Series) -> dict[bytes | str, bytes | str]:
        """One series' raw per-task hash (a suite's whole, or one slice's): O(tasks)."""
        return await self._task_hash(series)

    async def _task_hash(self, series: Series) -> dict[bytes | str, bytes | str]:
        key = self.keys.series(series, "tasks")
        out: dict[bytes | str, bytes | str] = {}
        cursor: int = 0
        while True:
            cursor, part = await self.client.hscan(key, cursor, count=TASK_SCAN)
            out.update(cast(dict[bytes | str, bytes | str], part))  # HSCAN without NOVALUES
            if not cursor:
                return out

    async def lottery_rows(
        self,
        suite: str,
        groups: Sequence[Sequence[tuple[int, int]]],
        limit: int,
        *,
        slice: str | None = None,
    ) -> list[LotteryCase]:
        """Top tasks of the ranked cell groups, by name within a group, in one round trip.

        Each cell's tasks are a lexicographic range of the lottery zset, so
        this reads at most ``limit`` names per cell, never the whole suite.
        Pass the groups from ``ranked_cell_groups(hist, k, limit)``.
        """
        return (await self.lottery_rows_many([(suite, groups)], limit, slices=[slice]))[0]

    async def lottery_rows_many(
        self,
        wanted: Sequence[tuple[str, Sequence[Sequence[tuple[int, int]]]]],
        limit: int,
        *,
        slices: Sequence[str | None] | None = None,
    ) -> list[list[LotteryCase]]:
        """``lottery_rows`` of each (suite, groups), of ``slices[i]`` of suite i when
        given, every series' ranges in one round trip."""
        out: list[list[LotteryCase]] = [[] for _ in wanted]
        if limit <= 0 or not any(groups for _, groups in wanted):
            return out
        ids: list[str | None] = [None] * len(wanted) if slices is None else list(slices)
        # One script call per series (one key each: Redis Cluster routes it),
        # reading every cell's range, instead of a ZRANGE per cell.
        commands: list[tuple[str | int | bytes, ...]] = []
        for (suite, groups), sid in zip(wanted, ids, strict=True):
            prefixes = [f"{n:0{CELL_PAD}d}:{c:0{CELL_PAD}d}:" for group in groups for n, c in group]
            if prefixes:
                key = self.keys.series(Series(suite, sid), "lottery")
                commands.append(("EVAL", LOTTERY, 1, key, limit, *prefixes))
        per_series = iter(await pipelined(self.client, commands))
        cut = 2 * CELL_PAD + 2
        for i, (_, groups) in enumerate(wanted):
            rows: list[LotteryCase] = []
            if not any(groups):
                continue
            replies = iter(cast(list[list[bytes]], next(per_series)))
            for group in groups:
                found = [
                    LotteryCase(task=_text(m)[cut:], n=n, c=c)
                    for n, c in group
                    for m in next(replies)
                ]
                found.sort(key=lambda row: row.task)
                rows.extend(found)
            out[i] = rows[:limit]
        return out

    async def trials(
        self,
        suite: str,
        task: str | None = None,
        *,
        failed: bool = False,
        limit: int = 20,
        keep: int = DEFAULT_TRIALS,
    ) -> list[TrialRecord]:
        """The suite's recent trials, newest first (``_recent.read``): one task's last
        ``keep``, or the suite's last failures (``failed``), or every task's."""
        return await _recent.read(
            self.client, self.keys, suite, task, failed=failed, limit=limit, keep=keep
        )

    async def task_trials(
        self, suite: str, tasks: Sequence[str], *, keep: int = DEFAULT_TRIALS
    ) -> TaskTrials:
        """The (n, c) and last ``keep`` trials of each of ``tasks`` the suite holds, in one
        round trip whatever their number (``_recent.read_tasks``): a page's or a
        notification's tasks together."""
        return await _recent.read_tasks(self.client, self.keys, suite, tasks, keep=keep)

    async def runs(self, suite: str, *, most: int = DEFAULT_RUNS) -> list[RunSummary]:
        """The suite's runs, newest (by last trial) first, at most ``most`` (``_runs``)."""
        return await _runs.runs(self.client, self.keys, suite, most=most)

    async def deadletter_streams(self) -> list[str]:
        """Every dead-letter stream written: the shared one and each grant's."""
        raw: Any = await self.client.smembers(self.keys.deadletter_streams)
        return sorted({self.keys.deadletter, *(_text(s) for s in raw)})

    async def deadletters(self, count: int = 100) -> list[DeadLetter]:
        """The oldest ``count`` dead letters still in the capped streams, oldest first."""
        found: list[DeadLetter] = []
        for stream in await self.deadletter_streams():
            entries: Any = await self.client.xrange(stream, count=count)
            found.extend(_deadletter(entry_id, fields) for entry_id, fields in entries)
        found.sort(key=lambda letter: _entry_order(letter.id))
        return found[:count]

    async def recent_deadletters(
        self,
        *,
        since: float,
        suite: str | None = None,
        grant: str | None = None,
        limit: int = 20,
        page: int = 200,
    ) -> list[DeadLetter]:
        """The newest dead letters written at or after ``since`` (Unix s), newest first.

        With ``suite``, only the letters filed under it; with ``grant``, only
        those in that grant's stream. Each stream is read backwards in pages
        of ``page`` until ``limit`` are found or ``since`` is passed, and the
        streams merged by entry id.
        """
        streams = (
            [self.keys.deadletter_of(grant)]
            if grant is not None
            else await self.deadletter_streams()
        )
        out: list[DeadLetter] = []
        floor = str(max(0, int(since * 1000)))
        for stream in streams:
            kept = 0
            top = "+"
            while kept < limit:
                entries: Any = await self.client.xrevrange(stream, max=top, min=floor, count=page)
                for entry_id, fields in entries:
                    letter = _deadletter(entry_id, fields)
                    if suite is None or letter.suite == suite:
                        out.append(letter)
                        kept += 1
                if len(entries) < page:
                    break
                top = f"({_text(entries[-1][0])}"
        out.sort(key=lambda letter: _entry_order(letter.id), reverse=True)
        return out[:limit]

    async def pool_sizes(self) -> dict[str, int]:
        """Suites admitted into each pool: a ``[[grants]]`` name, "" for the shared one."""
        raw: Any = await self.client.hgetall(self.keys.pool_sizes)
        return {_text(k): int(v) for k, v in raw.items()}

    async def rejected_counts(
        self, now: float, minutes: int = 60, *, only: Sequence[str] | None = None
    ) -> dict[str | None, int]:
        """Dead letters by named suite (None: none named) in the ``minutes`` up to ``now``:
        of every suite, or of the suites ``only`` names (and those none named), in one
        round trip either way."""
        last = int(now // 60)
        fields = None if only is None else [*only, ""]
        pipe = self.client.pipeline(transaction=False)
        for minute in range(last - minutes + 1, last + 1):
            key = self.keys.rejected_minute(minute)
            if fields is None:
                pipe.hgetall(key)
            else:
                pipe.hmget(key, fields)
        totals: dict[str | None, int] = {}
        for counts in await pipe.execute():
            pairs = counts.items() if fields is None else zip(fields, counts, strict=True)
            for field, value in pairs:
                if value is not None:
                    name = _text(field) or None
                    totals[name] = totals.get(name, 0) + _count(value)
        return totals

    async def rejected_of(self, suite: str, now: float, minutes: int = 60) -> int:
        """The suite's dead letters in the ``minutes`` up to ``now``: one count a minute."""
        last = int(now // 60)
        pipe = self.client.pipeline(transaction=False)
        for minute in range(last - minutes + 1, last + 1):
            pipe.hget(self.keys.rejected_minute(minute), suite)
        return sum(map(_count, await pipe.execute()))

    async def deadletter_count(self) -> int:
        """Dead letters ever written (the stream itself is capped)."""
        raw: Any = await self.client.hget(self.keys.stats, "deadletters")
        return int(raw or 0)


def _suite_state(
    suite: str, slice: str | None, reply: Any, windows: bool, hist: Histogram
) -> SuiteState:
    """A read script's reply as the series' state (the suite's, or ``slice``'s of it),
    with its histogram parsed (``_histograms``)."""
    if windows:
        meta_raw, _, values = reply
        outcomes: list[str] | None = [
            _text(v).split(":", 2)[2] if _text(v).count(":") == 2 else "" for v in values
        ]
    else:
        meta_raw = reply[0]
        outcomes = None
    meta = _pairs(meta_raw)
    last = meta.get("last_trial_at")
    counters = Counters(
        trials=int(meta.get("trials", 0)),
        errors=int(meta.get("errors", 0)),
        skips=int(meta.get("skips", 0)),
        duplicates=int(meta.get("duplicates", 0)),
        version=int(meta.get("version", 0)),
        last_trial_at=float(last) if last else None,
        slice_overflow=int(meta.get("slice_overflow", 0)),
    )
    return SuiteState(suite, counters, hist, outcomes, slice)


def _entry_order(entry_id: str) -> tuple[int, int]:
    """A stream entry id ("<ms>-<seq>") as a sortable pair."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _deadletter(entry_id: bytes | str, raw: dict[Any, Any]) -> DeadLetter:
    f = {_text(k): v for k, v in raw.items()}
    return DeadLetter(
        id=_text(entry_id),
        payload=bytes(f.get("payload", b"")),
        truncated=_text(f.get("truncated", b"0")) == "1",
        reason=_text(f.get("reason", b"")),
        source=_text(f.get("source", b"")),
        time=float(_text(f.get("time", b"0"))),
        suite=_text(f.get("suite", b"")) or None,
        reason_class=_text(f.get("class", b"other")),
        grant=_text(f.get("grant", b"")) or None,
    )


def task_counts_of(
    hashes: Sequence[Mapping[bytes | str, bytes | str]],
) -> dict[str, tuple[int, int]]:
    """Each task's (n, c), summed over the series' raw hashes (``Reads.task_hashes``)."""
    out: dict[str, tuple[int, int]] = {}
    for raw in hashes:
        for task, value in raw.items():
            n_text, c_text = _text(value).split(":", 2)[:2]
            name = _text(task)
            was = out.get(name)
            n, c = int(n_text), int(c_text)
            out[name] = (n, c) if was is None else (was[0] + n, was[1] + c)
    return out
