"""All Redis I/O: the key schema and the Lua scripts, side by side.

Every key of a suite lives under the Redis Cluster hash tag ``{<suite>}``::

    <p>:{<suite>}:meta        hash  trials errors skips duplicates version last_trial_at
    <p>:{<suite>}:tasks       hash  task -> "n:c" (window 0) or "n:c:<last W outcomes as 0/1>"
    <p>:{<suite>}:hist        hash  "n:c" -> number of tasks in that cell
    <p>:{<suite>}:lottery     zset  "%010d:%010d:<task>" (score 0) for tasks with 0 < c < n
    <p>:{<suite>}:seen:<hex>  string with TTL: one (task, trial) already applied
    <p>:{<suite>}:snapshot    hash  flat numbers for redis-cli, plus `json`
    <p>:{<suite>}:alert:<rule> hash alert rule state (compare-and-set)

Outside any suite's tag, written by separate idempotent commands:
``<p>:suites`` (set of suite names), ``<p>:deadletter`` (capped stream),
``<p>:stats`` (global counters) and ``<p>:heartbeat:<instance>``.

Callers get Structs, ints and Histograms, never raw bytes.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import msgspec
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from reliabilityd.alerts import AlertState
from reliabilityd.events import Rejected, TrialEvent
from reliabilityd.histogram import Histogram
from reliabilityd.lottery import LotteryCase

Redis = aioredis.Redis | RedisCluster

_OUTCOME_CODE = {"pass": "p", "fail": "f", "error": "e", "skip": "s"}
_CELL_PAD = 10
# Events per EVAL: bounds how long one script call holds Redis.
CHUNK = 2000

# Apply one suite's batch atomically. KEYS: meta, tasks, hist, lottery, then
# one dedup key per event. ARGV: dedup ttl, window, now, then (task, outcome
# code) per event. Returns {counted, errors, skips, duplicates, version}.
APPLY = r"""
local meta, tasks, hist, lot = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ttl, window, now = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local counted, errors, skips, dups = 0, 0, 0, 0
-- Histogram moves are summed per cell and written once per cell at the end:
-- a chunk touches few distinct (n, c) cells, so this saves two calls per event.
local moves, cells = {}, {}
local function move(cell, d)
  if moves[cell] == nil then moves[cell] = 0; cells[#cells + 1] = cell end
  moves[cell] = moves[cell] + d
end
local function member(n, c, task)
  return string.format('%010d:%010d:', n, c) .. task
end
local function ones(s)
  local _, k = string.gsub(s, '1', '')
  return k
end
for i = 1, #KEYS - 4 do
  local task, o = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  if not redis.call('SET', KEYS[4 + i], '1', 'NX', 'EX', ttl) then
    dups = dups + 1
  elseif o == 'e' then
    errors = errors + 1
  elseif o == 's' then
    skips = skips + 1
  else
    local n, c, bits = 0, 0, ''
    local cur = redis.call('HGET', tasks, task)
    if cur then
      local sn, sc, sb = string.match(cur, '^(%d+):(%d+):?([01]*)$')
      n, c, bits = tonumber(sn), tonumber(sc), sb
    end
    local hit = (o == 'p') and 1 or 0
    local nn, nc, value
    if window > 0 then
      -- A task counted before the window was set has no order to trim by:
      -- its window starts with this trial.
      if #bits ~= n then bits = '' end
      bits = bits .. ((hit == 1) and '1' or '0')
      if #bits > window then bits = string.sub(bits, #bits - window + 1) end
      nn, nc = #bits, ones(bits)
      value = nn .. ':' .. nc .. ':' .. bits
    else
      nn, nc = n + 1, c + hit
      value = nn .. ':' .. nc
    end
    if n > 0 then
      move(n .. ':' .. c, -1)
      if c > 0 and c < n then redis.call('ZREM', lot, member(n, c, task)) end
    end
    move(nn .. ':' .. nc, 1)
    if nc > 0 and nc < nn then redis.call('ZADD', lot, 0, member(nn, nc, task)) end
    redis.call('HSET', tasks, task, value)
    counted = counted + 1
  end
end
for _, cell in ipairs(cells) do
  local d = moves[cell]
  if d ~= 0 and redis.call('HINCRBY', hist, cell, d) <= 0 then redis.call('HDEL', hist, cell) end
end
local version = tonumber(redis.call('HGET', meta, 'version') or '0')
if counted + errors + skips + dups > 0 then
  if counted > 0 then
    redis.call('HINCRBY', meta, 'trials', counted)
    redis.call('HSET', meta, 'last_trial_at', now)
  end
  if errors > 0 then redis.call('HINCRBY', meta, 'errors', errors) end
  if skips > 0 then redis.call('HINCRBY', meta, 'skips', skips) end
  if dups > 0 then redis.call('HINCRBY', meta, 'duplicates', dups) end
  version = redis.call('HINCRBY', meta, 'version', 1)
end
return {counted, errors, skips, dups, version}
"""

# Read meta and histogram in one atomic step, so the histogram belongs to the version.
READ = r"""
return {redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2])}
"""

# Write a snapshot unless a newer one is there. KEYS: snapshot. ARGV: version,
# number of CI field pairs, CI pairs..., value pairs... The CI part (json, CI
# bounds, version) is written when version >= the stored `version`; the value
# part (point estimates, counters) when version >= `live_version`, so two
# daemons never overwrite new numbers with old ones.
WRITE_SNAPSHOT = r"""
local v = tonumber(ARGV[1])
local nci = tonumber(ARGV[2])
local wrote = 0
if nci > 0 and v >= tonumber(redis.call('HGET', KEYS[1], 'version') or '-1') then
  local args = {}
  for i = 3, 2 + 2 * nci do args[#args + 1] = ARGV[i] end
  redis.call('HSET', KEYS[1], 'version', v, unpack(args))
  wrote = 1
end
if #ARGV > 2 + 2 * nci and v >= tonumber(redis.call('HGET', KEYS[1], 'live_version') or '-1') then
  local args = {}
  for i = 3 + 2 * nci, #ARGV do args[#args + 1] = ARGV[i] end
  redis.call('HSET', KEYS[1], 'live_version', v, unpack(args))
  wrote = wrote + 2
end
return wrote
"""


# Alert transition by compare-and-set. KEYS: the rule's state hash, then one
# outbox list per sink. ARGV: expected seq, new state document, notification
# ("" for none). The state and the notification's place in every sink's
# outbox are written together or not at all, so a crash between deciding
# and sending loses nothing, and two daemons never both decide.
ALERT_CAS = r"""
local seq = tonumber(redis.call('HGET', KEYS[1], 'seq') or '0')
if seq ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'seq', seq + 1, 'doc', ARGV[2])
if ARGV[3] ~= '' then
  for i = 2, #KEYS do redis.call('RPUSH', KEYS[i], ARGV[3]) end
end
return 1
"""

# Drop the head of an outbox only if it is still the entry just delivered.
OUTBOX_POP = r"""
if redis.call('LINDEX', KEYS[1], 0) == ARGV[1] then
  redis.call('LPOP', KEYS[1])
  return 1
end
return 0
"""

# Extend (ARGV[2] > 0) or release (ARGV[2] = 0) a lease we hold.
LEASE = r"""
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if tonumber(ARGV[2]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  redis.call('DEL', KEYS[1])
end
return 1
"""


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


class SuiteState(msgspec.Struct, frozen=True):
    suite: str
    counters: Counters
    hist: Histogram


class Applied(msgspec.Struct, frozen=True):
    """What one suite's batch changed."""

    suite: str
    counted: int
    errors: int
    skips: int
    duplicates: int
    version: int


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _pairs(flat: Sequence[bytes | str]) -> dict[str, str]:
    it = iter(flat)
    return {_text(k): _text(v) for k, v in zip(it, it, strict=True)}


def connect(url: str, *, cluster: bool = False, timeout: float = 10.0) -> Redis:
    """A client for a single node or a cluster, with timeouts on every call."""
    if cluster:
        return RedisCluster.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    return aioredis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)


class Store:
    """reliabilityd's view of Redis."""

    def __init__(self, client: Redis, prefix: str = "rel") -> None:
        self.client = client
        self.prefix = prefix

    # --- keys -------------------------------------------------------------

    def key(self, suite: str, name: str) -> str:
        return f"{self.prefix}:{{{suite}}}:{name}"

    def seen_key(self, suite: str, task: str, trial: str) -> str:
        # A fixed-size digest bounds the dedup record's memory whatever the names.
        digest = hashlib.blake2b(
            task.encode() + b"\x00" + trial.encode(), digest_size=16
        ).hexdigest()
        return self.key(suite, f"seen:{digest}")

    @property
    def suites_key(self) -> str:
        return f"{self.prefix}:suites"

    @property
    def deadletter_key(self) -> str:
        return f"{self.prefix}:deadletter"

    @property
    def stats_key(self) -> str:
        return f"{self.prefix}:stats"

    def heartbeat_key(self, instance: str) -> str:
        return f"{self.prefix}:heartbeat:{instance}"

    # --- ingest -----------------------------------------------------------

    async def apply(
        self,
        batches: Mapping[str, Sequence[TrialEvent]],
        *,
        windows: Mapping[str, int],
        dedup_ttl: int,
        now: float | None = None,
    ) -> list[Applied]:
        """Apply each suite's events (one round trip), atomically per chunk of a suite.

        A suite's events go in chunks of at most ``CHUNK`` per EVAL, so one
        huge batch never blocks Redis for long; each chunk is atomic, and
        re-applying any of them is harmless (dedup).
        """
        if not batches:
            return []
        stamp = repr(time.time() if now is None else now)
        pipe = self.client.pipeline(transaction=False)
        calls: list[str] = []
        for suite, events in batches.items():
            fixed = [
                self.key(suite, "meta"),
                self.key(suite, "tasks"),
                self.key(suite, "hist"),
                self.key(suite, "lottery"),
            ]
            for start in range(0, len(events), CHUNK):
                keys = list(fixed)
                args: list[str | int] = [dedup_ttl, windows.get(suite, 0), stamp]
                for event in events[start : start + CHUNK]:
                    keys.append(self.seen_key(suite, event.task, event.trial))
                    args.append(event.task)
                    args.append(_OUTCOME_CODE[event.outcome])
                # EVAL, not EVALSHA: redis-py refuses pipelined EVALSHA on a
                # cluster, and Redis caches the compiled script by its hash anyway.
                pipe.eval(APPLY, len(keys), *keys, *args)
                calls.append(suite)
        pipe.sadd(self.suites_key, *batches)
        replies = await pipe.execute()
        totals: dict[str, list[int]] = {}
        for suite, reply in zip(calls, replies[: len(calls)], strict=True):
            counted, errors, skips, dups, version = (int(x) for x in reply)
            acc = totals.setdefault(suite, [0, 0, 0, 0, 0])
            acc[0] += counted
            acc[1] += errors
            acc[2] += skips
            acc[3] += dups
            acc[4] = max(acc[4], version)
        return [Applied(suite, *acc) for suite, acc in totals.items()]

    async def deadletter(
        self, rejected: Iterable[tuple[Rejected, str]], *, maxlen: int, keep_bytes: int = 2048
    ) -> int:
        """Append (rejected input, source) pairs to the capped dead-letter stream, one trip."""
        items = list(rejected)
        if not items:
            return 0
        pipe = self.client.pipeline(transaction=False)
        now = repr(time.time())
        for item, source in items:
            pipe.xadd(
                self.deadletter_key,
                {
                    "payload": item.raw[:keep_bytes],
                    "truncated": int(len(item.raw) > keep_bytes),
                    "reason": item.reason,
                    "source": source,
                    "time": now,
                },
                maxlen=maxlen,
                approximate=True,
            )
        pipe.hincrby(self.stats_key, "deadletters", len(items))
        await pipe.execute()
        return len(items)

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

    async def read_state(self, suite: str) -> SuiteState:
        """Counters and histogram of one suite, read atomically."""
        meta_raw, hist_raw = await self.client.eval(
            READ, 2, self.key(suite, "meta"), self.key(suite, "hist")
        )
        meta = _pairs(meta_raw)
        cells: list[tuple[int, int, int]] = []
        for cell, count in _pairs(hist_raw).items():
            n, c = cell.split(":")
            cells.append((int(n), int(c), int(count)))
        last = meta.get("last_trial_at")
        counters = Counters(
            trials=int(meta.get("trials", 0)),
            errors=int(meta.get("errors", 0)),
            skips=int(meta.get("skips", 0)),
            duplicates=int(meta.get("duplicates", 0)),
            version=int(meta.get("version", 0)),
            last_trial_at=float(last) if last else None,
        )
        return SuiteState(suite, counters, Histogram.from_cells(cells))

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

    # --- alerts -----------------------------------------------------------

    def alert_key(self, suite: str, rule: str) -> str:
        return self.key(suite, f"alert:{rule}")

    def outbox_key(self, suite: str, rule: str, sink: str) -> str:
        return self.key(suite, f"alert:{rule}:outbox:{sink}")

    async def alert_states(self, pairs: Sequence[tuple[str, str]]) -> list[AlertState]:
        """The stored state of each (suite, rule); inactive when none is stored."""
        if not pairs:
            return []
        pipe = self.client.pipeline(transaction=False)
        for suite, rule in pairs:
            pipe.hmget(self.alert_key(suite, rule), ["seq", "doc"])
        out = []
        for seq, doc in await pipe.execute():
            if doc is None:
                out.append(AlertState(seq=int(seq or 0)))
            else:
                state = msgspec.json.decode(doc, type=AlertState)
                out.append(msgspec.structs.replace(state, seq=int(seq or 0)))
        return out

    async def alert_cas(
        self,
        suite: str,
        rule: str,
        *,
        expected: AlertState,
        new: AlertState,
        notification: bytes | None,
        sinks: Sequence[str],
    ) -> bool:
        """Store `new` if the stored state is still `expected`; queue the notification."""
        keys = [self.alert_key(suite, rule), *(self.outbox_key(suite, rule, s) for s in sinks)]
        doc = msgspec.json.encode(msgspec.structs.replace(new, seq=expected.seq + 1))
        won = await self.client.eval(
            ALERT_CAS, len(keys), *keys, expected.seq, doc, notification or b""
        )
        return bool(int(won))

    async def outbox_lengths(self, triples: Sequence[tuple[str, str, str]]) -> list[int]:
        if not triples:
            return []
        pipe = self.client.pipeline(transaction=False)
        for suite, rule, sink in triples:
            pipe.llen(self.outbox_key(suite, rule, sink))
        return [int(n) for n in await pipe.execute()]

    async def outbox_head(self, suite: str, rule: str, sink: str) -> bytes | None:
        head: Any = await self.client.lindex(self.outbox_key(suite, rule, sink), 0)
        return None if head is None else bytes(head)

    async def outbox_pop(self, suite: str, rule: str, sink: str, entry: bytes) -> bool:
        key = self.outbox_key(suite, rule, sink)
        return bool(int(await self.client.eval(OUTBOX_POP, 1, key, entry)))

    async def lease(self, key: str, owner: str, ttl: float) -> bool:
        """Take a lease (SET NX PX) for exclusive work such as draining one outbox."""
        return bool(await self.client.set(key, owner, nx=True, px=int(ttl * 1000)))

    async def lease_keep(self, key: str, owner: str, ttl: float) -> bool:
        return bool(int(await self.client.eval(LEASE, 1, key, owner, int(ttl * 1000))))

    async def lease_release(self, key: str, owner: str) -> None:
        await self.client.eval(LEASE, 1, key, owner, 0)

    async def append_alert_history(self, key: str, notification: bytes, maxlen: int) -> None:
        await self.client.xadd(key, {"notification": notification}, maxlen=maxlen, approximate=True)

    async def alert_history(self, key: str, count: int = 1000) -> list[bytes]:
        """The oldest `count` notifications in the alert history stream."""
        entries: Any = await self.client.xrange(key, count=count)
        return [bytes(fields[b"notification"]) for _, fields in entries]

    # --- liveness ---------------------------------------------------------

    async def heartbeat(self, instance: str, ttl: float, info: Mapping[str, Any]) -> None:
        await self.client.set(
            self.heartbeat_key(instance), msgspec.json.encode(info), px=int(ttl * 1000)
        )

    async def heartbeat_age(self, instance: str) -> float | None:
        """Seconds since the instance's last heartbeat, None when there is none."""
        raw = await self.client.get(self.heartbeat_key(instance))
        if raw is None:
            return None
        info = cast(dict[str, Any], msgspec.json.decode(raw))
        return max(0.0, time.time() - float(info.get("at", 0.0)))
