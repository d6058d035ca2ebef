"""Which dedup records the writers keep, and which buckets of the clock a chunk uses.

A trial's dedup record is its 16-byte digest in the set of its bucket of
the clock (``<p>:{<suite>}:dedup:<b>``, b = floor(unix seconds / width)).
One SADD per chunk writes them and one SMISMEMBER per bucket reads them,
where a key per trial cost a SET per event (about half of Redis's CPU per
trial). A set has no per-member TTL, so the bucket carries it: it lives
until the end of its bucket plus the dedup TTL, and a record lives at least
the TTL whatever the writer's clock says (the life is relative). A reader
looks in every bucket that can hold a record written within its TTL, one
bucket more either side: replicas' clocks may differ by up to a bucket.

The width is one number per deployment, fixed by the first writer, so
writers with different dedup TTLs (a rolling change of ``session_expiry``,
an import with its own TTL) number the buckets alike and see each other's
records; a writer whose TTL is many widths long just looks in more buckets.

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
    written before are honoured (read, never written) until ``keys_until``,
    the dedup TTL after the move.

Each writer re-reads the layout every few seconds; a writer that has not yet
seen a move keeps per-trial keys a little longer, which is always safe.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Final, Literal

import msgspec

from reliabilityd.keys import Keys
from reliabilityd.logs import emit

__all__ = ["KEYS_AND_SETS", "SETS", "DedupLayout", "Plan", "load", "move", "plan"]

Layout = Literal["sets", "keys+sets"]
SETS: Final = "sets"
KEYS_AND_SETS: Final = "keys+sets"
# Written into every heartbeat of a version that keeps to the stored layout.
HEARTBEAT_FIELD = "dedup_layouts"
# Seconds a writer trusts the layout it read.
REFRESH = 5.0
# A deployment's bucket width: a quarter of its first writer's dedup TTL, so a
# record outlives its TTL by an eighth on average (the bucket's rest), within
# these bounds.
MIN_WIDTH = 1
MAX_WIDTH = 3600


class DedupLayout(msgspec.Struct, frozen=True):
    """What the writers of one prefix keep (see the module docstring)."""

    layout: Layout
    width: int
    # The sets layout: per-trial records are honoured until then (Unix seconds).
    keys_until: float = 0.0
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


def plan(width: int, ttl: int, now: float) -> Plan:
    """Buckets for a chunk applied at ``now`` (the writer's clock) with dedup TTL ``ttl``.

    The written bucket lives until its end plus the TTL, so each of its
    records lives at least the TTL from when it was written, by Redis's
    clock. A record written within the TTL is in a bucket from the one of
    ``now - ttl`` on; one bucket more either side covers clocks up to a
    bucket apart.
    """
    current = math.floor(now / width)
    life = math.ceil((current + 1) * width - now) + ttl
    return Plan(math.floor((now - ttl) / width) - 1, current + 1, current, life)


_decoder = msgspec.json.Decoder(DedupLayout)


async def load(client: Any, keys: Keys, ttl: int) -> DedupLayout:
    """The stored layout; stored first when there is none.

    With no layout stored, a deployment that has recorded no suite and has no
    earlier version's heartbeat starts in ``sets``; any other (an earlier
    version wrote to it or runs on it) in ``keys+sets``.
    """
    raw = await client.get(keys.dedup_layout)
    if raw is None:
        fresh = int(await client.scard(keys.suites)) == 0 and not await earlier_writers(
            client, keys
        )
        first = DedupLayout(SETS if fresh else KEYS_AND_SETS, width_for(ttl), since=time.time())
        await client.set(keys.dedup_layout, msgspec.json.encode(first), nx=True)
        raw = await client.get(keys.dedup_layout)
    try:
        return _decoder.decode(raw)
    except msgspec.DecodeError as exc:
        # Per-trial keys dedup whatever the buckets' width: the safe reading.
        emit(
            logging.WARNING,
            "dedup_layout_unreadable",
            key=keys.dedup_layout,
            error=str(exc),
            fix="reliabilityd dedup-layout --keys-and-sets",
        )
        return DedupLayout(KEYS_AND_SETS, width_for(ttl))


async def earlier_writers(client: Any, keys: Keys) -> list[str]:
    """Instances with a live heartbeat that does not name the layouts (an earlier version)."""
    out = []
    prefix = keys.heartbeat("")
    pattern = "".join("\\" + ch if ch in "*?[]\\" else ch for ch in prefix) + "*"
    async for key in client.scan_iter(match=pattern, count=1000):
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
    a live heartbeat: it would count again what the sets alone record.
    Per-trial keys are honoured for ``ttl`` after the move.
    """
    current = await load(client, keys, ttl)
    now = time.time()
    if to == SETS:
        blockers = await earlier_writers(client, keys)
        if blockers:
            return current, blockers
        until = now + ttl if current.layout == KEYS_AND_SETS else current.keys_until
        moved = DedupLayout(SETS, current.width, keys_until=until, since=now)
    else:
        moved = DedupLayout(KEYS_AND_SETS, current.width, since=now)
    if current.layout != moved.layout:
        await client.set(keys.dedup_layout, msgspec.json.encode(moved))
        return moved, []
    return current, []
