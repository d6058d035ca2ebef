"""Ingest: a suite's batch applied in one Lua call per chunk, and dead letters.

Dedup records live in bucket sets (``dedup``); the bucket width and the
lookback are read from Redis and cached for ``dedup.REFRESH`` seconds.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import msgspec

from reliabilityd.events import TrialEvent, named_suite
from reliabilityd.logs import emit
from reliabilityd.names import NAME_FORBIDDEN
from reliabilityd.rejections import Rejected
from reliabilityd.stats.slices import Ids
from reliabilityd.store import _recent, dedup
from reliabilityd.store._base import Applied, Redis, StreamCursor, _text
from reliabilityd.store._errors import StoreCorrupt, boundary
from reliabilityd.store._recent import Recent
from reliabilityd.store._scripts import ADMIT, APPLY, CURSOR_MAX, IMPORT_APPLY
from reliabilityd.store._wire import pipelined
from reliabilityd.store.keys import LABELS_KEPT, Keys, Series, digests

_OUTCOME_CODE = {"pass": "p", "fail": "f", "error": "e", "skip": "s"}
# Events per EVAL: bounds how long one script call holds Redis.
CHUNK = 2000
# Dead letters per round trip (each at most a few KiB): the same bound for bad input.
DEADLETTER_CHUNK = 200

# The per-minute rejected counts live a little over the hour ``status`` reads.
REJECTED_MINUTES = 60
REJECTED_TTL = (REJECTED_MINUTES + 5) * 60
# Suites this process saw admitted are not asked about again for this long.
ADMITTED_FOR = 60.0


class Slicing(msgspec.Struct, frozen=True):
    """How one suite's events are sliced: the label keys, and the most slices it may have."""

    slice_by: tuple[str, ...]
    max_slices: int


def _label_keys(chunk: Sequence[TrialEvent]) -> list[str]:
    """The distinct label keys of the chunk's events (at most ``LABELS_KEPT``, each a name)."""
    seen: dict[str, None] = {}
    for event in chunk:
        if event.labels:
            for key in event.labels:
                if key not in seen and 0 < len(key) <= 200 and not NAME_FORBIDDEN.search(key):
                    seen[key] = None
                    if len(seen) >= LABELS_KEPT:
                        return list(seen)
    return list(seen)


def _runs(events: Sequence[TrialEvent]) -> list[tuple[bool, Sequence[TrialEvent]]]:
    """Consecutive events by their ``ledger`` flag, in order (the commit order counts)."""
    if not any(e.ledger for e in events):
        return [(False, events)]
    return [(flag, list(group)) for flag, group in itertools.groupby(events, lambda e: e.ledger)]


@boundary
class Ingest:
    """Events in, counted once; rejected input out to the dead-letter stream."""

    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys
        # The dedup bucket width last read, the lookback, and when (monotonic clock).
        self._dedup: tuple[int, int, float] | None = None
        # Suites admitted (``admit``), and when that set was started (monotonic clock).
        self._admitted: set[str] = set()
        self._admitted_at = time.monotonic()

    async def admit(self, pools: Mapping[str, tuple[str, int]], most: int) -> dict[str, str]:
        """The suites refused, each with the cap it met ("pool" or "deployment").

        ``pools`` gives each suite of a batch its pool and the pool's quota
        (``Config.pool_of``): a new suite is admitted while its pool holds
        fewer than its quota and the deployment fewer than ``most``. One
        atomic script on the suite set and its pool counts (ADMIT), so
        replicas racing for the last places admit within both between them.
        Suites admitted here are not asked about again for ``ADMITTED_FOR``
        seconds: a batch of known suites costs no round trip.
        """
        if time.monotonic() - self._admitted_at > ADMITTED_FOR:
            self._admitted.clear()
            self._admitted_at = time.monotonic()
        ask = [s for s in pools if s not in self._admitted]
        if not ask:
            return {}
        args: list[str | int] = [most]
        for suite in ask:
            pool, pool_most = pools[suite]
            args.extend((suite, pool, pool_most))
        keys = self.keys
        reply: Any = await self.client.eval(
            ADMIT, 3, keys.suites, keys.suite_pools, keys.pool_sizes, *args
        )
        refused = {_text(reply[i]): _text(reply[i + 1]) for i in range(0, len(reply), 2)}
        self._admitted.update(s for s in ask if s not in refused)
        return refused

    async def dedup_width(self, dedup_ttl: int) -> int:
        """The deployment's dedup bucket width, re-read every ``dedup.REFRESH`` seconds."""
        return (await self.dedup_view(dedup_ttl))[0]

    async def dedup_view(self, dedup_ttl: int) -> tuple[int, int]:
        """(width, lookback): the bucket width and the longest dedup TTL any writer uses now.

        Re-read every ``dedup.REFRESH`` seconds, entering this writer's TTL each
        time. A width that cannot be read keeps the last one read; with none,
        the Redis error (ingest pauses with the reason).
        """
        cached = self._dedup
        clock = time.monotonic()
        if cached is not None and clock - cached[2] <= dedup.REFRESH:
            return cached[0], cached[1]
        try:
            width = await dedup.load_width(self.client, self.keys, dedup_ttl)
        except ValueError as exc:
            if cached is None:
                raise StoreCorrupt(str(exc)) from exc
            emit(logging.WARNING, "dedup_width_unreadable", error=str(exc), keeping=cached[0])
            width = cached[0]
        lookback = await dedup.register_ttl(self.client, self.keys, dedup_ttl)
        spans = len(dedup.plan(width, dedup_ttl, 0.0, lookback=lookback).buckets)
        if spans > dedup.MANY_BUCKETS and (cached is None or cached[1] != lookback):
            emit(
                logging.WARNING,
                "dedup_many_buckets",
                bucket_keys_per_call=spans,
                bucket_seconds=width,
                longest_dedup_ttl=lookback,
                hint="the width was fixed by the deployment's first writer, at a quarter of "
                "its dedup TTL; a much longer TTL costs Redis a lookup per bucket per call",
            )
        if cached is None or cached[0] != width:
            emit(logging.INFO, "dedup_buckets", bucket_seconds=width)
        self._dedup = (width, lookback, clock)
        return width, lookback

    def apply_call(
        self,
        suite: str,
        chunk: Sequence[TrialEvent],
        dedup_ttl: int,
        window: int,
        stamp: str,
        *,
        width: int,
        lookback: int = 0,
        slicing: Slicing | None = None,
        recent: Recent | None = None,
    ) -> tuple[list[str], list[str | int | bytes]]:
        """KEYS and ARGV of one APPLY call: see lua/apply.lua.

        With ``slicing`` (the suite's ``slice_by`` and its most slices), each
        event also counts in the slice its labels name; every event's labels
        must give a slice id (``stats.slices.slice_id``; the daemon
        dead-letters those that do not).
        """
        keys, args, _ = self._call(
            suite,
            chunk,
            dedup_ttl,
            window,
            stamp,
            width=width,
            lookback=lookback,
            slicing=slicing,
            recent=recent,
        )
        return keys, args

    def _call(
        self,
        suite: str,
        chunk: Sequence[TrialEvent],
        dedup_ttl: int,
        window: int,
        stamp: str,
        *,
        width: int,
        lookback: int,
        slicing: Slicing | None,
        recent: Recent | None,
    ) -> tuple[list[str], list[str | int | bytes], dict[str, int]]:
        positions: dict[str, int] = {}
        places: list[int] = []
        if slicing is not None and slicing.slice_by:
            ids = Ids(slicing.slice_by)
            for event in chunk:
                sid = ids(event.labels)
                places.append(positions.setdefault(sid, len(positions) + 1))
        else:
            places = [0] * len(chunk)
        seen = _label_keys(chunk)
        keys = [self.keys.suite(suite, name) for name in ("meta", "tasks", "hist", "lottery")]
        keys += [self.keys.slices(suite), self.keys.labels(suite), self.keys.suite(suite, "trials")]
        keys.append(self.keys.suite(suite, "totals"))
        for sid in positions:
            series = Series(suite, sid)
            keys += [
                self.keys.series(series, name)
                for name in ("meta", "tasks", "hist", "lottery", "totals")
            ]
        p = dedup.plan(width, dedup_ttl, float(stamp), lookback=lookback)
        keys += [self.keys.dedup_bucket(suite, width, b) for b in p.buckets]
        most = slicing.max_slices if slicing is not None else 0
        args: list[str | int | bytes] = [window, stamp, len(p.buckets), p.write - p.first + 1]
        records = ""
        if recent is not None:
            # A suite that keeps no recent trials logs only its trials with a run (for
            # the per-run counts), and no url.
            links, outcome = recent.keep_url and recent.trials > 0, _OUTCOME_CODE
            records = _recent.chunk_records(
                (
                    (
                        e.task,
                        outcome[e.outcome],
                        e.trial,
                        None if e.ts is None else str(int(e.ts)),
                        e.run,
                        e.url if links else None,
                    )
                    for e in chunk
                ),
                str(int(float(stamp))),
                runs_only=recent.trials == 0,
            )
        args += (p.life, len(positions), most, len(seen), int(recent is not None))
        args += (_recent.LOG_CAP, records, *positions, *seen)
        args += digests([(e.task, e.trial) for e in chunk])
        outcome = _OUTCOME_CODE
        for event, place in zip(chunk, places, strict=True):
            args += (event.task, outcome[event.outcome], place)
        return keys, args, positions

    async def is_recorded(self, suite: str, task: str, trial: str, *, dedup_ttl: int) -> bool:
        """Whether a (task, trial) has a live dedup record a writer with ``dedup_ttl`` would see."""
        width, lookback = await self.dedup_view(dedup_ttl)
        (digest,) = digests([(task, trial)])
        p = dedup.plan(width, dedup_ttl, time.time(), lookback=lookback)
        for bucket in p.buckets:
            key = self.keys.dedup_bucket(suite, width, bucket)
            if await self.client.execute_command("SISMEMBER", key, digest):
                return True
        return False

    async def apply(
        self,
        batches: Mapping[str, Sequence[TrialEvent]],
        *,
        windows: Mapping[str, int],
        dedup_ttl: int,
        now: float | None = None,
        cursor: StreamCursor | None = None,
        touch: Collection[str] = (),
        sent: asyncio.Event | None = None,
        slicing: Mapping[str, Slicing] | None = None,
        recent: Mapping[str, Recent] | None = None,
    ) -> list[Applied]:
        """Apply each suite's events (one round trip), atomically per chunk of a suite.

        A suite's events go in chunks of at most ``CHUNK`` per EVAL, so one
        huge batch never blocks Redis for long; each chunk is atomic, and
        re-applying any of them is harmless (dedup). The same round trip
        marks every suite of the batch changed (the CI loop takes the marks)
        and, for a stream source, keeps the last committed entry id. The
        marks cannot be written by the script itself on a cluster (another
        hash slot); a failure after the script ran leaves the input
        unacknowledged, and its redelivery marks the suite again.

        With ``slicing`` for a suite, each of its events counts in the whole
        and in its slice, in the same call; the marks name each slice the
        batch touched as a series of its own (``Series.member``).

        ``recent`` names the suites that keep their last trials (``Recent``):
        the same call logs their counted trials' records (a duplicate's is
        never read back), and a suite whose log grew to ``_recent.FOLD_AT``
        entries is folded into its tasks' last trials after the round trip.
        """
        slicing = slicing or {}
        recent = recent or {}
        if not batches and cursor is None:
            return []
        stamp = repr(time.time() if now is None else now)
        width, lookback = await self.dedup_view(dedup_ttl)
        commands: list[tuple[str | int | bytes, ...]] = []
        # The idle index first (each task's last event, for idle expiry): a
        # task touched before its trial is applied cannot be expired between
        # the two and lose that trial. Idempotent on a retry.
        touched = [suite for suite in batches if suite in touch]
        for suite in touched:
            tasks = dict.fromkeys(e.task for e in batches[suite])
            scored = [x for task in tasks for x in (stamp, task)]
            commands.append(("ZADD", self.keys.suite(suite, "touched"), *scored))
        calls: list[str] = []
        marks: dict[str, None] = dict.fromkeys(batches)
        # Per call, the size of a ledgered chunk (its dropped events are duplicates), else -1.
        sizes: list[int] = []
        for suite, events in batches.items():
            for ledgered, run in _runs(events):
                for start in range(0, len(run), CHUNK):
                    chunk = run[start : start + CHUNK]
                    keys, args, named = self._call(
                        suite,
                        chunk,
                        dedup_ttl,
                        windows.get(suite, 0),
                        stamp,
                        width=width,
                        lookback=lookback,
                        slicing=slicing.get(suite),
                        recent=recent.get(suite),
                    )
                    marks.update(dict.fromkeys(Series(suite, sid).member for sid in named))
                    # EVAL, not EVALSHA: redis-py refuses pipelined EVALSHA on a
                    # cluster, and Redis caches the compiled script by its hash anyway.
                    if ledgered:
                        keys.append(self.keys.imported(suite))
                        commands.append(("EVAL", IMPORT_APPLY, len(keys), *keys, *args))
                    else:
                        commands.append(("EVAL", APPLY, len(keys), *keys, *args))
                    calls.append(suite)
                    sizes.append(len(chunk) if ledgered else -1)
        if batches:
            commands.append(("SADD", self.keys.suites, *batches))
            commands.append(("SADD", self.keys.changed, *marks))
        if cursor is not None:
            key = self.keys.stream_cursor(cursor.stream, cursor.group)
            commands.append(("EVAL", CURSOR_MAX, 1, key, cursor.entry_id))
        replies = await pipelined(self.client, commands, sent)
        totals: dict[str, list[int]] = {}
        scripts = replies[len(touched) : len(touched) + len(calls)]
        fold: set[str] = set()
        for suite, size, reply in zip(calls, sizes, scripts, strict=True):
            counted, errors, skips, dups, version, passes, overflow, logged = (
                int(x) for x in reply
            )
            if logged >= _recent.FOLD_AT:
                fold.add(suite)
            if size >= 0:
                dups = size - (counted + errors + skips)
            acc = totals.setdefault(suite, [0, 0, 0, 0, 0, 0, 0])
            acc[0] += counted
            acc[1] += errors
            acc[2] += skips
            acc[3] += dups
            acc[4] = max(acc[4], version)
            acc[5] += passes
            acc[6] += overflow
        for suite in fold:
            # After the commit, and never failing it: a fold that cannot run now runs
            # after a later apply (the log keeps every entry till then, up to its cap).
            # Inside apply the boundary has not translated redis-py's errors yet, so
            # any error is taken here (CancelledError is no Exception: it goes on).
            try:
                await _recent.fold(
                    self.client, self.keys, suite, recent[suite], down_to=_recent.FOLD_AT // 2
                )
            except Exception as exc:  # the commit is done; only the fold waits
                error = f"{type(exc).__name__}: {exc}"
                emit(logging.WARNING, "recent_fold_deferred", suite=suite, error=error)
        return [Applied(suite, *acc) for suite, acc in totals.items()]

    async def fold(self, suite: str, recent: Recent, *, down_to: int = 0) -> bool:
        """Fold the suite's trial log into its tasks' last trials (``_recent.fold``)."""
        return await _recent.fold(self.client, self.keys, suite, recent, down_to=down_to)

    async def deadletter(
        self,
        rejected: Iterable[tuple[Rejected, str]],
        *,
        maxlen: int,
        grant_of: Callable[[str], str | None] = lambda suite: None,
        keep_bytes: int = 2048,
        keep_reason: int = 1024,
    ) -> int:
        """Append (rejected input, source) pairs to the capped dead-letter streams.

        Each letter is filed under a suite (``Rejected.suite`` when set, else
        the one its payload names, "" when none) and goes to the stream of
        that suite's grant (``grant_of``, a ``[[grants]]`` name or None), or,
        naming no suite, to the stream of the grant that sent it; the rest go
        to the shared stream. Each stream is capped at ``maxlen``, so one
        tenant's letters never evict another's. In round trips of at most
        ``DEADLETTER_CHUNK`` entries, each entry at most ``keep_bytes`` of
        payload and ``keep_reason`` characters of reason, so no batch of bad
        input holds Redis for long. Each letter carries its suite, its grant,
        its reason and reason class (``rejections.REASON_CLASSES``) and its
        source; per-minute counts by suite (``rejected_minute``) keep the last
        hour's totals without reading the streams. At least once: a retry
        after a reply lost to a Redis crash may write (and count) a batch's
        letters again, which a diagnostic log can bear.
        """
        items = list(rejected)
        clock = time.time()
        now = repr(clock)
        for start in range(0, len(items), DEADLETTER_CHUNK):
            chunk = items[start : start + DEADLETTER_CHUNK]
            pipe = self.client.pipeline(transaction=False)
            by_suite: dict[str, int] = {}
            streams: set[str] = set()
            for item, source in chunk:
                suite = item.suite if item.suite is not None else named_suite(item.raw) or ""
                grant = grant_of(suite) if suite else item.grant
                by_suite[suite] = by_suite.get(suite, 0) + 1
                stream = self.keys.deadletter_of(grant)
                streams.add(stream)
                pipe.xadd(
                    stream,
                    {
                        "payload": item.raw[:keep_bytes],
                        "truncated": int(len(item.raw) > keep_bytes),
                        "reason": item.reason[:keep_reason],
                        "class": item.reason_class,
                        "suite": suite,
                        "grant": grant or "",
                        "source": source,
                        "time": now,
                    },
                    maxlen=maxlen,
                    approximate=True,
                )
            pipe.sadd(self.keys.deadletter_streams, *sorted(streams))
            pipe.hincrby(self.keys.stats, "deadletters", len(chunk))
            minute = self.keys.rejected_minute(int(clock // 60))
            for suite, count in by_suite.items():
                pipe.hincrby(minute, suite, count)
            pipe.expire(minute, REJECTED_TTL)
            await pipe.execute()
        return len(items)
