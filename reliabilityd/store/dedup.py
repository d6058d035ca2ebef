"""Which dedup records the writers keep, and which buckets of the clock a chunk uses.

A trial's dedup record is its 16-byte digest in the set of its bucket of
the clock (``<p>:{<suite>}:dedup:<width>:<b>``, b = floor(unix seconds /
width)). One SADD per chunk writes them and one SMISMEMBER per bucket reads
them, where a key per trial cost a SET per event (about half of Redis's CPU
per trial). A set has no per-member TTL, so the bucket carries it: it lives
until the end of its bucket plus the writer's dedup TTL, and only ever
longer, so a record lives at least that TTL whatever the writer's clock
says (the life is relative).

A reader looks in every bucket that can hold a live record: back as far as
the longest TTL any writer of the deployment uses now (each writer enters
its TTL in ``<p>:dedup-ttls`` whenever it reads the layout, and an entry
leaves once records written with it can be gone), one bucket more either
side, as clocks may differ by up to a bucket.

The width is one number per deployment, fixed by the first writer and named
in every bucket key, so writers with different dedup TTLs (a rolling change
of ``session_expiry``, an import with its own TTL) number the buckets alike,
and a lost layout is stored again with the width its buckets carry.

Versions before the buckets kept one key per trial (``seen:<hex>``) and
know nothing of the sets. The layout, stored in ``<p>:dedup-layout``, says
what every writer keeps:

``keys+sets``
    Per-trial keys too, written and honoured. An existing deployment starts
    here when it first runs this version, so replicas of the earlier
    version running beside it (a rolling upgrade) count nothing twice.
``sets``
    Sets only. A new deployment starts here; an existing one moves here with
    ``reliabilityd dedup-layout --sets`` once no earlier version runs (it
    refuses while a live heartbeat lacks ``dedup_layouts``). Per-trial keys
    written before are honoured (read, never written) until ``keys_until``:
    the longest life any of them has left at the move, plus a bucket.

Each writer re-reads the layout every few seconds; a writer that has not yet
seen a move to ``sets`` keeps per-trial keys a little longer, which is always
safe. A layout that cannot be read is never guessed at: a writer keeps the
one it last read, and one that has none pauses ingest with the reason
(``DedupLayoutError``) until ``reliabilityd dedup-layout --keys-and-sets``
stores a good one.
"""

from __future__ import annotations

import math
import re
import time
from typing import Annotated, Any, Final, Literal

import msgspec
from redis.exceptions import RedisError

from reliabilityd.store.keys import Keys, glob_escape

__all__ = [
    "KEYS_AND_SETS",
    "SETS",
    "DedupLayout",
    "DedupLayoutError",
    "Plan",
    "load",
    "move",
    "plan",
    "register_ttl",
]

Layout = Literal["sets", "keys+sets"]
SETS: Final = "sets"
KEYS_AND_SETS: Final = "keys+sets"
# Written into every heartbeat of a version that keeps to the stored layout.
HEARTBEAT_FIELD = "dedup_layouts"
# Seconds a writer trusts the layout it read.
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


class DedupLayoutError(RedisError):
    """The stored layout cannot be read: writing now could count a trial twice."""


class DedupLayout(msgspec.Struct, frozen=True):
    """What the writers of one prefix keep (see the module docstring)."""

    layout: Layout
    width: Annotated[int, msgspec.Meta(ge=MIN_WIDTH, le=MAX_WIDTH)]
    # The sets layout: per-trial records are honoured until then (Unix seconds).
    keys_until: Annotated[float, msgspec.Meta(ge=0, le=1e11)] = 0.0
    since: float = 0.0

    def code(self, now: float) -> str:
        """APPLY's layout argument: ``k`` keys and sets, ``x`` sets honouring keys, ``s`` sets."""
        if self.layout == KEYS_AND_SETS:
            return "k"
        return "x" if now < self.keys_until else "s"


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


_decoder = msgspec.json.Decoder(DedupLayout)
_BUCKET_WIDTH = re.compile(rb":dedup:(\d+):-?\d+$")


def _decode(keys: Keys, raw: bytes) -> DedupLayout:
    try:
        return _decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise DedupLayoutError(
            f"{keys.dedup_layout} holds no dedup layout this version can read ({exc}); "
            "`reliabilityd dedup-layout --keys-and-sets` stores a good one"
        ) from exc


async def stored(client: Any, keys: Keys) -> DedupLayout | None:
    """The stored layout, None when there is none; DedupLayoutError when unreadable."""
    raw = await client.get(keys.dedup_layout)
    return None if raw is None else _decode(keys, raw)


async def load(client: Any, keys: Keys, ttl: int) -> DedupLayout:
    """The stored layout; stored first when there is none.

    With no layout stored, a deployment that has recorded no suite and has no
    earlier version's heartbeat starts in ``sets``; any other (an earlier
    version wrote to it or runs on it) in ``keys+sets``, with the width its
    buckets carry if it has any (a lost layout).
    """
    raw = await client.get(keys.dedup_layout)
    if raw is None:
        fresh = int(await client.scard(keys.suites)) == 0 and not await earlier_writers(
            client, keys
        )
        first = DedupLayout(
            SETS if fresh else KEYS_AND_SETS,
            await _bucket_width(client, keys) or width_for(ttl),
            since=time.time(),
        )
        await client.set(keys.dedup_layout, msgspec.json.encode(first), nx=True)
        raw = await client.get(keys.dedup_layout)
    return _decode(keys, raw)


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


async def _longest_key_life(client: Any, keys: Keys) -> float:
    """Seconds the longest-lived per-trial key has left (0 when there is none)."""
    pattern = glob_escape(keys.prefix) + ":{*}:seen:*"
    longest = 0
    page: list[Any] = []

    async def flush() -> None:
        nonlocal longest
        pipe = client.pipeline(transaction=False)
        for key in page:
            pipe.pttl(key)
        for left in await pipe.execute():
            if isinstance(left, int) and left > longest:
                longest = left
        page.clear()

    async for key in client.scan_iter(match=pattern, count=1000):
        page.append(key)
        if len(page) >= 1000:
            await flush()
    if page:
        await flush()
    return longest / 1000


async def earlier_writers(client: Any, keys: Keys) -> list[str]:
    """Instances with a live heartbeat that does not name the layouts (an earlier version)."""
    out = []
    prefix = keys.heartbeat("")
    async for key in client.scan_iter(match=glob_escape(prefix) + "*", count=1000):
        name = key.decode() if isinstance(key, bytes) else str(key)
        raw = await client.get(name)
        if raw is None:
            continue
        try:
            info = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            info = None
        if not (isinstance(info, dict) and info.get(HEARTBEAT_FIELD)):
            out.append(name[len(prefix) :])
    return sorted(out)


async def move(client: Any, keys: Keys, to: Layout, ttl: int) -> tuple[DedupLayout, list[str]]:
    """Store layout ``to``: (the layout stored now, the earlier-version instances that stop it).

    A move to ``sets`` is refused while an instance of an earlier version has
    a live heartbeat (it would count again what the sets alone record), and
    over a stored layout that cannot be read (DedupLayoutError: move to
    ``keys+sets`` first). A move to ``keys+sets`` is also the repair of an
    unreadable layout: it keeps the width the buckets carry.
    """
    now = time.time()
    try:
        current = await stored(client, keys)
    except DedupLayoutError:
        if to == SETS:
            raise
        current = None
    if to == SETS:
        current = current or await load(client, keys, ttl)
        blockers = await earlier_writers(client, keys)
        if blockers:
            return current, blockers
        if current.layout == SETS:
            return current, []
        # Per-trial keys now alive are honoured while any may live, plus a
        # bucket for clocks that run behind this one.
        left = await _longest_key_life(client, keys)
        lookback = await register_ttl(client, keys, ttl)
        until = now + max(left, lookback) + current.width
        moved = DedupLayout(SETS, current.width, keys_until=until, since=now)
    else:
        if current is not None and current.layout == KEYS_AND_SETS:
            return current, []
        width = current.width if current else await _bucket_width(client, keys) or width_for(ttl)
        moved = DedupLayout(KEYS_AND_SETS, width, since=now)
    await client.set(keys.dedup_layout, msgspec.json.encode(moved))
    return moved, []
