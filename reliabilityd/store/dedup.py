"""Dedup records in buckets of the clock: which buckets a chunk looks in and writes.

A trial's dedup record is its 16-byte digest in the set of its bucket of
the clock (``<p>:{<suite>}:dedup:<width>:<b>``, b = floor(unix seconds /
width)). One SADD per chunk writes them and one SMISMEMBER per bucket reads
them. A set has no per-member TTL, so the bucket carries it: it lives
until the end of its bucket plus the writer's dedup TTL, and only ever
longer, so a record lives at least that TTL whatever the writer's clock
says (the life is relative).

A reader looks in every bucket that can hold a live record: back as far as
the longest TTL any writer of the deployment uses now (each writer enters
its TTL in ``<p>:dedup-ttls`` whenever it re-reads the width, and an entry
leaves once records written with it can be gone), one bucket more either
side, as clocks may differ by up to a bucket.

The width is one number per deployment, fixed by the first writer in
``<p>:dedup-width`` and named in every bucket key, so writers with different
dedup TTLs (a rolling change of ``session_expiry``, an import with its own
TTL) number the buckets alike, and a lost width is stored again as the one
its buckets carry. A width that cannot be read is never guessed: a writer
keeps the one it last read, and one that has none raises (a Redis error:
ingest pauses with the reason).

Changing a dedup TTL is safe either way. Raise it freely: a longer TTL only
makes buckets live longer, and the registry makes every reader look back as
far as the longest TTL in use. Lower it likewise: readers go on looking back
as far as the old, longer TTL until its registry entry leaves, which is once
records written with it can be gone.
"""

from __future__ import annotations

import math
import re
from typing import Any

import msgspec

from reliabilityd.store.keys import Keys, glob_escape

__all__ = ["Plan", "load_width", "plan", "register_ttl"]

# Seconds a writer trusts the width and lookback it read.
REFRESH = 5.0
# A deployment's bucket width: a quarter of its first writer's dedup TTL, so a
# record outlives its TTL by an eighth on average (the bucket's rest) and a
# writer with that TTL looks in seven bucket keys per call, within these bounds.
MIN_WIDTH = 1
MAX_WIDTH = 7 * 86400
# A writer whose lookback spans more bucket keys than this is told once: each
# call pays for every key (see Store._dedup_view).
MANY_BUCKETS = 16
# The longest dedup TTL a writer may enter (ten years).
MAX_TTL = 10 * 365 * 86400


class Plan(msgspec.Struct, frozen=True):
    """The buckets one chunk looks in (oldest first) and the one it writes."""

    first: int
    last: int
    write: int
    # Seconds the written bucket must live from now.
    life: int

    @property
    def buckets(self) -> range:
        return range(self.first, self.last + 1)


def width_for(ttl: int) -> int:
    return max(MIN_WIDTH, min(MAX_WIDTH, ttl // 4))


def plan(width: int, ttl: int, now: float, *, lookback: int = 0) -> Plan:
    """Buckets for a chunk applied at ``now`` (the writer's clock) with dedup TTL ``ttl``.

    The written bucket lives until its end plus the TTL (and a second), so
    each of its records lives at least the TTL from when it was written, by
    Redis's clock. A record written within ``max(ttl, lookback)`` seconds is in a
    bucket from the one of ``now - max(ttl, lookback)`` on; one bucket more
    either side covers clocks up to a bucket apart.
    """
    current = math.floor(now / width)
    # One second to spare: APPLY extends a bucket only when it would live
    # less than this minus that second, which is still the TTL and more.
    life = math.ceil((current + 1) * width - now) + ttl + 1
    back = max(ttl, lookback)
    return Plan(math.floor((now - back) / width) - 1, current + 1, current, life)


_BUCKET_WIDTH = re.compile(rb":dedup:(\d+):-?\d+$")


def _decode(keys: Keys, raw: bytes) -> int:
    width = int(raw) if raw.isdigit() else 0
    if not MIN_WIDTH <= width <= MAX_WIDTH:
        raise ValueError(
            f"{keys.dedup_width} holds {raw[:40]!r}, no bucket width from {MIN_WIDTH} to "
            f"{MAX_WIDTH} s; deleting it lets the next writer store the one its buckets carry"
        )
    return width


async def load_width(client: Any, keys: Keys, ttl: int) -> int:
    """The deployment's bucket width; stored first when there is none.

    With none stored, the width the bucket keys carry if there are any (a
    lost width), else a quarter of ``ttl``. ValueError when unreadable.
    """
    raw = await client.get(keys.dedup_width)
    if raw is None:
        first = await _bucket_width(client, keys) or width_for(ttl)
        await client.set(keys.dedup_width, first, nx=True)
        raw = await client.get(keys.dedup_width)
    return _decode(keys, raw if isinstance(raw, bytes) else str(raw).encode())


# Enter a writer's dedup TTL: KEYS[1] zset ttl -> Unix time its records may
# live until. ARGV[1]: ttl. Entries past their time leave. Returns the
# longest TTL left.
_REGISTER = r"""
local now = tonumber(redis.call('TIME')[1])
redis.call('ZADD', KEYS[1], 'GT', now + tonumber(ARGV[1]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. now)
local longest = 0
for _, t in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local v = tonumber(t)
  if v and v > longest then longest = v end
end
return longest
"""


async def register_ttl(client: Any, keys: Keys, ttl: int) -> int:
    """Enter this writer's TTL; the longest TTL any writer uses now (its lookback)."""
    longest = await client.eval(_REGISTER, 1, keys.dedup_ttls, min(ttl, MAX_TTL))
    try:
        return min(int(longest), MAX_TTL)
    except (TypeError, ValueError):
        return ttl


async def _bucket_width(client: Any, keys: Keys) -> int | None:
    """The width named by an existing bucket key, None when there is none."""
    pattern = glob_escape(keys.prefix) + ":{*}:dedup:*"
    async for key in client.scan_iter(match=pattern, count=1000):
        found = _BUCKET_WIDTH.search(key if isinstance(key, bytes) else str(key).encode())
        if found and MIN_WIDTH <= int(found[1]) <= MAX_WIDTH:
            return int(found[1])
    return None
