"""Redis I/O for ingest and reads: batches in, counters, histograms and snapshots out.

Key names live in ``keys.py`` and Lua scripts in ``scripts.py``; alert
states, outboxes and leases in ``alertstore.py``; the stream source's
commands in ``streamstore.py``. Together they are the only modules that name
a key or send a Redis command. Callers get Structs, ints
and Histograms, never raw bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, cast

import hiredis
import msgspec
import numpy as np
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError, ResponseError

from reliabilityd.events import Rejected, TrialEvent
from reliabilityd.logs import emit
from reliabilityd.stats.histogram import Histogram
from reliabilityd.stats.lottery import LotteryCase
from reliabilityd.store import dedup
from reliabilityd.store._alerts import Redis
from reliabilityd.store._scripts import (
    APPLY,
    CLAIM,
    CURSOR_MAX,
    DEADLETTER,
    EXPIRE_IDLE,
    FORGET,
    HINCRBY_ONCE,
    IMPORT_APPLY,
    READ,
    READ_WINDOWS,
    WRITE_SNAPSHOT,
)
from reliabilityd.store._streams import StreamStore
from reliabilityd.store.dedup import DedupLayout
from reliabilityd.store.keys import digests, glob_escape

__all__ = ["Redis", "Store", "connect"]

_OUTCOME_CODE = {"pass": "p", "fail": "f", "error": "e", "skip": "s"}
_CELL_PAD = 10
# Events per EVAL: bounds how long one script call holds Redis.
CHUNK = 2000
# Seconds a write-once marker outlives a reply that never came (see DEADLETTER).
ONCE_SECONDS = 3600
# A marker left behind expires by itself.
_CLEANUP_ERRORS = (RedisError, OSError)
# KEYS of FORGET and EXPIRE_IDLE, in order.
_FORGET_KEYS = ("meta", "tasks", "hist", "lottery", "touched")


class Counters(msgspec.Struct, frozen=True):
    """A suite's lifetime counters at one version."""

    trials: int = 0
    errors: int = 0
    skips: int = 0
    duplicates: int = 0
    version: int = 0
    last_trial_at: float | None = None


class DeadLetter(msgspec.Struct, frozen=True):
    """One rejected input as stored in the dead-letter stream."""

    id: str
    payload: bytes
    truncated: bool
    reason: str
    source: str
    time: float


class StreamCursor(msgspec.Struct, frozen=True):
    """The last entry id of a stream batch, committed with the batch."""

    stream: str
    group: str
    entry_id: str


class SuiteState(msgspec.Struct, frozen=True):
    suite: str
    counters: Counters
    hist: Histogram
    # Each task's last outcomes, oldest first ("1" = pass), when asked for.
    windows: list[str] | None = None


class Applied(msgspec.Struct, frozen=True):
    """What one suite's batch changed."""

    suite: str
    counted: int
    errors: int
    skips: int
    duplicates: int
    version: int
    # Of the counted trials, how many passed.
    passes: int = 0


def _runs(events: Sequence[TrialEvent]) -> list[tuple[bool, Sequence[TrialEvent]]]:
    """Consecutive events by their ``ledger`` flag, in order (the commit order counts)."""
    if not any(e.ledger for e in events):
        return [(False, events)]
    return [(flag, list(group)) for flag, group in itertools.groupby(events, lambda e: e.ledger)]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _pairs(flat: Sequence[bytes | str]) -> dict[str, str]:
    it = iter(flat)
    return {_text(k): _text(v) for k, v in zip(it, it, strict=True)}


def _histogram(flat: Sequence[bytes | str]) -> Histogram:
    """The hist hash's flat HGETALL reply (`n:c`, count, ...) parsed by numpy in bulk.

    A live suite has hundreds of cells; parsing them one by one in Python
    cost as much as the suite's whole CI.
    """
    if not flat:
        return Histogram([], [], [])
    # Every element has the client's reply type: bytes, or str when it decodes.
    raw = cast(list[bytes], flat) if isinstance(flat[0], bytes) else [str(x).encode() for x in flat]
    nc = np.array(b" ".join(raw[0::2]).replace(b":", b" ").split(), dtype=np.int64)
    return Histogram(nc[0::2], nc[1::2], np.array(raw[1::2], dtype=np.int64))


def connect(url: str, *, cluster: bool = False, timeout: float = 10.0) -> Redis:
    """A client for a single node or a cluster, with timeouts on every call."""
    if cluster:
        return RedisCluster.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    return aioredis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)


async def pipelined(
    client: Redis,
    commands: Sequence[tuple[str | int | bytes, ...]],
    sent: asyncio.Event | None = None,
) -> list[Any]:
    """Send the commands in one write, read every reply in order: ingest's round trip.

    hiredis packs the commands in C (redis-py's pipeline packs them in
    Python, which cost 2 us per event at one event per message). Every reply
    is read before an error reply is raised, so the connection stays in step;
    any other failure, cancellation included, drops the connection. On a
    cluster, redis-py's pipeline routes each command to its node. ``sent`` is
    set once the request is written (on a cluster, as it is handed over).
    """
    if isinstance(client, RedisCluster):
        pipe = client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        if sent is not None:
            sent.set()
        return await pipe.execute()
    pool = client.connection_pool
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        # (hiredis's stub types the argument as a 1-tuple; it takes any length.)
        packed = [hiredis.pack_command(c) for c in commands]  # type: ignore[arg-type]
        await conn.send_packed_command(b"".join(packed))
        if sent is not None:
            sent.set()
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(await conn.read_response())
            except ResponseError as exc:
                replies.append(exc)
    except BaseException:
        await conn.disconnect()
        raise
    finally:
        await pool.release(conn)
    for reply in replies:
        if isinstance(reply, ResponseError):
            raise reply
    return replies


class Store(StreamStore):
    """reliabilityd's view of Redis."""

    # The dedup layout last read, the lookback, and when (monotonic clock).
    _dedup: tuple[DedupLayout, int, float] | None = None

    # --- keys (kept for tools and tests; names come from Keys) -------------

    def key(self, suite: str, name: str) -> str:
        return self.keys.suite(suite, name)

    @property
    def suites_key(self) -> str:
        return self.keys.suites

    @property
    def deadletter_key(self) -> str:
        return self.keys.deadletter

    @property
    def stats_key(self) -> str:
        return self.keys.stats

    def heartbeat_key(self, instance: str) -> str:
        return self.keys.heartbeat(instance)

    # --- ingest -----------------------------------------------------------

    async def dedup_layout(self, dedup_ttl: int) -> DedupLayout:
        """The deployment's dedup layout, re-read every ``dedup.REFRESH`` seconds."""
        return (await self._dedup_view(dedup_ttl))[0]

    async def _dedup_view(self, dedup_ttl: int) -> tuple[DedupLayout, int]:
        """(layout, lookback): the layout and the longest dedup TTL any writer uses now.

        Re-read every ``dedup.REFRESH`` seconds, entering this writer's TTL each
        time. A layout that cannot be read keeps the last one read; with none,
        DedupLayoutError (a Redis error: ingest pauses with the reason).
        """
        cached = self._dedup
        clock = time.monotonic()
        if cached is not None and clock - cached[2] <= dedup.REFRESH:
            return cached[0], cached[1]
        try:
            layout = await dedup.load(self.client, self.keys, dedup_ttl)
        except dedup.DedupLayoutError as exc:
            if cached is None:
                raise
            emit(logging.WARNING, "dedup_layout_unreadable", error=str(exc), keeping=cached[0])
            layout = cached[0]
        lookback = await dedup.register_ttl(self.client, self.keys, dedup_ttl)
        spans = len(dedup.plan(layout.width, dedup_ttl, 0.0, lookback=lookback).buckets)
        if spans > dedup.MANY_BUCKETS and (cached is None or cached[1] != lookback):
            emit(
                logging.WARNING,
                "dedup_many_buckets",
                bucket_keys_per_call=spans,
                bucket_seconds=layout.width,
                longest_dedup_ttl=lookback,
                hint="the width was fixed by the deployment's first writer, at a quarter of "
                "its dedup TTL; a much longer TTL costs Redis a lookup per bucket per call",
            )
        if cached is None or cached[0] != layout:
            emit(
                logging.INFO,
                "dedup_layout",
                layout=layout.layout,
                bucket_seconds=layout.width,
                per_trial_keys_honoured_until=layout.keys_until or None,
            )
        self._dedup = (layout, lookback, clock)
        return layout, lookback

    def _apply_call(
        self,
        suite: str,
        chunk: Sequence[TrialEvent],
        dedup_ttl: int,
        window: int,
        stamp: str,
        *,
        layout: DedupLayout,
        lookback: int = 0,
    ) -> tuple[list[str], list[str | int | bytes]]:
        """KEYS and ARGV of one APPLY call: see scripts.APPLY."""
        now = float(stamp)
        keys = [self.key(suite, name) for name in ("meta", "tasks", "hist", "lottery")]
        p = dedup.plan(layout.width, dedup_ttl, now, lookback=lookback)
        keys += [self.keys.dedup_bucket(suite, layout.width, b) for b in p.buckets]
        digested = digests([(e.task, e.trial) for e in chunk])
        code = layout.code(now)
        if code != "s":
            keys += self.keys.seen_of(suite, digested)
        args: list[str | int | bytes] = [dedup_ttl, window, stamp, code]
        args += (len(p.buckets), p.write - p.first + 1, p.life, *digested)
        outcome = _OUTCOME_CODE
        for event in chunk:
            args += (event.task, outcome[event.outcome])
        return keys, args

    async def is_recorded(self, suite: str, task: str, trial: str, *, dedup_ttl: int) -> bool:
        """Whether a (task, trial) has a live dedup record a writer with ``dedup_ttl`` would see."""
        layout, lookback = await self._dedup_view(dedup_ttl)
        (digest,) = digests([(task, trial)])
        p = dedup.plan(layout.width, dedup_ttl, time.time(), lookback=lookback)
        for bucket in p.buckets:
            key = self.keys.dedup_bucket(suite, layout.width, bucket)
            if await self.client.execute_command("SISMEMBER", key, digest):
                return True
        return bool(await self.client.exists(self.keys.seen_of(suite, [digest])[0]))

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
        """
        if not batches and cursor is None:
            return []
        stamp = repr(time.time() if now is None else now)
        layout, lookback = await self._dedup_view(dedup_ttl)
        commands: list[tuple[str | int | bytes, ...]] = []
        # The idle index first (each task's last event, for idle expiry): a
        # task touched before its trial is applied cannot be expired between
        # the two and lose that trial. Idempotent on a retry.
        touched = [suite for suite in batches if suite in touch]
        for suite in touched:
            tasks = dict.fromkeys(e.task for e in batches[suite])
            scored = [x for task in tasks for x in (stamp, task)]
            commands.append(("ZADD", self.key(suite, "touched"), *scored))
        calls: list[str] = []
        sizes: list[int] = []
        for suite, events in batches.items():
            for ledgered, run in _runs(events):
                for start in range(0, len(run), CHUNK):
                    chunk = run[start : start + CHUNK]
                    keys, args = self._apply_call(
                        suite,
                        chunk,
                        dedup_ttl,
                        windows.get(suite, 0),
                        stamp,
                        layout=layout,
                        lookback=lookback,
                    )
                    # EVAL, not EVALSHA: redis-py refuses pipelined EVALSHA on a
                    # cluster, and Redis caches the compiled script by its hash anyway.
                    if ledgered:
                        keys.append(self.imported_key(suite))
                        commands.append(("EVAL", IMPORT_APPLY, len(keys), *keys, *args))
                    else:
                        commands.append(("EVAL", APPLY, len(keys), *keys, *args))
                    calls.append(suite)
                    # A ledgered chunk drops what the ledger holds: those are duplicates.
                    sizes.append(len(chunk) if ledgered else -1)
        if batches:
            commands.append(("SADD", self.keys.suites, *batches))
            commands.append(("SADD", self.keys.changed, *batches))
        if cursor is not None:
            key = self.keys.stream_cursor(cursor.stream, cursor.group)
            commands.append(("EVAL", CURSOR_MAX, 1, key, cursor.entry_id))
        replies = await pipelined(self.client, commands, sent)
        totals: dict[str, list[int]] = {}
        scripts = replies[len(touched) : len(touched) + len(calls)]
        for suite, size, reply in zip(calls, sizes, scripts, strict=True):
            counted, errors, skips, dups, version, passes = (int(x) for x in reply)
            if size >= 0:
                dups = size - (counted + errors + skips)
            acc = totals.setdefault(suite, [0, 0, 0, 0, 0, 0])
            acc[0] += counted
            acc[1] += errors
            acc[2] += skips
            acc[3] += dups
            acc[4] = max(acc[4], version)
            acc[5] += passes
        return [Applied(suite, *acc) for suite, acc in totals.items()]

    async def deadletter(
        self,
        rejected: Iterable[tuple[Rejected, str]],
        *,
        maxlen: int,
        keep_bytes: int = 2048,
        token: str | None = None,
    ) -> int:
        """Append (rejected input, source) pairs to the capped dead-letter stream, one trip.

        Calls with the same ``token`` write the letters and count them once:
        a retry after a reply lost to a Redis crash adds nothing. The token's
        markers are dropped once the reply is in (they expire anyway).
        """
        items = list(rejected)
        if not items:
            return 0
        commands, markers = self.deadletter_commands(
            items, maxlen=maxlen, keep_bytes=keep_bytes, token=token or secrets.token_hex(8)
        )
        await pipelined(self.client, commands)
        with contextlib.suppress(*_CLEANUP_ERRORS):
            await pipelined(self.client, [("DEL", m) for m in markers])
        return len(items)

    def deadletter_commands(
        self, items: Sequence[tuple[Rejected, str]], *, maxlen: int, keep_bytes: int, token: str
    ) -> tuple[list[tuple[str | int | bytes, ...]], tuple[str, str]]:
        """The round trip of ``deadletter`` and the token's two markers."""
        now = repr(time.time())
        args: list[str | int | bytes] = [maxlen, ONCE_SECONDS]
        for item, source in items:
            raw = item.raw[:keep_bytes]
            args += (raw, int(len(item.raw) > keep_bytes), item.reason, source, now)
        stream, stats = self.deadletter_key, self.stats_key
        markers = (self.keys.once(stream, token), self.keys.once(stats, token))
        return [
            ("EVAL", DEADLETTER, 2, stream, markers[0], *args),
            ("EVAL", HINCRBY_ONCE, 2, stats, markers[1], "deadletters", len(items), ONCE_SECONDS),
        ], markers

    async def deadletters(self, count: int = 100) -> list[DeadLetter]:
        """The oldest ``count`` dead letters still in the capped stream."""
        entries: Any = await self.client.xrange(self.deadletter_key, count=count)
        out = []
        for entry_id, fields in entries:
            f = {_text(k): v for k, v in fields.items()}
            out.append(
                DeadLetter(
                    id=_text(entry_id),
                    payload=bytes(f.get("payload", b"")),
                    truncated=_text(f.get("truncated", b"0")) == "1",
                    reason=_text(f.get("reason", b"")),
                    source=_text(f.get("source", b"")),
                    time=float(_text(f.get("time", b"0"))),
                )
            )
        return out

    async def deadletter_count(self) -> int:
        """Dead letters ever written (the stream itself is capped)."""
        raw: Any = await self.client.hget(self.stats_key, "deadletters")
        return int(raw or 0)

    # --- reading ----------------------------------------------------------

    async def suites(self) -> list[str]:
        return sorted(_text(s) for s in await self.client.smembers(self.suites_key))

    async def read_state(self, suite: str, *, windows: bool = False) -> SuiteState:
        """Counters and histogram of one suite (and each task's window), read atomically."""
        keys = [self.key(suite, "meta"), self.key(suite, "hist")]
        if windows:
            reply = await self.client.eval(READ_WINDOWS, 3, *keys, self.key(suite, "tasks"))
            meta_raw, hist_raw, values = reply
            outcomes = [
                _text(v).split(":", 2)[2] if _text(v).count(":") == 2 else "" for v in values
            ]
        else:
            meta_raw, hist_raw = await self.client.eval(READ, 2, *keys)
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
        )
        return SuiteState(suite, counters, _histogram(hist_raw), outcomes)

    async def task_counts(self, suite: str) -> dict[str, tuple[int, int]]:
        """Every task's (n, c): O(tasks), for tests and tools, never on the tick path."""
        raw = await self.client.hgetall(self.key(suite, "tasks"))
        out: dict[str, tuple[int, int]] = {}
        for task, value in raw.items():
            n, c = _text(value).split(":")[:2]
            out[_text(task)] = (int(n), int(c))
        return out

    async def versions(self, suites: Sequence[str]) -> list[tuple[int, int]]:
        """(data version, snapshot version) per suite; -1 when there is no snapshot."""
        if not suites:
            return []
        pipe = self.client.pipeline(transaction=False)
        for suite in suites:
            pipe.hget(self.key(suite, "meta"), "version")
            pipe.hget(self.key(suite, "snapshot"), "version")
        raw = await pipe.execute()
        return [
            (int(raw[i] or 0), int(raw[i + 1]) if raw[i + 1] is not None else -1)
            for i in range(0, len(raw), 2)
        ]

    async def lottery_rows(
        self, suite: str, groups: Sequence[Sequence[tuple[int, int]]], limit: int
    ) -> list[LotteryCase]:
        """Top tasks of the ranked cell groups, by name within a group, in one round trip.

        Each cell's tasks are a lexicographic range of the lottery zset, so
        this reads at most ``limit`` names per cell, never the whole suite.
        Pass the groups from ``ranked_cell_groups(hist, k, limit)``.
        """
        if not groups or limit <= 0:
            return []
        key = self.key(suite, "lottery")
        pipe = self.client.pipeline(transaction=False)
        for group in groups:
            for n, c in group:
                prefix = f"{n:0{_CELL_PAD}d}:{c:0{_CELL_PAD}d}:"
                # ';' sorts right after ':', so "(prefix;" bounds the cell's range.
                pipe.zrange(key, f"[{prefix}", f"({prefix[:-1]};", bylex=True, offset=0, num=limit)
        replies = iter(await pipe.execute())
        cut = 2 * _CELL_PAD + 2
        rows: list[LotteryCase] = []
        for group in groups:
            found = [
                LotteryCase(task=_text(m)[cut:], n=n, c=c) for n, c in group for m in next(replies)
            ]
            found.sort(key=lambda row: row.task)
            rows.extend(found)
        return rows[:limit]

    async def snapshot(self, suite: str) -> dict[str, str]:
        raw = await self.client.hgetall(self.key(suite, "snapshot"))
        return {_text(k): _text(v) for k, v in raw.items()}

    async def snapshot_json(self, suite: str) -> bytes | None:
        """Only the snapshot document, without the flat fields."""
        raw: Any = await self.client.hget(self.key(suite, "snapshot"), "json")
        return None if raw is None else bytes(raw)

    async def snapshot_docs(self, suites: Sequence[str]) -> list[bytes | None]:
        """The newest stored snapshot document of each suite, in one round trip."""
        if not suites:
            return []
        pipe = self.client.pipeline(transaction=False)
        for suite in suites:
            pipe.hget(self.key(suite, "snapshot"), "json")
        return [None if raw is None else bytes(raw) for raw in await pipe.execute()]

    async def write_snapshot(
        self,
        suite: str,
        version: int,
        ci_fields: Mapping[str, str | int | float],
        value_fields: Mapping[str, str | int | float],
    ) -> tuple[bool, bool]:
        """Write the CI part and the value part, each unless a newer one is stored.

        Returns (ci part written, value part written).
        """
        args: list[Any] = [version, len(ci_fields)]
        for field, value in ci_fields.items():
            args += [field, value]
        for field, value in value_fields.items():
            args += [field, value]
        wrote = int(await self.client.eval(WRITE_SNAPSHOT, 1, self.key(suite, "snapshot"), *args))
        return bool(wrote & 1), bool(wrote & 2)

    # --- change marks -----------------------------------------------------

    async def mark_changed(self, suites: Sequence[str]) -> None:
        """Mark suites for a new snapshot (the next claim picks them up)."""
        if suites:
            await self.client.sadd(self.keys.changed, *suites)

    async def mark_stale(self, suites: Sequence[str]) -> list[str]:
        """Mark the suites whose data version is ahead of their snapshot; returns them.

        The marks are the fast path; this scan finds what they cannot (data
        written by a version without marks, a mark lost with a crashed Redis).
        """
        stale = [
            suite
            for suite, (data, snap) in zip(suites, await self.versions(suites), strict=True)
            if data > snap
        ]
        await self.mark_changed(stale)
        return stale

    async def claim_changed(self, count: int, lifetime: float) -> list[str]:
        """Take up to ``count`` change marks for ``lifetime`` seconds (expired claims return)."""
        got = await self.client.eval(
            CLAIM, 2, self.keys.changed, self.keys.claims, int(lifetime * 1000), count
        )
        return sorted(_text(s) for s in got or [])

    async def release_claims(self, suites: Sequence[str]) -> None:
        """The suites' snapshots are written: drop this replica's claims on them."""
        if suites:
            await self.client.zrem(self.keys.claims, *suites)

    async def changed(self) -> list[str]:
        return sorted(_text(s) for s in await self.client.smembers(self.keys.changed))

    # --- liveness ---------------------------------------------------------

    async def heartbeat(self, instance: str, ttl: float, info: Mapping[str, Any]) -> None:
        await self.client.set(
            self.heartbeat_key(instance), msgspec.json.encode(info), px=int(ttl * 1000)
        )

    async def heartbeat_info(self, instance: str) -> dict[str, Any] | None:
        """The instance's last heartbeat document, None when there is none (or unreadable)."""
        raw = await self.client.get(self.heartbeat_key(instance))
        if raw is None:
            return None
        try:
            info = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            return None
        return cast(dict[str, Any], info) if isinstance(info, dict) else None

    async def heartbeat_age(self, instance: str) -> float | None:
        """Seconds since the instance's last heartbeat, None when there is none."""
        info = await self.heartbeat_info(instance)
        if info is None:
            return None
        return max(0.0, time.time() - float(info.get("at", 0.0)))

    async def probe_write(self, instance: str) -> None:
        """One small write with a TTL: raises the Redis error that would stop ingest."""
        await self.client.set(self.keys.probe(instance), "1", px=5000)

    # --- suite lifecycle --------------------------------------------------

    async def forget_task(self, suite: str, task: str) -> bool:
        """Remove one task from the suite's counts, histogram and lottery index, atomically."""
        keys = [self.key(suite, name) for name in _FORGET_KEYS]
        if not int(await self.client.eval(FORGET, len(keys), *keys, task)):
            return False
        await self.client.sadd(self.keys.changed, suite)  # the CI loop recomputes it
        return True

    async def expire_idle(self, suite: str, before: float, limit: int = 500) -> int:
        """Take out (at most ``limit``) tasks without an event since ``before``; how many left.

        Only tasks of suites applied with ``touch`` are in the idle index.
        """
        keys = [self.key(suite, name) for name in _FORGET_KEYS]
        gone = int(await self.client.eval(EXPIRE_IDLE, len(keys), *keys, repr(before), limit))
        if gone:
            await self.client.sadd(self.keys.changed, suite)  # the CI loop recomputes it
        return gone

    async def reset_suite(self, suite: str, batch: int = 1000) -> int:
        """Delete every key of the suite and drop it from the suite list; returns keys deleted.

        The counts go first, in one command, so readers never see half a
        suite; dedup records and alert state follow by SCAN (O(keys in the
        database): an administrative command, not a hot path).
        """
        core = [self.key(suite, name) for name in ("meta", "tasks", "hist", "lottery", "snapshot")]
        deleted = int(await self.client.delete(*core))
        pattern = glob_escape(self.key(suite, "")) + "*"
        pending: list[Any] = []
        async for key in self.client.scan_iter(match=pattern, count=batch):
            pending.append(key)
            if len(pending) >= batch:
                deleted += int(await self.client.unlink(*pending))
                pending = []
        if pending:
            deleted += int(await self.client.unlink(*pending))
        await self.client.srem(self.suites_key, suite)
        await self.client.srem(self.keys.changed, suite)
        return deleted

    # --- imports ----------------------------------------------------------
    # Kept last in the class (and the script below at the end of the module)
    # so this block moves as one piece.

    def imported_key(self, suite: str) -> str:
        return self.keys.imported(suite)

    def imports_key(self, suite: str) -> str:
        return self.keys.imports(suite)

    async def apply_import(
        self,
        suite: str,
        events: Sequence[TrialEvent],
        *,
        window: int,
        dedup_ttl: int,
        now: float | None = None,
    ) -> ImportApplied:
        """Apply imported events, each (task, trial) at most once for good.

        Every chunk of ``CHUNK`` events is one EVAL that first drops the events
        the suite's import ledger already holds and records the rest, then
        counts them exactly as ``apply`` does: the ledger and the counts change
        together or not at all, so a crash between chunks loses nothing and a
        later import (even after the dedup records expired) counts nothing twice.
        """
        ledger = self.imported_key(suite)
        acc = [0, 0, 0, 0, 0]
        already = 0
        await self.client.sadd(self.suites_key, suite)
        # Up to 20 chunks per round trip bounds the client's memory on big files.
        step = 20 * CHUNK
        for group in range(0, len(events), step):
            # Each round trip with its own clock and layout: a long import
            # writes its later chunks where live writers look then.
            stamp = repr(time.time() if now is None else now)
            layout, lookback = await self._dedup_view(dedup_ttl)
            pipe = self.client.pipeline(transaction=False)
            sizes: list[int] = []
            for start in range(group, min(group + step, len(events)), CHUNK):
                chunk = events[start : start + CHUNK]
                keys, args = self._apply_call(
                    suite, chunk, dedup_ttl, window, stamp, layout=layout, lookback=lookback
                )
                pipe.eval(IMPORT_APPLY, len(keys) + 1, *keys, ledger, *args)
                sizes.append(len(chunk))
            # The daemon's CI loop takes this mark and recomputes the suite.
            pipe.sadd(self.keys.changed, suite)
            replies = await pipe.execute()
            for size, reply in zip(sizes, replies[: len(sizes)], strict=True):
                counted, errors, skips, dups, version, _ = (int(x) for x in reply)
                acc[0] += counted
                acc[1] += errors
                acc[2] += skips
                acc[3] += dups
                acc[4] = max(acc[4], version)
                already += size - (counted + errors + skips + dups)
        return ImportApplied(acc[0], acc[1], acc[2], acc[3], acc[4], already)

    async def record_import(self, suite: str, run: str, summary: bytes) -> bytes | None:
        """Note a finished import of ``run``; returns the earlier note if there is one."""
        key = self.imports_key(suite)
        if await self.client.hsetnx(key, run, summary):
            return None
        earlier: Any = await self.client.hget(key, run)
        return None if earlier is None else bytes(earlier)

    async def import_records(self, suite: str) -> dict[str, bytes]:
        """Every finished import of a suite: run id -> the note written then."""
        raw = await self.client.hgetall(self.imports_key(suite))
        return {_text(k): v if isinstance(v, bytes) else v.encode() for k, v in raw.items()}


class ImportApplied(msgspec.Struct, frozen=True):
    """What an import changed; ``already`` events were in the ledger before."""

    counted: int
    errors: int
    skips: int
    duplicates: int
    version: int
    already: int
